"""``hepix bench --suite corpus``: encrypt -> process -> decrypt of an image corpus, the jobs against hecore.

The corpus is the DIV2K images at 2048x1024 read in place (``div2k/resized_2048x1024`` under
:data:`bench.datasets.DATASETS`), or -- without the data set -- images of the same size made from
scikit-image's samples (said so in the ``dataset`` column).  For each layout and encryption mode
(:data:`MODES`: packed with the public key, packed-complex with the owner's seeded secret-key
encryption) it runs, in this one run:

* the baseline: the same work done by hecore in this process pinned to one core -- decode each file,
  encrypt its tiles (the job's tile and halo) and store them as the job does (SEAL's zstd serialization
  at the level the declared chain needs, ``--for-op brightness:60``), apply ``brightness:60`` to every
  ciphertext (load, op, serialize as it was stored), then decrypt, put the tiles together, apply the
  chain's Finish, compute the plaintext reference and the metrics (MSE, PSNR, SSIM, exactness);
* the jobs: ``hepix encrypt --for-op brightness:60``, ``hepix process --op brightness:60`` and ``hepix
  decrypt --images`` (with the owner map) on ``local[2]``, each a child process (``python -m jobs.cli``) with its own Spark
  session, its process tree sampled every :data:`SAMPLE_SECONDS` (:class:`bench.proctree.TreeSampler`).
  ``seconds`` is the job's own time from its manifest; ``wall_seconds`` adds the interpreter and session
  start-up, key reading and commit (``startup_seconds`` is the difference, shown apart).

Per job it reports seconds per ciphertext, the ratio of the job's rate to the baseline's
(``vs_core``), to twice it (``vs_core_x2``) and to the job's limit on two cores (``vs_limit``, goal 0.8:
twice the core's rate, or for process -- one plaintext addition per ciphertext, bound by I/O -- the
slower of that and a pyarrow copy of the same files on two processes, ``copy_seconds``), the JVM's CPU
seconds per GB of ciphertext read (process and decrypt; goal 1), the bytes at rest per
pixel, and where the time and memory go: the manifest's stage timings (:data:`STAGES`), the CPU
seconds of the driver Python, the Spark JVM (in local mode the driver and the executor: it reads,
shuffles and writes the bytes) and the Python workers, of which the core work's own time in the output
rows (:data:`CORE_COLUMN`), and the peak memory of each (driver = Python + JVM; worker = the largest
Python worker).  ``--images 4,10`` measures every size in one run and reports how the packed public
jobs' memory (the largest ciphertexts) grows with the corpus.
Writes ``OUT/bench_corpus/<run_id>.parquet`` (``bench.schemas.BENCH_CORPUS``).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.datasets import DATASETS, SAMPLES, sample
from bench.proctree import MemoryPeaks, TreeSampler
from bench.rows import write_rows
from bench.schemas import BENCH_CORPUS
from bench.timing import load_1m
from jobs.runtime import runinfo

log = logging.getLogger(__name__)

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "preset"})
#: ``--images`` may be a comma list of corpus sizes (``4,10``): every size is measured in the run.
IMAGE_LISTS = True
DEFAULT_IMAGES = 4
DEFAULT_PRESET = "paper-4096"
OP = "brightness:60"
#: The corpus: DIV2K resized to 2048x1024 (width x height).
CORPUS_DIR = "div2k/resized_2048x1024"
WIDTH, HEIGHT = 2048, 1024
#: (layout, encryption) of the jobs compared.
MODES = (("packed", "public"), ("packed-complex", "symmetric"))
JOBS = ("encrypt", "process", "decrypt")
#: The manifest timings each job may write, in the order they happen (read with ``.get``: a job writes
#: those it has; every timing it writes is kept in the ``timings`` column and printed).
STAGES = {"encrypt": ("decode_seconds", "cache_build_seconds", "encrypt_seconds"),
          "process": ("check_seconds", "process_seconds"),
          "decrypt": ("check_seconds", "scored_seconds", "decrypt_seconds")}
STAGE_COLUMNS = ("decode_seconds", "cache_build_seconds", "encrypt_seconds", "check_seconds", "process_seconds",
                 "scored_seconds", "decrypt_seconds")
#: The timings that make a job's ``seconds`` (decrypt's ``decrypt_seconds`` includes its checks).
WORK = {"encrypt": STAGES["encrypt"], "process": ("process_seconds",), "decrypt": ("decrypt_seconds",)}
#: Where a job's output rows hold the core work's own seconds: (table, column).
CORE_COLUMN = {"encrypt": ("ciphertexts", "encrypt_seconds"), "process": ("ciphertexts", "process_seconds"),
               "decrypt": ("metrics", "decrypt_seconds")}
#: Seconds between two samples of a job's process tree (a pid's CPU after its last sample is missed).
SAMPLE_SECONDS = 0.2
#: The repository, put on the jobs' ``PYTHONPATH`` so they run this code.
REPO = Path(__file__).resolve().parents[2]


@dataclass
class JobRun:
    """One job as run: its manifest (parsed JSON), wall seconds, and its process tree's peaks and CPU."""

    manifest: dict
    wall: float
    peaks: MemoryPeaks


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
    driver_peak_rss: int | None = None          # a job: its driver Python + the Spark JVM (peaks, bytes)
    workers_peak_rss: int | None = None         # a job: the largest Python worker
    min_psnr: float | None = None
    min_exact_fraction: float | None = None
    max_abs_err: float | None = None
    # a job: its manifest's timings (None where the job does not write one), all of them as JSON in ``timings``
    decode_seconds: float | None = None
    cache_build_seconds: float | None = None
    encrypt_seconds: float | None = None
    check_seconds: float | None = None
    process_seconds: float | None = None
    scored_seconds: float | None = None
    decrypt_seconds: float | None = None
    timings: str | None = None
    # a job: its process tree, sampled (:class:`bench.proctree.TreeSampler`)
    driver_python_peak_rss: int | None = None
    driver_jvm_peak_rss: int | None = None
    workers_together_peak_rss: int | None = None
    worker_processes: int | None = None
    driver_python_cpu_seconds: float | None = None
    jvm_cpu_seconds: float | None = None
    workers_cpu_seconds: float | None = None
    core_seconds: float | None = None           # the core work's own (wall) time, summed over the output rows
    copy_seconds: float | None = None           # process: a pyarrow copy of its input files on two processes
    limit_seconds: float | None = None          # a job: max(core / 2, the copy for process)
    vs_limit: float | None = None               # ... over the job's seconds: goal >= 0.8
    jvm_cpu_seconds_per_gb: float | None = None  # process, decrypt: the JVM's CPU per GB of ciphertext read


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
    from hecore.encrypt import encryptor_for
    from hecore.images import load_image
    from hecore.layouts import Layout
    from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
    from hecore.ops.packed import PackedGeometry, apply_ops
    from hecore.ops.spec import finish_for, parse_ops, reference
    from hecore.planner import at_rest, storage_layout
    from hecore.quality import compare, round_to_uint8
    from hecore.seal.atrest import SealStoreEncryptor
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.kernels import warm_up
    from hecore.seal.keys import load_secret, read_public

    complex_packing = Layout.parse(layout).complex_packing
    owner = load_secret(keys)
    public = read_public(keys)
    ops = parse_ops([OP])
    symmetric = encryption == "symmetric"
    # stored as the job stores them: at the level the declared chain needs, in SEAL's zstd serialization
    enc = SealStoreEncryptor(encryptor_for(public, secret_key=owner.secret_key_bytes() if symmetric else None,
                                           packed=True),
                             at_rest(owner.params, ops, layout, seeded=symmetric, store="seal"), "zstd")
    ev = Evaluator(HEContext.from_public(public))
    finish = finish_for(ops)
    _, halo = storage_layout(owner.params, ops)     # the job's halo for its --for-op chain (0 here)
    tile_h, tile_w = default_tile(owner.params, halo, complex_packing)
    warm_up()
    secs = dict.fromkeys(JOBS, 0.0)
    cts = pixels = nbytes = 0
    quality = []
    for path in paths:
        t = time.perf_counter()
        img = load_image(path).pixels
        grid, tiles = encrypt_tiles(img, enc, tile_h, tile_w, halo, complex_packing)
        tiles = [(tile, bytes(tile.ct)) for tile in tiles]
        secs["encrypt"] += time.perf_counter() - t
        t = time.perf_counter()
        done = []
        for tile, ct in tiles:
            geom = PackedGeometry(tile_h, tile_w, halo, tile.y, tile.x, grid.height, grid.width, complex_packing)
            c, _ = apply_ops(ev, ev.load(ct), ops, geom)
            done.append(tile.with_ct(ev.dump_like(c, ct)))
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

