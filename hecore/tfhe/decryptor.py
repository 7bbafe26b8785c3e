"""Decryption of TFHE pixel ciphertexts with the client key (the data owner's side).

Ciphertexts that come back from a cluster are untrusted: each is deserialized with a size limit and
checked against the key's parameters, and a malformed one raises ValueError naming its index.
:meth:`TfheDecryptor.decrypt_pixels` has the signature of :meth:`hecore.seal.context.HEContext.decrypt_pixels`,
so :func:`hecore.layouts.pixel.decrypt_tiles` reassembles TFHE tiles into an image as it does CKKS ones.
"""
from __future__ import annotations

import os

import numpy as np

from ..ciphertexts import CiphertextBatch
from .keys import read_client_key
from .native import native_module


def as_bytes_list(cts) -> list[bytes]:
    """Serialized ciphertexts as a list of ``bytes`` (what the native module takes): from a
    :class:`~hecore.ciphertexts.CiphertextBatch`, an Arrow array's Python values, or any iterable."""
    if isinstance(cts, CiphertextBatch):
        return [bytes(c) for c in cts]
    return [c if isinstance(c, bytes) else bytes(c) for c in cts]


class TfheDecryptor:
    """Decrypts serialized ``FheUint8`` / ``CompressedFheUint8`` ciphertexts (and compressed lists)
    into uint8 arrays.  ``server_key`` (a :class:`~hecore.tfhe.evaluator.TfheEvaluator`) is needed only
    for compressed lists, which decompress with the server key, and for fresh public-key ciphertexts
    (``compact``), which it casts to the computation parameters first (a processed run holds none)."""

    def __init__(self, client_key: bytes, *, threads: int = 1, server_key=None):
        self._key = native_module().ClientKey(client_key)
        self.threads = threads
        self.server_key = server_key

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> TfheDecryptor:
        """From a TFHE key directory's ``client.key`` (0600, owned by this user; refused otherwise)."""
        return cls(read_client_key(keys), **kwargs)

    def __repr__(self) -> str:
        return f"TfheDecryptor(threads={self.threads})"

    def decrypt(self, cts, shape=None) -> np.ndarray:
        """The values of ``cts`` (one ciphertext per value, full, seeded or with the server key compact) as
        uint8, reshaped to ``shape`` when given."""
        key = self.server_key.native_key if self.server_key is not None else None
        out = np.frombuffer(self._key.decrypt(as_bytes_list(cts), threads=self.threads, server_key=key),
                            dtype=np.uint8)
        return out.reshape(shape) if shape is not None else out

    def decrypt_list(self, data: bytes, server_key=None, shape=None) -> np.ndarray:
        """The values of a serialized ``CompressedCiphertextList``; decompressing needs the server
        key (``server_key`` or the one given at construction)."""
        key = server_key if server_key is not None else self.server_key
        if key is None:
            raise ValueError("a compressed list decompresses with the server key; give server_key= "
                             "(a TfheEvaluator of the same key set)")
        out = np.frombuffer(self._key.decrypt_list(bytes(data), key.native_key, threads=self.threads),
                            dtype=np.uint8)
        return out.reshape(shape) if shape is not None else out

    def decrypt_pixels(self, batch, *, encoding: str | None = None) -> np.ndarray:
        """The values of a pixel-layout batch, as uint8: one ciphertext per value (``seeded``/``full``),
        or for ``encoding="list"`` the values of every compressed list of the batch, in order."""
        if encoding == "list":
            parts = [self.decrypt_list(b) for b in as_bytes_list(batch)]
            return np.concatenate(parts) if parts else np.empty(0, np.uint8)
        return self.decrypt(batch)
