"""Operations on TFHE pixel ciphertexts with the server key only (the cluster's side).

The server key cannot decrypt.  Each call takes a batch of serialized ciphertexts (``FheUint8``, or
seeded ``CompressedFheUint8`` as encrypted), runs one op on every one of them in the native module
with the GIL released, and returns serialized ``FheUint8`` results, which are clean (empty carries,
nominal noise) and so can go through any number of further ops.

:meth:`TfheEvaluator.process` is what a processing task calls on one tile channel: a
:class:`~hecore.ciphertexts.CiphertextBatch` in (any encoding), the op chain applied (fused into
one cheaper op where the chain's 8-bit function is one, :func:`hecore.tfhe.ops.fuse`), a batch out
in the requested encoding -- ``list`` (one compressed list, 60 to 90 bytes a value) or ``full``
(one ``FheUint8`` per value, 66 KB each).
"""
from __future__ import annotations

import os

from ..ciphertexts import SECURITY_IND_CPA, CiphertextBatch
from .decryptor import as_bytes_list
from .encryptor import strategy_name
from .keys import read_public
from .native import native_module
from .ops import TfheOp, fuse, parse_op
from .params import TFHE_DEFAULT, TfheParams, TfhePublicMaterial

#: Circuits of the native module.  ``nibble`` (the default) is the fastest exact one for every op;
#: the others are kept for measurement: ``table`` (the op's 256-entry table through the generic
#: table circuit), ``tfhe-rs`` (tfhe-rs's integer operations), ``tfhe-rs-min-add`` (saturating add
#: as scalar_min/max then add), ``tfhe-rs-table`` (tfhe-rs's match_value over all 256 inputs).
CIRCUITS = ("nibble", "table", "tfhe-rs", "tfhe-rs-min-add", "tfhe-rs-table")
DEFAULT_CIRCUIT = "nibble"
#: Encodings :meth:`TfheEvaluator.process` writes (a computed ciphertext has no seed).
OUTPUTS = ("list", "full")


class TfheEvaluator:
    """Evaluates :mod:`hecore.tfhe.ops` operations on ciphertexts with a server key."""

    def __init__(self, server_key: bytes, *, threads: int = 1, params: TfheParams = TFHE_DEFAULT):
        self.native_key = native_module().ServerKey(server_key)
        self.threads = threads
        self.params = params

    @classmethod
    def from_public(cls, public: TfhePublicMaterial, **kwargs) -> TfheEvaluator:
        """From the public material (what a processing job is broadcast)."""
        return cls(public.server_key, params=public.params, **kwargs)

    @classmethod
    def from_key_directory(cls, keys: str | os.PathLike, **kwargs) -> TfheEvaluator:
        """From a TFHE key directory's ``server.key`` (never opens ``client.key``)."""
        return cls.from_public(read_public(keys), **kwargs)

    def __repr__(self) -> str:
        return f"TfheEvaluator({self.params.name}, threads={self.threads})"

    def apply(self, op: TfheOp | str, cts, *, circuit: str = DEFAULT_CIRCUIT) -> list[bytes]:
        """``op`` (an op object or a spec such as ``threshold:128``) on every ciphertext of ``cts``."""
        if isinstance(op, str):
            op = parse_op(op)
        if circuit not in CIRCUITS:
            raise ValueError(f"unknown circuit {circuit!r}; expected one of {', '.join(CIRCUITS)}")
        return self.native_key.apply(op.native_op, as_bytes_list(cts), constant=op.constant, table=op.native_table,
                                     threads=self.threads, circuit=circuit)

    def apply_chain(self, ops, cts, *, circuit: str = DEFAULT_CIRCUIT, fused: bool = True) -> list[bytes]:
        """The ops in order (each a spec or an op object); with ``fused`` a chain whose 8-bit function
        is one cheaper op runs as that op (:func:`hecore.tfhe.ops.fuse`: same result, fewer bootstraps)."""
        ops = [parse_op(op) if isinstance(op, str) else op for op in ops]
        out = as_bytes_list(cts)
        for op in (fuse(ops) if fused else ops):
            out = self.apply(op, out, circuit=circuit)
        return out

    def process(self, batch, ops, *, encoding: str = "seeded", output: str = "list",
                fused: bool = True) -> CiphertextBatch:
        """One tile channel through the op chain: ``batch`` (a :class:`CiphertextBatch` or ciphertext
        bytes) in ``encoding`` (``seeded``/``full``: one per value; ``list``: compressed lists, expanded
        first), the ops applied, the results in ``output`` encoding (``list``: one compressed list for
        the whole batch; ``full``: one ``FheUint8`` per value).  An empty chain re-encodes."""
        if output not in OUTPUTS:
            raise ValueError(f"unknown TFHE output encoding {output!r}; choose one of {', '.join(OUTPUTS)}")
        cts = as_bytes_list(batch)
        if encoding == "list":
            cts = [ct for blob in cts for ct in self.expand(blob)]
        out = self.apply_chain(ops, cts, fused=fused) if ops else cts
        if output == "list":
            return CiphertextBatch.from_list([self.compress(out)], strategy_name("list"), SECURITY_IND_CPA)
        if not ops and encoding == "seeded":
            out = self.expand(self.compress(out))     # seeded in, full out: expanded by a round trip
        return CiphertextBatch.from_list(out, strategy_name("full"), SECURITY_IND_CPA)

    def compress(self, cts) -> bytes:
        """Serialized ciphertexts in one serialized ``CompressedCiphertextList``."""
        return self.native_key.compress(as_bytes_list(cts), threads=self.threads)

    def expand(self, data: bytes) -> list[bytes]:
        """The items of a serialized ``CompressedCiphertextList`` as serialized ``FheUint8``s."""
        return self.native_key.expand(bytes(data), threads=self.threads)
