"""`hepix bench` (``--suite all``, the default): the seeds' experiments, one ``bench`` table.

Runs the experiments of :mod:`jobs.bench.suites.paper` in this process, one after
the other, and writes their rows to ``OUT/bench/<run_id>.parquet`` (schema
``schemas.tables.BENCH``); ``hepix report --bench OUT`` turns them into
plots and a Markdown report.  ``--quick`` (a few minutes) measures smaller
sizes, fewer images and a shorter Fig. 10 budget than the full run; both say
in every row what was measured and what is extrapolated.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hecore.images import center_crop, load_image, resize
from hecore.params import preset
from jobs import runinfo
from schemas.bench import BENCH

from . import paper as bench_repro
from .ops import _Keys
from .pixel import DEFAULT_STRATEGIES

#: The seeds' data, read in place (never copied into the project): ``$HEPIX_DATASETS``, else
#: ``../shared/datasets`` next to the repository.
DATASETS = Path(os.environ.get("HEPIX_DATASETS") or Path(__file__).resolve().parent.parent.parent / "shared" / "datasets")
FIG3_IMAGE = "7.1.01.tiff"      # 512x512 grey (USC-SIPI); scikit-image's camera without the data set


@dataclass(frozen=True)
class AllConfig:
    fig3_sizes: tuple = (8, 32, 64, 128, 256)
    fig3_extrapolate: tuple = (512, 1024)
    fig10_subset: int = 64
    fig10_budget: float = 600.0
    seed001_crops: int = 15            # DIV2K images resized to 512x512 (the seed's preprocessing)
    seed001_full: int = 15             # DIV2K images at their own size
    seed001_presets: tuple = ("tenseal-8192", "bfv-8192", "bgv-8192")
    spark_images: int = 4              # DIV2K images through encrypt / process / decrypt on local Spark
    spark_master: str = "local[2]"
    limits_presets: tuple = ("paper-4096", "tenseal-8192")
    packed_images: int = 4
    packed_repeats: int = 5
    packed_presets: tuple = ("paper-4096", "tenseal-8192")
    pixel_preset: str = "paper-4096"


FULL = AllConfig()
QUICK = AllConfig(fig3_sizes=(8, 32, 64, 128), fig3_extrapolate=(256, 512, 1024), fig10_subset=32,
                  fig10_budget=90.0, seed001_crops=3, seed001_full=1, packed_images=1, packed_repeats=2,
                  spark_images=1)


def _usc_sipi() -> list[Path]:
    folder = DATASETS / "usc-sipi"
    return sorted(folder.glob("*.tif*")) if folder.is_dir() else []


def _div2k() -> list[Path]:
    folder = DATASETS / "div2k"
    if not folder.is_dir():
        return []
    # Smallest first: the quick run's full-size image is an x2 LR one.
    return sorted(folder.rglob("*.png"), key=lambda p: (p.stat().st_size, p.name))


def _packed_images(count: int, source, name: str) -> dict:
    from jobs.bench.command import PACKED_USC_SIPI

    files = [DATASETS / "usc-sipi" / f for f in PACKED_USC_SIPI if (DATASETS / "usc-sipi" / f).is_file()]
    files += [p for p in _usc_sipi() if p not in files]
    out = {f"usc-sipi/{p.name}@256": resize(center_crop(load_image(p).pixels), 256) for p in files[:count]}
    return out or {f"{name}@256": resize(center_crop(source), 256)}


def _fig3_source():
    path = DATASETS / "usc-sipi" / FIG3_IMAGE
    if path.is_file():
        return f"usc-sipi/{FIG3_IMAGE}", load_image(path).pixels
    import skimage.data
    return "skimage-camera", skimage.data.camera()


def _progress(row) -> None:
    what = row.strategy or row.implementation
    t = row.seconds
    extra = " (extrapolated)" if row.extrapolated else ""
    mem = row.driver_peak_rss_encrypt
    mem = f"  peak {mem / 2**20:,.0f} MiB" if mem else ""
    print(f"  {row.experiment:<8} {row.layout or '':<6} {row.preset or '':<12} "
          f"{what or '':<16} {row.encryption or '':<9} {row.image or '':<34} "
          f"{t if t is not None else float('nan'):9.3f} s{extra}{mem}", flush=True)


def run_all(args) -> int:
    config = QUICK if args.quick else FULL
    run_id, started = runinfo.new_run_id(), runinfo.now()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    print(f"hepix bench {run_id}: the seeds' experiments{' (quick)' if args.quick else ''}, "
          f"{runinfo.cores()} cores, load {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print("pixel-layout caching strategies are research modes that leak (security='leaks' in their rows)")
    keys = _Keys()
    ctx, _ev = keys.get(config.pixel_preset)
    rows: list[bench_repro.BenchRow] = []

    name, source = _fig3_source()
    print(f"\nFig. 3 / Table 2: {name}, sizes {list(config.fig3_sizes)}, extrapolated to "
          f"{[s for s in config.fig3_extrapolate]}")
    rows += bench_repro.fig3(ctx, source, name, config.fig3_sizes, DEFAULT_STRATEGIES,
                             extrapolate_to=config.fig3_extrapolate, progress=_progress)

    files = _usc_sipi()
    if files:
        print(f"\nFig. 10: up to {len(files)} USC-SIPI images at 256x256, {config.fig10_subset}x"
              f"{config.fig10_subset} centre crops, budget {config.fig10_budget:.0f} s")
        rows += bench_repro.fig10(ctx, files, subset=config.fig10_subset, budget_seconds=config.fig10_budget,
                                  progress=_progress)
    else:
        print("\nFig. 10: skipped, no USC-SIPI images in ../shared/datasets/usc-sipi")

    div2k = _div2k()
    if div2k:
        images = []
        for p in div2k[:config.seed001_crops]:
            images.append((f"div2k/{p.name}@512", resize(center_crop(load_image(p).pixels), 512)))
        for p in div2k[:config.seed001_full]:
            px = load_image(p).pixels
            images.append((f"div2k/{p.name}@{px.shape[1]}x{px.shape[0]}", px))
        print(f"\nseed 001: brightness +60 on {len(images)} DIV2K image(s), {', '.join(config.seed001_presets)}")
        rows += bench_repro.seed001_isolated(images, config.seed001_presets, progress=_progress)
    else:
        print("\nseed 001: skipped, no DIV2K images in ../shared/datasets/div2k")

    if div2k and config.spark_images:
        print(f"\nseed 001 on Spark {config.spark_master}: encrypt, process brightness:60, decrypt "
              f"{min(config.spark_images, len(div2k))} DIV2K image(s) at 512x512, peak memory of driver and workers")
        rows += spark_seed001(div2k[:config.spark_images], config.spark_master, progress=_progress)

    print("\nphysical limits: NumPy memcpy; packed encode / encrypt / serialise")
    rows += bench_repro.limits(keys, resize(center_crop(source), 256), f"{name}@256", config.limits_presets,
                               progress=_progress)

    pk = _packed_images(config.packed_images, source, name)
    print(f"\npacked layout: {len(pk)} image(s) at 256x256, {', '.join(config.packed_presets)}, "
          f"median of {config.packed_repeats}")
    rows += bench_repro.packed(pk, config.packed_presets, config.packed_repeats, progress=_progress)

    load_after = os.getloadavg()
    common = {
        "run_id": run_id, "started": started, "quick": bool(args.quick), "machine": runinfo.machine(),
        "cores": runinfo.cores(), "hepix_version": runinfo.version("hepix"), "git_commit": runinfo.git_commit(),
        "versions": json.dumps({**runinfo.versions(), "tenseal": runinfo.version("tenseal")}, sort_keys=True),
    }
    path = write_rows([{**r.as_dict(), **common} for r in rows], Path(args.out) / "bench", run_id)
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after ({runinfo.cores()} cores)")
    print(f"wrote {path}\nnext: hepix report --bench {args.out} --out REPORT")
    return 0


def write_rows(rows: list[dict], folder: Path, run_id: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    names = set(BENCH.names)
    for r in rows:
        unknown = set(r) - names
        if unknown:
            raise ValueError(f"bench row has columns the BENCH schema lacks: {sorted(unknown)}")
    tmp = folder / f".{run_id}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist(rows, schema=BENCH), tmp, compression="zstd")
    path = folder / f"{run_id}.parquet"
    os.replace(tmp, path)
    return path


def spark_seed001(files: list[Path], master: str, *, preset_name: str = "tenseal-8192", size: int = 512,
                  progress=None, workdir: Path | None = None) -> list[bench_repro.BenchRow]:
    """Brightness +60 through the real jobs (keygen, encrypt, process, decrypt) on local Spark; one row
    with each job's wall time (Spark start-up included) and the peak memory of the driver (this process
    and Spark's JVM) and of the Python workers during it; SSIM/PSNR from the decrypt job's metrics.
    ``workdir``: keep the runs (keys, tables) there instead of a temporary directory that is removed."""
    import shutil
    import tempfile

    import pyarrow.dataset as ds

    from jobs.bench.peakmem import PeakMeter
    from jobs.cli import main as hepix

    tmp = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="hepix-bench-spark-"))
    try:
        images = tmp / "images"
        images.mkdir(parents=True)
        for f in files:
            (images / f.name).symlink_to(f.resolve())
        keys, pub = tmp / "keys", tmp / "public"
        for step in (["keygen", "--out", str(keys), "--preset", preset_name],
                     ["export-public", "--keys", str(keys), "--out", str(pub)]):
            if hepix(step):
                raise RuntimeError(f"hepix {' '.join(step)} failed")
        meter, seconds = PeakMeter(children=True), {}
        steps = {
            "encrypt": ["encrypt", "--keys", str(pub), "--input", str(images), "--out", str(tmp / "enc"),
                        "--resize", str(size), "--master", master],
            "op": ["process", "--keys", str(pub), "--input", str(tmp / "enc"), "--out", str(tmp / "proc"),
                   "--op", "brightness:60", "--master", master],
            "decrypt": ["decrypt", "--keys", str(keys), "--input", str(tmp / "proc"), "--out", str(tmp / "dec"),
                        "--images", str(images), "--master", master],
        }
        load = os.getloadavg()[0]
        for stage, argv in steps.items():
            with meter.stage(stage):
                t = time.perf_counter()
                if hepix(argv):
                    raise RuntimeError(f"hepix {' '.join(argv)} failed")
                seconds[stage] = time.perf_counter() - t
        metrics = [r for r in ds.dataset(tmp / "dec" / "metrics").to_table().to_pylist() if r["channel"] == -1]
        cts = ds.dataset(tmp / "enc" / "ciphertexts").to_table(columns=["ct"])
        nbytes = sum(len(b) for b in cts.column("ct").to_pylist())
        p = preset(preset_name)
        pixels = sum(r["width"] * r["height"] * r["channels"] for r in metrics)
        total = sum(seconds.values())
        mse = sum(r["mse"] for r in metrics) / len(metrics)
        row = bench_repro.BenchRow(
            experiment="spark", layout="packed", implementation=f"hepix jobs, Spark {master}",
            scheme=p.scheme, preset=p.name, n=p.n, qi_sizes=list(p.qi_sizes), scale_bits=p.scale_bits,
            strategy="fresh", encryption="public", security=metrics[0]["security"],
            image=f"{len(metrics)} DIV2K image(s)@{size}", size=size, width=size, height=size,
            channels=metrics[0]["channels"], pixels=pixels, pixels_measured=pixels, extrapolated=False,
            ops="brightness:60", encrypt_seconds=seconds["encrypt"], op_seconds=seconds["op"],
            decrypt_seconds=seconds["decrypt"], seconds=total, pixels_per_second=pixels / total,
            ciphertexts=cts.num_rows, bytes=nbytes, reference=metrics[0]["reference"],
            mse=mse, psnr=min(r["psnr"] for r in metrics), ssim=min(r["ssim"] for r in metrics),
            max_abs_err=max(r["max_abs_err"] for r in metrics),
            exact_fraction=min(r["exact_fraction"] for r in metrics), load_1m=load,
            extra=json.dumps({"times": "wall seconds of each job, Spark start-up included",
                              "images": [r["source"].rsplit("/", 1)[-1] for r in metrics]}),
            **meter.as_columns(),
        )
        if progress:
            progress(row)
        return [row]
    finally:
        if not workdir:
            shutil.rmtree(tmp, ignore_errors=True)
