"""How a digits batch is laid out in ciphertexts, and the choice of the fastest layout for a batch size.

Four layouts (:data:`LAYOUTS`):

``pixel-per-ciphertext``  SIMD across samples (:mod:`.encrypted`): 64 ciphertexts per batch of up to
                          N/2 samples, every model, both schemes.  Its cost does not depend on the
                          batch's size, so it wins for whole batches and loses for one sample.
``block-B``               (CKKS logreg, rotation keys) several pixel positions per ciphertext, ``B``
                          slots per position (:mod:`.encrypted`): fewer ciphertexts, a few rotations.
``coefficients``          (logreg, CKKS and BFV/BGV) one sample per ciphertext, pixels as polynomial
                          coefficients; the model is one plaintext product (:mod:`.coefficients`).
``windows``               (TinyCNN, CKKS, rotation keys) one sample per ciphertext, the convolution's
                          windows in the slots (:mod:`.windows`).

:func:`choose` estimates each layout's time for ``n`` samples from counts of its operations (encryptions,
decryptions, plaintext products, rotations, squares) and what each costs on the preset's ring, and
returns the cheapest that can run; :func:`estimates` lists them all.  The per-operation costs are
measured figures of SEAL at N=4096 with two data primes, scaled by the ring's size and primes: their
ratios decide, not their absolute values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hecore.errors import InvalidParameters

from . import coefficients, encrypted, windows
from .arithmetic import arithmetic
from .models import PIXELS, LogReg, sigmoid_poly

__all__ = ["LAYOUTS", "Estimate", "Layout", "choose", "decrypt", "encrypt", "estimates", "infer", "parse_layout"]

PIXEL = "pixel-per-ciphertext"
BLOCK = "block"
COEFFICIENTS = "coefficients"
WINDOWS = "windows"
LAYOUTS = (PIXEL, BLOCK, COEFFICIENTS, WINDOWS)

#: Milliseconds per operation at N=4096 with two data primes, one core (SEAL through Pyfhel).
#: ``poly_product``: a plaintext product whose plaintext is not a constant (SEAL transforms both
#: ciphertext parts for BFV; CKKS encodes it once, so it costs as ``product``).
COSTS_MS = {"encrypt": 1.3, "decrypt": 0.35, "encode": 0.25, "product": 0.09, "poly_product": 0.3,
            "rotate": 0.6, "square": 0.8}


@dataclass(frozen=True)
class Layout:
    """A layout and, for ``block``, its slots per pixel position."""

    name: str
    block: int = 0

    def __str__(self) -> str:
        return f"block-{self.block}" if self.name == BLOCK else self.name

    @property
    def per_sample(self) -> bool:
        """One ciphertext per sample in, one out (all scores in it)."""
        return self.name in (COEFFICIENTS, WINDOWS)


@dataclass(frozen=True)
class Estimate:
    layout: Layout
    ms: float | None             # None: cannot run (``why``)
    why: str | None = None


def parse_layout(text: str, slots: int | None = None) -> Layout:
    """``pixel-per-ciphertext`` | ``coefficients`` | ``windows`` | ``block-B``, or a ValueError naming the bad value."""
    t = text.strip().lower()
    if t in (PIXEL, COEFFICIENTS, WINDOWS):
        return Layout(t)
    head, _, b = t.partition("-")
    if head == BLOCK and b.isdigit() and int(b) >= 1 and not int(b) & (int(b) - 1):
        return Layout(BLOCK, int(b))
    raise ValueError(f"unknown layout {text!r}: expected one of {PIXEL}, block-B (B a power of two), "
                     f"{COEFFICIENTS}, {WINDOWS}")


def _ring_factor(params) -> float:
    return params.n * (params.data_primes + 1) / (4096 * 3)


def _counts(layout: Layout, model, params, n: int) -> dict:
    """Operations of ``n`` samples in ``layout`` (batches of up to N/2 for the SIMD layouts)."""
    classes = (model.w if isinstance(model, LogReg) else model.head_w).shape[0]
    batches = -(-n // params.slots)
    if layout.name == COEFFICIENTS:
        return {"encrypt": n, **arithmetic(params).polynomial_products(n), "decrypt": n}
    if layout.name == WINDOWS:
        k = model.kernels.shape[0]
        return {"encrypt": n, "encode": n, "product": n * (1 + classes), "square": n,
                "rotate": n * windows.rotations(k, classes), "decrypt": n}
    if layout.name == BLOCK:
        per = params.slots // layout.block
        cts = -(-PIXELS // per)
        rot = min(per, 64).bit_length() - 1
        return {"encrypt": cts * batches, "product": cts * classes * batches,
                "rotate": rot * classes * batches, "decrypt": classes * batches}
    if isinstance(model, LogReg):
        return {"encrypt": PIXELS * batches, "product": PIXELS * classes * batches, "decrypt": classes * batches}
    k = model.kernels.shape[0]
    return {"encrypt": PIXELS * batches, "product": (36 * 9 * k + 9 * k * classes) * batches,
            "square": 9 * k * batches, "rotate": 0, "decrypt": classes * batches}


def _why_not(layout: Layout, model, params, n: int) -> str | None:
    if layout.name == COEFFICIENTS:
        return coefficients.fits(model, params)
    if layout.name == WINDOWS:
        return windows.fits(model, params)
    if layout.name == BLOCK:
        why = "block layouts serve CKKS logistic regression with rotation keys"
        if not isinstance(model, LogReg) or arithmetic(params).ckks_only(why) or not params.supports_keyswitching:
            return why
        if not n <= layout.block <= params.slots:
            return f"block {layout.block} cannot hold {n} samples in {params.slots} slots"
    return None


def estimates(model, params, n: int) -> list[Estimate]:
    """Every layout's estimated milliseconds for ``n`` samples of ``model`` on ``params`` (or why it cannot run)."""
    if n < 1:
        raise ValueError(f"a batch has at least one sample, got {n}")
    cands = [Layout(PIXEL), Layout(BLOCK, encrypted.block_for(min(n, params.slots), params.slots, True)),
             Layout(COEFFICIENTS), Layout(WINDOWS)]
    out = []
    for lay in cands:
        why = _why_not(lay, model, params, n)
        if why:
            out.append(Estimate(lay, None, why))
            continue
        ms = sum(COSTS_MS[op] * c for op, c in _counts(lay, model, params, n).items())
        out.append(Estimate(lay, ms * _ring_factor(params)))
    return out


