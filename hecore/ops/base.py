"""What an image op is: the :class:`ImageOp` interface every CKKS/BFV/BGV image op implements, and the
registry that maps an op's name (``meanfilter`` of ``meanfilter:3``) to its class.

An op class carries everything the rest of hepix asks of an op, so that adding one is one class and
one :func:`register`:

* the command line: ``name``, ``form`` (what the spec looks like) and :meth:`ImageOp.parse`;
* the plaintext reference, :meth:`ImageOp.apply_plain` (no clipping: :func:`hecore.ops.spec.reference`);
* the deferred scaling: ``post_scale_factor``, and :meth:`ImageOp.raw_step` / :meth:`ImageOp.grid_step`,
  how the raw (decrypted) values' range and grid change (:func:`hecore.ops.spec.raw_range`,
  :func:`hecore.ops.spec.finish_for`);
* what the planner needs: ``depth``, rotations in the packed layouts (:meth:`ImageOp.rotates`), the raw
  constants it adds, the window a stored value's rounding error is summed over (:attr:`ImageOp.error_window`);
* the encrypted evaluation: :meth:`ImageOp.packed` on one packed tile, and in the pixel layout either
  :meth:`ImageOp.pixel_pointwise` (one ciphertext at a time) or, for a ``windowed`` op, a sum of
  neighbours after a shuffle (:func:`hecore.ops.pixel.window_tile`, weights from
  :meth:`hecore.ops.windows.WindowOp.terms`);
* the fit to an image: :meth:`ImageOp.misfit` (a watermark outside it).

The scheme's own vocabularies live with the scheme (TFHE's 8-bit ops: :mod:`hecore.tfhe.ops`).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import ClassVar

import numpy as np

__all__ = ["ImageOp", "register", "op_class", "registered", "check_number", "check_int", "as_image", "fmt_number"]

_REGISTRY: dict[str, type] = {}


def register(cls):
    """Class decorator: ``cls`` is the op of specs named ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two ops are named {cls.name!r}: {_REGISTRY[cls.name].__name__} and {cls.__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def op_class(name: str):
    """The registered op class of ``name`` (lower case), or None."""
    return _REGISTRY.get(name)


def registered() -> tuple[str, ...]:
    """The names of the registered ops, in registration order."""
    return tuple(_REGISTRY)


def fmt_number(x: float) -> str:
    """A number as the shortest text that parses back to it (``50``, ``-30``, ``0.5``)."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def check_number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def as_image(img: np.ndarray) -> np.ndarray:
    arr = np.asarray(img, dtype=np.float64)
    if arr.ndim not in (2, 3) or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"image must have shape (H, W) or (H, W, C), got {arr.shape}")
    return arr


class ImageOp:
    """The interface of an image op (see the module doc); subclasses are frozen dataclasses."""

    name: ClassVar[str] = ""
    form: ClassVar[str] = ""
    takes_args: ClassVar[bool] = True        # ``name:ARGS``; False: the bare name (``grey``)
    depth: ClassVar[int] = 0                 # CKKS levels the op spends
    post_scale_factor: ClassVar[float] = 1.0
    halo: ClassVar[int] = 0                  # how far a window reaches beyond its centre (pixels)
    pointwise: ClassVar[bool] = True         # each output value is a function of the same input value
    windowed: ClassVar[bool] = False         # a weighted sum of neighbours (the pixel layout shuffles for it)
    needs_rotation: ClassVar[bool] = False   # rotations in every layout (the DFT filter)
    packed_only: ClassVar[bool] = False      # no pixel-layout evaluation
    position_free: ClassVar[bool] = True     # the same on every value, wherever it sits (a constant added)
    packed_stride: ClassVar[int] = 1         # packed: results in every n-th slot of every n-th row (downsample)
    shift_invariant: ClassVar[bool] = True   # commutes with moving the image (edges replicated): a value's result
                                             # depends on its neighbourhood, not on where it sits
    strided_linear: ClassVar[bool] = False   # linear in the pixels with its results moved to a stride of the
                                             # slots (downsample): keyed offsets follow it, fixed check places not
    real_linear: ClassVar[bool] = False      # packed CKKS: a real constant added and slots combined with real
                                             # weights, nothing else -- the imaginary parts follow the linear part
                                             # alone (what hecore.binding's check values need)
    real_on_blocks: ClassVar[bool] = False   # packed CKKS: a real linear map of each tile's block as a whole,
                                             # evaluated with complex weights (the DFT filter, its mask symmetric):
                                             # the imaginary parts follow it too, checked over whole blocks

    @classmethod
    def parse(cls, args: str, spec: str) -> "ImageOp":       # pragma: no cover - every op overrides it
        raise NotImplementedError

    @property
    def spec(self) -> str:                   # pragma: no cover
        raise NotImplementedError

    def apply_plain(self, img: np.ndarray) -> np.ndarray:   # pragma: no cover
        raise NotImplementedError

    # --- the raw values (deferred scaling) ---------------------------------------------------------

    def raw_step(self, lo: float, hi: float, ps: float) -> tuple[float, float, float]:
        """Bounds ``lo..hi`` of the raw values and the post-scale ``ps`` after this op."""
        return lo, hi, ps * self.post_scale_factor

    def grid_step(self, ps: Fraction, offset: Fraction, step: Fraction):
        """The exact post-scale and the grid ``offset + step Z`` of the raw values after this op, from those
        before it; None when the op leaves no grid to snap to."""
        return ps * Fraction(self.post_scale_factor), offset, step

    def raw_constants(self, ps: float) -> list[tuple[str, float]]:
        """The raw constants the op adds when the post-scale before it is ``ps`` (BFV/BGV need integers)."""
        return []

    @property
    def error_window(self) -> int:
        """Over how many stored values (counted with their squared weights) one output value's error is summed."""
        return 1

    def rotates(self, packed: bool) -> bool:
        """Whether the op needs Galois keys in a packed (``packed``) or the pixel layout."""
        return self.needs_rotation or (packed and not self.pointwise)

    def layout_problem(self, layout) -> str:
        """Why the op cannot run in ``layout`` ("" when it can)."""
        return ""

    def for_tiles(self, layout, tile: tuple[int, int], halo: int, slots: int) -> "ImageOp":
        """The op as planned for an input of ``layout`` with tiles ``tile`` (rows, columns) and ``halo``
        (ValueError when they do not suit it); most ops need nothing of them."""
        return self

    def out_shape(self, height: int, width: int, channels: int) -> tuple[int, int, int]:
        """The image's size after the op (ValueError when it cannot take one of this size)."""
        return height, width, channels

    def regroup(self, packed: bool) -> str | None:
        """How the process job brings together the rows the op needs, in a packed (``packed``) or the pixel
        layout: None (each row alone), ``"halo"`` (each tile with its neighbours' values within
        :attr:`halo`) or ``"channels"`` (a tile's channels together)."""
        return None

    def out_tile(self, tile: tuple[int, int], packed: bool) -> tuple[int, int]:
        """The tile size of the rows after the op (the packed tile shrinks with a downsampled image)."""
        return tuple(tile)

    @property
    def mark(self) -> tuple[int, int, float] | None:
        """A watermark's (column, row, value): what a reader of the result looks for (None: the op marks nothing)."""
        return None

    def misfit(self, width: int, height: int) -> str:
        """Why the op does not fit a ``width x height`` image ("" when it does)."""
        return ""

    # --- encrypted evaluation ----------------------------------------------------------------------

    def packed(self, ev, c, geom, post_scale: float):
        """The op on one packed tile channel: ``(ciphertext, new post_scale)``."""
        raise TypeError(f"{self.spec} has no packed evaluation")

    def pixel_pointwise(self, batch, fmt, positions: np.ndarray, post_scale: float, scale_bits: int):
        """A pointwise op on a batch of pixel-layout ciphertexts (serialized), at their ``(py, px)``."""
        raise ValueError(f"{self.spec} is not a pointwise operation of the pixel layout")
