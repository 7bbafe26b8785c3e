"""The pixel layout (iCHEETAH §3.1): one ciphertext per pixel value per channel.

An image is cut into tiles (the unit of parallel work); each tile's valid
pixels are encrypted channel by channel, row-major, by a
:class:`~hecore.encrypt.base.PixelStrategy` (or any encryptor, a value per row).  Tiles that pass the image border
are not padded in this layout: a ciphertext per padding pixel would cost
~130 KB for nothing.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from hecore.ciphertexts import CiphertextBatch
from hecore.encrypt import as_encryptor
from hecore.encrypt.base import Encryptor
from hecore.seal.context import HEContext

from . import Layout
from .tiling import EncryptedTile, TileGrid, channel_plane, tile_image, untile_channels


def encrypt_values(encryptor: "Encryptor | HEContext", values, *, reuse_buffer: bool = False) -> CiphertextBatch:
    """One ciphertext per pixel value (any shape, row-major), by a pixel strategy or by any encryptor
    given rows of one value (the public key's, or the secret key's seeded encryption)."""
    enc = as_encryptor(encryptor)
    if getattr(enc, "max_row", 1) == 1:     # a pixel strategy: the values as they are, one ciphertext each
        return enc.encrypt(values, reuse_buffer=reuse_buffer)
    return enc.encrypt(np.asarray(values, dtype=np.float64).reshape(-1, 1))


def encrypt_tiles(pixels: np.ndarray, encryptor: "Encryptor | HEContext", tile_h: int, tile_w: int,
                  *, reuse_buffer: bool = False) -> tuple[TileGrid, Iterator[EncryptedTile]]:
    """Encrypt an 8-bit L or RGB image tile by tile, channel by channel, one ciphertext per value.

    Returns the grid and a lazy iterator, so that a caller can write each tile
    out before the next is made (memory stays at one tile's ciphertexts).
    With ``reuse_buffer=True`` (pixel strategies) each tile's batch is only valid
    until the next one is produced.
    """
    grid, tiles = tile_image(pixels, tile_h, tile_w)

    def produce() -> Iterator[EncryptedTile]:
        for t in tiles:
            for c in range(grid.channels):
                values = channel_plane(t.pixels, c)[: t.h, : t.w]
                batch = encrypt_values(encryptor, values, reuse_buffer=reuse_buffer)
                yield EncryptedTile(t.ty, t.tx, t.y, t.x, t.h, t.w, channel=c, batch=batch, layout=Layout.PIXEL)

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
