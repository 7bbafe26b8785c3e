"""Ciphertext rows written as Parquet by the Python workers themselves, on every deployment: a local
directory (a local master, or a mount the driver and every worker share) or ``hdfs://``, through the
file systems of :mod:`tasks.filesystem`.

The ciphertext bytes never pass through the JVM, which otherwise spends most of a core moving them
(Arrow, row conversion, its Parquet writer).  Only a WRITTEN row per task goes back to Spark -- the file's
name, rows and size, the XOR of its rows' checksums and the sum of their ciphertext lengths --; the driver
checks each report against the file it sees and keeps exactly the files successful tasks reported.

Both sides are here: the workers' (:func:`rows_to_file`, :func:`work_to_file`) and the driver's -- which
files to keep (:func:`keep_reported`), leaving images out of what they wrote (:func:`drop_images`).  A
file is written under a hidden temporary name and renamed when complete, so a task killed mid-write
leaves no visible partial file; the driver removes whatever no successful task reported.
"""
from __future__ import annotations

import re
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hecore.errors import HepixError
from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS

from .filesystem import FileAccess

#: The names :func:`rows_to_file` gives its files (a name a worker reports is checked against it).
WRITTEN_NAME = re.compile(r"part-[0-9]{5,}-[0-9]+-[0-9a-f]{8}\.parquet")
#: Ciphertext bytes buffered before a Parquet row group is written (a write per record batch cost more).
ROW_GROUP_BYTES = 64 * 2**20
#: The Parquet settings of ciphertext files the workers write: the bytes are random, so no compression,
#: dictionary or statistics; large pages.
WRITER_OPTIONS = dict(compression="none", use_dictionary=False, write_statistics=False, data_page_size=8 * 2**20)


class RowGroupWriter:
    """A Parquet file of ciphertext rows written in row groups of about :data:`ROW_GROUP_BYTES`, counting
    its rows, its ciphertext bytes and the XOR of their checksums as it goes (what the driver records).

    ``by_image``: every row group holds the rows of one image only (the buffered rows grouped by image id,
    in the order the images came, when they are written): a reader then finds an image's rows by the row
    groups that hold them (``hepix decrypt`` reads each image in one task, tasks.imagesplits)."""

    def __init__(self, fs, path: str, *, by_image: bool = False):
        self.fs, self.path, self.rows, self.ct_bytes, self.xxh3_xor = fs, path, 0, 0, 0
        self._writer, self._sink, self._pending, self._pending_bytes = None, None, [], 0
        self.by_image = by_image

    def add(self, rb: pa.RecordBatch) -> None:
        from .checksums import xor_all

        if rb.num_rows == 0:                    # never an empty row group (readers refuse files with them)
            return
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
            self._sink = self.fs.open_output_stream(self.path)
            self._writer = pq.ParquetWriter(self._sink, CIPHERTEXTS, **WRITER_OPTIONS)
        table = pa.Table.from_batches(self._pending, schema=CIPHERTEXTS)
        for part in (_by_image(table) if self.by_image else [table]):
            self._writer.write_table(part, row_group_size=part.num_rows)
        self._pending, self._pending_bytes = [], 0

    def close(self) -> None:
        """Close the file (what is still buffered after a failure is dropped: the driver removes the file)."""
        if self._writer is not None:
            self._writer.close()
        if self._sink is not None:
            self._sink.close()


def _by_image(table: pa.Table) -> list[pa.Table]:
    """``table``'s rows as one table per image id, in the order the ids first come (rows of one image keep
    their order): slices of ``table``, no row copied (an image whose rows come in several runs is a table of
    several chunks, written as one row group all the same)."""
    ids = table.column("image_id").to_pylist()
    runs = []                                   # (image, start, end)
    for i, image in enumerate(ids):
        if runs and runs[-1][0] == image:
            runs[-1][2] = i + 1
        else:
            runs.append([image, i, i + 1])
    if len({r[0] for r in runs}) == len(runs):
        return [table.slice(start, end - start) for _, start, end in runs]
    # the runs of each image put together without a copy (slices of the buffered batches, one table of them
    # per image): gathering the rows (take) would copy every ciphertext once more
    pieces: dict = {}
    for image, start, end in runs:
        pieces.setdefault(image, []).append(table.slice(start, end - start))
    return [pa.concat_tables(parts) for parts in pieces.values()]


def rows_to_file(rows: Iterator[pa.RecordBatch], *, directory: str, attempt: Callable[[], tuple[int, int]],
                 access: FileAccess = FileAccess(), by_image: bool = False) -> Iterator[pa.RecordBatch]:
    """Write the CIPHERTEXTS batches ``rows`` of one task as one Parquet file in ``directory`` (reached
    through ``access``): one WRITTEN row describing it (or a null file when there were no rows).
    ``by_image``: each row group holds one image's rows (:class:`RowGroupWriter`).

    The file is written under a temporary name and renamed when complete; its name carries the task's
    partition and attempt (``attempt()``: Spark's, given by the driver's side), so a retried or speculative
    attempt never overwrites another's file."""
    import uuid

    partition, number = attempt()
    name = f"part-{partition:05d}-{number}-{uuid.uuid4().hex[:8]}.parquet"
    fs, base = access.open(directory)
    out = RowGroupWriter(fs, f"{base}/.{name}.tmp", by_image=by_image)
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
    fs.move(out.path, f"{base}/{name}")
    yield pa.RecordBatch.from_pylist(
        [{"file": name, "rows": out.rows, "bytes": fs.get_file_info(f"{base}/{name}").size,
          "xxh3_xor": out.xxh3_xor, "ct_bytes": out.ct_bytes}], schema=WRITTEN)


