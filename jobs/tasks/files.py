"""Ciphertext rows written as Parquet by the Python workers themselves (local and local-cluster masters
with a local output: the workers see the directory).

The ciphertext bytes then never pass through the JVM, which otherwise spends most of a core moving them
(Arrow, row conversion, its Parquet writer).  Only ``(file, rows, bytes)`` (WRITTEN) goes back to
Spark; the driver keeps exactly the files that successful tasks reported (:mod:`jobs.workerfiles`).
"""
from __future__ import annotations

import os
from typing import Callable, Iterator

import pyarrow as pa

from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS

#: The Parquet settings of ciphertext files the workers write: the bytes are random, so no compression,
#: dictionary or statistics; large pages.
WRITER_OPTIONS = dict(compression="none", use_dictionary=False, write_statistics=False, data_page_size=8 * 2**20)


def rows_to_file(rows: Iterator[pa.RecordBatch], *, directory: str) -> Iterator[pa.RecordBatch]:
    """Write the CIPHERTEXTS batches ``rows`` of one task as one Parquet file in ``directory``: one WRITTEN
    row naming it (or a null file when there were no rows).

    The file is written under a temporary name and renamed when complete; its name carries the task's
    partition and attempt, so a retried or speculative attempt never overwrites another's file."""
    import uuid

    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tc = TaskContext.get()
    name = f"part-{tc.partitionId():05d}-{tc.attemptNumber()}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = os.path.join(directory, f".{name}.tmp")
    count, writer = 0, None
    try:
        for rb in rows:
            if writer is None:
                writer = pq.ParquetWriter(tmp, CIPHERTEXTS, **WRITER_OPTIONS)
            writer.write_batch(rb if rb.schema == CIPHERTEXTS else rb.cast(CIPHERTEXTS))   # Spark's: nullable
            count += rb.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        yield pa.RecordBatch.from_pylist([{"file": None, "rows": 0, "bytes": 0}], schema=WRITTEN)
        return
    os.replace(tmp, os.path.join(directory, name))
    yield pa.RecordBatch.from_pylist(
        [{"file": name, "rows": count, "bytes": os.path.getsize(os.path.join(directory, name))}], schema=WRITTEN)


def work_to_file(batches: Iterator[pa.RecordBatch], *, work: Callable, directory: str) -> Iterator[pa.RecordBatch]:
    """Run the partition function ``work`` (rows in, CIPHERTEXTS rows out) and write what it gives with
    :func:`rows_to_file`."""
    yield from rows_to_file(work(batches), directory=directory)
