"""`hepix encrypt`: images -> ciphertexts/, rejects/ and _manifest.json.

Thin: parse -> session -> decode tiles on the executors -> (scan) -> broadcast
the strategy's cache once -> encrypt tiles with hecore -> write -> commit.
Encryption needs only the public key; the secret key file is never opened -- except with
``--encryption symmetric``, the key owner's fast path (hecore.encrypt.symmetric), which needs it.

Runs are resumable.  Images go in batches (``--batch-images``); each batch is
written under ``_staging/<run_id>/``, its files are moved into the tables, and
then ``_manifest.json`` is rewritten to list them (status ``partial``) -- the
batch's commit.  The last step removes files no manifest lists and marks the
manifest ``complete``; process and decrypt accept nothing else.  A rerun with
the same key, parameters, strategy and options skips the images the listed
files already hold (encrypted or rejected); ``--overwrite`` redoes them all.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import time
from dataclasses import asdict

import numpy as np

from hecore.encrypt.strategies import security_of, strategy_class, strategy_names
from hecore.encrypt.symmetric import COMPRESSIONS, DEFAULT_COMPRESSION, ENCRYPTIONS
from hecore.errors import HepixError
from hecore.images import CONVERSIONS
from hecore.keys import read_public
from hecore.layouts.packed import check_tile_fits, default_tile
from hecore.layouts.tiling import parse_tile_spec
from jobs.tasks.decode import DecodeOptions, decode_partition, histogram_partition
from jobs.tasks.encrypt import EncryptPayload, encrypt_partition, encrypt_to_files
from jobs.tasks.rows import EncryptMeta
from schemas.manifest import Counts, RunManifest
from schemas.stages import TILES, WRITTEN
from schemas.tables import CIPHERTEXTS, PARQUET_OPTIONS, REJECTS, spark_schema

from . import runinfo
from .progress import Progress
from .remote import remote_keys
from .runs import ListAccumulator, add_spark_arguments, worker_report
from .session import build_session, spark_info
from .storage import MANIFEST, Output, Storage, join, read_manifest
from .verify import describe_table, table_checksums, write_rejects

log = logging.getLogger(__name__)

LAYOUTS = ("pixel", "packed", "packed-complex")
DEFAULT_TILE = "16x16"
DEFAULT_HALO = 1            # enough for the paper's 3x3 mean filter
DEFAULT_MAX_PIXELS = 2**26
DEFAULT_BATCH_IMAGES = 256  # a crashed run loses at most one batch of work


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
    p.add_argument("--overwrite", action="store_true",
                   help="redo every image; by default a rerun into the same --out (same key, parameters, strategy "
                        "and options) skips the images finished before, and other settings are refused")
    p.add_argument("--batch-images", type=int, default=DEFAULT_BATCH_IMAGES, metavar="N",
                   help="images per committed batch: a crashed run loses at most one batch (default %(default)s)")
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


def glob_escape(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped, so that it names exactly one file."""
    return "".join("\\" + c if c in "\\[]{}*?" else c for c in path)


def read_image_list(spark, paths: list[str]):
    """binaryFile rows of exactly ``paths`` (a batch), whatever characters their names hold."""
    return spark.read.format("binaryFile").load([glob_escape(p) for p in paths])


def settings_of(args, layout: str, params, tile_h: int, tile_w: int, halo: int, fingerprint: str) -> dict:
    """What must match for a rerun to add to an existing output instead of starting over."""
    return {"key_fingerprint": fingerprint, "preset": params.name, "params": params.to_json(), "layout": layout,
            "strategy": args.strategy, "strategy_options": strategy_options(args), "tile": [tile_h, tile_w],
            "encryption": args.encryption, "compression": args.compression,
            "halo": halo, "resize": args.resize, "conversions": sorted(args.convert), "max_pixels": args.max_pixels}


def settings_differ(old: dict, new: dict) -> str | None:
    for k, v in new.items():
        if json.dumps(old.get(k), sort_keys=True) != json.dumps(v, sort_keys=True):
            shown = (lambda x: (x[:16] if isinstance(x, str) and k == "key_fingerprint" else x))
            return f"{k} {shown(old.get(k))!r} there, {shown(v)!r} now"
    return None


