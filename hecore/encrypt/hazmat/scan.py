"""Scanning-based caching, iCHEETAH §3.2 (with the randomness pool of §3.3)."""
from __future__ import annotations

import numpy as np

from hecore.seal.kernels import gather_add

from .cache import CachedStrategy, encrypt_rows
from .pool import RandomnessPool

# The paper's Fig. 3 shows scanning and full caching on one curve: the scan caches every
# value it finds.  A smaller top_k trades cache-building time for fresh encryptions.
DEFAULT_TOP_K = 256
DEFAULT_POOL_SIZE = 64


class ScanningCaching(CachedStrategy):
    """Scanning-based caching (iCHEETAH §3.2): cache Enc(p) for the ``top_k`` most frequent values.

    :meth:`prepare` scans a sample of pixel values (the image, or a corpus
    sample) for its ``top_k`` most frequent values and caches their
    encryptions; pixels with a cached value get ``cache[p] + pool[i]`` (§3.3),
    the others are encrypted fresh.  Leaks (``hecore.encrypt.strategies.WHAT_LEAKS["scan"]``).
    """

    name = "scan"
    needs_scan = True

    def __init__(self, ctx, top_k: int = DEFAULT_TOP_K, pool_size: int = DEFAULT_POOL_SIZE):
        super().__init__(ctx)
        if not 1 <= int(top_k) <= 256:
            raise ValueError(f"top_k must be in 1..256, got {top_k}")
        self.top_k = int(top_k)
        self.pool_size = int(pool_size)
        self.cached_values: np.ndarray | None = None
        self.value_row = np.full(256, -1, dtype=np.int64)   # pixel value -> cache row, -1 if not cached
        self.table: np.ndarray | None = None
        self.pool: RandomnessPool | None = None

    def options(self):
        return {"top_k": self.top_k, "pool_size": self.pool_size}

    def _build(self, counts):
        if counts is None:
            raise ValueError("scanning-based caching needs a sample of pixel values (or their histogram) to scan")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (256,):
            raise ValueError(f"a pixel-value histogram has 256 bins, got shape {counts.shape}")
        present = np.flatnonzero(counts)
        # Most frequent first; ties broken by value so a scan is reproducible.
        order = present[np.lexsort((present, -counts[present]))]
        self._set_cache(order[: self.top_k].astype(np.int64), encrypt_rows(self.ctx, order[: self.top_k]))
        self.pool = RandomnessPool.build(self.ctx, self.pool_size)

    def _set_cache(self, values: np.ndarray, table: np.ndarray) -> None:
        self.cached_values = values
        self.table = table
        self.value_row[:] = -1
        self.value_row[values] = np.arange(len(values))

    def _state_arrays(self):
        return {"values": self.cached_values, "table": self.table, "pool": self.pool.rows}

    def _load_state_arrays(self, arrays):
        self._set_cache(arrays["values"].astype(np.int64), arrays["table"])
        self.pool = RandomnessPool(arrays["pool"])

    def _encrypt_into(self, values, out):
        if self.table is None:
            raise RuntimeError("ScanningCaching.prepare() was not called")
        rows = self.value_row[values]
        hit = rows >= 0
        slots = np.flatnonzero(hit)
        gather_add(out, slots, self._header, self.table, rows[hit], self.pool.rows,
                   self.pool.draw(len(slots)), self._q, self.ct_format.n, self._scratch)
        miss = np.flatnonzero(~hit)
        self._fresh_into(values[miss], miss, out)
