"""``hepix bench --suite dft``: the DFT -- Hadamard -- iDFT pipeline (:mod:`hecore.ops.dft`) against
Costache, Smart, Vivek, "Faster Homomorphic Evaluation of Discrete Fourier Transforms" (Table 3).

For every configuration (vector length N, preset, pipeline staging, levels per transform), in this
one process pinned to one core (the paper's figures are one-core HElib BGV latencies): keys are
made (``keygen_seconds``, apart), the plaintext diagonals are built in NumPy, a vector of N pixel
values (scikit-image's 'camera', row-major, the first N values: image rows) is encrypted, the
low-pass pipeline runs twice -- cold (the diagonals encoded on the way) and warm (the encoded
diagonals reused, as for every further vector of the same shape) -- and the result is decrypted
and compared with NumPy's FFT pipeline (``ifft(mask * fft(x))``): the largest absolute error and
the relative (L2) error.

The paper's seconds are the whole encrypted computation, encryption and decryption included, so
the ratio to it (``speedup_vs_seed``) is taken from hepix's end-to-end time,
``end_to_end_seconds`` = building + encoding the diagonals + encryption + the cold pipeline +
decryption (key generation apart, as the paper's); ``pipeline_seconds`` (cold, encoding included)
and ``warm_seconds`` are the pipeline alone, next to it.  Writes ``OUT/bench_dft/<run_id>.parquet``
(``bench.schemas.BENCH_DFT``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bench import seeds
from bench.contexts import Keys
from bench.datasets import sample
from bench.rows import run_columns, write_rows
from bench.schemas import BENCH_DFT
from bench.timing import pin_one_core
from hecore.ops import dft
from jobs.runtime import runinfo
from jobs.runtime.console import table

#: The options of ``hepix bench`` this suite reads besides --out and --quick: none (fixed configurations).
OPTIONS = frozenset()

#: (N, preset, stages, levels per transform: L, or (forward L, inverse L))
DEFAULT = (
    (16, "dft-8192", "fold", 2), (64, "dft-8192", "fold", 2),
    (256, "dft-8192", "fold", 2), (256, "dft-8192", "three", 1), (256, "dft-8192", "circulant", 1),
    (256, "dft-8192", "three", (2, 1)), (256, "dft-16384", "three", 2),
    (1024, "dft-8192", "fold", 2), (1024, "dft-8192", "three", 1), (1024, "dft-8192", "circulant", 1),
    (1024, "dft-8192", "three", (2, 1)), (1024, "dft-16384", "three", 2),
    (4096, "dft-8192", "fold", 2),
    (8192, "dft-16384", "fold", 3), (8192, "dft-16384", "three", 2),
)
QUICK = ((256, "dft-8192", "fold", 2), (1024, "dft-8192", "fold", 2), (1024, "dft-8192", "three", 1))

CUTOFF = 0.5


@dataclass
class DftMeasurement:
    n: int
    preset: str
    ring: int
    stages: str
    levels: int                     # per forward transform
    inverse_levels: int
    depth: int
    rotations: int
    plaintext_products: int
    cutoff: float
    keygen_seconds: float           # the preset's keys, rotation keys included (apart from end to end)
    encrypt_seconds: float
    build_seconds: float            # the plaintext diagonals in NumPy (once per shape and mask)
    encode_seconds: float           # encoding them (cold run only)
    pipeline_seconds: float         # cold: encode + products + rotations
    warm_seconds: float             # the same pipeline with the encoded diagonals reused
    decrypt_seconds: float
    end_to_end_seconds: float       # build + encrypt + cold pipeline + decrypt (what the paper times)
    max_abs_err: float
    rel_err: float
    seed_seconds: float | None      # Costache-Smart-Vivek, Table 3, same N
    speedup_vs_seed: float | None   # seed_seconds / end_to_end_seconds
    ciphertext_bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


def pixel_vector(n: int) -> np.ndarray:
    """The first ``n`` values of scikit-image's 'camera', row-major, as float64."""
    return sample("camera").astype(np.float64).reshape(-1)[:n]


