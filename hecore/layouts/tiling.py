"""Cut images into fixed-size tiles and put them back together.

Tiles are the unit of parallel work: each one is encrypted, processed and
decrypted on its own. Every tile has the same shape (``tile_h`` x ``tile_w``
[x C]) so all ciphertexts have the same layout; tiles that pass the right or
bottom border are padded with the nearest edge pixel (``np.pad`` mode
``"edge"``), and ``Tile.h``/``Tile.w`` say how much of the tile is real image.
``untile`` keeps only those valid regions, so ``untile(*tile_image(p, th, tw))``
returns ``p`` exactly.

With a ``halo`` of ``r`` pixels (the packed layout's filters need it), each
tile's block grows by ``r`` on every side: ``(tile_h + 2r) x (tile_w + 2r)``,
holding the neighbouring pixels, with coordinates outside the image clamped
to its edge.  The tile's own pixels then start at ``(r, r)`` of the block.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from hecore.ciphertexts import CiphertextBatch

from . import Layout

__all__ = ["TileGrid", "TilePosition", "Tile", "EncryptedTile", "tile_image", "untile", "parse_tile_spec"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileGrid:
    """How an image of ``height`` x ``width`` x ``channels`` is cut into tiles."""

    height: int
    width: int
    tile_h: int
    tile_w: int
    channels: int

    @property
    def rows(self) -> int:
        return _ceil_div(self.height, self.tile_h)

    @property
    def cols(self) -> int:
        return _ceil_div(self.width, self.tile_w)

    @property
    def padded_height(self) -> int:
        return self.rows * self.tile_h

    @property
    def padded_width(self) -> int:
        return self.cols * self.tile_w

    @property
    def count(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class TilePosition:
    """Where a tile lies: grid index (ty, tx), top-left pixel (y, x), valid extent (h, w)."""

    ty: int
    tx: int
    y: int
    x: int
    h: int
    w: int


@dataclass(frozen=True)
class Tile(TilePosition):
    """One tile and its pixels.

    ``pixels`` is always the full tile_h x tile_w [x C] block (grown by the halo on
    every side when there is one); only its top-left ``h`` x ``w`` part of the tile
    proper lies inside the image.
    """

    pixels: np.ndarray


@dataclass(frozen=True)
class EncryptedTile(TilePosition):
    """One channel of one tile, encrypted: in the pixel layout ``h * w`` ciphertexts (row-major),
    in the packed layouts one, holding the tile's block with a halo of ``halo`` pixels."""

    channel: int
    batch: CiphertextBatch
    layout: Layout
    halo: int = 0

    @property
    def ct(self) -> bytes:
        """The one ciphertext of a packed tile channel."""
        if len(self.batch) != 1:
            raise ValueError(f"tile ({self.ty}, {self.tx}) channel {self.channel} has {len(self.batch)} "
                             "ciphertexts (pixel layout); .ct is for packed tiles")
        return bytes(self.batch[0])

    @property
    def security(self) -> str:
        return self.batch.security

    def with_ct(self, ct: bytes | memoryview) -> "EncryptedTile":
        """The same packed tile channel holding ``ct`` instead (e.g. a processed ciphertext)."""
        return replace(self, batch=CiphertextBatch.from_list([bytes(ct)], self.batch.strategy, self.batch.security))


def channel_plane(pixels: np.ndarray, channel: int) -> np.ndarray:
    """Channel ``channel`` of an (H, W) or (H, W, C) array, as (H, W)."""
    return pixels if pixels.ndim == 2 else pixels[:, :, channel]


