"""The driver's decisions over the row checks: the images left out, and the rejects rows.

Every ciphertext row is checked before a job uses it, in the Python workers (:mod:`tasks.rowchecks`: its
checksum, key, layout, parameters, ops, labels, id, geometry and ciphertext bytes).  Then per image: every
row agrees on the image's size, no key twice, and exactly the rows the geometry says; with an owner map,
the id is one the owner made and the size is the one it recorded (:func:`image_problems`).

A bad row becomes a rejects row naming it (reason, detail, key); its whole image is left out; the job
goes on with the rest.  ``process`` and ``decrypt`` do their own work in the task that checks a row, so
that they read every ciphertext once, and each such task sums its checked rows up per image
(tasks.summaries): the driver decides from those summaries (:func:`decide_summaries`), with no second
pass over the checked rows (:func:`inspect_rows`).  ``verify`` and the jobs that read their rows again
(match, inference) check every row in a pass of its own and decide from all the CHECKED rows, aggregated
by Spark (:func:`image_summaries`, :func:`first_rejects`); ``audit`` runs the same row function with
pyarrow (:func:`tasks.rowchecks.check_batch`, :func:`image_problems`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from schemas.stages import CHECKED
from schemas.tables import spark_schema
from tasks.rowchecks import KEY, RowExpect, check_partition, shown_id
from tasks.splits import SplitSource
from tasks.summaries import (  # noqa: F401 -- ImageSummary and image_problems: what jobs.verify judges with
    ImageSummary,
    checked_and_summarized,
    image_problems,
    merge_summaries,
    rank_key,
    summary_schema,
)

from .frames import driver_frame

# --- per image ----------------------------------------------------------------------------------------

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
    cached: object = None           # the persisted check-and-work output ``df`` reads (inspect_rows' work)
    sizes: dict = field(default_factory=dict)   # from the tasks' summaries: good image id -> (width, height)
    shapes: dict = field(default_factory=dict)  # good image id -> (height, width, channels, tile_h, tile_w)

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
                 source: SplitSource | None = None, broadcast: tuple | None = None,
                 collect: bool = False) -> CheckedInput:
    """Check every row of ``df`` (ciphertext rows) and every image; leave out the images with a problem.

    ``keys``: the job's keys (:meth:`hecore.schemes.KeySet.for_checks`: their checker loads each ciphertext);
    None checks against the parameters alone (no key).  ``broadcast``: ``(broadcast, token)`` of ``keys``
    already broadcast -- the one the job's work builds its state from, so that the check and the work share
    one context per worker and the work takes the ciphertexts the checks loaded (tasks.handoff).  ``owner``:
    the owner map (jobs.runtime.owner.OwnerMap) when the owner runs this.

    Without ``work`` the result's ``df`` is ``df`` without the bad images, for the job to read again.
    With ``work`` (a partition function, rows in, ``work_schema`` rows out) the job's work runs in the
    checking task on the rows that pass their row checks (tasks.rowchecks.check_and_work_partition): every
    ciphertext is read once.  Each task sums up its checked rows per image (tasks.summaries), and the images
    are judged from those summaries alone (:func:`decide_summaries`): no second pass over the checked rows.
    With ``collect`` the work's rows are small (the files the workers wrote, an image's scores): the tasks'
    output is collected in one go and the result's ``df`` is a pyarrow table of the good images' work rows.
    Otherwise the output is kept on the executors' local disk, not in memory (the rows are ciphertexts),
    until the caller's :meth:`CheckedInput.release`, and ``df`` is the work's output for the good images.
    With a ``source`` that pass reads the input's rows in the Python workers, a few row groups per task
    (:class:`SplitSource`), instead of through Spark's reader of ``df``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if broadcast is None:
        bc = spark.sparkContext.broadcast(keys)
        token = f"{token}/{bc._jbroadcast.id()}"
    else:
        bc, token = broadcast[0], f"{broadcast[1]}/{token}"
    if work is None:
        rows = df.withColumn("file", F.input_file_name())
        checked = (rows.mapInArrow(lambda it: check_partition(it, expect=expect, token=token, broadcast=bc),
                                   spark_schema(CHECKED))
                   .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            return _decide(spark, checked, df, run_id=run_id, stage=stage, owner=owner)
        finally:
            checked.unpersist()
    args = dict(expect=expect, token=token, broadcast=bc, work=work, work_schema=work_schema)
    schema = spark_schema(summary_schema(work_schema))
    if source is not None:
        plan = split_plan(spark, source, lambda it: source.partition(it, checked_and_summarized, **args), schema)
    else:
        plan = df.withColumn("file", F.input_file_name()).mapInArrow(
            lambda it: checked_and_summarized(it, **args), schema)
    if collect:
        out = plan.toArrow()
        result = decide_summaries(side_table(out, "summary"), side_table(out, "bad"), run_id=run_id, stage=stage,
                                  owner=owner)
        result.df = _keep_rows(side_table(out, "work"), result)
        return result
    fused = plan.persist(StorageLevel.DISK_ONLY)
    try:
        small = fused.where(F.col("work").isNull()).select("summary", "bad").toArrow()
        result = decide_summaries(side_table(small, "summary"), side_table(small, "bad"), run_id=run_id, stage=stage,
                                  owner=owner)
    except BaseException:
        fused.unpersist()
        raise
    done = fused.where(F.col("work").isNotNull()).select("work.*")
    # a work output without image ids (the files the workers wrote) is the caller's to clean of bad images
    result.df = _keep(spark, done, result) if "image_id" in work_schema.names else done
    result.cached = fused
    return result


def side_table(table: pa.Table, name: str) -> pa.Table:
    """The rows of ``table`` (tasks.summaries.summary_schema) whose ``name`` side is set, as a table of it."""
    import pyarrow.compute as pc

    column = table.column(name)
    rows = column.filter(pc.is_valid(column)).combine_chunks() if table.num_rows else column.combine_chunks()
    return pa.Table.from_struct_array(rows) if len(rows) else pa.table(
        {f.name: pa.array([], f.type) for f in column.type})


def _keep_rows(work: pa.Table, checked: CheckedInput) -> pa.Table:
    """The work rows of the good images (all of them when they carry no image id)."""
    import pyarrow.compute as pc

    if "image_id" not in work.column_names or not (checked.bad_images or checked.id_less):
        return work
    return work.filter(pc.is_in(work.column("image_id"), value_set=pa.array(checked.good_ids, pa.string())))


def decide_summaries(summaries: pa.Table, bad_rows: pa.Table, *, run_id: str, stage: str, owner=None
                     ) -> CheckedInput:
    """The rejects and the images left out, from the checking tasks' IMAGE_SUMMARY rows ``summaries`` and
    their first failed CHECKED rows ``bad_rows`` (tasks.summaries): an image's summaries added up over the
    tasks, then judged as :func:`image_summaries` and :func:`first_rejects` judge every CHECKED row."""
    images = merge_summaries(summaries.to_pylist())
    by_image: dict = {}
    for r in bad_rows.to_pylist():
        by_image.setdefault(r["image_id"], []).append(r)
    rejects: list[dict] = []
    bad: set[str] = set()
    counts = {s.image_id: s.bad for s in images}
    for image in sorted(by_image, key=lambda i: (i is not None, i)):
        first = sorted(by_image[image], key=rank_key)[:REJECTS_PER_IMAGE]
        for rank, r in enumerate(first, 1):
            key = {k: r[k] for k in KEY}
            rejects.append(reject_row(run_id, stage, _file_name(r["file"]), r["reason"], r["detail"], key,
                                      r["ct_bytes"]))
            if rank == REJECTS_PER_IMAGE and counts.get(image, 0) > REJECTS_PER_IMAGE:
                rejects.append(reject_row(run_id, stage, _file_name(r["file"]), r["reason"],
                                          f"{counts[image] - REJECTS_PER_IMAGE} more rows of it were rejected "
                                          "(not listed one by one)", {"image_id": image}))
        if image is not None:
            bad.add(image)
    result = _judge(images, rejects, bad, run_id=run_id, stage=stage, owner=owner)
    good = set(result.good_ids)
    result.sizes = {s.image_id: (s.widths[0], s.heights[0]) for s in images if s.image_id in good}
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
    result = _judge(summaries, rejects, bad, run_id=run_id, stage=stage, owner=owner)
    result.df = _keep(spark, df, result)
    return result


def _judge(summaries: list[ImageSummary], rejects: list[dict], bad: set[str], *, run_id: str, stage: str,
           owner) -> CheckedInput:
    """The images left out -- ``bad`` (a row of theirs failed; its rejects rows are ``rejects``) and those
    whose summary shows a problem (:func:`image_problems`, one more rejects row each) -- and the counts."""
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
    shapes = {s.image_id: (s.heights[0], s.widths[0], s.channels[0], s.tiles[0], s.tiles[2]) for s in summaries
              if s.image_id is not None and s.image_id not in bad}
    return CheckedInput(None, rejects, bad, bad_rows, images=len([i for i in rows_of if i is not None]),
                        rows=total, good_ids=good, id_less=None in rows_of, shapes=shapes)


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
