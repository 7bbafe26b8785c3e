"""``hepix bench --suite corpus``: encrypt -> process -> decrypt of an image corpus, the jobs against hecore.

The corpus is the DIV2K images at 2048x1024 read in place (``div2k/resized_2048x1024`` under
:data:`jobs.bench.datasets.DATASETS`), or -- without the data set -- images of the same size made from
scikit-image's samples (said so in the ``dataset`` column).  For each layout and encryption mode
(:data:`MODES`: packed with the public key, packed-complex with the owner's seeded secret-key
encryption) it runs, in this one run:

* the baseline: the same work done by hecore in this process pinned to one core -- decode each file,
  encrypt its tiles (the job's tile and halo), apply ``brightness:60`` to every ciphertext (load, op,
  serialize), then decrypt, put the tiles together, apply the chain's Finish, compute the plaintext
  reference and the metrics (MSE, PSNR, SSIM, exactness);
* the jobs: ``hepix encrypt``, ``hepix process --op brightness:60`` and ``hepix decrypt --images``
  (with the owner map) on ``local[2]``, each in its own Spark session.  ``seconds`` is the job's own
  time from its manifest; ``wall_seconds`` adds the session start-up, key reading and commit
  (``startup_seconds`` is the difference, shown apart).

Per job it reports seconds per ciphertext, the ratio of the job's rate to the baseline's
(``vs_core``) and to twice it (``vs_core_x2``: the goal is 0.8 on 2 cores), the bytes at rest per
pixel, and the driver's peak memory (this process and the Spark JVM; the Python workers apart).
Writes ``OUT/bench_corpus/<run_id>.parquet`` (``schemas.bench.BENCH_CORPUS``).
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jobs import runinfo
from jobs.bench.datasets import DATASETS, SAMPLES, sample
from jobs.bench.peakmem import PeakMeter
from jobs.bench.rows import write_rows
from jobs.bench.timing import load_1m
from schemas.bench import BENCH_CORPUS

log = logging.getLogger(__name__)

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "preset"})
DEFAULT_IMAGES = 4
DEFAULT_PRESET = "paper-4096"
OP = "brightness:60"
#: The corpus: DIV2K resized to 2048x1024 (width x height).
CORPUS_DIR = "div2k/resized_2048x1024"
WIDTH, HEIGHT = 2048, 1024
#: (layout, encryption) of the jobs compared.
MODES = (("packed", "public"), ("packed-complex", "symmetric"))
JOBS = ("encrypt", "process", "decrypt")
HALO = 1          # the encrypt job's default


@dataclass
class CorpusRow:
    """One job of one mode: hecore in one process on one core, or the Spark job (see ``BENCH_CORPUS``)."""

    layout: str
    encryption: str
    job: str                            # encrypt | process | decrypt
    implementation: str                 # hecore, one core | spark local[2]
    cores: int
    images: int
    pixels: int                         # channel values of the corpus
    ciphertexts: int
    seconds: float                      # the work (a job: its manifest's time, session start-up excluded)
    seconds_per_ciphertext: float
    pixels_per_second: float
    wall_seconds: float | None = None   # a job: start to end, session start-up and commit included
    startup_seconds: float | None = None
    vs_core: float | None = None        # the job's rate over the baseline's
    vs_core_x2: float | None = None     # ... over twice the baseline's (2 cores): goal >= 0.8
    bytes_at_rest: int | None = None
    bytes_per_pixel: float | None = None
    driver_peak_rss: int | None = None
    workers_peak_rss: int | None = None
    min_psnr: float | None = None
    min_exact_fraction: float | None = None
    max_abs_err: float | None = None


def corpus_images(count: int, folder: Path, width: int = WIDTH, height: int = HEIGHT) -> tuple[str, Path]:
    """A directory of ``count`` corpus images: links to the DIV2K files (read in place, never copied), or
    PNGs made from scikit-image's samples at ``width`` x ``height`` when the data set is absent."""
    from hecore.images import center_crop, resize

    folder.mkdir(parents=True, exist_ok=True)
    source = DATASETS / CORPUS_DIR
    files = sorted(source.glob("*.png"))[:count] if source.is_dir() else []
    if files:
        for p in files:
            (folder / p.name).symlink_to(p.resolve())
        return f"div2k {WIDTH}x{HEIGHT}", folder
    from PIL import Image

    log.warning("no DIV2K images in %s: using scikit-image's samples at %dx%d", source, width, height)
    side = max(width, height)
    for i in range(count):
        name = SAMPLES[i % len(SAMPLES)]
        img = sample(name)
        img = np.stack([img] * 3, axis=-1) if img.ndim == 2 else img[:, :, :3]
        square = resize(center_crop(img), side)
        y, x = (side - height) // 2, (side - width) // 2
        Image.fromarray(np.ascontiguousarray(square[y:y + height, x:x + width])).save(folder / f"{i:03d}-{name}.png")
    return f"generated {width}x{height} (scikit-image samples)", folder


