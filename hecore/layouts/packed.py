"""The packed layout (the SIMD packing of the TenSEAL study, Saker et al. 2025): one ciphertext per tile and channel.

A tile of ``tile_h x tile_w <= N/2`` pixels of one channel sits in the CKKS
slots row-major, one pixel per slot, and is encrypted fresh with the public
key (IND-CPA), so one encryption covers up to N/2 pixels instead of one.
The whole tile is encrypted, edge padding included: the padded values are
the image's border pixels repeated, which is exactly what a clamped-border
filter needs beyond the image, and the row stride stays ``tile_w``.

With a halo of ``r`` (what a filter of reach ``r`` needs, see
:mod:`hecore.ops.packed`), the ciphertext holds the tile's block grown by
``r`` on every side, ``(tile_h + 2r) x (tile_w + 2r)`` slots, and the tile's
own pixels start at slot ``r * (tile_w + 2r) + r``.

CKKS encrypts the values as reals; BFV/BGV as exact integers (pixels are).

Complex packing (layout ``packed-complex``, CKKS only) puts two pixels in each
slot: the tile's top half in the real parts and its bottom half in the
imaginary parts, each half with its own halo.  Both half-blocks are slices of
the tile's block: rows ``[0, hh + 2r)`` and ``[hh, 2hh + 2r)`` with
``hh = tile_h / 2``, so a tile twice as tall fits one ciphertext and one
encryption covers up to ``N`` pixels.  Every image op is linear with real
coefficients (plaintext additions, rotations, a public post-scale), so it acts
on both halves at once and on each exactly as on a real-packed block.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from hecore.ciphertexts import CiphertextBatch
from hecore.encrypt import as_encryptor
from hecore.encrypt.base import Encryptor
from hecore.errors import InvalidParameters
from hecore.seal.context import HEContext
from hecore.seal.params import PRESETS, Params

from . import Layout
from .tiling import EncryptedTile, TileGrid, channel_plane, tile_image, untile_channels

#: The halo of a packed encryption that declares no chain: enough for a 3x3 window (the paper's mean filter).
DEFAULT_HALO = 1


def block_rows(tile_h: int, halo: int, complex_packing: bool = False) -> int:
    """Rows of the slot block a ciphertext holds: the tile's (or, complex, half the tile's) plus the halo."""
    return (tile_h // 2 if complex_packing else tile_h) + 2 * halo


def check_tile_fits(params: Params, tile_h: int, tile_w: int, halo: int = 0, complex_packing: bool = False) -> None:
    """Raise :class:`InvalidParameters` if a tile (with its halo) has more pixels than the ring has slots.

    With complex packing the tile's height must be even and each half (with its halo) must fit.
    """
    if complex_packing:
        params.ckks_only(f"complex packing (two pixels per slot) needs CKKS; {params.name} is "
                         f"{params.scheme.upper()}: use --layout packed, or keys of a CKKS preset")
        if tile_h % 2:
            raise InvalidParameters(
                f"complex packing splits a tile into a top and a bottom half; tile height {tile_h} is odd: "
                "use an even height")
    bh, bw = block_rows(tile_h, halo, complex_packing), tile_w + 2 * halo
    need = bh * bw
    if need > params.slots:
        fits = sorted((p.slots, p.total_bits, name) for name, p in PRESETS.items()
                      if p.slots >= need and p.scheme == params.scheme)
        hint = f"use a preset with at least {need} slots ({fits[0][2]})" if fits else "use smaller tiles"
        with_halo = f" (with a halo of {halo}: {bh}x{bw})" if halo else ""
        what = f"has {need} pixels"
        if complex_packing:
            with_halo, what = f" (each half with a halo of {halo}: {bh}x{bw})", f"needs {need} slots"
        raise InvalidParameters(
            f"a {tile_h}x{tile_w} tile{with_halo} {what} but {params.name} ({params.describe()}) has "
            f"{params.slots} slots per ciphertext; {hint} or tiles of at most {params.slots} pixels"
        )


def default_tile(params: Params, halo: int = 0, complex_packing: bool = False) -> tuple[int, int]:
    """The tile whose block (tile + halo) is the largest power-of-two rectangle (height <= width)
    that fills the slots: 32x64 for N=4096, 30x62 with a halo of 1; with complex packing a
    tile of two such blocks' cores, 60x62."""
    h = 1 << (params.slots.bit_length() - 1) // 2
    w = params.slots // h
    if min(h, w) <= 2 * halo:
        raise InvalidParameters(f"a halo of {halo} leaves no room in {params.name}'s {h}x{w} blocks")
    return (h - 2 * halo) * (2 if complex_packing else 1), w - 2 * halo


