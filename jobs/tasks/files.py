"""Ciphertext rows written as Parquet by the Python workers themselves, where they see the output directory:
local and local-cluster masters with a local output, or ``--writer workers`` on a cluster whose workers and
driver share the output's mount.

The ciphertext bytes then never pass through the JVM, which otherwise spends most of a core moving them
(Arrow, row conversion, its Parquet writer).  Only a WRITTEN row per task goes back to Spark -- the file's
name, rows and size, the XOR of its rows' checksums and the sum of their ciphertext lengths --; the driver
checks each report against the file it sees and keeps exactly the files successful tasks reported
(:mod:`jobs.workerfiles`).
"""
from __future__ import annotations

import os
import re
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

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
        from jobs.checksums import xor_all

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
