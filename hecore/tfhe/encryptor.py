"""Encryption of uint8 pixels under a TFHE client key (the data owner's side) or under the compact
public key (anyone the owner gives it to).

:class:`TfheEncryptor` (client key) and :class:`TfhePublicEncryptor` (compact public key) are
:class:`hecore.encrypt.base.Encryptor` s of the pixel layout: one ciphertext per pixel value
(``max_row`` 1), returned as a :class:`~hecore.ciphertexts.CiphertextBatch` that becomes an Arrow
binary column without a copy, so :func:`hecore.layouts.pixel.encrypt_tiles` (and
:func:`hecore.layouts.encrypt_units`) take them like any pixel strategy.  The key set
(:meth:`hecore.schemes.tfhe.TfheKeys.encryptor`) makes them.

Encodings of the same ``FheUint8`` ciphertexts (:data:`hecore.tfhe.params.ENCODINGS`):

* ``seeded`` (the default): one serialized ``CompressedFheUint8`` per value: the LWE masks are
  stored as the seed they are expanded from, so only the bodies travel (871 bytes a value against
  66 KB); the server expands them (no key needed) as it loads them.  Fresh encryptions only: a
  computed ciphertext has no seed.
* ``full``: one serialized ``FheUint8`` per value (four 2-bit radix blocks, each an LWE ciphertext
  of dimension 2048): what the server computes on and returns.
* ``compact`` (:class:`TfhePublicEncryptor`): one serialized packed ``CompactCiphertextList`` of one
  ``FheUint8`` per value, encrypted with the compact public key (16,627 bytes a value: one LWE mask
  of dimension 2048 and two bodies, each body two 2-bit blocks).  A public-key mask is not uniform
  from a seed, so it cannot be seeded; a list of a whole batch would share the mask (a few bytes a
  value) but the rows hold one value each, so each value is its own list.  The server casts it with
  its key-switching key (a key switch and a bootstrap per pair of blocks) as it loads it; a
  computed ciphertext is ``full``.
* ``list`` (:meth:`TfheEncryptor.encrypt_list`): the whole batch in one ``CompressedCiphertextList``
  (the blocks packed into GLWE ciphertexts with the server key's compression key): 60 to 90 bytes a
  value, one blob per batch (a tile channel) instead of one row per value; the server decompresses
  it (a key switch per block) before computing.

Every batch runs in the native module with the GIL released, on ``threads`` threads (default 1: one
per Spark task).  TFHE's client-key and public-key encryptions are IND-CPA (LWE with fresh randomness
per value; the public key's under the LWE assumption on the public key too).
"""
from __future__ import annotations

import os

import numpy as np

from ..ciphertexts import SECURITY_IND_CPA, CiphertextBatch
from ..encrypt.base import Encryptor
from .keys import read_client_key, read_info, read_public, read_public_key
from .native import native_module
from .params import ENCODINGS, TFHE_DEFAULT, TfheParams

#: The encodings :meth:`TfheEncryptor.encrypt` produces, one ciphertext per value.
PER_VALUE = ("seeded", "full")


def pixel_bytes(pixels) -> bytes:
    """The values of a uint8 array (any shape, C order) as bytes; integers in 0..255 of another dtype
    are accepted, anything else is a ValueError naming the first bad value."""
    arr = np.asarray(pixels)
    if arr.dtype != np.uint8:
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"pixels must be uint8 (or integers in 0..255), got dtype {arr.dtype}; convert with "
                             "np.uint8 after rounding and clipping to 0..255")
        bad = np.flatnonzero((arr < 0) | (arr > 255))
        if bad.size:
            raise ValueError(f"pixel value {int(arr.flat[bad[0]])} at index {int(bad[0])} is outside 0..255; "
                             "TFHE encrypts 8-bit values")
        arr = arr.astype(np.uint8)
    return np.ascontiguousarray(arr).tobytes()


def strategy_name(encoding: str) -> str:
    """The label the tables' ``strategy`` column gives TFHE ciphertexts of ``encoding``."""
    return f"tfhe-{encoding}"


class _PerValue(Encryptor):
    """An encryptor of one TFHE ciphertext per value, in ``self.encoding`` (``encrypt_bytes`` makes them)."""

    encoding: str
    security = SECURITY_IND_CPA

    @property
    def name(self) -> str:
        return strategy_name(self.encoding)

    @property
    def max_row(self) -> int:
        return 1

    def encrypt(self, values, *, reuse_buffer: bool = False) -> CiphertextBatch:
        """One ciphertext per value of ``values`` (any shape, C order), in this encryptor's encoding.
        ``reuse_buffer`` is accepted for the pixel layout's call and ignored (each batch owns its bytes)."""
        return CiphertextBatch.from_list(self.encrypt_bytes(values), self.name, self.security)

    def encrypt_bytes(self, values) -> list[bytes]:
        raise NotImplementedError


