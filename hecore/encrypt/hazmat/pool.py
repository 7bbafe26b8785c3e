"""The randomness pool of iCHEETAH §3.3."""
from __future__ import annotations

import numpy as np

from hecore.seal.context import HEContext

from .cache import encrypt_rows


class RandomnessPool:
    """A pool of ``size`` fresh encryptions of zero (iCHEETAH §3.3, "randomness pool").

    Scanning-based and full caching add one pool member, drawn at random, to
    each cached ciphertext.  The paper argues this makes the result IND-CPA;
    it does not: with ``size`` zeros, equal values share at most ``size``
    distinct ciphertexts and the differences between pool members recur.
    """

    def __init__(self, rows: np.ndarray, rng: np.random.Generator | None = None):
        if rows.ndim != 2 or rows.shape[0] < 1:
            raise ValueError(f"a randomness pool needs at least one encrypted zero, got shape {rows.shape}")
        self.rows = rows
        self.rng = rng if rng is not None else np.random.default_rng()

    @classmethod
    def build(cls, ctx: HEContext, size: int) -> "RandomnessPool":
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        return cls(encrypt_rows(ctx, [0.0] * size))

    @property
    def size(self) -> int:
        return self.rows.shape[0]

    def draw(self, count: int) -> np.ndarray:
        """Pool indices for ``count`` ciphertexts, uniformly at random."""
        return self.rng.integers(0, self.size, size=count, dtype=np.int64)
