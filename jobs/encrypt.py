"""`hepix encrypt`: images -> ciphertexts/, rejects/ and _manifest.json.

Thin: parse -> session -> decode tiles on the executors -> (scan) -> broadcast
the strategy's cache once -> encrypt tiles with hecore -> write -> commit.
Encryption needs only the public key; the secret key file is never opened -- except with
``--encryption symmetric``, the key owner's fast path (hecore.symmetric), which needs it.
"""
from __future__ import annotations

import functools
import logging
import os
import time

import numpy as np
import pyarrow.parquet as pq

from hecore.errors import HepixError
from hecore.images import CONVERSIONS
from hecore.keys import read_public
from hecore.packed import check_tile_fits, default_tile
from hecore.strategies import security_of, strategy_class, strategy_names
from hecore.symmetric import COMPRESSIONS, DEFAULT_COMPRESSION, ENCRYPTIONS
from hecore.tiling import parse_tile_spec
from schemas.manifest import Counts, RunManifest
from schemas.tables import CIPHERTEXTS, PARQUET_OPTIONS, REJECTS, TILES, spark_schema

from . import runinfo
from .common import ListAccumulator, add_spark_arguments, worker_report
from .progress import Progress
from .session import build_session, spark_info
from .storage import Output, Storage
from .tasks import (WRITTEN, DecodeOptions, EncryptMeta, EncryptPayload, decode_partition, encrypt_partition,
                    encrypt_to_files, histogram_partition)

log = logging.getLogger(__name__)

LAYOUTS = ("pixel", "packed", "packed-complex")
DEFAULT_TILE = "16x16"
DEFAULT_HALO = 1            # enough for the paper's 3x3 mean filter
DEFAULT_MAX_PIXELS = 2**26


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="key directory (only its public part is read)")
    p.add_argument("--input", required=True, help="directory, glob or URI (file://, hdfs://) of images")
    p.add_argument("--out", required=True, help="output directory: ciphertexts/, rejects/, _manifest.json")
    p.add_argument("--layout", choices=LAYOUTS, default="packed",
                   help="packed: one fresh ciphertext per tile channel, a pixel per slot (default); "
                        "packed-complex: the same with two pixels per slot (CKKS only, twice the pixels per "
                        "ciphertext; no matching); pixel: one ciphertext per pixel value (iCHEETAH, with its "
                        "caching strategies)")
    p.add_argument("--halo", type=int, default=None, metavar="R",
                   help=f"packed layout: pixels of the neighbouring tiles each ciphertext also holds, for filters "
                        f"reaching R pixels (meanfilter:K needs K//2; default {DEFAULT_HALO})")
    p.add_argument("--strategy", default="fresh", choices=strategy_names(),
                   help="pixel-layout strategy (default fresh; others leak and need --allow-leaky)")
    p.add_argument("--allow-leaky", action="store_true",
                   help="permit the paper's caching strategies, which are not IND-CPA secure")
    p.add_argument("--encryption", choices=ENCRYPTIONS, default="public",
                   help="packed layouts: public (default; needs only the public key) or symmetric: the key owner's "
                        "seeded secret-key encryption, about 2x faster and half the bytes (reads secret.key, which "
                        "must be mode 0600; needs the native extension make setup builds)")
    p.add_argument("--compression", choices=COMPRESSIONS, default=DEFAULT_COMPRESSION,
                   help="--encryption symmetric: serialization of the seeded ciphertexts (default %(default)s; "
                        "zstd stores ~35%% fewer bytes at N=4096 and costs ~40%% more time)")
    p.add_argument("--pool-size", type=int, help="randomness pool size for scan/full (default 64)")
    p.add_argument("--top-k", type=int, help="values cached by scan (default: all values found)")
    p.add_argument("--radix", type=int, help="base of radix/radix-rand (default 2)")
    p.add_argument("--tile", help=f"tile size HxW (default: {DEFAULT_TILE} for the pixel layout; for the packed "
                                  "layouts the largest that fills a ciphertext's slots: 30x62 at N=4096 with the default halo, "
                                  "60x62 complex-packed)")
    p.add_argument("--resize", type=int, metavar="S",
                   help="centre-crop to a square and resize to SxS first (the paper's preprocessing)")
    p.add_argument("--convert", action="append", default=[], choices=sorted(CONVERSIONS),
                   help="accept and convert images of this kind (repeatable); otherwise they are rejected")
    p.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                   help="refuse images with more pixels (decompression bombs; default %(default)s)")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --input")
    p.add_argument("--writer", choices=("auto", "spark", "workers"), default="auto",
                   help="who writes the ciphertext files: the Python workers (local masters and local paths "
                        "only; the JVM never touches ciphertext bytes) or Spark's Parquet writer; auto picks "
                        "workers when it can (default)")
    p.add_argument("--partitions", type=int, help="encryption tasks (default: 4 per core, at most one per tile channel)")
    add_spark_arguments(p)


