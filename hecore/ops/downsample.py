"""``downsample:F`` (F in 2, 4, 8): the image ``F`` times smaller on each side, each output pixel the mean of
an ``F x F`` block (a box filter).

Output pixel ``(Y, X)`` is the mean of the input rows ``F Y .. F Y + F - 1`` and columns ``F X .. F X + F - 1``;
an image whose sides are no multiple of ``F`` gets a last, partial block, its missing pixels the edge
replicated as the filters replicate it, so the result is ``ceil(H / F) x ceil(W / F)``.  The division by
``F^2`` is deferred to the key holder like every divisor: exact after the one rounding at the end.

Encrypted:

* **pixel layout**: the block's ciphertexts summed with their multiplicities
  (:func:`hecore.ops.pixel.window_tile` with a stride of ``F``), after a shuffle that brings each output tile
  the input pixels of its blocks; the output is tiled like the input (same tile size, ``F^2`` times fewer
  ciphertexts).
* **packed layout**: each block summed within its tile's ciphertext by ``~4 log2 F`` rotations, so the sum of
  block ``(Y, X)`` sits in the slot of its top-left input pixel.  The ciphertexts are not compacted: each still
  holds the input tile's slots, and the rows say which of them hold the result -- a tile of
  ``tile_h / F x tile_w / F`` output pixels, every ``F``-th slot of every ``F``-th row of the block
  (:func:`hecore.layouts.packed.decrypt_block`'s ``stride``).  So the stored ciphertexts are as large as
  before, and the tiles' sides must be multiples of ``F`` (`hepix encrypt --tile`, or ``--for-op`` picks
  such a tile).  After it a packed chain may still add constants (brightness, contrast) or take ``grey``, but
  no op that reads a value's neighbours or its position.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import as_image, register
from .windows import BoxWindow

__all__ = ["Downsample", "FACTORS"]

#: The factors ``downsample:F`` takes.
FACTORS = (2, 4, 8)


@register
@dataclass(frozen=True)
class Downsample(BoxWindow):
    """``downsample:F``: the ``F x F`` box mean, the image ``F`` times smaller on each side."""

    real_linear: ClassVar[bool] = False       # linear, but its results move to other slots: no check values
    strided_linear: ClassVar[bool] = True     # ... and keyed offsets, removed from the decoded tile, follow it

    factor: int

    name: ClassVar[str] = "downsample"
    form: ClassVar[str] = "'downsample:F' with F one of 2, 4, 8, e.g. downsample:2"
    lo: ClassVar[int] = 0                   # the block starts at its output's (strided) position
    shift_invariant: ClassVar[bool] = False

    def __post_init__(self):
        if isinstance(self.factor, bool) or self.factor not in FACTORS:
            raise ValueError(f"downsample factor F must be one of {', '.join(map(str, FACTORS))}, got {self.factor!r}")

    @property
    def k(self) -> int:
        return self.factor

    @property
    def stride(self) -> int:
        return self.factor

    @property
    def halo(self) -> int:
        return 0                            # a block never leaves its tile (tile sides are multiples of F)

    def out_shape(self, height: int, width: int, channels: int) -> tuple[int, int, int]:
        return -(-height // self.factor), -(-width // self.factor), channels

    def regroup(self, packed: bool):
        return None if packed else "blocks"

    def rotates(self, packed: bool) -> bool:
        return packed

    def target_tiles(self, py: int, px: int, tile_h: int, tile_w: int, rows: int, cols: int) -> list:
        """The one output tile whose blocks hold input pixel ``(py, px)`` (the output tiled like the input)."""
        return [((py // self.factor) // tile_h, (px // self.factor) // tile_w)]

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        arr = as_image(img)
        f = self.factor
        h, w = arr.shape[:2]
        hh, ww = -(-h // f) * f, -(-w // f) * f
        pad = [(0, hh - h), (0, ww - w)] + ([(0, 0)] if arr.ndim == 3 else [])
        padded = np.pad(arr, pad, mode="edge")
        blocks = padded.reshape(hh // f, f, ww // f, f, *arr.shape[2:])
        return blocks.sum(axis=(1, 3)) / self.divisor

    # --- packed: sums in place, the rows' geometry shrunk -----------------------------------------

    @property
    def packed_stride(self) -> int:
        return self.factor

    def layout_problem(self, layout) -> str:
        from hecore.layouts import Layout

        if Layout.parse(layout).complex_packing:
            return (f"{self.spec} runs in the packed layout with one pixel per slot, or the pixel layout; "
                    "encrypt with --layout packed")
        return ""

    def for_tiles(self, layout, tile, halo, slots):
        from hecore.layouts import Layout

        layout = Layout.parse(layout)
        if self.layout_problem(layout):
            raise ValueError(self.layout_problem(layout))
        if layout.packed and (tile[0] % self.factor or tile[1] % self.factor):
            raise ValueError(f"{self.spec} needs tiles whose sides are multiples of {self.factor}, not "
                             f"{tile[0]}x{tile[1]}; encrypt with `--tile {_multiple(tile, self.factor)}` (or "
                             f"`--for-op {self.spec}`)")
        return self

    def out_tile(self, tile: tuple[int, int], packed: bool) -> tuple[int, int]:
        """The tile size of the output rows: the packed tile shrinks with the image, the pixel layout's stays."""
        return (tile[0] // self.factor, tile[1] // self.factor) if packed else tuple(tile)

    def packed(self, ev, c, geom, post_scale):
        self.for_tiles("packed", (geom.tile_h, geom.tile_w), geom.halo, ev.slots)
        rows = ev.window_sum(c, self.factor, 1)
        return ev.window_sum(rows, self.factor, geom.cols), post_scale / self.divisor


def _multiple(tile, f: int) -> str:
    return "x".join(str(max(f, v // f * f)) for v in tile)
