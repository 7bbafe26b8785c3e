"""`hepix bench --suite dft` and `--suite infer`: seeds 002 and 004 side by side with hepix.

Both run in this one process pinned to one core (the seeds' figures are one-core figures) and
write ``OUT/bench_dft/<run_id>.parquet`` / ``OUT/bench_infer/<run_id>.parquet``
(schemas.tables.BENCH_DFT / BENCH_INFER); see jobs.bench.suites.dft and jobs.bench.suites.infer.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs import runinfo
from jobs.console import table
from schemas.bench import BENCH_DFT, BENCH_INFER


def _one_core() -> int:
    """Pin this process to one core (the first it may use); returns the cores it now has."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return runinfo.cores()


def _write(rows: list[dict], schema, out: Path, run_id: str, started) -> Path:
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(), "cores": runinfo.cores(),
              "hepix_version": runinfo.version("hepix"), "git_commit": runinfo.git_commit()}
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{run_id}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist([{**common, **r} for r in rows], schema=schema), tmp, compression="zstd")
    final = out / f"{run_id}.parquet"
    os.replace(tmp, final)
    return final


def run_dft(args) -> int:
    from .suites import dft as bench_dft

    cores = _one_core()
    run_id, started = runinfo.new_run_id(), runinfo.now()
    configs = bench_dft.QUICK if args.quick else bench_dft.DEFAULT
    print(f"hepix bench {run_id}: DFT-Hadamard-iDFT low-pass (cutoff {bench_dft.CUTOFF}) on N pixel values "
          f"against NumPy's FFT pipeline and seed 002, {cores} core{'s' if cores != 1 else ''}"
          f"{' (quick)' if args.quick else ''}")

    def progress(m):
        print(f"  N={m.n:<5} {m.preset:<10} {m.stages:<9} L={m.levels}+{m.inverse_levels} depth {m.depth}  rot {m.rotations:>4}  "
              f"pt {m.plaintext_products:>5}  cold {m.pipeline_seconds:8.3f} s  warm {m.warm_seconds:8.3f} s  "
              f"max err {m.max_abs_err:.1e}", flush=True)

    rows = [m.as_dict() for m in bench_dft.run_dft_bench(configs, progress=progress)]
    path = _write(rows, BENCH_DFT, Path(args.out) / "bench_dft", run_id, started)
    print()
    print(table(rows, [
        ("n", "N", "d"), ("preset", "preset", ""), ("stages", "stages", ""), ("levels", "L", "d"), ("inverse_levels", "iL", "d"),
        ("depth", "depth", "d"), ("rotations", "rot", "d"), ("plaintext_products", "pt prod", "d"),
        ("pipeline_seconds", "cold s", ".3f"), ("warm_seconds", "warm s", ".3f"),
        ("seed_seconds", "seed 002 s", ".2f"), ("speedup_vs_seed", "x seed", ".0f"),
        ("max_abs_err", "max err", ".1e"), ("rel_err", "rel err", ".1e"),
    ]))
    print(f"\nwrote {path}")
    return 0


def run_infer(args) -> int:
    from .suites import infer as bench_infer

    cores = _one_core()
    run_id, started = runinfo.new_run_id(), runinfo.now()
    configs = bench_infer.QUICK if args.quick else bench_infer.DEFAULT
    print(f"hepix bench {run_id}: encrypted inference on scikit-learn's digits against seed 004, "
          f"{cores} core{'s' if cores != 1 else ''}{' (quick)' if args.quick else ''}")

    def progress(m):
        print(f"  {m.model:<8} {m.task:<3} {m.preset:<10} {m.layout:<20} {m.samples:>4} samples  "
              f"infer {m.samples_per_second:10,.0f}/s  end-to-end {m.end_to_end_samples_per_second:8,.0f}/s  "
              f"acc {m.accuracy_encrypted:.3f} (plain {m.accuracy_plain:.3f})", flush=True)

    rows = [m.as_dict() for m in bench_infer.run_infer_bench(configs, progress=progress)]
    path = _write(rows, BENCH_INFER, Path(args.out) / "bench_infer", run_id, started)
    print()
    print(table(rows, [
        ("model", "model", ""), ("task", "task", ""), ("preset", "preset", ""), ("layout", "layout", ""),
        ("samples", "n", "d"), ("samples_per_second", "infer/s", ",.0f"),
        ("end_to_end_samples_per_second", "e2e/s", ",.0f"), ("seed_samples_per_second", "seed/s", ",.2f"),
        ("ms_per_sample", "ms/sample", ".2f"), ("seed_ms_per_sample", "seed ms", ".2f"),
        ("accuracy_encrypted", "acc", ".3f"), ("accuracy_plain", "plain", ".3f"), ("seed_accuracy", "seed acc", ".2f"),
        ("bytes_per_sample", "B/sample", ",.0f"), ("seed_bytes_per_sample", "seed B", ",.0f"),
    ]))
    print(f"\nwrote {path}")
    return 0
