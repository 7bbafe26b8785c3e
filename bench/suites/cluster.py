"""``hepix bench --suite cluster``: the encrypt job on a Spark standalone cluster, one worker against two.

A real standalone cluster on this machine's loopback (a master and one-core workers from pyspark's
own distribution, started by :mod:`bench.clusters.standalone`, the launcher the tests use too, through
:func:`bench.checkout.launcher`: it runs ``spark-submit/``, which is not part of the installed package,
so this suite runs from a checkout only); jobs go through ``spark-submit/standalone.sh`` with
the archives of ``spark-submit/package.sh``, input and output on a local path that the driver and the
workers both see -- the shared-mount case, so the Python workers write the ciphertext files (``--writer workers``).

The benchmark encrypts the same corpus (DIV2K at 2048x1024, or generated images of that size
without the data sets) twice: on the cluster with one worker, then with a second worker added.
Each application asks for exactly the cores it compares (``--total-executor-cores``) and waits
until they are registered before the job starts, so executor start-up falls in the start-up column,
not in the compared seconds -- decode + cache build + encrypt + write, as the job's manifest records
them.  The packed environment is unpacked on the node once, before the cluster starts
(``spark-submit/install-env.sh``, kept beside the cached archive for later runs, as on a real
cluster's nodes), and every application runs its Python workers from it (``HEPIX_NODE_ENV``); the
report gives the start-up of the first and of the second application on the cluster apart, and the
install's seconds.  Writes ``OUT/bench_cluster/<run_id>.parquet`` (``bench.schemas.BENCH_CLUSTER``).
``tests/test_cluster.py`` runs on the same cluster and archives.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.clusters.standalone import NodeEnv, StandaloneCluster

from bench.checkout import launcher
from bench.startup import startup_line

log = logging.getLogger(__name__)

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "preset", "repeats", "hdfs"})


#: The corpus: DIV2K's validation images resized to 2048x1024, read in place.
DIV2K_RESIZED = "div2k/resized_2048x1024"
WIDTH, HEIGHT = 2048, 1024
DEFAULT_IMAGES = 6
QUICK_IMAGES, QUICK_RESIZE = 2, 256
#: Ciphertext bytes one 2048x1024 colour image becomes at paper-4096 (measured: 3570 ciphertexts,
#: 468 MB), to size the scratch space.
BYTES_PER_IMAGE = 480 * 2**20


# --- the benchmark -------------------------------------------------------------------------------

@dataclass
class ClusterRow:
    """The encrypt job on the standalone cluster with ``workers`` one-core workers
    (see ``bench.schemas.BENCH_CLUSTER``)."""

    config: str                       # standalone, N worker(s) of 1 core
    repeat: int
    workers: int
    cores: int
    partitions: int
    ciphertexts: int
    ciphertext_bytes: int
    seconds: float                    # decode + cache build + encrypt + write (the job's manifest)
    decode_seconds: float
    encrypt_seconds: float
    wall_seconds: float               # spark-submit started to exited
    startup_seconds: float            # wall - seconds: driver, executors, keys, commit, shutdown
    cluster_start_seconds: float      # master and workers up (or the added worker), before any job; the
    #                                   first row's with the environment's install on the node
    ciphertexts_per_second: float
    speedup_vs_one_worker: float | None = None
    load_1m_before: float | None = None
    load_1m_after: float | None = None
    python_workers: str | None = None  # JSON: the job's worker report


def corpus(folder: Path, count: int) -> tuple[str, list[Path]]:
    """``count`` images of 2048x1024: DIV2K's (linked, read in place) when the data sets are
    present, else smooth generated colour images written into ``folder``."""
    from bench.datasets import DATASETS

    folder.mkdir(parents=True, exist_ok=True)
    found = sorted((DATASETS / DIV2K_RESIZED).glob("*.png")) if (DATASETS / DIV2K_RESIZED).is_dir() else []
    if len(found) >= count:
        links = []
        for p in found[:count]:
            (folder / p.name).symlink_to(p)
            links.append(folder / p.name)
        return f"DIV2K {WIDTH}x{HEIGHT}", links
    import numpy as np
    from PIL import Image

    log.warning("fewer than %d DIV2K images in %s: generating %dx%d images", count, DATASETS / DIV2K_RESIZED,
                WIDTH, HEIGHT)
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    paths = []
    for i in range(count):
        fx, fy, phase = rng.uniform(0.002, 0.02, 3)
        base = 127 + 80 * np.sin(fx * x + phase) * np.cos(fy * y)
        pixels = np.stack([base, base[::-1], base[:, ::-1]], axis=-1) + rng.normal(0, 12, (HEIGHT, WIDTH, 3))
        path = folder / f"generated-{i:02d}.png"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(path)
        paths.append(path)
    return f"generated {WIDTH}x{HEIGHT}", paths


def encrypt_on(cluster: StandaloneCluster, dist: Path, *, cores: int, keys: Path, images: Path, out: Path,
               extra: list[str], log_path: Path) -> tuple[float, dict]:
    """One ``standalone.sh encrypt`` on ``cores`` cores: its wall time and its manifest."""
    args = ["encrypt", "--keys", str(keys), "--input", str(images), "--out", str(out), "--quiet", *extra]
    cmd, env = launcher().standalone_command(cluster, dist, args, cores=cores, driver_memory="2g")
    t0 = time.perf_counter()
    with open(log_path, "w") as f:
        code = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - t0
    if code:
        raise RuntimeError(f"the encrypt job on {cores} core(s) failed with exit code {code}; see {log_path}")
    return wall, json.loads((out / "_manifest.json").read_text())


def run_cluster_bench(work: Path, *, images: int, preset_name: str, quick: bool,
                      repeats: int = 1) -> tuple[str, list[ClusterRow], NodeEnv]:
    """The same encrypt with one worker, then with a second worker added, ``repeats`` times
    (the second worker stopped again before each one-worker run): two rows a repeat, in the order the
    applications ran; and the install of the packed environment on the node."""
    from hecore.seal.keys import keygen
    from hecore.seal.params import preset

    label, _ = corpus(work / "images", images)
    if quick:
        label += f", centre-cropped and resized to {QUICK_RESIZE}x{QUICK_RESIZE} (a smoke run, not a figure)"
    keygen(preset(preset_name), work / "keys", rotations=False)   # encrypt reads the public key only
    # The same tasks in both configurations, four an image: small enough that the last ones of
    # the stage leave little of one worker idle while the other finishes.
    partitions = 4 * images
    # The output is on a path the driver and the workers share: the Python workers write the ciphertext
    # files themselves (the executors' JVMs would otherwise move every ciphertext, a core's share each).
    extra = (["--partitions", str(partitions), "--writer", "workers"]
             + (["--resize", str(QUICK_RESIZE)] if quick else []))
    sc = launcher()
    dist = sc.cluster_dist(work / "dist")
    env = sc.node_env(dist / "hepix-env.tar.gz")
    out_bytes = (1 if quick else images) * BYTES_PER_IMAGE
    scratch = Path(tempfile.mkdtemp(prefix="hepix-cluster-", dir=sc.scratch_parent(work, 4 * sc.GIB)))
    # The ciphertexts too when memory has room for them besides the environments, else on disk.
    outputs = scratch if sc.scratch_parent(work, 4 * sc.GIB + out_bytes) != work else work
    rows = []
    with sc.StandaloneCluster(work / "cluster", workers=1, scratch=scratch, node_env=env.path) as cluster:
        for repeat in range(repeats):
            for workers in (1, 2):
                t0 = time.perf_counter()
                if workers == 1 and len(cluster.live_workers()) > 1:
                    cluster.remove_worker(cluster.live_workers()[-1])
                if workers == 2:
                    cluster.add_worker()
                up = env.seconds + cluster.start_seconds if (repeat, workers) == (0, 1) else time.perf_counter() - t0
                out = outputs / f"out-{repeat}-{workers}"
                before = os.getloadavg()[0]
                wall, m = encrypt_on(cluster, dist, cores=workers, keys=work / "keys", images=work / "images",
                                     out=out, extra=extra, log_path=work / f"encrypt-{repeat}-{workers}.log")
                t, c = m["timings"], m["counts"]
                seconds = t["decode_seconds"] + t["cache_build_seconds"] + t["encrypt_seconds"]
                rows.append(ClusterRow(
                    config=f"standalone, {workers} worker{'s' if workers > 1 else ''} of 1 core", repeat=repeat,
                    workers=workers, cores=workers, partitions=partitions, ciphertexts=c["ciphertexts"],
                    ciphertext_bytes=c["ciphertext_bytes"], seconds=seconds, decode_seconds=t["decode_seconds"],
                    encrypt_seconds=t["encrypt_seconds"], wall_seconds=wall, startup_seconds=wall - seconds,
                    cluster_start_seconds=up, ciphertexts_per_second=c["ciphertexts"] / seconds,
                    load_1m_before=before, load_1m_after=os.getloadavg()[0],
                    python_workers=json.dumps(m["workers"])))
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(out.with_name(out.name + ".owner"), ignore_errors=True)   # encrypt's owner map
                cluster.clear_finished_apps()
                rows[-1].speedup_vs_one_worker = rows[-2 if workers == 2 else -1].seconds / seconds
    return label, rows, env


def report(rows: list[ClusterRow], label: str, images: int, preset_name: str, env: NodeEnv | None = None) -> str:
    from jobs.runtime.console import table

    dicts = [vars(r) for r in rows]
    lines = [table(dicts, [("config", "configuration", ""), ("repeat", "repeat", "d"), ("ciphertexts", "cts", "d"),
                           ("seconds", "seconds", ".1f"), ("decode_seconds", "decode s", ".1f"),
                           ("encrypt_seconds", "encrypt s", ".1f"), ("ciphertexts_per_second", "cts/s", ",.0f"),
                           ("speedup_vs_one_worker", "x one worker", ".2f"), ("startup_seconds", "start-up s", ".1f"),
                           ("cluster_start_seconds", "cluster up s", ".1f"), ("load_1m_before", "load", ".1f")])]
    ratios = [r.speedup_vs_one_worker for r in rows if r.workers == 2]
    one = sorted(r.seconds for r in rows if r.workers == 1)
    two = sorted(r.seconds for r in rows if r.workers == 2)
    median = one[len(one) // 2] / two[len(two) // 2]
    lines.append(f"\none -> two one-core workers: x{median:.2f} (medians; each repeat: "
                 f"{', '.join(f'x{x:.2f}' for x in ratios)}; goal >= 1.7); {images} images ({label}), {preset_name}; "
                 "seconds = decode + cache build + encrypt + write as the job's manifest times them; start-up "
                 "(driver, executors, keys, commit, shutdown) and the cluster's own start apart")
    lines.append(startup_line(rows[0].startup_seconds, rows[1].startup_seconds if len(rows) > 1 else None,
                              *((env.seconds, env.unpacked) if env is not None else ())))
    return "\n".join(lines)


def run(args) -> int:
    """``hepix bench --suite cluster``: measure, write ``OUT/bench_cluster/<run_id>.parquet``, print."""
    from bench.rows import write_rows
    from bench.schemas import BENCH_CLUSTER
    from hecore.seal.params import DEFAULT_PRESET
    from jobs.runtime import runinfo

    if args.hdfs:
        from bench.suites import corpuscluster

        return corpuscluster.run(args)
    if not launcher().java_available():
        raise SystemExit("hepix bench: the cluster suite needs Java (a JRE on the PATH or JAVA_HOME) for the "
                         "Spark master and workers")
    images = args.images if args.images is not None else (QUICK_IMAGES if args.quick else DEFAULT_IMAGES)
    if images < 1:
        raise SystemExit(f"hepix bench: --images {images}: give at least 1")
    preset_name = args.preset or DEFAULT_PRESET
    run_id, started = runinfo.new_run_id(), runinfo.now()
    size = f"{QUICK_RESIZE}x{QUICK_RESIZE}" if args.quick else f"{WIDTH}x{HEIGHT}"
    print(f"hepix bench {run_id}: encrypt on a standalone cluster, one worker against two; {images} images at "
          f"{size}, {preset_name}, load average {os.getloadavg()[0]:.1f}")
    repeats = args.repeats or 1
    if repeats < 1:
        raise SystemExit(f"hepix bench: --repeats {repeats}: give at least 1")
    with tempfile.TemporaryDirectory(prefix="hepix-bench-cluster-") as tmp:
        label, rows, env = run_cluster_bench(Path(tmp), images=images, preset_name=preset_name, quick=args.quick,
                                             repeats=repeats)
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(),
              "cores_available": runinfo.cores(), "git_commit": runinfo.git_commit(), "preset": preset_name,
              "images": images, "corpus": label, "size": size}
    path = write_rows(rows, BENCH_CLUSTER, Path(args.out) / "bench_cluster", run_id, common)
    print(report(rows, label, images, preset_name, env))
    print(f"\nwrote {path}")
    return 0
