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
def _exponents(n: int) -> np.ndarray:
    """``5^j mod 2N`` for the N/2 slots: slot j's root is ``zeta ** _exponents(n)[j]``."""
    if n & (n - 1) or n < 4:
        raise ValueError(f"the ring degree must be a power of two >= 4, got {n}")
    g = np.empty(n // 2, dtype=np.int64)
    g[0] = 1
    for j in range(1, n // 2):
        g[j] = g[j - 1] * 5 % (2 * n)
    g.flags.writeable = False
    return g


def evaluations(coeffs: np.ndarray, n: int) -> np.ndarray:
    """The N/2 slot values of the real polynomial with coefficients ``coeffs`` (at most ``n``): one FFT of
    length 2N evaluates it at every 2N-th root of unity, of which the slots take theirs.  (An FFT, not a
    matrix product: BLAS threads pinned to one core would stall it.)"""
    c = np.asarray(coeffs, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError(f"coefficients are a vector, got shape {c.shape}")
    if c.size > n:
        raise ValueError(f"{c.size} coefficients do not fit a ring of degree {n}")
    padded = np.zeros(2 * n)
    padded[:c.size] = c
    return np.fft.ifft(padded)[_exponents(n)] * (2 * n)


def coefficients(slots: np.ndarray, n: int, positions: np.ndarray) -> np.ndarray:
    """The coefficients at ``positions`` of the real polynomial of degree < ``n`` whose slot values are
    ``slots`` (all N/2 of them): ``m_k = (2/N) Re sum_j slots_j zeta_j^-k``."""
    z = np.asarray(slots, dtype=np.complex128)
    if z.shape != (n // 2,):
        raise ValueError(f"a ring of degree {n} has {n // 2} slots, got {z.shape}")
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        raise ValueError(f"coefficient positions must lie in 0..{n - 1}")
    return (2.0 / n) * (_inverse_roots(n, tuple(pos.tolist())) * z).sum(axis=1).real


@lru_cache(maxsize=16)
def _inverse_roots(n: int, positions: tuple) -> np.ndarray:
    """(positions, N/2): ``zeta_j ** -k`` for each position k and slot j."""
    out = np.exp(-1j * np.pi * (np.outer(positions, _exponents(n)) % (2 * n)) / n)
    out.flags.writeable = False
    return out