def _check_tile_size(tile_h: int, tile_w: int) -> None:
    for name, value in (("tile_h", tile_h), ("tile_w", tile_w)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def tile_image(pixels: np.ndarray, tile_h: int, tile_w: int, halo: int = 0) -> tuple[TileGrid, list[Tile]]:
    """Cut ``pixels`` ((H, W) or (H, W, 3)) into tiles, in row-major order.

    Each tile's ``pixels`` is its block plus ``halo`` pixels on every side (see the module doc).
    """
    _check_tile_size(tile_h, tile_w)
    if isinstance(halo, bool) or not isinstance(halo, (int, np.integer)) or halo < 0:
        raise ValueError(f"halo must be an integer >= 0, got {halo!r}")
    r = int(halo)
    if pixels.ndim == 2:
        channels = 1
    elif pixels.ndim == 3 and pixels.shape[2] == 3:
        channels = 3
    else:
        raise ValueError(f"pixels must have shape (H, W) or (H, W, 3), got {pixels.shape}")
    height, width = pixels.shape[:2]
    if height == 0 or width == 0:
        raise ValueError(f"cannot tile an empty image of shape {pixels.shape}")
    grid = TileGrid(height, width, int(tile_h), int(tile_w), channels)
    pad = [(r, grid.padded_height - height + r), (r, grid.padded_width - width + r)]
    if channels == 3:
        pad.append((0, 0))
    padded = np.pad(pixels, pad, mode="edge")
    tiles = []
    for ty in range(grid.rows):
        for tx in range(grid.cols):
            y, x = ty * grid.tile_h, tx * grid.tile_w
            block = np.ascontiguousarray(padded[y:y + grid.tile_h + 2 * r, x:x + grid.tile_w + 2 * r])
            tiles.append(Tile(ty, tx, y, x, min(grid.tile_h, height - y), min(grid.tile_w, width - x), block))
    return grid, tiles


def _list_positions(positions: Iterable[tuple[int, int]], limit: int = 10) -> str:
    items = sorted(positions)
    shown = ", ".join(f"({ty}, {tx})" for ty, tx in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def untile(grid: TileGrid, tiles: Iterable[Tile]) -> np.ndarray:
    """Reassemble the image from ``tiles`` (any order, any dtype): the inverse of ``tile_image``.

    Raises ValueError naming the (ty, tx) positions that are missing,
    duplicated or outside the grid, or a tile whose shape is wrong.
    """
    tiles = list(tiles)
    seen: dict[tuple[int, int], int] = {}
    for tile in tiles:
        seen[(tile.ty, tile.tx)] = seen.get((tile.ty, tile.tx), 0) + 1
    expected = {(ty, tx) for ty in range(grid.rows) for tx in range(grid.cols)}
    problems = []
    if missing := expected - seen.keys():
        problems.append(f"missing tiles {_list_positions(missing)}")
    if duplicated := [pos for pos, n in seen.items() if n > 1]:
        problems.append(f"duplicated tiles {_list_positions(duplicated)}")
    if outside := seen.keys() - expected:
        problems.append(f"tiles outside the {grid.rows}x{grid.cols} grid {_list_positions(outside)}")
    if problems:
        raise ValueError("cannot untile: " + "; ".join(problems))

    block = (grid.tile_h, grid.tile_w) + ((grid.channels,) if grid.channels == 3 else ())
    shape = (grid.height, grid.width) + block[2:]
    dtype = np.result_type(*(t.pixels.dtype for t in tiles))
    out = np.empty(shape, dtype=dtype)
    for tile in tiles:
        if tile.pixels.shape != block:
            raise ValueError(f"tile ({tile.ty}, {tile.tx}) has shape {tile.pixels.shape}, expected {block}")
        y, x = tile.ty * grid.tile_h, tile.tx * grid.tile_w
        h, w = min(grid.tile_h, grid.height - y), min(grid.tile_w, grid.width - x)
        out[y:y + h, x:x + w] = tile.pixels[:h, :w]
    return out


def untile_channels(grid: TileGrid, pieces) -> np.ndarray:
    """Reassemble a float image from per-channel planes of tiles (what decryption produces).

    ``pieces`` yields ``(tile, channel, plane)``: ``tile`` has ``ty, tx, y, x, h, w``
    and ``plane`` is a 2-D array whose top-left ``h x w`` holds the tile's
    valid values of that channel (cut a halo off first).  Then as :func:`untile`.
    """
    planes: dict[tuple[int, int], np.ndarray] = {}
    first: dict[tuple[int, int], object] = {}
    for tile, channel, plane in pieces:
        key = (tile.ty, tile.tx)
        if key not in planes:
            planes[key] = np.zeros((grid.tile_h, grid.tile_w, grid.channels), dtype=np.float64)
            first[key] = tile
        planes[key][: tile.h, : tile.w, channel] = plane[: tile.h, : tile.w]
    return untile(grid, [
        Tile(t.ty, t.tx, t.y, t.x, t.h, t.w, planes[k] if grid.channels > 1 else planes[k][:, :, 0])
        for k, t in first.items()
    ])


_SPEC = re.compile(r"^\s*([0-9]+)\s*(?:[xX]\s*([0-9]+)\s*)?$")


def parse_tile_spec(spec: str) -> tuple[int, int]:
    """Parse ``"HxW"`` (e.g. ``"16x8"`` -> (16, 8)) or ``"N"`` (-> (N, N)).

    The order is height x width, matching ``tile_image(pixels, tile_h, tile_w)``.
    """
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"bad tile spec {spec!r}: expected 'HxW' such as '16x16', or 'N' for NxN")
    tile_h = int(match.group(1))
    tile_w = int(match.group(2)) if match.group(2) is not None else tile_h
    if tile_h < 1 or tile_w < 1:
        raise ValueError(f"bad tile spec {spec!r}: tile sizes must be >= 1")
    return tile_h, tile_w
