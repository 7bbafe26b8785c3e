"""TinyCNN on one sample per ciphertext: the convolution's windows in the slots (CKKS).

The sample's owner lays out one vector of ``N/2`` slots: slot ``k*1024 + t*64 + p`` holds tap ``t``
(of 9) of the 3x3 window at conv position ``p`` (36, ordered pool window by pool window, four each),
repeated for each kernel ``k`` (so ``kernels * 1024 <= N/2``).  Pixels repeat across windows, which
costs nothing: it is still one encryption.  The server then computes, on that one ciphertext:

* the convolution: one plaintext product with the kernels' taps laid out alike, the nine taps summed by
  four rotations (64, 128, 256, 512), the biases added -- slot ``k*1024 + p`` is conv output (k, p);
* the square: one ciphertext product, relinearised;
* the 2x2 pool: two rotations (1, 2) -- slot ``k*1024 + 4j`` is pooled feature (j, k);
* the head: per class a plaintext product with its weights at those slots (zero elsewhere, which also
  clears the partial sums around them), class ``c``'s product moved to ``c*64``, then one shared sum
  over the pool windows and kernels (rotations 4, 8, 16, 32, 1024, 2048): class c's score in slot ``64c``.

So a sample costs one encryption, one decryption, ``11 + classes`` rotations, ``1 + classes`` plaintext
products and one square, against the 64 encryptions and ~150 products of the SIMD layout's batch of one.
Depth 3, as the model.  BFV is not served: its products by such non-constant plaintexts would cost about
log2(N t) bits of noise budget each, more than the presets have for three of them.
"""
from __future__ import annotations

import time

import numpy as np

from hecore.errors import InvalidParameters

from .arithmetic import arithmetic
from .encrypted import cached_plaintext
from .models import PIXEL_MAX, PIXELS, POOL_OF, TAPS, TinyCNN

__all__ = [
    "KERNEL_STRIDE",
    "ORDER",
    "TAP_STRIDE",
    "decrypt_scores",
    "encrypt_samples",
    "fits",
    "infer",
    "layout_sample",
    "rotations",
]

TAP_STRIDE = 64
KERNEL_STRIDE = 16 * TAP_STRIDE
#: slot position p -> conv position (row-major 6x6): pool window j holds positions 4j .. 4j+3
ORDER = np.concatenate([np.flatnonzero(POOL_OF == j) for j in range(9)])
_TAP_SUM = (TAP_STRIDE, 2 * TAP_STRIDE, 4 * TAP_STRIDE, 8 * TAP_STRIDE)
_POOL_SUM = (1, 2)
_POOL_REDUCE = (4, 8, 16, 32)


def rotations(kernels: int, classes: int) -> int:
    """Rotations one sample costs (the chooser's cost model counts them)."""
    return len(_TAP_SUM) + len(_POOL_SUM) + (classes - 1) + len(_POOL_REDUCE) + (kernels - 1).bit_length()


def fits(model, params) -> str | None:
    """Why ``model`` cannot run in this layout with ``params``, or None when it can."""
    if not isinstance(model, TinyCNN):
        return f"the windows layout serves TinyCNN, not {model.name}"
    why = arithmetic(params).ckks_only(f"the windows layout is CKKS only ({params.name} is {params.scheme.upper()})")
    if why:
        return why
    k = model.kernels.shape[0]
    classes = model.head_w.shape[0]
    if k * KERNEL_STRIDE > params.slots or k & (k - 1):
        return f"{k} kernels x {KERNEL_STRIDE} slots do not fit the {params.slots} slots of {params.name} as a power of two"
    if classes > KERNEL_STRIDE // TAP_STRIDE:
        return f"{classes} classes exceed the {KERNEL_STRIDE // TAP_STRIDE} score slots of a kernel block"
    if params.depth < model.depth or not params.supports_keyswitching:
        return f"TinyCNN needs depth {model.depth} and rotation keys; {params.name} affords depth {params.depth}"
    return None


def _slots(k: int, t: np.ndarray, p: np.ndarray) -> np.ndarray:
    return k * KERNEL_STRIDE + t * TAP_STRIDE + p


def layout_sample(x1: np.ndarray, kernels: int, slots: int) -> np.ndarray:
    """The slot vector of one sample (64 pixels)."""
    out = np.zeros(slots)
    win = np.asarray(x1, dtype=np.float64)[TAPS[ORDER]]          # (36 positions, 9 taps)
    p, t = np.meshgrid(np.arange(36), np.arange(9), indexing="ij")
    for k in range(kernels):
        out[_slots(k, t, p)] = win
    return out


