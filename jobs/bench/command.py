"""`hepix bench`: the pixel layout's strategies against fresh encryption, written to Parquet.

The default suite ``all`` (:mod:`jobs.bench.suites.all`) runs the seeds' experiments into one
``OUT/bench/`` table for ``hepix report``; ``--suite pixel`` is what follows.
Writes ``OUT/bench_pixel/<run_id>.parquet`` (schema ``schemas.tables.BENCH_PIXEL``)
and prints time, pixels/s, ciphertext MB/s and the speedup over ``fresh``
for every image size, next to the NumPy memory-copy bandwidth measured in
the same run.  ``--suite spark`` measures the encrypt job on Spark
(``OUT/bench_spark/``); ``--suite packed`` the packed layout against TenSEAL and
the pixel layout's ``full`` caching (``OUT/bench_packed/``, see
:mod:`jobs.bench.suites.packed`); ``--suite ops`` the paper's §4.4 cases (mean
filter, brightness, matching, watermark) encrypted in both layouts
(``OUT/bench_ops/``, see :mod:`jobs.bench.suites.ops`).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hecore.context import HEContext
from hecore.encrypt.strategies import strategy_names
from hecore.images import center_crop, load_image, resize
from hecore.params import DEFAULT_PRESET, PRESETS, preset
from jobs import runinfo
from jobs.bench.suites.pixel import DEFAULT_SIZES, DEFAULT_STRATEGIES, DEFAULT_TILE, run_pixel_bench
from jobs.console import table
from schemas.bench import BENCH_OPS, BENCH_PACKED, BENCH_PIXEL

log = logging.getLogger(__name__)

#: The USC-SIPI images next to the repository (``../shared/datasets/usc-sipi``), if present.
DATASETS = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets"
#: The packed suite's default images: colour and grey, 256x256 and 512x512 originals.
PACKED_USC_SIPI = ("4.1.05.tiff", "4.2.03.tiff", "5.1.12.tiff", "7.1.01.tiff")
PACKED_SKIMAGE = ("astronaut", "camera", "coffee", "moon")
PACKED_SIZE = 256
PACKED_IMAGES = 4


def _int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x]
    except ValueError:
        raise SystemExit(f"hepix bench: --sizes wants comma-separated integers like 8,32,64, got {s!r}")


def add_arguments(p):
    p.add_argument("--suite", choices=("all", "pixel", "spark", "packed", "ops", "dft", "infer"), default=None,
                   help="all: the seeds' experiments (Fig. 3, Table 2, Fig. 10, seed 001, physical limits, "
                        "packed) into one `bench` table for `hepix report` (default, takes --out and --quick; "
                        "without --suite, any of --sizes --strategies --tile --preset --image selects pixel); "
                        "pixel: every strategy against fresh in one process; spark: the encrypt "
                        "job against hecore alone, and local[1] against local[2]; packed: the packed layout "
                        "against TenSEAL and the pixel layout's full caching, one process; ops: the paper's "
                        "4.4 cases (mean filter, brightness, matching, watermark) encrypted in both layouts, "
                        "encrypt / op / decrypt timed apart (takes --out and --quick only); dft: the "
                        "DFT-Hadamard-iDFT pipeline against seed 002, one core; infer: encrypted logistic "
                        "regression and TinyCNN on the digits against seed 004, one core (dft and infer take "
                        "--out and --quick only)")
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    p.add_argument("--images", type=int, default=None,
                   help=f"spark suite: number of sample images (default 12); packed suite: number of "
                        f"images (default {PACKED_IMAGES}: USC-SIPI from ../shared/datasets if present, "
                        "else scikit-image samples)")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="square image sizes, comma-separated (default %(default)s; the spark and packed "
                        f"suites use the last one, default 32 and {PACKED_SIZE})")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help=f"default {DEFAULT_PRESET}; packed suite: default paper-4096 and tenseal-8192")
    p.add_argument("--image", help="image file to crop and resize (default: scikit-image's 'camera'; "
                                   "packed suite: the images described under --images)")
    p.add_argument("--repeats", type=int, default=None,
                   help="packed suite: timed passes per image and implementation, median reported (default 5)")
    p.add_argument("--quick", action="store_true",
                   help="packed suite: one image and 2 repeats; ops suite: smaller pixel-layout cases, "
                        "about a minute (smoke runs, not measurements to quote)")
    p.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES),
                   help=f"comma-separated, from {', '.join(strategy_names())} (fresh always runs)")
    p.add_argument("--tile", type=int, default=DEFAULT_TILE, help="tile side in pixels (default %(default)s)")


def sample_image(path: str | None):
    """The bench's source image: a file, or scikit-image's bundled 'camera' (512x512 grey)."""
    if path:
        img = load_image(path)
        return Path(path).name, img.pixels
    import skimage.data
    return "skimage-camera", skimage.data.camera()


def _resolve_suite(args) -> str:
    """``--suite`` as given, else ``pixel`` when a pixel-suite option is given (as before ``all``), else ``all``."""
    if args.suite:
        return args.suite
    pixel_only = (args.sizes != ",".join(map(str, DEFAULT_SIZES)) or args.strategies != ",".join(DEFAULT_STRATEGIES)
                  or args.tile != DEFAULT_TILE or args.preset is not None or args.image is not None)
    return "pixel" if pixel_only else "all"


def run(args) -> int:
    args.suite = _resolve_suite(args)
    if args.suite == "all":
        from jobs.bench.suites.all import run_all
        return run_all(args)
    if args.suite == "spark":
        return run_spark(args)
    if args.suite == "packed":
        return run_packed(args)
    if args.suite == "ops":
        return run_ops(args)
    if args.suite in ("dft", "infer"):
        from . import freq as bench_freq

        _refuse_for_ops(args, args.suite)
        return bench_freq.run_dft(args) if args.suite == "dft" else bench_freq.run_infer(args)
    sizes = _int_list(args.sizes)
    strategies = [s for s in args.strategies.split(",") if s]
    for s in strategies:
        if s not in strategy_names():
            raise SystemExit(f"hepix bench: unknown strategy {s!r}; choose from {', '.join(strategy_names())}")
    params = preset(args.preset or DEFAULT_PRESET)
    name, source = sample_image(args.image)
    square = center_crop(source)
    images = {f"{name}@{s}": resize(square, s) for s in sizes}

    ctx, _secret = HEContext.generate(params)   # throwaway keys, never written anywhere
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: pixel layout, {params.name} ({params.describe()}), image {name}, "
          f"sizes {sizes}, {runinfo.cores()} cores")
    print("leaking strategies are measured as research modes (security='leaks' in every row)")

    def progress(m):
        print(f"  {m.size:>5}px {m.strategy:<10} {m.encrypt_seconds:9.3f} s  x{m.speedup_vs_fresh:6.1f}", flush=True)

    rows = [m.as_dict() for m in run_pixel_bench(ctx, images, strategies=strategies, tile=args.tile,
                                                  progress=progress)]
    common = {
        "run_id": run_id, "started": started, "machine": runinfo.machine(), "cores": runinfo.cores(),
        "hepix_version": runinfo.version("hepix"), "git_commit": runinfo.git_commit(),
        "preset": params.name, "n": params.n, "qi_sizes": list(params.qi_sizes), "scale_bits": params.scale_bits,
    }
    records = [{**common, **r} for r in rows]
    out = Path(args.out) / "bench_pixel"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{run_id}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist(records, schema=BENCH_PIXEL), tmp, compression="zstd")
    os.replace(tmp, out / f"{run_id}.parquet")

    print()
    print(table(rows, [
        ("size", "size", "d"), ("strategy", "strategy", ""), ("security", "security", ""),
        ("setup_seconds", "setup s", ".3f"), ("encrypt_seconds", "encrypt s", ".3f"),
        ("pixels_per_second", "px/s", ",.0f"), ("ciphertext_mb_per_second", "ct MB/s", ",.0f"),
        ("speedup_vs_fresh", "speedup", ".1f"), ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"),
        ("ssim", "SSIM", ".4f"), ("max_abs_err", "max err", ".1e"),
    ]))
    memcpy = rows[0]["memcpy_mb_per_second"]
    stride = rows[0]["ciphertext_bytes"] / rows[0]["pixels"]
    print(f"\nNumPy memcpy here: {memcpy:,.0f} MB/s = {stride / memcpy:.1f} us per {stride:,.0f}-byte ciphertext "
          "(the floor of any cache-and-add scheme)")
    for r in rows:
        if r["strategy"] == "full":
            print(f"  full @ {r['size']}px: {1e6 / r['pixels_per_second']:.1f} us per ciphertext, "
                  f"{r['ciphertext_mb_per_second'] / memcpy:.0%} of memcpy bandwidth, x{r['speedup_vs_fresh']:.1f} over fresh")
    print(f"\nwrote {out / (run_id + '.parquet')}")
    return 0


def run_spark(args) -> int:
    from jobs.bench.suites.spark import report, run_spark_bench, write_rows

    sizes = _int_list(args.sizes)
    size = sizes[-1] if args.sizes != ",".join(map(str, DEFAULT_SIZES)) else 32
    tile = min(args.tile, size)
    images = args.images if args.images is not None else 12
    preset_name = args.preset or DEFAULT_PRESET
    run_id = runinfo.new_run_id()
    print(f"hepix bench {run_id}: Spark overhead and scaling, {images} images at {size}x{size}, "
          f"{preset_name}, strategy fresh")
    rows = run_spark_bench(Path(args.out), images=images, resize=size, tile=tile, preset_name=preset_name)
    path = write_rows(rows, Path(args.out) / "bench_spark", run_id, preset_name, images, size, tile)
    print(report(rows, preset_name, images, size))
    print(f"\nwrote {path}")
    return 0


# --- the packed suite ------------------------------------------------------------------------

def packed_images(image: str | None, count: int, size: int) -> dict:
    """The packed suite's images, centre-cropped and resized to ``size`` x ``size``, by display name:
    ``--image``, else USC-SIPI files read in place from ../shared/datasets, else scikit-image samples."""
    if image:
        name, pixels = sample_image(image)
        return {f"{name}@{size}": resize(center_crop(pixels), size)}
    out = {}
    folder = DATASETS / "usc-sipi"
    if folder.is_dir():
        files = [folder / f for f in PACKED_USC_SIPI if (folder / f).is_file()]
        files += sorted(p for p in folder.glob("*.tif*") if p not in files)
        for path in files[:count]:
            out[f"usc-sipi/{path.name}@{size}"] = resize(center_crop(load_image(path).pixels), size)
        if out:
            return out
    print("no USC-SIPI images in ../shared/datasets/usc-sipi: using scikit-image's sample images")
    import skimage.data
    for name in (PACKED_SKIMAGE * (count // len(PACKED_SKIMAGE) + 1))[:count]:
        out[f"skimage-{name}@{size}"] = resize(center_crop(getattr(skimage.data, name)()), size)
    return out


def run_packed(args) -> int:
    from jobs.bench.suites.packed import DEFAULT_PRESETS, DEFAULT_REPEATS, run_packed_bench

    sizes = _int_list(args.sizes)
    size = sizes[-1] if args.sizes != ",".join(map(str, DEFAULT_SIZES)) else PACKED_SIZE
    count = args.images if args.images is not None else (1 if args.quick else PACKED_IMAGES)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else DEFAULT_REPEATS)
    if count < 1 or repeats < 1 or size < 1:
        raise SystemExit(f"hepix bench: --images, --repeats and the size must be >= 1, got "
                         f"{count}, {repeats}, {size}")
    presets = (args.preset,) if args.preset else DEFAULT_PRESETS
    if any(preset(p).scheme != "ckks" for p in presets):
        raise SystemExit(f"hepix bench: the packed suite compares CKKS encryptions (TenSEAL ckks_vector); "
                         f"{args.preset} is not CKKS: choose a CKKS preset")
    images = packed_images(args.image, count, size)
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: packed layout vs TenSEAL vs pixel full, {', '.join(presets)}, "
          f"{len(images)} image(s) at {size}x{size}, median of {repeats}, one process, one thread, "
          f"{runinfo.cores()} cores")

    def progress(m):
        print(f"  {m.image:<24} {m.implementation:<34} {m.preset:<12} {m.encryption:<9} "
              f"{m.pixels_per_second:>13,.0f} px/s", flush=True)

    try:
        measured = run_packed_bench(images, presets=presets, repeats=repeats, progress=progress)
    except ValueError as e:
        raise SystemExit(f"hepix bench: {e}")
    rows = [m.as_dict() for m in measured]
    common = {
        "run_id": run_id, "started": started, "machine": runinfo.machine(), "cores": runinfo.cores(),
        "hepix_version": runinfo.version("hepix"), "git_commit": runinfo.git_commit(),
    }
    out = Path(args.out) / "bench_packed"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{run_id}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist([{**common, **r} for r in rows], schema=BENCH_PACKED), tmp,
                   compression="zstd")
    os.replace(tmp, out / f"{run_id}.parquet")

    print()
    print(table(rows, [
        ("image", "image", ""), ("implementation", "implementation", ""), ("preset", "preset", ""),
        ("encryption", "encryption", ""), ("security", "security", ""), ("ciphertexts", "cts", "d"),
        ("seconds", "seconds", ".3f"), ("pixels_per_second", "px/s", ",.0f"),
        ("encrypt_seconds", "enc s", ".3f"), ("serialize_seconds", "ser s", ".3f"),
        ("bytes_per_pixel", "B/px", ",.1f"), ("vs_tenseal_public", "x TS pub", ".2f"),
        ("vs_tenseal_symmetric", "x TS sym", ".2f"), ("vs_pixel_full", "x pixel full", ".1f"),
        ("bytes_vs_tenseal_symmetric", "B x TS sym", ".2f"), ("exact_fraction", "exact", ".4f"),
    ]))
    print()
    print(summary(rows))
    print(f"\nwrote {out / (run_id + '.parquet')}")
    return 0


def summary(rows: list[dict]) -> str:
    """Per implementation and configuration, over all images: pixels/s over total seconds, and the
    ratios' geometric means."""
    import math

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["implementation"], r["preset"], r["encryption"]), []).append(r)

    def gmean(vals):
        vals = [v for v in vals if v]
        return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None

    out = []
    for (impl, pre, enc), rs in groups.items():
        exact = [r["exact_fraction"] for r in rs if r["exact_fraction"] is not None]
        out.append({
            "implementation": impl, "preset": pre, "encryption": enc, "security": rs[0]["security"],
            "images": len(rs), "pixels_per_second": sum(r["pixels"] for r in rs) / sum(r["seconds"] for r in rs),
            "bytes_per_pixel": sum(r["bytes"] for r in rs) / sum(r["pixels"] for r in rs),
            "vs_tenseal_public": gmean(r["vs_tenseal_public"] for r in rs),
            "vs_tenseal_symmetric": gmean(r["vs_tenseal_symmetric"] for r in rs),
            "vs_pixel_full": gmean(r["vs_pixel_full"] for r in rs),
            "bytes_vs_tenseal_symmetric": gmean(r.get("bytes_vs_tenseal_symmetric") for r in rs),
            "exact_fraction": min(exact) if exact else None,
        })
    return "all images (px/s over total time; ratios: geometric mean over images; exact: worst image)\n" + table(
        out, [("implementation", "implementation", ""), ("preset", "preset", ""), ("encryption", "encryption", ""),
              ("security", "security", ""), ("images", "images", "d"), ("pixels_per_second", "px/s/core", ",.0f"),
              ("bytes_per_pixel", "B/px", ",.1f"), ("vs_tenseal_public", "x TS pub", ".2f"),
              ("vs_tenseal_symmetric", "x TS sym", ".2f"), ("vs_pixel_full", "x pixel full", ".1f"),
              ("bytes_vs_tenseal_symmetric", "B x TS sym", ".2f"), ("exact_fraction", "exact", ".4f")])


