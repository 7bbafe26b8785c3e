"""Encryption of uint8 pixels under a TFHE client key (the data owner's side).

Three encodings of the same ``FheUint8`` ciphertexts (one per pixel value, the pixel layout):

* ``full``: one serialized ``FheUint8`` per value (four 2-bit radix blocks, each an LWE
  ciphertext of dimension 2048): what the server computes on and returns.
* ``seeded``: one serialized ``CompressedFheUint8`` per value: the LWE masks are stored as the
  seed they are expanded from, so only the bodies travel; the server expands them (no key
  needed) before computing.  Fresh encryptions only: a computed ciphertext has no seed.
* ``list``: the whole batch in one ``CompressedCiphertextList`` (the blocks packed into GLWE
  ciphertexts with the server key's compression key): the smallest for computed results too,
  one blob per batch instead of one row per value.
"""
from __future__ import annotations

import os

import numpy as np

from .keys import read_client_key
from .native import native_module

ENCODINGS = ("full", "seeded", "list")


def pixel_bytes(pixels) -> bytes:
    """The values of a uint8 array (any shape, C order) as bytes."""
    arr = np.asarray(pixels)
    if arr.dtype != np.uint8:
        raise ValueError(f"pixels must be a uint8 array, got dtype {arr.dtype}; convert with np.uint8 "
                         "after clipping to 0..255")
    return np.ascontiguousarray(arr).tobytes()


class Encryptor:
    """Encrypts uint8 pixels with the client key; the GIL is released during the native batch."""

    def __init__(self, client_key: bytes, *, threads: int = 1):
        self._key = native_module().ClientKey(client_key)
        self.threads = threads

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> "Encryptor":
        """From a TFHE key directory's ``client.key`` (0600; refused otherwise, and when missing)."""
        return cls(read_client_key(keys), **kwargs)

    def __repr__(self) -> str:
        return f"Encryptor(threads={self.threads})"

    def encrypt(self, pixels) -> list[bytes]:
        """One serialized ``FheUint8`` per value of ``pixels``, in C order."""
        return self._key.encrypt(pixel_bytes(pixels), threads=self.threads)

    def encrypt_seeded(self, pixels) -> list[bytes]:
        """One serialized seeded ``CompressedFheUint8`` per value (see the module doc)."""
        return self._key.encrypt_seeded(pixel_bytes(pixels), threads=self.threads)

    def encrypt_list(self, pixels, server_key) -> bytes:
        """All values in one serialized ``CompressedCiphertextList``; ``server_key`` is a
        :class:`hecore.tfhe.evaluator.Evaluator` (its key holds the compression key)."""
        return self._key.encrypt_list(pixel_bytes(pixels), server_key.native_key, threads=self.threads)
