"""Test 3: linear dependence modulo the first prime.

Fresh encryptions carry fresh uniform randomness: any s of them, read as vectors
of coefficients modulo a prime, have rank s (for s below the vector length).  Outputs
built by adding cached ciphertexts live in the span of the cache: with k cached
ciphertexts (radix: the powers; full/scan: the values plus the pool zeros), any
k + 1 of them are dependent, and the rank of a sample stops at k.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .modp import rank_mod

#: Ciphertexts in the sample at most (elimination is cubic in it).
MAX_SAMPLE = 480
#: Extra coordinates over the sample size (so that full rank is possible and chance dependence
#: has probability about q^-EXTRA).
EXTRA = 16


@dataclass
class LinearResult:
    sample: int
    rank: int

    @property
    def dependent(self) -> bool:
        return self.rank < self.sample


def linear_dependence(rows: np.ndarray, q: int, rng: np.random.Generator) -> LinearResult:
    """Rank over GF(q) of a sample of distinct ciphertexts (``rows``: (count, components, primes,
    N) uint64), each read as its coefficients modulo the first prime ``q``, components concatenated."""
    count, size, _, n = rows.shape
    width = size * n
    s = min(count, MAX_SAMPLE, width - EXTRA)
    if s < 2:
        return LinearResult(s, s)
    pick = np.sort(rng.choice(count, size=s, replace=False))
    cols = np.sort(rng.choice(width, size=s + EXTRA, replace=False))
    first = rows[pick][:, :, 0, :].reshape(s, width)
    return LinearResult(s, rank_mod(first[:, cols], q))
