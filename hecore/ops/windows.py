"""The windowed image ops: each output value is an integer-weighted sum of its neighbours, divided by a
public divisor -- the mean filter (iCHEETAH §4.4.1) and any 3x3 or 5x5 integer convolution.

One rule for all of them.  The window of a ``k``-wide op covers offsets ``lo .. lo + k - 1`` on each axis
(``lo = -(k // 2)``: centred for an odd ``k``, one more row and column above and left than below and right
for the mean filter's even ``k``); weight ``w[i, j]`` multiplies the pixel at row offset ``lo + i`` and
column offset ``lo + j``, so the first weight multiplies the pixel above and to the left (a correlation, as
OpenCV's ``filter2D`` applies a kernel).  Coordinates outside the image are clamped to its edge
(``np.pad`` mode ``"edge"``).  The division by the divisor ``D`` is deferred to the key holder
(``post_scale / D``), so integer pixels give integer raw values and the result is exact after the one
rounding at the end, whatever the weights.

Encrypted: in the pixel layout a sum of whole ciphertexts with small integer multiplicities
(:func:`hecore.ops.pixel.window_tile`, after a shuffle that brings each tile its halo); in the packed layouts
slot rotations within the tile's block, which carries a halo of at least ``k // 2`` pixels
(:meth:`WindowOp.packed`: ``2 (k - 1)`` rotations, the weights applied by additions).  Depth 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from hecore.errors import InvalidParameters

from .base import ImageOp, as_image, check_int, register

__all__ = ["WindowOp", "BoxWindow", "MeanFilter", "Convolution", "KERNELS", "MAX_MEAN_K", "MAX_WEIGHT", "MAX_DIVISOR",
           "window_offsets", "times", "halo_tiles"]

#: Largest mean-filter side: a clamped corner counts one input ``k^2`` times and
#: :func:`~hecore.seal.kernels.linear_combination` takes int16 multiplicities.
MAX_MEAN_K = 181

#: Largest |weight| of a convolution (the pixel layout adds a ciphertext |w| times; int16 multiplicities).
MAX_WEIGHT = 255

#: Largest divisor of a convolution.
MAX_DIVISOR = 65536

#: The named kernels of ``conv:NAME``: (weights row-major, divisor).
KERNELS = {
    "gauss3": ((1, 2, 1, 2, 4, 2, 1, 2, 1), 16),
    "gauss5": (tuple(int(v) for v in np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]).ravel()), 256),
    "sharpen": ((0, -1, 0, -1, 5, -1, 0, -1, 0), 1),
    "sobel-x": ((-1, 0, 1, -2, 0, 2, -1, 0, 1), 1),
    "sobel-y": ((-1, -2, -1, 0, 0, 0, 1, 2, 1), 1),
    "laplace": ((0, 1, 0, 1, -4, 1, 0, 1, 0), 1),
}


def window_offsets(k: int) -> tuple[int, int]:
    """First and last offset of a ``k``-wide window: ``-(k//2)`` and ``-(k//2) + k - 1``."""
    lo = -(k // 2)
    return lo, lo + k - 1


def times(ev, c, w: int):
    """``w c`` for a ciphertext ``c`` and an integer ``w != 0``, by doublings and additions: exact in every
    scheme, no level and no change of scale."""
    n = abs(int(w))
    result, power = None, c
    while n:
        if n & 1:
            result = power if result is None else ev.add(result, power)
        n >>= 1
        if n:
            power = ev.add(power, power)
    return ev.negate(result) if w < 0 else result


def halo_tiles(py: int, px: int, tile_h: int, tile_w: int, rows: int, cols: int, r: int) -> list[tuple[int, int]]:
    """The tiles ``(ty, tx)`` that need pixel ``(py, px)`` for windows reaching ``r`` pixels out.

    A tile needs the pixels of its own region extended by ``r`` on every side
    (clipped to the image, which clamped windows never leave); so pixel
    ``(py, px)`` goes to the tiles holding the pixels ``py - r .. py + r`` x
    ``px - r .. px + r``: its own tile, plus neighbours when it lies within ``r``
    of a tile edge.  ``rows`` x ``cols`` is the tile grid; sorted row-major.
    """
    for name, v, m in (("py", py, 0), ("px", px, 0), ("tile_h", tile_h, 1), ("tile_w", tile_w, 1),
                       ("rows", rows, 1), ("cols", cols, 1), ("r", r, 0)):
        check_int(name, v, m)
    if py >= rows * tile_h or px >= cols * tile_w:
        raise ValueError(f"pixel (py={py}, px={px}) lies outside the {rows}x{cols} grid of {tile_h}x{tile_w} tiles")
    ty0, ty1 = max(0, (py - r) // tile_h), min(rows - 1, (py + r) // tile_h)
    tx0, tx1 = max(0, (px - r) // tile_w), min(cols - 1, (px + r) // tile_w)
    return [(ty, tx) for ty in range(ty0, ty1 + 1) for tx in range(tx0, tx1 + 1)]


class WindowOp(ImageOp):
    """A ``k x k`` integer-weighted window sum over a divisor (see the module doc)."""

    real_linear: ClassVar[bool] = True

    pointwise: ClassVar[bool] = False
    windowed: ClassVar[bool] = True
    position_free: ClassVar[bool] = False

    k: int          # the window's side (a field of the mean filter, a property of a convolution)

    @property
    def weights(self) -> np.ndarray:
        """The ``k x k`` integer weights (int64), row-major as given."""
        raise NotImplementedError   # pragma: no cover

    @property
    def divisor(self) -> int:   # pragma: no cover
        raise NotImplementedError

    @property
    def lo(self) -> int:
        """Where a window starts, relative to the (strided) position of its output."""
        return window_offsets(self.k)[0]

    #: Output ``i`` is the window at input ``stride i`` (1: a filter; ``F``: a downsample by ``F``).
    stride: ClassVar[int] = 1

    @property
    def halo(self) -> int:
        """How far (pixels) a window reaches beyond its centre, on the longer side."""
        lo, hi = window_offsets(self.k)
        return max(-lo, hi)

    @property
    def post_scale_factor(self) -> float:
        return 1.0 / self.divisor

    def terms(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The weights as a sum of outer products ``row x col`` (int64 vectors of length ``k``): what the pixel
        layout turns into multiplicities along each axis (one term for a separable kernel)."""
        eye = np.eye(self.k, dtype=np.int64)
        return [(eye[i], self.weights[i]) for i in range(self.k) if self.weights[i].any()]

    def regroup(self, packed: bool):
        return None if packed else "halo"        # a packed tile carries its halo

    def target_tiles(self, py: int, px: int, tile_h: int, tile_w: int, rows: int, cols: int) -> list:
        """The output tiles whose windows need input pixel ``(py, px)`` of a ``rows x cols`` tile grid (pixel
        layout): its own and the neighbours within :attr:`halo`."""
        return halo_tiles(py, px, tile_h, tile_w, rows, cols, self.halo)

    def raw_step(self, lo, hi, ps):
        w = self.weights
        pos, neg = int(w[w > 0].sum()), int(w[w < 0].sum())
        return pos * lo + neg * hi, pos * hi + neg * lo, ps / self.divisor

    def grid_step(self, ps, offset, step):
        return ps / self.divisor, offset * int(self.weights.sum()), step

    @property
    def error_window(self) -> int:
        return int((self.weights ** 2).sum())

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        arr = as_image(img)
        lo, hi = window_offsets(self.k)
        pad = [(-lo, hi), (-lo, hi)] + ([(0, 0)] if arr.ndim == 3 else [])
        padded = np.pad(arr, pad, mode="edge")
        h, w = arr.shape[:2]
        total = np.zeros_like(arr)
        for i in range(self.k):
            for j in range(self.k):
                if self.weights[i, j]:
                    total += float(self.weights[i, j]) * padded[i:i + h, j:j + w]
        return total / self.divisor

    def check_halo(self, halo: int) -> None:
        if halo < self.halo:
            raise InvalidParameters(
                f"{self.spec} reaches {self.halo} pixel(s) beyond each tile but the tiles were encrypted with a "
                f"halo of {halo}; encrypt with `--halo {self.halo}` (or more)")

    def packed(self, ev, c, geom, post_scale):
        """Rotations within the tile's block: each column offset once (``k - 1``), the weights applied to
        those by additions row by row, then each row offset once (``k - 1``)."""
        self.check_halo(geom.halo)
        lo = self.lo
        shifted = [ev.rotate(c, lo + j) if self.weights[:, j].any() else None for j in range(self.k)]
        total = None
        for i in range(self.k):
            row = None
            for j in range(self.k):
                w = int(self.weights[i, j])
                if w:
                    term = times(ev, shifted[j], w)
                    row = term if row is None else ev.add(row, term)
            if row is not None:
                row = ev.rotate(row, (lo + i) * geom.cols)
                total = row if total is None else ev.add(total, row)
        return total, post_scale / self.divisor


class BoxWindow(WindowOp):
    """A window whose every weight is 1 over ``k^2``: the mean filter, and a downsample's blocks."""

    @property
    def weights(self) -> np.ndarray:
        return np.ones((self.k, self.k), dtype=np.int64)

    @property
    def divisor(self) -> int:
        return self.k * self.k

    def terms(self):
        one = np.ones(self.k, dtype=np.int64)
        return [(one, one)]

    @classmethod
    def parse(cls, args, spec):
        """``NAME:N``: the one integer of a box window (its side, or a downsample's factor)."""
        m = re.match(r"^\s*(\d+)\s*$", args)
        if m is None:
            raise ValueError(f"bad operation spec {spec!r}: expected {cls.form}")
        return cls(int(m.group(1)))

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.k}"


@register
@dataclass(frozen=True)
class MeanFilter(BoxWindow):
    """The ``k x k`` mean filter with edge replication (iCHEETAH §4.4.1, 3x3 there), any ``k >= 1``."""

    k: int

    name: ClassVar[str] = "meanfilter"
    form: ClassVar[str] = f"'meanfilter:K' with K an integer in 1..{MAX_MEAN_K}, e.g. meanfilter:3"

    def __post_init__(self):
        k = check_int("mean filter side k", self.k, 1)
        if k > MAX_MEAN_K:
            raise ValueError(f"mean filter side k={k} is larger than the supported {MAX_MEAN_K}")
        object.__setattr__(self, "k", k)

    def packed(self, ev, c, geom, post_scale):
        """Separable: the row pass and the column pass, ``~2 log2 k`` rotations each for a large ``k``."""
        self.check_halo(geom.halo)
        rows = ev.rotate(ev.window_sum(c, self.k, 1), self.lo)
        total = ev.rotate(ev.window_sum(rows, self.k, geom.cols), self.lo * geom.cols)
        return total, post_scale / self.divisor


_CONV_FORM = ("'conv:NAME' with NAME one of " + ", ".join(KERNELS) + ", or 'conv:W1,...,W9[/D]' (or 25 "
              f"weights): integer weights row-major, |W| <= {MAX_WEIGHT}, divisor D in 1..{MAX_DIVISOR} "
              "(default 1), e.g. conv:sharpen or conv:1,2,1,2,4,2,1,2,1/16")


@register
@dataclass(frozen=True)
class Convolution(WindowOp):
    """``conv:NAME`` or ``conv:W1,...,W9[/D]``: a 3x3 (9 weights) or 5x5 (25 weights) integer kernel over an
    optional divisor, applied as a correlation with the edge replicated (see the module doc)."""

    values: tuple
    div: int = 1
    label: str = field(default="", compare=False)     # the kernel's name, when given by name

    name: ClassVar[str] = "conv"
    form: ClassVar[str] = _CONV_FORM

    def __post_init__(self):
        values = tuple(self.values)
        if len(values) not in (9, 25):
            raise ValueError(f"a convolution takes 9 (3x3) or 25 (5x5) weights, got {len(values)}")
        checked = tuple(check_int("convolution weight", v, -MAX_WEIGHT) for v in values)
        if any(abs(v) > MAX_WEIGHT for v in checked):
            raise ValueError(f"convolution weights must lie in -{MAX_WEIGHT}..{MAX_WEIGHT}, got "
                             f"{max(checked, key=abs)}")
        if not any(checked):
            raise ValueError("a convolution whose weights are all 0 keeps nothing of the image")
        div = check_int("convolution divisor D", self.div, 1)
        if div > MAX_DIVISOR:
            raise ValueError(f"convolution divisor D={div} is larger than the supported {MAX_DIVISOR}")
        object.__setattr__(self, "values", checked)
        object.__setattr__(self, "div", div)

    @classmethod
    def named(cls, label: str) -> "Convolution":
        values, div = KERNELS[label]
        return cls(values, div, label)

    @classmethod
    def parse(cls, args, spec):
        text = args.strip().lower()
        if text in KERNELS:
            return cls.named(text)
        m = re.match(r"^\s*([-+\d\s,]+?)\s*(?:/\s*(\d+)\s*)?$", args)
        parts = [p.strip() for p in m.group(1).split(",")] if m else []
        if not parts or not all(re.fullmatch(r"[-+]?\d+", p) for p in parts):
            raise ValueError(f"bad operation spec {spec!r}: expected {cls.form}")
        try:
            return cls(tuple(int(p) for p in parts), int(m.group(2)) if m.group(2) else 1)
        except ValueError as e:
            raise ValueError(f"bad operation spec {spec!r}: {e}; expected {cls.form}") from None

    @property
    def k(self) -> int:
        return 3 if len(self.values) == 9 else 5

    @property
    def weights(self) -> np.ndarray:
        return np.array(self.values, dtype=np.int64).reshape(self.k, self.k)

    @property
    def divisor(self) -> int:
        return self.div

    @property
    def spec(self) -> str:
        if self.label and KERNELS.get(self.label) == (self.values, self.div):
            return f"conv:{self.label}"
        return "conv:" + ",".join(str(v) for v in self.values) + (f"/{self.div}" if self.div != 1 else "")