# --- the ops suite -----------------------------------------------------------------------------

def _refuse_for_ops(args, suite: str = "ops") -> None:
    given = [flag for flag, value, default in (
        ("--images", args.images, None), ("--preset", args.preset, None), ("--image", args.image, None),
        ("--repeats", args.repeats, None), ("--sizes", args.sizes, ",".join(map(str, DEFAULT_SIZES))),
        ("--strategies", args.strategies, ",".join(DEFAULT_STRATEGIES)), ("--tile", args.tile, DEFAULT_TILE),
    ) if value != default]
    if given:
        raise SystemExit(f"hepix bench: the {suite} suite runs fixed cases (see hecore.bench_{suite}) and takes only "
                         f"--out and --quick, not {', '.join(given)}")


def run_ops(args) -> int:
    from .suites import ops as bench_ops

    _refuse_for_ops(args)
    config = bench_ops.QUICK if args.quick else bench_ops.DEFAULT
    sources = bench_ops.load_sources(DATASETS / "usc-sipi", config)
    if sources.origin != "usc-sipi":
        print("no USC-SIPI images in ../shared/datasets/usc-sipi: using scikit-image's sample images")
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: the paper's 4.4 cases in both layouts{' (quick)' if args.quick else ''}, "
          f"image {sources.main[0]}, matching {sources.match1[0]} / +{config.match_brighten} / "
          f"{sources.match3[0]}, one process, {runinfo.cores()} cores")
    print("pixel-layout rows with strategy 'full' use the paper's leaking caching (security='leaks')")

    def progress(m):
        what = (f"exact {m.exact_fraction:.4f}" if m.exact_fraction is not None
                else f"d12 {m.d12:,.0f} d23 {m.d23:,.0f} d13 {m.d13:,.0f}")
        print(f"  {m.case:<13} {m.layout:<6} {m.preset:<12} {m.strategy:<5} {m.size:>4}px  "
              f"enc {m.encrypt_seconds:8.3f} s  op {m.op_seconds:8.3f} s  dec {m.decrypt_seconds:8.3f} s  {what}",
              flush=True)

    rows = [m.as_dict() for m in bench_ops.run_ops_bench(sources, config, progress=progress)]
    common = {
        "run_id": run_id, "started": started, "machine": runinfo.machine(), "cores": runinfo.cores(),
        "hepix_version": runinfo.version("hepix"), "git_commit": runinfo.git_commit(),
    }
    out = Path(args.out) / "bench_ops"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{run_id}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist([{**common, **r} for r in rows], schema=BENCH_OPS), tmp,
                   compression="zstd")
    os.replace(tmp, out / f"{run_id}.parquet")

    images = [r for r in rows if r["case"] != "matching"]
    matching = [r for r in rows if r["case"] == "matching"]
    print()
    print(table(images, [
        ("case", "case", ""), ("section", "section", ""), ("layout", "layout", ""), ("preset", "preset", ""),
        ("strategy", "strategy", ""), ("security", "security", ""), ("size", "size", "d"),
        ("ciphertexts", "cts", ",d"), ("encrypt_seconds", "encrypt s", ".3f"), ("op_seconds", "op s", ".3f"),
        ("decrypt_seconds", "decrypt s", ".3f"), ("exact_fraction", "exact", ".4f"),
        ("max_abs_err", "max err", ".1e"), ("detected", "detected", ""),
    ]))
    print()
    print("matching (d12: image 1 to its brightened copy; d13, d23: to the other image; l2 is squared; "
          "the paper's Table 3 has d12 < d23 < d13)")
    print(table(matching, [
        ("layout", "layout", ""), ("preset", "preset", ""), ("metric", "metric", ""), ("size", "size", "d"),
        ("ciphertexts", "cts", ",d"), ("encrypt_seconds", "encrypt s", ".3f"), ("op_seconds", "op s", ".3f"),
        ("decrypt_seconds", "decrypt s", ".3f"), ("d12", "d12", ",.1f"), ("d23", "d23", ",.1f"),
        ("d13", "d13", ",.1f"), ("ref_d12", "plain d12", ",.0f"), ("ref_d23", "plain d23", ",.0f"),
        ("ref_d13", "plain d13", ",.0f"), ("distance_rel_err", "rel err", ".1e"),
        ("order_as_paper", "order ok", ""),
    ]))
    bad = [r for r in images if r["exact_fraction"] != 1.0] + [r for r in images if r["detected"] is False]
    if bad:
        print(f"\nnot exact (or watermark not found): {len(bad)} row(s)")
    print(f"\nwrote {out / (run_id + '.parquet')}")
    return 0
