"""`hepix keygen` and `hepix export-public`: the data owner's key directory and its public copy for the cluster."""
from __future__ import annotations

from hecore.errors import InvalidParameters
from hecore.keys import export_public, keygen
from hecore.params import DEFAULT_PRESET, PRESETS, preset

from .plan import add_chain_arguments, planned_chain


def add_arguments(p):
    p.add_argument("--out", required=True, help="new key directory (created with mode 0700)")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help=f"parameter preset (default: planned from --op, else {DEFAULT_PRESET})")
    add_chain_arguments(p, required=False)
    p.add_argument("--no-rotations", action="store_true",
                   help="leave out the rotation keys (the packed mean filter and matching need them)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the keys in a non-empty directory (old ciphertexts become undecryptable)")


def run(args) -> int:
    from hecore.planner import plan

    if args.preset:
        params = preset(args.preset)
    elif args.op:
        ops, match = planned_chain(args)
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


def add_export_arguments(p):
    p.add_argument("--keys", required=True, help="key directory holding the secret key")
    p.add_argument("--out", required=True, help="new directory for the public part only")


def run_export(args) -> int:
    info = export_public(args.keys, args.out)
    print(f"public keys {info.fingerprint[:16]} written to {args.out} (no secret key)")
    return 0
