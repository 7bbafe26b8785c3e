"""A job's input read by the Python workers themselves: each task opens its split -- one row group of one
file the input's manifest lists -- with pyarrow, so no ciphertext byte passes through the JVM.

The driver checked every file's footer before it planned the splits (schemas.footers); a split carries
the file's size and the SHA-256 of the footer it checked.  The worker reads the file only if it still
has that size and that footer, and it reads the rows through the metadata parsed from the bytes it
compared -- not from whatever the file says by then -- so the checked sizes bound every allocation.  A
file that changed, vanished or cannot be read is a problem of its split (a rejects row naming the file,
:func:`read_splits`' ``problems``), never a failed task.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from schemas.footers import MAGIC, footer_bytes

from .filesystem import FileAccess

#: Rows per Arrow batch a split is read in (the size of Spark's own Arrow batches in hepix's sessions).
BATCH_ROWS = 64


@dataclass(frozen=True)
class Split:
    """One row group of one listed file, as the driver checked the file."""

    path: str
    size: int
    footer_sha256: str
    row_group: int


def footer_digest(footer: bytes) -> str:
    return hashlib.sha256(footer).hexdigest()


def footer_metadata(footer: bytes):
    """The Parquet metadata of a footer's bytes (as :func:`schemas.footers.footer_bytes` returns them)."""
    import pyarrow.parquet as pq

    return pq.read_metadata(pa.BufferReader(MAGIC + footer + struct.pack("<I", len(footer)) + MAGIC))


def splits_of(path: str, size: int, footer: bytes) -> list[Split]:
    """The splits of a checked file: one per row group (none for a file of no row groups)."""
    digest = footer_digest(footer)
    return [Split(path, size, digest, i) for i in range(footer_metadata(footer).num_row_groups)]


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:160]


def read_split(split: Split, *, access: FileAccess, schema: pa.Schema, problems: list) -> Iterator[pa.RecordBatch]:
    """The rows of ``split`` in ``schema``'s columns (all nullable, as Spark hands them) and a ``file``
    column naming the file; a file that is not the one checked, or that fails to read, appends
    ``(file, reason, detail)`` to ``problems`` instead (rows already handed on stay handed on)."""
    import pyarrow.parquet as pq

    name = split.path.rsplit("/", 1)[-1]
    target = pa.schema([f.with_nullable(True) for f in schema])
    try:
        fs, path = access.open(split.path)
        with fs.open_input_file(path) as f:
            size = f.size()
            if size != split.size:
                problems.append((split.path, "file-changed", f"{name} is {size} bytes, not the {split.size} "
                                                             "its footer was checked at"))
                return
            footer = footer_bytes(size, lambda at, n: f.read_at(n, at))
            if isinstance(footer, str) or footer_digest(footer) != split.footer_sha256:
                problems.append((split.path, "file-changed", f"{name}: its footer is not the one checked"))
                return
            parquet = pq.ParquetFile(f, metadata=footer_metadata(footer))
            files = None
            for rb in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[split.row_group],
                                           columns=target.names, use_threads=False):
                rb = rb.select(target.names).cast(target)
                if files is None or len(files) != rb.num_rows:
                    files = pa.array([split.path] * rb.num_rows, type=pa.string())
                yield rb.append_column("file", files)
    except (OSError, ValueError, pa.ArrowException) as e:
        problems.append((split.path, "unreadable-file", f"{name}: {_first_line(e)}"))


def read_splits(splits: list[Split], *, access: FileAccess, schema: pa.Schema,
                problems: list) -> Iterator[pa.RecordBatch]:
    """The rows of every split of ``splits`` in turn (:func:`read_split`)."""
    for split in splits:
        yield from read_split(split, access=access, schema=schema, problems=problems)


@dataclass(frozen=True)
class SplitSource:
    """The input as the Python workers read it: the checked files' splits, how to reach them, the table's
    schema.  The driver's side plans one Spark task per split, each given the indexes of its splits."""

    splits: list[Split]
    access: FileAccess
    schema: pa.Schema

    def rows(self, ids: Iterator[pa.RecordBatch], problems: list) -> Iterator[pa.RecordBatch]:
        """The rows of the splits whose indexes ``ids`` holds (batches of an ``id`` column; :func:`read_splits`)."""
        mine = [self.splits[i] for rb in ids for i in rb.column("id").to_pylist()]
        return read_splits(mine, access=self.access, schema=self.schema, problems=problems)

    def partition(self, ids: Iterator[pa.RecordBatch], fn, **kwargs) -> Iterator[pa.RecordBatch]:
        """``fn`` (:func:`tasks.rowchecks.check_and_work_partition`) over :meth:`rows`, given what could not
        be read."""
        problems: list = []
        yield from fn(self.rows(ids, problems), problems=problems, **kwargs)
