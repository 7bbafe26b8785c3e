"""Image operations on encrypted pixels (iCHEETAH §4.4 and hepix's own): the op vocabulary.

This module is the one parser of command-line op specs (:func:`parse_chain`: the
registered image ops of :mod:`hecore.ops.base` -- brightness, contrast, watermark,
mean filter, convolutions, grey, downsample, DFT filter --, ``match:`` and
``infer:``), the plaintext reference (:func:`reference`) and what the key holder does
after decryption (:class:`Finish`).  Every operation exists twice: its class's
``apply_plain`` is the plaintext reference on a float image; its encrypted side is
the class's evaluation in each layout (:mod:`hecore.ops.pixel` for the pixel layout,
one CKKS ciphertext per pixel value per channel worked on as serialized bytes;
:mod:`hecore.ops.packed` for the packed layouts); matching (distances between
images) is :mod:`hecore.ops.matching`.

How the encrypted side works
----------------------------
Fresh SEAL CKKS ciphertexts are stored in NTT form, as ``2 x P x N`` words
(component 0 then component 1, each prime ``q_i`` after the other, see
:mod:`hecore.ciphertexts`).  A ciphertext decrypts to ``m(X) ~ Delta * encode(values)``
with ``Delta = 2^scale_bits``.  Two facts are all the operations need:

* the sum of two ciphertexts (word by word, mod ``q_i``) decrypts to the sum
  of their values;
* adding an integer ``c`` to every NTT word of component 0 (mod each ``q_i``)
  adds the constant polynomial ``c``, whose NTT is ``c`` at every point, so
  every slot of the decrypted value gains ``c / Delta``.

Both keep the header (scale, level, parms_id) unchanged, so the results are
ordinary ciphertexts that Pyfhel loads and decrypts.  No multiplication, no
rescaling, no relinearisation and no rotation is used: every operation here
has multiplicative depth 0 and works even on the single-prime ``addonly-2048``
preset.

Deferred plaintext scaling
--------------------------
A mean filter is a sum followed by a division by ``k^2``.  The division would
need a plaintext multiplication by ``1/k^2`` and a rescale (one level, and an
approximation: ``1/9`` is not representable at the scale).  Instead the
encrypted pipeline carries a public ``post_scale`` (a float, 1.0 to start
with): the true value of a ciphertext is ``decrypt(ct) x post_scale``.

* The mean filter only adds the ``k x k`` window (each input ciphertext with
  its multiplicity) and multiplies ``post_scale`` by ``1/k^2``.
* Adding a constant ``V`` to the true value adds ``V / post_scale`` to the raw
  (decrypted) value: :func:`constant_word` does that division.
* The key holder applies ``post_scale`` after decryption
  (:meth:`Finish.apply`).
* A contrast change ``F (x - 128) + 128`` is the same idea the other way
  round: the multiplication by the public factor ``F`` is a change of
  ``post_scale`` (x ``F``), and ``128 (1 - F)`` is an added constant.  A
  plaintext factor commutes with decryption, so nothing is lost by applying
  it there, and no level is spent (CKKS does the same with its own scale).

Why: the result is exact for every ``k`` (the raw values of integer pixels
stay integers, so after decryption they can be rounded to integers *before*
the division, which removes the CKKS error entirely, ties such as ``k = 2``
included); it costs no depth and no rescale; and ``post_scale`` depends only
on the public list of operations, so dividing by it reveals nothing the
server did not already know.  The raw values grow by ``k^2`` per filter,
which the modulus has ample room for (``addonly-2048``: |raw values| below
2^23 for ``Delta = 2^30`` and a 54-bit prime: q / 2 / Delta).

The clipping rule
-----------------
Encrypted values cannot be clipped to 0..255 between operations (that would
need a comparison).  So :func:`reference` applies the operations in float
with *no* clipping between them, and both sides round and clip exactly once,
at the end (:func:`hecore.quality.round_to_uint8`).  A pixel of 250 brightened
by +50 is 300 until the very end, where it becomes 255.

Borders and even windows
------------------------
The mean filter replicates the edge: window coordinates are clamped into the
image (``np.pad`` mode ``"edge"``), so a corner pixel of a 3x3 filter counts
itself four times.  The window of an odd ``k`` is centred (offsets
``-(k//2) .. k//2``); for an even ``k`` it cannot be, and it is defined as
offsets ``-(k//2) .. k//2 - 1`` (one more row/column above/left than
below/right).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from hecore.seal import params as seal_params
from hecore.spectext import check_ascii_digits, op_name
from hecore.tfhe.ops import NOT_IN_TFHE

from . import channels as _channels  # noqa: F401 -- registers grey
from . import dft as _dft  # noqa: F401 -- registers dftfilter
from . import downsample as _downsample  # noqa: F401 -- registers downsample
from .base import ImageOp, as_image, check_int, check_number, fmt_number, op_class, registered
from .pointwise import CONTRAST_RANGE, MID_GREY, Brightness, Contrast, Watermark
from .windows import KERNELS, MAX_MEAN_K, Convolution, MeanFilter, WindowOp, window_offsets

__all__ = [
    "Brightness", "Contrast", "Watermark", "MeanFilter", "Convolution", "WindowOp", "KERNELS", "MID_GREY",
    "CONTRAST_RANGE", "raw_range", "Op", "ImageOp", "parse_op", "parse_ops", "Chain", "parse_chain", "Match",
    "parse_match", "METRICS", "reference", "Finish", "finish_for", "window_offsets", "MAX_MEAN_K", "SEAL_SCHEMES",
    "TFHE_ONLY", "NOT_IN_TFHE", "op_name", "is_table_chain", "parse_table_chain", "check_ascii_digits",
    "check_int", "check_number", "as_image", "fmt_number", "run_kind", "ops_and_match",
]

#: An image op of this vocabulary: any registered :class:`hecore.ops.base.ImageOp`.
Op = ImageOp

#: :meth:`Finish.apply` snaps raw values to their grid only when its step is at least this.
_MIN_SNAP_STEP = Fraction(1, 256)


def _forms() -> str:
    return ", ".join(f"'{op_class(n).form.split(chr(39))[1]}'" for n in registered())


#: The schemes whose op vocabulary is this module's (Pyfhel/SEAL); TFHE's is :mod:`hecore.tfhe.ops`.
SEAL_SCHEMES = seal_params.SCHEMES

#: TFHE ops that CKKS, BFV and BGV cannot evaluate, with why (what the planner and the parser say).
TFHE_ONLY = {
    "threshold": "a comparison",
    "min": "a comparison (min with a constant)",
    "max": "a comparison (max with a constant)",
    "lut": "an arbitrary 8-bit function (a table lookup)",
    "brightness-wrap": "a reduction modulo 256 (a comparison)",
}

#: The specs that are a whole run on their own (what :func:`run_kind` says of them).
RUN_KINDS = ("match", "infer")


def run_kind(spec) -> str:
    """``match`` or ``infer`` for a spec that is a whole run on its own (``match:QUERY``, ``infer:MODEL``),
    else ``image``."""
    name = op_name(spec)
    return name if name in RUN_KINDS else "image"


def is_table_chain(specs) -> bool:
    """Whether a chain of specs holds an 8-bit table op (threshold, min, max, lut, brightness-wrap): then the
    whole chain is TFHE's vocabulary (``brightness:B`` saturating after every op), and on SEAL keys it runs
    as one table on packed BFV (:mod:`hecore.ops.lut`)."""
    return any(op_name(s) in TFHE_ONLY for s in specs)


def _tfhe_only(spec: str, name: str) -> ValueError:
    return ValueError(f"{spec.strip()} is {TFHE_ONLY[name]}, which CKKS and BGV cannot evaluate on encrypted "
                      "pixels; BFV runs it exactly on packed ciphertexts (`hepix keygen --preset lut-16384`) and "
                      "TFHE per value (`hepix keygen --scheme tfhe`)")


def parse_op(spec: str) -> Op:
    """The image op of a command-line spec, e.g. ``brightness:50``, ``meanfilter:3``, ``conv:sharpen``: the
    registered op class of its name (:mod:`hecore.ops.base`) parses the rest."""
    if not isinstance(spec, str):
        raise ValueError(f"operation spec must be a string like {_forms()}, got {spec!r}")
    check_ascii_digits(spec)
    name, sep, args = spec.strip().partition(":")
    name = name.strip().lower()
    if name in TFHE_ONLY:
        raise _tfhe_only(spec, name)
    cls = op_class(name)
    if cls is None:
        raise ValueError(f"unknown operation {spec!r}: expected {_forms()}")
    if not sep and cls.takes_args:
        raise ValueError(f"bad operation spec {spec!r}: expected {cls.form}")
    try:
        return cls.parse(args, spec)
    except ValueError as e:
        if str(e).startswith("bad "):
            raise
        raise ValueError(f"bad operation spec {spec!r}: {e}; expected {cls.form}") from None


def parse_ops(specs: Sequence[str]) -> list[Op]:
    """:func:`parse_op` on each spec, in order."""
    if isinstance(specs, str):
        raise ValueError(f"parse_ops takes a list of specs, got the single string {specs!r}")
    return [parse_op(s) for s in specs]


@dataclass(frozen=True)
class Chain:
    """What a list of ``--op`` specs asks for: image ops applied in order, or, alone in its run, a match
    (:class:`hecore.ops.matching.Match`: encrypted distances to a query image) or an inference
    (:class:`hecore.infer.models.InferOp`: a model on encrypted digits)."""

    ops: tuple = ()
    match: object = None
    infer: object = None
    scheme: str | None = None       # "tfhe": TFHE ops (hecore.tfhe.ops); None: this module's vocabulary

    @property
    def kind(self) -> str:
        """``image`` (ops on images), ``match`` or ``infer``."""
        return "match" if self.match is not None else "infer" if self.infer is not None else "image"

    @property
    def specs(self) -> list[str]:
        one = self.match or self.infer
        return [one.spec] if one is not None else [op.spec for op in self.ops]


_TABLE_FORMS = "brightness:B (saturating), brightness-wrap:B, threshold:T, min:C, max:C, lut:NAME"


def parse_table_chain(specs: Sequence[str]) -> list:
    """The ops of a chain holding an 8-bit table op, in TFHE's vocabulary (:func:`hecore.tfhe.ops.parse_op`),
    or a ValueError naming an op that is no function of one 8-bit pixel."""
    from hecore.tfhe.ops import parse_op as parse_tfhe_op

    for spec in specs:
        if op_name(spec) in NOT_IN_TFHE:
            raise ValueError(f"{spec.strip()} cannot join a chain of 8-bit table ops (threshold, min, max, lut): "
                             f"such a chain is one function of each pixel, made of {_TABLE_FORMS}; run "
                             f"{op_name(spec)} in a run of its own")
    return [parse_tfhe_op(s) for s in specs]


def parse_chain(specs: Sequence[str], *, scheme: str | None = None) -> Chain:
    """The one parser of a command line's ops: image ops (:func:`parse_op`), ``match:QUERY[,l1|,l2]`` or
    ``infer:MODEL[,task=01|all]``; the last two must be the only op of their run.

    ``scheme`` is the scheme of the keys the ops will run under (:func:`hecore.seal.keys.key_scheme`):
    ``"tfhe"`` parses TFHE's vocabulary (:func:`hecore.tfhe.ops.parse_op`: ``brightness:B`` saturating,
    ``brightness-wrap:B``, ``threshold:T``, ``min:C``, ``max:C``, ``lut:NAME``) into a chain with
    ``scheme="tfhe"``; ``None`` or a SEAL scheme parses this module's, and a TFHE-only op is refused
    saying why and which keys run it."""
    if isinstance(specs, str):
        raise ValueError(f"parse_chain takes a list of specs, got the single string {specs!r}")
    specs = list(specs)
    for spec in specs:
        check_ascii_digits(spec)
    if scheme is not None and not seal_params.names_scheme(scheme):
        from hecore.tfhe import params as tfhe_params
        from hecore.tfhe.ops import parse_chain as parse_tfhe_chain

        if not tfhe_params.names_scheme(scheme):
            raise ValueError(f"unknown scheme {scheme!r}; expected one of "
                             f"{', '.join(SEAL_SCHEMES + (tfhe_params.SCHEME,))}")
        return Chain(ops=parse_tfhe_chain(specs), scheme=scheme)
    if not specs:
        raise ValueError(f"no operation given: expected {_forms()}, or match:QUERY, or infer:MODEL")
    if is_table_chain(specs):                  # 8-bit functions folded into one table (hecore.ops.lut, BFV)
        return Chain(ops=tuple(parse_table_chain(specs)))
    kinds = [op_name(s) for s in specs]
    if "match" in kinds:
        if len(specs) != 1:
            raise ValueError("match:QUERY must be the only --op of its run: apply the other ops first, in their "
                             "own `hepix process` run, then match their output")
        return Chain(match=parse_match(specs[0]))
    if "infer" in kinds:
        if len(specs) != 1:
            raise ValueError("infer:MODEL is a whole run on its own; give it as the only --op")
        from hecore.infer.models import parse_infer

        return Chain(infer=parse_infer(specs[0].strip().partition(":")[2]))
    return Chain(ops=tuple(parse_ops(specs)))


def ops_and_match(specs: Sequence[str]) -> tuple[list, "Match | None"]:
    """The image ops of a chain and its match (the last spec, when it is ``match:``); a chain of 8-bit table
    ops parses as TFHE's vocabulary (one BFV table, :mod:`hecore.ops.lut`), without a match."""
    specs, match = list(specs), None
    if is_table_chain(specs):
        return parse_table_chain(specs), None
    if specs and run_kind(specs[-1]) == "match":
        match = parse_match(specs.pop())
    return parse_ops(specs), match


