"""Parameter planning: which scheme runs each op, and the smallest 128-bit preset that can run an op chain.

Like OpenFHE's automatic parameter selection, but over hepix's fixed,
checked presets: from the ops (and a match, if any) it derives what the
parameters must offer -- levels, relinearisation, rotations, integer
exactness, room for the largest raw value -- and returns the presets that
offer it, smallest ring (then smallest modulus) first.  :func:`check` is
what the jobs call on the key they are given: it fails with a message that
names the preset that would work.

Across schemes, :func:`support` says for every (op, scheme) pair whether that scheme can run the
op and why not: TFHE (:mod:`hecore.tfhe`) runs comparisons and any 8-bit function of a pixel
exactly (saturating brightness, ``brightness-wrap``, ``threshold``, ``min``, ``max``, ``lut``) but
not the ops that sum or scale ciphertexts (contrast, watermark, mean filter, DFT filter, matching,
inference); CKKS, BFV and BGV run those and cannot compare.  :func:`plan` with ``scheme="tfhe"``
returns TFHE's one parameter set when every op is a TFHE op.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from hecore.ops.spec import SEAL_SCHEMES, TFHE_ONLY, Match, Op, op_name, parse_table_chain, raw_range, run_kind
from hecore.tfhe.params import SCHEME as TFHE_SCHEME

from .errors import InvalidParameters
from .layouts import Layout
from .seal.params import PRESETS, Params, names_scheme
from .support import Support, measured_cost

__all__ = ["Requirements", "requirements", "problems", "plan", "check", "describe_plan", "at_rest",
           "at_rest_problems", "check_at_rest", "rounding_bound", "storage_layout", "ALL_SCHEMES", "Support",
           "support", "chain_support", "describe_support"]

#: Every scheme hepix runs, by ``--scheme`` name: the SEAL ones (presets in hecore.seal.params) and TFHE.
ALL_SCHEMES = SEAL_SCHEMES + (TFHE_SCHEME,)


#: The largest image (pixels x channels) whose exact BFV/BGV distance the bounds are checked for.
#: (CKKS divides each tile's share by the number of shares, so its sums stay at one tile's size.)
MAX_MATCH_PIXELS = 1024 * 1024 * 3


@dataclass(frozen=True)
class Requirements:
    layout: Layout
    depth: int                  # CKKS levels the chain spends
    multiplies: bool            # needs a relinearisation key
    rotations: bool             # needs Galois keys
    raw_bound: float            # largest |raw value| a fresh-level ciphertext will hold (CKKS)
    spent_bounds: tuple         # CKKS: (levels spent, largest |value| then), for the match's results
    l1_bound: float             # D, the largest raw |difference|, when L1 is asked for (CKKS scale growth); else 0
    integer_bound: float        # the same for BFV/BGV, where a distance is summed over a whole image
    fractional: list[str]       # ops whose raw constants are not integers (CKKS only)
    integer_ok: bool            # BFV/BGV can run it at all
    why_not_integer: str = ""
    wrong_layout: str = ""      # why no parameters can run it in this layout (empty: the layout is fine)
    table_depth: int | None = None   # an 8-bit table chain (hecore.ops.lut): its polynomial's depth; else None


def _raw_constants(ops: Sequence[Op]) -> list[tuple[str, float]]:
    """The raw constant each additive op adds (``value / post_scale``)."""
    out, ps = [], 1.0
    for op in ops:
        out += op.raw_constants(ps)
        ps *= op.post_scale_factor
    return out


def requirements(ops: Sequence[Op], layout: "Layout | str", match: Match | None = None) -> Requirements:
    if any(_is_table_op(op) for op in ops):
        return _table_requirements(ops, Layout.parse(layout), match)
    layout = Layout.parse(layout)
    lo, hi = raw_range(ops)
    bound = max(abs(lo), abs(hi))
    fractional = [spec for spec, c in _raw_constants(ops) if c != round(c)]
    depth, multiplies = 0, False
    packed = layout.packed
    rotations = any(op.rotates(packed) for op in ops)
    integer_ok, why = layout is Layout.PACKED, {Layout.PACKED: "", Layout.PIXEL: "the pixel layout is CKKS-only",
                                                Layout.PACKED_COMPLEX: "complex packing is CKKS-only"}[layout]
    wrong_layout = next((p for p in (op.layout_problem(layout) for op in ops) if p), "")
    if fractional and integer_ok:
        integer_ok, why = False, f"{', '.join(fractional)} add non-integer raw values"
    if match is not None:
        if layout.complex_packing:
            raise InvalidParameters(
                f"{match.spec} squares differences, which mixes the two pixels of a complex-packed slot; "
                "encrypt with --layout packed (one pixel per slot) to match")
        multiplies = True
        depth = match.depth
        rotations = rotations or packed
        d = hi - lo
        integer_bound = max(bound, d * d * MAX_MATCH_PIXELS)
        # CKKS: a tile's sum (at most N/2 = 8192 slots here) after the levels each metric spends;
        # L1 works on |d| / D <= ~1.
        spent = tuple([(1, d * d * 8192)] if "l2" in match.metrics else []) + \
            tuple([(3, 1.2 * 8192)] if "l1" in match.metrics else [])
        if "l1" in match.metrics and integer_ok:
            integer_ok, why = False, "L1 needs an approximation of |x| (CKKS)"
    else:
        integer_bound, spent = bound, ()
    # ops that spend levels themselves (hecore.ops.dft's frequency-domain filter): CKKS, packed layout
    spending = [op for op in ops if getattr(op, "depth", 0)]
    if spending:
        own = sum(op.depth for op in spending)
        depth += own
        rotations = rotations or any(op.needs_rotation for op in spending)
        names = ", ".join(op.spec.partition(",")[0] for op in spending)
        if integer_ok:
            integer_ok, why = False, f"{names} need(s) complex CKKS slots"
        if layout is not Layout.PACKED:
            integer_ok, why = False, f"{names} run(s) in the packed layout only"
            wrong_layout = (f"{names} run(s) in the packed layout only (one pixel per slot): "
                            "encrypt with --layout packed")
        # the result, at the last level spent, must fit the primes left
        spent = tuple(spent) + ((own, bound),)
    l1 = (hi - lo) if match is not None and "l1" in match.metrics else 0.0
    return Requirements(layout, depth, multiplies, rotations, bound, spent, l1, integer_bound, fractional,
                        integer_ok, why, wrong_layout)


def _is_table_op(op) -> bool:
    from hecore.tfhe.ops import TfheOp

    return isinstance(op, TfheOp.__args__)


def _table_requirements(ops, layout: Layout, match) -> Requirements:
    """An 8-bit table chain (:mod:`hecore.ops.lut`): one BFV polynomial of the chain's table, slot by slot."""
    from hecore.ops.lut import TABLE_LAYOUT, schedule, table_polynomial
    from hecore.tfhe.ops import chain_table

    if match is not None:
        raise InvalidParameters(f"{match.spec} cannot follow 8-bit table ops in one plan; match in a run of its own")
    coeffs = table_polynomial(chain_table(ops))
    depth = schedule(max([i for i, a in enumerate(coeffs) if a], default=0)).depth
    wrong = "" if layout.value == TABLE_LAYOUT else (
        f"8-bit tables run in the {TABLE_LAYOUT} layout only (one pixel per slot): encrypt with --layout "
        f"{TABLE_LAYOUT}")
    return Requirements(layout, 0, True, False, 255.0, (), 0.0, 255.0, [], True, "", wrong, depth)


