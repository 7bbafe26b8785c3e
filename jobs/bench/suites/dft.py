"""``hepix bench --suite dft``: the DFT -- Hadamard -- iDFT pipeline (hecore.ops.dft) against seed 002.

For every configuration (vector length N, preset, pipeline staging, levels per transform), one
process, on the cores the caller allows (the job pins one): keys are made, a vector of N pixel
values (scikit-image's 'camera', row-major, the first N values: image rows) is encrypted, the
low-pass pipeline runs twice -- cold (the plaintext diagonals encoded on the way) and warm (the
encoded diagonals reused, as for every further vector of the same shape) -- and the result is
decrypted and compared with NumPy's FFT pipeline (``ifft(mask * fft(x))``): the largest absolute
error and the relative (L2) error.  Seed 002's latencies (HElib BGV, one core, Table 3) sit next
to the cold time, which is the one to compare (the seed's times include all of its work).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from hecore.context import HEContext
from hecore.evaluator import Evaluator
from hecore.ops import dft
from hecore.params import preset

#: Seed 002, Tables 2-3: DFT-Hadamard-iDFT latency (s) by N (HElib BGV, one core).
SEED_SECONDS = {16: 0.46, 64: 2.08, 256: 9.43, 1024: 104.12, 4096: 464.44, 8192: 1026.1}

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
    keygen_seconds: float
    encrypt_seconds: float
    build_seconds: float            # the plaintext diagonals in NumPy (once per shape and mask)
    encode_seconds: float           # encoding them (cold run only)
    pipeline_seconds: float         # cold: encode + products + rotations
    warm_seconds: float             # the same pipeline with the encoded diagonals reused
    decrypt_seconds: float
    max_abs_err: float
    rel_err: float
    seed_seconds: float | None
    speedup_vs_seed: float | None
    ciphertext_bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


def pixel_vector(n: int) -> np.ndarray:
    from skimage import data

    flat = data.camera().astype(np.float64).reshape(-1)
    return flat[:n]


def run_dft_bench(configs=DEFAULT, *, progress: Callable[[DftMeasurement], None] | None = None) -> list[DftMeasurement]:
    rows = []
    contexts: dict[str, tuple] = {}
    for n, name, stages, levels in configs:
        if name not in contexts:
            t0 = time.perf_counter()
            ctx, _ = HEContext.generate(preset(name))
            contexts.clear()                            # one ring's keys at a time (N=16384: ~200 MB)
            contexts[name] = (ctx, Evaluator(ctx), time.perf_counter() - t0)
        ctx, ev, keygen = contexts[name]
        x = pixel_vector(n)
        mask = dft.lowpass_mask((n,), CUTOFF)
        t0 = time.perf_counter()
        fwd, inv = levels if isinstance(levels, tuple) else (levels, levels)
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
        seed = SEED_SECONDS.get(n)
        m = DftMeasurement(
            n=n, preset=name, ring=ctx.params.n, stages=stages, levels=fwd, inverse_levels=inv, depth=pipe.depth,
            rotations=pipe.rotations, plaintext_products=pipe.plaintext_products, cutoff=CUTOFF,
            keygen_seconds=keygen, encrypt_seconds=enc, build_seconds=build,
            encode_seconds=stats["encode_seconds"], pipeline_seconds=cold, warm_seconds=warm,
            decrypt_seconds=dec, max_abs_err=float(np.abs(y - ref).max()),
            rel_err=float(np.linalg.norm(y - ref) / np.linalg.norm(ref)),
            seed_seconds=seed, speedup_vs_seed=(seed / cold) if seed else None, ciphertext_bytes=len(data),
        )
        for prod in pipe._all():
            prod.encoded.clear()
        rows.append(m)
        if progress:
            progress(m)
    return rows
