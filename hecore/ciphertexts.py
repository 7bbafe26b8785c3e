"""Serialized ciphertexts: their byte format, and batches of them in one buffer.

A SEAL/Pyfhel CKKS ciphertext serialized without compression is a fixed
prefix (SEAL header, parms_id, size, degree, scale, ...; 113 bytes in SEAL 4.1)
followed by ``2 x P x N`` little-endian uint64 coefficients: two components,
``P`` data primes, ``N`` coefficients each, in NTT form.  The prefix is
byte-identical for every fresh ciphertext of one context, scale and level.
That is what lets the cached strategies add ciphertexts with NumPy/numba,
modulo each prime, and still produce bytes that Pyfhel loads and decrypts.

A :class:`CiphertextBatch` keeps many such ciphertexts back to back in one
contiguous ``uint8`` buffer with an offsets array: exactly the buffers of an
Arrow ``binary`` column, so it becomes a ``pyarrow.BinaryArray`` without a copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

SECURITY_IND_CPA = "ind-cpa"
SECURITY_LEAKS = "leaks"
#: The ``strategy`` of a batch read back from a table (its rows' own labels are in the table).
READ_BACK = "read-back"


@dataclass(frozen=True)
class CiphertextFormat:
    """Where the coefficients of a fresh serialized ciphertext sit, and modulo what."""

    header: bytes          # the constant prefix of every fresh ciphertext
    primes: tuple[int, ...]  # data primes, in storage order
    n: int                 # ring degree

    @property
    def header_len(self) -> int:
        return len(self.header)

    @property
    def words(self) -> int:
        """uint64 coefficients per ciphertext: 2 components x primes x n."""
        return 2 * len(self.primes) * self.n

    @property
    def stride(self) -> int:
        """Bytes per serialized ciphertext."""
        return self.header_len + 8 * self.words

    def header_array(self) -> np.ndarray:
        """The header as a writable uint8 array (what the kernels take)."""
        return np.frombuffer(self.header, dtype=np.uint8).copy()

    def q_array(self) -> np.ndarray:
        return np.array(self.primes, dtype=np.uint64)

    def coefficients(self, ct: bytes | memoryview | np.ndarray) -> np.ndarray:
        """The uint64 coefficients of one serialized ciphertext (a copy, aligned).

        Raises ValueError when the bytes are not a fresh ciphertext of this format.
        """
        raw = np.frombuffer(ct, dtype=np.uint8)
        if raw.size != self.stride:
            raise ValueError(
                f"ciphertext has {raw.size} bytes; this context's fresh ciphertexts have {self.stride}"
            )
        if raw[: self.header_len].tobytes() != self.header:
            raise ValueError("ciphertext header differs from this context's fresh-ciphertext header "
                             "(other parameters, scale or level)")
        out = np.empty(self.words, dtype=np.uint64)
        out.view(np.uint8)[:] = raw[self.header_len:]
        return out


class CiphertextBatch:
    """Serialized ciphertexts back to back in one buffer, with their security label.

    ``data`` is a ``uint8`` array, ``offsets`` an ``int64`` array of ``len + 1``
    positions.  ``strategy`` and ``security`` say how the ciphertexts were made
    (``security`` is ``"ind-cpa"`` or ``"leaks"``) and travel with them into
    every table row.
    """

    __slots__ = ("data", "offsets", "strategy", "security")

    def __init__(self, data: np.ndarray, offsets: np.ndarray, strategy: str, security: str):
        if security not in (SECURITY_IND_CPA, SECURITY_LEAKS):
            raise ValueError(f"security label {security!r} is neither {SECURITY_IND_CPA!r} nor {SECURITY_LEAKS!r}")
        self.data = data
        self.offsets = offsets
        self.strategy = strategy
        self.security = security

    @classmethod
    def uniform(cls, data: np.ndarray, count: int, stride: int, strategy: str, security: str):
        """A batch of ``count`` ciphertexts of ``stride`` bytes each at the start of ``data``."""
        offsets = np.arange(count + 1, dtype=np.int64) * stride
        return cls(data[: count * stride], offsets, strategy, security)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> memoryview:
        return memoryview(self.data[self.offsets[i]: self.offsets[i + 1]])

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def slice(self, start: int, stop: int) -> "CiphertextBatch":
        """Ciphertexts ``start`` to ``stop - 1`` as a batch sharing this one's buffer (no copy)."""
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"slice {start}:{stop} of a batch of {len(self)} ciphertexts")
        return CiphertextBatch(self.data, self.offsets[start:stop + 1], self.strategy, self.security)

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    def copy(self) -> "CiphertextBatch":
        """A batch that owns its memory (use when the source buffer will be reused)."""
        start = int(self.offsets[0])
        data = self.data[start: int(self.offsets[-1])].copy()
        return CiphertextBatch(data, self.offsets - start, self.strategy, self.security)

    def to_arrow(self) -> pa.Array:
        """A zero-copy Arrow array (``binary`` if it fits 32-bit offsets, else ``large_binary``)."""
        buf = pa.py_buffer(self.data)
        if self.offsets[-1] < 2**31:
            return pa.Array.from_buffers(pa.binary(), len(self), [None, pa.py_buffer(self.offsets.astype(np.int32)), buf])
        return pa.Array.from_buffers(pa.large_binary(), len(self), [None, pa.py_buffer(self.offsets), buf])

    @classmethod
    def from_arrow(cls, arr: pa.Array, strategy: str = READ_BACK, security: str = SECURITY_LEAKS) -> "CiphertextBatch":
        """Wrap an Arrow binary array (no copy when it has no nulls and one chunk).  Ciphertexts read back
        from a table keep their labels in the table's own columns: without ``strategy`` and ``security``
        the batch is labelled :data:`READ_BACK` and, not knowing better, ``leaks``."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if arr.null_count:
            raise ValueError(f"{arr.null_count} ciphertext values are null")
        _, off_buf, data_buf = arr.buffers()
        off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        offsets = np.frombuffer(off_buf, dtype=off_type)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
        return cls(data, offsets, strategy, security)

    @classmethod
    def from_list(cls, items: list[bytes], strategy: str, security: str) -> "CiphertextBatch":
        lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(b"".join(items), dtype=np.uint8)
        return cls(data, offsets, strategy, security)
