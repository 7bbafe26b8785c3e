"""The `hepix` command: one subcommand per job.

Each job module provides ``add_arguments(parser)`` and ``run(args) -> int``.
Errors hepix raises on purpose (``hecore.errors.HepixError``) become a
one-line message and exit status 2; anything else is a bug and keeps its
traceback.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from hecore.errors import HepixError

#: subcommand -> (module, one-line help)
JOBS = {
    "keygen": ("jobs.keygen", "generate a key directory (secret key in its own 0600 file)"),
    "export-public": ("jobs.keygen", "copy a key directory without its secret key, for the cluster"),
    "plan": ("jobs.keygen", "which parameter presets can run an op chain in a layout, smallest first"),
    "encrypt": ("jobs.encrypt", "encrypt images (a directory, glob or URI) into a ciphertext table"),
    "encrypt-digits": ("jobs.infer", "encrypt scikit-learn's digits (test split) for `process --op infer:MODEL`"),
    "process": ("jobs.process", "apply ops (brightness, contrast, watermark, mean filter) or match images, on "
                                "ciphertexts, with public keys only"),
    "decrypt": ("jobs.decrypt", "decrypt ciphertexts into images and a metrics table (needs the secret key)"),
    "audit": ("jobs.audit", "run distinguishers over a ciphertext table without any key; writes an audit table"),
    "verify": ("jobs.verify", "check a table against its manifest: files, row checksums, duplicates, whole images"),
    "bench": ("jobs.bench.command", "measure the strategies against fresh encryption; writes a Parquet table"),
    "report": ("jobs.bench.report", "render a `hepix bench` table as PNG plots and a Markdown report next to the seeds' figures"),
    "demo": ("jobs.demo", "keygen, encrypt, process and decrypt sample images on local Spark, with a summary"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hepix",
        description="Homomorphic encryption of image corpora: encrypt, process without decrypting, "
                    "query the results as Parquet.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_) in JOBS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_, description=help_)
        adder = getattr(mod, f"add_{name.replace('-', '_')}_arguments", None) or mod.add_arguments
        adder(p)
        p.set_defaults(_run=getattr(mod, f"run_{name.replace('-', '_')}", None) or mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args._run(args) or 0)
    except HepixError as e:
        print(f"hepix {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hepix {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The console script: run, flush, and leave without interpreter teardown.

    Pyfhel 3.5 (SEAL's global memory pool) sometimes frees memory twice while
    the interpreter tears down, which turns a finished, successful run into
    SIGABRT (exit 134).  Everything a job writes is closed before ``main``
    returns, so skipping the teardown loses nothing.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
