"""The papers' experiments measured here, as rows of one ``bench`` table (``hepix bench``, suite ``all``).

Each function runs one experiment in this process and returns :class:`~bench.rows.BenchRow`
records (the columns of ``bench.schemas.BENCH``; null where not applicable):

* :func:`fig3` -- iCHEETAH (Wang et al.) Fig. 3 and Table 2: pixel-layout encryption time, MSE and
  PSNR against image size for ``fresh`` and the leaking caching strategies, next to the packed
  layout (one fresh public-key ciphertext per tile channel).  Sizes beyond the measured ones get
  rows with ``extrapolated=True``: their time is the per-value rate of the largest measured size,
  nothing else.
* :func:`fig10` -- iCHEETAH Fig. 10: ``fresh`` against ``full`` on as many USC-SIPI images at
  256x256 as a time budget allows, each measured on a centre crop of ``subset`` x ``subset`` pixels
  (``pixels_measured``); the report extrapolates to the whole image and says so.
* :func:`brightness60` -- the TenSEAL study (Saker et al. 2025, Tables 2-4): brightness +60 over
  DIV2K images (resized to 512x512 as the study did, and at full size), packed layout, CKKS against
  BFV and BGV, each stage (encrypt, op, decrypt) timed apart with its peak memory, and SSIM/PSNR of
  the decrypted result against the plaintext-brightened image.
* :func:`spark_jobs` -- the same brightness +60 through the real jobs on local Spark, with the
  driver's and the workers' peak memory per job.
* :func:`limits` -- NumPy memory-copy bandwidth, and the packed path's split of time into
  encoding, encryption and serialisation.
* :func:`packed` -- the rows of :func:`bench.suites.packed.run_packed_bench` (every
  implementation and encryption variant it measures: the packed layout public-key and symmetric,
  complex packing, TenSEAL as shipped and uncompressed, pixel ``full``).

Timings are single runs in one process on a machine that may be shared: every row carries the
1-minute load average at its start (``load_1m``).  Ratios within a run, never absolute times, are
what hepix claims.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Callable

import numpy as np

from bench.contexts import Keys
from bench.peakmem import PeakMeter
from bench.rows import BenchRow
from bench.timing import load_1m, split_encryption
from hecore.ciphertexts import SECURITY_IND_CPA
from hecore.images import center_crop, load_image, resize
from hecore.layouts.packed import decrypt_tiles as packed_decrypt_tiles
from hecore.layouts.packed import default_tile
from hecore.layouts.packed import encrypt_tiles as packed_encrypt_tiles
from hecore.layouts.pixel import channel_plane
from hecore.layouts.tiling import tile_image
from hecore.ops.spec import finish_for, parse_ops, reference
from hecore.quality import compare, round_to_uint8
from hecore.seal.context import HEContext
from hecore.seal.kernels import warm_up
from hecore.seal.params import preset

from .ops import run_packed_chain
from .pixel import measure_strategy, memcpy_bandwidth

Progress = Callable[[BenchRow], None] | None


def _base(experiment: str, ctx: HEContext, **kw) -> BenchRow:
    p = ctx.params
    return BenchRow(experiment=experiment, scheme=p.scheme, preset=p.name, n=p.n, qi_sizes=list(p.qi_sizes),
                    scale_bits=p.scale_bits, load_1m=load_1m(), **kw)


def _emit(rows: list, row: BenchRow, progress: Progress) -> None:
    rows.append(row)
    if progress:
        progress(row)


def _channels(img: np.ndarray) -> int:
    return 1 if img.ndim == 2 else int(img.shape[2])


# --- Fig. 3 and Table 2 ------------------------------------------------------------------------

def packed_row(experiment: str, ctx: HEContext, img: np.ndarray, name: str, meter: PeakMeter | None = None
               ) -> BenchRow:
    """Packed layout, public-key encryption of one image, decrypted and scored."""
    meter = meter or PeakMeter()
    th, tw = default_tile(ctx.params)
    with meter.stage("encrypt"):
        t = time.perf_counter()
        grid, produce = packed_encrypt_tiles(img, ctx, th, tw)
        tiles = list(produce)
        enc = time.perf_counter() - t
    with meter.stage("decrypt"):
        t = time.perf_counter()
        raw = packed_decrypt_tiles(ctx, grid, tiles)
        dec = time.perf_counter() - t
    q = compare(img, raw)
    nbytes = sum(len(pt.ct) for pt in tiles)
    return _base(experiment, ctx, layout="packed", implementation="hepix-packed", strategy="fresh",
                 encryption="public", serialization="none", security=SECURITY_IND_CPA, image=name,
                 size=int(img.shape[0]),
                 width=int(img.shape[1]), height=int(img.shape[0]), channels=_channels(img),
                 pixels=int(img.size), pixels_measured=int(img.size), extrapolated=False,
                 encrypt_seconds=enc, decrypt_seconds=dec, seconds=enc, pixels_per_second=img.size / enc,
                 ciphertexts=len(tiles), bytes=nbytes, bytes_per_second=nbytes / enc, reference="original",
                 mse=q.mse, psnr=q.psnr, ssim=q.ssim, max_abs_err=q.max_abs_err,
                 exact_fraction=q.exact_fraction, **meter.as_columns())


def pixel_row(experiment: str, ctx: HEContext, strategy: str, img: np.ndarray, name: str, tile: int,
              pixels: int | None = None, fresh: BenchRow | None = None) -> BenchRow:
    """Pixel layout, one strategy on one image (``pixels``: the whole image's values when ``img`` is a
    crop of it; the row is then marked extrapolated)."""
    meter = PeakMeter()
    m = measure_strategy(ctx, strategy, img, image_name=name, tile=min(tile, img.shape[0]),
                         allow_leaky=True, meter=meter)
    total = int(pixels or m.pixels)
    row = _base(experiment, ctx, layout="pixel", implementation="hepix-pixel", strategy=strategy,
                strategy_options=m.strategy_options, encryption="cached" if strategy != "fresh" else "public",
                serialization="none", security=m.security, image=name, size=int(round(math.sqrt(total / m.channels))),
                width=int(img.shape[1]), height=int(img.shape[0]), channels=m.channels, pixels=total,
                pixels_measured=m.pixels, extrapolated=total != m.pixels, setup_seconds=m.setup_seconds,
                encrypt_seconds=m.encrypt_seconds, decrypt_seconds=m.decrypt_seconds,
                seconds=total / m.pixels_per_second,
                pixels_per_second=m.pixels_per_second, ciphertexts=m.pixels, bytes=m.ciphertext_bytes,
                bytes_per_second=m.ciphertext_bytes / m.encrypt_seconds, reference="original",
                mse=m.mse, psnr=m.psnr, ssim=m.ssim, max_abs_err=m.max_abs_err, exact_fraction=m.exact_fraction,
                **meter.as_columns())
    if fresh is not None:
        row.speedup_vs_fresh = fresh.encrypt_seconds / m.encrypt_seconds
    elif strategy == "fresh":
        row.speedup_vs_fresh = 1.0
    return row


def fig3(ctx: HEContext, source: np.ndarray, source_name: str, sizes, strategies, *, extrapolate_to=(),
         tile: int = 32, progress: Progress = None) -> list[BenchRow]:
    """Every strategy (``fresh`` first) and the packed layout at every size; then, for each size in
    ``extrapolate_to`` above the largest measured one, a row per strategy and layout with
    ``extrapolated=True`` and the time at the largest measured size's per-value rate."""
    warm_up()
    square = center_crop(source)
    rows: list[BenchRow] = []
    names = ["fresh"] + [s for s in strategies if s != "fresh"]
    for size in sizes:
        img = resize(square, size)
        name = f"{source_name}@{size}"
        base = None
        for s in names:
            r = pixel_row("fig3", ctx, s, img, name, tile, fresh=base)
            base = base or r
            _emit(rows, r, progress)
        _emit(rows, packed_row("fig3", ctx, img, name), progress)
    top = max(sizes)
    last = [r for r in rows if r.size == top]
    unmeasured = {f.name: None for f in fields(BenchRow) if f.name.startswith(("driver_peak_rss", "workers_peak_rss"))}
    for size in sorted(s for s in extrapolate_to if s > top):
        for r in last:
            pixels = r.pixels // (top * top) * size * size
            est = replace(r, size=size, width=size, height=size, pixels=pixels, extrapolated=True,
                          image=f"{source_name}@{size}", seconds=pixels / r.pixels_per_second,
                          encrypt_seconds=None, decrypt_seconds=None, ciphertexts=None, bytes=None,
                          bytes_per_second=None, mse=None, psnr=None, ssim=None, max_abs_err=None,
                          exact_fraction=None, load_1m=load_1m(), **unmeasured)
            _emit(rows, est, progress)
    return rows


