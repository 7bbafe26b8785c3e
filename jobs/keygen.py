"""`hepix keygen` and `hepix export-public`: the data owner's key directory and its public copy for the cluster.

CKKS/BFV/BGV keys (a preset, or planned from ``--op``): ``secret.key`` (0600) beside the public files.
TFHE keys (``--scheme tfhe``, or ``--preset tfhe-default``): ``client.key`` (0600, the owner's secret)
beside ``server.key`` (what the cluster gets: it evaluates and cannot decrypt).
``keygen --public-out DIR`` writes the cluster's copy right away: with ``--op``, the evaluation keys of that
chain alone (as ``export-public --for-op``).
"""
from __future__ import annotations

import os

from hecore.errors import HepixError, InvalidParameters
from hecore.keyring import keyring_path, recorded
from hecore.seal.params import DEFAULT_PRESET, PRESETS

from .plan import add_chain_arguments

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
    p.add_argument("--public-out", metavar="DIR",
                   help="also write the public copy for the cluster into the new directory DIR, as `hepix "
                        "export-public` does; with --op, only the evaluation keys that chain needs (as "
                        "`export-public --for-op`: no relinearisation key without a ciphertext product, the "
                        "rotation keys of its steps alone)")


def key_scheme(args):
    """The scheme of the keys to make: ``--preset``'s, else ``--scheme``'s (CKKS/BFV/BGV without either)."""
    from hecore.schemes import scheme_for_preset, scheme_named

    scheme = scheme_named(args.scheme)
    if args.preset:
        of_preset = scheme_for_preset(args.preset)
        if args.scheme and of_preset is not scheme:
            raise InvalidParameters(f"--preset {args.preset} is a {of_preset.preset(args.preset).scheme.upper()} "
                                    f"preset, not {args.scheme.upper()}; give one of the two")
        return of_preset
    return scheme


def run(args) -> int:
    scheme = key_scheme(args)
    if args.public_out and os.path.abspath(args.public_out) == os.path.abspath(args.out):
        raise HepixError(f"--public-out {args.public_out} is --out: give the cluster's copy its own directory")
    if args.public_out and os.path.isdir(args.public_out) and os.listdir(args.public_out):
        raise HepixError(f"--public-out {args.public_out}: not empty; give a new directory (nothing was written)")
    if args.preset:
        params = scheme.preset(args.preset)
    else:
        try:
            params = scheme.plan_keys(args.op, args.layout, only=args.scheme)
        except ValueError as e:
            raise InvalidParameters(str(e)) from None
        if args.op:
            print(f"planned preset {params.name} for {' | '.join(args.op)} ({args.layout or scheme.layouts[0]} layout)")
    info = scheme.keygen(args.out, params, overwrite=args.overwrite, rotations=not args.no_rotations,
                         compressed_server_key=args.compressed_server_key)
    print(f"{scheme.title} keys {info.fingerprint[:16]} ({params.name}: {params.describe()}) written to {args.out}")
    if args.public_out:
        print(f"the secret key is {args.out}/{scheme.secret_file} (mode 0600: it decrypts); give the cluster "
              f"{args.public_out} instead, {export_chain(scheme, args, args.public_out)}")
    else:
        for_op = "".join(f" --for-op {op}" for op in args.op if scheme.divides_keys)
        print(f"the secret key is {args.out}/{scheme.secret_file} (mode 0600: it decrypts); give the cluster "
              f"`hepix export-public --keys {args.out} --out PUBLIC_DIR{for_op}` instead")
    where = (f"recorded in your key records ({keyring_path()})" if info.fingerprint in recorded()
             else f"not recorded in your key records ({keyring_path()}: see the warning above)")
    print(f"fingerprint {info.fingerprint}: {where}; encrypting with a public copy of these keys on a machine "
          "without these records needs --key-fingerprint and this value")
    return 0


def export_chain(scheme, args, out: str) -> str:
    """keygen's ``--public-out``: the public copy of the new keys in ``out``, for the ``--op`` chain alone where
    the scheme's keys divide (TFHE's server key is one key for every op); what it holds, in words."""
    for_ops = list(args.op) if scheme.divides_keys else []
    try:
        scheme.export_public(args.out, out, for_ops=for_ops)
    except ValueError as e:
        raise HepixError(f"--public-out with --op: {e}") from None
    if for_ops:
        return f"which holds the evaluation keys of {' | '.join(for_ops)} and no others"
    if args.op:
        return f"which holds every evaluation key ({scheme.title}'s keys serve every op as one)"
    return "which holds every evaluation key (give --op for the keys of one chain alone)"


def add_export_arguments(p):
    p.add_argument("--keys", required=True, help="key directory holding the secret (or TFHE client) key")
    p.add_argument("--out", required=True, help="new directory for the public part only")
    p.add_argument("--for-op", action="append", default=[], metavar="SPEC",
                   help="give the cluster only the evaluation keys this chain needs (repeat per op, as for "
                        "`hepix process --op`): no relinearisation key without a ciphertext product, no rotation "
                        "keys without a rotation, and (from the owner's directory) the rotation keys of the "
                        "steps the chain takes on encrypt's tiles alone; process then refuses a chain the copy "
                        "cannot run")
    p.add_argument("--tile", metavar="HxW", help="with --for-op: the tiles encrypt was (or will be) given with "
                   "--tile, whose rotation steps the copy holds (default: the tiles encrypt picks)")
    p.add_argument("--halo", type=int, metavar="R", help="with --for-op: the --halo encrypt was given (default: the "
                   "chain's, and the default halo of an encryption without --for-op)")


def run_export(args) -> int:
    from hecore.layouts.tiling import parse_tile_spec
    from hecore.schemes import scheme_of

    scheme = scheme_of(args.keys)
    tiles = {}
    try:
        if args.tile is not None:
            tiles["tile"] = parse_tile_spec(args.tile)
    except ValueError as e:
        raise HepixError(f"--tile {args.tile}: {e}") from None
    if args.halo is not None:
        if args.halo < 0:
            raise HepixError(f"--halo {args.halo}: must be 0 or more")
        tiles["halo"] = args.halo
    try:
        info = scheme.export_public(args.keys, args.out, for_ops=args.for_op, **tiles)
    except ValueError as e:
        raise HepixError(f"--for-op: {e}") from None
    print(f"public keys {info.fingerprint[:16]} written to {args.out} (no {scheme.secret_file}); their fingerprint, "
          f"for `hepix encrypt --key-fingerprint` elsewhere: {info.fingerprint}")
    return 0
