"""`hepix plan`: which parameter presets can run an op chain in a layout, smallest first (hecore.planner)."""
from __future__ import annotations

from hecore.errors import HepixError
from hecore.layouts import Layout
from hecore.params import SCHEMES


def add_chain_arguments(p, required: bool) -> None:
    """``--op`` (repeatable), ``--layout`` and ``--scheme``: the chain a preset must serve."""
    p.add_argument("--op", action="append", default=[], required=required, metavar="SPEC",
                   help="an op the keys must serve (as for `hepix process`); repeat for a chain, and a "
                        "match:QUERY last if the images will be matched")
    p.add_argument("--layout", choices=Layout.names(), default=Layout.PACKED.value,
                   help="layout (default packed)")
    p.add_argument("--scheme", choices=SCHEMES, help="restrict the choice to one scheme")


def planned_chain(args):
    """(ops, match) of the ``--op`` specs: a match:QUERY may come last, after the ops it will see."""
    from hecore.ops.spec import parse_match
    from hecore.ops.spec import parse_ops

    specs = list(args.op)
    match = None
    try:
        if specs and specs[-1].strip().lower().startswith("match:"):
            match = parse_match(specs.pop())
        return parse_ops(specs), match
    except ValueError as e:
        raise HepixError(str(e)) from None


def add_arguments(p) -> None:
    add_chain_arguments(p, required=True)


def run(args) -> int:
    from hecore.planner import describe_plan, plan

    ops, match = planned_chain(args)
    fits = plan(ops, args.layout, scheme=args.scheme, match=match)
    print(f"{' | '.join(args.op)} in the {args.layout} layout:")
    print(describe_plan(ops, args.layout, scheme=args.scheme, match=match))
    if not fits:
        print("no preset can run it")
        return 1
    print(f"smallest: {fits[0].name}  (hepix keygen --preset {fits[0].name} --out KEYS)")
    return 0