def _job(name: str, argv: list[str], out: Path, log_dir: Path) -> JobRun:
    """Run one ``hepix`` job as a child process (``local[2]``) under a :class:`TreeSampler`; its manifest,
    wall time (interpreter start and imports included) and process tree."""
    cmd = [sys.executable, "-m", "jobs.cli", *argv, "--master", "local[2]", "--quiet"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    logfile = log_dir / f"{out.name}.log"
    t = time.perf_counter()
    with open(logfile, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)
        with TreeSampler(proc.pid, SAMPLE_SECONDS) as sampler:
            code = proc.wait()
    wall = time.perf_counter() - t
    if code:
        raise RuntimeError(f"hepix {name} failed with exit code {code}: {logfile.read_text()[-3000:]}")
    return JobRun(json.loads((out / "_manifest.json").read_text()), wall, sampler.peaks)


def core_seconds(job: str, out: Path) -> float | None:
    """The core work's own time of ``job``, summed over its output rows (:data:`CORE_COLUMN`)."""
    import pyarrow.parquet as pq

    table, column = CORE_COLUMN[job]
    try:
        values = pq.read_table(out / table, columns=[column]).column(column)
    except (OSError, KeyError, ValueError):
        return None
    return float(sum(v for v in values.to_pylist() if v is not None))


def job_row(layout: str, encryption: str, job: str, r: JobRun, core: float | None) -> CorpusRow:
    """The row of one Spark job: its counts, the manifest's timings and the process tree's peaks and CPU."""
    c, t, p = r.manifest["counts"], r.manifest.get("timings", {}), r.peaks
    cts = c["ciphertexts"]
    s = sum(t.get(k, 0.0) for k in WORK[job])
    if s <= 0:
        log.warning("the %s manifest has none of %s: its seconds are its wall time", job, ", ".join(WORK[job]))
        s = r.wall
    mb = 2**20
    stages = {k: t.get(k) for k in STAGE_COLUMNS}
    return CorpusRow(layout=layout, encryption=encryption, job=job, implementation="spark local[2]", cores=2,
                     images=0, pixels=0, ciphertexts=cts, seconds=s, seconds_per_ciphertext=s / cts,
                     pixels_per_second=0.0, wall_seconds=r.wall, startup_seconds=r.wall - s,
                     bytes_at_rest=c.get("ciphertext_bytes"),
                     driver_peak_rss=int((p.driver_python_mb + p.driver_jvm_mb) * mb),
                     workers_peak_rss=int(p.worker_python_max_mb * mb), **stages,
                     timings=json.dumps({k: v for k, v in t.items() if isinstance(v, (int, float))}),
                     driver_python_peak_rss=int(p.driver_python_mb * mb), driver_jvm_peak_rss=int(p.driver_jvm_mb * mb),
                     workers_together_peak_rss=int(p.workers_together_mb * mb), worker_processes=p.worker_processes,
                     driver_python_cpu_seconds=p.driver_python_cpu, jvm_cpu_seconds=p.driver_jvm_cpu,
                     workers_cpu_seconds=p.worker_python_cpu, core_seconds=core)


def spark_jobs(images: Path, keys: Path, public: Path, tmp: Path, layout: str, encryption: str
               ) -> dict[str, CorpusRow]:
    """encrypt -> process -> decrypt on local[2], each job its own process (and Spark session)."""
    tag = f"{layout}-{encryption}"
    enc, proc, dec = tmp / f"enc-{tag}", tmp / f"proc-{tag}", tmp / f"dec-{tag}"
    argv = {
        "encrypt": (["encrypt", "--keys", str(keys), "--input", str(images), "--out", str(enc), "--layout", layout,
                     "--encryption", encryption, "--for-op", OP], enc),
        "process": (["process", "--keys", str(public), "--input", str(enc), "--out", str(proc), "--op", OP], proc),
        "decrypt": (["decrypt", "--keys", str(keys), "--input", str(proc), "--out", str(dec), "--owner",
                     f"{enc}.owner", "--images", str(images)], dec),
    }
    out = {}
    for job, (args, where) in argv.items():
        out[job] = job_row(layout, encryption, job, _job(job, args, where, tmp), core_seconds(job, where))
    out["process"].copy_seconds = pyarrow_copy(enc / "ciphertexts", tmp / f"copy-{tag}")
    read = {"process": out["encrypt"].bytes_at_rest, "decrypt": out["process"].bytes_at_rest}
    for job, nbytes in read.items():
        if nbytes and out[job].jvm_cpu_seconds is not None:
            out[job].jvm_cpu_seconds_per_gb = out[job].jvm_cpu_seconds / (nbytes / 1e9)
    metrics = _metrics(dec)
    d = out["decrypt"]
    d.min_psnr = min(r["psnr"] for r in metrics)
    d.min_exact_fraction = min(r["exact_fraction"] for r in metrics)
    d.max_abs_err = max(r["max_abs_err"] for r in metrics)
    return out


def _copy_file(paths: tuple[str, str]) -> int:
    """Read one Parquet file whole and write it back unchanged (the ciphertext files' writer settings)."""
    import pyarrow.parquet as pq

    from tasks.files import WRITER_OPTIONS

    table = pq.read_table(paths[0])
    pq.write_table(table, paths[1], row_group_size=max(1, table.num_rows), **WRITER_OPTIONS)
    return os.path.getsize(paths[1])


def pyarrow_copy(table_dir: Path, target: Path, processes: int = 2) -> float:
    """Seconds to read every Parquet file of ``table_dir`` and write it back into ``target`` with pyarrow,
    on ``processes`` processes: what process's I/O costs at the least on these cores."""
    from concurrent.futures import ProcessPoolExecutor

    target.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in table_dir.iterdir() if p.suffix == ".parquet")
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(len, [()] * processes))                # the processes started and warm
        t = time.perf_counter()
        list(pool.map(_copy_file, [(str(f), str(target / f.name)) for f in files]))
        seconds = time.perf_counter() - t
    for f in target.iterdir():
        f.unlink()
    return seconds


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
        if s.vs_core is not None:
            s.limit_seconds = max(b.seconds / 2, s.copy_seconds or 0.0)
            s.vs_limit = s.limit_seconds / s.seconds
        if s.bytes_at_rest is not None and s.pixels:
            s.bytes_per_pixel = s.bytes_at_rest / s.pixels
        rows += [b, s]
    return rows


