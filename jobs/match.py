"""`hepix process --op match:QUERY`: encrypted distances from one image to every other (public keys only).

Every ciphertext of an image is joined with the query's ciphertext of the same
tile, channel and index; one task per image turns the pairs into one
encrypted distance per metric (hecore.ops.matching).  Images whose size differs
from the query's cannot be compared pixel by pixel: they go to the rejects
table with the reason, and the job goes on.
"""
from __future__ import annotations

import time

from hecore.errors import HepixError
from hecore.keys import read_public
from hecore.ops.matching import parse_match
from hecore.ops.spec import parse_ops, raw_range
from hecore.planner import check as check_params
from jobs.tasks.process import match_group
from schemas.manifest import Counts, RunManifest
from schemas.tables import ENCRYPTED_DISTANCES, PARQUET_OPTIONS, REJECTS, spark_schema

from . import runinfo
from .progress import Progress
from .remote import remote_keys
from .runs import ListAccumulator, complete_run, same_key, table_function, worker_report
from .session import build_session, spark_info
from .storage import Output, Storage, join

KEYS = ["tile_y", "tile_x", "channel", "index"]


def find_query(sizes, query: str):
    """The one image ``query`` names: its image id, its source, or its source's file name."""
    hits = [r for r in sizes if query in (r["image_id"], r["source"]) or r["source"].rsplit("/", 1)[-1] == query]
    if len(hits) == 1:
        return hits[0]
    shown = ", ".join(r["source"].rsplit("/", 1)[-1] for r in sizes[:5])
    if not hits:
        raise HepixError(f"match:{query}: no image of the input has that id, source or file name "
                         f"(images include: {shown}{' ...' if len(sizes) > 5 else ''})")
    raise HepixError(f"match:{query}: {len(hits)} images have that file name; give the full source or the "
                     f"image id ({', '.join(r['image_id'] for r in hits[:5])})")