def measure(keys: Keys, n: int, name: str, stages: str, levels) -> DftMeasurement:
    """One configuration; see the module docstring."""
    ctx, ev = keys.get(name)
    x = pixel_vector(n)
    mask = dft.lowpass_mask((n,), CUTOFF)
    fwd, inv = levels if isinstance(levels, tuple) else (levels, levels)
    t0 = time.perf_counter()
    pipe = dft.DftPipeline.build((n,), mask, stages=stages, levels=fwd, inverse_levels=inv)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = ctx.encrypt_vector(pipe.replicate(x, ev.slots))
    c = ev.load(data)
    enc = time.perf_counter() - t0
    stats: dict = {}
    t0 = time.perf_counter()
    out = pipe.evaluate(ev, c, stats=stats)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = pipe.evaluate(ev, c)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = ctx.decrypt_slots(out, n)
    dec = time.perf_counter() - t0
    ref = dft.reference(x, mask, (n,)).real
    seed = seeds.DFT_SECONDS.get(n)
    end_to_end = build + enc + cold + dec
    return DftMeasurement(
        n=n, preset=name, ring=ctx.params.n, stages=stages, levels=fwd, inverse_levels=inv, depth=pipe.depth,
        rotations=pipe.rotations, plaintext_products=pipe.plaintext_products, cutoff=CUTOFF,
        keygen_seconds=keys.keygen_seconds[name], encrypt_seconds=enc, build_seconds=build,
        encode_seconds=stats["encode_seconds"], pipeline_seconds=cold, warm_seconds=warm,
        decrypt_seconds=dec, end_to_end_seconds=end_to_end, max_abs_err=float(np.abs(y - ref).max()),
        rel_err=float(np.linalg.norm(y - ref) / np.linalg.norm(ref)),
        seed_seconds=seed.value if seed else None, speedup_vs_seed=(seed.value / end_to_end) if seed else None,
        ciphertext_bytes=len(data),
    )


def run_dft_bench(configs=DEFAULT, *, progress: Callable[[DftMeasurement], None] | None = None) -> list[DftMeasurement]:
    """Every configuration of ``configs`` in order; one ring's keys at a time (N=16384: ~200 MB)."""
    rows = []
    keys = Keys()
    current = None
    for n, name, stages, levels in configs:
        if name != current:
            if current is not None:
                keys.drop(current)
            current = name
        m = measure(keys, n, name, stages, levels)     # the pipeline and its encoded diagonals go with it
        rows.append(m)
        if progress:
            progress(m)
    return rows


# --- the command line ------------------------------------------------------------------------------

def run(args) -> int:
    """``hepix bench --suite dft``: measure on one core, write ``OUT/bench_dft/<run_id>.parquet``, print."""
    cores = pin_one_core()
    run_id, started = runinfo.new_run_id(), runinfo.now()
    configs = QUICK if args.quick else DEFAULT
    print(f"hepix bench {run_id}: DFT-Hadamard-iDFT low-pass (cutoff {CUTOFF}) on N pixel values "
          f"against NumPy's FFT pipeline and {seeds.DFT_PAPER.short}, {cores} core{'s' if cores != 1 else ''}"
          f"{' (quick)' if args.quick else ''}")

    def progress(m):
        print(f"  N={m.n:<5} {m.preset:<10} {m.stages:<9} L={m.levels}+{m.inverse_levels} depth {m.depth}  "
              f"rot {m.rotations:>4}  pt {m.plaintext_products:>5}  cold {m.pipeline_seconds:8.3f} s  "
              f"warm {m.warm_seconds:8.3f} s  end to end {m.end_to_end_seconds:8.3f} s  "
              f"max err {m.max_abs_err:.1e}", flush=True)

    measured = run_dft_bench(configs, progress=progress)
    path = write_rows(measured, BENCH_DFT, Path(args.out) / "bench_dft", run_id, run_columns(run_id, started))
    rows = [m.as_dict() for m in measured]
    print()
    print(table(rows, [
        ("n", "N", "d"), ("preset", "preset", ""), ("stages", "stages", ""), ("levels", "L", "d"),
        ("inverse_levels", "iL", "d"), ("depth", "depth", "d"), ("rotations", "rot", "d"),
        ("plaintext_products", "pt prod", "d"), ("keygen_seconds", "keygen s", ".2f"),
        ("build_seconds", "build s", ".3f"), ("encrypt_seconds", "enc s", ".3f"),
        ("pipeline_seconds", "cold s", ".3f"), ("warm_seconds", "warm s", ".3f"), ("decrypt_seconds", "dec s", ".3f"),
        ("end_to_end_seconds", "e2e s", ".3f"), ("seed_seconds", "paper s", ".2f"),
        ("speedup_vs_seed", "paper / e2e", ".3g"), ("max_abs_err", "max err", ".1e"), ("rel_err", "rel err", ".1e"),
    ]))
    print(f"paper s: {seeds.DFT_PAPER.cite()}, Table 3 (HElib BGV, one core, encryption and decryption "
          "included); e2e = build + encode + encrypt + pipeline + decrypt, keygen apart")
    print(f"\nwrote {path}")
    return 0