def encrypt_samples(ctx, x: np.ndarray, kernels: int) -> list[bytes]:
    """One fresh public-key encryption per sample (rows of ``x``)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != PIXELS:
        raise ValueError(f"a digits batch has shape (n, {PIXELS}), got {x.shape}")
    if np.any(x < 0) or np.any(x > PIXEL_MAX) or np.any(x != np.rint(x)):
        raise ValueError(f"digit pixels must be integers 0..{PIXEL_MAX}")
    return [ctx.encrypt_vector(layout_sample(row, kernels, ctx.params.slots)) for row in x]


def _masks(model: TinyCNN, slots: int) -> dict:
    """The plaintext vectors of the model in this layout (public)."""
    k = model.kernels.shape[0]
    hw, hb = model.head()
    p, t = np.meshgrid(np.arange(36), np.arange(9), indexing="ij")
    ker = np.zeros(slots)
    bias = np.zeros(slots)
    for kk in range(k):
        ker[_slots(kk, t, p)] = model.kernels[kk][t]
        bias[_slots(kk, 0, np.arange(36))] = model.conv_bias[kk]
    heads = []
    for c in range(hw.shape[0]):
        h = np.zeros(slots)
        for j in range(9):
            for kk in range(k):
                h[kk * KERNEL_STRIDE + 4 * j] = hw[c, j * k + kk]      # pooled feature index j*K + k
        heads.append(h)
    out_bias = np.zeros(slots)
    out_bias[np.arange(len(hb)) * TAP_STRIDE] = hb
    return {"ker": ker, "bias": bias, "heads": heads, "out_bias": out_bias}


def _plain(model, ev, name: str, values: np.ndarray, level: int, scale: float):
    return cached_plaintext(model, ev, "windows", (name, level, scale),
                            lambda: ev.encode(values, level=level, scale=scale))


def _sum_rotations(ev, c, steps):
    for s in steps:
        c = ev.add(c, ev.rotate(c, s))
    return c


def _one(ev, model: TinyCNN, m: dict, c):
    spare = ev.params.depth - ev.level(c) - model.depth
    if spare < 0:
        raise InvalidParameters(f"TinyCNN needs depth {model.depth}; {ev.params.name} affords {ev.params.depth}")
    if spare:
        c = ev.mod_switch(c, spare)
    a = ev.rescale(ev.multiply_plain(c, _plain(model, ev, "ker", m["ker"], ev.level(c), ev.level_prime(c))))
    a = _sum_rotations(ev, a, _TAP_SUM)
    a = ev.add_plain(a, _plain(model, ev, "bias", m["bias"], ev.level(a), ev.scale(a)))
    s = ev.rescale(ev.square_raw(a))
    s = _sum_rotations(ev, s, _POOL_SUM)
    level, q = ev.level(s), ev.level_prime(s)
    acc = None
    for cls, h in enumerate(m["heads"]):
        prod = ev.multiply_plain(s, _plain(model, ev, f"head{cls}", h, level, q))
        acc = ev.add_into(acc, ev.rotate(prod, -cls * TAP_STRIDE) if cls else prod)
    out = _sum_rotations(ev, ev.rescale(acc), _POOL_REDUCE)
    k = model.kernels.shape[0]
    out = _sum_rotations(ev, out, tuple(KERNEL_STRIDE << i for i in range((k - 1).bit_length())))
    return ev.add_plain(out, _plain(model, ev, "out_bias", m["out_bias"], ev.level(out), ev.scale(out)))


def infer(ev, model, cts: list, *, quantised=None, stats: dict | None = None) -> list:
    """The model on loaded ciphertexts of :func:`encrypt_samples`: one output ciphertext per sample,
    class c's head output in slot ``64c`` (binary: the sigmoid line's probability)."""
    why = fits(model, ev.params)
    if why:
        raise InvalidParameters(why)
    masks = model.__dict__.get("_windows_masks")
    if masks is None:
        masks = model.__dict__["_windows_masks"] = _masks(model, ev.slots)
    t0 = time.perf_counter()
    out = [_one(ev, model, masks, c) for c in cts]
    if stats is not None:
        stats["infer_seconds"] = time.perf_counter() - t0
    return out


def decrypt_scores(ctx, outs: list, *, classes: int, binary: bool, quantised=None) -> np.ndarray:
    """(samples, classes) head outputs, as :func:`hecore.infer.encrypted.decrypt_scores`."""
    idx = np.arange(classes) * TAP_STRIDE
    if not outs:
        return np.zeros((0, classes))
    return np.stack([ctx.decrypt_slots(c, int(idx[-1]) + 1)[idx] for c in outs])
