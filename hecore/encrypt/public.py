"""Fresh public-key encryption of slot rows: what anyone holding the public key can do (IND-CPA)."""
from __future__ import annotations

import numpy as np

from hecore.ciphertexts import SECURITY_IND_CPA, CiphertextBatch
from hecore.seal.context import HEContext

from .base import Encryptor


class PublicKeyEncryptor(Encryptor):
    """Encode and public-key encrypt every row afresh (SEAL through Pyfhel), serialized uncompressed.

    Real rows fill one value per slot (BFV/BGV: integers); complex rows (CKKS) two reals per slot.
    """

    name = "fresh"
    security = SECURITY_IND_CPA

    def __init__(self, ctx: HEContext):
        self.ctx = ctx
        self.params = ctx.params

    def encrypt(self, rows) -> CiphertextBatch:
        rows = np.asarray(rows)
        if rows.ndim == 1:
            rows = rows[None, :]
        if rows.ndim != 2 or rows.shape[1] > self.params.slots:
            raise ValueError(f"rows must have shape (n, k <= {self.params.slots}), got {rows.shape}")
        one = self.ctx.encrypt_complex if np.iscomplexobj(rows) else self.ctx.encrypt_vector
        return CiphertextBatch.from_list([one(row) for row in rows], self.name, self.security)
