"""Whether a scheme runs an op, and why (what ``hepix plan`` prints for each op and scheme): the verdict every
scheme's planning gives (:mod:`hecore.planner` for CKKS, BFV and BGV, :mod:`hecore.tfhe.planning` for TFHE),
and the measured costs it quotes."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Support", "MEASURED_MS_PER_VALUE", "measured_cost"]


@dataclass(frozen=True)
class Support:
    """Whether ``scheme`` runs ``spec``: ``ok``, and ``why`` (the reason when not; what it computes
    and with which keys when it does)."""

    spec: str
    scheme: str
    ok: bool
    why: str

    def describe(self) -> str:
        return f"{'yes' if self.ok else 'no'}: {self.why}"


#: Measured cost per pixel value (ms) of the 8-bit ops, ``hepix bench --suite lut`` run 20261126T185532Z
#: (docs/benchmarks.md, "lut"), in one run: BFV on a full lut-16384 ciphertext (16,384 values at once, one
#: core; min/max: the min:200|max:50 chain, any full table costs the same) and TFHE's default circuits per
#: value (one thread; brightness: saturating +60, lut: gamma-0.5; min/max not measured there).  What
#: `hepix plan` quotes; a chain costs BFV one table whatever its length.
MEASURED_MS_PER_VALUE = {
    "bfv": {"threshold": 0.094, "brightness": 0.094, "lut": 0.093, "min": 0.091, "max": 0.091},
    "tfhe": {"threshold": 88.6, "brightness": 275.0, "lut": 3408.0},
}


def measured_cost(scheme: str, name: str) -> str:
    ms = MEASURED_MS_PER_VALUE.get(scheme, {}).get(name)
    if not ms:
        return ""
    return f"; measured {ms:,.0f} ms per value" if ms >= 10 else f"; measured {ms:.2g} ms per value"