def raw_range(ops: Sequence[Op], lo: float = 0.0, hi: float = 255.0) -> tuple[float, float]:
    """Bounds of the *raw* (decrypted, before ``post_scale``) values after ``ops`` on pixels in [lo, hi].

    What the parameter checks and the distance normalisation need: the mean
    filter multiplies raw values by up to ``k^2`` (deferred division),
    constants shift them by ``value / post_scale``, a contrast changes only
    ``post_scale``.
    """
    ps = 1.0
    for op in ops:
        if not isinstance(op, ImageOp):
            raise TypeError(f"not an operation: {op!r}")
        lo, hi, ps = op.raw_step(lo, hi, ps)
    return lo, hi


def reference(img_uint8: np.ndarray, ops: Sequence[Op]) -> np.ndarray:
    """The plaintext result of ``ops`` applied in order, in float64, with no clipping between them.

    The encrypted path cannot clip, so neither does the reference: round and
    clip once at the end, with :func:`hecore.quality.round_to_uint8`, on both sides.

    The true results are rationals with small denominators (``k^2``, a
    contrast factor's); float arithmetic can land a tie such as 25.5 at
    25.4999999999, which would round the other way than the exact value the
    encrypted side computes.  The result is therefore rounded to 9 decimals,
    far below any pixel step and far above float noise.
    """
    img = as_image(img_uint8)
    for op in ops:
        img = op.apply_plain(img)
    return np.round(img, 9) if ops else img