class TfheEncryptor(_PerValue):
    """Encrypts uint8 pixels with the client key, one ciphertext per value (see the module doc).

    ``server_key`` (a :class:`~hecore.tfhe.evaluator.TfheEvaluator`) is needed only by
    :meth:`encrypt_list` (the compression key lives in the server key).  ``fingerprint``: the key
    set's, carried for the tables.
    """

    security = SECURITY_IND_CPA

    def __init__(self, client_key: bytes, *, params: TfheParams = TFHE_DEFAULT, encoding: str = "seeded",
                 threads: int = 1, server_key=None, fingerprint: str | None = None):
        if encoding not in PER_VALUE:
            raise ValueError(f"TFHE encoding {encoding!r} is not one ciphertext per value; choose one of "
                             f"{', '.join(PER_VALUE)} (a whole batch in one compressed list: encrypt_list)")
        self._key = native_module().ClientKey(client_key)
        self.params = params
        self.encoding = encoding
        self.threads = threads
        self.server_key = server_key
        self.fingerprint = fingerprint

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> TfheEncryptor:
        """From a TFHE key directory's ``client.key`` (0600, owned by this user; refused otherwise)."""
        public = read_public(keys)
        kwargs.setdefault("fingerprint", public.fingerprint())
        return cls(read_client_key(keys), params=public.params, **kwargs)

    def __repr__(self) -> str:
        return f"TfheEncryptor({self.params.name}, {self.encoding}, threads={self.threads})"

    def encrypt_bytes(self, values) -> list[bytes]:
        """The same as :meth:`encrypt`, as a list of ``bytes``."""
        data = pixel_bytes(values)
        if self.encoding == "full":
            return self._key.encrypt(data, threads=self.threads)
        return self._key.encrypt_seeded(data, threads=self.threads)

    def encrypt_list(self, values, server_key=None) -> bytes:
        """All values in one serialized ``CompressedCiphertextList`` (the ``list`` encoding);
        ``server_key`` (or the one given at construction) is a
        :class:`~hecore.tfhe.evaluator.TfheEvaluator`."""
        key = server_key if server_key is not None else self.server_key
        if key is None:
            raise ValueError("the list encoding compresses with the server key's compression key; give "
                             "server_key= (a TfheEvaluator of the same key set)")
        return self._key.encrypt_list(pixel_bytes(values), key.native_key, threads=self.threads)


class TfhePublicEncryptor(_PerValue):
    """Encrypts uint8 pixels with the compact public key, one ``compact`` ciphertext per value (see the
    module doc): what ``hepix encrypt`` does on a machine that holds the public keys only.
    ``fingerprint``: the key set's, carried for the tables."""

    security = SECURITY_IND_CPA
    encoding = "compact"

    def __init__(self, public_key: bytes, *, params: TfheParams = TFHE_DEFAULT, threads: int = 1,
                 fingerprint: str | None = None):
        self._key = native_module().PublicKey(public_key)
        self.params = params
        self.threads = threads
        self.fingerprint = fingerprint

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> TfhePublicEncryptor:
        """From a TFHE key directory's ``public.key`` (never opens ``client.key``)."""
        info = read_info(keys)
        kwargs.setdefault("fingerprint", info.fingerprint)
        return cls(read_public_key(keys), params=info.params, **kwargs)

    def __repr__(self) -> str:
        return f"TfhePublicEncryptor({self.params.name}, threads={self.threads})"

    def encrypt_bytes(self, values) -> list[bytes]:
        """The same as :meth:`encrypt`, as a list of ``bytes``."""
        return self._key.encrypt(pixel_bytes(values), threads=self.threads)


class TfheFresh:
    """What a run's driver knows of TFHE encryption before the workers build their encryptor: the
    counterpart of a pixel strategy (:mod:`hecore.encrypt.strategies`) with nothing to prepare or
    scan -- every value is encrypted fresh (with the client key, or the compact public key for
    ``compact``), in ``encoding``."""

    name = "fresh"
    needs_scan = False
    security = SECURITY_IND_CPA

    def __init__(self, encoding: str = "seeded"):
        if encoding not in PER_VALUE + ("compact",):
            raise ValueError(f"TFHE encoding {encoding!r}: choose one of {', '.join(PER_VALUE)}, compact")
        self.encoding = encoding

    @property
    def label(self) -> str:
        return strategy_name(self.encoding)

    def prepare(self, counts=None) -> "TfheFresh":
        return self

    def state(self) -> None:
        return None

    def options(self) -> dict:
        return {}


__all__ = ["ENCODINGS", "PER_VALUE", "TfheEncryptor", "TfheFresh", "TfhePublicEncryptor", "pixel_bytes",
           "strategy_name"]