def strategy_options(args) -> dict:
    opts = {}
    if args.pool_size is not None:
        opts["pool_size"] = args.pool_size
    if args.top_k is not None:
        opts["top_k"] = args.top_k
    if args.radix is not None:
        opts["radix"] = args.radix
    return opts


def read_images(spark, source: str, recursive: bool):
    from pyspark.errors import AnalysisException

    reader = spark.read.format("binaryFile")
    if recursive:
        reader = reader.option("recursiveFileLookup", "true")
    try:
        return reader.load(source)
    except AnalysisException as e:
        raise HepixError(f"cannot read images from {source}: {str(e).splitlines()[0]}") from None


def parse_tile(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    try:
        return parse_tile_spec(spec)
    except ValueError as e:
        raise HepixError(f"--tile {spec}: {e}") from None


def worker_local_path(master: str, path: str) -> str | None:
    """``path`` as a local directory the Python workers can write, or None.

    Only for local and local-cluster masters (the workers run on this machine)
    and paths without a scheme other than ``file:``.
    """
    if not master.startswith("local"):
        return None
    if "://" in path and not path.startswith("file://"):
        return None
    return os.path.abspath(path.removeprefix("file://").removeprefix("file:"))


def write_from_workers(units, directory: str, **task_args) -> None:
    """Encrypt with :func:`encrypt_to_files`; keep exactly the files successful tasks reported."""
    os.makedirs(directory, exist_ok=True)
    written = units.mapInArrow(functools.partial(encrypt_to_files, directory=directory, **task_args),
                               spark_schema(WRITTEN)).collect()
    keep = {r["file"] for r in written if r["file"]}
    for name in os.listdir(directory):
        if name not in keep:      # files of failed or speculative attempts, temporary files
            os.remove(os.path.join(directory, name))
    if not keep:                  # nothing to encrypt: an empty table that still has its schema
        pq.write_table(CIPHERTEXTS.empty_table(), os.path.join(directory, "part-00000-empty.parquet"))


def symmetric_secret(args, material) -> bytes | None:
    """``--encryption symmetric``: the secret key bytes, once proven to belong to ``material``
    (and the native extension present); None for public-key encryption."""
    if args.encryption != "symmetric":
        if args.compression != DEFAULT_COMPRESSION:
            raise HepixError("--compression is for --encryption symmetric; public-key ciphertexts are stored "
                             "uncompressed")
        return None
    if args.layout == "pixel" or args.strategy != "fresh":
        raise HepixError("--encryption symmetric encrypts whole tile channels (the packed layouts), each fresh: use "
                         "--layout packed or packed-complex without --strategy")
    from hecore.keys import read_secret_key
    from hecore.symmetric import SymmetricEncryptor

    secret = read_secret_key(args.keys)
    SymmetricEncryptor(material, secret, compression=args.compression)   # refuses a key of another key set
    return secret


def run(args) -> int:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # Refuse a leaking strategy before anything starts, with the message that says what leaks.
    cls = strategy_class(args.strategy, allow_leaky=args.allow_leaky)
    options = strategy_options(args)
    material = read_public(args.keys, eval_keys=False)   # never opens secret.key; no eval keys needed
    params = material.params
    secret_key = symmetric_secret(args, material)
    tile_spec = parse_tile(args.tile)
    complex_packing = args.layout == "packed-complex"
    if args.layout != "pixel":
        if args.strategy != "fresh":
            raise HepixError(f"--strategy {args.strategy} is a pixel-layout mode (iCHEETAH); the packed layout "
                             "encrypts each tile channel fresh with the public key: drop --strategy or use "
                             "--layout pixel")
        halo = DEFAULT_HALO if args.halo is None else args.halo
        if halo < 0:
            raise HepixError(f"--halo {halo}: must be 0 or more")
        try:
            tile_h, tile_w = tile_spec or default_tile(params, halo, complex_packing)
            check_tile_fits(params, tile_h, tile_w, halo, complex_packing)
        except ValueError as e:
            raise HepixError(str(e)) from None
    else:
        if args.halo:
            raise HepixError("--halo is for the packed layout; the pixel layout's mean filter fetches neighbours "
                             "itself")
        if params.is_integer:
            raise HepixError(f"the pixel layout (iCHEETAH) is CKKS-only; {params.name} is "
                             f"{params.scheme.upper()}: use --layout packed, or keys of a CKKS preset")
        halo = 0
        tile_h, tile_w = tile_spec or parse_tile_spec(DEFAULT_TILE)
    fingerprint = material.fingerprint()
    run_id, started = runinfo.new_run_id(), runinfo.now()
    timings: dict[str, float] = {}

    spark = build_session("encrypt", args.master, args.conf)
    sc = spark.sparkContext
    storage = Storage(spark)
    out = Output(storage, args.out, run_id)
    label = "symmetric" if secret_key is not None else args.strategy
    print(f"hepix encrypt {run_id}: {args.input} -> {args.out}; {args.layout} layout, "
          f"{'encryption' if secret_key is not None else 'strategy'} {label} ({security_of(args.strategy)}), "
          f"{params.name}, key {fingerprint[:16]}")
    try:
        with Progress(spark, "encrypt", enabled=not args.quiet) as progress:
            t0 = time.perf_counter()
            progress.stage("decoding images")
            files = read_images(spark, args.input, args.recursive)
            empties = storage.empty_files(args.input, args.recursive)   # binaryFile skips them silently
            opts = DecodeOptions(tile_h, tile_w, args.resize, tuple(args.convert), args.max_pixels, halo)
            decoded = files.mapInArrow(functools.partial(decode_partition, opts=opts), spark_schema(TILES))
            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
            is_ok = F.col("reject_reason").isNull()
            ok, bad = decoded.where(is_ok), decoded.where(~is_ok)
            # Plain sums, no countDistinct (which costs extra shuffle stages): every decoded image
            # has exactly one unit (tile 0, 0, channel 0), every rejected file exactly one reject row.
            first_unit = is_ok & (F.col("tile_y") == 0) & (F.col("tile_x") == 0) & (F.col("channel") == 0)
            stats = decoded.agg(
                F.sum(F.when(first_unit, 1).otherwise(0)).alias("images_ok"),
                F.sum(F.when(is_ok, 1).otherwise(0)).alias("units"),
                F.sum(F.when(is_ok & (F.col("channel") == 0), 1).otherwise(0)).alias("tiles"),
                F.sum(F.when(is_ok, F.col("h") * F.col("w")).otherwise(0)).alias("pixels"),
                F.sum(F.when(is_ok, 0).otherwise(1)).alias("rejected"),
            ).collect()[0]
            timings["decode_seconds"] = time.perf_counter() - t0

            from hecore.context import HEContext
            ctx = HEContext.from_public(material)
            strategy = cls(ctx, **options)
            t0 = time.perf_counter()
            if strategy.needs_scan:
                progress.stage("scanning pixel values")
                hist = (ok.mapInArrow(histogram_partition, "value int, count long")
                        .groupBy("value").agg(F.sum("count").alias("count")).collect())
                counts = np.zeros(256, dtype=np.int64)
                for r in hist:
                    counts[r["value"]] = r["count"]
                strategy.prepare(counts=counts)
            else:
                strategy.prepare()
            state = strategy.state() if strategy.name != "fresh" else None
            timings["cache_build_seconds"] = time.perf_counter() - t0

            payload = EncryptPayload(public=material, strategy=strategy.name, strategy_state=state,
                                     allow_leaky=args.allow_leaky, secret_key=secret_key,
                                     compression=args.compression)
            bc = sc.broadcast(payload)
            token = f"{run_id}/{bc._jbroadcast.id()}"
            rebuilds = sc.accumulator([], ListAccumulator())
            tasks = sc.accumulator([], ListAccumulator())
            meta = EncryptMeta(run_id=run_id, layout=args.layout, preset=params.name, key_fingerprint=fingerprint,
                               encryption=args.encryption)
            n_tiles = int(stats["tiles"] or 0)
            n_units = int(stats["units"] or 0)              # tile channels: the unit of work
            parts = args.partitions or max(1, min(n_units, sc.defaultParallelism * 4))

            t0 = time.perf_counter()
            progress.stage(f"encrypting {n_tiles} tiles ({int(stats['pixels'] or 0)} pixel values)")
            units = ok.repartition(parts)
            local_dir = worker_local_path(sc.master, out.table("ciphertexts"))
            if args.writer == "workers" and not local_dir:
                raise HepixError(f"--writer workers needs a local master and a local --out; got master "
                                 f"{sc.master} and {args.out}; use --writer spark or auto")
            if local_dir and args.writer != "spark":
                write_from_workers(units, local_dir, token=token, broadcast=bc, meta=meta,
                                   rebuilds=rebuilds, tasks=tasks)
            else:
                cts = units.mapInArrow(
                    functools.partial(encrypt_partition, token=token, broadcast=bc, meta=meta,
                                      rebuilds=rebuilds, tasks=tasks),
                    spark_schema(CIPHERTEXTS))
                (cts.write.options(**PARQUET_OPTIONS["ciphertexts"]).mode("overwrite")
                 .parquet(out.table("ciphertexts")))
            timings["encrypt_seconds"] = time.perf_counter() - t0

            progress.stage("writing rejects")
            rejects = bad.select(
                F.lit(run_id).alias("run_id"), "source", F.col("reject_stage").alias("stage"),
                F.col("reject_reason").alias("reason"), F.col("reject_detail").alias("detail"), "bytes")
            if empties:
                rejects = rejects.unionByName(spark.createDataFrame(
                    [(run_id, src, "read", "empty-file", f"{src}: the file is empty (0 bytes)", 0) for src in empties],
                    spark_schema(REJECTS)))
            spark.createDataFrame(rejects.rdd, spark_schema(REJECTS)).write.options(
                **PARQUET_OPTIONS["rejects"]).mode("overwrite").parquet(out.table("rejects"))
            written = spark.read.parquet(out.table("ciphertexts"))
            if secret_key is None:
                n_cts, ct_bytes = written.count(), None
            else:           # seeded (and maybe compressed) ciphertexts: their sizes vary
                agg = written.agg(F.count("*").alias("n"), F.sum(F.length("ct")).alias("b")).collect()[0]
                n_cts, ct_bytes = int(agg["n"]), int(agg["b"] or 0)
            decoded.unpersist()

        rejected = int(stats["rejected"] or 0) + len(empties)
        encrypted = int(stats["images_ok"] or 0)
        counts = Counts(images_in=encrypted + rejected, images_encrypted=encrypted,
                        images_rejected=rejected, tiles=n_tiles, ciphertexts=n_cts,
                        ciphertext_bytes=n_cts * ctx.layout.stride if ct_bytes is None else ct_bytes,
                        rejects=rejected)
        files_seen = files.count() + len(empties)       # a metadata-only count of the input listing
        if counts.images_in != files_seen:
            raise HepixError(f"internal error: {files_seen} input files, but {counts.images_encrypted} encrypted + "
                             f"{counts.images_rejected} rejected; nothing was committed")
        manifest = RunManifest(
            job="encrypt", run_id=run_id, status="complete", created=started.isoformat(),
            finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=args.layout,
            strategy=label, security=strategy.security, preset=params.name, params=params.to_json(),
            key_fingerprint=fingerprint, options={"tile": [tile_h, tile_w], "halo": halo, "resize": args.resize,
                                                  "conversions": list(args.convert), **strategy.options(),
                                                  **({"encryption": "symmetric", "compression": args.compression}
                                                     if secret_key is not None else {})},
            counts=counts, timings=timings, workers=worker_report(rebuilds, tasks),
            versions=runinfo.versions(), spark=spark_info(spark))
        out.commit(manifest, ["ciphertexts", "rejects"])
    except BaseException:
        out.abort()
        raise
    finally:
        spark.stop()

    secs = timings["encrypt_seconds"]
    mb = counts.ciphertext_bytes / 1e6
    print(f"encrypted {counts.images_encrypted} of {counts.images_in} images ({counts.images_rejected} rejected) "
          f"into {counts.ciphertexts} ciphertexts, {mb:,.1f} MB, in {secs:.1f} s "
          f"({counts.ciphertexts / secs:,.0f} ciphertexts/s, {mb / secs:,.1f} MB/s); "
          f"cache rebuilds {manifest.workers['cache_rebuilds']} for {manifest.workers['tasks']} tasks")
    if counts.images_rejected:
        print(f"rejected images are listed in {args.out}/rejects/ with the reason")
    return 0
