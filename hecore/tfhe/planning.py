"""What the planner and ``hepix plan`` say of TFHE: which of its ops run where, and its one parameter set.

CKKS, BFV and BGV are planned over their presets (:mod:`hecore.planner`); TFHE has one parameter set, the
pixel layout, and its own op vocabulary (:mod:`hecore.tfhe.ops`), so its planning is only whether it runs
each op and how.
"""
from __future__ import annotations

from hecore.layouts import Layout
from hecore.spectext import op_name
from hecore.support import Support, measured_cost

__all__ = ["layout_problem", "presets_for", "support", "chain_support"]


def layout_problem(layout) -> str:
    """Why TFHE cannot encrypt in ``layout`` ("" for the pixel layout, or none given)."""
    if layout is None or Layout.parse(layout) is Layout.PIXEL:
        return ""
    return f"TFHE encrypts one pixel value per ciphertext (the pixel layout), not the {Layout.parse(layout)} layout"


def presets_for(ops, layout, match) -> list:
    """TFHE's one parameter set when it runs ``ops`` (TFHE ops) in ``layout`` without a match, else none."""
    from .params import TFHE_DEFAULT

    return [TFHE_DEFAULT] if not layout_problem(layout) and match is None else []


def support(spec: str, layout, name: str):
    """Whether TFHE runs the op ``spec`` (:class:`hecore.support.Support`, under the scheme name ``name``)."""
    from .ops import NOT_IN_TFHE, OWN_OPS, BrightnessWrap, Lut, Max, Min, Threshold, parse_op

    op_kind = op_name(spec)
    if op_kind in NOT_IN_TFHE:
        return Support(spec, name, False, f"{NOT_IN_TFHE[op_kind]}; use --scheme ckks (or bfv, bgv)")
    try:
        op = parse_op(spec)
    except ValueError as e:
        if op_kind in OWN_OPS:         # malformed for the one scheme that has the op: the user's error
            raise
        return Support(spec, name, False, str(e))
    where = layout_problem(layout)
    if where:
        return Support(spec, name, False, where)
    what = {Threshold: f"exact: 255 where x >= {getattr(op, 't', '')}, else 0",
            Min: "exact", Max: "exact", BrightnessWrap: "exact, modulo 256 (no clipping)",
            Lut: "exact: any 8-bit function"}.get(type(op), "exact, saturating at 0 and 255 after every op")
    return Support(spec, name, True, f"{what} (tfhe-default, pixel layout: per value){measured_cost(name, op_kind)}")


def chain_support(chain: str, name: str):
    """TFHE's verdict on a whole chain whose every op it runs: its one parameter set."""
    return Support(chain, name, True, "tfhe-default (`hepix keygen --scheme tfhe`)")
