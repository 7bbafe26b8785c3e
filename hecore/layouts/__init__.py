"""How pixels are laid out in ciphertexts.

* ``pixel`` (iCHEETAH §3.1): one ciphertext per pixel value per channel (:mod:`.pixel`);
* ``packed``: one ciphertext per tile channel, a pixel per slot, the tile with a halo (:mod:`.packed`);
* ``packed-complex``: the same with two pixels per slot, the tile's top half in the real parts and its
  bottom half in the imaginary parts (CKKS only; :mod:`.packed`).

Tiles (:mod:`.tiling`) are the unit of parallel work in every layout.  :class:`Layout` names them; the
tables and manifests store its value, and :meth:`Layout.parse` turns a stored value back into it.
"""
from __future__ import annotations

from enum import Enum
from typing import Iterator, Sequence

import numpy as np

from hecore.errors import InvalidParameters


class Layout(str, Enum):
    """Where a pixel value sits: its own ciphertext, or a slot of its tile channel's ciphertext."""

    PIXEL = "pixel"
    PACKED = "packed"
    PACKED_COMPLEX = "packed-complex"

    def __str__(self) -> str:
        return self.value

    @property
    def packed(self) -> bool:
        """One ciphertext per tile channel (a pixel per slot, or two)."""
        return self is not Layout.PIXEL

    @property
    def complex_packing(self) -> bool:
        """Two pixels per slot: real and imaginary parts (CKKS only)."""
        return self is Layout.PACKED_COMPLEX

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls, value: "str | Layout") -> "Layout":
        """The layout named ``value``, or :class:`~hecore.errors.InvalidParameters` listing the names."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise InvalidParameters(f"unknown layout {value!r}; choose one of: {', '.join(cls.names())}") from None


def encrypt_units(layout: Layout, encryptor, blocks: Sequence[np.ndarray], halo: int,
                  valid: Sequence[tuple[int, int]], checks=None) -> Iterator:
    """The ciphertexts of tile channels, one :class:`~hecore.ciphertexts.CiphertextBatch` per block, lazily.

    ``blocks`` are the tile channels' pixel blocks (tile + ``halo`` on every side), ``valid`` each tile's
    extent inside the image.  Pixel layout: the valid ``h x w`` values of a block, a ciphertext each, one
    block at a time (a block's ciphertexts are ~130 KB per pixel); packed layouts: every block in one
    ciphertext, all blocks in one call of the encryptor.  ``encryptor`` is any
    :class:`~hecore.encrypt.base.Encryptor` the layout can use (see :func:`hecore.encrypt.encryptor_for`);
    ``checks``: the binding's check values of each block (:mod:`hecore.binding`, the packed layout).
    """
    if not layout.packed:
        from .pixel import encrypt_values

        for block, (h, w) in zip(blocks, valid):
            yield encrypt_values(encryptor, block[:h, :w])
        return
    from .packed import encrypt_blocks

    if not len(blocks):
        return
    batch = encrypt_blocks(encryptor, blocks, halo, layout.complex_packing, checks)
    for i in range(len(blocks)):
        yield batch.slice(i, i + 1)


__all__ = ["Layout", "encrypt_units"]
