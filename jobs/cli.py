"""The `hepix` command: one subcommand per job.

Each subcommand names the function that declares its arguments and the one that runs it
(:class:`Command`); the run functions are imported only when their command runs.  ``hepix process``
serves three kinds of op chain -- image ops, ``match:QUERY`` and ``infer:MODEL`` -- and ``hepix decrypt``
three kinds of input -- images, a match run's distances and an inference run's scores: :func:`process`
and :func:`decrypt` pick the job module by the parsed ops or by the input run's manifest (the job
modules never import each other).  Errors hepix raises on purpose (``hecore.errors.HepixError``) become a
one-line message and exit status 2; anything else is a bug and keeps its
traceback.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from dataclasses import dataclass

from hecore.errors import HepixError


@dataclass(frozen=True)
class Command:
    """A subcommand: where its arguments are declared, what runs it ("module:function" each), its help."""

    arguments: str
    run: str
    help: str


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


JOBS = {
    "keygen": Command("jobs.keygen:add_arguments", "jobs.keygen:run",
                      "generate a key directory (secret key in its own 0600 file; --scheme tfhe: a TFHE client key "
                      "(0600) and server key)"),
    "export-public": Command("jobs.keygen:add_export_arguments", "jobs.keygen:run_export",
                             "copy a key directory without its secret (or TFHE client) key, for the cluster"),
    "plan": Command("jobs.plan:add_arguments", "jobs.plan:run",
                    "which scheme runs each op (CKKS, BFV, BGV, TFHE) and which presets can run an op chain "
                    "in a layout, smallest first"),
    "encrypt": Command("jobs.encrypt:add_arguments", "jobs.encrypt:run",
                       "encrypt images (a directory, glob or URI) into a ciphertext table for the cluster, and an "
                       "owner map that stays with you"),
    "encrypt-digits": Command("jobs.infer:add_encrypt_arguments", "jobs.infer:run_encrypt",
                              "encrypt scikit-learn's digits (test split) for `process --op infer:MODEL`"),
    "process": Command("jobs.process:add_arguments", "jobs.cli:process",
                       "apply ops (brightness, contrast, watermark, mean filter, DFT filter), match images or run "
                       "a model, on ciphertexts, with public keys only"),
    "decrypt": Command("jobs.decrypt:add_arguments", "jobs.cli:decrypt",
                       "decrypt ciphertexts into images and a metrics table (reads the secret key: a local Spark "
                       "master only, unless --trusted-cluster)"),
    "audit": Command("jobs.audit:add_arguments", "jobs.audit:run",
                     "run distinguishers over a ciphertext table, and a metadata test of its other columns, "
                     "without any key; writes an audit table"),
    "verify": Command("jobs.verify:add_arguments", "jobs.verify:run",
                      "check a table against its manifest: files, row checksums, duplicates, whole images"),
    "bench": Command("bench.command:add_arguments", "bench.command:run",
                     "run a benchmark suite (speed, bytes, quality against the papers' figures); writes Parquet tables"),
    "report": Command("bench.report:add_arguments", "bench.report:run",
                      "render a `hepix bench` table as PNG plots and a Markdown report next to the papers' figures"),
    "demo": Command("jobs.demo:add_arguments", "jobs.demo:run",
                    "keygen, encrypt, process and decrypt sample images on local Spark, with a contact sheet and "
                    "a summary; then the paper's pixel layout and caching strategies"),
}


# --- the commands that serve several kinds of run ---------------------------------------------------

#: What a decrypt input holds, from its manifest.
IMAGES, DISTANCES, SCORES = "images", "distances", "scores"


def key_scheme(keys: str):
    """The scheme of a (public) key directory, from its manifest (:func:`hecore.schemes.scheme_of`):
    its op vocabulary."""
    from hecore.schemes import scheme_of

    from .runtime.remote import is_hdfs, remote_keys

    if not is_hdfs(keys):
        return scheme_of(keys)
    with remote_keys(keys) as local:
        return scheme_of(local)


def process(args) -> int:
    """``hepix process``: image ops, a match or an inference, public keys only, in the vocabulary of the
    keys' scheme (TFHE's ops run with the server key alone)."""
    from hecore.errors import KeyDirectoryError
    from hecore.schemes import DEFAULT_SCHEME

    from . import infer, match
    from . import process as process_job
    from .runtime.runs import refuse_secret_key_directory

    refuse_secret_key_directory(args.keys)          # before anything else, whatever the ops
    try:
        scheme = key_scheme(args.keys)
    except KeyDirectoryError:
        scheme = DEFAULT_SCHEME   # the job names the key directory's problem when it opens it, after the ops'
    try:
        chain = scheme.parse_chain(args.op)
    except ValueError as e:
        raise HepixError(str(e)) from None
    runner = {"image": process_job.run, "match": match.run, "infer": infer.run_process}[chain.kind]
    return runner(args, chain)


def input_kind(parent) -> str:
    """What a decrypt input holds: ``distances`` (a match run), ``scores`` (encrypted digits) or ``images``.
    The manifest says so; the table it must then list is checked when it is read
    (:func:`jobs.runtime.storage.listed_paths`)."""
    from hecore.ops.spec import run_kind

    from .infer import LAYOUT

    if parent.ops and run_kind(parent.ops[-1]) == "match":
        return DISTANCES
    if parent.layout == LAYOUT:
        return SCORES
    return IMAGES


def decrypt(args) -> int:
    """``hepix decrypt``: the key owner's job, for whichever kind of run the input is."""
    from . import decrypt as decrypt_job
    from . import infer, match
    from .runtime.decryptinput import check_expected_ops
    from .runtime.inferringers import DIGITS
    from .runtime.runs import open_run

    decrypt_job.check_arguments(args)
    with open_run(args, "decrypt", secret=True) as run:
        run.owner = decrypt_job.load_owner(args, run.fingerprint)
        parent = run.parent
        print(f"hepix decrypt {run.run_id}: {args.input} -> {args.out}; key {run.fingerprint[:16]}; "
              f"ops {' | '.join(parent.ops) or 'none'}")
        kind = input_kind(parent)
        digits_map = run.owner is not None and run.owner.settings.get("layout") == DIGITS
        if digits_map != (run.owner is not None and kind == SCORES):
            raise HepixError(f"--owner {args.owner} is the owner map of "
                             f"{'encrypted digits' if digits_map else 'an image run'}, and {args.input} holds {kind}: "
                             "give the owner map of the run's own encrypt (by default <its --out>.owner)")
        if args.spots_only and kind != IMAGES:
            raise HepixError(f"--spots-only: {args.input} holds {kind}, which no spot sample checks (spot checks "
                             "compare images); decrypt it without --spots-only")
        check_expected_ops(run)         # every kind of run: the chain, the match or the model asked for
        runner = {IMAGES: decrypt_job.run, DISTANCES: match.decrypt, SCORES: infer.decrypt}[kind]
        return runner(run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hepix",
        description="Homomorphic encryption of image corpora: encrypt, process without decrypting, "
                    "query the results as Parquet.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in JOBS.items():
        try:
            add_arguments = _resolve(command.arguments)
        except ModuleNotFoundError as e:
            # bench/ stays off the cluster (spark-submit/package.sh ships hecore, jobs, schemas and tasks): a
            # driver running from the cluster's archives has every job but `bench` and `report`.
            top = command.arguments.split(".", 1)[0]
            if top == "jobs" or (e.name or "").split(".", 1)[0] != top:
                raise
            continue
        p = sub.add_parser(name, help=command.help, description=command.help)
        add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


#: The arguments that name a file or directory: made absolute on the driver before any executor sees them.
PATH_ARGUMENTS = ("input", "out", "images", "owner", "keys", "contact_sheet", "dst")


def absolute_paths(args) -> None:
    """Make every local path argument absolute, in this process's working directory: an executor resolves a
    relative path in its own (on a cluster, a directory of its worker), not the caller's.  URLs (``hdfs://``,
    ``file:``...) are left as they are."""
    for name in PATH_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value and ":" not in value.split("/", 1)[0]:
            setattr(args, name, os.path.abspath(value))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    absolute_paths(args)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(_resolve(args._run)(args) or 0)
    except HepixError as e:
        print(f"hepix {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hepix {args.command}: interrupted", file=sys.stderr)
        return 130


class _ReaderMayLeave:
    """An output stream whose reader may go away (``hepix encrypt ... | head``): the first write or flush that
    finds the pipe closed points the stream's descriptor at the null device, and the job goes on to its end
    instead of dying on a ``BrokenPipeError`` halfway through a run."""

    def __init__(self, stream):
        self._stream = stream

    def _gone(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def entry() -> None:
    """The console script: run, flush, and leave without interpreter teardown.

    Pyfhel 3.5 (SEAL's global memory pool) sometimes frees memory twice while
    the interpreter tears down, which turns a finished, successful run into
    SIGABRT (exit 134).  Everything a job writes is closed before ``main``
    returns, so skipping the teardown loses nothing.  Standard output and error
    outlive a reader that leaves early (:class:`_ReaderMayLeave`).
    """
    sys.stdout, sys.stderr = _ReaderMayLeave(sys.stdout), _ReaderMayLeave(sys.stderr)
    code = main()
    session = sys.modules.get("jobs.runtime.session")
    if session is not None:
        session.release_kept_session()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
