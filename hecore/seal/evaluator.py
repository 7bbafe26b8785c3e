"""Homomorphic arithmetic on loaded ciphertexts: the packed layout's toolbox.

An :class:`Evaluator` wraps the Pyfhel object of an :class:`~hecore.seal.context.HEContext`
(public material and evaluation keys are enough; nothing here decrypts) and
offers the handful of operations the image operations are built from:
addition, subtraction, adding a plaintext vector, rotation, squaring, window
sums over slots, and -- CKKS only -- a free multiplication by a public
scalar through the ciphertext's scale.

Conventions
-----------
* Ciphertexts are Pyfhel ``PyCtxt`` objects here; :meth:`Evaluator.load` and
  :meth:`Evaluator.dump` convert from and to the uncompressed bytes stored in
  the tables.  Every method returns a new ciphertext and leaves its inputs alone.
* ``rotate(c, s)`` moves slot ``i + s`` to slot ``i`` (a left rotation for
  ``s > 0``), cyclically over the ``N/2`` slots (for BFV/BGV: over each of
  the two rows of ``N/2``; hepix uses the first row only).
* CKKS values are real, or complex for complex packing (:meth:`add_values`
  takes complex vectors); BFV/BGV values are integers mod ``t``, and
  :meth:`add_values` refuses values that are not whole numbers.

The scale trick (CKKS)
----------------------
A CKKS ciphertext decrypts to ``m / scale``, and ``scale`` is public metadata
that travels with it.  Multiplying ``scale`` by ``f`` divides the value by
``f`` at no cost and without consuming a level -- exactly, up to the
double-precision of the scale.  :meth:`scale_value` uses it; the price is
that two ciphertexts can only be added when their scales agree, so it is
applied to whole sums, never to one term of a sum.
"""
from __future__ import annotations

import math

import numpy as np
from Pyfhel import PyCtxt

from ..errors import HepixError, InvalidParameters
from .context import HEContext, integer_slots

__all__ = ["Evaluator", "CkksEvaluator", "IntegerEvaluator", "MissingEvaluationKeys"]


class MissingEvaluationKeys(HepixError):
    """An operation needs relinearisation or rotation keys the key directory does not have."""


