"""Rows sent from the tasks that read them to the tasks that combine them, through files the Python
workers write and read themselves: a shuffle that keeps ciphertexts out of the JVM.

A job whose work needs all the rows of one key together -- the partial distances of one image
(``match:QUERY``), the ciphertexts of one batch of digits (``infer:MODEL``) -- cannot do it in the task
that reads a split: an image's rows lie in many files.  The reading tasks send each row to a *bucket*,
:func:`bucket_of` its key, and write the rows of all their buckets into one file of this run's staging
area, one row group per bucket (:func:`write_buckets`); only a small report of each file goes back to
Spark (:data:`EXCHANGED`).  The driver then gives each combining task its bucket's row groups
(:func:`bucket_parts`), which it reads with pyarrow (:func:`read_bucket`), only from files of the size the
reading task reported.  Spark sees file names and counts, never a ciphertext byte.
"""
from __future__ import annotations

import uuid
import zlib
from typing import Callable, Iterator

import pyarrow as pa

from .filesystem import FileAccess

#: What a reading task reports of the file it wrote: its name and size, and which bucket each of its row
#: groups holds (with its rows), in row-group order.
EXCHANGED = pa.schema([("file", pa.string()), ("bytes", pa.int64()), ("buckets", pa.list_(pa.int32())),
                       ("bucket_rows", pa.list_(pa.int64()))])

#: Parquet settings of the exchanged files: ciphertexts are random bytes, nothing to compress.
OPTIONS = dict(compression="none", use_dictionary=False, write_statistics=False, data_page_size=8 * 2**20)


def bucket_of(key: str, buckets: int) -> int:
    """The bucket of ``key`` among ``buckets``: the same in every worker (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % max(1, buckets)


def write_buckets(table: pa.Table, buckets: list[int], *, directory: str, attempt: Callable[[], tuple[int, int]],
                  access: FileAccess = FileAccess()) -> dict | None:
    """Write the rows of ``table`` (``buckets[i]``: row i's bucket) as one Parquet file in ``directory``, one
    row group per bucket in increasing order: the :data:`EXCHANGED` report of the file, or None without rows.

    Written under a hidden temporary name and renamed when complete; the name carries the task's partition
    and attempt (``attempt()``), so a retried attempt never overwrites another's file."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if table.num_rows == 0:
        return None
    keys = pa.array(buckets, type=pa.int32())
    order = pc.sort_indices(keys)
    table, keys = table.take(order), keys.take(order)
    values, counts = (c.to_pylist() for c in pc.value_counts(keys).flatten())
    partition, number = attempt()
    name = f"part-{partition:05d}-{number}-{uuid.uuid4().hex[:8]}.parquet"
    fs, base = access.open(directory)
    tmp = f"{base}/.{name}.tmp"
    start = 0
    with fs.open_output_stream(tmp) as sink, pq.ParquetWriter(sink, table.schema, **OPTIONS) as writer:
        for n in counts:
            writer.write_table(table.slice(start, n), row_group_size=n)
            start += n
    fs.move(tmp, f"{base}/{name}")
    return {"file": name, "bytes": fs.get_file_info(f"{base}/{name}").size, "buckets": values,
            "bucket_rows": [int(n) for n in counts]}


def bucket_parts(reports: list[dict]) -> dict[int, list[tuple[str, int, int, int]]]:
    """For each bucket, where its rows are: ``(file, file bytes, row group, rows)`` of every reported file
    holding some (:data:`EXCHANGED` reports)."""
    parts: dict[int, list] = {}
    for r in reports:
        for group, (bucket, rows) in enumerate(zip(r["buckets"], r["bucket_rows"])):
            parts.setdefault(int(bucket), []).append((r["file"], int(r["bytes"]), group, int(rows)))
    return parts


def read_bucket(parts: list[tuple[str, int, int, int]], *, directory: str, schema: pa.Schema,
                access: FileAccess = FileAccess()) -> Iterator[pa.Table]:
    """The rows of one bucket: the row group of each of ``parts`` (:func:`bucket_parts`) in ``schema``, read
    from ``directory`` only while its file has the size its writer reported and the group the rows."""
    import pyarrow.parquet as pq

    fs, base = access.open(directory)
    for name, size, group, rows in parts:
        with fs.open_input_file(f"{base}/{name}") as f:
            if f.size() != size:
                raise OSError(f"{name} is {f.size()} bytes, not the {size} its writer reported")
            data = pq.ParquetFile(f).read_row_group(group, columns=schema.names, use_threads=False)
        if data.num_rows != rows:
            raise OSError(f"{name}: row group {group} holds {data.num_rows} rows, not {rows}")
        yield data.select(schema.names).cast(schema)
