"""Checks of serialized TFHE pixel ciphertexts that come back from a party hepix does not trust.

The counterpart of :class:`hecore.seal.checks.CiphertextChecker` for TFHE rows: before a job hands a
``ct`` cell to the evaluator or the decryptor it says whether the cell is a ciphertext of this
parameter set, and why not (a reason for the ``rejects`` table and a detail):

* ``empty-ciphertext``: no bytes;
* ``ciphertext-size``: a size no pixel ciphertext of the parameter set has (tfhe-rs's serialized
  ``FheUint8`` and seeded ``CompressedFheUint8`` have fixed sizes:
  :data:`hecore.tfhe.params.TfheParams.ct_bytes`), so nothing larger reaches tfhe-rs;
* ``tfhe-refused``: tfhe-rs's safe deserialization refuses it (a versioned header naming another
  type, malformed data) or its conformance check does (another LWE dimension, block count, degree
  or noise level than the parameters give) -- the same load the evaluator and the decryptor make
  before they use a ciphertext, here made without a key (``hepix_tfhe.check_pixels``), so a bad
  cell is a rejects row instead of an error that stops a whole batch.

As for CKKS, no check tells whether a well-formed ciphertext holds the right value: a party with
the server key can compute an encryption of anything (see docs/threat-model.md).
"""
from __future__ import annotations

from ..errors import Problem
from .native import native_module
from .params import TfheParams

#: How much of tfhe-rs's message a rejects row keeps.
_DETAIL_CHARS = 240


class TfheCiphertextChecker:
    """Refuses ``ct`` cells that are empty, of a size no ciphertext of ``params`` has, or that tfhe-rs
    does not load as a pixel ciphertext conformant with ``params``."""

    def __init__(self, params: TfheParams, threads: int = 1):
        self.params = params
        self.sizes = dict(params.ct_bytes)
        self.max_bytes = max(self.sizes.values())   # the largest cell a row of these parameters holds
        self.threads = threads

    def _size_problem(self, ct) -> Problem | None:
        n = len(ct)
        if n == 0:
            return Problem("empty-ciphertext", "the ct value is empty")
        if n not in self.sizes.values():
            known = ", ".join(f"{v} ({k})" for k, v in self.sizes.items())
            return Problem("ciphertext-size", f"{n} bytes; a {self.params.name} pixel ciphertext has {known}")
        return None

    def problem(self, ct) -> Problem | None:
        """None when ``ct`` is a pixel ciphertext of these parameters, else what is wrong with it."""
        return self.problems([ct])[0]

    def problems(self, cts) -> list[Problem | None]:
        """:meth:`problem` of every ciphertext of ``cts``, with one native call for those of the right size."""
        out = [self._size_problem(ct) for ct in cts]
        sized = [i for i, p in enumerate(out) if p is None]
        if sized:
            refusals = native_module().check_pixels([bytes(cts[i]) for i in sized], threads=self.threads)
            for i, why in zip(sized, refusals):
                if why is not None:
                    out[i] = Problem("tfhe-refused", f"tfhe-rs refuses the ciphertext ({len(cts[i])} bytes): "
                                                     f"{why[:_DETAIL_CHARS]}")
        return out
