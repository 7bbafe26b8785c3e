"""``hepix bench`` (``--suite all``, the default): the papers' experiments, one ``bench`` table.

Runs the experiments of :mod:`bench.suites.paper` in this process, one after the other, on the
data sets when present (:mod:`bench.datasets`), and writes their rows to
``OUT/bench/<run_id>.parquet`` (``bench.schemas.BENCH``); ``hepix report --bench OUT`` turns them
into plots and a Markdown report next to the papers' figures (:mod:`bench.seeds`).
``--quick`` (a few minutes) measures smaller sizes, fewer images and a shorter Fig. 10 budget than
the full run; both say in every row what was measured and what is extrapolated.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench import datasets, seeds
from bench.contexts import Keys
from bench.rows import BenchRow, run_columns, write_rows
from bench.schemas import BENCH
from hecore.images import center_crop, load_image, resize
from jobs.runtime import runinfo

from . import paper
from .pixel import DEFAULT_STRATEGIES

#: The options of ``hepix bench`` this suite reads besides --out and --quick: none.
OPTIONS = frozenset()


@dataclass(frozen=True)
class AllConfig:
    fig3_sizes: tuple = (8, 32, 64, 128, 256)
    fig3_extrapolate: tuple = (512, 1024)
    fig10_subset: int = 64
    fig10_budget: float = 600.0
    brightness60_crops: int = 15       # DIV2K images resized to 512x512 (the TenSEAL study's preprocessing)
    brightness60_full: int = 15        # DIV2K images at their own size
    brightness60_presets: tuple = ("tenseal-8192", "bfv-8192", "bgv-8192")
    spark_images: int = 4              # DIV2K images through encrypt / process / decrypt on local Spark
    spark_master: str = "local[2]"
    limits_presets: tuple = ("paper-4096", "tenseal-8192")
    packed_images: int = 4
    packed_repeats: int = 5
    packed_presets: tuple = ("paper-4096", "tenseal-8192")
    pixel_preset: str = "paper-4096"


FULL = AllConfig()
QUICK = AllConfig(fig3_sizes=(8, 32, 64, 128), fig3_extrapolate=(256, 512, 1024), fig10_subset=32,
                  fig10_budget=90.0, brightness60_crops=3, brightness60_full=1, packed_images=1, packed_repeats=2,
                  spark_images=1)


def _progress(row: BenchRow) -> None:
    what = row.strategy or row.implementation
    t = row.seconds
    extra = " (extrapolated)" if row.extrapolated else ""
    mem = row.driver_peak_rss_encrypt
    mem = f"  peak {mem / 2**20:,.0f} MiB" if mem else ""
    print(f"  {row.experiment:<12} {row.layout or '':<6} {row.preset or '':<12} "
          f"{what or '':<16} {row.encryption or '':<9} {row.serialization or '':<4} {row.image or '':<34} "
          f"{t if t is not None else float('nan'):9.3f} s{extra}{mem}", flush=True)


def run(args) -> int:
    """``hepix bench --suite all``: every experiment, one ``OUT/bench/<run_id>.parquet``."""
    config = QUICK if args.quick else FULL
    run_id, started = runinfo.new_run_id(), runinfo.now()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    print(f"hepix bench {run_id}: the papers' experiments{' (quick)' if args.quick else ''}, "
          f"{runinfo.cores()} cores, load {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print("pixel-layout caching strategies are research modes that leak (security='leaks' in their rows)")
    keys = Keys()
    ctx, _ev = keys.get(config.pixel_preset)
    rows: list[BenchRow] = []

    name, source = datasets.fig3_source()
    print(f"\niCHEETAH Fig. 3 / Table 2: {name}, sizes {list(config.fig3_sizes)}, extrapolated to "
          f"{list(config.fig3_extrapolate)}")
    rows += paper.fig3(ctx, source, name, config.fig3_sizes, DEFAULT_STRATEGIES,
                       extrapolate_to=config.fig3_extrapolate, progress=_progress)

    files = datasets.usc_sipi_files()
    if files:
        print(f"\niCHEETAH Fig. 10: up to {len(files)} USC-SIPI images at 256x256, {config.fig10_subset}x"
              f"{config.fig10_subset} centre crops, budget {config.fig10_budget:.0f} s")
        rows += paper.fig10(ctx, files, subset=config.fig10_subset, budget_seconds=config.fig10_budget,
                            progress=_progress)
    else:
        print(f"\niCHEETAH Fig. 10: skipped, no USC-SIPI images in {datasets.usc_sipi_dir()}")

    div2k = datasets.div2k_files()
    study = seeds.TENSEAL_STUDY.short
    if div2k:
        images = []
        for p in div2k[:config.brightness60_crops]:
            images.append((f"div2k/{p.name}@512", resize(center_crop(load_image(p).pixels), 512)))
        for p in div2k[:config.brightness60_full]:
            px = load_image(p).pixels
            images.append((f"div2k/{p.name}@{px.shape[1]}x{px.shape[0]}", px))
        print(f"\n{study}: brightness +60 on {len(images)} DIV2K image(s), {', '.join(config.brightness60_presets)}")
        rows += paper.brightness60_isolated(images, config.brightness60_presets, progress=_progress)
    else:
        print(f"\n{study}: brightness +60 skipped, no DIV2K images in {datasets.DATASETS / 'div2k'}")

    if div2k and config.spark_images:
        print(f"\n{study} on Spark {config.spark_master}: encrypt, process brightness:60, decrypt "
              f"{min(config.spark_images, len(div2k))} DIV2K image(s) at 512x512, peak memory of driver and workers")
        rows += paper.spark_jobs(div2k[:config.spark_images], config.spark_master, progress=_progress)

    print("\nphysical limits: NumPy memcpy; packed encode / encrypt / serialise")
    rows += paper.limits(keys, resize(center_crop(source), 256), f"{name}@256", config.limits_presets,
                         progress=_progress)

    pk = datasets.packed_images(config.packed_images, 256)
    print(f"\npacked layout: {len(pk)} image(s) at 256x256, {', '.join(config.packed_presets)}, "
          f"median of {config.packed_repeats}")
    rows += paper.packed(pk, config.packed_presets, config.packed_repeats, progress=_progress)

    load_after = os.getloadavg()
    common = {**run_columns(run_id, started), "quick": bool(args.quick),
              "versions": json.dumps({**runinfo.versions(), "tenseal": runinfo.version("tenseal")}, sort_keys=True)}
    path = write_rows(rows, BENCH, Path(args.out) / "bench", run_id, common)
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after ({runinfo.cores()} cores)")
    print(f"wrote {path}\nnext: hepix report --bench {args.out} --out REPORT")
    return 0