def run_corpus_bench(counts: list[int], preset_name: str, tmp: Path) -> tuple[str, list[CorpusRow]]:
    """Every mode at every corpus size in ``counts`` (one set of keys): the baseline's and the jobs' rows."""
    from hecore.seal.keys import export_public, keygen
    from hecore.seal.params import preset

    keys, public = tmp / "keys", tmp / "public"
    keygen(preset(preset_name), keys)
    export_public(keys, public)
    rows: list[CorpusRow] = []
    datasets = []
    for count in counts:
        work = tmp / f"{count}-images"
        dataset, images = corpus_images(count, work / "images")
        datasets.append(dataset)
        paths = sorted(images.iterdir())
        for layout, encryption in MODES:
            core = baseline_one_core(paths, keys, layout, encryption)
            rows += compare_rows(core, spark_jobs(images, keys, public, work, layout, encryption))
    return datasets[0], rows


def _mb(v: int | None) -> float | None:
    return None if v is None else v / 2**20


def _stages(r: CorpusRow) -> str:
    """The job's manifest timings as written, ``decode 6.1 cache_build 0.0 ...`` (``_seconds`` left out)."""
    t = json.loads(r.timings or "{}")
    return " ".join(f"{k.removesuffix('_seconds')} {v:.1f}" for k, v in t.items() if k.endswith("_seconds"))


