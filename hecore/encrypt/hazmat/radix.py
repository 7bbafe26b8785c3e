"""Radix-based caching, iCHEETAH §3.2, with and without the §3.3 randomisation."""
from __future__ import annotations

import numpy as np

from hecore.seal.kernels import linear_combination

from .cache import CachedStrategy, encrypt_rows

MAX_VALUE = 255


def radix_powers(radix: int) -> list[int]:
    """r^0, r^1, ... up to the largest power <= 255."""
    if radix < 2:
        raise ValueError(f"radix must be at least 2, got {radix}")
    powers = [1]
    while powers[-1] * radix <= MAX_VALUE:
        powers.append(powers[-1] * radix)
    return powers


def digits(values: np.ndarray, radix: int, count: int) -> np.ndarray:
    """Base-``radix`` digits of ``values``, least significant first: shape (len, count)."""
    out = np.empty((len(values), count), dtype=np.int16)
    v = values.astype(np.int64)
    for k in range(count):
        out[:, k] = v % radix
        v //= radix
    return out


class RadixCaching(CachedStrategy):
    """Radix-based caching (iCHEETAH §3.2): Enc(p) = sum of cached Enc(r^k) over p's base-r digits.

    The cache holds Enc(0) and Enc(r^k) for every power r^k <= 255 (the paper
    caches "0, 2, 4, 8, 16, ..." for r = 2).  A digit d adds Enc(r^k) d times;
    p = 0 is the cached Enc(0).  Without §3.3's randomisation the result is
    deterministic.  Leaks (``hecore.encrypt.strategies.WHAT_LEAKS["radix"]``).
    """

    name = "radix"

    def __init__(self, ctx, radix: int = 2):
        super().__init__(ctx)
        self.radix = int(radix)
        self.powers = radix_powers(self.radix)
        self.table: np.ndarray | None = None   # rows: Enc(0), Enc(r^0), Enc(r^1), ...
        self.rng = np.random.default_rng()

    def options(self):
        return {"radix": self.radix}

    def _build(self, counts):
        self.table = encrypt_rows(self.ctx, [0] + self.powers)

    def _state_arrays(self):
        return {"table": self.table}

    def _load_state_arrays(self, arrays):
        self.table = arrays["table"]

    def coefficients(self, values: np.ndarray) -> np.ndarray:
        """How many times each cached row is added, per value: shape (len, 1 + #powers)."""
        k = len(self.powers)
        coefs = np.zeros((len(values), 1 + k), dtype=np.int16)
        coefs[:, 1:] = digits(values, self.radix, k)
        coefs[:, 0] = values == 0
        return coefs

    def _encrypt_into(self, values, out):
        if self.table is None:
            raise RuntimeError(f"{type(self).__name__}.prepare() was not called")
        linear_combination(out, np.arange(len(values), dtype=np.int64), self._header, self.table,
                           self.coefficients(values), self._q, self.ct_format.n, self._scratch)


class RadixCachingRandomised(RadixCaching):
    """Radix-based caching with the randomisation of iCHEETAH §3.3.

    For each radix position i >= 1, with probability 1/2, add Enc(r^i) and
    subtract r x Enc(r^(i-1)) ("Ctxt[i] + radixes[i] - r x radixes[i-1]"): the
    value is unchanged, the bytes differ.  Every output is still an integer
    combination of the few cached ciphertexts.  Leaks
    (``hecore.encrypt.strategies.WHAT_LEAKS["radix-rand"]``).
    """

    name = "radix-rand"

    def coefficients(self, values):
        coefs = super().coefficients(values)
        k = len(self.powers)
        flips = self.rng.integers(0, 2, size=(len(values), k - 1), dtype=np.int16)
        coefs[:, 2:] += flips              # + Enc(r^i), i = 1..k-1  (row 1 + i)
        coefs[:, 1:-1] -= self.radix * flips  # - r x Enc(r^(i-1))    (row i)
        return coefs