def choose(model, params, n: int) -> Estimate:
    """The layout with the least estimated time for ``n`` samples (ties: the earlier of :data:`LAYOUTS`)."""
    ok = [e for e in estimates(model, params, n) if e.ms is not None]
    if not ok:
        raise InvalidParameters(f"no layout runs {model.name} on {params.name}")
    return min(ok, key=lambda e: e.ms)


def check(layout: Layout, model, params, n: int) -> None:
    """Refuse a layout that cannot run ``n`` samples of ``model`` on ``params``, saying why."""
    why = _why_not(layout, model, params, n)
    if why:
        raise InvalidParameters(f"layout {layout} cannot run {model.name} on {params.name}: {why}")


# --- one interface over the layouts ---------------------------------------------------------------

def encrypt(ctx, layout: Layout, x: np.ndarray, model) -> list[bytes]:
    """The ciphertexts of the samples ``x`` (one batch for the SIMD layouts; one per sample otherwise)."""
    if layout.name == COEFFICIENTS:
        return coefficients.encrypt_samples(ctx, x)
    if layout.name == WINDOWS:
        return windows.encrypt_samples(ctx, x, model.kernels.shape[0])
    return encrypted.encrypt_batch(ctx, x, block=layout.block or ctx.params.slots)


def infer(ev, model, layout: Layout, cts: list, *, quantised=None, stats: dict | None = None) -> list:
    """The model on loaded ciphertexts of :func:`encrypt` in ``layout``."""
    if layout.name == COEFFICIENTS:
        return coefficients.infer(ev, model, cts, quantised=quantised, stats=stats)
    if layout.name == WINDOWS:
        return windows.infer(ev, model, cts, stats=stats)
    return encrypted.infer_encrypted(ev, model, cts, quantised=quantised, stats=stats,
                                     block=layout.block or ev.slots)


def decrypt(ctx, layout: Layout, outs: list, n: int, *, classes: int, binary: bool, quantised=None) -> np.ndarray:
    """(n, classes) head outputs in the plaintext model's units (binary: the sigmoid line's probability)."""
    if layout.name == COEFFICIENTS:
        return coefficients.decrypt_scores(ctx, outs, classes=classes, binary=binary, quantised=quantised)
    if layout.name == WINDOWS:
        return windows.decrypt_scores(ctx, outs, classes=classes, binary=binary)
    s = encrypted.decrypt_scores(ctx, outs, n, binary=binary, quantised=quantised)
    return s


def plain_outputs(model, x: np.ndarray) -> np.ndarray:
    """What the encrypted head outputs decrypt to, from the plaintext model (binary: the sigmoid line)."""
    s = model.scores(x)
    return sigmoid_poly(s) if model.binary else s