def breakdown(rows: list[CorpusRow]) -> str:
    """Where each job's time and memory go: wall and start-up, the manifest's stages, CPU seconds by role
    (the JVM moving bytes, the Python workers, of which the core work), the peaks by role."""
    from jobs.runtime.console import table

    shown = [vars(r) | {"mode": f"{r.layout}/{r.encryption}", "stages": _stages(r),
                        "py_mb": _mb(r.driver_python_peak_rss), "jvm_mb": _mb(r.driver_jvm_peak_rss),
                        "worker_mb": _mb(r.workers_peak_rss), "together_mb": _mb(r.workers_together_peak_rss)}
             for r in rows if r.implementation.startswith("spark")]
    return table(shown, [("images", "images", "d"), ("mode", "mode", ""), ("job", "job", ""),
                         ("wall_seconds", "wall s", ".1f"), ("startup_seconds", "start-up s", ".1f"),
                         ("stages", "stages (manifest, s)", ""), ("jvm_cpu_seconds", "JVM cpu s", ".1f"),
                         ("workers_cpu_seconds", "workers cpu s", ".1f"), ("core_seconds", "core s", ".1f"),
                         ("driver_python_cpu_seconds", "driver cpu s", ".1f"), ("py_mb", "driver py MB", ",.0f"),
                         ("jvm_mb", "JVM MB", ",.0f"), ("worker_mb", "worker MB", ",.0f"),
                         ("together_mb", "workers MB", ",.0f")])


