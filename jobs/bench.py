"""`hepix bench`: the pixel layout's strategies against fresh encryption, written to Parquet.

Writes ``OUT/bench_pixel/<run_id>.parquet`` (schema ``schemas.tables.BENCH_PIXEL``)
and prints time, pixels/s, ciphertext MB/s and the speedup over ``fresh``
for every image size, next to the NumPy memory-copy bandwidth measured in
the same run.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hecore.bench import DEFAULT_SIZES, DEFAULT_STRATEGIES, DEFAULT_TILE, run_pixel_bench
from hecore.context import HEContext
from hecore.images import center_crop, load_image, resize
from hecore.params import DEFAULT_PRESET, PRESETS, preset
from hecore.strategies import strategy_names
from schemas.tables import BENCH_PIXEL

from . import runinfo
from .report import table

log = logging.getLogger(__name__)


def _int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x]
    except ValueError:
        raise SystemExit(f"hepix bench: --sizes wants comma-separated integers like 8,32,64, got {s!r}")


def add_arguments(p):
    p.add_argument("--suite", choices=("pixel", "spark"), default="pixel",
                   help="pixel: every strategy against fresh in one process (default); spark: the encrypt "
                        "job against hecore alone, and local[1] against local[2]")
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    p.add_argument("--images", type=int, default=12, help="spark suite: number of sample images (default 12)")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="square image sizes, comma-separated (default %(default)s)")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    p.add_argument("--image", help="image file to crop and resize (default: scikit-image's 'camera')")
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


def run(args) -> int:
    if args.suite == "spark":
        return run_spark(args)
    sizes = _int_list(args.sizes)
    strategies = [s for s in args.strategies.split(",") if s]
    for s in strategies:
        if s not in strategy_names():
            raise SystemExit(f"hepix bench: unknown strategy {s!r}; choose from {', '.join(strategy_names())}")
    params = preset(args.preset)
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
    from .bench_spark import report, run_spark_bench, write_rows

    sizes = _int_list(args.sizes)
    size = sizes[-1] if args.sizes != ",".join(map(str, DEFAULT_SIZES)) else 32
    tile = min(args.tile, size)
    run_id = runinfo.new_run_id()
    print(f"hepix bench {run_id}: Spark overhead and scaling, {args.images} images at {size}x{size}, "
          f"{args.preset}, strategy fresh")
    rows = run_spark_bench(Path(args.out), images=args.images, resize=size, tile=tile, preset_name=args.preset)
    path = write_rows(rows, Path(args.out) / "bench_spark", run_id, args.preset, args.images, size, tile)
    print(report(rows, args.preset, args.images, size))
    print(f"\nwrote {path}")
    return 0
