"""Linear algebra modulo a prime below 2^62, vectorised with NumPy.

Products of two residues need 124 bits; :func:`mulmod` gets the quotient from
floating point and the remainder from wrapping uint64 arithmetic -- the classic "mulmod
via long double".  The quotient may be off by one either way, which the remainder's two
corrections absorb, as long as the floating-point type has a few bits more than the
prime: plain doubles (53 bits, vectorised) below :data:`DOUBLE_LIMIT`, 80-bit extended
precision (``np.longdouble``, 64-bit mantissa on x86-64) above it.  Where ``longdouble``
is plain double, Python integers take over for the large primes (slower, same result).
"""
from __future__ import annotations

import numpy as np

_EXTENDED = np.finfo(np.longdouble).nmant >= 63
#: Primes below this get their quotients from doubles: ``a * b / p < p`` then has an error below 1/4.
DOUBLE_LIMIT = 2 ** 50


def mulmod(a: np.ndarray, b: np.ndarray | int, p: int) -> np.ndarray:
    """``a * b mod p`` elementwise for uint64 residues ``< p < 2^62``."""
    a = np.asarray(a, dtype=np.uint64)
    if p < DOUBLE_LIMIT:
        real = np.float64
    elif _EXTENDED:
        real = np.longdouble
    else:
        return np.array((a.astype(object) * (np.asarray(b).astype(object))) % p, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    quot = (a.astype(real) * b.astype(real) / real(p)).astype(np.uint64)
    with np.errstate(over="ignore"):
        r = (a * b - quot * np.uint64(p)).astype(np.int64)      # exact: |r| < 2p after wrapping
    r = np.where(r < 0, r + p, r)
    r = np.where(r >= p, r - p, r)
    return r.astype(np.uint64)


def rank_mod(matrix: np.ndarray, p: int) -> int:
    """Rank of an integer matrix (entries ``< p``) over GF(p), by Gaussian elimination."""
    m = np.array(matrix, dtype=np.uint64) % np.uint64(p)
    rows, cols = m.shape
    rank = 0
    for col in range(cols):
        if rank == rows:
            break
        nz = np.flatnonzero(m[rank:, col])
        if nz.size == 0:
            continue
        piv = rank + int(nz[0])
        if piv != rank:
            m[[rank, piv]] = m[[piv, rank]]
        inv = pow(int(m[rank, col]), -1, p)
        m[rank] = mulmod(m[rank], inv, p)
        below = m[rank + 1:]
        factors = below[:, col].copy()
        hit = np.flatnonzero(factors)
        if hit.size:
            sub = mulmod(np.broadcast_to(m[rank], (hit.size, cols)), factors[hit, None], p)
            below[hit] = (below[hit] + (np.uint64(p) - sub)) % np.uint64(p)
        rank += 1
    return rank
