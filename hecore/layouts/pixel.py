"""The pixel layout (iCHEETAH §3.1): one ciphertext per pixel value per channel.

An image is cut into tiles (the unit of parallel work); each tile's valid
pixels are encrypted channel by channel, row-major, by a
:class:`~hecore.encrypt.base.PixelStrategy`.  Tiles that pass the image border
are not padded in this layout: a ciphertext per padding pixel would cost
~130 KB for nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from hecore.ciphertexts import CiphertextBatch
from hecore.context import HEContext
from hecore.encrypt.base import PixelStrategy

from .tiling import TileGrid, tile_image, untile_channels


@dataclass(frozen=True)
class PixelTile:
    """The ciphertexts of one channel of one tile: ``h * w`` of them, row-major."""

    ty: int
    tx: int
    y: int
    x: int
    h: int
    w: int
    channel: int
    batch: CiphertextBatch


def channels_of(pixels: np.ndarray) -> int:
    return 1 if pixels.ndim == 2 else pixels.shape[2]


def channel_plane(pixels: np.ndarray, channel: int) -> np.ndarray:
    return pixels if pixels.ndim == 2 else pixels[:, :, channel]


def encrypt_tiles(pixels: np.ndarray, strategy: PixelStrategy, tile_h: int, tile_w: int,
                  *, reuse_buffer: bool = False) -> tuple[TileGrid, Iterator[PixelTile]]:
    """Encrypt an 8-bit L or RGB image tile by tile, channel by channel.

    Returns the grid and a lazy iterator, so that a caller can write each tile
    out before the next is made (memory stays at one tile's ciphertexts).
    With ``reuse_buffer=True`` each tile's batch is only valid until the next
    one is produced.
    """
    grid, tiles = tile_image(pixels, tile_h, tile_w)

    def produce() -> Iterator[PixelTile]:
        for t in tiles:
            for c in range(grid.channels):
                values = channel_plane(t.pixels, c)[: t.h, : t.w]
                batch = strategy.encrypt(values, reuse_buffer=reuse_buffer)
                yield PixelTile(t.ty, t.tx, t.y, t.x, t.h, t.w, c, batch)

    return grid, produce()


def decrypt_tiles(ctx: HEContext, grid: TileGrid, tiles) -> np.ndarray:
    """Decrypt pixel tiles back into a float image of the grid's size (values before rounding)."""

    def planes():
        for pt in tiles:
            values = ctx.decrypt_pixels(pt.batch)
            if values.size != pt.h * pt.w:
                raise ValueError(f"tile ({pt.ty}, {pt.tx}) channel {pt.channel}: {values.size} ciphertexts "
                                 f"for {pt.h}x{pt.w} pixels")
            yield pt, pt.channel, values.reshape(pt.h, pt.w)

    return untile_channels(grid, planes())
