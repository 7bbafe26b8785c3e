"""Load benchmark: many images through packed `hepix encrypt`, with peak memory and throughput.

    python -m bench.suites.load --images 1000 --size 64 --work /tmp/hepix-load --master 'local[2]'

Makes a corpus (random crops of the data sets, :data:`bench.datasets.DATASETS`, when
present, else generated images) in ``--work``, makes keys, then runs ``hepix encrypt`` as a child
process with a bounded driver heap (``spark.driver.memory``) and samples the child's process tree from ``/proc``:
the Python driver, the driver JVM (in local mode also the executor), and the Python workers
(:class:`bench.proctree.TreeSampler`).  Peaks are each process's ``VmHWM`` (the kernel's
high-water mark of its resident set), so short spikes between samples are not missed; "workers
together" is the largest sum of the workers' current RSS over the samples.  Prints a summary and
writes it as JSON; a benchmark, not a test -- nothing here asserts a speed.  Not a ``hepix bench``
suite: it drives the ``hepix`` command as a child process, with options of its own.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.datasets import DATASETS
from bench.proctree import TreeSampler

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.suites.load", description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--size", type=int, default=64, help="square side of each image (default 64)")
    p.add_argument("--work", type=Path, required=True, help="scratch directory (corpus, keys, output)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="1g", help="spark.driver.memory (default 1g)")
    p.add_argument("--preset", default="paper-4096")
    p.add_argument("--batch-images", type=int, default=256)
    p.add_argument("--tile", help="tile HxW (default: the packed layout's default for the preset)")
    p.add_argument("--generated", action="store_true", help="generated images even where the data sets exist")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = p.parse_args(argv)
    s = run_load(args.work, args.images, args.size, args.master, args.driver_memory, args.preset,
                 args.batch_images, args.tile, datasets=None if args.generated else DATASETS)
    if args.json:
        args.json.write_text(json.dumps(s, indent=2) + "\n")
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


if __name__ == "__main__":
    sys.exit(main())
