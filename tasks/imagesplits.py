"""Splits planned by image: which row groups hold which images, and tasks that each read whole images.

``hepix decrypt`` assembles and scores every image in the task that reads it, so a task must read all the
rows of its images.  The driver first learns which images each split (row group) holds -- the
``image_id`` column alone, read through the footer it checked (:func:`split_images`; a few bytes a row) --
then plans (:func:`plan_by_image`): the splits that share an image are one component; a component is one
task, or, when its images hold more values than one task should (:data:`TASK_VALUES`, and a fair share of
the cores), a few tasks of a few of its images each, every task reading the splits of its images and
skipping the other images' rows.  Where each row group holds one image (``hepix process`` writes them so,
tasks.files.RowGroupWriter) every image is a task of its own and no byte is read twice; the plan says how
much is read in all (:attr:`ImagePlan.read_bytes`), and the driver keeps its other way for inputs whose
images are spread too thin over row groups shared with others.

Nothing here is believed later: the task counts the ids of every split it reads and compares them with the
plan (a split whose rows are not the ones planned is a rejects row of each image it holds), checks every
row, and judges each image from its own rows; the driver judges every image again from all the tasks'
summaries.  Rows without an image id, or with an id the plan does not expect in their split, are checked by
the one task that owns the split (:attr:`ImageTask.owned`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa

from .filesystem import FileAccess
from .rowchecks import MAX_VALUE_CHARS
from .splits import Split, footer_digest, footer_metadata

#: The most values (float64, 8 bytes each) of the images one task holds at once, when a component of
#: several images is cut into tasks: 2^24 values, 128 MiB (a 2048x1024 RGB image is 6.3 M).
TASK_VALUES = 2**24
#: The most bytes the ``image_id`` column of a row group may claim per row (ids are 32 characters; a longer
#: one is refused by the row checks anyway), besides a page's own overhead.
ID_BYTES_PER_ROW = MAX_VALUE_CHARS + 64
ID_CHUNK_OVERHEAD = 2**20


@dataclass(frozen=True)
class ImageTask:
    """One task of a plan: the splits it reads (indexes into :attr:`ImagePlan.splits`, in order), the images
    it decrypts and judges, and the splits it owns (it checks their rows of no image, or of an image the
    plan did not expect there)."""

    splits: tuple[int, ...]
    images: tuple[str, ...]
    owned: tuple[int, ...]


@dataclass(frozen=True)
class ImagePlan:
    """The splits of an input, which images each holds (``maps``: per split, ``(image id, rows)`` pairs, a
    null id for rows without a usable one), and the tasks that read them."""

    splits: tuple[Split, ...]
    maps: tuple[tuple[tuple[str | None, int], ...], ...]
    tasks: tuple[ImageTask, ...]

    @property
    def bytes(self) -> int:
        return sum(s.nbytes for s in self.splits)

    @property
    def read_bytes(self) -> int:
        """The bytes the tasks read in all (a split read by two tasks counts twice)."""
        return sum(self.splits[i].nbytes for t in self.tasks for i in t.splits)

    @property
    def amplification(self) -> float:
        return self.read_bytes / max(1, self.bytes)

    def images(self) -> list[str]:
        """Every image id the splits hold, in the order they come."""
        return list(dict.fromkeys(i for m in self.maps for i, _ in m if i is not None))

    def restricted(self, images) -> ImagePlan:
        """The tasks that hold any of ``images``, deciding those only and owning no split."""
        wanted = set(images)
        tasks = []
        for t in self.tasks:
            mine = tuple(i for i in t.images if i in wanted)
            if mine:
                tasks.append(ImageTask(t.splits, mine, ()))
        return ImagePlan(self.splits, self.maps, tuple(tasks))


def usable_id(value) -> str | None:
    """An image id as the plan and the tasks route rows by: None for none, or one longer than the row checks
    let through (tasks.rowchecks.bounded_values)."""
    if value is None or len(value.encode()) > MAX_VALUE_CHARS:
        return None
    return value


def split_images(splits: list[Split], access: FileAccess) -> tuple[list[dict | None], list[tuple[str, str, str]]]:
    """``{image id: rows}`` of every split (None for one that cannot be read), and ``(file, reason, detail)``
    of each file that cannot: its ``image_id`` column read through the footer the driver checked, only
    while the file has that size and footer, as dictionary indexes (no value is copied per row)."""
    import pyarrow.parquet as pq

    maps: list[dict | None] = [None] * len(splits)
    problems = []
    by_file: dict[str, list[int]] = {}
    for i, s in enumerate(splits):
        by_file.setdefault(s.path, []).append(i)
    for path, indexes in by_file.items():
        first = splits[indexes[0]]
        name = path.rsplit("/", 1)[-1]
        try:
            fs, local = access.open(path)
            with fs.open_input_file(local) as f:
                size = f.size()
                from schemas.footers import footer_bytes

                footer = footer_bytes(size, lambda at, n: f.read_at(n, at)) if size == first.size else None
                if footer is None or isinstance(footer, str) or footer_digest(footer) != first.footer_sha256:
                    problems.append((path, "file-changed", f"{name} is not the file whose footer was checked"))
                    continue
                md = footer_metadata(footer)
                column = md.schema.to_arrow_schema().get_field_index("image_id")
                parquet = pq.ParquetFile(f, metadata=md, read_dictionary=["image_id"])
                for i in indexes:
                    s = splits[i]
                    if column < 0:
                        maps[i] = {None: s.rows}
                        continue
                    chunk = md.row_group(s.row_group).column(column)
                    if chunk.total_uncompressed_size > s.rows * ID_BYTES_PER_ROW + ID_CHUNK_OVERHEAD:
                        raise ValueError(f"row group {s.row_group}: its image_id column claims "
                                         f"{chunk.total_uncompressed_size} bytes for {s.rows} rows")
                    ids = parquet.read_row_group(s.row_group, columns=["image_id"], use_threads=False).column(0)
                    maps[i] = _counts(ids)
        except (OSError, ValueError, pa.ArrowException) as e:
            for i in indexes:
                maps[i] = None
            first = (str(e).splitlines() or [type(e).__name__])[0][:160]
            problems.append((path, "unreadable-file", f"{name}: {first}"))
    return maps, problems


def _counts(ids: pa.ChunkedArray) -> dict:
    """``{usable id: rows}`` of a column of ids (dictionary-encoded, or plain)."""
    counts: Counter = Counter()
    for chunk in ids.chunks:
        if pa.types.is_dictionary(chunk.type):
            values = [usable_id(v) for v in chunk.dictionary.to_pylist()]
            indexes = chunk.indices
            nulls = indexes.null_count
            if nulls:
                counts[None] += nulls
            for k, n in Counter(indexes.drop_null().to_pylist()).items():
                counts[values[k]] += n
        else:
            counts.update(usable_id(v) for v in chunk.to_pylist())
    return dict(counts)


def plan_by_image(splits: list[Split], maps: list[dict], values, parallelism: int = 1,
                  task_values: int = TASK_VALUES) -> ImagePlan:
    """The tasks that read ``splits`` by image (``maps``: :func:`split_images`, every split mapped;
    ``values(image id, rows)``: how many values the image decrypts to, as far as the driver knows).

    Splits that share an image make one component, in the order they come; a component is one task
    unless its images hold more than ``min(task_values, a fair share of the cores)`` values, when it is cut
    into tasks of consecutive images (at least one each), each task reading the splits of its images.
    Each split is owned by the first task that reads it; splits of no image (every row without an id) are
    owned by a task of their own."""
    n = len(splits)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    where: dict[str, list[int]] = {}
    rows: Counter = Counter()
    for i, m in enumerate(maps):
        for image, count in m.items():
            if image is None:
                continue
            where.setdefault(image, []).append(i)
            rows[image] += count
    for held in where.values():
        root = find(held[0])
        for i in held[1:]:
            other = find(i)
            if other != root:
                parent[other] = root
    sizes = {image: max(1, int(values(image, rows[image]))) for image in where}
    share = max(1, -(-sum(sizes.values()) // max(1, parallelism)))
    limit = max(1, min(task_values, share))
    components: dict[int, list[str]] = {}
    for image in where:                      # in the order images first come
        components.setdefault(find(where[image][0]), []).append(image)
    tasks: list[ImageTask] = []
    owner_of: dict[int, int] = {}
    for images in components.values():
        chunk: list[str] = []
        held = 0
        chunks = []
        for image in images:
            if chunk and held + sizes[image] > limit:
                chunks.append(chunk)
                chunk, held = [], 0
            chunk.append(image)
            held += sizes[image]
        chunks.append(chunk)
        for chunk in chunks:
            read = sorted({i for image in chunk for i in where[image]})
            for i in read:
                owner_of.setdefault(i, len(tasks))
            tasks.append(ImageTask(tuple(read), tuple(chunk), ()))
    loose = [i for i in range(n) if i not in owner_of]
    if loose:
        for i in loose:
            owner_of[i] = len(tasks)
        tasks.append(ImageTask(tuple(loose), (), ()))
    owned: dict[int, list[int]] = {}
    for i, t in owner_of.items():
        owned.setdefault(t, []).append(i)
    tasks = [ImageTask(t.splits, t.images, tuple(sorted(owned.get(k, ())))) for k, t in enumerate(tasks)]
    return ImagePlan(tuple(splits), tuple(tuple(sorted(m.items(), key=lambda kv: (kv[0] is not None, kv[0] or "")))
                                          for m in maps), tuple(tasks))
