"""``hepix decrypt`` by image: each task reads the row groups of its images (tasks.imagesplits), checks
every row, decrypts the good ones, and judges, assembles, scores and writes each of its images -- the
image itself never leaves the task, and no block of values goes through Spark.

A task gives back, for the driver: the summaries of its checked rows per image and their first failed
rows (tasks.summaries, as every checking task does), and one SCORED row per image it judged whole (the
metrics row, or why the image was rejected once decrypted: a refused or implausible ciphertext, a size
that does not fit its original).  The task judges its images from their own rows exactly as the driver
judges them from every task's summaries (tasks.summaries.image_problems, with the owner map's sizes): an
image with a failed row, or rows that do not make a whole image, is neither assembled nor scored.  The
driver judges again over all the tasks, and drops the scores of an image that another task saw rows of
(only a file changed after the plan makes that happen).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import pyarrow as pa

from schemas.stages import CHECKED, DECRYPTED
from schemas.tables import CIPHERTEXTS

from .decode import DecodeOptions
from .filesystem import FileAccess
from .imagesplits import ImagePlan, ImageTask, usable_id
from .rowchecks import RowExpect, side_batch
from .splits import read_split
from .summaries import image_problems, merge_summaries, summarize, summary_schema


@dataclass(frozen=True)
class ImageJob:
    """What every task of a decrypt by image needs, shipped once in the job's closure."""

    plan: ImagePlan
    access: FileAccess                      # the input's files
    expect: RowExpect
    broadcast: object                       # the owner's key set (decryption), the checks' too
    check_token: str
    decrypt_token: str
    run_id: str
    max_values: int
    flood_std: float = 0.0
    owner_sizes: dict | None = None         # with an owner map: image id -> (height, width, channels)
    names: dict = field(default_factory=dict)   # with an owner map: image id -> (source, content SHA-256)
    originals: dict = field(default_factory=dict)   # owner: content hash -> path; else result hash -> (path, hash)
    images_access: FileAccess | None = None
    decode: DecodeOptions | None = None
    ops: tuple[str, ...] = ()
    preset: str | None = None
    png_dir: str | None = None
    sheet_ids: frozenset = frozenset()
    rebuilds: object = None
    tasks: object = None
    spots: object = None                    # the owner's spot samples (hecore.integrity), broadcast: id -> bytes
    spots_only: bool = False                # decrypt only what the spot checks compare (decrypt --spots-only)
    binding: object = None                  # hecore.binding.Binding of a run encrypted with --bind


def images_partition(ids: Iterator[pa.RecordBatch], *, job: ImageJob) -> Iterator[pa.RecordBatch]:
    """The tasks of ``job.plan`` whose indexes ``ids`` holds (batches of an ``id`` column), one after the
    other: tasks.summaries.summary_schema(SCORED) rows."""
    picked = [i for rb in ids for i in rb.column("id").to_pylist()]
    for index in picked:
        yield from _one_task(job, job.plan.tasks[index])


