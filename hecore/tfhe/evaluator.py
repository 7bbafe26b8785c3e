"""Operations on TFHE pixel ciphertexts with the server key only (the cluster's side).

The server key cannot decrypt.  Each call takes a batch of serialized ciphertexts (``FheUint8``,
or seeded ``CompressedFheUint8`` as encrypted), runs one op on every one of them in the native
module with the GIL released, and returns serialized ``FheUint8`` results, which are clean (empty
carries, nominal noise) and so can go through any number of further ops.
"""
from __future__ import annotations

import os

from .keys import read_server_key
from .native import native_module
from .ops import TfheOp, parse_op

#: Circuits of the native module.  ``nibble`` (the default) is the fastest exact one for every op;
#: the others are kept for measurement: ``table`` (the op's 256-entry table through the generic
#: table circuit), ``tfhe-rs`` (tfhe-rs's integer operations), ``tfhe-rs-min-add`` (saturating add
#: as scalar_min/max then add), ``tfhe-rs-table`` (tfhe-rs's match_value over all 256 inputs).
CIRCUITS = ("nibble", "table", "tfhe-rs", "tfhe-rs-min-add", "tfhe-rs-table")
DEFAULT_CIRCUIT = "nibble"


class Evaluator:
    """Evaluates :mod:`hecore.tfhe.ops` operations on ciphertexts with a server key."""

    def __init__(self, server_key: bytes, *, threads: int = 1):
        self.native_key = native_module().ServerKey(server_key)
        self.threads = threads

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> "Evaluator":
        """From a TFHE key directory's ``server.key`` (never opens ``client.key``)."""
        return cls(read_server_key(keys), **kwargs)

    def __repr__(self) -> str:
        return f"Evaluator(threads={self.threads})"

    def apply(self, op: TfheOp | str, cts, *, circuit: str = DEFAULT_CIRCUIT) -> list[bytes]:
        """``op`` (an op object or a spec such as ``threshold:128``) on every ciphertext of ``cts``."""
        if isinstance(op, str):
            op = parse_op(op)
        if circuit not in CIRCUITS:
            raise ValueError(f"unknown circuit {circuit!r}; expected one of {', '.join(CIRCUITS)}")
        return self.native_key.apply(op.native_op, list(cts), constant=op.constant, table=op.native_table,
                                     threads=self.threads, circuit=circuit)

    def apply_chain(self, ops, cts, *, circuit: str = DEFAULT_CIRCUIT) -> list[bytes]:
        """The ops in order (each a spec or an op object)."""
        out = list(cts)
        for op in ops:
            out = self.apply(op, out, circuit=circuit)
        return out

    def compress(self, cts) -> bytes:
        """Serialized ciphertexts in one serialized ``CompressedCiphertextList``."""
        return self.native_key.compress(list(cts), threads=self.threads)

    def expand(self, data: bytes) -> list[bytes]:
        """The items of a serialized ``CompressedCiphertextList`` as serialized ``FheUint8``s."""
        return self.native_key.expand(data, threads=self.threads)
