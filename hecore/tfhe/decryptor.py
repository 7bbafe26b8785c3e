"""Decryption of TFHE pixel ciphertexts with the client key (the data owner's side).

Ciphertexts that come back from a cluster are untrusted: each is deserialized with a size limit
and checked against the key's parameters, and a malformed one raises ValueError naming its index.
"""
from __future__ import annotations

import os

import numpy as np

from .keys import read_client_key
from .native import native_module


class Decryptor:
    """Decrypts serialized ``FheUint8`` / ``CompressedFheUint8`` ciphertexts into uint8 arrays."""

    def __init__(self, client_key: bytes, *, threads: int = 1):
        self._key = native_module().ClientKey(client_key)
        self.threads = threads

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> "Decryptor":
        """From a TFHE key directory's ``client.key`` (0600; refused otherwise, and when missing)."""
        return cls(read_client_key(keys), **kwargs)

    def __repr__(self) -> str:
        return f"Decryptor(threads={self.threads})"

    def decrypt(self, cts, shape=None) -> np.ndarray:
        """The values of ``cts`` as uint8, reshaped to ``shape`` when given."""
        out = np.frombuffer(self._key.decrypt(list(cts), threads=self.threads), dtype=np.uint8)
        return out.reshape(shape) if shape is not None else out

    def decrypt_list(self, data: bytes, server_key, shape=None) -> np.ndarray:
        """The values of a serialized ``CompressedCiphertextList``; decompressing needs the server
        key (a :class:`hecore.tfhe.evaluator.Evaluator`)."""
        out = np.frombuffer(self._key.decrypt_list(data, server_key.native_key, threads=self.threads),
                            dtype=np.uint8)
        return out.reshape(shape) if shape is not None else out