# --- the baseline: hecore, one process, one core ------------------------------------------------------

def hecore_alone(paths: list[Path], keys: Path, layout: str, encryption: str) -> dict[str, CorpusRow]:
    """encrypt / process / decrypt of every image by hecore in this process (pinned to one core)."""
    from hecore.context import HEContext
    from hecore.encrypt import encryptor_for
    from hecore.evaluator import Evaluator
    from hecore.images import load_image
    from hecore.kernels import warm_up
    from hecore.keys import load_secret, read_public
    from hecore.layouts import Layout
    from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
    from hecore.ops.packed import PackedGeometry, apply_ops
    from hecore.ops.spec import finish_for, parse_ops, reference
    from hecore.quality import compare, round_to_uint8

    complex_packing = Layout.parse(layout).complex_packing
    owner = load_secret(keys)
    public = read_public(keys)
    enc = encryptor_for(public, secret_key=owner.secret_key_bytes() if encryption == "symmetric" else None,
                        packed=True)
    ev = Evaluator(HEContext.from_public(public))
    ops = parse_ops([OP])
    finish = finish_for(ops)
    tile_h, tile_w = default_tile(owner.params, HALO, complex_packing)
    warm_up()
    secs = dict.fromkeys(JOBS, 0.0)
    cts = pixels = nbytes = 0
    quality = []
    for path in paths:
        t = time.perf_counter()
        img = load_image(path).pixels
        grid, tiles = encrypt_tiles(img, enc, tile_h, tile_w, HALO, complex_packing)
        tiles = [(tile, bytes(tile.ct)) for tile in tiles]
        secs["encrypt"] += time.perf_counter() - t
        t = time.perf_counter()
        done = []
        for tile, ct in tiles:
            geom = PackedGeometry(tile_h, tile_w, HALO, tile.y, tile.x, grid.height, grid.width, complex_packing)
            c, _ = apply_ops(ev, ev.load(ct), ops, geom)
            done.append(tile.with_ct(ev.dump(c)))
        secs["process"] += time.perf_counter() - t
        t = time.perf_counter()
        raw = decrypt_tiles(owner, grid, done)
        values = finish.apply(raw)
        expected = reference(img, ops)
        q = compare(round_to_uint8(expected), values)
        err = float(np.max(np.abs(raw * finish.post_scale_float - expected)))
        secs["decrypt"] += time.perf_counter() - t
        quality.append((q.psnr, q.exact_fraction, err))
        cts += len(tiles)
        pixels += img.size
        nbytes += sum(len(ct) for _, ct in tiles)
    out = {}
    for job, s in secs.items():
        out[job] = CorpusRow(layout=layout, encryption=encryption, job=job, implementation="hecore, one core",
                             cores=1, images=len(paths), pixels=pixels, ciphertexts=cts, seconds=s,
                             seconds_per_ciphertext=s / cts, pixels_per_second=pixels / s)
    out["encrypt"].bytes_at_rest, out["encrypt"].bytes_per_pixel = nbytes, nbytes / pixels
    d = out["decrypt"]
    d.min_psnr, d.min_exact_fraction = min(q[0] for q in quality), min(q[1] for q in quality)
    d.max_abs_err = max(q[2] for q in quality)
    return out