# --- what the key holder does after decryption ------------------------------------------

@dataclass(frozen=True)
class Finish:
    """How raw decrypted values of an op chain become true values (the deferred scaling).

    ``post_scale`` is the product of the ops' ``post_scale_factor`` (exact).
    When the pipeline starts from integer pixels, every raw value lies on the
    grid ``offset + step x Z`` (constants shift it, the mean filter scales the
    offset by ``k^2``, a watermark refines the step); :meth:`apply` then snaps
    the raw values to that grid before scaling, which removes the CKKS error
    completely and makes rounding ties (``k = 2``) come out as in the
    reference.  The snap needs the CKKS error below ``step / 2``; it is used
    only when ``step >= 1/256`` (e.g. not for a brightness of 0.1, whose
    binary fraction has no useful grid).
    """

    post_scale: Fraction
    offset: Fraction
    step: Fraction

    @property
    def post_scale_float(self) -> float:
        return float(self.post_scale)

    @property
    def snaps(self) -> bool:
        return self.step >= _MIN_SNAP_STEP

    def apply(self, raw: np.ndarray) -> np.ndarray:
        raw = np.asarray(raw, dtype=np.float64)
        ps = self.post_scale
        if not self.snaps:
            return raw * ps.numerator / ps.denominator
        n = np.rint((raw - float(self.offset)) / float(self.step))
        a, g = self.offset * ps, self.step * ps      # value = a + g n = (A + G n) / den
        den = math.lcm(a.denominator, g.denominator)
        big_a, big_g = a.numerator * (den // a.denominator), g.numerator * (den // g.denominator)
        n_max = float(np.max(np.abs(n))) if n.size else 0.0
        if den < 2**53 and abs(big_a) + abs(big_g) * n_max < 2**53:
            # Every term is an integer below 2^53, so the only rounding is the final
            # (correctly rounded) division: x.5 comes out as exactly x.5.
            return (float(big_a) + float(big_g) * n) / float(den)
        return float(a) + float(g) * n


def finish_for(ops: Sequence[Op]) -> Finish:
    """The :class:`Finish` of a chain of ops applied to integer pixels."""
    ps, offset, step = Fraction(1), Fraction(0), Fraction(1)
    for op in ops:
        if not isinstance(op, ImageOp):
            raise TypeError(f"not an operation: {op!r}")
        grid = op.grid_step(ps, offset, step)
        if grid is None:
            # an op that leaves no grid to snap to (a frequency-domain filter): raw x post_scale, as decrypted
            return Finish(_post_scale(ops), Fraction(0), Fraction(0))
        ps, offset, step = grid
    return Finish(ps, offset % step, step)


def _post_scale(ops) -> Fraction:
    ps = Fraction(1)
    for op in ops:
        ps *= Fraction(op.post_scale_factor)
    return ps


METRICS = ("l2", "l1")


@dataclass(frozen=True)
class Match:
    """``match:QUERY[,METRIC...]``: distances from the image ``QUERY`` (its id or source name) to every other."""

    query: str
    metrics: tuple[str, ...] = METRICS

    @property
    def spec(self) -> str:
        return f"match:{self.query}" + ("" if self.metrics == METRICS else "," + ",".join(self.metrics))

    @property
    def depth(self) -> int:
        """Levels a CKKS chain must have: L2 one; L1 two multiplications, plus one level of
        room for the scale the free division by ``D`` adds (see the module doc)."""
        return 3 if "l1" in self.metrics else 1


_MATCH = re.compile(r"^match:([^,]+)((?:,\s*(?:l1|l2))*)\s*$", re.IGNORECASE)


def parse_match(spec: str) -> Match:
    """``match:QUERY``, ``match:QUERY,l2`` or ``match:QUERY,l1`` (default both)."""
    m = _MATCH.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"bad match spec {spec!r}: expected 'match:QUERY' or 'match:QUERY,l2' / ',l1', "
                         "QUERY being an image id or source name of the input")
    metrics = tuple(dict.fromkeys(x.strip().lower() for x in m.group(2).split(",") if x.strip())) or METRICS
    return Match(m.group(1).strip(), tuple(sorted(metrics, key=METRICS.index)))


