"""Pixel operations that TFHE evaluates exactly, each with its plaintext reference.

CKKS adds approximately and BFV/BGV cannot compare, so neither can clip, threshold or look up a
table on encrypted pixels; TFHE evaluates any function of an 8-bit pixel exactly (Saker et al.
2025, "Comparative analysis of homomorphic encryption schemes for encrypted image processing in
OpenStack using TenSEAL", suggest it for encrypted thresholding and binary masking).

========================  ==========================================  =======================
spec                      result on a pixel value ``x`` (uint8)       native op
========================  ==========================================  =======================
``brightness:B``          ``min(255, max(0, x + B))``, B in -255..255  add-sat
``brightness-wrap:B``     ``(x + B) mod 256`` (no clipping: what       add-wrap
                          CKKS/BFV brightness computes before the
                          owner clips, for comparing like with like)
``threshold:T``           ``255 if x >= T else 0`` (a binary mask      ge-mask
                          that is itself an image), T in 0..255
``min:C`` / ``max:C``     ``min(x, C)`` / ``max(x, C)``, C in 0..255   min / max
``lut:NAME``              ``table[x]`` for a named table (below)       table
========================  ==========================================  =======================

Named tables (``lut:NAME``): ``gamma-G`` (``round(255 (x/255)^G)``, 0.1 <= G <= 10),
``stretch-LO-HI`` (the contrast stretch of LO..HI onto 0..255, clipped: ``round(255 (x - LO) /
(HI - LO))``), ``invert`` (``255 - x``), and any 8-bit function as ``hex-`` followed by its 256
values in hex (512 digits; :meth:`Lut.from_table` writes it).  Every op's :meth:`reference` is the
exact result the decrypted ciphertexts must equal; every op also has a :meth:`table`, so any of
them can be evaluated through the generic table circuit, and a chain is one 8-bit function
(:func:`chain_table`): :func:`fuse` runs a chain as one cheaper op when its function is one
(``brightness:60 | threshold:200`` is ``threshold:140``: 3 bootstraps per block set instead of 12).

Parsing: :func:`hecore.ops.spec.parse_chain` with ``scheme="tfhe"`` is the entry point the jobs use
(one parser for every op); :func:`parse_op` here is the TFHE vocabulary it calls.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import ClassVar, Union

import numpy as np

from hecore.spectext import check_ascii_digits, op_name

_FORMS = "brightness:B, brightness-wrap:B, threshold:T, min:C, max:C, lut:NAME"


def _as_pixels(values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != np.uint8:
        raise ValueError(f"pixel values must be uint8, got dtype {arr.dtype}")
    return arr


def _check_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
    return int(value)


class _Op:
    """Shared behaviour: the reference is the table applied to the pixels."""

    native_op: ClassVar[str]

    def table(self) -> np.ndarray:  # pragma: no cover - every op overrides it
        raise NotImplementedError

    @property
    def constant(self) -> int:
        return 0

    @property
    def native_table(self) -> bytes | None:
        return None

    def reference(self, pixels) -> np.ndarray:
        """The exact result on plaintext uint8 pixels (any shape)."""
        return self.table()[_as_pixels(pixels)]


@dataclass(frozen=True)
class Brightness(_Op):
    """Brightness with saturation: ``min(255, max(0, x + b))`` (Saker et al. 2025 use +60)."""

    b: int
    native_op: ClassVar[str] = "add-sat"

    def __post_init__(self):
        object.__setattr__(self, "b", _check_int("brightness offset B", self.b, -255, 255))

    @property
    def spec(self) -> str:
        return f"brightness:{self.b}"

    @property
    def constant(self) -> int:
        return self.b

    def table(self) -> np.ndarray:
        return np.clip(np.arange(256) + self.b, 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class BrightnessWrap(_Op):
    """Brightness without clipping: ``(x + b) mod 256``."""

    b: int
    native_op: ClassVar[str] = "add-wrap"

    def __post_init__(self):
        object.__setattr__(self, "b", _check_int("brightness offset B", self.b, -255, 255))

    @property
    def spec(self) -> str:
        return f"brightness-wrap:{self.b}"

    @property
    def constant(self) -> int:
        return self.b % 256

    def table(self) -> np.ndarray:
        return ((np.arange(256) + self.b) % 256).astype(np.uint8)


@dataclass(frozen=True)
class Threshold(_Op):
    """A binary mask: ``255 if x >= t else 0``."""

    t: int
    native_op: ClassVar[str] = "ge-mask"

    def __post_init__(self):
        object.__setattr__(self, "t", _check_int("threshold T", self.t, 0, 255))

    @property
    def spec(self) -> str:
        return f"threshold:{self.t}"

    @property
    def constant(self) -> int:
        return self.t

    def table(self) -> np.ndarray:
        return np.where(np.arange(256) >= self.t, 255, 0).astype(np.uint8)


@dataclass(frozen=True)
class Min(_Op):
    """``min(x, c)``: clip from above."""

    c: int
    native_op: ClassVar[str] = "min"

    def __post_init__(self):
        object.__setattr__(self, "c", _check_int("constant C", self.c, 0, 255))

    @property
    def spec(self) -> str:
        return f"min:{self.c}"

    @property
    def constant(self) -> int:
        return self.c

    def table(self) -> np.ndarray:
        return np.minimum(np.arange(256), self.c).astype(np.uint8)


@dataclass(frozen=True)
class Max(_Op):
    """``max(x, c)``: clip from below."""

    c: int
    native_op: ClassVar[str] = "max"

    def __post_init__(self):
        object.__setattr__(self, "c", _check_int("constant C", self.c, 0, 255))

    @property
    def spec(self) -> str:
        return f"max:{self.c}"

    @property
    def constant(self) -> int:
        return self.c

    def table(self) -> np.ndarray:
        return np.maximum(np.arange(256), self.c).astype(np.uint8)


_GAMMA = re.compile(r"gamma-(\d+(?:\.\d+)?)")
_HEX = re.compile(r"hex-([0-9a-fA-F]*)")
_STRETCH = re.compile(r"stretch-(\d{1,3})-(\d{1,3})")
_LUT_FORMS = "gamma-G (0.1 <= G <= 10), stretch-LO-HI (0 <= LO < HI <= 255), invert, hex-<512 hex digits>"


def named_table(name: str) -> np.ndarray:
    """The 256-entry table of a named LUT (see the module doc)."""
    x = np.arange(256, dtype=np.float64)
    if name == "invert":
        return (255 - np.arange(256)).astype(np.uint8)
    m = _HEX.fullmatch(name)
    if m:
        if len(m.group(1)) != 512:
            raise ValueError(f"lut:hex-...: an 8-bit function is 256 values, 512 hex digits; got {len(m.group(1))}")
        return np.frombuffer(bytes.fromhex(m.group(1)), dtype=np.uint8).copy()
    m = _GAMMA.fullmatch(name)
    if m:
        g = float(m.group(1))
        if not 0.1 <= g <= 10:
            raise ValueError(f"lut:{name}: the gamma G must lie in 0.1..10, got {g}")
        return np.round(255.0 * (x / 255.0) ** g).astype(np.uint8)
    m = _STRETCH.fullmatch(name)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if not 0 <= lo < hi <= 255:
            raise ValueError(f"lut:{name}: the stretch needs 0 <= LO < HI <= 255, got {lo}..{hi}")
        return np.clip(np.round(255.0 * (x - lo) / (hi - lo)), 0, 255).astype(np.uint8)
    raise ValueError(f"unknown lookup table {name!r}; expected one of {_LUT_FORMS}")


@dataclass(frozen=True)
class Lut(_Op):
    """``table[x]`` for a named 8-bit function (gamma, contrast stretch, invert, or any as hex)."""

    name: str
    native_op: ClassVar[str] = "table"

    def __post_init__(self):
        named_table(self.name)  # validates the name

    @classmethod
    def from_table(cls, table) -> Lut:
        """The op of any 8-bit function: ``table`` holds its 256 values (uint8, or integers in 0..255)."""
        arr = np.asarray(table)
        if arr.shape != (256,) or not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() > 255:
            raise ValueError(f"an 8-bit function is 256 integers in 0..255; got shape {arr.shape}, dtype {arr.dtype}")
        return cls("hex-" + arr.astype(np.uint8).tobytes().hex())

    @property
    def spec(self) -> str:
        return f"lut:{self.name}"

    def table(self) -> np.ndarray:
        return named_table(self.name)

    @property
    def native_table(self) -> bytes:
        return self.table().tobytes()


TfheOp = Union[Brightness, BrightnessWrap, Threshold, Min, Max, Lut]

_INT = r"([+-]?\d+)"
_PATTERNS = {
    "brightness": (re.compile(_INT), Brightness),
    "brightness-wrap": (re.compile(_INT), BrightnessWrap),
    "threshold": (re.compile(r"(\d+)"), Threshold),
    "min": (re.compile(r"(\d+)"), Min),
    "max": (re.compile(r"(\d+)"), Max),
}


#: The CKKS/BFV/BGV ops (:mod:`hecore.ops.spec`) that hepix's TFHE does not run, with why.
NOT_IN_TFHE = {
    "contrast": "not a TFHE op here (a contrast is an 8-bit function of one pixel: write it as a table, "
                "lut:hex-..., with hecore.tfhe.ops.Lut.from_table)",
    "watermark": "not implemented for TFHE (its ops apply one function to every pixel)",
    "meanfilter": "not implemented for TFHE (its ops are functions of one pixel; a filter sums neighbours)",
    "conv": "not implemented for TFHE (its ops are functions of one pixel; a convolution sums neighbours)",
    "downsample": "not implemented for TFHE (its ops are functions of one pixel; a downsample sums blocks)",
    "grey": "not implemented for TFHE (its ops are functions of one pixel value; grey sums a pixel's channels)",
    "dftfilter": "a CKKS frequency-domain filter (complex slots, packed layout)",
    "match": "matching is CKKS/BFV/BGV (squared or absolute differences summed over slots)",
    "infer": "inference is CKKS/BFV (plaintext weights times packed ciphertexts)",
}


#: The ops only TFHE's vocabulary has (``brightness`` is CKKS/BFV/BGV's too, without the saturation).
OWN_OPS = (frozenset(_PATTERNS) | {"lut"}) - {"brightness"}


def parse_chain(specs) -> tuple:
    """The TFHE ops of a chain of specs, or a ValueError naming an op TFHE does not run or a malformed one."""
    specs = list(specs)
    if not specs:
        raise ValueError("no operation given: expected TFHE ops such as brightness:60, threshold:128, min:C, "
                         "max:C, brightness-wrap:B or lut:NAME")
    for spec in specs:
        name = op_name(spec)
        if name in NOT_IN_TFHE:
            raise ValueError(f"{spec.strip()} cannot run on TFHE keys: {NOT_IN_TFHE[name]}; use CKKS/BFV/BGV keys "
                             "for it (`hepix plan --op ...` says which)")
    return tuple(parse_op(s) for s in specs)


def parse_op(spec: str) -> TfheOp:
    """The TFHE operation of a spec such as ``brightness:60`` or ``lut:gamma-0.5``."""
    if not isinstance(spec, str):
        raise ValueError(f"operation spec must be a string like {_FORMS}, got {spec!r}")
    check_ascii_digits(spec)
    name, sep, arg = spec.strip().partition(":")
    name, arg = name.strip().lower(), arg.strip()
    if not sep or not arg:
        raise ValueError(f"bad TFHE operation spec {spec!r}: expected one of {_FORMS}")
    if name == "lut":
        return Lut(arg)
    if name not in _PATTERNS:
        raise ValueError(f"unknown TFHE operation {spec!r}: expected one of {_FORMS}")
    pattern, cls = _PATTERNS[name]
    if not pattern.fullmatch(arg):
        raise ValueError(f"bad TFHE operation spec {spec!r}: the argument must be an integer")
    try:
        return cls(int(arg))
    except ValueError as e:
        raise ValueError(f"bad TFHE operation spec {spec!r}: {e}") from None


def reference_chain(pixels, ops) -> np.ndarray:
    """The exact result of applying ``ops`` in order to plaintext uint8 pixels."""
    out = _as_pixels(pixels)
    for op in ops:
        out = op.reference(out)
    return out


def chain_table(ops) -> np.ndarray:
    """The 256-entry table of a chain: its result on every 8-bit input."""
    return reference_chain(np.arange(256, dtype=np.uint8), ops)


#: Programmable bootstraps per pixel of each op's nibble circuit (native/tfhe/README.md): what a
#: chain costs; a table's is an upper bound (parts of a table that are constant cost less).
BOOTSTRAPS = {"add-wrap": 5, "add-sat": 9, "ge-mask": 3, "min": 7, "max": 7, "table": 164}


def bootstraps(ops) -> int:
    """The bootstraps per pixel a chain costs with the nibble circuits (tables: their upper bound)."""
    return sum(BOOTSTRAPS[op.native_op] for op in ops)


@functools.lru_cache(maxsize=1)
def _cheap_ops() -> tuple[list, np.ndarray]:
    """Every op with a closed-form circuit, and their tables (one row each)."""
    ops = ([Threshold(t) for t in range(256)] + [Min(c) for c in range(256)] + [Max(c) for c in range(256)]
           + [BrightnessWrap(b) for b in range(256)] + [Brightness(b) for b in range(-255, 256)])
    return ops, np.stack([op.table() for op in ops])


def fuse(ops) -> list:
    """``ops`` as one op with a closed-form circuit when the chain's 8-bit function is one such op
    and that costs fewer bootstraps (:data:`BOOTSTRAPS`); else ``ops`` unchanged.  The result is the
    same function, so it decrypts to the same values."""
    ops = list(ops)
    if len(ops) < 2:
        return ops
    candidates, tables = _cheap_ops()
    same = np.flatnonzero((tables == chain_table(ops)).all(axis=1))
    if not same.size:
        return ops
    best = min((candidates[i] for i in same), key=lambda op: BOOTSTRAPS[op.native_op])
    return [best] if BOOTSTRAPS[best.native_op] < bootstraps(ops) else ops