def baseline_one_core(paths: list[Path], keys: Path, layout: str, encryption: str) -> dict[str, CorpusRow]:
    """:func:`hecore_alone` with this process pinned to one core, its affinity restored after (the Spark
    JVM started later must see both cores)."""
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if before:
        os.sched_setaffinity(0, {min(before)})
    try:
        return hecore_alone(paths, keys, layout, encryption)
    finally:
        if before:
            os.sched_setaffinity(0, before)


# --- the jobs -------------------------------------------------------------------------------------------

def _job(meter: PeakMeter, name: str, argv: list[str], out: Path, work: tuple[str, ...]) -> tuple[dict, float]:
    """Run one ``hepix`` job in this process; its manifest and wall time."""
    from jobs.cli import main

    t = time.perf_counter()
    with meter.stage(name):
        code = main(argv + ["--master", "local[2]", "--quiet"])
    wall = time.perf_counter() - t
    if code:
        raise RuntimeError(f"hepix {argv[0]} failed with exit code {code}")
    m = json.loads((out / "_manifest.json").read_text())
    m["work_seconds"] = sum(m["timings"][k] for k in work)
    return m, wall


def spark_jobs(images: Path, keys: Path, public: Path, tmp: Path, layout: str, encryption: str
               ) -> dict[str, CorpusRow]:
    """encrypt -> process -> decrypt on local[2], each job in its own session."""
    meter = PeakMeter(children=True)
    tag = f"{layout}-{encryption}"
    enc, proc, dec = tmp / f"enc-{tag}", tmp / f"proc-{tag}", tmp / f"dec-{tag}"
    runs = {
        "encrypt": _job(meter, "encrypt", ["encrypt", "--keys", str(keys), "--input", str(images), "--out", str(enc),
                                           "--layout", layout, "--encryption", encryption], enc,
                        ("decode_seconds", "cache_build_seconds", "encrypt_seconds")),
        "process": _job(meter, "process", ["process", "--keys", str(public), "--input", str(enc), "--out", str(proc),
                                           "--op", OP], proc, ("process_seconds",)),
        "decrypt": _job(meter, "decrypt", ["decrypt", "--keys", str(keys), "--input", str(proc), "--out", str(dec),
                                           "--owner", f"{enc}.owner", "--images", str(images)], dec,
                        ("decrypt_seconds",)),
    }
    out = {}
    for job, (m, wall) in runs.items():
        c = m["counts"]
        cts = c["ciphertexts"]
        s = m["work_seconds"]
        peak = meter.stages[job]
        out[job] = CorpusRow(layout=layout, encryption=encryption, job=job, implementation="spark local[2]",
                             cores=2, images=0, pixels=0, ciphertexts=cts, seconds=s, seconds_per_ciphertext=s / cts,
                             pixels_per_second=0.0, wall_seconds=wall, startup_seconds=wall - s,
                             bytes_at_rest=c.get("ciphertext_bytes"), driver_peak_rss=peak.driver,
                             workers_peak_rss=peak.workers)
    metrics = _metrics(dec)
    d = out["decrypt"]
    d.min_psnr = min(r["psnr"] for r in metrics)
    d.min_exact_fraction = min(r["exact_fraction"] for r in metrics)
    d.max_abs_err = max(r["max_abs_err"] for r in metrics)
    return out


