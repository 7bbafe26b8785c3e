"""The driver's decisions over the row checks: the images left out, and the rejects rows.

Every ciphertext row is checked before a job uses it, in the Python workers (:mod:`tasks.rowchecks`: its
checksum, key, layout, parameters, ops, labels, id, geometry and ciphertext bytes).  Then per image: every
row agrees on the image's size, no key twice, and exactly the rows the geometry says; with an owner map,
the id is one the owner made and the size is the one it recorded (:func:`image_problems`).

A bad row becomes a rejects row naming it (reason, detail, key); its whole image is left out; the job
goes on with the rest.  ``process``, ``decrypt`` and ``verify`` run this with Spark
(:func:`inspect_rows`; ``decrypt`` and, where its workers write the output, ``process`` do their own
work in the same task as the checks, so that they read every ciphertext once); ``audit`` runs the same
row function with pyarrow (:func:`tasks.rowchecks.check_batch`, :func:`image_problems`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from schemas.stages import CHECKED
from schemas.tables import spark_schema
from tasks.rowchecks import (
    DIGITS,
    KEY,
    RowExpect,
    check_and_work_partition,
    check_partition,
    expected_rows,
    fused_schema,
    shown_id,
)
from tasks.splits import SplitSource

from .frames import driver_frame

# --- per image ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImageSummary:
    """What the rows of one image say about it (aggregated without the bytes)."""

    image_id: str
    rows: int
    keys: int                       # distinct (channel, tile_y, tile_x, index)
    layout: str
    heights: tuple[int, int]        # (min, max) over the rows
    widths: tuple[int, int]
    channels: tuple[int, int]
    tiles: tuple[int, int, int, int]   # min/max tile_h, min/max tile_w
    file: str | None = None
    bad: int = 0                    # rows that failed their row checks


def image_problems(s: ImageSummary, owner=None) -> tuple[str, str] | None:
    """Why the rows of one image (all good one by one) do not make a whole image, or None."""
    if s.heights[0] != s.heights[1] or s.widths[0] != s.widths[1] or s.channels[0] != s.channels[1] \
            or s.tiles[0] != s.tiles[1] or s.tiles[2] != s.tiles[3]:
        return "inconsistent-image", "its rows disagree on the image's size, channels or tile"
    H, W, C, th, tw = s.heights[0], s.widths[0], s.channels[0], s.tiles[0], s.tiles[2]
    if owner is not None:
        known = owner.get(s.image_id)
        if known is None:
            return "unknown-image", "no image of the owner map has this id: the owner never encrypted it"
        if (H, W, C) != (known.image_height, known.image_width, known.image_channels):
            return "size-mismatch", (f"the rows say {W}x{H}x{C}, the owner encrypted a "
                                     f"{known.image_width}x{known.image_height}x{known.image_channels} image")
    if s.layout == DIGITS:
        return None
    if s.keys != s.rows:
        return "duplicate-row", f"{s.rows - s.keys} of its {s.rows} rows repeat a (channel, tile, index) key"
    want = expected_rows(s.layout, H, W, C, th, tw)
    if s.rows != want:
        return "incomplete-image", f"{s.rows} of its {want} ciphertexts"
    return None


@dataclass
class CheckedInput:
    """A job's input rows after the checks: ``df`` without the images that have a bad row (or, with
    :func:`inspect_rows`' work, that work's output)."""

    df: object
    rejects: list[dict]             # one rejects row per bad ciphertext row or image
    bad_images: set[str]            # ids of the images left out
    bad_image_rows: int             # how many rows those images have
    images: int = 0                 # images seen in the input (good and bad)
    rows: int = 0                   # rows read
    good_ids: list[str] = field(default_factory=list)
    id_less: bool = False           # some rows had no image id (each a rejects row)
    input: object = None            # with inspect_rows' work: the input rows of the good images
    cached: object = None           # the persisted check-and-work output ``df`` reads (inspect_rows' work)

    def release(self) -> None:
        """Drop the persisted work output once the job has used ``df`` (nothing to do without one)."""
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def reject_row(run_id: str, stage: str, source: str, reason: str, detail: str, key: dict | None = None,
               nbytes=None) -> dict:
    key = key or {}
    where = ""
    if key.get("channel") is not None:
        where = f"channel {key['channel']}, tile ({key['tile_y']}, {key['tile_x']}), index {key['index']}: "
    return {"run_id": run_id, "source": source, "stage": stage, "reason": reason,
            "detail": f"image {shown_id(key['image_id'])}: {where}{detail}" if key.get("image_id") else detail,
            "bytes": nbytes, **{k: key.get(k) for k in KEY}}


def _file_name(path: str | None) -> str:
    return (path or "").rsplit("/", 1)[-1]


def split_plan(spark, source: SplitSource, fn, schema):
    """A Spark plan of one task per task of ``source`` (:func:`tasks.splits.plan_tasks`) running ``fn(ids)``
    (``ids``: batches of the ``id`` column of ``spark.range``, the task's index) giving rows of the Spark
    ``schema``."""
    n = source.task_count
    return spark.range(0, n, 1, max(1, n)).mapInArrow(fn, schema)


def inspect_rows(spark, df, expect: RowExpect, *, run_id: str, stage: str, keys=None, owner=None,
                 token: str = "rowcheck", work=None, work_schema: pa.Schema | None = None,
                 source: SplitSource | None = None) -> CheckedInput:
    """Check every row of ``df`` (ciphertext rows) and every image; leave out the images with a problem.

    ``keys``: the job's keys (:meth:`hecore.schemes.KeySet.for_checks`: their checker loads each ciphertext);
    None checks against the parameters alone (no key).  ``owner``: the owner map (jobs.runtime.owner.OwnerMap) when the owner runs this.

    Without ``work`` the result's ``df`` is ``df`` without the bad images, for the job to read again.
    With ``work`` (a partition function, rows in, ``work_schema`` rows out) the job's work runs in the
    checking task on the rows that pass their row checks (:func:`check_and_work_partition`): every
    ciphertext is read once, and the result's ``df`` is the work's output for the good images.  That
    output is kept on the executors' local disk, not in memory (decrypt's blocks hold eight bytes per
    pixel value: in memory they would grow the JVM with the corpus), until the caller's
    :meth:`CheckedInput.release`.  With a ``source`` that pass reads the input's rows in the Python
    workers, a few row groups per task (:class:`SplitSource`), instead of through Spark's reader of ``df``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    bc = spark.sparkContext.broadcast(keys)
    token = f"{token}/{bc._jbroadcast.id()}"
    rows = df.withColumn("file", F.input_file_name())
    if work is None:
        checked = (rows.mapInArrow(lambda it: check_partition(it, expect=expect, token=token, broadcast=bc),
                                   spark_schema(CHECKED))
                   .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            return _decide(spark, checked, df, run_id=run_id, stage=stage, owner=owner)
        finally:
            checked.unpersist()
    args = dict(expect=expect, token=token, broadcast=bc, work=work, work_schema=work_schema)
    if source is not None:
        plan = split_plan(spark, source, lambda it: source.partition(it, check_and_work_partition, **args),
                          spark_schema(fused_schema(work_schema)))
    else:
        plan = rows.mapInArrow(lambda it: check_and_work_partition(it, **args), spark_schema(fused_schema(work_schema)))
    fused = plan.persist(StorageLevel.DISK_ONLY)
    try:
        result = _decide(spark, fused.where(F.col("check").isNotNull()).select("check.*"), df,
                         run_id=run_id, stage=stage, owner=owner)
    except BaseException:
        fused.unpersist()
        raise
    done = fused.where(F.col("work").isNotNull()).select("work.*")
    # a work output without image ids (the files the workers wrote) is the caller's to clean of bad images
    result.input, result.df = result.df, (_keep(spark, done, result) if "image_id" in work_schema.names else done)
    result.cached = fused
    return result


def image_summaries(checked) -> list[ImageSummary]:
    """One :class:`ImageSummary` per image id of the CHECKED rows ``checked`` (rows without an id under
    None), aggregated by Spark without the bytes: what :func:`image_problems` judges."""
    from pyspark.sql import functions as F

    rows = checked.groupBy("image_id").agg(
        F.count("*").alias("n"), F.countDistinct("channel", "tile_y", "tile_x", "index").alias("keys"),
        F.first("layout").alias("layout"), F.first("file").alias("file"), F.count("reason").alias("bad"),
        *[agg(c).alias(f"{name}_{c}") for c in ("image_height", "image_width", "image_channels", "tile_h",
                                                  "tile_w") for name, agg in (("lo", F.min), ("hi", F.max))]
    ).collect()
    return [ImageSummary(image_id=s["image_id"], rows=s["n"], keys=s["keys"], layout=s["layout"],
                         heights=(s["lo_image_height"], s["hi_image_height"]),
                         widths=(s["lo_image_width"], s["hi_image_width"]),
                         channels=(s["lo_image_channels"], s["hi_image_channels"]),
                         tiles=(s["lo_tile_h"], s["hi_tile_h"], s["lo_tile_w"], s["hi_tile_w"]), file=s["file"],
                         bad=s["bad"])
            for s in rows]


def _decide(spark, checked, df, *, run_id: str, stage: str, owner) -> CheckedInput:
    """The rejects and the images left out, from the CHECKED rows ``checked``; ``df`` without those images."""

    summaries = image_summaries(checked)
    rejects, bad = first_rejects(checked, summaries, run_id=run_id, stage=stage)
    rows_of = {}
    for summary in summaries:
        rows_of[summary.image_id] = summary.rows
        if summary.image_id is None or summary.image_id in bad:
            continue
        p = image_problems(summary, owner)
        if p is not None:
            bad.add(summary.image_id)
            rejects.append(reject_row(run_id, stage, _file_name(summary.file), p[0], p[1],
                                      {"image_id": summary.image_id}))
    good = sorted(i for i in rows_of if i is not None and i not in bad)
    total = sum(rows_of.values())
    if None in rows_of:            # rows without an id belong to no image: they count as read, not as images
        bad_rows = sum(n for i, n in rows_of.items() if i in bad or i is None)
    else:
        bad_rows = sum(n for i, n in rows_of.items() if i in bad)
    result = CheckedInput(df, rejects, bad, bad_rows, images=len([i for i in rows_of if i is not None]),
                          rows=total, good_ids=good, id_less=None in rows_of)
    result.df = _keep(spark, df, result)
    return result


#: The bad rows of one image the driver keeps as rejects rows; the rest are counted in one more row.
REJECTS_PER_IMAGE = 5


class RejectLog:
    """Rejects rows appended to ``rows`` as a job streams its input: the first :data:`REJECTS_PER_IMAGE` of
    each image and at most :data:`MAX_REJECTS` in all; :meth:`close` adds one row counting the others."""

    MAX_REJECTS = 10_000

    def __init__(self, rows: list[dict]):
        self.rows = rows
        self.per_image: dict = {}
        self.dropped = 0

    def add(self, row: dict) -> None:
        key = row.get("image_id")
        n = self.per_image.get(key, 0)
        if n >= REJECTS_PER_IMAGE or len(self.rows) >= self.MAX_REJECTS:
            self.dropped += 1
            return
        if len(self.per_image) < self.MAX_REJECTS:
            self.per_image[key] = n + 1
        self.rows.append(row)

    def close(self, run_id: str, stage: str) -> None:
        if self.dropped:
            self.rows.append(reject_row(run_id, stage, "", "more-rejects",
                                        f"{self.dropped} more rows were rejected (not listed one by one)"))
            self.dropped = 0


def first_rejects(checked, summaries: list[ImageSummary], *, run_id: str,
                  stage: str) -> tuple[list[dict], set[str]]:
    """The rejects rows of the bad CHECKED rows of ``checked`` -- the first :data:`REJECTS_PER_IMAGE` of each
    image (rows without an id: of all of them), then one row (of the last one's reason) counting the others
    --, and the bad image ids.
    Spark ranks and counts; the driver never holds every bad row.  The ranking is a Spark job of its own:
    skipped when ``summaries`` (:func:`image_summaries` of ``checked``) count no bad row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not any(s.bad for s in summaries):
        return [], set()
    bad_rows = checked.where(F.col("reason").isNotNull())
    order = Window.partitionBy("image_id").orderBy("channel", "tile_y", "tile_x", "index", "reason")
    ranked = bad_rows.withColumn("_rank", F.row_number().over(order)) \
        .withColumn("_count", F.count(F.lit(1)).over(Window.partitionBy("image_id")))
    rejects: list[dict] = []
    bad: set[str] = set()
    for r in ranked.where(F.col("_rank") <= REJECTS_PER_IMAGE).orderBy("image_id", "_rank").toLocalIterator():
        key = {k: r[k] for k in KEY}
        rejects.append(reject_row(run_id, stage, _file_name(r["file"]), r["reason"], r["detail"], key,
                                  r["ct_bytes"]))
        if r["image_id"] is not None:
            bad.add(r["image_id"])
        if r["_rank"] == REJECTS_PER_IMAGE and r["_count"] > REJECTS_PER_IMAGE:
            rejects.append(reject_row(run_id, stage, _file_name(r["file"]), r["reason"],
                                      f"{r['_count'] - REJECTS_PER_IMAGE} more rows of it were rejected (not "
                                      "listed one by one)", {"image_id": r["image_id"]}))
    return rejects, bad


def _keep(spark, df, checked: CheckedInput):
    """The rows of ``df`` of the good images of ``checked`` (in ``df``'s column order)."""
    from pyspark.sql import functions as F

    columns = df.columns
    if checked.bad_images:
        good = checked.good_ids
        keep = driver_frame(spark, pa.schema([("image_id", pa.string())]), [(i,) for i in good])
        # a join reorders columns; the stages' Arrow functions return batches by position: restore the order
        return (df.join(F.broadcast(keep), "image_id", "left_semi") if good else df.limit(0)).select(*columns)
    if checked.id_less:
        return df.where(F.col("image_id").isNotNull())
    return df
