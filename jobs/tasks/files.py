"""Ciphertext rows written as Parquet by the Python workers themselves, where they see the output directory:
local and local-cluster masters with a local output, or ``--writer workers`` on a cluster whose workers and
driver share the output's mount.

The ciphertext bytes then never pass through the JVM, which otherwise spends most of a core moving them
(Arrow, row conversion, its Parquet writer).  Only a WRITTEN row per task goes back to Spark -- the file's
name, rows and size, the XOR of its rows' checksums and the sum of their ciphertext lengths --; the driver
checks each report against the file it sees and keeps exactly the files successful tasks reported.

Both sides are here: the workers' (:func:`rows_to_file`, :func:`work_to_file`) and the driver's -- where
the workers may write (:func:`worker_local_path`), which files to keep (:func:`keep_reported`), leaving
images out of what they wrote (:func:`drop_images`).
"""
from __future__ import annotations

import os
import re
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hecore.errors import HepixError
from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS

#: The names :func:`rows_to_file` gives its files (a name a worker reports is checked against it).
WRITTEN_NAME = re.compile(r"part-[0-9]{5,}-[0-9]+-[0-9a-f]{8}\.parquet")
#: Ciphertext bytes buffered before a Parquet row group is written (a write per record batch cost more).
ROW_GROUP_BYTES = 64 * 2**20
#: The Parquet settings of ciphertext files the workers write: the bytes are random, so no compression,
#: dictionary or statistics; large pages.
WRITER_OPTIONS = dict(compression="none", use_dictionary=False, write_statistics=False, data_page_size=8 * 2**20)


class RowGroupWriter:
    """A Parquet file of ciphertext rows written in row groups of about :data:`ROW_GROUP_BYTES`, counting
    its rows, its ciphertext bytes and the XOR of their checksums as it goes (what the driver records)."""

    def __init__(self, path: str):
        self.path, self.rows, self.ct_bytes, self.xxh3_xor = path, 0, 0, 0
        self._writer, self._pending, self._pending_bytes = None, [], 0

    def add(self, rb: pa.RecordBatch) -> None:
        from jobs.tasks.checksums import xor_all

        if rb.schema != CIPHERTEXTS:            # Spark's batches: the same columns, all nullable
            rb = rb.cast(CIPHERTEXTS)
        self.rows += rb.num_rows
        self.ct_bytes += int(pc.sum(pc.binary_length(rb.column("ct"))).as_py() or 0)
        self.xxh3_xor ^= xor_all(rb.column("ct_xxh3").fill_null(0).to_numpy())
        self._pending.append(rb)
        self._pending_bytes += rb.nbytes
        if self._pending_bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one row group."""
        import pyarrow.parquet as pq

        if not self._pending:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, CIPHERTEXTS, **WRITER_OPTIONS)
        table = pa.Table.from_batches(self._pending, schema=CIPHERTEXTS)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._pending, self._pending_bytes = [], 0

    def close(self) -> None:
        """Close the file (what is still buffered after a failure is dropped: the driver removes the file)."""
        if self._writer is not None:
            self._writer.close()


def rows_to_file(rows: Iterator[pa.RecordBatch], *, directory: str) -> Iterator[pa.RecordBatch]:
    """Write the CIPHERTEXTS batches ``rows`` of one task as one Parquet file in ``directory``: one WRITTEN
    row describing it (or a null file when there were no rows).

    The file is written under a temporary name and renamed when complete; its name carries the task's
    partition and attempt, so a retried or speculative attempt never overwrites another's file."""
    import uuid

    from pyspark import TaskContext

    tc = TaskContext.get()
    name = f"part-{tc.partitionId():05d}-{tc.attemptNumber()}-{uuid.uuid4().hex[:8]}.parquet"
    out = RowGroupWriter(os.path.join(directory, f".{name}.tmp"))
    try:
        for rb in rows:
            out.add(rb)
        out.flush()
    finally:
        out.close()
    if not out.rows:
        yield pa.RecordBatch.from_pylist([{"file": None, "rows": 0, "bytes": 0, "xxh3_xor": 0, "ct_bytes": 0}],
                                         schema=WRITTEN)
        return
    os.replace(out.path, os.path.join(directory, name))
    yield pa.RecordBatch.from_pylist(
        [{"file": name, "rows": out.rows, "bytes": os.path.getsize(os.path.join(directory, name)),
          "xxh3_xor": out.xxh3_xor, "ct_bytes": out.ct_bytes}], schema=WRITTEN)


