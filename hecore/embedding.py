"""CKKS's canonical embedding for polynomials with few coefficients: coefficients <-> slot values.

SEAL's CKKS slot ``j`` (``j < N/2``) of a plaintext polynomial ``m`` is ``m(zeta^(5^j mod 2N)) / scale``
with ``zeta = exp(i pi / N)``: the slots are the evaluations of the polynomial at one root of each
conjugate pair.  Encoding slot values that are such evaluations therefore puts chosen *coefficients*
into the plaintext (times the scale), and the coefficients of a decrypted polynomial come back from
its decoded slots by the inverse transform.  The coefficient encoding of :mod:`hecore.infer.coefficients`
(an inner product as one coefficient of one plaintext product) stands on this; no key is involved.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["coefficients", "evaluations"]


@lru_cache(maxsize=8)
def _powers(n: int, support: int) -> np.ndarray:
    """(support, n/2) complex: ``zeta_j ** k`` for the first ``support`` powers ``k`` of every slot's root."""
    if n & (n - 1) or n < 4:
        raise ValueError(f"the ring degree must be a power of two >= 4, got {n}")
    if not 1 <= support <= n:
        raise ValueError(f"a support of {support} coefficients does not fit a ring of degree {n}")
    g = np.empty(n // 2, dtype=np.int64)
    g[0] = 1
    for j in range(1, n // 2):
        g[j] = g[j - 1] * 5 % (2 * n)
    k = np.arange(support, dtype=np.int64)
    e = np.outer(k, g) % (2 * n)
    out = np.exp(1j * np.pi * e / n)
    out.flags.writeable = False
    return out


def evaluations(coeffs: np.ndarray, n: int) -> np.ndarray:
    """The N/2 slot values of the real polynomial with coefficients ``coeffs`` (at most ``n``)."""
    c = np.asarray(coeffs, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError(f"coefficients are a vector, got shape {c.shape}")
    return c @ _powers(n, len(c))


def coefficients(slots: np.ndarray, n: int, positions: np.ndarray) -> np.ndarray:
    """The coefficients at ``positions`` of the real polynomial of degree < ``n`` whose slot values are
    ``slots`` (all N/2 of them): ``m_k = (2/N) Re sum_j slots_j zeta_j^-k``."""
    z = np.asarray(slots, dtype=np.complex128)
    if z.shape != (n // 2,):
        raise ValueError(f"a ring of degree {n} has {n // 2} slots, got {z.shape}")
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        raise ValueError(f"coefficient positions must lie in 0..{n - 1}")
    e = _powers(n, int(pos.max()) + 1 if pos.size else 1)[pos]
    return (2.0 / n) * (np.conj(e) @ z).real
