"""Binding: keyed check values under the encryption that tie each ciphertext to its place.

A spot sample compares values; where a swapped or replayed ciphertext holds nearly the values of the right
one (a flat sky, a blank page), few of its pixels differ and the sample rarely lands on them.  Binding closes
that gap for CKKS's packed layout (one pixel per slot, in the real parts): encrypt (``--bind``) puts in the
imaginary part of every slot a value ``+1`` or ``-1`` drawn from the owner's secret key and the ciphertext's
place -- image id, channel, tile -- (:func:`check_values`).  Every op that adds real constants and combines
slots with real weights (:attr:`hecore.ops.base.ImageOp.real_linear`: brightness, contrast, watermark, the
mean filter, every convolution, grey) leaves in the imaginary parts the linear part of the chain applied to
those values, whatever the pixels; decrypt computes what that must be at :data:`CHECKS` places of each
ciphertext from the key alone (:func:`expected`) and compares.  A ciphertext of another place, image or run
carries other values: at each checked place it agrees with probability 1/2 at most (the values are
independent signs; a window's weighted sum of them agrees less often), so it passes all :data:`CHECKS` with
probability at most ``2^-24``, whatever its pixels.

Nothing changes on the cluster: the ciphertexts are of the same size, the ops the same; a check value of 1
beside a pixel of 255 makes the slot's magnitude sqrt(255^2 + 1), 8e-6 more, within the planner's margins.  Other layouts (the pixel
layout, complex packing: its imaginary parts hold pixels), BFV/BGV and TFHE have no free part to hold them.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: Bytes of the owner's binding key (kept in the owner map, 0600, never in anything the cluster gets).
KEY_BYTES = 32
#: Places checked per ciphertext: one of another place passes with probability at most 2^-CHECKS.
CHECKS = 24
#: How far a decrypted imaginary part (raw units) may lie from the expected value.  The real-linear ops
#: combine raw values with integer weights (their divisors and factors go to the post-scale), so two
#: candidate values differ by 2 at least; CKKS's error stays below half the raw grid step, 0.5 (the planner's
#: budget, which the stored bits keep).
TOLERANCE = 0.5


def new_key() -> bytes:
    """A fresh binding key, from the operating system."""
    return os.urandom(KEY_BYTES)


def _stream(key: bytes, nbytes: int, *place) -> bytes:
    """``nbytes`` pseudo-random bytes of the key and a place: SHAKE-256 of the key and the place (a keyed
    sponge, which no output reveals the key of)."""
    return hashlib.shake_256(key + b"\0" + "\0".join(str(p) for p in place).encode()).digest(nbytes)


def check_values(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int,
                 shape: tuple[int, int]) -> np.ndarray:
    """The +-1 values (float64, ``shape``: the ciphertext's block) under the pixels of one tile channel."""
    n = shape[0] * shape[1]
    bits = np.unpackbits(np.frombuffer(_stream(key, -(-n // 8), "values", image_id, channel, tile_y, tile_x),
                                       dtype=np.uint8), count=n)
    return (bits.astype(np.float64) * 2.0 - 1.0).reshape(shape)


def check_places(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int, tile: tuple[int, int],
                 halo: int) -> tuple[np.ndarray, np.ndarray]:
    """The :data:`CHECKS` places (block rows and columns, inside the tile: each one's window within the
    halo stays in the block) an output ciphertext is checked at: distinct cells of the tile."""
    cells_in = tile[0] * tile[1]
    want = min(CHECKS, cells_in)
    words = np.frombuffer(_stream(key, 4 * 8 * CHECKS, "places", image_id, channel, tile_y, tile_x), dtype="<u4")
    drawn = (words % cells_in).astype(np.int64)
    _, first = np.unique(drawn, return_index=True)
    cells = drawn[np.sort(first)][:want]            # distinct, in the order drawn
    if len(cells) < want:           # a tile of few cells: the rest in order
        cells = np.concatenate([cells, np.setdiff1d(np.arange(cells_in), cells)[:want - len(cells)]])
    ys, xs = np.divmod(cells, tile[1])
    return ys + halo, xs + halo


def why_not(ops: Sequence) -> str | None:
    """Why check values cannot follow the chain ``ops`` (parsed), or None."""
    other = [op.spec for op in ops if not op.real_linear]
    if other:
        return (f"{', '.join(other)} {'does' if len(other) == 1 else 'do'} more than add real constants and "
                "combine slots with real weights: the check values under the encryption would not survive")
    return None


def expected(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int, *, tile: tuple[int, int],
             halo: int, in_channels: int, reference, post_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, columns, values)``: where output ciphertext (``channel``, tile) is checked and the raw
    imaginary parts it must hold there (:func:`expected_many` of one)."""
    return expected_many(key, [(image_id, channel, tile_y, tile_x)], tile=tile, halo=halo, in_channels=in_channels,
                         reference=reference, post_scales=[post_scale])[0]


def expected_many(key: bytes, places: Sequence[tuple], *, tile: tuple[int, int], halo: int, in_channels: int,
                  reference, post_scales: Sequence[float]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`expected` of output ciphertexts ``places`` ``(image id, channel, tile row, tile column)`` of one
    run's tiles, inputs of ``in_channels`` channels each (grey combines three): the chain's linear part
    (``reference(x) - reference(0)`` on their windows, stacked: ``reference`` the chain's plaintext reference,
    post-scaled) applied to the inputs' check values, over each one's post-scale -- one evaluation for all."""
    side, steps = 2 * halo + 1, np.arange(-halo, halo + 1)
    shape = (tile[0] + 2 * halo, tile[1] + 2 * halo)
    windows, where = [], []
    for image_id, channel, ty, tx in places:
        values = np.stack([check_values(key, image_id, c, ty, tx, shape) for c in range(in_channels)], axis=-1)
        ys, xs = check_places(key, image_id, channel, ty, tx, tile, halo)
        windows.append(values[(ys[:, None] + steps)[:, :, None], (xs[:, None] + steps)[:, None, :]])
        where.append((ys, xs))
    stacked = np.concatenate(windows).reshape(-1, side, in_channels)
    linear = (np.asarray(reference(stacked), dtype=np.float64)
              - np.asarray(reference(np.zeros_like(stacked)), dtype=np.float64))
    centre = (linear if linear.ndim == 3 else linear[:, :, None])[halo::side, halo]
    out, start = [], 0
    for (ys, xs), place, post_scale in zip(where, places, post_scales):
        part = centre[start:start + len(ys)]
        start += len(ys)
        out.append((ys, xs, part[:, place[1] if part.shape[1] > 1 else 0] / post_scale))
    return out


def wrong(imaginary: np.ndarray, rows: np.ndarray, columns: np.ndarray, want: np.ndarray) -> int:
    """How many checked places of a decrypted block's imaginary parts (raw) miss their expected values."""
    return int(np.sum(np.abs(imaginary[rows, columns] - want) > TOLERANCE))


@dataclass(frozen=True)
class Binding:
    """What decrypt checks each ciphertext's imaginary parts with: the owner's key, and the channels each
    image was encrypted with (grey's output combines three)."""

    key: bytes = field(repr=False)
    channels: dict = field(repr=False)          # image id -> channels at encrypt

    def mismatches(self, places: Sequence[tuple], imaginary: Sequence[np.ndarray], *, tile: tuple[int, int],
                   halo: int, reference, post_scales: Sequence[float]) -> list[int]:
        """For each output ciphertext of one run's tiles -- ``places`` ``(image id, channel, tile row, tile
        column)``, the decrypted ``imaginary`` parts of its block (raw), its ``post_scales`` -- how many of its
        :data:`CHECKS` places miss the values its place gives (all of them for an image the owner never
        encrypted).  One evaluation of the chain's ``reference`` for every ciphertext of the same channels."""
        out = [CHECKS] * len(places)
        groups: dict[int, list[int]] = {}
        for n, place in enumerate(places):
            if place[0] in self.channels:
                groups.setdefault(self.channels[place[0]], []).append(n)
        for channels, members in groups.items():
            found = expected_many(self.key, [places[n] for n in members], tile=tile, halo=halo,
                                  in_channels=channels, reference=reference,
                                  post_scales=[post_scales[n] for n in members])
            for n, (ys, xs, want) in zip(members, found):
                out[n] = wrong(imaginary[n], ys, xs, want)
        return out
