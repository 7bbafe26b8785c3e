"""``hepix bench --suite load``: many images through packed `hepix encrypt`, with peak memory and throughput.

    hepix bench --suite load --images 1000 --sizes 64 --work /tmp/hepix-load --master 'local[2]'

Makes a corpus (random crops of the data sets, :data:`bench.datasets.DATASETS`, when
present, else generated images; ``--generated``: generated ones anyway) in ``--work`` (default a
temporary directory, removed after), makes keys, then runs ``hepix encrypt`` as a child
process with a bounded driver heap (``--driver-memory``, ``spark.driver.memory``) and samples the child's
process tree from ``/proc``: the Python driver, the driver JVM (in local mode also the executor), and the
Python workers (:class:`bench.proctree.TreeSampler`).  Peaks are each process's ``VmHWM`` (the kernel's
high-water mark of its resident set), so short spikes between samples are not missed; "workers
together" is the largest sum of the workers' current RSS over the samples.  Prints a summary, and
writes it as JSON with ``--json FILE`` (no Parquet table); a benchmark, not a test -- nothing here
asserts a speed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.datasets import DATASETS
from bench.proctree import TreeSampler

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "sizes", "preset", "tile", "work", "master", "driver_memory", "batch_images",
                     "generated", "json"})
DEFAULT_IMAGES, DEFAULT_SIZE, DEFAULT_PRESET, DEFAULT_MASTER = 1000, 64, "paper-4096", "local[2]"
DEFAULT_DRIVER_MEMORY, DEFAULT_BATCH_IMAGES = "1g", 256

# --- the corpus ---------------------------------------------------------------------------------

def make_corpus(directory: Path, n: int, size: int, seed: int = 0, datasets: Path | None = DATASETS) -> str:
    """``n`` PNG images of ``size`` x ``size`` in ``directory``: crops sampled from the data sets
    (grey and colour as the sources are) or, without them, smooth generated images."""
    from PIL import Image

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sources = []
    if datasets is not None and datasets.is_dir():
        sources = sorted(p for p in datasets.rglob("*") if p.suffix.lower() in (".tiff", ".tif", ".png"))
    if sources:
        loaded = []
        for p in sources:
            with Image.open(p) as im:
                im = im.convert("L") if im.mode in ("L", "1", "I", "I;16") else im.convert("RGB")
                a = np.asarray(im)
                if min(a.shape[:2]) >= size:
                    loaded.append(a)
        for i in range(n):
            a = loaded[i % len(loaded)]
            y = int(rng.integers(0, a.shape[0] - size + 1))
            x = int(rng.integers(0, a.shape[1] - size + 1))
            Image.fromarray(np.ascontiguousarray(a[y:y + size, x:x + size])).save(directory / f"crop{i:05d}.png")
        return f"{n} random {size}x{size} crops of {len(loaded)} images in {datasets}"
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(n):
        f = rng.uniform(1, 6, 3)
        base = 127.5 + 100 * np.sin(2 * np.pi * (f[0] * xx + f[1] * yy + f[2]))
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        if i % 3 == 0:
            img = np.stack([img, img[::-1], img[:, ::-1]], axis=2)
        Image.fromarray(img).save(directory / f"gen{i:05d}.png")
    return f"{n} generated {size}x{size} images (no data sets at {datasets})"


# --- the run ----------------------------------------------------------------------------------------

def run_load(work: Path, images: int, size: int, master: str, driver_memory: str, preset: str,
             batch_images: int, tile: str | None = None, datasets: Path | None = DATASETS,
             interval: float = 0.5) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "images"
    if corpus.exists():
        import shutil
        shutil.rmtree(corpus)
    described = make_corpus(corpus, images, size, datasets=datasets)
    keys = work / "keys"
    py = sys.executable
    if not (keys / "public.key").exists():
        subprocess.run([py, "-m", "jobs.cli", "keygen", "--out", str(keys), "--preset", preset, "--no-rotations"],
                       check=True, stdout=subprocess.DEVNULL)
    conf = work / "spark-load.conf"
    conf.write_text(f"spark.driver.memory {driver_memory}\n")
    out = work / "enc"
    cmd = [py, "-m", "jobs.cli", "encrypt", "--keys", str(keys), "--input", str(corpus), "--out", str(out),
           "--layout", "packed", "--master", master, "--conf", str(conf), "--batch-images", str(batch_images),
           "--overwrite", "--quiet"] + (["--tile", tile] if tile else [])
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with TreeSampler(proc.pid, interval) as sampler:
        output, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"encrypt failed ({proc.returncode}):\n{output[-3000:]}")
    m = json.loads((out / "_manifest.json").read_text())
    c, t = m["counts"], m["timings"]
    enc = t.get("encrypt_seconds") or float("nan")
    peaks = sampler.peaks
    peaks.per_pid = {}
    return {
        "command": " ".join(cmd), "corpus": described, "master": master, "driver_memory": driver_memory,
        "preset": preset, "tile": m["options"]["tile"], "batch_images": batch_images,
        "images": c["images_in"], "images_encrypted": c["images_encrypted"], "ciphertexts": c["ciphertexts"],
        "ciphertext_mb": c["ciphertext_bytes"] / 1e6, "wall_seconds": wall,
        "decode_seconds": t.get("decode_seconds"), "encrypt_seconds": enc,
        "images_per_second_wall": c["images_encrypted"] / wall,
        "ciphertexts_per_second_encrypt": c["ciphertexts"] / enc,
        "mb_per_second_encrypt": c["ciphertext_bytes"] / 1e6 / enc,
        **asdict(peaks),
    }


def run(args) -> int:
    """``hepix bench --suite load``: :func:`run_load` in ``--work`` (or a temporary directory), the summary
    printed (and written to ``--json``)."""
    if args.sizes and len(args.sizes) > 1:
        raise SystemExit(f"hepix bench: the load suite takes one --sizes side, not {','.join(map(str, args.sizes))}")
    size = args.sizes[0] if args.sizes else DEFAULT_SIZE
    with tempfile.TemporaryDirectory(prefix="hepix-bench-load-") as tmp:
        s = run_load(Path(args.work or tmp), args.images or DEFAULT_IMAGES, size, args.master or DEFAULT_MASTER,
                     args.driver_memory or DEFAULT_DRIVER_MEMORY, args.preset or DEFAULT_PRESET,
                     args.batch_images or DEFAULT_BATCH_IMAGES, f"{args.tile}x{args.tile}" if args.tile else None,
                     datasets=None if args.generated else DATASETS)
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2) + "\n")
    print(f"corpus: {s['corpus']}")
    print(f"encrypt: {s['images_encrypted']} of {s['images']} images -> {s['ciphertexts']} ciphertexts "
          f"({s['ciphertext_mb']:,.0f} MB), {s['preset']}, tile {s['tile']}, {s['master']}, driver heap "
          f"{s['driver_memory']}, batches of {s['batch_images']}")
    print(f"time: {s['wall_seconds']:.1f} s wall ({s['images_per_second_wall']:.1f} images/s); encrypt stage "
          f"{s['encrypt_seconds']:.1f} s ({s['ciphertexts_per_second_encrypt']:.1f} ciphertexts/s, "
          f"{s['mb_per_second_encrypt']:.1f} MB/s)")
    print(f"peak RSS: driver Python {s['driver_python_mb']:.0f} MB, driver JVM {s['driver_jvm_mb']:.0f} MB, "
          f"largest Python worker {s['worker_python_max_mb']:.0f} MB, workers together "
          f"{s['workers_together_mb']:.0f} MB ({s['worker_processes']} worker processes, {s['samples']} samples)")
    return 0

