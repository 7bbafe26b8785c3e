"""`hepix plan`: which scheme runs each op of a chain, and which parameter presets can run the chain in a
layout, smallest first (hecore.planner)."""
from __future__ import annotations

from hecore.errors import HepixError
from hecore.layouts import Layout
from hecore.planner import ALL_SCHEMES


def add_chain_arguments(p, required: bool) -> None:
    """``--op`` (repeatable), ``--layout`` and ``--scheme``: the chain a preset must serve."""
    p.add_argument("--op", action="append", default=[], required=required, metavar="SPEC",
                   help="an op the keys must serve (as for `hepix process`); repeat for a chain, and a "
                        "match:QUERY last if the images will be matched")
    p.add_argument("--layout", choices=Layout.names(), default=None,
                   help="layout (default: packed for CKKS/BFV/BGV, pixel for TFHE, which has only that one)")
    p.add_argument("--scheme", choices=ALL_SCHEMES,
                   help="restrict the choice to one scheme (tfhe: exact comparisons and 8-bit tables)")


def seal_layout(args) -> str:
    """The layout of a CKKS/BFV/BGV plan: as given, else packed."""
    return args.layout or Layout.PACKED.value


def planned_chain(args):
    """(ops, match) of the ``--op`` specs in the CKKS/BFV/BGV vocabulary: a match:QUERY may come last,
    after the ops it will see."""
    from hecore.ops.spec import ops_and_match

    try:
        return ops_and_match(args.op)
    except ValueError as e:
        raise HepixError(str(e)) from None


def add_arguments(p) -> None:
    add_chain_arguments(p, required=True)


def run(args) -> int:
    from hecore.ops.spec import is_table_chain, run_kind
    from hecore.planner import chain_support, describe_plan, describe_support, plan
    from hecore.schemes import scheme_named

    schemes = (args.scheme,) if args.scheme else ALL_SCHEMES
    chain = " | ".join(args.op)
    try:
        text = describe_support(args.op, args.layout, schemes)
        verdicts = {s: chain_support(args.op, s, args.layout) for s in schemes}
    except ValueError as e:
        raise HepixError(str(e)) from None
    print(f"{chain}: which scheme runs each op (layout: {args.layout or 'packed for CKKS/BFV/BGV, pixel for TFHE'})")
    print(text)
    planned = {s: scheme_named(s).plans_presets for s in schemes}    # the schemes planned over presets
    seal = [s for s in schemes if planned[s]]
    smallest = None
    table_ok = not is_table_chain(args.op) or any(v.ok for s, v in verdicts.items() if planned[s])
    if seal and table_ok and not any(run_kind(s) == "infer" for s in args.op):
        ops, match = planned_chain(args)
        only = args.scheme if args.scheme and planned[args.scheme] else None
        print(f"CKKS/BFV/BGV presets, {seal_layout(args)} layout:")
        print(describe_plan(ops, seal_layout(args), scheme=only, match=match))
        fits = plan(ops, seal_layout(args), scheme=only, match=match)
        smallest = fits[0] if fits else None
    runs = [s for s in schemes if verdicts[s].ok]
    if not runs:
        print("no scheme can run it" if len(schemes) > 1 else f"{schemes[0].upper()} cannot run it")
        return 1
    if smallest is not None:
        print(f"smallest: {smallest.name}  (hepix keygen --preset {smallest.name} --out KEYS)")
    for name in (s for s in runs if not planned[s]):        # the schemes whose keys take no preset planning
        params = scheme_named(name).plan_keys(args.op, args.layout)
        print(f"{name}: {params.name}  (hepix keygen --scheme {name} --out KEYS)")
    return 0