def run_match(args) -> int:
    from pyspark.sql import functions as F

    if len(args.op) != 1:
        raise HepixError("match:QUERY must be the only --op of its run: apply the other ops first, in their "
                         "own `hepix process` run, then match their output")
    try:
        match = parse_match(args.op[0])
    except ValueError as e:
        raise HepixError(str(e)) from None
    with remote_keys(args.keys) as keys:
        material = read_public(keys)
    fingerprint = material.fingerprint()
    run_id, started = runinfo.new_run_id(), runinfo.now()
    spark = build_session("process", args.master, args.conf)
    sc = spark.sparkContext
    storage = Storage(spark)
    out = Output(storage, args.out, run_id)
    try:
        parent = complete_run(storage, args.input, ("encrypt", "process"))
        same_key(parent, fingerprint, args.input)
        if any(op.startswith("match:") for op in parent.ops):
            raise HepixError(f"{args.input} already holds distances, not images")
        done = parse_ops(list(parent.ops))
        try:
            check_params(material.params, done, parent.layout, match)   # scheme, depth, keys, value room
        except ValueError as e:
            raise HepixError(str(e)) from None
        lo, hi = raw_range(done)
        bound = hi - lo
        print(f"hepix process {run_id}: {args.input} -> {args.out}; {match.spec} "
              f"({', '.join(match.metrics)}); key {fingerprint[:16]} (public only)")
        bc = sc.broadcast(material)
        token = f"{run_id}/{bc._jbroadcast.id()}"
        rebuilds = sc.accumulator([], ListAccumulator())
        tasks = sc.accumulator([], ListAccumulator())
        timings = {}
        with Progress(spark, "process", enabled=not args.quiet) as progress:
            df = spark.read.parquet(join(args.input, "ciphertexts"))
            sizes = [r.asDict() for r in df.select("image_id", "source", "image_height", "image_width",
                                                    "image_channels").distinct().orderBy("source").collect()]
            q = find_query(sizes, match.query)
            shape = (q["image_height"], q["image_width"], q["image_channels"])
            others = [r for r in sizes if r["image_id"] != q["image_id"]]
            ok = [r["image_id"] for r in others
                  if (r["image_height"], r["image_width"], r["image_channels"]) == shape]
            rejects = [(run_id, r["source"], "process", "size-mismatch",
                        f"{r['source']} is {r['image_width']}x{r['image_height']}x{r['image_channels']}, the "
                        f"query {q['source']} is {shape[1]}x{shape[0]}x{shape[2]}: distances need equal sizes "
                        "(encrypt both with the same --resize)", None)
                       for r in others if r["image_id"] not in ok]
            query_cts = df.where(F.col("image_id") == q["image_id"]).select(
                *KEYS, F.col("ct").alias("query_ct"))
            pairs = df.where(F.col("image_id").isin(ok)).join(query_cts, KEYS)
            t0 = time.perf_counter()
            progress.stage(f"matching {len(ok)} images against {q['source']}")
            result = pairs.groupBy("image_id").applyInArrow(
                table_function(match_group, token=token, broadcast=bc, metrics=list(match.metrics),
                               query_id=q["image_id"], query_source=q["source"], bound=bound, run_id=run_id,
                               rebuilds=rebuilds),
                spark_schema(ENCRYPTED_DISTANCES))
            result.write.options(**PARQUET_OPTIONS["ciphertexts"]).mode("overwrite").parquet(
                out.table("distances"))
            rejects = [tuple(r) + (None,) * (len(REJECTS) - len(r)) for r in rejects]   # no row keys
            spark.createDataFrame(rejects, spark_schema(REJECTS)).write.options(
                **PARQUET_OPTIONS["rejects"]).mode("overwrite").parquet(out.table("rejects"))
            timings["process_seconds"] = time.perf_counter() - t0
            n = spark.read.parquet(out.table("distances")).count()
        if n != len(ok) * len(match.metrics):
            raise HepixError(f"internal error: {n} distances for {len(ok)} images x {len(match.metrics)} metrics; "
                             "nothing was committed")
        counts = Counts(images_in=len(sizes), images_encrypted=len(ok), images_rejected=len(rejects),
                        ciphertexts=n, rejects=len(rejects))
        manifest = RunManifest(
            job="process", run_id=run_id, status="complete", created=started.isoformat(),
            finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=parent.layout,
            strategy=parent.strategy, security=parent.security, preset=parent.preset, params=parent.params,
            key_fingerprint=fingerprint, ops=list(parent.ops) + [match.spec],
            options={**parent.options, "match": {"query": q["source"], "query_image_id": q["image_id"],
                                                 "metrics": list(match.metrics), "bound": bound}},
            counts=counts, timings=timings, workers=worker_report(rebuilds, tasks),
            versions=runinfo.versions(), spark=spark_info(spark),
            parent={"job": parent.job, "run_id": parent.run_id, "output": parent.output})
        out.commit(manifest, ["distances", "rejects"])
    except BaseException:
        out.abort()
        raise
    finally:
        spark.stop()
    print(f"{n} encrypted distances ({len(ok)} images x {', '.join(match.metrics)}) from {q['source']} in "
          f"{timings['process_seconds']:.1f} s; {len(rejects)} rejected; decrypt them with `hepix decrypt`")
    return 0


def decrypt_distances(spark, ctx, source_dir: str, run_id: str) -> list[dict]:
    """The data owner's side: the encrypted distances of a match run, decrypted (on the driver:
    one ciphertext per image and metric)."""
    from hecore.ops.matching import l1_poly_error

    rows = []
    for r in spark.read.parquet(join(source_dir, "distances")).orderBy("source", "metric").collect():
        t = time.perf_counter()
        raw = float(ctx.decrypt_slots(r["ct"], 1)[0])
        secs = time.perf_counter() - t
        # per pixel: the polynomial's error (in units of D) x D x post_scale = x distance_scale / parts
        l1_err = l1_poly_error() * abs(r["distance_scale"]) / r["parts"] if r["metric"] == "l1" else None
        rows.append({"run_id": run_id, "query_source": r["query_source"], "source": r["source"],
                     "metric": r["metric"], "distance": raw * r["distance_scale"], "l1_poly_max_error": l1_err,
                     "parts": r["parts"], "process_seconds": r["process_seconds"], "decrypt_seconds": secs})
    return rows
