"""`hepix process --op match:QUERY`: encrypted distances from one image to every other (public keys only),
and `hepix decrypt` of them (the key owner's side).

Every ciphertext of an image is joined with the query's ciphertext of the same
tile, channel and index; one task per image turns the pairs into one
encrypted distance per metric (hecore.ops.matching).  Images whose size differs
from the query's cannot be compared pixel by pixel: they go to the rejects
table with the reason, and the job goes on.
"""
from __future__ import annotations

import time

from hecore.errors import HepixError
from hecore.ops.spec import parse_ops, raw_range
from hecore.planner import check as check_params
from jobs.tasks.process import match_group
from schemas.manifest import Counts
from schemas.tables import DISTANCES, ENCRYPTED_DISTANCES, spark_schema

from .console import table
from .progress import Progress
from .runs import open_run, table_function
from .storage import join
from .tables import write_rejects

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


def query_and_rejects(run, df, query: str):
    """The query image's row of sizes, the ids of the images of its size, and a rejects row for every other."""
    sizes = [r.asDict() for r in df.select("image_id", "source", "image_height", "image_width",
                                            "image_channels").distinct().orderBy("source").collect()]
    q = find_query(sizes, query)
    shape = (q["image_height"], q["image_width"], q["image_channels"])
    others = [r for r in sizes if r["image_id"] != q["image_id"]]
    ok = [r["image_id"] for r in others if (r["image_height"], r["image_width"], r["image_channels"]) == shape]
    rejects = [{"run_id": run.run_id, "source": r["source"], "stage": "process", "reason": "size-mismatch",
                "detail": f"{r['source']} is {r['image_width']}x{r['image_height']}x{r['image_channels']}, the "
                          f"query {q['source']} is {shape[1]}x{shape[0]}x{shape[2]}: distances need equal sizes "
                          "(encrypt both with the same --resize)"}
               for r in others if r["image_id"] not in ok]
    return sizes, q, ok, rejects


def run(args, chain) -> int:
    """``hepix process --op match:QUERY``: one encrypted distance per image and metric (``chain.match``)."""
    from pyspark.sql import functions as F

    match = chain.match
    with open_run(args, "process") as run:
        parent = run.parent
        if any(op.startswith("match:") for op in parent.ops):
            raise HepixError(f"{args.input} already holds distances, not images")
        done = parse_ops(list(parent.ops))
        try:
            check_params(run.keys.params, done, parent.layout, match)   # scheme, depth, keys, value room
        except ValueError as e:
            raise HepixError(str(e)) from None
        lo, hi = raw_range(done)
        bound = hi - lo
        print(f"hepix process {run.run_id}: {args.input} -> {args.out}; {match.spec} "
              f"({', '.join(match.metrics)}); key {run.fingerprint[:16]} (public only)")
        bc, token = run.broadcast(run.keys)
        with Progress(run.spark, "process", enabled=not args.quiet) as progress:
            df = run.spark.read.parquet(join(args.input, "ciphertexts"))
            sizes, q, ok, rejects = query_and_rejects(run, df, match.query)
            query_cts = df.where(F.col("image_id") == q["image_id"]).select(*KEYS, F.col("ct").alias("query_ct"))
            pairs = df.where(F.col("image_id").isin(ok)).join(query_cts, KEYS)
            t0 = time.perf_counter()
            progress.stage(f"matching {len(ok)} images against {q['source']}")
            result = pairs.groupBy("image_id").applyInArrow(
                table_function(match_group, token=token, broadcast=bc, metrics=list(match.metrics),
                               query_id=q["image_id"], query_source=q["source"], bound=bound, run_id=run.run_id,
                               rebuilds=run.rebuilds),
                spark_schema(ENCRYPTED_DISTANCES))
            run.write(result, "distances", "ciphertexts")
            write_rejects(run.spark, rejects, run.out.table("rejects"))
            run.timings["process_seconds"] = time.perf_counter() - t0
            n = run.spark.read.parquet(run.out.table("distances")).count()
        if n != len(ok) * len(match.metrics):
            raise HepixError(f"internal error: {n} distances for {len(ok)} images x {len(match.metrics)} metrics; "
                             "nothing was committed")
        counts = Counts(images_in=len(sizes), images_encrypted=len(ok), images_rejected=len(rejects),
                        ciphertexts=n, rejects=len(rejects))
        manifest = run.manifest(
            ops=list(parent.ops) + [match.spec], counts=counts,
            options={**parent.options, "match": {"query": q["source"], "query_image_id": q["image_id"],
                                                 "metrics": list(match.metrics), "bound": bound}})
        run.commit(manifest, ["distances", "rejects"])
    print(f"{n} encrypted distances ({len(ok)} images x {', '.join(match.metrics)}) from {q['source']} in "
          f"{run.timings['process_seconds']:.1f} s; {len(rejects)} rejected; decrypt them with `hepix decrypt`")
    return 0


def decrypt(run) -> int:
    """``hepix decrypt`` of a match run (the key owner's side): its distances in the clear, in the
    ``distances`` table, one row per image and metric (``--flood-std`` adds noise flooding)."""
    import numpy as np

    args, parent = run.args, run.parent
    t0 = time.perf_counter()
    rows = decrypt_distances(run.spark, run.keys, args.input, run.run_id)
    if args.flood_std:
        from hecore.flooding import flood

        for r, noisy in zip(rows, flood(np.array([r["distance"] for r in rows]), args.flood_std)):
            r["distance"] = float(noisy)
    run.write(run.spark.createDataFrame(rows, spark_schema(DISTANCES)), "distances")
    secs = time.perf_counter() - t0
    run.timings["decrypt_seconds"] = secs
    manifest = run.manifest(
        options={**parent.options, "flood_std": args.flood_std},
        counts=Counts(images_in=parent.counts.images_in, images_decrypted=len({r["source"] for r in rows}),
                      ciphertexts=len(rows)), workers={})
    run.commit(manifest, ["distances"])
    print(table(rows, [("query_source", "query", ""), ("source", "image", ""), ("metric", "metric", ""),
                       ("distance", "distance", ",.2f"), ("l1_poly_max_error", "L1 approx. bound", ",.0f"),
                       ("decrypt_seconds", "decrypt s", ".3f")]))
    print(f"decrypted {len(rows)} distances in {secs:.1f} s; table in {args.out}/distances/")
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
