"""Checks of serialized TFHE pixel ciphertexts that come back from a party hepix does not trust.

The counterpart of :class:`hecore.checks.CiphertextChecker` for TFHE rows: before a job hands a
``ct`` cell to the native module it says whether the cell can be a ciphertext of this parameter set
(tfhe-rs's serialized ``FheUint8`` and seeded ``CompressedFheUint8`` have fixed sizes for a
parameter set: :data:`hecore.tfhe.params.TfheParams.ct_bytes`), and why not.  The native module
then deserializes with a size limit and checks the parameters (a malformed ciphertext is a
ValueError naming its index).  As for CKKS, no check tells whether a well-formed ciphertext holds
the right value.
"""
from __future__ import annotations

from ..checks import Problem
from .params import TfheParams


class TfheCiphertextChecker:
    """Refuses ``ct`` cells that are empty or of a size no ciphertext of ``params`` has."""

    def __init__(self, params: TfheParams):
        self.params = params
        self.sizes = dict(params.ct_bytes)

    def problem(self, ct) -> Problem | None:
        n = len(ct)
        if n == 0:
            return Problem("empty-ciphertext", "the ct value is empty")
        if n not in self.sizes.values():
            known = ", ".join(f"{v} ({k})" for k, v in self.sizes.items())
            return Problem("ciphertext-size", f"{n} bytes; a {self.params.name} pixel ciphertext has {known}")
        return None
