"""`hepix process --op match:QUERY`: encrypted distances from one image to every other (public keys only),
and `hepix decrypt` of them (the key owner's side).

Every ciphertext of an image is joined with the query's ciphertext of the same
tile, channel and index; one task per image turns the pairs into one
encrypted distance per metric (hecore.ops.matching).  Images whose size differs
from the query's cannot be compared pixel by pixel: they go to the rejects
table with the reason, and the job goes on.

The cluster knows images by their ids only: ``match:QUERY`` names the query by its image id (the
owner finds it in its owner map, ``OWNER/images``), and the encrypted distances carry ids, not
names.  The owner's decrypt names them from the owner map (``--owner``).
"""
from __future__ import annotations

import time

from hecore.errors import HepixError
from hecore.ops.spec import parse_ops, raw_range
from hecore.planner import check as check_params
from schemas.manifest import Counts
from schemas.tables import DISTANCES, ENCRYPTED_DISTANCES, spark_schema
from tasks.process import match_group

from .runtime.console import table
from .runtime.frames import driver_frame
from .runtime.progress import Progress
from .runtime.rowcheck import reject_row
from .runtime.runs import check_recordable_ops, exit_status, open_run, table_function

KEYS = ["tile_y", "tile_x", "channel", "index"]


def find_query(sizes, query: str):
    """The one image ``query`` names: its image id (the table knows no names; the owner map has the ids)."""
    hits = [r for r in sizes if r["image_id"] == query]
    if len(hits) == 1:
        return hits[0]
    shown = ", ".join(r["image_id"] for r in sizes[:3])
    raise HepixError(f"match:{query}: no image of the input has that id (the table names images by id only; "
                     f"the owner map's images/ table says which id is which file; ids here include: "
                     f"{shown}{' ...' if len(sizes) > 3 else ''})")