class Evaluator:
    """Homomorphic operations in the context ``ctx`` (public material suffices).

    ``Evaluator(ctx)`` is the evaluator of the context's scheme: :class:`CkksEvaluator` (approximate values
    at a scale, a level spent by every product) or :class:`IntegerEvaluator` (BFV, BGV: integers mod ``t``,
    noise spent instead of levels).  What they share is here; what differs, there."""

    def __new__(cls, ctx: HEContext):
        if cls is Evaluator:
            cls = IntegerEvaluator if ctx.params.is_integer else CkksEvaluator
        return super().__new__(cls)

    def __init__(self, ctx: HEContext):
        self.ctx = ctx
        self.params = ctx.params
        self._he = ctx._he          # the one other module allowed to touch Pyfhel (see context.py)
        self.slots = self.params.slots

    # --- conversion -----------------------------------------------------------------------
    def load(self, ct: bytes | memoryview) -> PyCtxt:
        return self.ctx.load_ciphertext(ct)

    def dump(self, c: PyCtxt) -> bytes:
        return c.to_bytes(compr_mode="none")

    def dump_like(self, c: PyCtxt, original) -> bytes:
        """``c`` serialized as ``original`` (the stored ciphertext it was computed from) was: SEAL bytes in the
        original's compression mode, or for a compact original lossless compact bytes
        (:func:`hecore.seal.atrest.stored_like`)."""
        from .atrest import stored_like

        return stored_like(self.dump(c), original, self.ctx.public)

    @staticmethod
    def level(c: PyCtxt) -> int:
        """How many primes the ciphertext has dropped (0 when fresh)."""
        return int(c.mod_level)

    @staticmethod
    def scale(c: PyCtxt) -> float:
        return float(c.scale)

    # --- linear operations ------------------------------------------------------------------
    def add(self, a: PyCtxt, b: PyCtxt) -> PyCtxt:
        self._check_aligned(a, b, "add")
        return self._he.add(a, b, in_new_ctxt=True)

    def sub(self, a: PyCtxt, b: PyCtxt) -> PyCtxt:
        """``a - b``.  When ``b`` is ``a`` itself (or byte-identical to it, as equal pixels of a
        deterministic strategy are) the result is an exact zero, which SEAL refuses to hold
        ("result ciphertext is transparent"); a fresh encryption of 0 stands in for it."""
        self._check_aligned(a, b, "subtract")
        try:
            return self._he.sub(a, b, in_new_ctxt=True)
        except RuntimeError as e:
            if "transparent" not in str(e):
                raise
            return self._zero_like(a)

    def negate(self, c: PyCtxt) -> PyCtxt:
        return self._he.negate(c, in_new_ctxt=True)

    def add_many(self, cts) -> PyCtxt:
        """The sum of a non-empty iterable of aligned ciphertexts."""
        it = iter(cts)
        try:
            acc = self._copy(next(it))
        except StopIteration:
            raise ValueError("add_many needs at least one ciphertext") from None
        for c in it:
            self._check_aligned(acc, c, "add")
            self._he.add(acc, c)
        return acc

    def add_values(self, c: PyCtxt, values) -> PyCtxt:
        """``c`` plus a plaintext: a scalar (every slot) or a vector of up to N/2 slots (the rest 0);
        complex values (CKKS only) add to the real and imaginary parts apart."""
        arr = np.asarray(values)
        arr = arr.astype(np.complex128 if np.iscomplexobj(arr) else np.float64)
        if arr.ndim == 0:
            arr = np.full(self.slots, arr[()])
        if arr.size > self.slots:
            raise ValueError(f"{arr.size} values do not fit {self.slots} slots")
        ptxt = self._encode_like(c, arr)
        return self._he.add_plain(c, ptxt, in_new_ctxt=True)

    def rotate(self, c: PyCtxt, steps: int) -> PyCtxt:
        """Slot ``i`` of the result is slot ``i + steps`` of ``c`` (cyclic)."""
        steps = int(steps) % self.slots
        if steps == 0:
            return self._copy(c)
        if steps > self.slots // 2:
            steps -= self.slots            # the shorter way round: fewer key switches
        return self._rotate_by(c, steps)

    def _rotate_by(self, c: PyCtxt, steps: int) -> PyCtxt:
        """One rotation by ``steps`` (non-zero, ``-slots/2 <= steps <= slots/2``): the step every rotation
        comes down to, and what :mod:`hecore.seal.steps` records."""
        self._need_rotation_keys(steps)
        return self._he.rotate(c, steps, in_new_ctxt=True)

    def window_sum(self, c: PyCtxt, length: int, stride: int = 1) -> PyCtxt:
        """Slot ``i`` of the result is ``sum_{j < length} c[i + j * stride]`` (cyclic).

        Uses about ``2 log2(length)`` rotations (doubling windows, combined
        along the binary digits of ``length``); ``length - 1`` when that is fewer.
        """
        if length < 1:
            raise ValueError(f"window length must be >= 1, got {length}")
        if length - 1 <= 2 * max(1, (length - 1).bit_length()):
            return self.add_many([c] + [self.rotate(c, j * stride) for j in range(1, length)])
        result = None
        offset = 0
        cur, cur_len = c, 1
        rest = length
        while rest:
            if rest & 1:
                part = self.rotate(cur, offset * stride) if offset else cur
                result = part if result is None else self.add(result, part)
                offset += cur_len
            rest >>= 1
            if rest:
                cur = self.add(cur, self.rotate(cur, cur_len * stride))
                cur_len *= 2
        return result

    # --- multiplication -------------------------------------------------------------------------
    def square(self, c: PyCtxt) -> PyCtxt:
        """``c * c``, relinearised, and for CKKS rescaled (one level spent)."""
        self._need_relin_key()
        self._spend_level(c, "a squaring")       # before SEAL fails with "scale out of bounds"
        out = self._he.square(c, in_new_ctxt=True)
        self._he.relinearize(out)
        return self._rescaled(out)

    def multiply(self, a: PyCtxt, b: PyCtxt, *, any_scales: bool = False) -> PyCtxt:
        """``a * b``, relinearised, and for CKKS rescaled (one level spent).

        With ``any_scales`` (CKKS) the operands need only share a level: the product's scale is the
        product of theirs (over the prime), which is correct whatever they are; only sums need equal
        scales.  Without it, differing scales are refused as a likely mistake."""
        self._check_factors(a, b, any_scales)
        self._need_relin_key()
        self._spend_level(a, "a multiplication")
        out = self._he.multiply(a, b, in_new_ctxt=True)
        self._he.relinearize(out)
        return self._rescaled(out)

    def scale_value(self, c: PyCtxt, factor: float) -> PyCtxt:
        """CKKS: ``c`` with its value multiplied by ``factor`` through its scale (:meth:`CkksEvaluator.scale_value`)."""
        raise ValueError(f"{self.params.scheme.upper()} has no scale to fold a factor into")

    # --- plaintext products (linear transforms, inference) -------------------------------------
    def level_prime(self, c: PyCtxt) -> int:
        """CKKS: the prime the next rescale of ``c`` divides by (the last one of its chain).

        A plaintext encoded at exactly this scale leaves ``c``'s scale unchanged after the
        product's rescale, so sums of such products never disagree in scale."""
        primes = self.ctx.primes[: self.params.data_primes]
        return int(primes[self.params.data_primes - 1 - self.level(c)])

    def encode(self, values, *, level: int = 0, scale: float | None = None):
        """A plaintext of ``values`` (real or complex; a scalar fills every slot) at ``level``.

        CKKS: at ``scale`` (default the context's); BFV/BGV: integers, ``scale`` ignored.  A
        scalar broadcast to every slot encodes to a constant polynomial, so for BFV/BGV its
        product adds noise in proportion to the scalar only.
        """
        arr = np.asarray(values)
        if arr.ndim == 0:
            arr = np.full(self._constant_size, arr.item())
        elif arr.size > self.slots:
            raise ValueError(f"{arr.size} values do not fit {self.slots} slots")
        ptxt = self._encode_array(arr, scale)
        for _ in range(level - int(ptxt.mod_level)):
            self._he.mod_switch_to_next(ptxt)
        return ptxt

    def multiply_plain(self, c: PyCtxt, ptxt) -> PyCtxt:
        """``c`` times an encoded plaintext (at ``c``'s level), *not* rescaled: sum such
        products first, then :meth:`rescale` once.  (Pyfhel counts the level as spent here,
        at the product, not at the rescale.)"""
        self._spend_level(c, "a plaintext product")
        return self._he.multiply_plain(c, ptxt, in_new_ctxt=True)

    def rescale(self, c: PyCtxt) -> PyCtxt:
        """CKKS: divide by the last prime of ``c``'s chain (the level its product spent); BFV/BGV: ``c``."""
        return c

    def add_into(self, acc: PyCtxt | None, c: PyCtxt) -> PyCtxt:
        """``acc + c`` in place (``c`` itself, copied, when ``acc`` is None): for long sums."""
        if acc is None:
            return self._copy(c)
        self._check_aligned(acc, c, "add")
        self._he.add(acc, c)
        return acc

    def add_plain(self, c: PyCtxt, ptxt) -> PyCtxt:
        return self._he.add_plain(c, ptxt, in_new_ctxt=True)

    def mod_switch(self, c: PyCtxt, levels: int = 1) -> PyCtxt:
        """``c`` moved ``levels`` primes down without changing its value (or, CKKS, its scale)."""
        out = self._copy(c)
        for _ in range(levels):
            self._he.mod_switch_to_next(out)
        return out

    def square_raw(self, c: PyCtxt, relinearize: bool = True) -> PyCtxt:
        """``c * c``, not rescaled (CKKS: the caller rescales); without ``relinearize`` a
        three-part ciphertext, to be summed with others and relinearised once (:meth:`relinearize`)."""
        self._need_relin_key()
        self._spend_level(c, "a squaring")
        out = self._he.square(c, in_new_ctxt=True)
        if relinearize:
            self._he.relinearize(out)
        return out

    def relinearize(self, c: PyCtxt) -> PyCtxt:
        self._need_relin_key()
        out = self._copy(c)
        self._he.relinearize(out)
        return out

    # --- BFV products for polynomial evaluation (hecore.ops.lut) ---------------------------------
    def multiply_raw(self, a: PyCtxt, b: PyCtxt, *, relinearize: bool = True) -> PyCtxt:
        """BFV/BGV: ``a * b`` at the lower of their levels, not rescaled; without ``relinearize`` a
        three-part ciphertext, to be summed with others and relinearised once."""
        self._need_relin_key()
        a, b = self.match_level(a, b), self.match_level(b, a)
        out = self._he.multiply(a, b, in_new_ctxt=True)
        if relinearize:
            self._he.relinearize(out)
        out.mod_level = a.mod_level     # Pyfhel counts a product as a level spent; BFV spends noise instead
        return out

    def multiply_scalar(self, c: PyCtxt, ptxt) -> PyCtxt:
        """BFV/BGV: ``c`` times an encoded plaintext (a constant: one pass over the coefficients), same level."""
        out = self._he.multiply_plain(c, ptxt, in_new_ctxt=True)
        out.mod_level = c.mod_level
        return out

    def relinearize_if_needed(self, c: PyCtxt) -> PyCtxt:
        """``c`` with two parts: relinearised when it has three, else itself."""
        return self.relinearize(c) if c.size() > 2 else c

    def match_level(self, c: PyCtxt, other: PyCtxt) -> PyCtxt:
        """``c`` switched down to ``other``'s level when it is above it, else itself (BFV: the value is kept)."""
        down = self.level(other) - self.level(c)
        return self.mod_switch(c, down) if down > 0 else c

    def constant_like(self, c: PyCtxt, value: int) -> PyCtxt:
        """BFV/BGV: a fresh public-key encryption of ``value`` in every slot, at ``c``'s level."""
        return self.add_plain(self._zero_like(c), self.encode(value))

    # --- helpers -----------------------------------------------------------------------------
    def _copy(self, c: PyCtxt) -> PyCtxt:
        return PyCtxt(copy_ctxt=c)

    def _zero_like(self, c: PyCtxt) -> PyCtxt:
        """A fresh (public-key) encryption of 0 in every slot, at the level and scale of ``c``."""
        z = self._encrypt_zeros(c)
        for _ in range(self.level(c) - self.level(z)):
            self._he.mod_switch_to_next(z)
        return z

    def _encode_like(self, c: PyCtxt, values: np.ndarray):
        """A plaintext of ``values`` at the level (and CKKS scale) of ``c``."""
        ptxt = self._encode_array(values, self._scale_of(c))
        for _ in range(self.level(c) - int(ptxt.mod_level)):
            self._he.mod_switch_to_next(ptxt)
        return ptxt

    def _check_aligned(self, a: PyCtxt, b: PyCtxt, what: str) -> None:
        if self.level(a) != self.level(b):
            raise ValueError(f"cannot {what} ciphertexts at levels {self.level(a)} and {self.level(b)}")

    def _check_factors(self, a: PyCtxt, b: PyCtxt, any_scales: bool) -> None:
        self._check_aligned(a, b, "multiply")

    # --- what the scheme decides (the subclasses) ----------------------------------------------------------
    #: How many slots a scalar fills when encoded (:meth:`encode`).
    _constant_size: int

    def _spend_level(self, c: PyCtxt, what: str) -> None:
        """Refuse a product ``c`` has no level for (CKKS); BFV/BGV spend noise, not levels."""

    def _rescaled(self, out: PyCtxt) -> PyCtxt:
        """A product after its rescale (CKKS), or as it is."""
        return out

    def _scale_of(self, c: PyCtxt):
        return None

    def _encode_array(self, values: np.ndarray, scale):        # pragma: no cover - both subclasses define it
        raise NotImplementedError

    def _encrypt_zeros(self, c: PyCtxt) -> PyCtxt:               # pragma: no cover
        raise NotImplementedError

    def _need_level(self, c: PyCtxt, what: str) -> None:
        if self.level(c) + 1 >= self.params.data_primes:
            raise HepixError(
                f"{what} needs a level the ciphertext does not have ({self.params.name} affords "
                f"{self.params.depth}); use a preset with more primes"
            )

    def _need_relin_key(self) -> None:
        if self.ctx.public.relin_key is None:
            raise MissingEvaluationKeys(
                f"this operation multiplies ciphertexts and needs the relinearisation key, which the key "
                f"directory of {self.params.name} does not hold (a single-prime preset has none)"
            )

    def _need_rotation_keys(self, steps: int) -> None:
        if self.ctx.public.rotate_key is None:
            raise MissingEvaluationKeys(
                f"this operation rotates slots and needs rotation (Galois) keys, which the key directory "
                f"of {self.params.name} does not hold; create keys with rotations (`hepix keygen` makes "
                "them unless --no-rotations is given) with a preset that allows key switching"
            )
        held = self.ctx.public.rotation_steps
        if held is not None and steps not in held:
            raise MissingEvaluationKeys(
                f"this operation rotates by {steps} slots, and these keys were exported with the rotation keys of "
                f"{len(held)} steps only (export-public --for-op another chain or other tiles): export them "
                "again for this chain and these tiles"
            )


