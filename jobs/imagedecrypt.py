"""``hepix decrypt`` of images by image: the driver's side (tasks/imagedecrypt.py is the workers').

One Spark job does the work, its tasks planned by image (tasks.imagesplits): each reads the row groups of
its images, checks every row, decrypts the good ones and judges, assembles, scores and writes each of its
images -- no block of values and no image goes through Spark (no shuffle, no group).  The driver:

1. starts the Python workers and builds their checker and decryptor (jobs/runtime/warmup.py), then, with
   ``--images``, indexes the originals on them (tasks.originals: each file's content hash, and without an
   owner map the hash of its processed result), while it
2. checks every listed file's footer (jobs/runtime/runs.py ``input_table``), reads which images each row
   group holds (their ``image_id`` column) and plans the tasks;
3. runs the tasks, and judges every image from the tasks' summaries of their checked rows
   (jobs/runtime/inputcheck.py ``decide_summaries``: the same rejects as a pass over every checked row),
   keeping the scores of the images found whole.

Where the images are spread over row groups shared with too many others (the tasks would read much of
the input again: :data:`MAX_AMPLIFICATION`, :data:`MAX_EXTRA_BYTES`), or the workers cannot reach the
originals, :func:`by_image` says so (None) and decrypt goes its other way (jobs/decrypt.py
``through_spark``).
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field

from hecore.errors import HepixError

log = logging.getLogger(__name__)

#: The most bytes the planned tasks may read in all, over the input's bytes (a row group shared by the
#: tasks of two images is read twice), unless what they read twice is at most :data:`MAX_EXTRA_BYTES`;
#: above both, decrypt goes through Spark's shuffle instead.
MAX_AMPLIFICATION = 2.0
MAX_EXTRA_BYTES = 256 * 2**20


@dataclass
class Decrypted:
    """What a decrypt of images gives its job: the checked input (rejects, images left out), the SCORED
    rows of the images judged whole (metrics rows, or why the image was rejected once decrypted), the
    contact sheet's panels by image id, and the timings."""

    checked: object
    every: list[dict]
    drawn: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)


def index_originals(run, owner, opts):
    """A callable giving the INDEX rows of the files of ``--images`` (tasks.originals.index_partition): one
    small Spark job, planned here (a listing that fails is an error here), run when it is called."""
    from schemas.tables import spark_schema
    from tasks.originals import INDEX, index_partition

    from .runtime.sources import read_images

    df = read_images(run.spark, run.args.images, run.args.recursive)
    fn = functools.partial(index_partition, opts=opts, ops=tuple(run.parent.ops), preset=run.parent.preset,
                           match_key=owner is None)
    plan = df.mapInArrow(fn, spark_schema(INDEX))
    return lambda: plan.toArrow().to_pylist()


def by_image(run, png_dir: str | None) -> Decrypted | None:
    """Decrypt, judge and score every image of the input in one job planned by image; None when the input's
    row groups do not allow it (:data:`MAX_AMPLIFICATION`) or the workers cannot read ``--images``."""
    from schemas.tables import spark_schema
    from tasks.decrypt import build_decryptor
    from tasks.imagedecrypt import ImageJob, images_partition
    from tasks.imagesplits import plan_by_image, split_images
    from tasks.metrics import SCORED
    from tasks.rowchecks import checker_builder
    from tasks.summaries import summary_schema

    from .runtime.decryptinput import decode_options, expectation, owner_spots, sheet_ids
    from .runtime.inputcheck import decide_summaries, reject_row, side_table
    from .runtime.warmup import warm_up

    args, owner, spark = run.args, run.owner, run.spark
    t0 = time.perf_counter()
    images_access = opts = None
    if args.images:
        try:
            images_access = run.storage.access(args.images)
        except HepixError:
            return None                 # a scheme the workers do not read: Spark's reader finds the originals
        opts = decode_options(run, owner)
    expect = expectation(run, owner)
    keys = run.keys.for_decryption()
    bc, token = run.broadcast(keys)
    check_token = f"{token}/{run.run_id}/check"
    warm = warm_up(spark, [(check_token, bc, checker_builder(expect)), (token, bc, build_decryptor)],
                   rebuilds=run.rebuilds)
    if args.images:
        warm.then(index_originals(run, owner, opts))
    try:
        most = sum(i.ciphertexts for i in owner.images().values()) if owner is not None else None
        _, missing, splits = run.input_table(max_rows=most, with_splits=True, frame=False)
        access = run.storage.access(args.input)
        maps, unread = split_images(splits, access)
        log.debug("decrypt by image: footers checked and row groups mapped at %.2f s", time.perf_counter() - t0)
        missing += [reject_row(run.run_id, "decrypt", path.rsplit("/", 1)[-1], reason, detail)
                    for path, reason, detail in unread]
        kept = [i for i, m in enumerate(maps) if m is not None]
        plan = plan_by_image([splits[i] for i in kept], [maps[i] for i in kept], _values(run, owner, expect),
                             parallelism=run.sc.defaultParallelism)
        if plan.amplification > MAX_AMPLIFICATION and plan.read_bytes - plan.bytes > MAX_EXTRA_BYTES:
            return None
        index = warm.result() if args.images else []
    finally:
        warm.wait()
    log.debug("decrypt by image: workers warm, originals indexed at %.2f s", time.perf_counter() - t0)
    known = owner.images() if owner is not None else {}
    planned = plan.images()
    mine = {i: known[i] for i in planned if i in known}        # what the tasks need of the owner map
    originals = {}
    if owner is not None:                   # the file of each planned image's recorded content hash
        wanted = {k.content_sha256 for k in mine.values()}
        for r in index:
            if r["content_sha256"] in wanted:
                originals.setdefault(r["content_sha256"], r["path"])
    else:                                   # the file (and its hash) of each processed result
        for r in index:
            if r["result_sha256"] is not None:
                originals.setdefault(r["result_sha256"], (r["path"], r["content_sha256"]))
    job = ImageJob(
        plan=plan, access=access, expect=expect, broadcast=bc, check_token=check_token, decrypt_token=token,
        run_id=run.run_id, max_values=3 * int(expect.max_pixels), flood_std=args.flood_std,
        owner_sizes={i: (k.image_height, k.image_width, k.image_channels) for i, k in mine.items()}
        if owner is not None else None,
        names={i: (k.source, k.content_sha256) for i, k in mine.items()}, originals=originals,
        images_access=images_access, decode=opts, ops=tuple(run.parent.ops), preset=run.parent.preset,
        png_dir=png_dir, sheet_ids=sheet_ids(args, owner, planned), rebuilds=run.rebuilds, tasks=run.tasks,
        spots=owner_spots(run, owner, mine), spots_only=bool(getattr(args, "spots_only", False)),
        binding=getattr(run, "binding", None))
    planned_at = time.perf_counter()
    out = _run(spark, job, spark_schema(summary_schema(SCORED)), images_partition)
    checked = decide_summaries(side_table(out, "summary"), side_table(out, "bad"), run_id=run.run_id,
                               stage="decrypt", owner=owner)
    checked.rejects[:0] = missing
    good = set(checked.good_ids)
    scored = {r["image_id"]: r for r in side_table(out, "work").to_pylist()}
    every = []
    for image in checked.good_ids:
        r = scored.get(image)
        if r is None:               # judged whole over all the tasks, but no task had all its rows
            r = _unscored(run, image, known)
        every.append(r)
    for image, r in scored.items():
        if image not in good:
            _drop_png(png_dir, r)
    drawn = {r["image_id"]: r["sheet_panels"] for r in every if r.get("sheet_panels") is not None}
    if args.contact_sheet is not None:
        drawn = _fill_sheet(run, job, drawn, checked.good_ids, owner)
    done = time.perf_counter()
    return Decrypted(checked, every, drawn, {"plan_seconds": planned_at - t0, "images_seconds": done - planned_at})