# --- Fig. 10 -----------------------------------------------------------------------------------

def fig10(ctx: HEContext, files: list[Path], *, size: int = 256, subset: int = 32, budget_seconds: float = 60.0,
          tile: int = 32, progress: Progress = None) -> list[BenchRow]:
    """``fresh`` and ``full`` on USC-SIPI images at ``size`` x ``size``, each measured on its centre
    ``subset`` x ``subset`` crop, image after image until ``budget_seconds`` have passed (at least one)."""
    warm_up()
    rows: list[BenchRow] = []
    start = time.perf_counter()
    for path in files:
        if rows and time.perf_counter() - start >= budget_seconds:
            break
        img = resize(center_crop(load_image(path).pixels), size)
        crop = center_crop(img, subset) if subset < size else img
        name = f"usc-sipi/{path.name}@{size}"
        fresh = pixel_row("fig10", ctx, "fresh", crop, name, tile, pixels=int(img.size))
        _emit(rows, fresh, progress)
        _emit(rows, pixel_row("fig10", ctx, "full", crop, name, tile, pixels=int(img.size), fresh=fresh), progress)
    return rows


# --- the TenSEAL study: brightness +60 --------------------------------------------------------------

#: The experiment name of :func:`brightness60` rows.
BRIGHTNESS60 = "brightness60"


