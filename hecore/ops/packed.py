"""The image operations of :mod:`hecore.ops.spec` on packed tiles (one ciphertext per tile channel).

A packed ciphertext holds a tile's block of ``(tile_h + 2r) x (tile_w + 2r)``
pixel values, row-major, one per slot, where ``r`` is the tile's halo (see
:mod:`hecore.layouts.tiling`): the tile's own pixels start at slot ``r * cols + r``
and the halo holds the neighbours, with coordinates outside the image clamped
to its edge.  The operations, in CKKS, BFV or BGV alike:

* **brightness** ``B``: ``B / post_scale`` added to every slot (a plaintext addition);
* **contrast** ``F``: ``post_scale x F`` and ``128 (1 - F) / post_scale`` added;
* **watermark** ``X, Y, V``: ``V / post_scale`` added to the slots whose source
  pixel is ``(X, Y)`` -- its own slot and its copies in the halo (neighbouring
  tiles hold it too, and every copy gets it, so a later filter sees it);
* **mean filter** ``k``: the window sum as rotations -- ``k - 1`` for the row
  pass, ``k - 1`` for the column pass (separable), or ``~2 log2 k`` each for
  large ``k`` -- with the division by ``k^2`` deferred (``post_scale / k^2``),
  as in the pixel layout, so the result is exact after rounding.

Complex packing (layout ``packed-complex``, see :mod:`hecore.layouts.packed`) holds
the tile's top half in the real parts of the slots and its bottom half in the
imaginary parts, each half-block with its own halo.  Every op above is linear
with real coefficients, so it acts on both halves alike: constants are added
as ``c + ci``, the watermark's slots get ``V`` in the real part where the
pixel lies in the top half-block and ``Vi`` where it lies in the bottom one,
and the filter's rotations move both parts together.  Matching squares the
difference, which mixes the two parts; it needs the real packing.

Post-scale, the clipping rule, the border rule and :func:`hecore.ops.spec.reference`
are those of :mod:`hecore.ops.spec`: the same results as the pixel layout.

The halo and the border rule
----------------------------
A window of the filter reaches ``k // 2`` pixels out, so the tiles must have
been encrypted with a halo of at least that (``hepix encrypt --halo``).  The
filter's output is right on the tile itself; on the halo it is not (a halo
slot's window runs off the block), so one packed run applies at most one
mean filter: a second would need the first one's output on the halo, and at
the image border the clamped copies of it, which the ciphertext does not
have.  :func:`check_packed_chain` refuses such chains up front, naming the
pixel layout, which has no such limit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hecore.errors import InvalidParameters
from hecore.seal.evaluator import Evaluator

from .base import ImageOp
from .base import ImageOp as Op

__all__ = ["PackedGeometry", "check_packed_chain", "apply_op", "apply_ops", "constant_for"]


@dataclass(frozen=True)
class PackedGeometry:
    """Where a packed tile's slots come from: tile size, halo, position and the image's size."""

    tile_h: int
    tile_w: int
    halo: int
    y: int
    x: int
    image_h: int
    image_w: int
    complex_packing: bool = False

    @property
    def parts(self) -> int:
        """Half-blocks per ciphertext: 2 with complex packing (real and imaginary parts), else 1."""
        return 2 if self.complex_packing else 1

    @property
    def part_h(self) -> int:
        """Tile rows per half-block (the whole tile without complex packing)."""
        return self.tile_h // self.parts

    @property
    def rows(self) -> int:
        return self.part_h + 2 * self.halo

    @property
    def cols(self) -> int:
        return self.tile_w + 2 * self.halo

    @property
    def slots_used(self) -> int:
        return self.rows * self.cols

    @property
    def h(self) -> int:
        """Rows of the tile that lie inside the image."""
        return min(self.tile_h, self.image_h - self.y)

    @property
    def w(self) -> int:
        return min(self.tile_w, self.image_w - self.x)

    @property
    def core_slot(self) -> int:
        """The slot of the tile's top-left pixel."""
        return self.halo * self.cols + self.halo

    def source_pixels(self, part: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """For every used slot, the (clamped) image row and column its value came from
        (complex packing: ``part`` 0 the real parts, 1 the imaginary parts)."""
        r = self.halo
        top = self.y + part * self.part_h - r
        rows = np.clip(np.arange(top, top + self.rows), 0, self.image_h - 1)
        cols = np.clip(np.arange(self.x - r, self.x - r + self.cols), 0, self.image_w - 1)
        return np.repeat(rows, self.cols), np.tile(cols, self.rows)

    def core(self, block: np.ndarray) -> np.ndarray:
        """The tile's valid ``h x w`` pixels out of a decrypted ``rows x cols`` block
        (complex packing: a complex block, its two halves stacked)."""
        r = self.halo
        if self.complex_packing:
            block = np.concatenate([block.real[r:r + self.part_h], block.imag[r:r + self.part_h]], axis=0)
            return block[:self.h, r:r + self.w]
        return block[r:r + self.h, r:r + self.w]

    def constant(self, value: float):
        """A constant for every pixel: ``value`` in each part of the slot."""
        return complex(value, value) if self.complex_packing else value


def _filters(ops: Sequence[Op]) -> list:
    """The ops of a chain that read the tile's halo (mean filters, convolutions)."""
    return [op for op in ops if op.windowed and op.halo > 0]


def check_packed_chain(done: Sequence[Op], ops: Sequence[Op], halo: int) -> None:
    """Refuse a chain the packed layout cannot compute exactly (see the module doc).

    ``done`` are the ops already applied to the input (its ``ops`` column),
    ``ops`` the ones to apply now, ``halo`` the tiles' halo.
    """
    filters = _filters(list(done) + list(ops))
    if len(filters) > 1:
        raise InvalidParameters(
            f"the packed layout applies at most one mean filter or convolution per image "
            f"({', '.join(f.spec for f in filters)} asked): a second one would need the first one's output in the "
            "tile halos; use --layout pixel (any chain), or one filter"
        )
    for f in _filters(ops):
        f.check_halo(halo)
    chain = list(done) + list(ops)
    for i, op in enumerate(chain):
        if op.packed_stride > 1:
            before = [o.spec for o in _filters(chain[:i])]
            if before:
                raise InvalidParameters(
                    f"{', '.join(before)} before {op.spec}: in the packed layout a filter's values beyond the "
                    f"image edge are not the edge replicated, and {op.spec}'s last, partial blocks read them; use "
                    "--layout pixel for this chain")
            after = [o.spec for o in chain[i + 1:] if not o.position_free]
            if after:
                raise InvalidParameters(
                    f"{', '.join(after)} after {op.spec}: in the packed layout the downsampled values stay in "
                    "their input slots, so an op that reads neighbours or a position cannot follow; apply it "
                    f"before {op.spec}, or use --layout pixel")


def constant_for(ev: Evaluator, value: float, post_scale: float, what: str):
    """The raw constant that adds ``value`` to the true value: ``value / post_scale``.

    BFV/BGV need it to be an integer and say so, naming the op.
    """
    raw = value / post_scale
    return ev.exact_constant(raw, f"{what}: adds {value:g} / post_scale {post_scale:g} = {raw:g} to the raw "
                                  f"values, which {ev.params.scheme.upper()} (integers only) cannot represent; use "
                                  "a CKKS preset or an integer-preserving value")


def apply_op(ev: Evaluator, c, op: Op, geom: PackedGeometry, post_scale: float):
    """``op`` on one packed tile channel ``c``: returns ``(ciphertext, new post_scale)`` (:meth:`Op.packed`)."""
    if not isinstance(op, ImageOp):
        raise TypeError(f"not an operation: {op!r}")
    return op.packed(ev, c, geom, post_scale)


def check_dft_tiles(op, tile_h: int, tile_w: int, halo: int, slots: int) -> None:
    """Refuse tiles a frequency-domain filter (hecore.ops.dft) cannot transform, saying what to encrypt."""
    if halo:
        raise InvalidParameters(f"{op.spec} transforms each tile on its own and needs tiles without a halo; "
                                "encrypt with `--halo 0`")
    pow2 = all(v >= 2 and not v & (v - 1) for v in (tile_h, tile_w))
    if not pow2 or slots % (tile_h * tile_w):
        raise InvalidParameters(f"{op.spec} needs tiles of power-of-two sides whose pixels divide the {slots} "
                                f"slots, not {tile_h}x{tile_w}; encrypt with the default tile of the preset")
    if op.tile is not None and tuple(op.tile) != (tile_h, tile_w):
        raise InvalidParameters(f"{op.spec} was planned for {op.tile[0]}x{op.tile[1]} tiles, the input has "
                                f"{tile_h}x{tile_w}")


def apply_ops(ev: Evaluator, c, ops: Sequence[Op], geom: PackedGeometry, post_scale: float = 1.0):
    """The ops in order; returns ``(ciphertext, post_scale)``."""
    check_packed_chain([], ops, geom.halo)
    for op in ops:
        c, post_scale = apply_op(ev, c, op, geom, post_scale)
    return c, post_scale