def _growth(a: float, b: float) -> str:
    return f"{100 * (b - a) / a:+.1f}%" if a else "n/a"


def memory_by_size(rows: list[CorpusRow], layout: str = "packed", encryption: str = "public") -> list[str]:
    """For one mode (default packed public, the largest ciphertexts): each job's driver peak (Python + JVM)
    and largest worker at each corpus size, the growth from the smallest size to the largest, and the goals."""
    jobs = [r for r in rows
            if r.implementation.startswith("spark") and (r.layout, r.encryption) == (layout, encryption)]
    sizes = sorted({r.images for r in jobs})
    if not sizes:
        return []
    at = {(r.job, r.images): r for r in jobs}
    lines = [f"memory of {layout} {encryption} at {', '.join(map(str, sizes))} images (driver = Python + JVM; "
             "worker = the largest Python worker):"]
    for job in JOBS:
        got = [at[(job, n)] for n in sizes if (job, n) in at]
        drivers = [_mb(r.driver_peak_rss) or 0.0 for r in got]
        workers = [_mb(r.workers_peak_rss) or 0.0 for r in got]
        line = (f"  {job}: driver " + " -> ".join(f"{v:,.0f}" for v in drivers) + " MB, largest worker "
                + " -> ".join(f"{v:,.0f}" for v in workers) + " MB")
        if len(got) > 1:
            line += f" (growth: driver {_growth(drivers[0], drivers[-1])}, worker {_growth(workers[0], workers[-1])})"
        lines.append(line)
    worst = max((_mb(r.workers_peak_rss) or 0.0) for r in jobs)
    grows = f"the driver grows < 10% from {sizes[0]} to {sizes[-1]} images; " if len(sizes) > 1 else ""
    lines.append(f"  goals: {grows}no worker above 1 GB (largest here {worst:,.0f} MB)")
    return lines


def jvm_slopes(rows: list[CorpusRow]) -> list[str]:
    """Per mode, for process and decrypt: the JVM's CPU seconds per GB of ciphertext read between the
    smallest and the largest corpus (what grows with the data; a job's fixed cost -- the JVM's start,
    Spark's planning -- cancels out)."""
    lines = []
    for layout, encryption in MODES:
        for job, reads in (("process", "encrypt"), ("decrypt", "process")):
            got = sorted((r.images, r) for r in rows if r.implementation.startswith("spark")
                         and (r.layout, r.encryption, r.job) == (layout, encryption, job))
            inputs = {r.images: r.bytes_at_rest for r in rows if r.implementation.startswith("spark")
                      and (r.layout, r.encryption, r.job) == (layout, encryption, reads)}
            if len(got) < 2:
                continue
            (a, ra), (b, rb) = got[0], got[-1]
            gb = ((inputs.get(b) or 0) - (inputs.get(a) or 0)) / 1e9
            if gb > 0 and ra.jvm_cpu_seconds is not None and rb.jvm_cpu_seconds is not None:
                grows = (rb.jvm_cpu_seconds - ra.jvm_cpu_seconds) / gb
                lines.append(f"{layout} {encryption} {job}: the JVM's CPU grows {grows:.1f} s per GB read from {a} to "
                             f"{b} images (goal <= 1)")
    return lines