def work_to_file(batches: Iterator[pa.RecordBatch], *, work: Callable, directory: str,
                 attempt: Callable[[], tuple[int, int]], access: FileAccess = FileAccess(),
                 by_image: bool = False) -> Iterator[pa.RecordBatch]:
    """Run the partition function ``work`` (rows in, CIPHERTEXTS rows out) and write what it gives with
    :func:`rows_to_file`."""
    yield from rows_to_file(work(batches), directory=directory, attempt=attempt, access=access, by_image=by_image)


# --- the driver's side ------------------------------------------------------------------------------

#: What the workers' writing asks of a cluster (the driver checks it after every write).
SHARED_OUT = "the workers write --out themselves: it must be hdfs:// or a path the driver and every worker see"


def _listing(directory: str, access: FileAccess) -> tuple[object, str, dict[str, int]]:
    """``(file system, path, {name: size})`` of the files directly in ``directory`` (none when it is absent)."""
    import pyarrow.fs as pafs

    fs, base = access.open(directory)
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    return fs, base, {i.base_name: i.size for i in infos if i.type == pafs.FileType.File}


def checked_reports(reports: list[dict], directory: str, access: FileAccess = FileAccess()) -> list[dict]:
    """The files the tasks reported (WRITTEN rows with a file), each checked before it names a path: a name
    the tasks give (:data:`WRITTEN_NAME`), reported once, present in ``directory`` with the
    reported size.

    A worker that wrote elsewhere (an --out that is not one shared mount) or a report that does not match
    its file fails the job with :data:`SHARED_OUT`, naming the directory; nothing is committed.
    """
    entries = {}
    present = _listing(directory, access)[2]
    for r in reports:
        name = r["file"]
        if not isinstance(name, str) or not WRITTEN_NAME.fullmatch(name) or name in entries:
            raise HepixError(f"a task reported the file {name!r}, which is not a name it writes; nothing was "
                             "committed")
        size = present.get(name)
        if size is None or size != r["bytes"]:
            seen = "does not see it" if size is None else f"sees {size} bytes, not {r['bytes']}"
            raise HepixError(f"{SHARED_OUT}: a worker wrote {name} ({r['bytes']} bytes) into {directory}, but "
                             f"the driver {seen}; give such an --out")
        entries[name] = {"name": name, "rows": int(r["rows"]), "bytes": size, "xxh3_xor": int(r["xxh3_xor"]),
                         "ct_bytes": int(r["ct_bytes"])}
    return [entries[n] for n in sorted(entries)]


def keep_reported(directory: str, written, access: FileAccess = FileAccess()) -> list[dict]:
    """The files the successful tasks reported in ``written`` (WRITTEN rows), checked
    (:func:`checked_reports`); every other file of ``directory`` -- of failed or speculative attempts,
    temporary files -- removed."""
    entries = checked_reports([r.asDict() if hasattr(r, "asDict") else dict(r) for r in written
                               if r["file"] is not None], directory, access)
    keep = {e["name"] for e in entries}
    fs, base, present = _listing(directory, access)
    for name in present:
        if name not in keep:
            fs.delete_file(f"{base}/{name}")
    return entries


def drop_images(directory: str, names: list[str], image_ids: set[str], access: FileAccess = FileAccess()) -> None:
    """Rewrite the Parquet files ``names`` of ``directory`` without the rows of ``image_ids`` (images judged
    bad after their rows were written); a file left empty is removed.  Rare: only a run with rejects."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, base = access.open(directory)
    drop = sorted(image_ids)
    for name in names:
        path = f"{base}/{name}"
        table = pq.read_table(path, filesystem=fs)
        keep = pc.invert(pc.is_in(table.column("image_id"), value_set=_strings(drop)).fill_null(False))
        if pc.all(keep).as_py():
            continue
        kept = table.filter(keep)
        if kept.num_rows == 0:
            fs.delete_file(path)
            continue
        replace_file(kept, fs, path, by_image=True, **WRITER_OPTIONS)


def replace_file(table: pa.Table, fs, path: str, *, by_image: bool = False, **options) -> None:
    """Write ``table`` as the Parquet file ``path`` of ``fs`` under a hidden temporary name, renamed when
    complete: a reader never sees a partial file (``options``: pyarrow's writer options; ``by_image``: one
    row group per image, as :class:`RowGroupWriter` writes them)."""
    import pyarrow.parquet as pq

    folder, _, name = path.rpartition("/")
    tmp = f"{folder}/.{name}.tmp"
    if by_image:
        with pq.ParquetWriter(tmp, table.schema, filesystem=fs, **options) as writer:
            for part in _by_image(table):
                writer.write_table(part, row_group_size=part.num_rows)
    else:
        pq.write_table(table, tmp, filesystem=fs, **options)
    fs.move(tmp, path)


def keep_schema(directory: str, access: FileAccess = FileAccess(), schema: pa.Schema = CIPHERTEXTS) -> None:
    """Leave a file of no rows in ``directory`` when it has none (every row was bad): the table then still
    reads as an empty table of its ``schema``, as one Spark writes from no rows does."""
    import pyarrow.parquet as pq

    fs, base, present = _listing(directory, access)
    if not any(name.endswith(".parquet") for name in present):
        fs.create_dir(base, recursive=True)
        pq.write_table(schema.empty_table(), f"{base}/part-00000-empty.parquet", filesystem=fs)


def _strings(values: list[str]):
    import pyarrow as pa

    return pa.array(values, type=pa.string())
