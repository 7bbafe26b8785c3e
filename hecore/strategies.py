"""Pixel-layout encryption strategies: the safe baseline and the gate to the leaking ones.

A strategy turns pixel values (uint8, one channel of one tile, flattened)
into serialized ciphertexts, one per value (iCHEETAH §3.1: pixel-level CKKS).
Only :class:`Fresh` lives here.  The paper's caching strategies (§3.2–3.3)
leak and live in :mod:`hecore.hazmat`; :func:`make_strategy` refuses them
unless the caller passes ``allow_leaky=True``.
"""
from __future__ import annotations

import io
import json
import time
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from .ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS, CiphertextBatch
from .context import HEContext
from .errors import LeakyStrategyRefused, UnknownStrategy

#: What each leaking strategy gives away, for the refusal message and the docs.
LEAKS = {
    "radix": "it is deterministic: equal pixel values give byte-identical ciphertexts, so anyone "
             "holding the table sees which pixels are equal (the image's outline) without the key",
    "radix-rand": "every ciphertext is a small integer combination of the few cached radix "
                  "ciphertexts, so any (#cached + 1) of them are linearly dependent mod q and the "
                  "combination, hence the pixel value class, can be solved for without the key",
    "scan": "cached values get one of n pool zeros added: equal (value, pool index) pairs give "
            "byte-identical ciphertexts and pool differences recur, which links every pixel of "
            "equal value (all grey levels of a 64x64 image are recovered in seconds)",
    "full": "every value gets one of n pool zeros added: equal (value, pool index) pairs give "
            "byte-identical ciphertexts and pool differences recur, which links every pixel of "
            "equal value (all grey levels of a 64x64 image are recovered in seconds)",
    "zinc": "every output is the one cached Enc(0) plus the encoded value plus fresh small errors (seed 003): "
            "the second components of any two outputs differ by a small polynomial, so decoding the "
            "difference of their first components -- public parameters only -- gives the exact difference "
            "of the two pixel values, i.e. the whole image up to one unknown offset",
}


class PixelStrategy(ABC):
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
        self.layout = ctx.layout
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
    def encrypt(self, values: np.ndarray, *, reuse_buffer: bool = False) -> CiphertextBatch:
        """One ciphertext per value.

        With ``reuse_buffer=True`` the batch lives in a buffer this strategy
        reuses on its next call (no page faults for fresh memory; about a third
        of the cached path's cost here): consume or copy it before calling again.
        """
        values = _as_pixel_values(values)
        need = len(values) * self.layout.stride
        if reuse_buffer:
            if self._buffer.size < need:
                self._buffer = np.empty(need, dtype=np.uint8)
            out = self._buffer
        else:
            out = np.empty(need, dtype=np.uint8)
        self._encrypt_into(values, out)
        return CiphertextBatch.uniform(out, len(values), self.layout.stride, self.name, self.security)

    @abstractmethod
    def _encrypt_into(self, values: np.ndarray, out: np.ndarray) -> None:
        """Write ``len(values)`` ciphertexts of ``layout.stride`` bytes into ``out``."""

    def _fresh_into(self, values: np.ndarray, slots: np.ndarray, out: np.ndarray) -> None:
        """Encrypt ``values[i]`` freshly into output slot ``slots[i]``."""
        stride = self.layout.stride
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


class Fresh(PixelStrategy):
    """Fresh encryption of every pixel: encode, then public-key encrypt (IND-CPA).

    The baseline of iCHEETAH §4.3.1 ("Enc by Pixel without Caching") and the
    default strategy: every ciphertext carries fresh randomness.
    """

    name = "fresh"
    security = SECURITY_IND_CPA

    def _encrypt_into(self, values, out):
        self._fresh_into(values, np.arange(len(values)), out)


SAFE_STRATEGIES: dict[str, type[PixelStrategy]] = {"fresh": Fresh}


def strategy_names() -> list[str]:
    return list(SAFE_STRATEGIES) + list(LEAKS)


def security_of(name: str) -> str:
    if name in SAFE_STRATEGIES:
        return SAFE_STRATEGIES[name].security
    if name in LEAKS:
        return SECURITY_LEAKS
    raise UnknownStrategy(f"unknown strategy {name!r}; choose one of: {', '.join(strategy_names())}")


def strategy_class(name: str, *, allow_leaky: bool = False) -> type[PixelStrategy]:
    """The class behind ``name``; leaking ones only with ``allow_leaky=True``."""
    if name in SAFE_STRATEGIES:
        return SAFE_STRATEGIES[name]
    if name not in LEAKS:
        raise UnknownStrategy(f"unknown strategy {name!r}; choose one of: {', '.join(strategy_names())}")
    if not allow_leaky:
        raise LeakyStrategyRefused(
            f"strategy {name!r} is not IND-CPA secure: {LEAKS[name]}. It reproduces the iCHEETAH "
            f"paper's caching as a research mode. To use it anyway pass allow_leaky=True (API) or "
            f"--allow-leaky (command line); every ciphertext it makes is labelled security='leaks'."
        )
    from .hazmat import LEAKY_STRATEGIES  # imported only once the caller has opted in
    return LEAKY_STRATEGIES[name]


def make_strategy(name: str, ctx: HEContext, *, allow_leaky: bool = False, **options) -> PixelStrategy:
    """Construct (not yet prepare) the strategy ``name``."""
    cls = strategy_class(name, allow_leaky=allow_leaky)
    try:
        return cls(ctx, **options)
    except TypeError as e:
        raise ValueError(f"bad options {options} for strategy {name!r}: {e}") from None


def strategy_from_state(ctx: HEContext, data: bytes, *, allow_leaky: bool = False) -> PixelStrategy:
    """Rebuild a prepared strategy from :meth:`PixelStrategy.state` bytes (no encryption needed)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    if meta["fingerprint"] != ctx.fingerprint:
        from .keys import check_fingerprint
        check_fingerprint(meta["fingerprint"], ctx.fingerprint, what="the strategy's cached ciphertexts")
    strategy = make_strategy(meta["name"], ctx, allow_leaky=allow_leaky, **meta["options"])
    strategy._load_state_arrays(arrays)
    return strategy
