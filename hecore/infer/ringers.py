"""Ringers for encrypted inference: digits whose answer the owner knows, hidden among the rest.

An inference has no image to compare a sample of pixels with: every output is a function of a whole
sample.  So encrypt-digits makes some samples **ringers** -- each with probability ``P``, drawn in
secret by the operating system's generator, at least one per run -- and keeps their pixels in the owner
map (never in the output).  They are real samples of the task, encrypted as the others are: nothing the
cluster sees tells them apart, so no function it computes can spare them.  Decrypt runs the model the
run names on the kept pixels in plaintext (the model is public: trained on the public split with fixed
seeds) and compares each ringer's decrypted head outputs with it: exactly under BFV/BGV (the quantised
integers, :func:`reference`), within :data:`CKKS_SLACK` under CKKS.  A cluster that gets ``m`` samples
wrong escapes every ringer with probability at most ``(1 - P)^m`` (:func:`escape`); one that gets every
sample wrong (another model, a skipped op) is always caught.

A batch's ringers are kept as one small record (:func:`pack` / :func:`unpack`): the sample numbers and
their 64 pixels, 68 bytes a ringer.
"""
from __future__ import annotations

import secrets
import struct

import numpy as np

from .models import PIXEL_MAX, PIXELS, POOL_OF, LogReg, Quantised, _patches, sigmoid_poly

#: The default probability that a digit is a ringer (``encrypt-digits --ringers``): about eleven of the 108
#: digits of the paper's task; a cluster that gets ten wrong escapes with probability 0.35, fifty with 0.005.
DEFAULT_PROBABILITY = 0.1
#: How far a CKKS ringer's head output may lie from the plaintext model's: CKKS's error on these models
#: is below 2e-3 on every preset and layout hepix runs them in (tests/test_infer_ringers.py measures it),
#: and a head output moved by more than this is a wrong one.
CKKS_SLACK = 0.02

_MAGIC = b"HXR1"
_HEADER = struct.Struct("<4sI")
_ENTRY = struct.Struct("<I")
#: The most ringers one record holds (a batch holds at most N/2 samples of the largest preset).
MAX_RINGERS = 1 << 16


def draw(n: int, probability: float) -> np.ndarray:
    """The ringers among ``n`` samples: each with ``probability``, independently, from the operating system's
    generator; at least one (drawn uniformly) when there are samples and ``probability`` > 0."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"ringer probability {probability} is not between 0 and 1")
    if n <= 0 or probability == 0.0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(secrets.randbits(128))
    chosen = np.flatnonzero(rng.random(n) < probability)
    if chosen.size == 0:
        chosen = np.array([int(rng.integers(n))])
    return chosen.astype(np.int64)


def escape(probability: float, wrong: int) -> float:
    """The most probability with which ``wrong`` wrong samples all escape the ringers (each sample a ringer
    with ``probability``; the run's one forced ringer only lowers it)."""
    return float((1.0 - probability) ** wrong)


def pack(samples, pixels: np.ndarray) -> bytes:
    """One batch's ringers as the owner map keeps them: their sample numbers in the task and their pixels."""
    samples = [int(s) for s in samples]
    px = np.asarray(pixels)
    if px.shape != (len(samples), PIXELS) or np.any(px < 0) or np.any(px > PIXEL_MAX) or np.any(px != np.rint(px)):
        raise ValueError(f"ringer pixels must be {len(samples)} x {PIXELS} integers 0..{PIXEL_MAX}")
    if len(samples) > MAX_RINGERS or any(not 0 <= s < 2**32 for s in samples):
        raise ValueError(f"{len(samples)} ringers, or a sample number out of range")
    out = [_HEADER.pack(_MAGIC, len(samples))]
    for s, row in zip(samples, px.astype(np.uint8)):
        out.append(_ENTRY.pack(s) + row.tobytes())
    return b"".join(out)


def unpack(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(sample numbers, pixels (k, 64) as floats) of a record :func:`pack` wrote; ValueError naming what is
    wrong with one that is not (the owner map is the owner's, yet read as carefully as anything)."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < _HEADER.size:
        raise ValueError("a ringer record is shorter than its header")
    magic, k = _HEADER.unpack_from(data)
    size = _ENTRY.size + PIXELS
    if magic != _MAGIC or k > MAX_RINGERS or len(data) != _HEADER.size + k * size:
        raise ValueError(f"not a ringer record ({len(data)} bytes, {k} ringers said)")
    body = np.frombuffer(bytes(data), dtype=np.uint8, offset=_HEADER.size).reshape(k, size)
    samples = body[:, :_ENTRY.size].copy().view("<u4").reshape(k).astype(np.int64)
    pixels = body[:, _ENTRY.size:].astype(np.float64)
    if np.any(pixels > PIXEL_MAX) or len(set(samples.tolist())) != k:
        raise ValueError("a ringer record holds pixels above 16 or a sample twice")
    return samples, pixels


def quantised_scores(model, q: Quantised, x: np.ndarray) -> np.ndarray:
    """The scores BFV/BGV computes for the samples ``x``, in exact integers, divided back by the divisor: the
    quantised model's circuit as the encrypted one runs it (a linear layer; or the convolution, the square,
    the 2x2 pool sums and the head)."""
    x = np.asarray(x, dtype=np.float64)
    if isinstance(model, LogReg):
        (w, b), = q.layers
        return (x @ w.T + b) / q.divisor
    (ker, bc), (wh, bh) = q.layers
    a = _patches(x) @ ker.T + bc                          # (n, 36, K), integers below t/2
    k = ker.shape[0]
    pooled = np.zeros((a.shape[0], 9, k))
    np.add.at(pooled, (slice(None), POOL_OF), a * a)
    return (pooled.reshape(a.shape[0], 9 * k) @ wh.T + bh) / q.divisor


def reference(model, x: np.ndarray, quantised: Quantised | None) -> np.ndarray:
    """(n, outputs) the finished head outputs the samples ``x`` must decrypt to: the plaintext model's
    (binary: the sigmoid line) -- with ``quantised`` (BFV/BGV), the quantised model's exact ones."""
    s = model.scores(x) if quantised is None else quantised_scores(model, quantised, x)
    s = np.asarray(s, dtype=np.float64).reshape(len(x), -1)
    return sigmoid_poly(s) if model.binary else s


def differences(decrypted: np.ndarray, samples: np.ndarray, ref: np.ndarray, *, exact: bool
                ) -> list[tuple[int, float]]:
    """The ringers whose finished head outputs ``decrypted`` (one row per ringer) differ from the reference:
    (sample, largest difference) each.  ``exact`` (BFV/BGV): any difference beyond a few units in the last
    place of a double -- both sides divide the same integers by the same power of two, and one quantisation
    unit is far larger; else beyond :data:`CKKS_SLACK`."""
    ref = np.asarray(ref, dtype=np.float64)
    d = np.abs(np.asarray(decrypted, dtype=np.float64) - ref)
    slack = 8 * np.spacing(np.maximum(np.abs(ref), 1.0)) if exact else np.full(ref.shape, CKKS_SLACK)
    wrong = ~(d <= slack)                       # NaN is wrong too
    d = np.where(np.isfinite(d), d, np.inf).max(axis=1)
    return [(int(s), float(v)) for s, v, w in zip(samples, d, wrong.any(axis=1)) if w]
