"""`hepix keygen`, `hepix export-public` and `hepix plan`."""
from __future__ import annotations

from hecore.errors import HepixError, InvalidParameters
from hecore.keys import export_public, keygen
from hecore.params import DEFAULT_PRESET, PRESETS, SCHEMES, preset
from hecore.planner import LAYOUTS


def _add_plan_arguments(p, required: bool) -> None:
    p.add_argument("--op", action="append", default=[], required=required, metavar="SPEC",
                   help="an op the keys must serve (as for `hepix process`); repeat for a chain, and a "
                        "match:QUERY last if the images will be matched")
    p.add_argument("--layout", choices=LAYOUTS, default="packed", help="layout (default packed)")
    p.add_argument("--scheme", choices=SCHEMES, help="restrict the choice to one scheme")


def _planned(args):
    """(ops, match) of the --op specs: match:... must come last."""
    from hecore.ops.matching import parse_match
    from hecore.ops.spec import parse_ops

    specs = list(args.op)
    match = None
    try:
        if specs and specs[-1].strip().lower().startswith("match:"):
            match = parse_match(specs.pop())
        return parse_ops(specs), match
    except ValueError as e:
        raise HepixError(str(e)) from None


def add_keygen_arguments(p):
    p.add_argument("--out", required=True, help="new key directory (created with mode 0700)")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help=f"parameter preset (default: planned from --op, else {DEFAULT_PRESET})")
    _add_plan_arguments(p, required=False)
    p.add_argument("--no-rotations", action="store_true",
                   help="leave out the rotation keys (the packed mean filter and matching need them)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the keys in a non-empty directory (old ciphertexts become undecryptable)")


def run_keygen(args) -> int:
    from hecore.planner import plan

    if args.preset:
        params = preset(args.preset)
    elif args.op:
        ops, match = _planned(args)
        fits = plan(ops, args.layout, scheme=args.scheme, match=match)
        if not fits:
            raise InvalidParameters(f"no preset runs {' | '.join(args.op)} in the {args.layout} layout; "
                                    "see `hepix plan` for the reasons")
        params = fits[0]
        print(f"planned preset {params.name} for {' | '.join(args.op)} ({args.layout} layout)")
    else:
        params = preset(DEFAULT_PRESET)
    info = keygen(params, args.out, overwrite=args.overwrite, rotations=not args.no_rotations)
    print(f"keys {info.fingerprint[:16]} ({info.params.name}: {info.params.describe()}) written to {args.out}")
    print(f"the secret key is {args.out}/secret.key (mode 0600); give the cluster "
          f"`hepix export-public --keys {args.out} --out PUBLIC_DIR` instead")
    return 0


def add_export_public_arguments(p):
    p.add_argument("--keys", required=True, help="key directory holding the secret key")
    p.add_argument("--out", required=True, help="new directory for the public part only")


def run_export_public(args) -> int:
    info = export_public(args.keys, args.out)
    print(f"public keys {info.fingerprint[:16]} written to {args.out} (no secret key)")
    return 0


def add_plan_arguments(p):
    _add_plan_arguments(p, required=True)


def run_plan(args) -> int:
    from hecore.planner import describe_plan, plan

    ops, match = _planned(args)
    fits = plan(ops, args.layout, scheme=args.scheme, match=match)
    print(f"{' | '.join(args.op)} in the {args.layout} layout:")
    print(describe_plan(ops, args.layout, scheme=args.scheme, match=match))
    if not fits:
        print("no preset can run it")
        return 1
    print(f"smallest: {fits[0].name}  (hepix keygen --preset {fits[0].name} --out KEYS)")
    return 0
