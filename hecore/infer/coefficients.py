"""Logistic regression on one sample per ciphertext, by the coefficient encoding.

A sample's 64 pixels are the coefficients of one plaintext polynomial ``x(X) = sum_i x_i X^i``,
encrypted once.  The model's weights of class ``k`` go *reversed* into coefficients ``64k .. 64k+63``
of one public plaintext ``w(X)``; then coefficient ``64k + 63`` of the product ``x(X) w(X)`` is
``sum_i x_i w_{k,i}``, class k's score, and the bias is added there.  The whole model is one
plaintext product (plus one addition): no rotation, no Galois key, one encryption and one decryption
per sample.  The product's other coefficients are partial sums of the same terms; the owner reads
only the scores' coefficients.

BFV/BGV use the quantised integer weights (:func:`hecore.infer.models.quantise`), so the scores
are exact; CKKS encodes the coefficients through the canonical embedding (:mod:`hecore.seal.embedding`),
the weights at the scale of the prime the product's rescale divides by.
"""
from __future__ import annotations

import time

import numpy as np

from hecore.errors import InvalidParameters

from .arithmetic import arithmetic
from .encrypted import cached_plaintext
from .models import PIXEL_MAX, PIXELS, LogReg, Quantised, sigmoid_poly

__all__ = ["decrypt_scores", "encrypt_samples", "fits", "infer", "positions", "weights_polynomial"]


def positions(classes: int) -> np.ndarray:
    """The coefficients of the product that hold the ``classes`` scores."""
    return np.arange(classes, dtype=np.int64) * PIXELS + PIXELS - 1


def weights_polynomial(w: np.ndarray) -> np.ndarray:
    """Coefficients ``64k + 63 - i`` = ``w[k, i]``: each class's weights reversed, one block of 64 per class."""
    w = np.asarray(w)
    return w[:, ::-1].reshape(-1)


def _bias_polynomial(b: np.ndarray) -> np.ndarray:
    out = np.zeros(len(b) * PIXELS, dtype=np.asarray(b).dtype)
    out[positions(len(b))] = b
    return out


def _ckks_bound(model: LogReg) -> float:
    """The largest |coefficient| the product can hold: a coefficient sums pixel x weight terms of at most
    two classes' blocks, plus the bias."""
    w, b = model.head()
    return PIXEL_MAX * 2 * float(np.max(np.abs(w).sum(1))) + float(np.max(np.abs(b)))


def fits(model, params) -> str | None:
    """Why ``model`` cannot run in this layout with ``params``, or None when it can."""
    if not isinstance(model, LogReg):
        return f"the coefficient layout serves logistic regression, not {model.name}"
    if model.w.shape[0] * PIXELS > params.n:
        return f"{model.w.shape[0]} classes x {PIXELS} coefficients exceed the ring degree {params.n}"
    return arithmetic(params).why_coefficients_overflow(model, _ckks_bound)


def encrypt_samples(ctx, x: np.ndarray) -> list[bytes]:
    """One fresh public-key encryption per sample (rows of ``x``, 64 pixels each), pixels as coefficients."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != PIXELS:
        raise ValueError(f"a digits batch has shape (n, {PIXELS}), got {x.shape}")
    if np.any(x < 0) or np.any(x > PIXEL_MAX) or np.any(x != np.rint(x)):
        raise ValueError(f"digit pixels must be integers 0..{PIXEL_MAX}")
    return [ctx.encrypt_coefficients(row) for row in x]


def _encoded(model, ev, kind: str, values, level: int, scale):
    """The plaintext polynomial ``values()`` for ``ev``, kept on the model (the weights are public; encoding
    them is a one-off per model and key)."""
    return cached_plaintext(model, ev, "coefficients", (kind, level, scale),
                            lambda: ev.ctx.encode_coefficients(values(), level=level, scale=scale))


def _weights(model, ev, ar, quantised: Quantised | None):
    """(weights, bias) the layout multiplies by in the arithmetic ``ar``, checked once per model and evaluator."""
    def make():
        why = fits(model, ev.params)
        if why:
            raise InvalidParameters(why)
        return ar.layers(model, quantised)[0]
    return cached_plaintext(model, ev, "coefficients", "weights", make)


def infer(ev, model, cts: list, *, quantised: Quantised | None = None, stats: dict | None = None) -> list:
    """The model on loaded ciphertexts of :func:`encrypt_samples`: one output ciphertext per sample,
    class k's score (binary CKKS: the sigmoid line's probability) at coefficient ``64k + 63``."""
    ar = arithmetic(ev.params)
    w, b = _weights(model, ev, ar, quantised)
    t0 = time.perf_counter()
    out = []
    for c in cts:
        spare = ar.spare_levels(ev, c, 1)
        if spare < 0:
            raise InvalidParameters(f"logreg needs depth 1; {ev.params.name} affords {ev.params.depth}")
        if spare:
            c = ev.mod_switch(c, spare)
        level = ev.level(c)
        q = ar.product_scale(ev, c)
        acc = ev.rescale(ev.multiply_plain(c, _encoded(model, ev, "w", lambda: weights_polynomial(w), level, q)))
        if np.any(b):
            scale = ar.bias_scale(ev, acc)
            acc = ev.add_plain(acc, _encoded(model, ev, "b", lambda: _bias_polynomial(b), ev.level(acc), scale))
        out.append(acc)
    if stats is not None:
        stats["infer_seconds"] = time.perf_counter() - t0
    return out


def decrypt_scores(ctx, outs: list, *, classes: int, binary: bool, quantised: Quantised | None = None) -> np.ndarray:
    """(samples, classes) head outputs in the plaintext model's units, as :func:`hecore.infer.encrypted.decrypt_scores`."""
    pos = positions(classes)
    s = np.stack([ctx.decrypt_coefficients(c, pos) for c in outs]) if outs else np.zeros((0, classes))
    if quantised is not None:
        s = s / quantised.divisor
        if binary:
            s = sigmoid_poly(s)
    return s