def finished_sources(spark, out: str, files: dict) -> set[str]:
    """Sources of the images the listed files of ``out`` already hold (encrypted or rejected)."""
    done: set[str] = set()
    for table in ("ciphertexts", "rejects"):
        paths = [join(out, table, e["name"]) for e in files.get(table, []) if e["rows"]]
        if paths:
            done |= {r["source"] for r in spark.read.parquet(*paths).select("source").distinct().collect()}
    return done


def crash_after_batches() -> int | None:
    """Test switch: the driver dies after committing this many batches (``HEPIX_TEST_CRASH_AFTER_BATCHES``)."""
    value = os.environ.get("HEPIX_TEST_CRASH_AFTER_BATCHES")
    return int(value) if value else None


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
    from hecore.encrypt.symmetric import SymmetricEncryptor
    from hecore.keys import read_secret_key

    secret = read_secret_key(args.keys)
    SymmetricEncryptor(material, secret, compression=args.compression)   # refuses a key of another key set
    return secret


def run(args) -> int:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # Refuse a leaking strategy before anything starts, with the message that says what leaks.
    cls = strategy_class(args.strategy, allow_leaky=args.allow_leaky)
    options = strategy_options(args)
    if args.batch_images < 1:
        raise HepixError(f"--batch-images {args.batch_images}: must be 1 or more")
    with remote_keys(args.keys) as keys:
        material = read_public(keys, eval_keys=False)   # never opens secret.key; no eval keys needed
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
    settings = settings_of(args, args.layout, params, tile_h, tile_w, halo, fingerprint)
    run_id, started = runinfo.new_run_id(), runinfo.now()
    timings: dict[str, float] = {}

    spark = build_session("encrypt", args.master, args.conf)
    sc = spark.sparkContext
    storage = Storage(spark)
    out = Output(storage, args.out, run_id)
    dst = out.out
    crash_after = crash_after_batches()
    strategy_label = "symmetric" if secret_key is not None else args.strategy
    print(f"hepix encrypt {run_id}: {args.input} -> {args.out}; {args.layout} layout, "
          f"{'encryption' if secret_key is not None else 'strategy'} {strategy_label} ({security_of(args.strategy)}), "
          f"{params.name}, key {fingerprint[:16]}")
    try:
        # --- what is already there: resume, or start over (--overwrite) ---------------------------
        try:
            before = read_manifest(storage, dst)
        except (ValueError, TypeError) as e:
            raise HepixError(f"{dst}/{MANIFEST} is not a manifest hepix can read ({e}); choose another --out") from None
        base = None
        if before is not None and not args.overwrite:
            if before.job != "encrypt":
                raise HepixError(f"{dst} holds the output of `hepix {before.job}`; encrypt into another --out")
            if not before.files or "settings" not in before.options:
                raise HepixError(f"{dst} holds an encrypt run written before hepix could resume runs; rerun with "
                                 "--overwrite to redo it, or choose another --out")
            diff = settings_differ(before.options["settings"], settings)
            if diff:
                raise HepixError(f"{dst} holds encrypted images made with other settings ({diff}); a rerun adds "
                                 "to an output only with the same key, parameters, strategy and options: add "
                                 "--overwrite to redo everything, or choose another --out")
            base = before
        files = read_images(spark, args.input, args.recursive)
        listing = sorted(r["path"] for r in files.select("path").collect())
        empties = storage.empty_files(args.input, args.recursive)   # binaryFile skips them silently
        done = finished_sources(spark, dst, base.files) if base else set()
        todo = [p for p in listing if p not in done]
        todo_empty = [p for p in empties if p not in done]
        skipped = len(listing) + len(empties) - len(todo) - len(todo_empty)
        if skipped:
            print(f"resuming: {skipped} images already done in {dst} (run {base.run_id}, {base.status}); "
                  f"{len(todo) + len(todo_empty)} to go (--overwrite redoes them all)")

        files_acc = {t: list(base.files.get(t, [])) if base else [] for t in ("ciphertexts", "rejects")}
        counts = Counts(**asdict(base.counts)) if base else Counts()
        runs = (list(base.runs) if base else []) + [run_id]
        for k, v in (base.timings.items() if base else []):
            timings[k] = float(v)

        from hecore.context import HEContext
        ctx = HEContext.from_public(material)
        strategy = cls(ctx, **options)
        rebuilds = sc.accumulator([], ListAccumulator())
        tasks = sc.accumulator([], ListAccumulator())
        meta = EncryptMeta(run_id=run_id, layout=args.layout, preset=params.name, key_fingerprint=fingerprint,
                           encryption=args.encryption)
        # A scanning strategy builds its cache from the values of all the images it encrypts: one batch.
        size = len(todo) if strategy.needs_scan else args.batch_images
        batches = [todo[i:i + size] for i in range(0, len(todo), max(1, size))] or ([[]] if todo_empty else [])
        bc = None

        def manifest_now(status: str) -> RunManifest:
            return RunManifest(
                job="encrypt", run_id=run_id, status=status, created=(base.created if base else started.isoformat()),
                finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=args.layout,
                strategy=strategy_label, security=strategy.security, preset=params.name, params=params.to_json(),
                key_fingerprint=fingerprint,
                options={"tile": [tile_h, tile_w], "halo": halo, "resize": args.resize,
                         "conversions": list(args.convert), **strategy.options(), "settings": settings,
                         **({"encryption": "symmetric", "compression": args.compression}
                            if secret_key is not None else {})},
                counts=counts, timings=timings, workers=worker_report(rebuilds, tasks),
                versions=runinfo.versions(), spark=spark_info(spark), files=files_acc,
                checksums=table_checksums(files_acc), runs=runs)

        with Progress(spark, "encrypt", enabled=not args.quiet) as progress:
            for b, paths in enumerate(batches):
                stage_dir = join(out.staging, f"batch-{b:05d}")
                label = f"batch {b + 1}/{len(batches)}: " if len(batches) > 1 else ""
                t0 = time.perf_counter()
                progress.stage(f"{label}decoding {len(paths)} images")
                opts = DecodeOptions(tile_h, tile_w, args.resize, tuple(args.convert), args.max_pixels, halo)
                source = read_image_list(spark, paths) if paths else files.limit(0)
                decoded = source.mapInArrow(functools.partial(decode_partition, opts=opts), spark_schema(TILES))
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
                timings["decode_seconds"] = timings.get("decode_seconds", 0.0) + time.perf_counter() - t0

                t0 = time.perf_counter()
                if bc is None:
                    if strategy.needs_scan:
                        progress.stage("scanning pixel values")
                        hist = (ok.mapInArrow(histogram_partition, "value int, count long")
                                .groupBy("value").agg(F.sum("count").alias("count")).collect())
                        values = np.zeros(256, dtype=np.int64)
                        for r in hist:
                            values[r["value"]] = r["count"]
                        strategy.prepare(counts=values)
                    else:
                        strategy.prepare()
                    state = strategy.state() if strategy.name != "fresh" else None
                    bc = sc.broadcast(EncryptPayload(public=material, strategy=strategy.name, strategy_state=state,
                                                     allow_leaky=args.allow_leaky, secret_key=secret_key,
                                                     compression=args.compression))
                    token = f"{run_id}/{bc._jbroadcast.id()}"
                timings["cache_build_seconds"] = timings.get("cache_build_seconds", 0.0) + time.perf_counter() - t0

                n_tiles = int(stats["tiles"] or 0)
                n_units = int(stats["units"] or 0)              # tile channels: the unit of work
                parts = args.partitions or max(1, min(n_units, sc.defaultParallelism * 4))
                t0 = time.perf_counter()
                progress.stage(f"{label}encrypting {n_tiles} tiles ({int(stats['pixels'] or 0)} pixel values)")
                staged_cts = join(stage_dir, "ciphertexts")
                if n_units:
                    units = ok.repartition(parts)
                    local_dir = worker_local_path(sc.master, staged_cts)
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
                        (cts.write.options(**PARQUET_OPTIONS["ciphertexts"]).mode("overwrite").parquet(staged_cts))
                timings["encrypt_seconds"] = timings.get("encrypt_seconds", 0.0) + time.perf_counter() - t0

                progress.stage(f"{label}writing rejects")
                rejects = [{**r.asDict(), "run_id": run_id} for r in bad.select(
                    "source", F.col("reject_stage").alias("stage"), F.col("reject_reason").alias("reason"),
                    F.col("reject_detail").alias("detail"), "bytes").collect()]
                batch_empties = todo_empty if b == 0 else []
                rejects += [{"run_id": run_id, "source": src, "stage": "read", "reason": "empty-file",
                             "detail": f"{src}: the file is empty (0 bytes)", "bytes": 0} for src in batch_empties]
                staged_rejects = join(stage_dir, "rejects")
                if rejects:
                    write_rejects(spark, rejects, staged_rejects)
                decoded.unpersist()

                # --- commit the batch: its files into the tables, then the manifest that lists them ----
                new_cts = describe_table(spark, storage, staged_cts, checksums=True)
                new_rejects = describe_table(spark, storage, staged_rejects, checksums=False)
                rejected = int(stats["rejected"] or 0) + len(batch_empties)
                encrypted = int(stats["images_ok"] or 0)
                if encrypted + rejected != len(paths) + len(batch_empties):
                    raise HepixError(f"internal error: {len(paths) + len(batch_empties)} input files in batch {b}, "
                                     f"but {encrypted} encrypted + {rejected} rejected; the batch was not committed")
                n_cts = sum(e["rows"] for e in new_cts)
                if secret_key is None or not n_cts:
                    ct_bytes = n_cts * ctx.layout.stride
                else:       # seeded (and maybe compressed) ciphertexts: their sizes vary
                    ct_bytes = int(spark.read.parquet(staged_cts).agg(F.sum(F.length("ct"))).collect()[0][0] or 0)
                for table, entries, staged in (("ciphertexts", new_cts, staged_cts),
                                               ("rejects", new_rejects, staged_rejects)):
                    storage.mkdirs(join(dst, table))
                    for e in entries:
                        final = f"{run_id}-b{b:05d}-{e['name']}"
                        storage.rename(join(staged, e["name"]), join(dst, table, final))
                        files_acc[table].append({**e, "name": final})
                counts = Counts(images_in=counts.images_in + encrypted + rejected,
                                images_encrypted=counts.images_encrypted + encrypted,
                                images_rejected=counts.images_rejected + rejected, tiles=counts.tiles + n_tiles,
                                ciphertexts=counts.ciphertexts + n_cts,
                                ciphertext_bytes=counts.ciphertext_bytes + ct_bytes,
                                rejects=counts.rejects + rejected)
                storage.write_text(join(dst, MANIFEST), manifest_now("partial").to_json())
                log.info("committed batch %d of %s (%d images)", b, run_id, len(paths) + len(batch_empties))
                if crash_after is not None and b + 1 >= crash_after:
                    raise RuntimeError(f"HEPIX_TEST_CRASH_AFTER_BATCHES={crash_after}: the driver stops here")

        # --- the run is whole: every table has a file, nothing unlisted, the manifest says complete ---
        if before is not None and not batches and base is not None and base.status == "complete":
            print(f"nothing to encrypt: all {skipped} images of {args.input} are in {dst} already")
            return 0
        for table, schema in (("ciphertexts", CIPHERTEXTS), ("rejects", REJECTS)):
            if not files_acc[table]:
                staged = join(out.staging, "empty", table)
                spark.createDataFrame([], spark_schema(schema)).coalesce(1).write.parquet(staged)
                for e in describe_table(spark, storage, staged, checksums=table == "ciphertexts"):
                    final = f"{run_id}-empty-{e['name']}"
                    storage.mkdirs(join(dst, table))
                    storage.rename(join(staged, e["name"]), join(dst, table, final))
                    files_acc[table].append({**e, "name": final})
            listed = {e["name"] for e in files_acc[table]}
            for name in storage.list_files(join(dst, table)):
                if name not in listed:      # a crashed run's batch, or the output --overwrite replaced
                    storage.delete(join(dst, table, name))
        manifest = manifest_now("complete")
        storage.write_text(join(dst, MANIFEST), manifest.to_json())
        out.abort()                          # the staging area, now empty of anything committed
    except BaseException:
        out.abort()
        raise
    finally:
        spark.stop()

    secs = max(timings.get("encrypt_seconds", 0.0), 1e-9)
    mb = counts.ciphertext_bytes / 1e6
    print(f"encrypted {counts.images_encrypted} of {counts.images_in} images ({counts.images_rejected} rejected) "
          f"into {counts.ciphertexts} ciphertexts, {mb:,.1f} MB, in {secs:.1f} s "
          f"({counts.ciphertexts / secs:,.0f} ciphertexts/s, {mb / secs:,.1f} MB/s); "
          f"cache rebuilds {manifest.workers['cache_rebuilds']} for {manifest.workers['tasks']} tasks"
          + (f"; {len(runs)} runs" if len(runs) > 1 else ""))
    if counts.images_rejected:
        print(f"rejected images are listed in {args.out}/rejects/ with the reason")
    return 0