def _run(spark, job, schema, fn):
    """The job's tasks (one per planned task), their rows collected as one pyarrow table."""
    from tasks.metrics import SCORED
    from tasks.summaries import summary_schema

    n = len(job.plan.tasks)
    if n == 0:
        return summary_schema(SCORED).empty_table()
    return spark.range(0, n, 1, n).mapInArrow(functools.partial(fn, job=job), schema).toArrow()


def _values(run, owner, expect):
    """How many values an image decrypts to, for the plan: the owner map's size, else its rows times the
    values a ciphertext holds (at most the slots in the packed layouts, one in the pixel layout)."""
    from hecore.layouts import Layout

    known = owner.images() if owner is not None else {}
    per_row = run.keys.params.slots if Layout.parse(expect.layout).packed else 1

    def values(image: str, rows: int) -> int:
        k = known.get(image)
        if k is not None:
            return k.image_height * k.image_width * k.image_channels
        return rows * per_row

    return values


def _unscored(run, image: str, known: dict) -> dict:
    """The SCORED row of an image judged whole whose rows no single task held (a file changed after the
    tasks were planned): rejected."""
    from tasks.metrics import SCORED

    row = dict.fromkeys(SCORED.names)
    row.update(image_id=image, source=known[image].source if image in known else image, content_sha256="",
               reject_reason="incomplete-image",
               reject_detail="its rows were not all where the files said when the job planned its tasks (a file "
                             "changed meanwhile)")
    return row


def _drop_png(png_dir: str | None, r: dict) -> None:
    """Remove the PNG a task wrote of an image the driver then left out."""
    import os

    from tasks.metrics import png_path

    if png_dir and r.get("reject_reason") is None:
        try:
            os.remove(png_path(png_dir, r["image_id"], r.get("source")))
        except (OSError, ValueError):
            pass


def _fill_sheet(run, job, drawn: dict, good: list[str], owner) -> dict:
    """The panels of the images the contact sheet shows -- the first of the good images by name
    (jobs/runtime/decryptinput.py ``sheet_ids``) --: those the tasks drew, and, where an image they drew was left out,
    the next ones, drawn by a second pass over just their row groups."""
    import dataclasses

    from schemas.tables import spark_schema
    from tasks.imagedecrypt import images_partition
    from tasks.metrics import SCORED
    from tasks.summaries import summary_schema

    from .runtime.decryptinput import sheet_ids
    from .runtime.inputcheck import side_table

    wanted = sheet_ids(run.args, owner, good)
    more = sorted(wanted - set(drawn))
    if more:
        again = dataclasses.replace(job, plan=job.plan.restricted(more), png_dir=None, sheet_ids=frozenset(more))
        out = _run(run.spark, again, spark_schema(summary_schema(SCORED)), images_partition)
        for r in side_table(out, "work").to_pylist():
            if r["image_id"] in wanted and r.get("sheet_panels") is not None and r["reject_reason"] is None:
                drawn[r["image_id"]] = r["sheet_panels"]
    return {i: p for i, p in drawn.items() if i in wanted}