def work_to_file(batches: Iterator[pa.RecordBatch], *, work: Callable, directory: str) -> Iterator[pa.RecordBatch]:
    """Run the partition function ``work`` (rows in, CIPHERTEXTS rows out) and write what it gives with
    :func:`rows_to_file`."""
    yield from rows_to_file(work(batches), directory=directory)


# --- the driver's side ------------------------------------------------------------------------------

#: What ``--writer workers`` asks of a cluster (the driver checks it after every write).
SHARED_OUT = "--writer workers needs an --out that the driver and every worker see at the same path"


def worker_local_path(master: str, path: str, shared: bool = False) -> str | None:
    """``path`` as a local directory the Python workers can write, or None.

    For local and local-cluster masters (the workers run on this machine), or any master when the
    user says (``shared``: ``--writer workers``) that the path is a mount every worker and the driver
    share; and only for paths without a scheme other than ``file:``.
    """
    if not (master.startswith("local") or shared):
        return None
    if "://" in path and not path.startswith("file://"):
        return None
    return os.path.abspath(path.removeprefix("file://").removeprefix("file:"))


def checked_reports(reports: list[dict], directory: str) -> list[dict]:
    """The files the tasks reported (WRITTEN rows with a file), each checked before it names a path: a name
    the tasks give (:data:`WRITTEN_NAME`), reported once, present in ``directory`` with the
    reported size.

    A worker that wrote elsewhere (an --out that is not one shared mount) or a report that does not match
    its file fails the job with :data:`SHARED_OUT`, naming the directory; nothing is committed.
    """
    entries = {}
    for r in reports:
        name = r["file"]
        if not isinstance(name, str) or not WRITTEN_NAME.fullmatch(name) or name in entries:
            raise HepixError(f"a task reported the file {name!r}, which is not a name it writes; nothing was "
                             "committed")
        path = os.path.join(directory, name)
        size = os.path.getsize(path) if os.path.isfile(path) else None
        if size is None or size != r["bytes"]:
            seen = "does not see it" if size is None else f"sees {size} bytes, not {r['bytes']}"
            raise HepixError(f"{SHARED_OUT}: a worker wrote {name} ({r['bytes']} bytes) into {directory}, but "
                             f"the driver {seen}; give such an --out, or --writer spark (or auto)")
        entries[name] = {"name": name, "rows": int(r["rows"]), "bytes": size, "xxh3_xor": int(r["xxh3_xor"]),
                         "ct_bytes": int(r["ct_bytes"])}
    return [entries[n] for n in sorted(entries)]


def keep_reported(directory: str, written) -> list[dict]:
    """The files the successful tasks reported in ``written`` (WRITTEN rows), checked
    (:func:`checked_reports`); every other file of ``directory`` -- of failed or speculative attempts,
    temporary files -- removed."""
    entries = checked_reports([r.asDict() if hasattr(r, "asDict") else dict(r) for r in written
                               if r["file"] is not None], directory)
    keep = {e["name"] for e in entries}
    for name in os.listdir(directory):
        if name not in keep:
            os.remove(os.path.join(directory, name))
    return entries


def drop_images(directory: str, names: list[str], image_ids: set[str]) -> None:
    """Rewrite the Parquet files ``names`` of ``directory`` without the rows of ``image_ids`` (images judged
    bad after their rows were written); a file left empty is removed.  Rare: only a run with rejects."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    drop = sorted(image_ids)
    for name in names:
        path = os.path.join(directory, name)
        table = pq.read_table(path)
        keep = pc.invert(pc.is_in(table.column("image_id"), value_set=_strings(drop)).fill_null(False))
        if pc.all(keep).as_py():
            continue
        kept = table.filter(keep)
        if kept.num_rows == 0:
            os.remove(path)
            continue
        tmp = os.path.join(directory, f".{name}.tmp")
        pq.write_table(kept, tmp, **WRITER_OPTIONS)
        os.replace(tmp, path)


def keep_schema(directory: str) -> None:
    """Leave a file of no rows in ``directory`` when it has none (every row was bad): the table then still
    reads as an empty table of its schema, as one Spark writes from no rows does."""
    import pyarrow.parquet as pq

    if not any(name.endswith(".parquet") for name in os.listdir(directory)):
        pq.write_table(CIPHERTEXTS.empty_table(), os.path.join(directory, "part-00000-empty.parquet"))


def _strings(values: list[str]):
    import pyarrow as pa

    return pa.array(values, type=pa.string())