# --- a run's recorded ops, whichever scheme ran them ----------------------------------------------------

def is_tfhe_preset(preset) -> bool:
    """Whether a run's or a row's ``preset`` names a TFHE parameter set (:mod:`hecore.tfhe.params`):
    its ops are then TFHE ops (``brightness:B`` saturates after every op) and its values exact bytes."""
    return isinstance(preset, str) and preset.startswith("tfhe-")


def _exact_bytes(specs: Sequence[str], preset) -> bool:
    """Whether a run's values are exact 8-bit results: TFHE's, or a table chain's on BFV."""
    return is_tfhe_preset(preset) or is_table_chain(specs)


def recorded_chain(specs: Sequence[str], preset) -> list:
    """The op objects of a run's recorded op specs, in the vocabulary of the scheme that ran them (TFHE's
    for a TFHE preset or a table chain)."""
    if _exact_bytes(specs, preset):
        from hecore.tfhe.ops import parse_op as parse_tfhe_op

        return [parse_tfhe_op(s) for s in specs]
    return parse_ops(list(specs))


def recorded_reference(img_uint8: np.ndarray, specs: Sequence[str], preset) -> np.ndarray:
    """The plaintext result (float64) of a run's recorded ops on an original image: :func:`reference`
    for CKKS/BFV/BGV (one clipping at the end, by the caller); for TFHE the exact 8-bit result, with
    the same saturation after every op that the encrypted circuits apply (and BFV's tables)."""
    if _exact_bytes(specs, preset):
        from hecore.tfhe.ops import reference_chain

        return reference_chain(np.asarray(img_uint8, dtype=np.uint8), recorded_chain(specs, preset)).astype(np.float64)
    return reference(img_uint8, parse_ops(list(specs)))


