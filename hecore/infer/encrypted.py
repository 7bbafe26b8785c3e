"""The models of :mod:`.models` on ciphertexts (the ML paper's encrypted inference).

A batch of digits is laid out SIMD across samples: slot j of ciphertext f is pixel f of digit j, so a
linear layer is plaintext scalar products and additions, no rotation (:func:`layout_batch`).  CKKS runs
the models as trained; BFV runs them quantised (:func:`hecore.infer.models.quantise`); the
:mod:`.arithmetic` of the preset says how.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hecore.errors import InvalidParameters

from .arithmetic import arithmetic
from .models import PIXEL_MAX, PIXELS, POOL_OF, TAPS, LogReg, Quantised, sigmoid_poly


def block_for(n: int, slots: int, packed: bool) -> int:
    """The block (slots per pixel position) of a batch of ``n`` samples: ``slots`` (one pixel
    position per ciphertext) unless ``packed``, then the smallest power of two >= n."""
    if not 1 <= n <= slots:
        raise ValueError(f"{n} samples do not fit the {slots} slots of one ciphertext; split the batch")
    return slots if not packed else max(1, 1 << (n - 1).bit_length())


def layout_batch(x: np.ndarray, slots: int, block: int) -> np.ndarray:
    """(ciphertexts, slots) values of a batch: slot ``b * block + j`` of ciphertext ``c`` holds pixel
    ``c * (slots // block) + b`` of sample ``j`` (``block = slots``: ciphertext f = pixel f)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != PIXELS:
        raise ValueError(f"a digits batch has shape (n, {PIXELS}), got {x.shape}")
    if np.any(x < 0) or np.any(x > PIXEL_MAX) or np.any(x != np.rint(x)):
        raise ValueError(f"digit pixels must be integers 0..{PIXEL_MAX}")
    if block & (block - 1) or slots % block or len(x) > block:
        raise ValueError(f"block {block} must be a power of two dividing {slots} and hold the {len(x)} samples")
    per = slots // block
    cts = -(-PIXELS // per)
    out = np.zeros((cts, per, block))
    for f in range(PIXELS):
        out[f // per, f % per, :len(x)] = x[:, f]
    return out.reshape(cts, slots)


def encrypt_batch(ctx, x: np.ndarray, *, block: int | None = None) -> list:
    """Fresh public-key encryptions of a batch of ``n <= N/2`` samples (64 pixels each), laid out by
    :func:`layout_batch`: by default one ciphertext per pixel position, slot j = sample j; with a
    ``block`` < N/2 (logistic regression only) ``N/2 / block`` pixel positions per ciphertext."""
    block = block or ctx.params.slots
    return [ctx.encrypt_vector(v) for v in layout_batch(x, ctx.params.slots, block)]


@dataclass
class _Plain:
    """Encoded scalar plaintexts, cached per (value, level, scale)."""

    ev: object
    cache: dict = field(default_factory=dict)

    def get(self, value, level, scale):
        key = (value, level, scale)
        p = self.cache.get(key)
        if p is None:
            p = self.cache[key] = self.ev.encode(value, level=level, scale=scale)
        return p


def _plain_cache(model, ev) -> _Plain:
    """The encoded weights of ``model`` for ``ev``, kept on the model across batches (the weights
    are public; encoding them is a one-off per model and key)."""
    cache = model.__dict__.setdefault("_encoded", {})
    key = id(ev)
    if key not in cache:
        cache.clear()
        cache[key] = _Plain(ev)
    return cache[key]


def cached_plaintext(model, ev, family: str, key, make):
    """``make()`` (a plaintext of ``model``'s public weights for ``ev``), kept on the model under
    ``family`` and ``key`` for as long as the model serves the same evaluator."""
    cache = model.__dict__.setdefault(f"_encoded_{family}", {})
    if cache.get("ev") is not ev:
        cache.clear()
        cache["ev"] = ev
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _linear(ev, ar, plain: _Plain, cts: list, weights: np.ndarray, bias: float):
    """``sum_i weights[i] cts[i] + bias`` in the arithmetic ``ar`` (CKKS: one level; zero weights skipped)."""
    level = ev.level(cts[0])
    q = ar.product_scale(ev, cts[0])
    acc = None
    for c, w in zip(cts, weights):
        w = ar.weight(w)
        if w == 0:
            continue
        acc = ev.add_into(acc, ar.multiply(ev, c, w, lambda v: plain.get(v, level, q)))
    if acc is None:
        raise InvalidParameters("a layer whose weights are all zero (after quantisation) cannot be evaluated")
    acc = ev.rescale(acc)
    if bias:
        acc = ev.add_plain(acc, plain.get(ar.weight(bias), ev.level(acc), ar.bias_scale(ev, acc)))
    return acc


def _blocked_linear(ev, ar, plain: _Plain, cts: list, weights: np.ndarray, bias: float, block: int):
    """Logistic regression on block-packed pixels: per ciphertext one product with the weights laid
    out like the pixels, then the blocks summed by ``log2(min(N/2 / block, 64))`` rotations; slot j of
    the result holds sample j's score."""
    per = ev.slots // block
    wl = np.zeros((len(cts), per, block))
    for f in range(PIXELS):
        wl[f // per, f % per, :] = weights[f]
    wl = wl.reshape(len(cts), ev.slots)
    level = ev.level(cts[0])
    q = ar.product_scale(ev, cts[0])
    acc = None
    for c, w in zip(cts, wl):
        if not np.any(w):
            continue
        key = ("block", w.tobytes(), level, q)
        pt = plain.cache.get(key)
        if pt is None:
            pt = plain.cache[key] = ev.encode(w, level=level, scale=q)
        acc = ev.add_into(acc, ev.multiply_plain(c, pt))
    acc = ev.rescale(acc)
    step = block
    span = block * min(per, 1 << (PIXELS - 1).bit_length())   # positions past the 64th hold zero weights
    while step < span:
        acc = ev.add(acc, ev.rotate(acc, step))
        step *= 2
    if bias:
        acc = ev.add_plain(acc, plain.get(float(bias), ev.level(acc), ev.scale(acc)))
    return acc


def infer_encrypted(ev, model, cts: list, *, quantised: Quantised | None = None, stats: dict | None = None,
                    block: int | None = None) -> list:
    """The model on a batch of loaded ciphertexts (:func:`encrypt_batch`, with the same ``block``):
    one ciphertext per output score (binary: the sigmoid line's probability in CKKS, the quantised
    score in BFV/BGV), sample j in slot j."""
    block = block or ev.slots
    ar = arithmetic(ev.params)
    if block != ev.slots:
        why = (f"block-packed batches (block {block} < {ev.slots} slots) serve CKKS logistic regression only; "
               f"encrypt one pixel per ciphertext for {model.name} / {ev.params.scheme.upper()}")
        if not isinstance(model, LogReg) or ar.ckks_only(why):
            raise InvalidParameters(why)
        per = ev.slots // block
        if len(cts) != -(-PIXELS // per):
            raise ValueError(f"a batch with block {block} has {-(-PIXELS // per)} ciphertexts, got {len(cts)}")
        if ev.level(cts[0]) + 1 > ev.params.depth:
            raise InvalidParameters(f"logreg needs depth 1; {ev.params.name} affords {ev.params.depth}")
        w, b = model.head()
        t0 = time.perf_counter()
        plain = _plain_cache(model, ev)
        out = [_blocked_linear(ev, ar, plain, cts, w[i], b[i], block) for i in range(w.shape[0])]
        if stats is not None:
            stats["infer_seconds"] = time.perf_counter() - t0
        return out
    if len(cts) != PIXELS:
        raise ValueError(f"a digits batch has {PIXELS} ciphertexts (one per pixel), got {len(cts)}")
    need = model.depth
    ar.check_depth(ev, cts[0], need, model.name)
    quantised = ar.prepared(model, quantised)
    plain = _plain_cache(model, ev)
    t0 = time.perf_counter()
    spare = ar.spare_levels(ev, cts[0], need)
    if spare > 0:              # levels the model does not need: drop their primes first (cheaper products)
        cts = [ev.mod_switch(c, spare) for c in cts]
    if isinstance(model, LogReg):
        w, b = ar.layers(model, quantised)[0]
        out = [_linear(ev, ar, plain, cts, w[i], b[i]) for i in range(w.shape[0])]
    else:
        (ker, bc), (wh, bh) = ar.layers(model, quantised)
        k = ker.shape[0]
        pooled = [None] * (9 * k)
        for pos in range(36):
            inputs = [cts[i] for i in TAPS[pos]]
            for kk in range(k):
                a = _linear(ev, ar, plain, inputs, ker[kk], bc[kk])
                j = POOL_OF[pos] * k + kk
                pooled[j] = ev.add_into(pooled[j], ev.square_raw(a, relinearize=False))
        # the four squares of a pool window are summed as three-part ciphertexts: one
        # relinearisation (key switch) and one rescale per pooled feature instead of four
        pooled = [ev.rescale(ev.relinearize(p)) for p in pooled]
        out = [_linear(ev, ar, plain, pooled, wh[i], bh[i]) for i in range(wh.shape[0])]
    if stats is not None:
        stats["infer_seconds"] = time.perf_counter() - t0
    return out


def decrypt_scores(ctx, outs: list, n: int, *, binary: bool, quantised: Quantised | None = None) -> np.ndarray:
    """(n, outputs) decrypted head outputs, back to the plaintext model's units (binary: the
    sigmoid line's probability; BFV: the score divided back, then the sigmoid line)."""
    s = np.stack([ctx.decrypt_slots(c, n) for c in outs], axis=1)
    if quantised is not None:
        s = s / quantised.divisor
        if binary:
            s = sigmoid_poly(s)
    return s


def batch_bytes(cts) -> int:
    return int(sum(len(c) for c in cts))


