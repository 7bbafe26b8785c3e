"""`hepix keygen` and `hepix export-public`."""
from __future__ import annotations

from hecore.keys import export_public, keygen
from hecore.params import DEFAULT_PRESET, PRESETS, preset


def add_keygen_arguments(p):
    p.add_argument("--out", required=True, help="new key directory (created with mode 0700)")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS),
                   help=f"parameter preset (default {DEFAULT_PRESET})")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the keys in a non-empty directory (old ciphertexts become undecryptable)")


def run_keygen(args) -> int:
    info = keygen(preset(args.preset), args.out, overwrite=args.overwrite)
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
