"""Keyed check slots: binding for chains of 8-bit tables on packed BFV.

Keyed offsets (:mod:`hecore.binding`) bind a chain that is linear in the pixels; a table (threshold, min, max,
lut: :mod:`hecore.ops.lut`) is not, and no offset survives it.  But a table is pointwise: it maps every slot
on its own, whatever the slot holds and wherever it sits.  So encrypt, told the table chain (``--for-op``),
spreads each tile channel's pixels over the ciphertext's slots in a keyed order (:func:`slot_order`) and
fills the slots the tile leaves free -- at least :data:`MIN_CHECKS` -- with keyed check inputs
(:func:`check_inputs`), drawn from the owner's binding key and the ciphertext's place (image id, channel,
tile).  Decrypt puts the pixels back in order and compares each check slot with the declared table applied
to its input (:func:`gather`).

Nothing the cluster sees tells a check slot from a pixel's: the order is keyed per ciphertext and every slot
goes through the same table.  A ciphertext of another place or run holds, at this place's check slots,
values independent of this place's check inputs; the inputs are drawn so that the table's outputs are
uniform over the values it can give (:func:`check_inputs`), so each check agrees with probability
``1 / outputs`` whatever the other ciphertext holds, and a ciphertext passes its ``c`` checks with
probability ``outputs^-c`` (:func:`swap_escape`): at most ``2^-24`` for a two-valued threshold with the
fewest checks, ``2^-128`` with the default tile's 128.  A slot the cluster corrupts is a check with
probability ``c / slots``, as every slot looks alike.

The cost: the slots the checks take (128 of lut-16384's 16,384 with the default tile, 127x128 instead of
128x128: 0.8 % more ciphertexts); nothing else on the cluster.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

#: The fewest check slots a ciphertext gets: a two-valued table's swapped ciphertext passes them all with
#: probability 2^-24 at most.
MIN_CHECKS = 24


def _words(key: bytes, count: int, *place) -> np.ndarray:
    """``count`` keyed 32-bit words of a place: SHAKE-256 of the key and the place."""
    data = hashlib.shake_256(key + b"\0" + "\0".join(str(p) for p in place).encode()).digest(4 * count)
    return np.frombuffer(data, dtype="<u4").astype(np.int64)


def room(slots: int, block: tuple[int, int]) -> int:
    """How many check slots a ciphertext of ``slots`` slots has beside a block of ``block`` pixels."""
    return slots - block[0] * block[1]


def slot_order(key: bytes, place: tuple, slots: int) -> np.ndarray:
    """The keyed order of one ciphertext's slots (a permutation of ``0..slots-1``): the block's pixels, row-major,
    go to its first slots, the check inputs to the rest."""
    words = _words(key, slots, "slot-order", *place).astype(np.uint64)
    keys = (words << np.uint64(32)) | np.arange(slots, dtype=np.uint64)   # distinct: any sort gives one order
    return np.argsort(keys)


def as_table(table) -> np.ndarray:
    """``table`` -- 256 bytes, as the owner map keeps it, or 256 integers -- as int64 outputs in 0..255, or a
    ValueError (:func:`hecore.ops.lut.check_table`)."""
    from hecore.ops.lut import check_table

    return check_table(np.frombuffer(table, dtype=np.uint8) if isinstance(table, bytes | bytearray) else table)


def check_inputs(key: bytes, place: tuple, count: int, table) -> np.ndarray:
    """The ``count`` check inputs (int64, 0..255) of one ciphertext: for each, an output drawn uniformly among the
    values ``table`` gives, then an input drawn uniformly among those giving it (two keyed words each; a bias
    below 2^-24)."""
    t = as_table(table)
    outputs = np.unique(t)
    words = _words(key, 2 * count, "check-inputs", *place).reshape(count, 2)
    chosen = outputs[words[:, 0] % len(outputs)]
    out = np.empty(count, dtype=np.int64)
    for y in np.unique(chosen):
        where = chosen == y
        inputs = np.flatnonzero(t == y)
        out[where] = inputs[words[where, 1] % len(inputs)]
    return out


def spread(key: bytes, places: Sequence[tuple], blocks: Sequence[np.ndarray], slots: int, table) -> np.ndarray:
    """The slot rows (``len(places) x slots``, float64) encrypt fills for tile-channel ``blocks`` at ``places``
    ``(image id, channel, tile row, tile column)``: each block's pixels in its keyed order, check inputs in the
    slots left."""
    rows = np.empty((len(places), slots), dtype=np.float64)
    for row, place, block in zip(rows, places, blocks):
        values = np.asarray(block).reshape(-1)
        checks = slots - values.size
        if checks < MIN_CHECKS:
            raise ValueError(f"a block of {values.size} pixels leaves {checks} of {slots} slots for check slots; "
                             f"{MIN_CHECKS} are needed")
        order = slot_order(key, place, slots)
        row[order[:values.size]] = values
        row[order[values.size:]] = check_inputs(key, place, checks, table)
    return rows


def gather(key: bytes, places: Sequence[tuple], rows: Sequence[np.ndarray], block: tuple[int, int], declared,
           recorded) -> tuple[list[np.ndarray], list[int]]:
    """For each decrypted slot row at ``places``: its block's values in order (``block``-shaped), and how many of
    its check slots differ from the ``recorded`` table (the chain the run records; None: ops that are not one
    table, every check counted) applied to the check inputs the ``declared`` table (the one encrypt drew them
    for) gives."""
    n = block[0] * block[1]
    want_table = None if recorded is None else as_table(recorded)
    values, missed = [], []
    for place, row in zip(places, rows):
        row = np.asarray(row)
        if row.size < n + MIN_CHECKS:       # a tile the rows claim that no bound run has: nothing to put back
            values.append(np.full(block, np.nan))
            missed.append(max(1, row.size - n))
            continue
        order = slot_order(key, place, row.size)
        values.append(row[order[:n]].reshape(block))
        checks = row.size - n
        if want_table is None:
            missed.append(checks)
            continue
        want = want_table[check_inputs(key, place, checks, declared)]
        missed.append(int(np.count_nonzero(np.abs(row[order[n:]] - want) > 0.5)))
    return values, missed


def swap_escape(table, checks: int) -> float:
    """The probability that a ciphertext of another place passes ``checks`` check slots of ``table``:
    ``outputs^-checks``."""
    return float(len(np.unique(as_table(table)))) ** -checks
