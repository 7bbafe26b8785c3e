"""The packed layout (seed 001's SIMD packing): one ciphertext per tile and channel.

A tile of ``tile_h x tile_w <= N/2`` pixels of one channel sits in the CKKS
slots row-major, one pixel per slot, and is encrypted fresh with the public
key (IND-CPA), so one encryption covers up to N/2 pixels instead of one.
The whole tile is encrypted, edge padding included: the padded values are
the image's border pixels repeated, which is exactly what a clamped-border
filter needs beyond the image, and the row stride stays ``tile_w``.

This module is the core of the packed layout only; the operations on packed
ciphertexts (rotations for the mean filter, slot masks for the watermark)
and its place in the Spark jobs come with the packed-layout issue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .ciphertexts import SECURITY_IND_CPA
from .context import HEContext
from .errors import InvalidParameters
from .params import PRESETS, Params
from .pixel import channel_plane
from .tiling import TileGrid, tile_image, untile_channels


@dataclass(frozen=True)
class PackedTile:
    """One channel of one tile as a single serialized ciphertext (``tile_h x tile_w`` slots used)."""

    ty: int
    tx: int
    y: int
    x: int
    h: int
    w: int
    channel: int
    ct: bytes
    security: str = SECURITY_IND_CPA


def check_tile_fits(params: Params, tile_h: int, tile_w: int) -> None:
    """Raise :class:`InvalidParameters` if a tile has more pixels than the ring has slots."""
    need = tile_h * tile_w
    if need > params.slots:
        fits = sorted((p.slots, name) for name, p in PRESETS.items() if p.slots >= need)
        hint = f"use a preset with at least {need} slots ({fits[0][1]})" if fits else "use smaller tiles"
        raise InvalidParameters(
            f"a {tile_h}x{tile_w} tile has {need} pixels but {params.name} ({params.describe()}) has "
            f"{params.slots} slots per ciphertext; {hint} or tiles of at most {params.slots} pixels"
        )


def default_tile(params: Params) -> tuple[int, int]:
    """The largest power-of-two tile (height <= width) that fills the slots: 32x64 for N=4096."""
    h = 1 << (params.slots.bit_length() - 1) // 2
    return h, params.slots // h


def encrypt_plane(ctx: HEContext, plane: np.ndarray) -> bytes:
    """Fresh public-key encryption of one tile channel, row-major, one pixel per slot."""
    return ctx.encrypt_vector(np.asarray(plane, dtype=np.float64).reshape(-1))


def encrypt_tiles(pixels: np.ndarray, ctx: HEContext, tile_h: int, tile_w: int
                  ) -> tuple[TileGrid, Iterator[PackedTile]]:
    """Encrypt an 8-bit L or RGB image tile by tile, channel by channel; a lazy iterator like
    :func:`hecore.pixel.encrypt_tiles`, one fresh ciphertext per tile and channel."""
    check_tile_fits(ctx.params, tile_h, tile_w)
    grid, tiles = tile_image(pixels, tile_h, tile_w)

    def produce() -> Iterator[PackedTile]:
        for t in tiles:
            for c in range(grid.channels):
                yield PackedTile(t.ty, t.tx, t.y, t.x, t.h, t.w, c, encrypt_plane(ctx, channel_plane(t.pixels, c)))

    return grid, produce()


def decrypt_tiles(ctx: HEContext, grid: TileGrid, tiles) -> np.ndarray:
    """Decrypt packed tiles into a float image of the grid's size (values before rounding)."""
    count = grid.tile_h * grid.tile_w
    return untile_channels(grid, (
        (pt, pt.channel, ctx.decrypt_slots(pt.ct, count).reshape(grid.tile_h, grid.tile_w)) for pt in tiles))
