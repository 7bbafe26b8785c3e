"""The pointwise image ops: brightness, contrast and watermark (iCHEETAH §4.4.2-4.4.4).

Each adds a constant to the true value of a pixel (all of them, or one), and a contrast also changes the
public ``post_scale`` (see :mod:`hecore.ops.spec`).  Encrypted: a plaintext addition in the packed layouts
(:func:`hecore.ops.packed.constant_for`), an addition to every component-0 word of the pixel layout's
serialized ciphertexts (:func:`hecore.ops.pixel.add_constant`).  Depth 0, no key but the public one.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np

from .base import ImageOp, as_image, check_int, check_number, fmt_number, register

__all__ = ["Brightness", "Contrast", "Watermark", "MID_GREY", "CONTRAST_RANGE"]

#: The fixed point of :class:`Contrast`.
MID_GREY = 128

#: Contrast factors hepix accepts (a factor is a change of post_scale; 0 would lose the image).
CONTRAST_RANGE = (1.0 / 256, 256.0)

_NUM = r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*"
_INT = r"\s*(\d+)\s*"


def _match(pattern: str, args: str, spec: str, form: str):
    m = re.match(f"^{pattern}$", args)
    if m is None:
        raise ValueError(f"bad operation spec {spec!r}: expected {form}")
    return m


class _Constant(ImageOp):
    """An op that adds :attr:`value` to the true value (after its own change of post-scale, if any)."""

    real_linear: ClassVar[bool] = True

    @property
    def value(self) -> float:       # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def raw_step(self, lo, hi, ps):
        ps *= self.post_scale_factor
        return lo + self.value / ps, hi + self.value / ps, ps

    def grid_step(self, ps, offset, step):
        ps *= Fraction(self.post_scale_factor)
        return ps, offset + Fraction(self.value) / ps, step

    def raw_constants(self, ps):
        return [(self.spec, self.value / (ps * self.post_scale_factor))]

    def packed(self, ev, c, geom, post_scale):
        from .packed import constant_for

        new_scale = post_scale * self.post_scale_factor
        return ev.add_values(c, geom.constant(constant_for(ev, self.value, new_scale, self.spec))), new_scale

    def pixel_pointwise(self, batch, fmt, positions, post_scale, scale_bits):
        from .pixel import add_constant

        return add_constant(batch, fmt, self.value, post_scale * self.post_scale_factor, scale_bits)


@register
@dataclass(frozen=True)
class Brightness(_Constant):
    """Add ``b`` to every pixel value of every channel (iCHEETAH §4.4.2, brightness +50; the TenSEAL study uses +60)."""

    b: float

    name: ClassVar[str] = "brightness"
    form: ClassVar[str] = "'brightness:B' with B a number, e.g. brightness:50"

    def __post_init__(self):
        object.__setattr__(self, "b", check_number("brightness offset", self.b))

    @classmethod
    def parse(cls, args, spec):
        return cls(float(_match(_NUM, args, spec, cls.form).group(1)))

    @property
    def spec(self) -> str:
        return f"brightness:{fmt_number(self.b)}"

    @property
    def value(self) -> float:
        """The constant added to the true value of an affected pixel."""
        return self.b

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        return as_image(img) + self.b


@register
@dataclass(frozen=True)
class Contrast(_Constant):
    """Scale every pixel value about mid-grey: ``F (x - 128) + 128`` (the TenSEAL study's adjustment family).

    Encrypted: ``post_scale`` is multiplied by ``F`` (free, exact) and ``128 (1 - F)`` is added as a constant.
    """

    f: float

    name: ClassVar[str] = "contrast"
    form: ClassVar[str] = "'contrast:F' with F a factor in [1/256, 256], e.g. contrast:1.5"

    def __post_init__(self):
        f = check_number("contrast factor F", self.f)
        lo, hi = CONTRAST_RANGE
        if not lo <= f <= hi:
            raise ValueError(f"contrast factor F={f} must lie in [{lo}, {hi:g}] (1 keeps the image)")
        object.__setattr__(self, "f", f)

    @classmethod
    def parse(cls, args, spec):
        return cls(float(_match(_NUM, args, spec, cls.form).group(1)))

    @property
    def spec(self) -> str:
        return f"contrast:{fmt_number(self.f)}"

    @property
    def post_scale_factor(self) -> float:
        return self.f

    @property
    def value(self) -> float:
        """The constant added to the true value after the scaling."""
        return MID_GREY * (1.0 - self.f)

    def grid_step(self, ps, offset, step):
        ps *= Fraction(self.f)
        return ps, offset + Fraction(MID_GREY) * (1 - Fraction(self.f)) / ps, step

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        return (as_image(img) - MID_GREY) * self.f + MID_GREY


@register
@dataclass(frozen=True)
class Watermark(_Constant):
    """Add ``v`` to the pixel at column ``x``, row ``y``, in every channel (iCHEETAH §4.4.4).

    Encrypted: a constant added to that pixel's values only (in the packed layouts to its own slot and its
    copies in the tile halos, so that a later filter sees it); every other value is unchanged.
    """

    x: int
    y: int
    v: float

    name: ClassVar[str] = "watermark"
    position_free: ClassVar[bool] = False
    shift_invariant: ClassVar[bool] = False
    form: ClassVar[str] = ("'watermark:X,Y,V' with X (column) and Y (row) integers >= 0 and V a number, "
                           "e.g. watermark:10,20,5")

    def __post_init__(self):
        object.__setattr__(self, "x", check_int("watermark column x", self.x, 0))
        object.__setattr__(self, "y", check_int("watermark row y", self.y, 0))
        object.__setattr__(self, "v", check_number("watermark value v", self.v))

    @classmethod
    def parse(cls, args, spec):
        m = _match(f"{_INT},{_INT},{_NUM}", args, spec, cls.form)
        return cls(int(m.group(1)), int(m.group(2)), float(m.group(3)))

    @property
    def mark(self) -> tuple[int, int, float]:
        return self.x, self.y, self.v

    @property
    def spec(self) -> str:
        return f"watermark:{self.x},{self.y},{fmt_number(self.v)}"

    @property
    def value(self) -> float:
        return self.v

    def raw_step(self, lo, hi, ps):
        return min(lo, lo + self.v / ps), max(hi, hi + self.v / ps), ps

    def grid_step(self, ps, offset, step):
        w = Fraction(self.v) / ps
        if w:
            den = math.lcm(step.denominator, w.denominator)
            step = Fraction(math.gcd(step.numerator * (den // step.denominator),
                                     w.numerator * (den // w.denominator)), den)
        return ps, offset, step

    def misfit(self, width: int, height: int) -> str:
        if 0 <= self.x < width and 0 <= self.y < height:
            return ""
        return f"pixel (x={self.x}, y={self.y}) lies outside the {width}x{height} image"

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        arr = as_image(img)
        if self.misfit(arr.shape[1], arr.shape[0]):
            raise ValueError(f"watermark {self.misfit(arr.shape[1], arr.shape[0])[:-6]} (WxH) image")
        out = arr.copy()
        out[self.y, self.x] += self.v
        return out

    def packed(self, ev, c, geom, post_scale):
        from .packed import constant_for

        if self.misfit(geom.image_w, geom.image_h):
            raise ValueError(f"{self.spec}: {self.misfit(geom.image_w, geom.image_h)}")
        value = constant_for(ev, self.v, post_scale, self.spec)
        vec = np.zeros(geom.slots_used, dtype=np.complex128 if geom.complex_packing else np.float64)
        for part, unit in zip(range(geom.parts), (1, 1j)):
            src_y, src_x = geom.source_pixels(part)
            vec[(src_y == self.y) & (src_x == self.x)] += unit * value
        if not vec.any():
            return c, post_scale                    # not in this tile or its halo: unchanged
        return ev.add_values(c, vec), post_scale

    def pixel_pointwise(self, batch, fmt, positions, post_scale, scale_bits):
        from .pixel import add_constant

        mask = (positions[:, 0] == self.y) & (positions[:, 1] == self.x)
        return add_constant(batch, fmt, self.v, post_scale, scale_bits, mask=mask)
