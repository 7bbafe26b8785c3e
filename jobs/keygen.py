"""`hepix keygen` and `hepix export-public`: the data owner's key directory and its public copy for the cluster.

CKKS/BFV/BGV keys (a preset, or planned from ``--op``): ``secret.key`` (0600) beside the public files.
TFHE keys (``--scheme tfhe``, or ``--preset tfhe-default``): ``client.key`` (0600, the owner's secret)
beside ``server.key`` (what the cluster gets: it evaluates and cannot decrypt).
"""
from __future__ import annotations

from hecore.errors import InvalidParameters
from hecore.keys import export_public, keygen
from hecore.params import DEFAULT_PRESET, PRESETS, preset

from .plan import add_chain_arguments, planned_chain, seal_layout

#: TFHE parameter sets by name (hecore.tfhe.params.TFHE_PRESETS; named here so that the CLI starts
#: without importing the TFHE modules).
TFHE_PRESET_NAMES = ("tfhe-default",)


def add_arguments(p):
    p.add_argument("--out", required=True, help="new key directory (created with mode 0700)")
    p.add_argument("--preset", choices=sorted(PRESETS) + list(TFHE_PRESET_NAMES),
                   help=f"parameter preset (default: planned from --op, else {DEFAULT_PRESET}; tfhe-default: "
                        "TFHE keys, as --scheme tfhe)")
    add_chain_arguments(p, required=False)
    p.add_argument("--no-rotations", action="store_true",
                   help="leave out the rotation keys (the packed mean filter and matching need them)")
    p.add_argument("--compressed-server-key", action="store_true",
                   help="TFHE: store the server key in tfhe-rs's seeded form (about a third of the bytes to ship; "
                        "seconds to expand on every load instead of under one)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the keys in a non-empty directory (old ciphertexts become undecryptable)")


def _is_tfhe(args) -> bool:
    if args.preset in TFHE_PRESET_NAMES:
        if args.scheme not in (None, "tfhe"):
            raise InvalidParameters(f"--preset {args.preset} is a TFHE parameter set, not {args.scheme.upper()}")
        return True
    if args.scheme == "tfhe" and args.preset:
        raise InvalidParameters(f"--preset {args.preset} is a {preset(args.preset).scheme.upper()} preset; TFHE keys "
                                f"take --preset {' or '.join(TFHE_PRESET_NAMES)} (or none)")
    return args.scheme == "tfhe"


def run(args) -> int:
    if _is_tfhe(args):
        return _run_tfhe(args)
    if args.compressed_server_key:
        raise InvalidParameters("--compressed-server-key is for TFHE keys (--scheme tfhe)")
    from hecore.planner import plan

    if args.preset:
        params = preset(args.preset)
    elif args.op:
        ops, match = planned_chain(args)
        fits = plan(ops, seal_layout(args), scheme=args.scheme, match=match)
        if not fits:
            raise InvalidParameters(f"no preset runs {' | '.join(args.op)} in the {seal_layout(args)} layout; "
                                    "see `hepix plan` for the reasons")
        params = fits[0]
        print(f"planned preset {params.name} for {' | '.join(args.op)} ({seal_layout(args)} layout)")
    else:
        params = preset(DEFAULT_PRESET)
    info = keygen(params, args.out, overwrite=args.overwrite, rotations=not args.no_rotations)
    print(f"keys {info.fingerprint[:16]} ({info.params.name}: {info.params.describe()}) written to {args.out}")
    print(f"the secret key is {args.out}/secret.key (mode 0600); give the cluster "
          f"`hepix export-public --keys {args.out} --out PUBLIC_DIR` instead")
    return 0


def _run_tfhe(args) -> int:
    from hecore.planner import chain_support
    from hecore.tfhe.keys import keygen as tfhe_keygen
    from hecore.tfhe.params import TFHE_PRESETS

    if args.no_rotations:
        raise InvalidParameters("--no-rotations is for CKKS/BFV/BGV keys; TFHE keys have no rotation keys")
    if args.op:
        try:
            verdict = chain_support(args.op, "tfhe", args.layout)
        except ValueError as e:
            raise InvalidParameters(str(e)) from None
        if not verdict.ok:
            raise InvalidParameters(f"TFHE cannot run {verdict.spec}: {verdict.why}")
    params = TFHE_PRESETS[args.preset or TFHE_PRESET_NAMES[0]]
    info = tfhe_keygen(args.out, overwrite=args.overwrite, compressed_server_key=args.compressed_server_key,
                       params=params)
    print(f"TFHE keys {info.fingerprint[:16]} ({params.name}: {params.describe()}) written to {args.out}")
    print(f"the client key is {args.out}/client.key (mode 0600, secret: encrypts and decrypts); give the cluster "
          f"`hepix export-public --keys {args.out} --out PUBLIC_DIR` (the server key only) instead")
    return 0


def add_export_arguments(p):
    p.add_argument("--keys", required=True, help="key directory holding the secret (or TFHE client) key")
    p.add_argument("--out", required=True, help="new directory for the public part only")


def run_export(args) -> int:
    from hecore.keys import key_scheme

    if key_scheme(args.keys) == "tfhe":
        from hecore.tfhe.keys import export_public as tfhe_export_public

        info = tfhe_export_public(args.keys, args.out)
        print(f"TFHE server key {info.fingerprint[:16]} written to {args.out} (no client key)")
        return 0
    info = export_public(args.keys, args.out)
    print(f"public keys {info.fingerprint[:16]} written to {args.out} (no secret key)")
    return 0
