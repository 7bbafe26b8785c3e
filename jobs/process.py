"""`hepix process`: operations on ciphertexts, with public keys only.

Runs where the data owner's secret must never be: it refuses a key directory
that holds a secret key, and checks the input's key fingerprint before any
work, and checks that the key's parameters can run the ops (the planner
names a preset that can when they cannot).

Pixel layout: pointwise ops (brightness, contrast, watermark) are one pass
over the rows; the mean filter sends each ciphertext to its tile and to the
neighbour tiles whose halo needs it, then sums each output window per tile.
Packed layout: every op works within one ciphertext (the tile carries its
halo), so the whole chain is one pass over the rows.
"""
from __future__ import annotations

import functools
import time

import pyarrow as pa

from hecore.errors import HepixError
from hecore.keys import read_public
from hecore.ops.packed import check_packed_chain
from hecore.ops.spec import MeanFilter, parse_ops
from hecore.planner import check as check_params
from jobs.tasks.process import (
    mean_filter_group,
    packed_partition,
    pointwise_partition,
    scatter_partition,
)
from schemas.manifest import Counts, RunManifest
from schemas.stages import HALO_COLUMNS
from schemas.tables import CIPHERTEXTS, PARQUET_OPTIONS, spark_schema

from . import runinfo
from .progress import Progress
from .remote import remote_keys
from .runs import (
    ListAccumulator,
    add_spark_arguments,
    complete_run,
    refuse_secret_key_directory,
    same_key,
    table_function,
    worker_report,
)
from .session import build_session, spark_info
from .storage import Output, Storage, join
from .verify import bad_rows, describe_table, table_checksums, write_rejects


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="PUBLIC key directory (one with secret.key is refused)")
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` (or of process)")
    p.add_argument("--out", required=True, help="output directory for the processed ciphertexts")
    p.add_argument("--op", action="append", required=True, metavar="SPEC",
                   help="brightness:B, contrast:F, watermark:X,Y,V, meanfilter:K or "
                        "dftfilter:lowpass=R[,levels=L][,stages=fold|three|circulant] (CKKS, packed, halo 0: "
                        "a low-pass filter per tile through the encrypted DFT); repeat to chain, applied "
                        "in order. Or, alone: match:QUERY[,l2|,l1] -- encrypted distances from the image QUERY "
                        "(its id or file name) to every other image; or, alone, on `hepix encrypt-digits` "
                        "output: infer:MODEL[,task=01|all] with MODEL logreg or tinycnn")
    add_spark_arguments(p)


def check_ops_fit(df, ops) -> None:
    """Refuse ops that do not fit some image (a watermark outside it), naming the images."""
    from hecore.ops.spec import Watermark

    marks = [op for op in ops if isinstance(op, Watermark)]
    if not marks:
        return
    sizes = df.select("source", "image_width", "image_height").distinct().collect()   # no ct column read
    for op in marks:
        outside = [r for r in sizes if not (0 <= op.x < r["image_width"] and 0 <= op.y < r["image_height"])]
        if outside:
            shown = ", ".join(f"{r['source']} ({r['image_width']}x{r['image_height']})" for r in outside[:3])
            more = f" and {len(outside) - 3} more" if len(outside) > 3 else ""
            raise HepixError(f"{op.spec}: pixel (x={op.x}, y={op.y}) lies outside {len(outside)} image(s): "
                             f"{shown}{more}; choose a pixel inside every image")


def with_tiles(ops, parent):
    """A frequency-domain filter (hecore.ops.dft) works tile by tile: record the input's tile in its
    spec (so that decrypt's reference filters the same tiles), and check the tiles suit it."""
    import dataclasses

    from hecore.ops.dft import DftFilter
    from hecore.ops.packed import check_dft_tiles
    from hecore.params import Params

    out = []
    for op in ops:
        if isinstance(op, DftFilter):
            if parent.layout != "packed":
                raise ValueError(f"{op.spec} runs in the packed layout only; encrypt with --layout packed")
            th, tw = (int(v) for v in parent.options.get("tile", (0, 0)))
            check_dft_tiles(op, th, tw, int(parent.options.get("halo", 0)), Params.from_json(parent.params).slots)
            op = dataclasses.replace(op, tile=(th, tw))
        out.append(op)
    return out


def run(args) -> int:
    from pyspark.sql import functions as F

    refuse_secret_key_directory(args.keys)
    if any(spec.strip().lower().startswith("match:") for spec in args.op):
        from .match import run_match

        return run_match(args)
    if any(spec.strip().lower().startswith("infer:") for spec in args.op):
        from .infer import run_infer

        return run_infer(args)
    try:
        ops = parse_ops(args.op)
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
        same_key(parent, fingerprint, args.input)             # before any work
        try:
            done = parse_ops(list(parent.ops))
            ops = with_tiles(ops, parent)
            check_params(material.params, done + ops, parent.layout)
            if parent.layout != "pixel":
                check_packed_chain(done, ops, int(parent.options.get("halo", 0)))
        except ValueError as e:
            raise HepixError(str(e)) from None
        print(f"hepix process {run_id}: {args.input} -> {args.out}; ops {' | '.join(o.spec for o in ops)}; "
              f"key {fingerprint[:16]} (public only)")
        bc = sc.broadcast(material)
        token = f"{run_id}/{bc._jbroadcast.id()}"
        rebuilds = sc.accumulator([], ListAccumulator())
        tasks = sc.accumulator([], ListAccumulator())
        timings = {}
        with Progress(spark, "process", enabled=not args.quiet) as progress:
            df = spark.read.parquet(join(args.input, "ciphertexts"))
            progress.stage("checking ciphertext checksums")
            rejects, bad_ids, bad_n = bad_rows(spark, df, run_id, "process")
            if bad_ids:     # the images with a bad row are left out whole, and each bad row reported
                df = df.where(~F.col("image_id").isin(sorted(bad_ids)))
            check_ops_fit(df, ops)                                # before any work
            schema = spark_schema(CIPHERTEXTS)
            if parent.layout != "pixel":        # packed layouts: the whole chain within each ciphertext, one pass
                df = df.mapInArrow(functools.partial(packed_partition, token=token, broadcast=bc,
                                                     specs=[o.spec for o in ops], run_id=run_id,
                                                     rebuilds=rebuilds, tasks=tasks), schema)
                ops_pixel = []
            else:
                ops_pixel = ops
            for op in ops_pixel:
                if isinstance(op, MeanFilter):
                    halo_schema = spark_schema(pa.schema(list(CIPHERTEXTS) + [
                        pa.field(name, type_, nullable=False) for name, type_ in HALO_COLUMNS]))
                    scattered = df.mapInArrow(functools.partial(scatter_partition, halo=op.halo), halo_schema)
                    df = (scattered.groupBy("image_id", "channel", "target_ty", "target_tx")
                          .applyInArrow(table_function(mean_filter_group, token=token, broadcast=bc, k=op.k,
                                                      spec=op.spec, run_id=run_id, rebuilds=rebuilds),
                                        schema))
                else:
                    df = df.mapInArrow(functools.partial(pointwise_partition, token=token, broadcast=bc,
                                                         spec=op.spec, run_id=run_id, rebuilds=rebuilds,
                                                         tasks=tasks), schema)
            t0 = time.perf_counter()
            progress.stage("processing")
            df.write.options(**PARQUET_OPTIONS["ciphertexts"]).mode("overwrite").parquet(out.table("ciphertexts"))
            timings["process_seconds"] = time.perf_counter() - t0
            write_rejects(spark, rejects, out.table("rejects"))
            written = spark.read.parquet(out.table("ciphertexts"))
            stats = written.agg(F.count("*").alias("n"), F.countDistinct("image_id").alias("images")).collect()[0]
            files = {"ciphertexts": describe_table(spark, storage, out.table("ciphertexts"), checksums=True),
                     "rejects": describe_table(spark, storage, out.table("rejects"), checksums=False)}
        counts = Counts(images_in=parent.counts.images_encrypted, images_encrypted=int(stats["images"]),
                        ciphertexts=int(stats["n"]),
                        ciphertext_bytes=int(stats["n"]) * (parent.counts.ciphertext_bytes //
                                                             max(1, parent.counts.ciphertexts)))
        counts.rejects = len(rejects)
        counts.images_rejected = len(bad_ids)
        if counts.ciphertexts != parent.counts.ciphertexts - bad_n:
            raise HepixError(f"internal error: {parent.counts.ciphertexts} ciphertexts in ({bad_n} of them left out "
                             f"with their images), {counts.ciphertexts} out; nothing was committed")
        manifest = RunManifest(
            job="process", run_id=run_id, status="complete", created=started.isoformat(),
            finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=parent.layout,
            strategy=parent.strategy, security=parent.security, preset=parent.preset, params=parent.params,
            key_fingerprint=fingerprint, ops=list(parent.ops) + [o.spec for o in ops], options=parent.options,
            counts=counts, timings=timings, workers=worker_report(rebuilds, tasks),
            versions=runinfo.versions(), spark=spark_info(spark),
            parent={"job": parent.job, "run_id": parent.run_id, "output": parent.output},
            files=files, checksums=table_checksums(files))
        out.commit(manifest, ["ciphertexts", "rejects"])
    except BaseException:
        out.abort()
        raise
    finally:
        spark.stop()
    secs = timings["process_seconds"]
    print(f"processed {counts.ciphertexts} ciphertexts of {counts.images_encrypted} images in {secs:.1f} s "
          f"({counts.ciphertexts / secs:,.0f} ciphertexts/s); ops now: {' | '.join(manifest.ops)}")
    if rejects:
        print(f"{len(rejects)} ciphertext rows failed their checks; their {len(bad_ids)} images were left out and "
              f"the rows are listed in {args.out}/rejects/")
    return 0
