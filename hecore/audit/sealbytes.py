"""Reading serialized SEAL 4.1 ciphertexts without a key: their shape, and their coefficients.

An uncompressed ciphertext is a 16-byte SEAL header (magic 0x5EA1, header size,
version, compression mode, total size), the parms_id (4 x uint64, which names the
level), is_ntt_form (1 byte), size (components), poly_modulus_degree N,
coeff_modulus_size (primes at this level), scale (double), correction factor
(uint64), then the coefficient array: its own 16-byte header, its length, and
``size x primes x N`` little-endian uint64 values in NTT form.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from hecore.errors import HepixError

MAGIC = 0xA15E              # SEAL_MAGIC 0xA15E: bytes 5E A1
DATA_OFFSET = 113


@dataclass(frozen=True)
class CiphertextShape:
    """What the prefix of a serialized ciphertext says."""

    parms_id: bytes
    size: int          # components (2 for a fresh ciphertext)
    n: int
    primes: int
    scale: float
    header_len: int

    @property
    def words(self) -> int:
        return self.size * self.primes * self.n

    @property
    def stride(self) -> int:
        return self.header_len + 8 * self.words


def parse_shape(ct: bytes | memoryview | np.ndarray) -> CiphertextShape:
    """The shape of one serialized ciphertext, or a :class:`HepixError` saying why it is not one."""
    raw = bytes(memoryview(ct)[:DATA_OFFSET])
    if len(raw) < DATA_OFFSET or struct.unpack_from("<H", raw, 0)[0] != MAGIC:
        raise HepixError("not a serialized SEAL ciphertext (no SEAL header)")
    if raw[5] != 0:
        raise HepixError(f"compressed ciphertext (SEAL compression mode {raw[5]}); the audit reads "
                         "uncompressed ones, as hepix writes them")
    size, n, primes = struct.unpack_from("<QQQ", raw, 49)
    scale = struct.unpack_from("<d", raw, 73)[0]
    count = struct.unpack_from("<Q", raw, 105)[0]
    if count != size * primes * n:
        raise HepixError(f"ciphertext prefix says {size} x {primes} x {n} coefficients but holds {count}")
    return CiphertextShape(parms_id=raw[16:48], size=int(size), n=int(n), primes=int(primes),
                           scale=float(scale), header_len=DATA_OFFSET)


def coefficient_rows(data: np.ndarray, offsets: np.ndarray, shape: CiphertextShape) -> np.ndarray:
    """All ciphertexts of a batch as an (count, size, primes, N) uint64 view (no copy when the
    ciphertexts sit back to back with one stride, as in an Arrow binary column)."""
    count = len(offsets) - 1
    lengths = np.diff(offsets)
    if count and (lengths != shape.stride).any():
        bad = int(np.flatnonzero(lengths != shape.stride)[0])
        raise HepixError(f"ciphertext {bad} has {int(lengths[bad])} bytes, the others {shape.stride}: "
                         "mixed parameters or levels in one group")
    start = int(offsets[0])
    block = data[start:start + count * shape.stride].reshape(count, shape.stride)
    body = block[:, shape.header_len:]
    if body.ctypes.data % 8 == 0 and shape.stride % 8 == 0:
        words = body.view(np.uint64)
    else:                  # 113-byte headers leave the coefficients unaligned: copy once
        words = np.ascontiguousarray(body).view(np.uint64)
    return words.reshape(count, shape.size, shape.primes, shape.n)


def plain_layout(data: np.ndarray, offsets: np.ndarray, params) -> tuple[np.ndarray, np.ndarray]:
    """``(data, offsets)`` as uncompressed ciphertexts of one stride: unchanged when they already
    are, else re-serialized by SEAL (compressed or seeded ciphertexts, e.g. symmetric ones)."""
    try:
        shape = parse_shape(data[int(offsets[0]):int(offsets[1])])
        if (np.diff(offsets) == shape.stride).all():
            return data, offsets
    except HepixError:
        pass
    from hecore.seal.context import uncompressed_ciphertexts

    cts = uncompressed_ciphertexts(params, (data[int(a):int(b)] for a, b in zip(offsets[:-1], offsets[1:])))
    offsets = np.r_[0, np.cumsum([len(c) for c in cts])].astype(np.int64)
    return np.frombuffer(b"".join(cts), dtype=np.uint8), offsets