class CkksEvaluator(Evaluator):
    """CKKS: approximate real (or complex) values at a scale; every product spends a level and is rescaled."""

    @property
    def _constant_size(self) -> int:
        return self.slots

    def scale_value(self, c: PyCtxt, factor: float) -> PyCtxt:
        """CKKS: ``c`` with its value multiplied by ``factor`` through its scale (free, no level).

        ``factor`` must be positive (negate separately).
        """
        factor = float(factor)
        if not factor > 0 or not np.isfinite(factor):
            raise ValueError(f"scale factor must be positive and finite, got {factor!r}")
        out = self._copy(c)
        out.scale = float(c.scale) / factor
        return out

    def rescale(self, c: PyCtxt) -> PyCtxt:
        out = self._copy(c)
        self._he.rescale_to_next(out)
        return out

    def _spend_level(self, c: PyCtxt, what: str) -> None:
        self._need_level(c, what)

    def _rescaled(self, out: PyCtxt) -> PyCtxt:
        self._he.rescale_to_next(out)
        return out

    def _scale_of(self, c: PyCtxt):
        return float(c.scale)

    def _check_aligned(self, a: PyCtxt, b: PyCtxt, what: str) -> None:
        super()._check_aligned(a, b, what)
        if not math.isclose(float(a.scale), float(b.scale), rel_tol=1e-12, abs_tol=0):
            raise ValueError(f"cannot {what} ciphertexts at scales {float(a.scale):.6g} and {float(b.scale):.6g}")

    def _check_factors(self, a: PyCtxt, b: PyCtxt, any_scales: bool) -> None:
        if not any_scales:
            return super()._check_factors(a, b, any_scales)
        if self.level(a) != self.level(b):
            raise ValueError(f"cannot multiply ciphertexts at levels {self.level(a)} and {self.level(b)}")

    def _encode_array(self, values: np.ndarray, scale):
        kw = {} if scale is None else {"scale": float(scale)}
        if np.iscomplexobj(values):
            return self._he.encodeComplex(np.ascontiguousarray(values, dtype=np.complex128), **kw)
        return self._he.encodeFrac(np.ascontiguousarray(values, dtype=np.float64), **kw)

    def _encrypt_zeros(self, c: PyCtxt) -> PyCtxt:
        return self._he.encryptFrac(np.zeros(self.slots), scale=float(c.scale))

    def exact_constant(self, raw: float, refusal: str) -> float:
        """A constant to add to the raw values: any real will do."""
        return raw