def chain_tile(ops, tile: tuple[int, int]) -> tuple[int, int]:
    """``tile`` (the default), its sides rounded down to what ``ops`` need (a downsample by ``F``: multiples
    of ``F``): the tile ``hepix encrypt --for-op`` picks."""
    step = math.lcm(*[getattr(op, "packed_stride", 1) for op in ops]) if ops else 1
    return tuple(max(step, v // step * step) for v in tile)


def complex_halves(block: np.ndarray, halo: int) -> np.ndarray:
    """A tile's block (tile + halo, ``(2hh + 2r) x cols``) as complex slots: the top half-block
    in the real parts, the bottom one in the imaginary parts, row-major."""
    hh = (block.shape[0] - 2 * halo) // 2
    top, bottom = block[: hh + 2 * halo], block[hh:]
    return (top.astype(np.float64) + 1j * bottom.astype(np.float64)).reshape(-1)


def join_halves(z: np.ndarray, tile_h: int, tile_w: int, halo: int) -> np.ndarray:
    """The tile's ``tile_h x tile_w`` raw values from the complex slots of a half-block each."""
    hh = tile_h // 2
    bh, bw = hh + 2 * halo, tile_w + 2 * halo
    z = np.asarray(z)[: bh * bw].reshape(bh, bw)
    core = (slice(halo, halo + hh), slice(halo, halo + tile_w))
    return np.concatenate([z.real[core], z.imag[core]], axis=0)


def block_values(block: np.ndarray, halo: int, complex_packing: bool = False) -> np.ndarray:
    """One tile channel's block (tile + halo) as the slot values a packed ciphertext holds:
    row-major reals, or with complex packing the two half-blocks as complex numbers."""
    if complex_packing:
        return complex_halves(np.asarray(block), halo)
    return np.asarray(block, dtype=np.float64).reshape(-1)


def encrypt_blocks(encryptor: "Encryptor | HEContext", blocks, halo: int = 0,
                   complex_packing: bool = False, checks=None) -> CiphertextBatch:
    """Tile-channel blocks (tile + halo, all of one shape), each into its own ciphertext, in one call of
    the encryptor: row-major, one pixel per slot (complex packing: two, see :func:`complex_halves`).
    ``checks``: one array of the blocks' shape per block, put in the imaginary parts (:mod:`hecore.binding`;
    one pixel per slot only)."""
    enc = as_encryptor(encryptor)
    rows = np.stack([block_values(b, halo, complex_packing) for b in blocks])
    if checks is not None:
        if complex_packing:
            raise ValueError("complex packing holds pixels in the imaginary parts: no room for check values")
        rows = rows + 1j * np.stack([np.asarray(c, dtype=np.float64).reshape(-1) for c in checks])
    return enc.encrypt(rows)


#: Tile channels per encryptor call: batched enough for the native path, small enough that a caller
#: writing each tile out keeps only this many ciphertexts in memory.
CHUNK = 64


def encrypt_tiles(pixels: np.ndarray, encryptor: "Encryptor | HEContext", tile_h: int, tile_w: int,
                  halo: int = 0, complex_packing: bool = False, *,
                  chunk: int = CHUNK) -> tuple[TileGrid, Iterator[EncryptedTile]]:
    """Encrypt an 8-bit L or RGB image tile by tile, channel by channel, one ciphertext per tile channel.

    ``encryptor`` is any :class:`~hecore.encrypt.base.Encryptor` that fills slot rows: the public key's
    (:class:`~hecore.encrypt.public.PublicKeyEncryptor`, or an :class:`~hecore.seal.context.HEContext`, which
    stands for it) or the secret key's (:class:`~hecore.encrypt.symmetric.SymmetricEncryptor`).  Returns
    the grid and a lazy iterator, ``chunk`` tile channels encrypted per call.
    """
    enc = as_encryptor(encryptor)
    check_tile_fits(enc.params, tile_h, tile_w, halo, complex_packing)
    grid, tiles = tile_image(pixels, tile_h, tile_w, halo)
    layout = Layout.PACKED_COMPLEX if complex_packing else Layout.PACKED
    units = [(t, c) for t in tiles for c in range(grid.channels)]

    def produce() -> Iterator[EncryptedTile]:
        for i in range(0, len(units), chunk):
            part = units[i:i + chunk]
            batch = encrypt_blocks(enc, [channel_plane(t.pixels, c) for t, c in part], halo, complex_packing)
            for j, (t, c) in enumerate(part):
                yield EncryptedTile(t.ty, t.tx, t.y, t.x, t.h, t.w, channel=c, batch=batch.slice(j, j + 1),
                                    layout=layout, halo=halo)

    return grid, produce()


def decrypt_block(ctx: HEContext, ct, tile_h: int, tile_w: int, halo: int = 0,
                  complex_packing: bool = False, stride: int = 1) -> np.ndarray:
    """The tile's ``tile_h x tile_w`` raw values (halo cut off) of one packed ciphertext.  ``stride``: the
    values sit in every ``stride``-th slot of every ``stride``-th row of a block ``stride`` times larger (the
    tile of a downsampled image, :mod:`hecore.ops.downsample`)."""
    if complex_packing:
        if stride != 1:
            raise ValueError("complex packing holds no downsampled tile")
        return join_halves(ctx.decrypt_complex(ct, block_rows(tile_h, halo, True) * (tile_w + 2 * halo)),
                           tile_h, tile_w, halo)
    bh, bw = tile_h * stride + 2 * halo, tile_w * stride + 2 * halo
    if bh * bw > ctx.params.slots:
        raise ValueError(f"a {tile_h}x{tile_w} tile with halo {halo} and stride {stride} needs {bh * bw} slots; a "
                         f"ciphertext of {ctx.params.name} has {ctx.params.slots}")
    block = ctx.decrypt_slots(ct, bh * bw).reshape(bh, bw)
    return block[halo:halo + tile_h * stride:stride, halo:halo + tile_w * stride:stride]


def decrypt_tiles(ctx: HEContext, grid: TileGrid, tiles) -> np.ndarray:
    """Decrypt packed tiles into a float image of the grid's size (raw values before rounding)."""
    return untile_channels(grid, (
        (pt, pt.channel, decrypt_block(ctx, pt.ct, grid.tile_h, grid.tile_w, pt.halo, pt.layout.complex_packing))
        for pt in tiles))
