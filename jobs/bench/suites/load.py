"""Load benchmark: many images through packed `hepix encrypt`, with peak memory and throughput.

    python -m jobs.bench.suites.load --images 1000 --size 64 --work /tmp/hepix-load --master 'local[2]'

Makes a corpus (random crops of the data sets, :data:`jobs.bench.datasets.DATASETS`, when
present, else generated images) in ``--work``, makes keys, then runs ``hepix encrypt`` as a child
process with a bounded driver heap (``spark.driver.memory``) and samples the child's process tree from ``/proc``:
the Python driver, the driver JVM (in local mode also the executor), and the Python workers.
Peaks are each process's ``VmHWM`` (the kernel's high-water mark of its resident set), so
short spikes between samples are not missed; "workers together" is the largest sum of the
workers' current RSS over the samples.  Prints a summary and writes it as JSON; a benchmark,
not a test -- nothing here asserts a speed.  Not a ``hepix bench`` suite: it drives the ``hepix``
command as a child process, with options of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from jobs.bench.datasets import DATASETS


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


# --- memory of a process tree ---------------------------------------------------------------------

def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:", "PPid:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0])
    except (OSError, ValueError):
        pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ppid = _status(int(name)).get("PPid")
            if ppid is not None:
                parents[int(name)] = ppid
    found, frontier = [], [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def role(pid: int, root: int) -> str:
    if pid == root:
        return "driver_python"
    cmd = _cmdline(pid)
    if "java" in cmd.split(" ", 1)[0] or " org.apache.spark" in cmd:
        return "driver_jvm"
    if "pyspark" in cmd or "python" in cmd:
        return "worker_python"
    return "other"


@dataclass
class MemoryPeaks:
    """Peak resident memory (MB) by role, from the sampled process tree."""

    driver_python_mb: float = 0.0
    driver_jvm_mb: float = 0.0
    worker_python_max_mb: float = 0.0      # the largest single Python worker
    workers_together_mb: float = 0.0       # the largest sum over the workers alive at one sample
    worker_processes: int = 0
    samples: int = 0
    per_pid: dict = field(default_factory=dict)


class TreeSampler:
    """Samples ``/proc`` for the process tree under ``pid`` every ``interval`` seconds, in a thread."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid, self.interval = pid, interval
        self.peaks = MemoryPeaks()
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        pids = [self.pid] + descendants(self.pid)
        together = 0.0
        for pid in pids:
            st = _status(pid)
            if "VmHWM" not in st:
                continue
            r = self._roles.get(pid)
            if r is None or r == "other":
                # Not cached until it is known: spark-submit's shell becomes the driver JVM by exec (same pid),
                # after a short launcher JVM of its own; a pid first seen as the shell is the JVM later.
                r = self._roles[pid] = role(pid, self.pid)
            hwm = st["VmHWM"] / 1024
            self.peaks.per_pid[pid] = (r, max(hwm, self.peaks.per_pid.get(pid, (r, 0.0))[1]))
            if r == "worker_python":
                together += st.get("VmRSS", 0) / 1024
        self.peaks.workers_together_mb = max(self.peaks.workers_together_mb, together)
        self.peaks.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        p = self.peaks
        for r, hwm in p.per_pid.values():
            if r == "driver_python":
                p.driver_python_mb = max(p.driver_python_mb, hwm)
            elif r == "driver_jvm":
                p.driver_jvm_mb = max(p.driver_jvm_mb, hwm)
            elif r == "worker_python":
                p.worker_python_max_mb = max(p.worker_python_max_mb, hwm)
                p.worker_processes += 1
        return False


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
    p = argparse.ArgumentParser(prog="python -m jobs.bench.suites.load", description=__doc__.split("\n\n")[0])
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