def op_chain_text(specs: Sequence[str], preset) -> list[str]:
    """A chain's ops as runs record them (each op's own spelling, ``brightness:20.0`` as ``brightness:20``);
    empty specs left out."""
    specs = [s for s in specs if s]
    if any(run_kind(s) == "infer" for s in specs):       # a model: its own spelling (infer:logreg,task=01)
        return [parse_chain(specs).infer.spec]
    if _exact_bytes(specs, preset):
        return [op.spec for op in recorded_chain(specs, preset)]
    ops, match = ops_and_match(specs)
    return [op.spec for op in ops] + ([match.spec] if match is not None else [])


def patch_local_chain(specs: Sequence[str], preset) -> bool:
    """Whether a run's recorded chain gives each place's result from a patch of the image around it, the
    patch's coordinates clamped at the image's edges: TFHE's and the tables' ops (one value at a time), and
    chains of shift-invariant image ops (no watermark, no downsample, no frequency-domain filter) with at most
    one window -- a second window would see the first's results replicated at the edges, not its inputs."""
    if _exact_bytes(specs, preset):
        return True
    ops = parse_ops([s for s in specs if run_kind(s) == "image"])
    return all(op.shift_invariant for op in ops) and sum(op.windowed for op in ops) <= 1


def recorded_reference_known(partial: np.ndarray, specs: Sequence[str], preset) -> np.ndarray:
    """:func:`recorded_reference` of an image known in part (float64, NaN where unknown): NaN wherever the
    result depends on an unknown value (the owner's spot checks, :mod:`hecore.integrity`).  TFHE's and the
    tables' ops keep every value's place: they map the known values alone."""
    partial = np.asarray(partial, dtype=np.float64)
    if _exact_bytes(specs, preset):
        from hecore.tfhe.ops import reference_chain

        known = np.isfinite(partial)
        out = np.full(partial.shape, np.nan)
        values = partial[known].astype(np.uint8).reshape(-1, 1)
        out[known] = reference_chain(values, recorded_chain(specs, preset)).reshape(-1)
        return out
    return reference(partial, parse_ops(list(specs)))