def report(rows: list[CorpusRow], dataset: str, preset_name: str) -> str:
    from jobs.runtime.console import table

    shown = [vars(r) | {"ms_per_ct": r.seconds_per_ciphertext * 1e3, "mb": _mb(r.driver_peak_rss),
                        "worker_mb": _mb(r.workers_peak_rss)} for r in rows]
    lines = [table(shown, [("images", "images", "d"), ("layout", "layout", ""), ("encryption", "encryption", ""),
                           ("job", "job", ""), ("implementation", "implementation", ""), ("ciphertexts", "cts", "d"),
                           ("seconds", "seconds", ".2f"), ("ms_per_ct", "ms/ct", ".3f"),
                           ("vs_core_x2", "x (2 x core)", ".2f"), ("vs_limit", "x limit", ".2f"),
                           ("startup_seconds", "start-up s", ".1f"),
                           ("bytes_per_pixel", "B/px", ".2f"), ("mb", "driver MB", ",.0f"),
                           ("worker_mb", "worker MB", ",.0f"), ("min_psnr", "min PSNR", ".1f"),
                           ("min_exact_fraction", "exact", ".4f")])]
    for n in sorted({r.images for r in rows}):
        for layout, encryption in MODES:
            jobs = {r.job: r for r in rows if (r.layout, r.encryption, r.images) == (layout, encryption, n)
                    and r.implementation.startswith("spark")}
            if len(jobs) == len(JOBS):
                ratio = jobs["decrypt"].seconds / jobs["encrypt"].seconds
                unlike = [j for j in JOBS if jobs[j].vs_limit is None]
                if unlike:          # the baseline did other work than the job: its ratios would mean nothing
                    lines.append(f"{n} images, {layout} {encryption}: no ratio for {', '.join(unlike)}: the baseline "
                                 "made another number of ciphertexts than the job (another tile or halo)")
                lines.append(f"{n} images, {layout} {encryption}: decrypt / encrypt time {ratio:.2f} (goal <= 1); "
                             "each job's rate over its limit (2 x the core's; process: the slower of that and "
                             f"the pyarrow copy, {jobs['process'].copy_seconds or 0:.2f} s): "
                             + ", ".join(f"{j} {jobs[j].vs_limit:.2f}" for j in JOBS
                                         if jobs[j].vs_limit is not None) + " (goal >= 0.8); JVM CPU s per GB read: "
                             + ", ".join(f"{j} {jobs[j].jvm_cpu_seconds_per_gb:.1f}" for j in ("process", "decrypt")
                                         if jobs[j].jvm_cpu_seconds_per_gb is not None) + " (goal <= 1)")
    lines += jvm_slopes(rows)
    lines += ["", f"where the jobs' time and memory go (each job's process tree sampled every {SAMPLE_SECONDS} s): "
              "JVM = the Spark JVM, in local mode driver and executor (reading, shuffling, writing the bytes); "
              "workers = the Python workers, of which core s is the core work's own time in the output rows "
              "(wall clock in the workers: above their CPU on a loaded machine)",
              breakdown(rows), ""]
    lines += memory_by_size(rows)
    load = load_1m()
    lines.append(f"{dataset}, {preset_name}, {OP}; 1-minute load average at the end "
                 f"{load if load is None else round(load, 1)} on a shared machine: compare the ratios within this run")
    return "\n".join(lines)


def image_counts(args) -> list[int]:
    """``--images``: one count or a list of corpus sizes; default 4 (1 with --quick)."""
    if args.images is None:
        return [1 if args.quick else DEFAULT_IMAGES]
    return sorted(set(args.images)) if isinstance(args.images, list) else [args.images]


def run(args) -> int:
    """``hepix bench --suite corpus``: measure, write ``OUT/bench_corpus/<run_id>.parquet``, print."""
    counts = image_counts(args)
    preset_name = args.preset or DEFAULT_PRESET
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: corpus encrypt -> process {OP} -> decrypt, {','.join(map(str, counts))} images, "
          f"{preset_name}")
    with tempfile.TemporaryDirectory(prefix="hepix-bench-corpus-") as tmp:
        dataset, rows = run_corpus_bench(counts, preset_name, Path(tmp))
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(),
              "cores_available": runinfo.cores(), "git_commit": runinfo.git_commit(), "preset": preset_name,
              "dataset": dataset, "op": OP, "load_1m": load_1m()}
    path = write_rows(rows, BENCH_CORPUS, Path(args.out) / "bench_corpus", run_id, common)
    print(report(rows, dataset, preset_name))
    print(f"\nwrote {path}")
    return 0
