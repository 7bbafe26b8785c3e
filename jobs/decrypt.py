"""`hepix decrypt`: ciphertexts -> images and a metrics table (the data owner's job).

Decrypts every ciphertext, reassembles the images (applying the public
post-scale of the ops), and scores them against the original images given
with ``--images`` -- or, when ops were applied, against the originals with
the same ops applied in plaintext and the same single clipping at the end.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np

from hecore.errors import HepixError
from hecore.keys import load_secret
from jobs.tasks.decode import DecodeOptions, originals_partition
from jobs.tasks.decrypt import SecretPayload, assemble_group, decrypt_partition
from jobs.tasks.metrics import metrics_partition
from schemas.manifest import Counts, RunManifest
from schemas.stages import DECRYPTED, IMAGES, ORIGINALS
from schemas.tables import METRICS, PARQUET_OPTIONS, spark_schema

from . import runinfo
from .console import table
from .encrypt import DEFAULT_MAX_PIXELS, read_images
from .progress import Progress
from .remote import remote_keys
from .runs import (
    ListAccumulator,
    add_spark_arguments,
    complete_run,
    same_key,
    table_function,
    worker_report,
)
from .session import build_session, spark_info
from .storage import Output, Storage, join
from .verify import bad_rows, describe_table, table_checksums, write_rejects


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="key directory WITH the secret key")
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` or `hepix process`")
    p.add_argument("--out", required=True, help="output directory: metrics/, _manifest.json (and images/)")
    p.add_argument("--images", help="the original images (as given to encrypt) to score against")
    p.add_argument("--png", action="store_true", help="also write the decrypted images as PNG (local --out only)")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --images")
    p.add_argument("--flood-std", type=float, default=0.0, metavar="S",
                   help="noise flooding before anything leaves the key owner (Li-Micciancio 2021): add Gaussian "
                        "noise of standard deviation S (pixel levels; distance units for match runs) to every "
                        "decrypted value; 0 = off (default). See README, 'Keys and what leaks'")
    add_spark_arguments(p)


def run(args) -> int:
    from pyspark.sql import functions as F

    if not (args.flood_std >= 0 and args.flood_std != float("inf")):
        raise HepixError(f"--flood-std {args.flood_std}: give a finite standard deviation >= 0")
    with remote_keys(args.keys, secret=True) as keys:
        ctx = load_secret(keys)
    fingerprint = ctx.fingerprint
    run_id, started = runinfo.new_run_id(), runinfo.now()
    spark = build_session("decrypt", args.master, args.conf)
    sc = spark.sparkContext
    storage = Storage(spark)
    out = Output(storage, args.out, run_id)
    try:
        parent = complete_run(storage, args.input, ("encrypt", "process"))
        same_key(parent, fingerprint, args.input)          # before any work
        print(f"hepix decrypt {run_id}: {args.input} -> {args.out}; key {fingerprint[:16]}; "
              f"ops {' | '.join(parent.ops) or 'none'}")
        if parent.ops and parent.ops[-1].startswith("match:"):
            return _decrypt_match(args, spark, ctx, out, parent, run_id, started)
        if parent.layout == "digits":
            if not (parent.ops and parent.ops[-1].startswith("infer:")):
                raise HepixError(f"{args.input} holds encrypted digits no model has run on; "
                                 "run `hepix process --op infer:MODEL` first")
            from .infer import decrypt_digits

            return decrypt_digits(args, spark, ctx, out, parent, run_id, started)
        bc = sc.broadcast(SecretPayload(public=ctx.public, secret_key=ctx.secret_key_bytes()))
        token = f"{run_id}/{bc._jbroadcast.id()}"
        rebuilds = sc.accumulator([], ListAccumulator())
        tasks = sc.accumulator([], ListAccumulator())
        png_dir = None
        if args.png:
            if "://" in args.out and not args.out.startswith("file://"):
                raise HepixError("--png writes image files with plain file I/O; give a local --out")
            png_dir = os.path.join(args.out.removeprefix("file://"), "_staging", run_id, "images")
            os.makedirs(png_dir, exist_ok=True)
        timings = {}
        with Progress(spark, "decrypt", enabled=not args.quiet) as progress:
            t0 = time.perf_counter()
            progress.stage("decrypting")
            cts = spark.read.parquet(join(args.input, "ciphertexts"))
            rejects, bad_ids, _ = bad_rows(spark, cts, run_id, "decrypt")
            if bad_ids:     # the images with a bad row are left out whole, and each bad row reported
                cts = cts.where(~F.col("image_id").isin(sorted(bad_ids)))
            values = cts.mapInArrow(functools.partial(decrypt_partition, token=token, broadcast=bc,
                                                      rebuilds=rebuilds, tasks=tasks, flood_std=args.flood_std),
                                    spark_schema(DECRYPTED))
            images = values.groupBy("image_id").applyInArrow(table_function(assemble_group), spark_schema(IMAGES))
            if args.images:
                opts = parent.options
                dopts = DecodeOptions(1, 1, opts.get("resize"), tuple(opts.get("conversions", [])),
                                      opts.get("max_pixels", DEFAULT_MAX_PIXELS))
                originals = read_images(spark, args.images, args.recursive).mapInArrow(
                    functools.partial(originals_partition, opts=dopts), spark_schema(ORIGINALS))
                images = images.join(originals.dropDuplicates(["content_sha256"]), "content_sha256", "left")
            else:
                for name, type_ in zip(ORIGINALS.names[1:], ("binary", "int", "int", "int")):
                    images = images.withColumn(name, F.lit(None).cast(type_))
            metrics = images.mapInArrow(functools.partial(metrics_partition, run_id=run_id, png_dir=png_dir),
                                        spark_schema(METRICS))
            metrics.write.options(**PARQUET_OPTIONS["metrics"]).mode("overwrite").parquet(out.table("metrics"))
            timings["decrypt_seconds"] = time.perf_counter() - t0
            write_rejects(spark, rejects, out.table("rejects"))
            files = {"metrics": describe_table(spark, storage, out.table("metrics"), checksums=False),
                     "rejects": describe_table(spark, storage, out.table("rejects"), checksums=False)}
            rows = [r.asDict() for r in spark.read.parquet(out.table("metrics")).orderBy("source").collect()]
        n_cts = sum(r["ciphertexts"] for r in rows)
        counts = Counts(images_in=parent.counts.images_encrypted, images_decrypted=len(rows), ciphertexts=n_cts,
                        ciphertext_bytes=sum(r["ciphertext_bytes"] for r in rows), images_rejected=len(bad_ids),
                        rejects=len(rejects))
        manifest = RunManifest(
            job="decrypt", run_id=run_id, status="complete", created=started.isoformat(),
            finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=parent.layout,
            strategy=parent.strategy, security=parent.security, preset=parent.preset, params=parent.params,
            key_fingerprint=fingerprint, ops=parent.ops,
            options={**parent.options, "images": args.images, "flood_std": args.flood_std},
            counts=counts, timings=timings, workers=worker_report(rebuilds, tasks),
            versions=runinfo.versions(), spark=spark_info(spark),
            parent={"job": parent.job, "run_id": parent.run_id, "output": parent.output},
            files=files, checksums=table_checksums(files))
        out.commit(manifest, ["metrics", "rejects"] + (["images"] if png_dir else []))
    except BaseException:
        out.abort()
        raise
    finally:
        spark.stop()
    print(table(rows, [("source", "image", ""), ("ops", "ops", ""), ("reference", "reference", ""),
                       ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"), ("ssim", "SSIM", ".4f"),
                       ("max_abs_err", "max err", ".1e"), ("exact_fraction", "exact", ".4f"),
                       ("ciphertexts", "cts", "d"), ("decrypt_seconds", "decrypt s", ".2f")]))
    secs = timings["decrypt_seconds"]
    print(f"decrypted {counts.images_decrypted} images ({n_cts} ciphertexts) in {secs:.1f} s; "
          f"metrics in {args.out}/metrics/")
    if rejects:
        print(f"{len(rejects)} ciphertext rows failed their checks; their {len(bad_ids)} images were not decrypted "
              f"and the rows are listed in {args.out}/rejects/")
    return 0


def _decrypt_match(args, spark, ctx, out, parent, run_id, started) -> int:
    """A match run: decrypt its distances into the ``distances`` table (one row per image and metric)."""
    from schemas.tables import DISTANCES

    from .match import decrypt_distances

    t0 = time.perf_counter()
    rows = decrypt_distances(spark, ctx, args.input, run_id)
    if args.flood_std:
        from hecore.flooding import flood

        for r, noisy in zip(rows, flood(np.array([r["distance"] for r in rows]), args.flood_std)):
            r["distance"] = float(noisy)
    spark.createDataFrame(rows, spark_schema(DISTANCES)).write.options(**PARQUET_OPTIONS["distances"]).mode(
        "overwrite").parquet(out.table("distances"))
    secs = time.perf_counter() - t0
    manifest = RunManifest(
        job="decrypt", run_id=run_id, status="complete", created=started.isoformat(),
        finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=parent.layout,
        strategy=parent.strategy, security=parent.security, preset=parent.preset, params=parent.params,
        key_fingerprint=ctx.fingerprint, ops=parent.ops, options={**parent.options, "flood_std": args.flood_std},
        counts=Counts(images_in=parent.counts.images_in, images_decrypted=len({r["source"] for r in rows}),
                      ciphertexts=len(rows)),
        timings={"decrypt_seconds": secs}, versions=runinfo.versions(), spark=spark_info(spark),
        parent={"job": parent.job, "run_id": parent.run_id, "output": parent.output})
    out.commit(manifest, ["distances"])
    print(table(rows, [("query_source", "query", ""), ("source", "image", ""), ("metric", "metric", ""),
                       ("distance", "distance", ",.2f"), ("l1_poly_max_error", "L1 approx. bound", ",.0f"),
                       ("decrypt_seconds", "decrypt s", ".3f")]))
    print(f"decrypted {len(rows)} distances in {secs:.1f} s; table in {args.out}/distances/")
    return 0
