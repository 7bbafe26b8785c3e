"""Exact 8-bit functions on packed BFV ciphertexts: any table of the 256 pixel values, every slot at once.

BFV with the plaintext prime ``t = 65537`` computes exactly in the field F_t, slot by slot.  Every
function ``f`` of an 8-bit pixel is, on the inputs 0..255, one polynomial of degree at most 255 over
F_t: its interpolation polynomial (:func:`table_polynomial`, exact integer arithmetic, cached per
table).  A chain of pointwise 8-bit ops (the vocabulary of :mod:`hecore.tfhe.ops`: saturating
``brightness:B``, ``brightness-wrap:B``, ``threshold:T``, ``min:C``, ``max:C``, ``lut:NAME``) is one
such function (:func:`hecore.tfhe.ops.chain_table`), so a whole chain costs one polynomial evaluation,
and the tables are TFHE's own: both schemes give the same bytes.

Evaluation (:func:`evaluate_table`) is Paterson--Stockmeyer's baby-step giant-step scheme.  With
``k`` baby steps (``k`` a power of two near ``sqrt(degree)``):

* the baby powers ``x, x^2, .., x^k``, each the product of two smaller ones of least depth, so
  ``x^i`` sits at depth ``ceil(log2 i)``; only the powers that are factors of others are
  relinearised (the rest are summed as three-part ciphertexts);
* the polynomial splits into ``B`` blocks of ``k`` coefficients, ``p = sum_j q_j(x) x^(k j)``,
  each ``q_j`` a plaintext-scalar combination of baby powers (no ciphertext product);
* the blocks are joined in a binary tree, ``r = q_even + q_odd * x^(k 2^l)`` at level ``l``, with
  the giant powers ``x^(2k), x^(4k), ..`` squared from ``x^k``.

For degree 255 (``k = 16``, 16 blocks) that is 15 + 3 + 15 = 33 ciphertext products at
multiplicative depth 8.  Scalars are constant polynomials (a constant in every slot encodes to one),
for which SEAL's plaintext product costs one pass over the coefficients; each coefficient's
plaintext is encoded once per table (:class:`TablePlan`).

Every product is switched down (BFV modulus switching, which keeps the value and, while the modulus
stays well above the noise, the noise budget) to the fewest primes that still afford the products after
it (:func:`primes_for_depth`): the later products run on fewer primes, and the result is stored on two
of ``lut-16384``'s eight (32 bytes per value against 128 fresh).  The constants that decide it were
measured; the tests check on random tables that budget is left.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .spec import is_table_chain, parse_table_chain

__all__ = [
    "LUT_MODULUS",
    "Schedule",
    "TablePlan",
    "check_table",
    "evaluate_polynomial_plain",
    "evaluate_table",
    "schedule",
    "table_plan",
    "table_polynomial",
]

#: The plaintext prime the tables are interpolated over (SEAL's 17-bit batching prime for N = 16384).
LUT_MODULUS = 65537


def check_table(table) -> np.ndarray:
    """``table`` as 256 int64 values in 0..255, or a ValueError saying what is wrong with it."""
    arr = np.asarray(table)
    if arr.shape != (256,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"an 8-bit table is 256 integers in 0..255; got shape {arr.shape}, dtype {arr.dtype}")
    if arr.min() < 0 or arr.max() > 255:
        raise ValueError(f"an 8-bit table holds values in 0..255; got {int(arr.min())}..{int(arr.max())}")
    return arr.astype(np.int64)


@functools.lru_cache(maxsize=64)
def _polynomial(table_bytes: bytes, t: int) -> tuple[int, ...]:
    ys = list(table_bytes)
    n = len(ys)
    # Newton's divided differences on the nodes 0..n-1: the node gaps are small integers, inverted mod t.
    coef = [y % t for y in ys]
    for level in range(1, n):
        for i in range(n - 1, level - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) * pow(level, -1, t) % t
    # Newton form to monomial form: p = c0 + (x - 0)(c1 + (x - 1)(c2 + ...)), Horner from the inside.
    poly = [0] * n
    for i in range(n - 1, -1, -1):
        # poly <- poly * (x - i) + coef[i]
        for d in range(n - 1, 0, -1):
            poly[d] = (poly[d - 1] - i * poly[d]) % t
        poly[0] = (coef[i] - i * poly[0]) % t
    return tuple(poly)


def table_polynomial(table, t: int = LUT_MODULUS) -> tuple[int, ...]:
    """The coefficients ``a_0 .. a_255`` (in 0..t-1, lowest first) of the unique polynomial of degree
    <= 255 over F_t that maps ``x`` to ``table[x]`` for every ``x`` in 0..255.  Exact (Python integers)."""
    arr = check_table(table)
    if t <= 255:
        raise ValueError(f"the plaintext modulus t = {t} must be a prime above 255 to interpolate 256 points")
    return _polynomial(arr.astype(np.uint8).tobytes(), int(t))


def evaluate_polynomial_plain(coeffs: Sequence[int], xs, t: int = LUT_MODULUS) -> np.ndarray:
    """The polynomial on plaintext integers ``xs`` mod ``t`` (Horner in int64; a check of the interpolation)."""
    xs = np.asarray(xs, dtype=np.int64) % t
    acc = np.zeros_like(xs)
    for a in reversed(coeffs):
        acc = (acc * xs + int(a)) % t
    return acc


def _degree(coeffs: Sequence[int]) -> int:
    nz = [i for i, a in enumerate(coeffs) if a]
    return nz[-1] if nz else 0


@dataclass(frozen=True)
class Schedule:
    """The baby-step giant-step shape of one degree: ``k`` baby steps, ``blocks`` blocks (a power of two)."""

    degree: int
    k: int
    blocks: int

    @property
    def giants(self) -> int:
        """Tree levels (giant powers ``x^k, x^(2k), ..``)."""
        return self.blocks.bit_length() - 1

    @property
    def depth(self) -> int:
        """Multiplicative depth of the result (0 for a constant, 1 for a linear polynomial's scalar only)."""
        if self.degree <= 1:
            return 0
        base = (min(self.k, self.degree) - 1).bit_length()           # the deepest baby power used
        return base if self.blocks == 1 else (self.k - 1).bit_length() + self.giants

    @property
    def multiplications(self) -> int:
        """Ciphertext products: ``k - 1`` baby powers, ``giants - 1`` squarings, ``blocks - 1`` tree joins
        (an upper bound: empty blocks cost none)."""
        if self.blocks == 1:
            return max(0, min(self.k, self.degree) - 1)
        return (self.k - 1) + (self.giants - 1) + (self.blocks - 1)


def schedule(degree: int) -> Schedule:
    """The cheapest shape for ``degree`` (fewest products, then least depth) among powers of two ``k``."""
    if degree <= 1:
        return Schedule(degree, 1, 1)
    best = None
    for log_k in range(degree.bit_length() + 1):
        k = 1 << log_k
        blocks = 1 << max(0, (-(-(degree + 1) // k) - 1).bit_length())
        s = Schedule(degree, k, blocks)
        key = (s.multiplications, s.depth)
        if best is None or key < best[0]:
            best = (key, s)
    return best[1]


#: Noise budget (bits) one BFV product with its scalar combinations spends at N = 16384, t = 65537:
#: measured 29..31 bits per product (lut-16384: 365 bits fresh; a depth-8 table without switching leaves ~114).
PRODUCT_BITS = 32
#: How far below ``log2(q)`` a switch to the modulus ``q`` leaves the budget: ``log2 t`` plus the
#: rounding noise of the switch (~12 bits measured at N = 16384), with room to spare.
SWITCH_GAP_BITS = 17 + 16
#: The budget the result keeps (bits): decryption is exact while it is above 0.
MARGIN_BITS = 16


def primes_for_depth(params, depth: int, total: int) -> int:
    """How many data primes a ciphertext at multiplicative ``depth`` of a ``total``-deep evaluation keeps:
    the fewest whose modulus still affords the products to come (BFV modulus switching keeps the
    budget until the modulus gets close to it, and every product after is cheaper)."""
    need = SWITCH_GAP_BITS + PRODUCT_BITS * (total - depth) + MARGIN_BITS
    sizes = params.qi_sizes[:params.data_primes]
    keep, bits = 0, 0
    while keep < len(sizes) and bits < need:
        bits += sizes[keep]
        keep += 1
    return max(1, keep)


class TablePlan:
    """One table ready to run on an evaluator: its polynomial, shape and encoded scalars (built once per
    table and evaluator, :func:`table_plan`)."""

    def __init__(self, ev, table):
        t = ev.params.plain_modulus
        self.ev = ev
        self.table = check_table(table)
        self.coeffs = table_polynomial(self.table, t)
        self.shape = schedule(_degree(self.coeffs))
        half = t // 2
        self._centred = [a - t if a > half else a for a in self.coeffs]   # smaller noise for |a| < t/2
        self._plain = {}

    def settle(self, c, depth: int, relinearize: bool):
        """``c`` (a product at ``depth``) switched down to the primes its depth keeps, then relinearised
        when asked (the relinearisation is cheaper on fewer primes)."""
        ev, params = self.ev, self.ev.params
        level = params.data_primes - primes_for_depth(params, depth, self.shape.depth)
        if level > ev.level(c):
            c = ev.mod_switch(c, level - ev.level(c))
        return ev.relinearize_if_needed(c) if relinearize else c

    def plain(self, value: int):
        """The encoded constant ``value`` (every slot), cached."""
        p = self._plain.get(value)
        if p is None:
            p = self._plain[value] = self.ev.encode(value)
        return p

    def coefficient(self, i: int) -> int:
        return self._centred[i] if i < len(self._centred) else 0


@functools.lru_cache(maxsize=16)
def _plans(ev) -> dict:
    return {}


def table_plan(ev, table) -> TablePlan:
    """The :class:`TablePlan` of ``table`` on ``ev``, cached per evaluator (a worker runs one table on many
    ciphertexts)."""
    arr = check_table(table)
    cache = _plans(ev)
    key = arr.astype(np.uint8).tobytes()
    plan = cache.get(key)
    if plan is None:
        plan = cache[key] = TablePlan(ev, arr)
    return plan


def _baby_powers(plan: TablePlan, x, k: int) -> list:
    """``[None, x, x^2, .., x^k]``: ``x^i = x^p * x^(i-p)`` with ``p`` the largest power of two below ``i``;
    a power is relinearised only when it is a factor of a later one (a power of two, or below ``k / 2``)."""
    ev = plan.ev
    pows = [None, x]
    for i in range(2, k + 1):
        p = 1 << (i.bit_length() - 1)
        a, b = (pows[p // 2], pows[p // 2]) if p == i else (pows[p], pows[i - p])
        factor = p == i or i < k // 2
        pows.append(plan.settle(ev.multiply_raw(a, b, relinearize=False), (i - 1).bit_length(), factor))
    return pows


def _block(plan: TablePlan, pows: list, j: int, k: int):
    """``q_j(x) = sum_i a_(jk+i) x^i`` as a ciphertext (None when every coefficient is zero)."""
    ev = plan.ev
    acc = None
    for i in range(1, k):
        a = plan.coefficient(j * k + i)
        if a and i < len(pows):
            acc = ev.add_into(acc, ev.multiply_scalar(pows[i], plan.plain(a)))
    a0 = plan.coefficient(j * k)
    if acc is None:
        return None if not a0 else ("const", a0)
    return ev.add_plain(acc, plan.plain(a0)) if a0 else acc


def _join(plan, low, high, giant, depth: int):
    """``low + high * giant`` with ``low``/``high`` ciphertexts, ("const", a) or None; the product lands at
    ``depth``."""
    ev = plan.ev
    if high is None:
        return low
    if isinstance(high, tuple):
        prod = ev.multiply_scalar(giant, plan.plain(high[1]))
    else:
        prod = plan.settle(ev.multiply_raw(ev.relinearize_if_needed(high), giant, relinearize=False), depth, False)
    if low is None:
        return prod
    if isinstance(low, tuple):
        return ev.add_plain(prod, plan.plain(low[1]))
    return ev.add_into(prod, ev.match_level(low, prod))


def evaluate_table(ev, x, table):
    """``table[x]`` in every slot of the BFV ciphertext ``x`` whose slots hold 0..255 (relinearisation key
    only; no secret).  The result is relinearised (two parts), ready to store."""
    if not ev.params.is_bfv:
        raise ValueError(f"an 8-bit table runs on BFV keys (lut-16384), not on {ev.params.name} "
                         f"({ev.params.scheme.upper()})")
    plan = table_plan(ev, table)
    s = plan.shape
    if s.degree == 0:
        return ev.constant_like(x, plan.coefficient(0))
    if s.degree == 1:
        out = ev.multiply_scalar(x, plan.plain(plan.coefficient(1)))
        return ev.add_plain(out, plan.plain(plan.coefficient(0))) if plan.coefficient(0) else out
    pows = _baby_powers(plan, x, min(s.k, s.degree))
    top = pows[min(s.k, s.degree + 1) - 1]       # the deepest power a block uses: every block at its level
    pows = [None] + [ev.match_level(p, top) for p in pows[1:s.k]] + pows[s.k:]
    level = [_block(plan, pows, j, s.k) for j in range(s.blocks)]
    giant = pows[s.k] if s.blocks > 1 else None
    depth = (s.k - 1).bit_length()              # the blocks' depth (their deepest baby power)
    giant_depth = (s.k - 1).bit_length()
    while len(level) > 1:
        depth = max(depth, giant_depth) + 1
        level = [_join(plan, level[i], level[i + 1], giant, depth) for i in range(0, len(level), 2)]
        if len(level) > 1:
            giant_depth += 1
            giant = plan.settle(ev.multiply_raw(giant, giant, relinearize=False), giant_depth, True)
    out = level[0]
    if out is None or isinstance(out, tuple):       # every non-constant block vanished: impossible for degree > 1
        raise AssertionError("a table of degree > 1 evaluated to a constant")
    return ev.relinearize_if_needed(out)


# --- the op vocabulary on SEAL keys: a chain of 8-bit ops is one table ------------------------------

#: The layouts tables run in: one pixel value per slot.
TABLE_LAYOUT = "packed"


def chain_of(specs: Sequence[str]) -> np.ndarray:
    """The 256-entry table of a chain of 8-bit op specs (saturating after every op, as TFHE)."""
    from hecore.tfhe.ops import chain_table

    return chain_table(parse_table_chain(specs))


def check_table_input(done: Sequence[str], layout: str) -> None:
    """Refuse a table chain in a layout other than the packed one, or on ciphertexts already processed: their
    slots may hold values other than 8-bit pixels, and a table's output has spent its noise budget (it is
    switched down to the few primes decryption needs).  The message says what to do."""
    if str(layout) != TABLE_LAYOUT:
        raise ValueError(f"8-bit tables (threshold, min, max, lut) run on BFV in the {TABLE_LAYOUT} layout (one "
                         f"pixel per slot), not {layout}; encrypt with --layout {TABLE_LAYOUT}")
    if done and is_table_chain(done):
        raise ValueError(f"the input already ran the table {' | '.join(done)}, which spent its ciphertexts' noise "
                         "budget; give the whole chain to one `hepix process` run (repeat --op): it is folded "
                         "into one table")
    if done:
        raise ValueError(f"the input was processed with {' | '.join(done)}, after which its slots are no longer "
                         "8-bit pixels; run the table chain on `hepix encrypt` output, with brightness in the "
                         "chain (it saturates there)")


def evaluate_chain(ev, x, specs: Sequence[str]):
    """The chain ``specs`` folded into one table, on the BFV ciphertext ``x``."""
    return evaluate_table(ev, x, chain_of(specs))