def table_depth_afforded(params: Params) -> int:
    """The multiplicative depth of a table polynomial BFV ``params`` afford: the fresh noise budget (the data
    modulus less ``log2 t`` and ~24 bits of fresh noise, 365 measured on lut-16384) less the margin
    :mod:`hecore.ops.lut` keeps, over the bits a product spends (both measured there)."""
    from hecore.ops.lut import MARGIN_BITS, PRODUCT_BITS

    fresh = sum(params.qi_sizes[:params.data_primes]) - params.plain_modulus_bits - 24
    return max(0, (fresh - MARGIN_BITS) // PRODUCT_BITS)


def _table_problems(params: Params, req: Requirements) -> list[str]:
    if not params.is_integer:
        return ["CKKS cannot: an 8-bit table is exact, CKKS approximate (BFV runs it: lut-16384)"]
    if not params.is_bfv:
        return [f"hepix evaluates 8-bit tables in BFV, not {params.scheme.upper()} (lut-16384)"]
    out = []
    if not params.supports_keyswitching:
        out.append(f"{params.name} has no key switching (needed for multiplication)")
    afforded = table_depth_afforded(params)
    if req.table_depth > afforded:
        out.append(f"the table's polynomial is {req.table_depth} products deep; {params.name}'s noise budget "
                   f"affords {afforded}")
    return out


def problems(params: Params, req: Requirements) -> list[str]:
    """Why ``params`` cannot serve ``req`` (empty when it can)."""
    if req.wrong_layout:             # no parameters help: say only that
        return [req.wrong_layout]
    if req.table_depth is not None:
        return _table_problems(params, req)
    out, budget_short = [], False
    if params.is_integer:
        if not req.integer_ok:
            out.append(f"{params.scheme.upper()} cannot: {req.why_not_integer}")
        if req.integer_bound > (params.plain_modulus - 1) // 2:
            out.append(f"raw values up to {req.integer_bound:.3g} overflow t/2 = {params.plain_modulus // 2} "
                       f"(~2^{params.plain_modulus_bits - 1})")
        budget_short = req.multiplies and params.n < 8192
    else:
        if req.depth > params.depth:
            out.append(f"needs {req.depth} level(s), {params.name} has {params.depth}")
        def room(spent: int) -> int:         # log2 of the largest |value| after ``spent`` rescales
            return sum(params.qi_sizes[:max(1, params.data_primes - spent)]) - params.scale_bits - 1
        if req.raw_bound >= 2 ** room(0):
            out.append(f"raw values up to {req.raw_bound:.3g} do not fit 2^{room(0)}")
        if req.l1_bound and params.depth >= 3:
            # L1 divides by D through the scale (free), which grows it to 2^(scale + 4 log2 D) before the
            # last rescale, times a tile's sum: that must fit the primes left after two rescales.
            need = params.scale_bits + 4 * math.log2(max(req.l1_bound, 1)) + math.log2(params.slots) + 1
            have = sum(params.qi_sizes[:params.data_primes - 2])
            if need > have:
                out.append(f"L1 with differences up to {req.l1_bound:g} needs {need:.0f} bits after two rescales, "
                           f"{params.name} has {have}")
        for spent, bound in req.spent_bounds:
            if spent <= params.depth and bound >= 2 ** room(spent):
                out.append(f"values up to {bound:.3g} after {spent} rescale(s) do not fit 2^{room(spent)}")
    if (req.multiplies or req.rotations) and not params.supports_keyswitching:
        out.append(f"{params.name} has no key switching (needed for "
                   f"{'multiplication' if req.multiplies else 'rotations'})")
    if req.rotations and not params.rotations:
        out.append(f"{params.name} has no rotation keys (pointwise ops only)")
    if budget_short:
        out.append("one multiplication leaves too little noise budget below N=8192")
    return out


def _size(p: Params) -> tuple[int, int]:
    return p.n, p.total_bits


def plan(ops: Sequence[Op], layout: str, *, scheme: str | None = None, match: Match | None = None) -> list[Params]:
    """Every preset that runs the chain, smallest first (CKKS before BFV before BGV on a tie).

    ``scheme="tfhe"``: ``ops`` are TFHE ops (:func:`hecore.ops.spec.parse_chain` with ``scheme="tfhe"``)
    and the answer is TFHE's parameter set when the layout is the pixel layout and there is no match."""
    family = _family(scheme)
    if family is not None:                   # another scheme's own planning (TFHE: its one parameter set)
        return family.presets_for(ops, layout, match)
    req = requirements(ops, layout, match)
    order = {"ckks": 0, "bfv": 1, "bgv": 2}
    fits = [p for p in PRESETS.values() if (scheme is None or p.scheme == scheme) and not problems(p, req)]
    return sorted(fits, key=lambda p: (_size(p), order[p.scheme]))


def check(params: Params, ops: Sequence[Op], layout: str, match: Match | None = None) -> None:
    """Raise :class:`InvalidParameters` if ``params`` cannot run the chain, naming a preset that can."""
    req = requirements(ops, layout, match)
    why = problems(params, req)
    if not why:
        return
    chain = " | ".join([op.spec for op in ops] + ([match.spec] if match else [])) or "(no ops)"
    same = plan(ops, layout, scheme=params.scheme, match=match)
    other = plan(ops, layout, match=match)
    works = same[0] if same else (other[0] if other else None)
    hint = (f"use keys made with `hepix keygen --preset {works.name}` ({works.describe()})" if works
            else "no preset can; split the chain or use the other layout")
    raise InvalidParameters(f"{chain} in the {layout} layout cannot run on {params.name}: "
                            f"{'; '.join(why)}; {hint}")


def describe_plan(ops: Sequence[Op], layout: str, *, scheme: str | None = None, match: Match | None = None) -> str:
    """A human-readable table: every preset, whether it fits, and why not."""
    req = requirements(ops, layout, match)
    lines = []
    for p in sorted(PRESETS.values(), key=_size):
        if scheme and p.scheme != scheme:
            continue
        why = problems(p, req)
        lines.append(f"  {'ok ' if not why else 'no '} {p.name:<14} {p.describe()}"
                     + ("" if not why else f"  -- {'; '.join(why)}"))
    return "\n".join(lines)


# --- storage at rest: the level a chain needs, the scale, the bits to drop ----------------------------

#: Probability that the rounding error of one stored value exceeds its bound.  The bound is a quarter of
#: what the chain tolerates, and by the same inequality an error four times the bound has probability
#: below 2 (2^-41)^16, so no corpus comes near a wrong pixel; the tests measure the real error.
ROUNDING_FAILURE = 2.0 ** -40
#: The share of the chain's tolerance (half its grid step) the dropped bits may use; the rest is left to
#: CKKS's own noise (encryption, the rotations' key switching), measured far below it.
ROUNDING_SHARE = 0.25


def _window(ops: Sequence[Op]) -> int:
    """Over how many slot values (counted with their squared weights) a stored value's error is summed by the
    chain: the product of its windowed ops' (the mean filter's k^2)."""
    window = 1
    for op in ops:
        window *= op.error_window
    return window


def rounding_bound(n: int, scale_bits: int, drop: int, window: int = 1, key_norm: float = 1.0) -> float:
    """Bound, in raw units, on the error that dropping ``drop`` low bits of a stored polynomial adds to one
    slot value after a sum over ``window`` slots, exceeded with probability at most :data:`ROUNDING_FAILURE`.

    Rounding adds ``delta_j`` uniform in ``(-2^(d-1), 2^(d-1)]`` to each of the N coefficients, independent
    of everything else (the coefficient it rounds is uniform mod q).  A slot's real (or imaginary) part of
    the decoded error is ``sum_j delta_j Re(w_j) / scale`` with ``sum_j Re(w_j)^2 = N window / 2`` (the
    window's roots are distinct powers of a primitive 2N-th root), so Hoeffding's inequality gives
    ``P(|err| > t) <= 2 exp(-4 t^2 scale^2 / (2^(2d) N window))``.  For c1 the error is multiplied by the
    secret key's canonical embedding, bounded by ``key_norm``.
    """
    if drop <= 0:
        return 0.0
    return key_norm * 2.0 ** (drop - scale_bits) * math.sqrt(n * window * math.log(2 / ROUNDING_FAILURE) / 4)


def _key_norm(n: int) -> float:
    """A bound on |s(zeta)| for a uniform ternary secret over every slot root, exceeded with probability
    <= 2^-40 (Hoeffding over the key's N coefficients, union over the N/2 roots)."""
    return math.sqrt(2 * n * math.log(2 * n * 2.0 ** 40))


def _tolerance(ops: Sequence[Op]) -> float:
    """Half the grid step of the chain's raw results (what decryption's Finish snaps to), or 0 without a grid."""
    from hecore.ops.spec import finish_for

    finish = finish_for(list(ops))
    return float(finish.step) / 2 if finish.snaps else 0.0


def _q0_scale_bits(params: Params, raw_bound: float, layout: Layout) -> int:
    """The largest power-of-two scale at which one prime q0 holds the chain's raw values.

    A slot holds up to ``raw_bound`` (sqrt 2 of it when two pixels share a slot) and the polynomial's
    coefficients are bounded by the slots: decryption needs them below q0 / 2, and SEAL's encoder
    refuses fresh pixel values (up to 255 per part) whose coefficients reach 2^(bits(q0) - 2)."""
    grow = math.sqrt(2) if layout.complex_packing else 1.0
    q0_bits = params.qi_sizes[0]
    decode = 2.0 ** (q0_bits - 1) * (1 - 2.0 ** -20) / ((raw_bound * grow + 1.0) * 1.01)   # q0 lies just below 2^bits
    encode = 2.0 ** (q0_bits - 2) / ((255.0 * grow + 1.0) * 1.01)
    return int(math.floor(math.log2(min(decode, encode))))


def at_rest(params: Params, ops: Sequence[Op], layout: "Layout | str", match: Match | None = None, *,
            seeded: bool = True, declared: bool = True, store: str = "compact"):
    """How to store ciphertexts that will run ``ops`` (and ``match``): the lowest level that still affords the
    chain's depth, the scale that fits its raw values there, and the low bits of c0 (and of c1, unless it is
    kept as its seed: ``seeded``) that can be dropped while the rounding error stays below
    :data:`ROUNDING_SHARE` of the chain's tolerance (see :func:`rounding_bound`).

    ``store="seal"``: the same level and scale for SEAL's own serialization
    (:class:`hecore.seal.atrest.SealStoreEncryptor`),
    which drops no bits.  Without a declared chain (``declared=False``) the ciphertexts stay at the first
    level, at the preset's scale, losslessly stored: any chain the preset allows can run on them later.
    Raises :class:`InvalidParameters` when the preset cannot run the chain at all (as :func:`check`).
    """
    from hecore.seal.atrest import STORES, AtRest

    layout = Layout.parse(layout)
    if store not in STORES:
        raise InvalidParameters(f"unknown store {store!r}; choose one of {', '.join(STORES)}")
    params.ckks_only(f"levels and scales are planned for CKKS; {params.name} is {params.scheme.upper()}, whose "
                     "ciphertexts are stored at the first level" if store == "seal" else
                     f"the compact at-rest format is for CKKS; {params.name} is {params.scheme.upper()}: "
                     "store with --store seal")
    chain = tuple([op.spec for op in ops] + ([match.spec] if match else []))
    if not declared:
        return AtRest(level=0, primes=params.data_primes, scale_bits=params.scale_bits, chain=(), format=store)
    check(params, ops, layout.value, match)
    req = requirements(ops, layout, match)
    level = params.data_primes - 1 - req.depth
    primes = params.data_primes - level
    if primes > 1:      # levels left to spend: the preset's scale (its rescaling primes are sized for it), lossless
        return AtRest(level=level, primes=primes, scale_bits=params.scale_bits, chain=chain, format=store)
    # One prime, q0: the largest scale under which every raw value of the chain still decodes.
    scale_bits = _q0_scale_bits(params, req.raw_bound, layout)
    if store == "seal":     # SEAL's bytes keep every bit: nothing rounded, no error of the storage's own
        return AtRest(level=level, primes=1, scale_bits=scale_bits, tolerance=_tolerance(ops), chain=chain,
                      format=store)
    tolerance = _tolerance(ops)
    window, n = _window(ops), params.n
    drop0 = drop1 = 0
    if tolerance > 0:
        budget = ROUNDING_SHARE * tolerance * (1.0 if seeded else 0.5)
        unit = rounding_bound(n, scale_bits, 1, window) / 2.0          # the bound for drop = 0 + 1, halved
        drop0 = max(0, int(math.floor(math.log2(budget / unit))))
        if not seeded:
            drop1 = max(0, int(math.floor(math.log2(budget / (unit * _key_norm(n))))))
        drop0 = min(drop0, params.qi_sizes[0] - 2)
        drop1 = min(drop1, params.qi_sizes[0] - 2)
    bound = rounding_bound(n, scale_bits, drop0, window) + rounding_bound(n, scale_bits, drop1, window, _key_norm(n))
    return AtRest(level=level, primes=1, scale_bits=scale_bits, drop0=drop0, drop1=drop1, error_bound=bound,
                  tolerance=tolerance, chain=chain)


def storage_layout(params: Params, ops: Sequence, match: Match | None = None) -> tuple[Layout, int]:
    """The packed layout and halo that store ciphertexts for ``ops`` (and ``match``) in the fewest ciphertexts,
    what ``hepix encrypt --for-op`` picks when ``--layout`` and ``--halo`` are not given: ``packed-complex``
    (two pixels per slot) where the chain allows it -- CKKS keys, no match (it squares differences), no
    frequency-domain filter, no 8-bit table (those need one pixel per slot) -- else ``packed``; and the halo
    the chain's widest mean filter reaches (0 without one: no slot is spent on neighbours)."""
    halo = max((getattr(op, "halo", 0) for op in ops), default=0)
    if not params.complex_slots or match is not None or any(_is_table_op(op) for op in ops):
        return Layout.PACKED, halo
    try:
        req = requirements(ops, Layout.PACKED_COMPLEX)
    except InvalidParameters:
        return Layout.PACKED, halo
    if req.wrong_layout or problems(params, req):
        return Layout.PACKED, halo
    return Layout.PACKED_COMPLEX, halo


def at_rest_problems(params: Params, stored, ops: Sequence[Op], layout: "Layout | str",
                     match: Match | None = None) -> list[str]:
    """Why ciphertexts stored as ``stored`` (:class:`hecore.seal.atrest.AtRest`) cannot run ``ops`` exactly (empty when
    they can): not enough levels left, raw values beyond what the stored scale decodes, or a rounding error
    beyond the chain's share of its tolerance."""
    layout = Layout.parse(layout)
    req = requirements(ops, layout, match)
    out = []
    if req.depth > stored.primes - 1:
        out.append(f"the chain spends {req.depth} level(s); the ciphertexts were stored with {stored.primes - 1} left")
    if stored.primes == 1:
        if stored.scale_bits > _q0_scale_bits(params, req.raw_bound, layout):
            out.append(f"raw values up to {req.raw_bound:.4g} do not decode at the stored scale 2^{stored.scale_bits} "
                       f"with one {params.qi_sizes[0]}-bit prime")
        if stored.drop0 or stored.drop1:
            window, n = _window(ops), params.n
            bound = (rounding_bound(n, stored.scale_bits, stored.drop0, window)
                     + rounding_bound(n, stored.scale_bits, stored.drop1, window, _key_norm(n)))
            tolerance = _tolerance(ops)
            if not tolerance or bound > 2 * ROUNDING_SHARE * tolerance:
                out.append(f"the {stored.drop0} bits dropped at rest add up to {bound:.3g} (raw units) to a value "
                           + (f"after this chain, more than its exact result tolerates ({tolerance:.3g})" if tolerance
                              else "and this chain's result has no grid to snap to"))
    return out


def check_at_rest(params: Params, stored, ops: Sequence[Op], layout: "Layout | str",
                  match: Match | None = None) -> None:
    """Raise :class:`InvalidParameters` unless ciphertexts stored as ``stored`` can run ``ops`` exactly, saying
    what the storage was planned for and how to store for this chain."""
    why = at_rest_problems(params, stored, ops, layout, match)
    if not why:
        return
    chain = " | ".join([op.spec for op in ops] + ([match.spec] if match else [])) or "(no ops)"
    planned = " | ".join(stored.chain) or "(any chain)"
    if getattr(stored, "format", "compact") == "seal":
        raise InvalidParameters(
            f"{chain} cannot run on ciphertexts stored for {planned} ({stored.describe()}, SEAL bytes): "
            f"{'; '.join(why)}; encrypt again with --for-op for this chain (or without --for-op: the first "
            "level, any chain the keys run)")
    raise InvalidParameters(
        f"{chain} cannot run on ciphertexts stored compact for {planned} ({stored.describe()}): {'; '.join(why)}; "
        f"encrypt again with --store compact --for-op for this chain (or --store seal)")


# --- which scheme runs which op --------------------------------------------------------------------

def _seal_support(spec: str, scheme: str, layout) -> Support:
    from hecore.ops.spec import parse_match, parse_op

    name = op_name(spec)
    layout = Layout.parse(layout) if layout is not None else Layout.PACKED
    if name in TFHE_ONLY:
        return _table_support(spec, scheme, layout)
    if run_kind(spec) == "infer":
        return Support(spec, scheme, True, "a run of its own; the infer job checks the preset's levels (CKKS) or t")
    if run_kind(spec) == "match":
        ops, match = [], parse_match(spec)
    else:
        ops, match = [parse_op(spec)], None
    try:
        fits = plan(ops, layout.value, scheme=scheme, match=match)
    except InvalidParameters as e:          # e.g. a match in the complex-packed layout
        return Support(spec, scheme, False, str(e))
    if fits:
        note = (" (clipped to 0..255 once, by the owner after decryption; in a chain with threshold, min, max or "
                "lut it saturates after every op, and the chain is one BFV table)") if name == "brightness" else ""
        return Support(spec, scheme, True, f"{fits[0].name} and larger, {layout} layout{note}")
    req = requirements(ops, layout, match)
    largest = max((p for p in PRESETS.values() if p.scheme == scheme), key=_size)
    return Support(spec, scheme, False, "; ".join(problems(largest, req)) or "no preset")


def _table_support(spec: str, scheme: str, layout: Layout) -> Support:
    """An 8-bit table op on CKKS/BFV/BGV keys: BFV runs it packed, exact and batched (:mod:`hecore.ops.lut`)."""
    ops = parse_table_chain([spec])          # malformed: the user's error, raised
    fits = plan(ops, layout.value, scheme=scheme)
    if not fits:
        why = problems(max((p for p in PRESETS.values() if p.scheme == scheme), key=_size),
                       requirements(ops, layout))
        tables = [p for p in PRESETS.values() if p.scheme == scheme and p.is_bfv]
        return Support(spec, scheme, False, "; ".join(why) + ("" if tables else "; use --scheme bfv"))
    return Support(spec, scheme, True, f"{fits[0].name}, {layout} layout: exact, batched (its table's polynomial "
                                       f"over F_t on every slot at once){measured_cost(scheme, op_name(spec))}")


def _family(scheme: str | None):
    """The planning of ``--scheme NAME`` when it is not one of SEAL's schemes (whose planning is this
    module's), else None; :class:`InvalidParameters` for a name no scheme has."""
    from hecore.tfhe import params as tfhe_params
    from hecore.tfhe import planning as tfhe_planning

    if scheme is None or names_scheme(scheme):
        return None
    if tfhe_params.names_scheme(scheme):
        return tfhe_planning
    raise InvalidParameters(f"unknown scheme {scheme!r}; expected one of {', '.join(ALL_SCHEMES)}")


def support(spec: str, scheme: str, layout: "Layout | str | None" = None) -> Support:
    """Whether ``scheme`` can run the op ``spec`` (alone) in ``layout`` (None: the packed layout for
    CKKS/BFV/BGV, the pixel layout for TFHE), and why (not).  A spec that is malformed for the scheme
    that knows its name raises ValueError naming the problem."""
    family = _family(scheme)
    if family is not None:
        return family.support(spec, layout, scheme)
    return _seal_support(spec, scheme, layout)


def chain_support(specs: Sequence[str], scheme: str, layout: "Layout | str | None" = None) -> Support:
    """Whether ``scheme`` runs the whole chain: every op (:func:`support`), and for CKKS/BFV/BGV one
    preset for all of them together (:func:`plan`), named when there is one."""
    chain = " | ".join(specs)
    each = [support(s, scheme, layout) for s in specs]
    bad = [s for s in each if not s.ok]
    if bad:
        return Support(chain, scheme, False, "; ".join(f"{s.spec}: {s.why}" for s in bad))
    family = _family(scheme)
    if family is not None:
        return family.chain_support(chain, scheme)
    if any(run_kind(s) == "infer" for s in specs):
        return Support(chain, scheme, True, "an infer run; the job checks the preset")
    from hecore.ops.spec import is_table_chain, parse_match, parse_ops

    specs, match = list(specs), None
    if is_table_chain(specs):
        try:
            ops = parse_table_chain(specs)
        except ValueError as e:
            return Support(chain, scheme, False, str(e))
        fits = plan(ops, (Layout.parse(layout) if layout is not None else Layout.PACKED).value, scheme=scheme)
        return (Support(chain, scheme, True, f"{fits[0].name}: one table for the chain "
                                             f"(`hepix keygen --preset {fits[0].name}`)") if fits
                else Support(chain, scheme, False, f"no {scheme.upper()} preset runs the chain as one table"))
    if specs and run_kind(specs[-1]) == "match":        # a match comes last, after the ops it will see
        match = parse_match(specs.pop())
    lay = Layout.parse(layout) if layout is not None else Layout.PACKED
    try:
        fits = plan(parse_ops(specs), lay.value, scheme=scheme, match=match)
    except InvalidParameters as e:
        return Support(chain, scheme, False, str(e))
    if not fits:
        return Support(chain, scheme, False, f"no {scheme.upper()} preset runs the ops together in the {lay} layout")
    return Support(chain, scheme, True, f"{fits[0].name} (`hepix keygen --preset {fits[0].name}`)")


def describe_support(specs: Sequence[str], layout: "Layout | str | None" = None,
                     schemes: Sequence[str] = ALL_SCHEMES) -> str:
    """Lines for every op and scheme (yes/no and why), then the whole chain per scheme."""
    lines = []
    for spec in specs:
        lines.append(f"  {spec}")
        for scheme in schemes:
            lines.append(f"    {scheme:<5} {support(spec, scheme, layout).describe()}")
    if len(specs) > 1:
        lines.append(f"  the chain {' | '.join(specs)}")
        for scheme in schemes:
            lines.append(f"    {scheme:<5} {chain_support(specs, scheme, layout).describe()}")
    return "\n".join(lines)