def brightness60(keys: Keys, images: list[tuple[str, np.ndarray]], presets, *, ops_spec: str = "brightness:60",
                 progress: Progress = None) -> list[BenchRow]:
    """Brightness +60 (packed layout) on each image at each preset, stages timed apart with their peak
    memory, scored against the plaintext-brightened image (SSIM, PSNR, exactness): the TenSEAL
    study's experiment (Saker et al. 2025, §5-6, Tables 2-4)."""
    ops = parse_ops([ops_spec])
    finish = finish_for(ops)
    rows: list[BenchRow] = []
    for name, img in images:
        expected = round_to_uint8(reference(img, ops))
        for p in presets:
            ctx, ev = keys.get(p)
            meter = PeakMeter()
            res = run_packed_chain(ctx, ev, img, ops, meter=meter)
            q = compare(expected, finish.apply(res.raw))
            total = res.encrypt_seconds + res.op_seconds + res.decrypt_seconds
            _emit(rows, _base(BRIGHTNESS60, ctx, layout="packed", implementation="hepix-packed", strategy="fresh",
                              encryption="public", serialization="none", security=SECURITY_IND_CPA, image=name, size=int(img.shape[0]),
                              width=int(img.shape[1]), height=int(img.shape[0]), channels=_channels(img),
                              pixels=int(img.size), pixels_measured=int(img.size), extrapolated=False, ops=ops_spec,
                              encrypt_seconds=res.encrypt_seconds, op_seconds=res.op_seconds,
                              decrypt_seconds=res.decrypt_seconds, seconds=total,
                              pixels_per_second=img.size / total, ciphertexts=res.ciphertexts, bytes=res.nbytes,
                              bytes_per_second=res.nbytes / res.encrypt_seconds, reference="plaintext-processed",
                              mse=q.mse, psnr=q.psnr, ssim=q.ssim, max_abs_err=q.max_abs_err,
                              exact_fraction=q.exact_fraction, **meter.as_columns()), progress)
    return rows


