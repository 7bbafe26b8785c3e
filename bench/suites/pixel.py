"""``hepix bench --suite pixel``: every pixel-layout strategy against ``fresh`` on the same image.

iCHEETAH (Wang et al., §3.2 and §4.3.1) caches ciphertexts of pixel values to speed up pixel-level
CKKS encryption.  Ratios, never absolute timings, are what hepix claims: ``fresh`` runs in the
same process on the same pixels, right before the strategy it is compared with, and a NumPy memory
copy of the same number of bytes gives the physical limit of any cache-and-add scheme on this
machine.  Writes ``OUT/bench_pixel/<run_id>.parquet`` (``bench.schemas.BENCH_PIXEL``) and prints
time, pixels/s, ciphertext MB/s and the speedup over ``fresh`` for every image size.
"""
from __future__ import annotations

import json
import logging
import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from bench.datasets import source_image
from bench.rows import run_columns, write_rows
from bench.schemas import BENCH_PIXEL
from hecore.encrypt.strategies import make_strategy, strategy_names
from hecore.images import center_crop, resize
from hecore.layouts.pixel import decrypt_tiles, encrypt_tiles
from hecore.quality import compare
from hecore.seal.context import HEContext
from hecore.seal.kernels import warm_up
from hecore.seal.params import DEFAULT_PRESET, preset
from jobs.runtime import runinfo
from jobs.runtime.console import table

log = logging.getLogger(__name__)

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"sizes", "strategies", "tile", "preset", "image"})

DEFAULT_SIZES = (8, 32, 64, 128)
DEFAULT_STRATEGIES = ("fresh", "radix", "radix-rand", "scan", "full")
DEFAULT_TILE = 32


@dataclass
class PixelMeasurement:
    """One strategy on one image (see ``bench.schemas.BENCH_PIXEL``)."""

    image: str
    size: int
    channels: int
    pixels: int
    strategy: str
    strategy_options: str
    security: str
    reuse_buffer: bool
    setup_seconds: float
    encrypt_seconds: float
    decrypt_seconds: float
    pixels_per_second: float
    ciphertext_bytes: int
    ciphertext_mb_per_second: float
    mse: float
    psnr: float
    ssim: float
    max_abs_err: float
    exact_fraction: float
    speedup_vs_fresh: float = math.nan
    speedup_vs_fresh_with_setup: float = math.nan
    memcpy_mb_per_second: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)


def memcpy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Bytes per second of a plain NumPy copy between two warm buffers (best of ``repeats``)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return nbytes / best


def measure_strategy(ctx: HEContext, name: str, image: np.ndarray, *, image_name: str = "image",
                     tile: int = DEFAULT_TILE, reuse_buffer: bool = True, options: dict | None = None,
                     allow_leaky: bool = False, meter=None) -> PixelMeasurement:
    """Prepare, encrypt (timed), decrypt (timed) and score one strategy on one image.

    ``meter``: a :class:`bench.peakmem.PeakMeter` that records the peak memory of the
    ``encrypt`` and ``decrypt`` stages (the ciphertexts kept for decryption count in both)."""
    options = options or {}
    stage = meter.stage if meter is not None else (lambda _name: nullcontext())
    strategy = make_strategy(name, ctx, allow_leaky=allow_leaky, **options).prepare(image)
    # Warm the output buffer (and the kernels) on the first tile: steady state is what we time.
    grid, tiles = encrypt_tiles(image, strategy, tile, tile, reuse_buffer=reuse_buffer)
    first = next(tiles)
    del first, tiles

    kept = []
    nbytes = 0
    grid, tiles = encrypt_tiles(image, strategy, tile, tile, reuse_buffer=reuse_buffer)
    with stage("encrypt"):
        t = time.perf_counter()
        for pt in tiles:
            nbytes += pt.batch.nbytes
            # Keep a copy for decryption, outside the timed region.
            t_pause = time.perf_counter()
            kept.append(pt if not reuse_buffer else replace(pt, batch=pt.batch.copy()))
            t += time.perf_counter() - t_pause
        encrypt_seconds = time.perf_counter() - t

    with stage("decrypt"):
        t = time.perf_counter()
        decrypted = decrypt_tiles(ctx, grid, kept)
        decrypt_seconds = time.perf_counter() - t
    q = compare(image, decrypted)
    pixels = int(image.size)
    return PixelMeasurement(
        image=image_name, size=int(image.shape[0]), channels=grid.channels, pixels=pixels,
        strategy=name, strategy_options=json.dumps(strategy.options(), sort_keys=True),
        security=strategy.security, reuse_buffer=reuse_buffer,
        setup_seconds=strategy.setup_seconds, encrypt_seconds=encrypt_seconds,
        decrypt_seconds=decrypt_seconds, pixels_per_second=pixels / encrypt_seconds,
        ciphertext_bytes=nbytes, ciphertext_mb_per_second=nbytes / encrypt_seconds / 1e6,
        mse=q.mse, psnr=q.psnr, ssim=q.ssim, max_abs_err=q.max_abs_err, exact_fraction=q.exact_fraction,
    )


