"""A table of cached ciphertexts as one uint64 array (one row per ciphertext)."""
from __future__ import annotations

import numpy as np

from ..context import HEContext


def encrypt_rows(ctx: HEContext, values) -> np.ndarray:
    """Fresh encryptions of ``values``, as coefficient rows of shape (len(values), words)."""
    layout = ctx.layout
    values = list(values)
    table = np.empty((len(values), layout.words), dtype=np.uint64)
    for i, v in enumerate(values):
        table[i] = layout.coefficients(ctx.encrypt_value(float(v)))
    return table