def query_and_rejects(run, df, query: str):
    """The query image's row of sizes, the ids of the images of its size, and a rejects row for every other."""
    sizes = [r.asDict() for r in df.select("image_id", "image_height", "image_width",
                                            "image_channels").distinct().orderBy("image_id").collect()]
    q = find_query(sizes, query)
    shape = (q["image_height"], q["image_width"], q["image_channels"])
    others = [r for r in sizes if r["image_id"] != q["image_id"]]
    ok = [r["image_id"] for r in others if (r["image_height"], r["image_width"], r["image_channels"]) == shape]
    rejects = [reject_row(run.run_id, "process", r["image_id"], "size-mismatch",
                          f"{r['image_width']}x{r['image_height']}x{r['image_channels']}, the query {q['image_id']} is "
                          f"{shape[1]}x{shape[0]}x{shape[2]}: distances need equal sizes (encrypt both with the same "
                          "--resize)", {"image_id": r["image_id"]})
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
        check_recordable_ops(parent, [match.spec])
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
            progress.stage("checking the input rows")
            checked = run.checked_input("process", keys=run.keys.for_checks())
            df = checked.df
            sizes, q, ok, rejects = query_and_rejects(run, df, match.query)
            rejects = checked.rejects + rejects
            query_cts = df.where(F.col("image_id") == q["image_id"]).select(*KEYS, F.col("ct").alias("query_ct"))
            pairs = df.where(F.col("image_id").isin(ok)).join(query_cts, KEYS)
            t0 = time.perf_counter()
            progress.stage(f"matching {len(ok)} images against {q['image_id']}")
            result = pairs.groupBy("image_id").applyInArrow(
                table_function(match_group, token=token, broadcast=bc, metrics=list(match.metrics),
                               query_id=q["image_id"], bound=bound, run_id=run.run_id, rebuilds=run.rebuilds),
                spark_schema(ENCRYPTED_DISTANCES))
            run.write(result, "distances", "ciphertexts")
            run.write_rejects(rejects)
            run.timings["process_seconds"] = time.perf_counter() - t0
            n = run.spark.read.parquet(run.out.table("distances")).count()
        if n != len(ok) * len(match.metrics):
            raise HepixError(f"internal error: {n} distances for {len(ok)} images x {len(match.metrics)} metrics; "
                             "nothing was committed")
        counts = Counts(images_in=checked.images, images_encrypted=len(ok),
                        images_rejected=checked.images - len(ok) - 1, ciphertexts=n, rejects=len(rejects))
        files, checksums = run.describe({"distances": False, "rejects": False})
        manifest = run.manifest(
            ops=list(parent.ops) + [match.spec], counts=counts, files=files, checksums=checksums,
            options={**parent.options, "match": {"query": q["image_id"], "query_image_id": q["image_id"],
                                                 "metrics": list(match.metrics), "bound": bound}})
        run.commit(manifest, ["distances", "rejects"])
    print(f"{n} encrypted distances ({len(ok)} images x {', '.join(match.metrics)}) from image {q['image_id']} in "
          f"{run.timings['process_seconds']:.1f} s; {len(rejects)} rejected; decrypt them with `hepix decrypt`")
    return exit_status(args, len(rejects))


def decrypt(run) -> int:
    """``hepix decrypt`` of a match run (the key owner's side): its distances in the clear, in the
    ``distances`` table, one row per image and metric (``--flood-std`` adds noise flooding); each
    encrypted distance is checked first (:func:`decrypt_distances`), a bad one is a rejects row."""
    import numpy as np

    args, parent = run.args, run.parent
    t0 = time.perf_counter()
    rows, rejects = decrypt_distances(run)
    if args.flood_std:
        from hecore.flooding import flood

        for r, noisy in zip(rows, flood(np.array([r["distance"] for r in rows]), args.flood_std)):
            r["distance"] = float(noisy)
    run.write(driver_frame(run.spark, DISTANCES, rows), "distances")
    run.write_rejects(rejects)
    secs = time.perf_counter() - t0
    run.timings["decrypt_seconds"] = secs
    images = {r["image_id"] for r in rows} | {r["image_id"] for r in rejects if r.get("image_id")}
    bad = {r["image_id"] for r in rejects if r.get("image_id")}
    files, checksums = run.describe({"distances": False, "rejects": False})
    manifest = run.manifest(
        options={**parent.options, "flood_std": args.flood_std, "owner": run.owner is not None},
        counts=Counts(images_in=len(images), images_decrypted=len(images - bad), images_rejected=len(bad),
                      ciphertexts=len(rows), rejects=len(rejects)), workers={}, files=files, checksums=checksums)
    run.commit(manifest, ["distances", "rejects"])
    print(table(rows, [("query_source", "query", ""), ("source", "image", ""), ("metric", "metric", ""),
                       ("distance", "distance", ",.2f"), ("l1_poly_max_error", "L1 approx. bound", ",.0f"),
                       ("decrypt_seconds", "decrypt s", ".3f")]))
    print(f"decrypted {len(rows)} distances in {secs:.1f} s; table in {args.out}/distances/"
          + (f"; {len(rejects)} rejected, listed in {args.out}/rejects/" if rejects else ""))
    return exit_status(args, len(rejects))


def decrypt_distances(run) -> tuple[list[dict], list[dict]]:
    """The data owner's side: the encrypted distances of a match run, checked (jobs/runtime/distancecheck.py)
    and decrypted one at a time as Spark streams them (never collected whole); names from the owner map
    when there is one.  An image with a bad row, or two rows of one metric, has all its distances left out."""
    from hecore.ops.matching import l1_poly_error

    from .runtime.distancecheck import DistanceExpect, row_problem, value_problem
    from .runtime.rowcheck import RejectLog

    ctx, run_id, owner = run.keys.context(), run.run_id, run.owner
    expect = DistanceExpect.for_run(run)
    most = len(owner.images()) * len(expect.metrics) if owner is not None else None
    df, rejects = run.input_table("distances", ENCRYPTED_DISTANCES, max_rows=most)
    known = owner.images() if owner is not None else {}
    name = (lambda i: known[i].source if i in known else i)
    checker = run.keys.checker()
    log = RejectLog(rejects)
    found: dict[tuple[str, str], dict] = {}
    bad: set[str] = set()
    for r in df.toLocalIterator():
        r = r.asDict()
        iid = r["image_id"] if isinstance(r["image_id"], str) else ""
        problem = row_problem(r, expect, owner)
        if problem is None and (iid, r["metric"]) in found:
            problem = ("duplicate-row", f"a second {r['metric']} distance for this image")
        if problem is None:
            p = checker.problem(r["ct"])
            problem = (p.reason, p.detail) if p is not None else None
        if problem is None:
            t = time.perf_counter()
            distance = float(ctx.decrypt_slots(r["ct"], 1)[0]) * r["distance_scale"]
            secs = time.perf_counter() - t
            problem = value_problem(distance, r, expect, owner)
        if problem is not None:
            log.add(reject_row(run_id, "decrypt", name(iid), *problem, {"image_id": iid[:80] or None}))
            bad.add(iid)
            continue
        # per pixel: the polynomial's error (in units of D) x D x post_scale = x distance_scale / parts
        l1_err = l1_poly_error() * abs(r["distance_scale"]) / r["parts"] if r["metric"] == "l1" else None
        found[(iid, r["metric"])] = {
            "run_id": run_id, "query_image_id": r["query_image_id"], "query_source": name(r["query_image_id"]),
            "image_id": iid, "source": name(iid), "metric": r["metric"], "distance": distance,
            "l1_poly_max_error": l1_err, "parts": r["parts"], "process_seconds": r["process_seconds"],
            "decrypt_seconds": secs}
    log.close(run_id, "decrypt")
    rows = [found[k] for k in sorted(found) if k[0] not in bad]
    return rows, rejects
