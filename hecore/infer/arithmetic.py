"""The two arithmetics encrypted inference runs in, picked once per preset by :func:`arithmetic`.

:class:`CkksArithmetic`: approximate reals.  The model runs as trained; a plaintext multiplying a
ciphertext is encoded at the scale of the prime its rescale divides by, a bias at the product's scale,
and the circuit spends levels, so the depth must be there and spare levels are dropped first.

:class:`IntegerArithmetic` (BFV/BGV): exact integers modulo ``t``.  The model runs quantised
(:func:`hecore.infer.models.quantise`), plaintexts carry no scale, there are no levels to spend; the
scores are divided back after decryption, and binary scores then go through the sigmoid line.

The layouts, the jobs and the bench ask the arithmetic; only :func:`arithmetic` asks the scheme.
"""
from __future__ import annotations

from typing import Callable

from hecore.errors import InvalidParameters

from .models import LogReg, Quantised, quantise, sigmoid_poly

__all__ = ["CkksArithmetic", "IntegerArithmetic", "arithmetic"]


class _Arithmetic:
    """What both arithmetics hold: the parameters they serve."""

    def __init__(self, params):
        self.params = params

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params.name})"


class CkksArithmetic(_Arithmetic):
    """CKKS: the trained model on approximate reals, one level per product."""

    def weight(self, w) -> float:
        return float(w)

    def prepared(self, model, quantised: Quantised | None = None) -> None:
        """The quantised model these parameters run: none, CKKS runs the model as trained."""
        return None

    def layers(self, model, quantised: Quantised | None = None) -> tuple:
        """(weights, bias) of each linear layer: the trained model's, the sigmoid line folded into a binary head."""
        if isinstance(model, LogReg):
            return (model.head(),)
        return ((model.kernels, model.conv_bias), model.head())

    def product_scale(self, ev, c):
        """The scale of a plaintext that multiplies ``c``: the prime the product's rescale divides by."""
        return ev.level_prime(c)

    def bias_scale(self, ev, acc):
        """The scale of a plaintext added to ``acc``: its own."""
        return ev.scale(acc)

    def spare_levels(self, ev, c, need: int) -> int:
        """Levels of ``c`` a circuit of depth ``need`` leaves unused (negative: too few)."""
        return self.params.depth - ev.level(c) - need

    def check_depth(self, ev, c, need: int, model_name: str) -> None:
        """Refuse ``c`` when fewer than ``need`` levels remain."""
        if ev.level(c) + need > self.params.depth:
            raise InvalidParameters(f"{model_name} needs depth {need}; {self.params.name} affords "
                                    f"{self.params.depth} (use `hepix plan` for a preset)")

    def multiply(self, ev, c, w, encode: Callable):
        """``c`` times the weight ``w`` (``encode(v)``: the plaintext of the constant ``v``)."""
        return ev.multiply_plain(c, encode(w))

    def polynomial_products(self, n: int) -> dict:
        """The chooser's operations for ``n`` products by a public polynomial: encoded once each, then
        as cheap as a constant's."""
        return {"encode": n, "product": n}

    def why_coefficients_overflow(self, model, bound: Callable) -> str | None:
        """Why the coefficient layout's product would overflow (``bound(model)``: its largest |coefficient|),
        or None: it must stay within what the first prime leaves above the scale."""
        room = 2.0 ** (self.params.qi_sizes[0] - self.params.scale_bits - 1)
        if bound(model) >= room:
            return (f"coefficients up to {bound(model):.3g} exceed the {room:g} that {self.params.name}'s "
                    "first prime leaves")
        return None

    def ckks_only(self, why: str) -> str | None:
        """The refusal ``why`` of a layout that needs CKKS: None, these parameters are CKKS."""
        return None

    def finished(self, scores, binary: bool):
        """Decrypted head outputs as the model gives them: the sigmoid line ran under encryption."""
        return scores

    def serves(self, op, model, *, pack: bool = False) -> bool:
        """Whether these parameters run ``op``'s model (``pack``: on block-packed batches): its depth,
        and rotation keys for the TinyCNN and for packing."""
        p = self.params
        if pack and not p.supports_keyswitching:
            return False
        return p.depth >= op.depth and (op.model == "logreg" or p.supports_keyswitching)

    def need(self, op) -> str:
        """What ``op`` needs that these parameters lack, when :meth:`serves` says no."""
        return f"{op.depth} level(s), {self.params.name} has {self.params.depth}"


class IntegerArithmetic(_Arithmetic):
    """BFV/BGV: the quantised model on exact integers modulo ``t``, no scales and no levels."""

    def weight(self, w) -> int:
        return int(w)

    def prepared(self, model, quantised: Quantised | None = None) -> Quantised:
        """The quantised model these parameters run: ``quantised``, or ``model`` quantised for ``t``."""
        return quantised or quantise(model, self.params.plain_modulus)

    def layers(self, model, quantised: Quantised | None = None) -> tuple:
        """(weights, bias) of each linear layer: the quantised model's integers."""
        return self.prepared(model, quantised).layers

    def product_scale(self, ev, c) -> None:
        return None

    def bias_scale(self, ev, acc) -> None:
        return None

    def spare_levels(self, ev, c, need: int) -> int:
        return 0

    def check_depth(self, ev, c, need: int, model_name: str) -> None:
        """Nothing to check: products spend noise budget, not levels."""

    def multiply(self, ev, c, w, encode: Callable):
        """``c`` times the weight ``w`` (``encode(v)``: the plaintext of the constant ``v``)."""
        if w < 0:
            # -|w| encodes as t - |w|, a ~t-sized constant that costs ~log2(t) bits of noise budget;
            # |w| and a negation cost log2|w|
            return ev.negate(ev.multiply_plain(c, encode(-w)))
        return ev.multiply_plain(c, encode(w))

    def polynomial_products(self, n: int) -> dict:
        """The chooser's operations for ``n`` products by a public polynomial: no encoding cost, each
        product transforms both ciphertext parts."""
        return {"encode": 0, "poly_product": n}

    def why_coefficients_overflow(self, model, bound: Callable) -> str | None:
        """Why the coefficient layout's product would overflow, or None: the model must quantise for ``t``
        (every partial sum is bounded like the score)."""
        try:
            quantise(model, self.params.plain_modulus)
        except InvalidParameters as e:
            return str(e)
        return None

    def ckks_only(self, why: str) -> str | None:
        """The refusal ``why`` of a layout that needs CKKS: ``why``, these parameters are not CKKS."""
        return why

    def finished(self, scores, binary: bool):
        """Decrypted head outputs (divided back already) as the model gives them: binary scores through
        the sigmoid line, which integers cannot compute under encryption."""
        return sigmoid_poly(scores) if binary else scores

    def serves(self, op, model, *, pack: bool = False) -> bool:
        """Whether these parameters run ``op``'s model (``pack``: never, packing is CKKS's): ``t`` must
        hold the quantised model, and the TinyCNN needs relinearisation keys."""
        p = self.params
        if pack:
            return False
        try:
            quantise(model, p.plain_modulus)
        except InvalidParameters:
            return False
        return p.supports_keyswitching or op.model == "logreg"

    def need(self, op) -> str:
        """What ``op`` needs that these parameters lack, when :meth:`serves` says no."""
        return (f"a plaintext modulus the quantised model fits, t of {self.params.plain_modulus_bits} bits "
                "is too small")


def arithmetic(params) -> CkksArithmetic | IntegerArithmetic:
    """The arithmetic of ``params``: exact integers for BFV/BGV, approximate reals for CKKS."""
    return IntegerArithmetic(params) if params.is_integer else CkksArithmetic(params)