def recorded_shape(specs: Sequence[str], preset, height: int, width: int, channels: int) -> tuple[int, int, int]:
    """The size (height, width, channels) an image of ``height x width x channels`` has after a run's recorded
    ops (``grey``: one channel); unchanged for TFHE's and the tables' ops, which keep every value's place."""
    shape = (height, width, channels)
    if _exact_bytes(specs, preset):
        return shape
    for op in parse_ops([s for s in specs if run_kind(s) == "image"]):
        shape = op.out_shape(*shape)
    return shape


def recorded_stride(specs: Sequence[str], preset) -> int:
    """In how many slots and rows of a packed block a run's values sit (a downsample by ``F``: every ``F``-th;
    :func:`hecore.layouts.packed.decrypt_block`); 1 for every other chain."""
    if _exact_bytes(specs, preset):
        return 1
    return math.prod(op.packed_stride for op in parse_ops([s for s in specs if run_kind(s) == "image"]))


def recorded_tile(specs: Sequence[str], preset, tile, packed: bool) -> tuple[int, int]:
    """The tile size of a run's rows after its recorded ops (a packed downsample shrinks it)."""
    tile = tuple(int(v) for v in tile)
    if _exact_bytes(specs, preset):
        return tile
    for op in parse_ops([s for s in specs if run_kind(s) == "image"]):
        tile = op.out_tile(tile, packed)
    return tile


def recorded_finish(specs: Sequence[str], preset) -> Finish:
    """The :class:`Finish` of a run's recorded ops: TFHE values and BFV tables' are the exact bytes (no
    scaling, the integer grid), the SEAL schemes' otherwise that of :func:`finish_for`."""
    if _exact_bytes(specs, preset):
        recorded_chain(specs, preset)          # refuses an op TFHE did not run
        return Finish(Fraction(1), Fraction(0), Fraction(1))
    return finish_for(parse_ops(list(specs)))
