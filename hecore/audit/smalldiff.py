"""Test 4: small-difference decoding -- the attack on Zinc ("At Least Factor-of-Two Optimization for RWLE-Based Homomorphic Encryption").

Zinc outputs are ``(b + Delta m + e1, a + e2)`` for one cached ``(b, a)``: the
second components of two outputs differ by the small ``e2 - e2'``, and the
difference of the first components is ``Delta (m - m') + e1 - e1'``, which CKKS
decoding (public parameters only) turns into ``m - m'`` up to ~1e-6.

Finding the pairs: the sum of the N NTT values of a polynomial modulo q is
N times its constant coefficient, so ``t = sum(c1) / N mod q`` is the constant
coefficient of the second component, and two ciphertexts whose ``t`` differ by a
small number, consistently modulo every prime, are candidates.  Candidates are
confirmed by decoding the whole difference of second components: small
polynomials decode to ~1e-7, anything else to ~2^40 and more.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Largest |constant coefficient| of a difference of second components still called small.
CONSTANT_BOUND = 1 << 16
#: Largest |decoded slot| x scale of a confirmed small difference (a small polynomial's embedding).
EMBEDDING_BOUND = float(1 << 24)


@dataclass
class SmallDiffResult:
    candidates: int = 0                     # ciphertexts in a group of near-equal constant coefficients
    confirmed: int = 0                      # ... whose second-component difference decodes as small
    groups: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)
    # per confirmed group: (anchor, members, decoded first-component differences (members x slots))


def constant_coefficients(second: np.ndarray, primes: tuple[int, ...]) -> np.ndarray:
    """Centred constant coefficient of every second component, per prime: (count, primes) int64.

    ``second``: (count, primes, N) uint64, NTT form."""
    count, k, n = second.shape
    out = np.empty((count, k), dtype=np.int64)
    for j, q in enumerate(primes):
        hi = (second[:, j, :] >> np.uint64(32)).sum(axis=1, dtype=np.uint64)
        lo = (second[:, j, :] & np.uint64(0xFFFFFFFF)).sum(axis=1, dtype=np.uint64)
        inv_n = pow(n, -1, q)
        for i in range(count):
            t = ((int(hi[i]) << 32) + int(lo[i])) * inv_n % q
            out[i, j] = t - q if t > q // 2 else t
    return out


def small_differences(rows: np.ndarray, primes: tuple[int, ...], decode, scale: float,
                      max_confirm: int = 20000) -> SmallDiffResult:
    """Find ciphertexts whose second components differ from an anchor's by a small polynomial,
    and decode their first-component differences.

    ``rows``: (count, 2, primes, N) uint64 of distinct ciphertexts; ``decode(coefficients)``
    decodes a (primes, N) NTT-form polynomial at their level and scale into complex slots."""
    res = SmallDiffResult()
    if rows.shape[0] < 2 or rows.shape[1] != 2:
        return res
    q = np.array(primes, dtype=np.uint64)[:, None]
    t = constant_coefficients(rows[:, 1], primes)
    order = np.argsort(t[:, 0], kind="stable")
    gaps = np.diff(t[order, 0])
    breaks = np.r_[0, np.flatnonzero(gaps > CONSTANT_BOUND) + 1, len(order)]
    budget = max_confirm
    for s, e in zip(breaks[:-1], breaks[1:]):
        if e - s < 2:
            continue
        members = order[s:e]
        anchor = members[0]
        # every prime must agree on the (small) difference of constant coefficients
        consistent = (t[members] - t[anchor] == (t[members, :1] - t[anchor, 0])).all(axis=1)
        members = members[consistent][1:]
        res.candidates += len(members) + 1
        ok, diffs = [], []
        for m in members[: max(budget, 0)]:
            d1 = (rows[m, 1] + (q - rows[anchor, 1])) % q
            budget -= 1
            if np.abs(decode(d1)).max() * scale > EMBEDDING_BOUND:
                continue
            d0 = (rows[m, 0] + (q - rows[anchor, 0])) % q
            ok.append(m)
            diffs.append(decode(d0))
        if ok:
            res.confirmed += len(ok) + 1
            res.groups.append((int(anchor), np.array(ok), np.array(diffs)))
    return res
