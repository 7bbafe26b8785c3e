"""What every encryptor is: one interface over a public key, a secret key or a pixel strategy.

An :class:`Encryptor` turns a batch of *rows* of slot values into serialized ciphertexts, one per row,
and says what its ciphertexts are worth (``security``) and which label the tables give them (``name``).
The layouts (:mod:`hecore.layouts`) decide what a row holds -- a tile channel's block in the packed
layouts, a single pixel value in the pixel layout -- and take any encryptor:

* :class:`hecore.encrypt.public.PublicKeyEncryptor`: fresh public-key encryption (anyone with the
  public key; IND-CPA);
* :class:`hecore.encrypt.symmetric.SymmetricEncryptor`: fresh seeded secret-key encryption (the key
  owner's fast path; IND-CPA);
* :class:`PixelStrategy`: the pixel layout's strategies, one ciphertext per value -- :class:`Fresh`
  (IND-CPA) in :mod:`hecore.encrypt.strategies`, the iCHEETAH paper's caching (which leaks) in
  :mod:`hecore.encrypt.hazmat`, which imports this module and nothing of the safe API.

:func:`hecore.encrypt.encryptor_for` picks one from what the caller holds, like Lattigo's single
``NewEncryptor(params, key)``.
"""
from __future__ import annotations

import io
import json
import time
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from hecore.ciphertexts import CiphertextBatch
from hecore.seal.context import HEContext
from hecore.seal.params import Params


class Encryptor(ABC):
    """Rows of slot values in, one serialized ciphertext per row out.

    ``name`` is the label rows carry in the ``strategy`` column (``fresh``, ``symmetric``, a paper
    strategy); ``security`` is ``ind-cpa`` or ``leaks``.
    """

    name: str
    security: str
    params: Params

    @abstractmethod
    def encrypt(self, rows) -> CiphertextBatch:
        """One ciphertext per row of ``rows``: a 2-D array of shape (n, k) with k <= the slots,
        float64 (or integers for BFV/BGV), or complex128 for two reals per slot (CKKS)."""

    @property
    def max_row(self) -> int:
        """The most values one row (one ciphertext) can hold."""
        return self.params.slots


class PixelStrategy(Encryptor):
    """Encrypts a vector of pixel values into one ciphertext per value.

    Subclasses set ``name`` (the command-line name) and ``security``
    (``"ind-cpa"`` or ``"leaks"``).  :meth:`prepare` builds whatever is cached
    (cache tables, randomness pools) and records its cost in ``setup_seconds``;
    :meth:`state` / :meth:`from_state` move that cache between processes as bytes.
    """

    name: ClassVar[str]
    security: ClassVar[str]

    def __init__(self, ctx: HEContext):
        self.ctx = ctx
        self.params = ctx.params
        self.ct_format = ctx.ct_format
        self.setup_seconds = 0.0
        self._buffer = np.empty(0, dtype=np.uint8)

    # --- the cache ------------------------------------------------------------------
    #: True when :meth:`prepare` needs to see the data (a scan): give it ``sample`` or ``counts``.
    needs_scan: ClassVar[bool] = False

    def prepare(self, sample: np.ndarray | None = None, *, counts: np.ndarray | None = None) -> "PixelStrategy":
        """Build the strategy's cache.

        ``sample`` (pixel values) or ``counts`` (a 256-bin histogram, e.g. of a
        whole corpus) is what a scanning strategy looks at; others ignore both.
        """
        t = time.perf_counter()
        if counts is None and sample is not None:
            counts = np.bincount(np.asarray(sample, dtype=np.uint8).reshape(-1), minlength=256)
        self._build(counts)
        self.setup_seconds = time.perf_counter() - t
        return self

    def _build(self, counts: np.ndarray | None) -> None:
        """Default: nothing to cache."""

    def options(self) -> dict:
        """Constructor keyword arguments that reproduce this strategy."""
        return {}

    def state(self) -> bytes:
        """The prepared cache as bytes (``np.savez``; no Pyfhel objects, no keys)."""
        buf = io.BytesIO()
        arrays = self._state_arrays()
        meta = {"name": self.name, "options": self.options(), "fingerprint": self.ctx.fingerprint}
        np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
        return buf.getvalue()

    def _state_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def _load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Default: nothing to load."""

    # --- encryption -----------------------------------------------------------------
    @property
    def max_row(self) -> int:
        return 1

    def encrypt(self, values: np.ndarray, *, reuse_buffer: bool = False) -> CiphertextBatch:
        """One ciphertext per value (a row of one value is one value: any shape is flattened).

        With ``reuse_buffer=True`` the batch lives in a buffer this strategy
        reuses on its next call (no page faults for fresh memory; about a third
        of the cached path's cost here): consume or copy it before calling again.
        """
        values = _as_pixel_values(values)
        need = len(values) * self.ct_format.stride
        if reuse_buffer:
            if self._buffer.size < need:
                self._buffer = np.empty(need, dtype=np.uint8)
            out = self._buffer
        else:
            out = np.empty(need, dtype=np.uint8)
        self._encrypt_into(values, out)
        return CiphertextBatch.uniform(out, len(values), self.ct_format.stride, self.name, self.security)

    @abstractmethod
    def _encrypt_into(self, values: np.ndarray, out: np.ndarray) -> None:
        """Write ``len(values)`` ciphertexts of ``layout.stride`` bytes into ``out``."""

    def _fresh_into(self, values: np.ndarray, slots: np.ndarray, out: np.ndarray) -> None:
        """Encrypt ``values[i]`` freshly into output slot ``slots[i]``."""
        stride = self.ct_format.stride
        enc = self.ctx.encrypt_value
        for v, s in zip(values.tolist(), slots.tolist()):
            ct = enc(v)
            if len(ct) != stride:
                raise RuntimeError(f"fresh ciphertext of {len(ct)} bytes, expected {stride}")
            out[s * stride:(s + 1) * stride] = np.frombuffer(ct, dtype=np.uint8)


def _as_pixel_values(values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != np.uint8:
        if not np.issubdtype(arr.dtype, np.integer) or (arr.size and (arr.min() < 0 or arr.max() > 255)):
            raise ValueError(f"pixel values must be integers in 0..255, got dtype {arr.dtype}")
        arr = arr.astype(np.uint8)
    return np.ascontiguousarray(arr.reshape(-1))
