"""Full caching, iCHEETAH §3.2 (with the randomness pool of §3.3)."""
from __future__ import annotations

import numpy as np

from hecore.seal.kernels import gather_add

from .cache import CachedStrategy, encrypt_rows
from .pool import RandomnessPool

DEFAULT_POOL_SIZE = 64


class FullCaching(CachedStrategy):
    """Full caching (iCHEETAH §3.2): Enc(p) cached for every p in 0..255, plus a pool zero (§3.3).

    ``c = cache[p] + pool[i]`` with ``i`` uniform in the pool: one ciphertext
    addition per pixel, done by :func:`hecore.seal.kernels.gather_add` straight
    into the output bytes.  Leaks (see ``hecore.encrypt.strategies.WHAT_LEAKS["full"]``).
    """

    name = "full"

    def __init__(self, ctx, pool_size: int = DEFAULT_POOL_SIZE):
        super().__init__(ctx)
        self.pool_size = int(pool_size)
        self.table: np.ndarray | None = None
        self.pool: RandomnessPool | None = None

    def options(self):
        return {"pool_size": self.pool_size}

    def _build(self, counts):
        self.table = encrypt_rows(self.ctx, range(256))
        self.pool = RandomnessPool.build(self.ctx, self.pool_size)

    def _state_arrays(self):
        return {"table": self.table, "pool": self.pool.rows}

    def _load_state_arrays(self, arrays):
        self.table = arrays["table"]
        self.pool = RandomnessPool(arrays["pool"])

    def _encrypt_into(self, values, out):
        if self.table is None:
            raise RuntimeError("FullCaching.prepare() was not called")
        rows = values.astype(np.int64)
        gather_add(out, np.arange(len(rows), dtype=np.int64), self._header, self.table, rows,
                   self.pool.rows, self.pool.draw(len(rows)), self._q, self.ct_format.n, self._scratch)