def _one_task(job: ImageJob, task: ImageTask) -> Iterator[pa.RecordBatch]:
    from functools import partial

    from .decrypt import decrypt_partition
    from .metrics import SCORED
    from .rowchecks import check_and_work_partition

    schema = summary_schema(SCORED)
    mine, owned = set(task.images), set(task.owned)
    problems: list = []                     # (file, reason, detail) of what could not be read
    changed: list = []                      # CHECKED rows of the images of splits that are not as planned
    blocks: dict = {}                       # image id -> its DECRYPTED batches

    def rows() -> Iterator[pa.RecordBatch]:
        for s in task.splits:
            split, planned = job.plan.splits[s], dict(job.plan.maps[s])
            seen: Counter = Counter()
            before = len(problems)
            for rb in read_split(split, access=job.access, schema=CIPHERTEXTS, problems=problems):
                ids = [usable_id(v) for v in rb.column("image_id").to_pylist()]
                seen.update(ids)
                keep = [i for i, x in enumerate(ids) if x in mine or (s in owned and (x is None or x not in planned))]
                if len(keep) == rb.num_rows:
                    yield rb
                elif keep:
                    yield rb.take(pa.array(keep, type=pa.int64()))
            if len(problems) == before and dict(seen) != planned:
                changed.extend(_changed_rows(split, set(seen) | set(planned)))

    work = partial(decrypt_partition, token=job.decrypt_token, broadcast=job.broadcast, rebuilds=job.rebuilds,
                   tasks=job.tasks, flood_std=job.flood_std, spots_only=job.spots if job.spots_only else None,
                   binding=job.binding)
    checked: list = []
    for out in check_and_work_partition(rows(), expect=job.expect, token=job.check_token, broadcast=job.broadcast,
                                        work=work, work_schema=DECRYPTED, problems=problems, checked_to=checked,
                                        rebuilds=job.rebuilds):
        for image, part in _by_image(out):
            blocks.setdefault(image, []).append(part)
    if changed:
        checked.append(pa.RecordBatch.from_pylist(changed, schema=CHECKED))
    summaries, bad = summarize(checked)
    if summaries.num_rows:
        yield side_batch(summaries, schema, "summary")
    if bad.num_rows:
        yield side_batch(bad, schema, "bad")
    owner = _Sizes(job.owner_sizes) if job.owner_sizes is not None else None
    judged = {s.image_id: s for s in merge_summaries(summaries.to_pylist())}
    for image in task.images:
        s = judged.get(image)
        parts = blocks.pop(image, None)
        if s is None or s.bad or not parts or image_problems(s, owner) is not None:
            continue
        row = _scored(job, image, pa.Table.from_batches(parts, schema=DECRYPTED))
        del parts
        yield side_batch(pa.RecordBatch.from_pylist([row], schema=SCORED), schema, "work")


def _scored(job: ImageJob, image: str, values: pa.Table) -> dict:
    """The SCORED row of one whole image: assembled from its blocks, named, its original found, scored
    (and written as PNG when asked)."""
    from .decrypt import assemble
    from .metrics import score
    from .originals import read_original
    from .spots import spot_sample

    with_owner = job.owner_sizes is not None
    row, raw = assemble(values, max_values=job.max_values, match_key=not with_owner, partial=job.spots_only)
    if with_owner:
        source, digest = job.names.get(image, (image, ""))
    else:
        source, digest = image, ""
    reference = None
    if raw is not None and job.decode is not None and job.images_access is not None:
        if with_owner:
            path = job.originals.get(digest) if digest else None
            if path is not None:
                reference = read_original(path, digest, access=job.images_access, opts=job.decode, ops=job.ops,
                                          preset=job.preset)
        else:
            found = job.originals.get(row.get("result_sha256"))
            if found is not None:
                reference = read_original(found[0], found[1], access=job.images_access, opts=job.decode,
                                          ops=job.ops, preset=job.preset, result_sha256=row["result_sha256"])
                if reference is not None:
                    source, digest = reference["orig_source"], found[1]
    row.update(source=source, content_sha256=digest, spots=spot_sample(job.spots, image))
    if reference is not None:
        row.update({k: reference[k] for k in ("original", "orig_height", "orig_width", "orig_channels")})
    return score(row, raw, run_id=job.run_id, png_dir=job.png_dir, sheet_ids=job.sheet_ids)


class _Sizes:
    """The owner map's sizes as :func:`tasks.summaries.image_problems` asks for them."""

    def __init__(self, sizes: dict):
        self._sizes = sizes

    def get(self, image_id):
        known = self._sizes.get(image_id)
        if known is None:
            return None
        return SimpleNamespace(image_height=known[0], image_width=known[1], image_channels=known[2])


def _changed_rows(split, images) -> list[dict]:
    """One failed CHECKED row per image of a split whose ids are not the ones the job planned from."""
    name = split.path.rsplit("/", 1)[-1]
    detail = (f"row group {split.row_group} of {name} does not hold the rows the job planned its tasks from (the "
              "file changed after its footer was checked)")
    return [{**dict.fromkeys(CHECKED.names), "file": split.path, "image_id": i, "reason": "file-changed",
             "detail": detail} for i in sorted(images, key=lambda i: (i is not None, i or "")) if i is not None]


def _by_image(batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
    """``batch``'s rows grouped by image id."""
    ids = batch.column("image_id").to_pylist()
    if len(set(ids)) == 1:
        return [(ids[0], batch)]
    groups: dict = {}
    for i, image in enumerate(ids):
        groups.setdefault(image, []).append(i)
    return [(image, batch.take(pa.array(rows, type=pa.int64()))) for image, rows in groups.items()]