def run_pixel_bench(ctx: HEContext, images: dict[str, np.ndarray], *,
                    strategies=DEFAULT_STRATEGIES, tile: int = DEFAULT_TILE,
                    progress=None) -> list[PixelMeasurement]:
    """Every strategy against ``fresh`` on every image (images are keyed by a display name).

    ``fresh`` is always measured first on each image; the speedups of the
    others are ratios to that measurement.  The memcpy bandwidth is measured
    once in the same run.
    """
    warm_up()
    memcpy = memcpy_bandwidth()
    rows: list[PixelMeasurement] = []
    names = ["fresh"] + [s for s in strategies if s != "fresh"]
    for image_name, image in images.items():
        base = None
        for name in names:
            m = measure_strategy(ctx, name, image, image_name=image_name, tile=tile, allow_leaky=True)
            if base is None:
                base = m
            m.speedup_vs_fresh = base.encrypt_seconds / m.encrypt_seconds
            m.speedup_vs_fresh_with_setup = (
                (base.encrypt_seconds + base.setup_seconds) / (m.encrypt_seconds + m.setup_seconds))
            m.memcpy_mb_per_second = memcpy / 1e6
            rows.append(m)
            if progress:
                progress(m)
    return rows


# --- the command line ------------------------------------------------------------------------------

def run(args) -> int:
    """``hepix bench --suite pixel``: measure, write ``OUT/bench_pixel/<run_id>.parquet``, print."""
    sizes = args.sizes or list(DEFAULT_SIZES)
    strategies = args.strategies or list(DEFAULT_STRATEGIES)
    for s in strategies:
        if s not in strategy_names():
            raise SystemExit(f"hepix bench: unknown strategy {s!r}; choose from {', '.join(strategy_names())}")
    tile = args.tile or DEFAULT_TILE
    params = preset(args.preset or DEFAULT_PRESET)
    name, source = source_image(args.image)
    square = center_crop(source)
    images = {f"{name}@{s}": resize(square, s) for s in sizes}

    ctx, _secret = HEContext.generate(params)   # throwaway keys, never written anywhere
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: pixel layout, {params.name} ({params.describe()}), image {name}, "
          f"sizes {sizes}, {runinfo.cores()} cores")
    print("leaking strategies are measured as research modes (security='leaks' in every row)")

    def progress(m):
        print(f"  {m.size:>5}px {m.strategy:<10} {m.encrypt_seconds:9.3f} s  x{m.speedup_vs_fresh:6.1f}", flush=True)

    measured = run_pixel_bench(ctx, images, strategies=strategies, tile=tile, progress=progress)
    common = {**run_columns(run_id, started), "preset": params.name, "n": params.n,
              "qi_sizes": list(params.qi_sizes), "scale_bits": params.scale_bits}
    path = write_rows(measured, BENCH_PIXEL, Path(args.out) / "bench_pixel", run_id, common)

    rows = [m.as_dict() for m in measured]
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
    print(f"\nwrote {path}")
    return 0
