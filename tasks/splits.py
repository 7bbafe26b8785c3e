"""A job's input read by the Python workers themselves: each task opens its splits -- row groups of the
files the input's manifest lists, a few small ones per task (:func:`plan_tasks`) -- with pyarrow, so no
ciphertext byte passes through the JVM.

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


#: A Spark task reads row groups until it holds this many rows or :data:`TASK_BYTES` bytes (a few small row
#: groups -- files of a few rows -- are one task's work, not one task each).
TASK_ROWS = 64
TASK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Split:
    """One row group of one listed file, as the driver checked the file: its rows and bytes as the footer
    says."""

    path: str
    size: int
    footer_sha256: str
    row_group: int
    rows: int = 0
    nbytes: int = 0


def footer_digest(footer: bytes) -> str:
    return hashlib.sha256(footer).hexdigest()


def footer_metadata(footer: bytes):
    """The Parquet metadata of a footer's bytes (as :func:`schemas.footers.footer_bytes` returns them)."""
    import pyarrow.parquet as pq

    return pq.read_metadata(pa.BufferReader(MAGIC + footer + struct.pack("<I", len(footer)) + MAGIC))


def splits_of(path: str, size: int, footer: bytes) -> list[Split]:
    """The splits of a checked file: one per row group that holds rows (none for a row group of no rows:
    it has nothing to read)."""
    digest = footer_digest(footer)
    md = footer_metadata(footer)
    groups = (md.row_group(i) for i in range(md.num_row_groups))
    return [Split(path, size, digest, i, g.num_rows, g.total_byte_size) for i, g in enumerate(groups)
            if g.num_rows > 0]


def plan_tasks(splits: list[Split], parallelism: int = 1) -> tuple[tuple[int, ...], ...]:
    """The split indexes each Spark task reads: consecutive splits, a task closed once it holds
    :data:`TASK_ROWS` rows (fewer when the input has fewer than that per core of ``parallelism``) or
    :data:`TASK_BYTES` bytes.  So the tasks are bounded by the rows and bytes of the input, not by how many
    row groups or files hold them; a split of a large row group is a task of its own, as before."""
    total = sum(max(s.rows, 1) for s in splits)
    target = max(1, min(TASK_ROWS, -(-total // max(1, parallelism))))
    tasks, current, rows, nbytes = [], [], 0, 0
    for i, s in enumerate(splits):
        current.append(i)
        rows += max(s.rows, 1)
        nbytes += max(s.nbytes, 0)
        if rows >= target or nbytes >= TASK_BYTES:
            tasks.append(tuple(current))
            current, rows, nbytes = [], 0, 0
    if current:
        tasks.append(tuple(current))
    return tuple(tasks)


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
    schema, and which splits each Spark task reads (``tasks``, :func:`plan_tasks`; by default one task per
    split).  The driver's side plans one Spark task per entry of ``tasks``, each given its index."""

    splits: list[Split]
    access: FileAccess
    schema: pa.Schema
    tasks: tuple = ()

    @property
    def task_count(self) -> int:
        return len(self.tasks) if self.tasks else len(self.splits)

    def rows(self, ids: Iterator[pa.RecordBatch], problems: list) -> Iterator[pa.RecordBatch]:
        """The rows of the splits of the tasks whose indexes ``ids`` holds (batches of an ``id`` column;
        :func:`read_splits`)."""
        picked = [i for rb in ids for i in rb.column("id").to_pylist()]
        mine = [self.splits[j] for i in picked for j in (self.tasks[i] if self.tasks else (i,))]
        return read_splits(mine, access=self.access, schema=self.schema, problems=problems)

    def partition(self, ids: Iterator[pa.RecordBatch], fn, **kwargs) -> Iterator[pa.RecordBatch]:
        """``fn`` (:func:`tasks.rowchecks.check_and_work_partition`) over :meth:`rows`, given what could not
        be read."""
        problems: list = []
        yield from fn(self.rows(ids, problems), problems=problems, **kwargs)
