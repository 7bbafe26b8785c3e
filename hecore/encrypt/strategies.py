"""Pixel-layout encryption strategies: the safe baseline and the gate to the leaking ones.

A strategy turns pixel values (uint8, one channel of one tile, flattened)
into serialized ciphertexts, one per value (iCHEETAH §3.1: pixel-level CKKS).
Only :class:`Fresh` lives here.  The paper's caching strategies (§3.2–3.3)
leak and live in :mod:`hecore.encrypt.hazmat`; :func:`make_strategy` refuses them
unless the caller passes ``allow_leaky=True``.
"""
from __future__ import annotations

import io
import json

import numpy as np

from hecore.ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS
from hecore.errors import LeakyStrategyRefused, UnknownStrategy
from hecore.seal.context import HEContext

from .base import PixelStrategy

#: What each leaking strategy gives away, for the refusal message and the docs.
WHAT_LEAKS = {
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
    "zinc": "every output is the one cached Enc(0) plus the encoded value plus fresh small errors (the Zinc paper): "
            "the second components of any two outputs differ by a small polynomial, so decoding the "
            "difference of their first components -- public parameters only -- gives the exact difference "
            "of the two pixel values, i.e. the whole image up to one unknown offset",
}


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
    return list(SAFE_STRATEGIES) + list(WHAT_LEAKS)


def security_of(name: str) -> str:
    if name in SAFE_STRATEGIES:
        return SAFE_STRATEGIES[name].security
    if name in WHAT_LEAKS:
        return SECURITY_LEAKS
    raise UnknownStrategy(f"unknown strategy {name!r}; choose one of: {', '.join(strategy_names())}")


def strategy_class(name: str, *, allow_leaky: bool = False) -> type[PixelStrategy]:
    """The class behind ``name``; leaking ones only with ``allow_leaky=True``."""
    if name in SAFE_STRATEGIES:
        return SAFE_STRATEGIES[name]
    if name not in WHAT_LEAKS:
        raise UnknownStrategy(f"unknown strategy {name!r}; choose one of: {', '.join(strategy_names())}")
    if not allow_leaky:
        raise LeakyStrategyRefused(
            f"strategy {name!r} is not IND-CPA secure: {WHAT_LEAKS[name]}. It reproduces the iCHEETAH "
            f"paper's caching as a research mode. To use it anyway pass allow_leaky=True (API) or "
            f"--allow-leaky (command line); every ciphertext it makes is labelled security='leaks'."
        )
    from .hazmat import LEAKY_STRATEGIES
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
        from hecore.seal.keys import check_fingerprint
        check_fingerprint(meta["fingerprint"], ctx.fingerprint, what="the strategy's cached ciphertexts")
    strategy = make_strategy(meta["name"], ctx, allow_leaky=allow_leaky, **meta["options"])
    strategy._load_state_arrays(arrays)
    return strategy