def _brightness60_child(preset_name: str, images, ops_spec: str, conn) -> None:
    try:
        conn.send(("ok", brightness60(Keys(), images, (preset_name,), ops_spec=ops_spec)))
    except BaseException as e:     # noqa: BLE001 -- reported to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def brightness60_isolated(images: list[tuple[str, np.ndarray]], presets, *, ops_spec: str = "brightness:60",
                          progress: Progress = None) -> list[BenchRow]:
    """:func:`brightness60`, each preset in a fresh process (``spawn``), so that its stages' peak memory
    is that preset's alone (libraries, keys, its images) and not what earlier experiments left behind,
    as the TenSEAL study measured one scheme at a time."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    rows: list[BenchRow] = []
    for p in presets:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_brightness60_child, args=(p, images, ops_spec, child), name=f"brightness60-{p}")
        proc.start()
        child.close()
        status, got = parent.recv()
        proc.join()
        if status != "ok":
            raise RuntimeError(f"brightness +60 at {p} failed in its process: {got}")
        for r in got:
            _emit(rows, replace(r, extra=json.dumps({"process": "own process per preset"})), progress)
    return rows


# --- physical limits ---------------------------------------------------------------------------

def limits(keys: Keys, img: np.ndarray, name: str, presets, *, progress: Progress = None) -> list[BenchRow]:
    """A NumPy memcpy row (bytes/s of a plain copy: the floor of any cache-and-add scheme), and per
    preset the packed path's time split (:func:`bench.timing.split_encryption`): encoding,
    encryption and serialisation, summed over the image's tile channels, next to the whole pass's time."""
    rows: list[BenchRow] = []
    bw = memcpy_bandwidth()
    rows.append(BenchRow(experiment="limits", implementation="numpy-memcpy", layout="none", image="256 MiB buffer",
                         bytes=256 * 2**20, seconds=256 * 2**20 / bw, bytes_per_second=bw,
                         memcpy_bytes_per_second=bw, load_1m=load_1m()))
    if progress:
        progress(rows[-1])
    for p in presets:
        ctx, ev = keys.get(p)
        th, tw = default_tile(ctx.params)
        t = time.perf_counter()
        _grid, produce = packed_encrypt_tiles(img, ctx, th, tw)
        tiles = list(produce)
        seconds = time.perf_counter() - t
        enc = ser = encode = 0.0
        grid, plain = tile_image(img, th, tw)
        for tl in plain:
            for c in range(grid.channels):
                split = split_encryption(ctx, ev, np.asarray(channel_plane(tl.pixels, c), dtype=np.float64).reshape(-1))
                encode += split.encode
                enc += split.encrypt
                ser += split.serialize
        nbytes = sum(len(pt.ct) for pt in tiles)
        _emit(rows, _base("limits", ctx, layout="packed", implementation="hepix-packed", strategy="fresh",
                          encryption="public", serialization="none", security=SECURITY_IND_CPA, image=name, size=int(img.shape[0]),
                          width=int(img.shape[1]), height=int(img.shape[0]), channels=_channels(img),
                          pixels=int(img.size), pixels_measured=int(img.size), extrapolated=False,
                          seconds=seconds, encode_seconds=encode, encrypt_seconds=enc,
                          serialize_seconds=ser, pixels_per_second=img.size / seconds, ciphertexts=len(tiles),
                          bytes=nbytes, bytes_per_second=nbytes / seconds, memcpy_bytes_per_second=bw), progress)
    return rows


# --- the packed suite --------------------------------------------------------------------------

def packed(images: dict[str, np.ndarray], presets, repeats: int, *, progress: Progress = None) -> list[BenchRow]:
    """:func:`bench.suites.packed.run_packed_bench` as ``bench`` rows (experiment ``packed``)."""
    from .packed import run_packed_bench

    rows: list[BenchRow] = []
    for m in run_packed_bench(images, presets=presets, repeats=repeats):
        d = m.as_dict()
        layout = "pixel" if d["implementation"].startswith("hepix-pixel") else "packed"
        _emit(rows, BenchRow(
            experiment="packed", layout=layout, implementation=d["implementation"],
            library=d["library"], scheme="ckks", preset=d["preset"], n=d["n"],
            qi_sizes=d["qi_sizes"], scale_bits=d["scale_bits"], encryption=d["encryption"],
            serialization=d["serialization"],
            strategy="full" if d["encryption"] == "cached" else "fresh", security=d["security"], image=d["image"],
            size=d["height"], width=d["width"], height=d["height"], channels=d["channels"],
            pixels=d["pixels"], pixels_measured=d["pixels"], extrapolated=False,
            repeats=d["repeats"], seconds=d["seconds"], encrypt_seconds=d["encrypt_seconds"],
            serialize_seconds=d["serialize_seconds"], setup_seconds=d["setup_seconds"],
            pixels_per_second=d["pixels_per_second"], ciphertexts=d["ciphertexts"], bytes=d["bytes"],
            bytes_per_second=d["bytes"] / d["seconds"], exact_fraction=d["exact_fraction"],
            max_abs_err=d["max_abs_err"], reference="original", load_1m=load_1m(),
            extra=json.dumps({k: v for k, v in d.items() if k.startswith(("vs_", "bytes_vs_"))}),
        ), progress)
    return rows


# --- the TenSEAL study's brightness +60 through the jobs on Spark ------------------------------------

def spark_jobs(files: list[Path], master: str, *, preset_name: str = "tenseal-8192", size: int = 512,
               progress: Progress = None, workdir: Path | None = None) -> list[BenchRow]:
    """Brightness +60 through the real jobs (keygen, encrypt, process, decrypt) on local Spark; one row
    with each job's wall time (Spark start-up included) and the peak memory of the driver (this process
    and Spark's JVM) and of the Python workers during it; SSIM/PSNR from the decrypt job's metrics.
    ``workdir``: keep the runs (keys, tables) there instead of a temporary directory that is removed."""
    import shutil
    import tempfile

    import pyarrow.dataset as ds

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
        load = load_1m()
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
        row = BenchRow(
            experiment="spark", layout="packed", implementation=f"hepix jobs, Spark {master}",
            scheme=p.scheme, preset=p.name, n=p.n, qi_sizes=list(p.qi_sizes), scale_bits=p.scale_bits,
            strategy="fresh", encryption="public", serialization="none", security=metrics[0]["security"],
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