class IntegerEvaluator(Evaluator):
    """BFV and BGV: integers mod ``t`` in every slot, exact; products spend noise, not levels, and nothing is
    rescaled."""

    def __init__(self, ctx: HEContext):
        super().__init__(ctx)
        he = self._he
        self._encode_ints = he.encodeBGV if self.params.is_bgv else he.encodeInt
        self._encrypt_ints = he.encryptBGV if self.params.is_bgv else he.encryptInt

    @property
    def _constant_size(self) -> int:
        return self.params.n        # both rows of N/2 slots: the plaintext is the constant polynomial

    def mod_switch(self, c: PyCtxt, levels: int = 1) -> PyCtxt:
        out = self._copy(c)
        bfv = self.params.is_bfv
        for _ in range(levels):
            if bfv:
                # Pyfhel 3.5 skips BFV ciphertexts in mod_switch_to_next (SEAL switches them, keeping the
                # value and, while the noise is above the new modulus's rounding, the noise budget)
                out.scheme = "bgv"
                self._he.mod_switch_to_next(out)
                out.scheme = "bfv"
            else:
                self._he.mod_switch_to_next(out)
        out.mod_level = c.mod_level + levels        # Pyfhel counts BGV switches and BFV products its own way
        return out

    def _encode_array(self, values: np.ndarray, scale):
        if np.iscomplexobj(values):
            raise HepixError(f"complex slots need CKKS; {self.params.name} is {self.params.scheme.upper()}")
        return self._encode_ints(integer_slots(values, self.params))

    def _encrypt_zeros(self, c: PyCtxt) -> PyCtxt:
        return self._encrypt_ints(np.zeros(self.slots, dtype=np.int64))

    def exact_constant(self, raw: float, refusal: str) -> float:
        """A constant to add to the raw values: it must be an integer (else ``InvalidParameters(refusal)``)."""
        if not np.isfinite(raw) or raw != round(raw):
            raise InvalidParameters(refusal)
        return float(round(raw))
