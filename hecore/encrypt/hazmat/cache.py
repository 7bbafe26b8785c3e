"""What the caching strategies share: cached ciphertexts as uint64 rows, and the kernels' inputs."""
from __future__ import annotations

import numpy as np

from hecore.ciphertexts import SECURITY_LEAKS
from hecore.encrypt.base import PixelStrategy
from hecore.seal.context import HEContext


class CachedStrategy(PixelStrategy):
    """Base of the paper's caching strategies: they build ciphertexts from cached rows with the
    kernels of :mod:`hecore.seal.kernels`, which take the constant header, the primes and a scratch row."""

    security = SECURITY_LEAKS

    def __init__(self, ctx: HEContext):
        super().__init__(ctx)
        self._scratch = np.empty(self.ct_format.words, dtype=np.uint64)
        self._header = self.ct_format.header_array()
        self._q = self.ct_format.q_array()


def encrypt_rows(ctx: HEContext, values) -> np.ndarray:
    """Fresh encryptions of ``values``, as coefficient rows of shape (len(values), words)."""
    fmt = ctx.ct_format
    values = list(values)
    table = np.empty((len(values), fmt.words), dtype=np.uint64)
    for i, v in enumerate(values):
        table[i] = fmt.coefficients(ctx.encrypt_value(float(v)))
    return table
