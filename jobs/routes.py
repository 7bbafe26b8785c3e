"""Which job module serves a command, given what it is asked to do.

``hepix process`` serves three kinds of op chain -- image ops, ``match:QUERY`` and ``infer:MODEL`` -- and
``hepix decrypt`` three kinds of input -- images, a match run's distances and an inference run's scores.
The job modules never import each other; the routes here pick one by the parsed ops
(:func:`hecore.ops.spec.parse_chain`) or by the input run's manifest.
"""
from __future__ import annotations

from hecore.errors import HepixError

from . import decrypt as decrypt_job
from . import infer, match
from . import process as process_job
from .runs import open_run, refuse_secret_key_directory

#: What a decrypt input holds, from its manifest.
IMAGES, DISTANCES, SCORES = "images", "distances", "scores"


def key_scheme(keys: str):
    """The scheme of a (public) key directory, from its manifest (:func:`hecore.schemes.scheme_of`):
    its op vocabulary."""
    from hecore.schemes import scheme_of

    from .remote import is_hdfs, remote_keys

    if not is_hdfs(keys):
        return scheme_of(keys)
    with remote_keys(keys) as local:
        return scheme_of(local)


def process(args) -> int:
    """``hepix process``: image ops, a match or an inference, public keys only, in the vocabulary of the
    keys' scheme (TFHE's ops run with the server key alone)."""
    from hecore.errors import KeyDirectoryError
    from hecore.schemes import DEFAULT_SCHEME

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
    The manifest says so; the table it must then list is checked when it is read (jobs.storage.listed_paths)."""
    if parent.ops and parent.ops[-1].startswith("match:"):
        return DISTANCES
    if parent.layout == infer.LAYOUT:
        return SCORES
    return IMAGES


def decrypt(args) -> int:
    """``hepix decrypt``: the key owner's job, for whichever kind of run the input is."""
    decrypt_job.check_arguments(args)
    with open_run(args, "decrypt", secret=True) as run:
        run.owner = decrypt_job.load_owner(args, run.fingerprint)
        parent = run.parent
        print(f"hepix decrypt {run.run_id}: {args.input} -> {args.out}; key {run.fingerprint[:16]}; "
              f"ops {' | '.join(parent.ops) or 'none'}")
        runner = {IMAGES: decrypt_job.run, DISTANCES: match.decrypt, SCORES: infer.decrypt}[input_kind(parent)]
        return runner(run)