def _metrics(dec: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(dec / "metrics").to_pylist()


# --- the suite ------------------------------------------------------------------------------------------

def compare_rows(core: dict[str, CorpusRow], spark: dict[str, CorpusRow]) -> list[CorpusRow]:
    """The rows of one mode, the Spark jobs' ratios to the baseline filled in."""
    rows = []
    for job in JOBS:
        b, s = core[job], spark[job]
        s.pixels, s.images = b.pixels, b.images
        s.pixels_per_second = s.pixels / s.seconds
        s.vs_core = b.seconds / s.seconds if s.ciphertexts == b.ciphertexts else None
        s.vs_core_x2 = s.vs_core / 2 if s.vs_core is not None else None
        if s.bytes_at_rest is not None and s.pixels:
            s.bytes_per_pixel = s.bytes_at_rest / s.pixels
        rows += [b, s]
    return rows


def run_corpus_bench(count: int, preset_name: str, tmp: Path) -> tuple[str, list[CorpusRow]]:
    from hecore.keys import export_public, keygen
    from hecore.params import preset

    dataset, images = corpus_images(count, tmp / "images")
    paths = sorted(images.iterdir())
    keys, public = tmp / "keys", tmp / "public"
    keygen(preset(preset_name), keys)
    export_public(keys, public)
    rows: list[CorpusRow] = []
    for layout, encryption in MODES:
        core = baseline_one_core(paths, keys, layout, encryption)
        rows += compare_rows(core, spark_jobs(images, keys, public, tmp, layout, encryption))
    return dataset, rows


def report(rows: list[CorpusRow], dataset: str, preset_name: str) -> str:
    from jobs.console import table

    shown = [vars(r) | {"ms_per_ct": r.seconds_per_ciphertext * 1e3,
                        "mb": (r.driver_peak_rss or 0) / 2**20 or None} for r in rows]
    lines = [table(shown, [("layout", "layout", ""), ("encryption", "encryption", ""), ("job", "job", ""),
                           ("implementation", "implementation", ""), ("ciphertexts", "cts", "d"),
                           ("seconds", "seconds", ".2f"), ("ms_per_ct", "ms/ct", ".3f"),
                           ("vs_core_x2", "x (2 x core)", ".2f"), ("startup_seconds", "start-up s", ".1f"),
                           ("bytes_per_pixel", "B/px", ".2f"), ("mb", "driver MB", ",.0f"),
                           ("min_psnr", "min PSNR", ".1f"), ("min_exact_fraction", "exact", ".4f")])]
    for layout, encryption in MODES:
        jobs = {r.job: r for r in rows if r.layout == layout and r.encryption == encryption
                and r.implementation.startswith("spark")}
        if jobs:
            lines.append(f"{layout} {encryption}: decrypt / encrypt time {jobs['decrypt'].seconds / jobs['encrypt'].seconds:.2f} "
                         f"(goal <= 1.5); each job's rate over 2 x the core's: "
                         + ", ".join(f"{j} {jobs[j].vs_core_x2:.2f}" for j in JOBS if jobs[j].vs_core_x2 is not None)
                         + " (goal >= 0.8)")
    load = load_1m()
    lines.append(f"{dataset}, {preset_name}, {OP}; 1-minute load average at the end {load if load is None else round(load, 1)} "
                 "on a shared machine: compare the ratios within this run")
    return "\n".join(lines)


def run(args) -> int:
    """``hepix bench --suite corpus``: measure, write ``OUT/bench_corpus/<run_id>.parquet``, print."""
    count = args.images if args.images is not None else (1 if args.quick else DEFAULT_IMAGES)
    preset_name = args.preset or DEFAULT_PRESET
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: corpus encrypt -> process {OP} -> decrypt, {count} images, {preset_name}")
    with tempfile.TemporaryDirectory(prefix="hepix-bench-corpus-") as tmp:
        dataset, rows = run_corpus_bench(count, preset_name, Path(tmp))
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(),
              "cores_available": runinfo.cores(), "git_commit": runinfo.git_commit(), "preset": preset_name,
              "dataset": dataset, "op": OP, "load_1m": load_1m()}
    path = write_rows(rows, BENCH_CORPUS, Path(args.out) / "bench_corpus", run_id, common)
    print(report(rows, dataset, preset_name))
    print(f"\nwrote {path}")
    return 0
