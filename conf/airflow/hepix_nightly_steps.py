"""The steps of the hepix_nightly DAG (conf/airflow/hepix_nightly.py) without Airflow: its settings, a night's
paths, whether a step has already done a night, and each step's command line.

The standard library only, and hepix's own guarded JSON reader (schemas/jsondoc.py, loaded from its file): the
DAG runs in Airflow's virtualenv, which has none of hepix's dependencies; the tests run this module in hepix's.

What reaches a path or a command line is checked first, and nothing reaches a shell:

* a night is a date, ``YYYY-MM-DD`` (:func:`night_name`), before it names a ``night=`` directory;
* every hepix command is a list of arguments, run without a shell (:class:`Command`); each option's value is
  passed as ``--option=VALUE``, so no value is read as another option;
* the extra encrypt options and the op chain are split with :func:`shlex.split` (quoting works) into arguments,
  never a command line; options the DAG sets itself are refused there;
* a manifest (``_manifest.json``) is read with a byte cap and a nesting cap, its few fields the DAG uses
  checked: a bad one is a one-line warning and counts as no complete run (the step runs its job, which reads
  the manifest with hepix's full validation);
* what a night has done is decided by the owner's records: encrypt is done when the night's owner map
  (``OWNER_ROOT/owner/night=DS/owner.json``, written by ``hepix encrypt`` on the owner's side) says
  ``complete``, never by a manifest in the directories the cluster writes.  A cluster-written manifest can make
  a step run again, never make it skip;
* the settings' paths are absolute, OWNER_ROOT local and apart from ROOT; the run parameter ``public_keys``
  names a directory with no secret key in it;
* one night's encrypt runs at a time (:func:`exclusive`).

Airflow's DAG processor may parse this file as it parses every file of its DAG folder: it defines no DAG.
"""
from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

MANIFEST = "_manifest.json"
OWNER_JSON = "owner.json"
#: In OWNER_ROOT: held by a night's encrypt step, so that no two nights' encrypts overlap.
LOCK = ".hepix_nightly.lock"
#: The largest manifest read, as schemas/manifest.py's MAX_BYTES (a manifest listing a million files).
MAX_MANIFEST_BYTES = 256 * 2**20
#: The largest owner.json read, as jobs/runtime/owner.py's MAX_OWNER_JSON.
MAX_OWNER_JSON = 256 * 2**20
#: The secret key files of hepix's schemes (hecore.schemes.SECRET_FILES): never in a public key directory.
SECRET_FILES = ("secret.key", "client.key")
#: A night: ASCII digits only (``\\d`` would take other scripts' digits), then checked to be a real date.
NIGHT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
#: A hepix run id (schemas/manifest.py's RUN_ID).
RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
#: The encrypt options the DAG sets itself: not to be given (or abbreviated) in HEPIX_NIGHTLY_ENCRYPT_ARGS.
ENCRYPT_OWN = ("--keys", "--input", "--out", "--owner", "--skip-encrypted", "--master", "--overwrite", "--for-op")


class Refused(ValueError):
    """A document, setting or name the DAG will not use; its message is one line."""


def one_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def night_name(value) -> str:
    """``value`` when it is a date ``YYYY-MM-DD``, the name of a ``night=`` directory; else :class:`Refused`."""
    if not isinstance(value, str) or not NIGHT.fullmatch(value):
        raise Refused(f"night {one_line(repr(value), 60)} is not a date YYYY-MM-DD")
    try:
        date.fromisoformat(value)
    except ValueError:
        raise Refused(f"night {value!r} is not a date YYYY-MM-DD") from None
    return value


def _jsondoc():
    """hepix's schemas/jsondoc.py, loaded from its file beside this one's checkout (not through ``sys.path``:
    the scheduler's Python has no hepix packages, and another ``schemas`` module may be there)."""
    name = "_hepix_nightly_jsondoc"
    module = sys.modules.get(name)
    if module is None:
        path = Path(__file__).resolve().parents[2] / "schemas" / "jsondoc.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return module


def read_json(path: Path, max_bytes: int):
    """The JSON value in ``path``; None when there is no such file; :class:`Refused` (one line) when it is larger
    than ``max_bytes``, not a regular file, or not JSON hepix reads (not UTF-8, malformed, nested too deep)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Refused(f"{path}: {one_line(e.strerror or e)}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not (st.st_mode & 0o170000 == 0o100000):
            raise Refused(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise Refused(f"{path}: {st.st_size} bytes is more than the {max_bytes} such a document may hold")
        data = f.read(max_bytes + 1)        # a file that grew since is refused by the cap below
    try:
        return _jsondoc().parse(data, max_bytes=max_bytes)
    except ValueError as e:
        raise Refused(f"{path}: {one_line(e)}") from None


def _run_id(value, what: str) -> str:
    if not isinstance(value, str) or not RUN_ID.fullmatch(value):
        raise Refused(f"{what} {one_line(repr(value), 60)} is not a hepix run id")
    return value


def read_manifest(directory: str) -> dict | None:
    """The manifest of a complete run in ``directory`` (local, or ``file:``), or None: none there, another
    status, a directory this machine cannot read (``hdfs://``).  :class:`Refused` (one line) for a manifest that
    is not one hepix writes, as far as the DAG reads it (``status``, ``run_id``, ``runs``, ``parent``)."""
    local = local_path(directory)
    if local is None:
        return None
    path = local / MANIFEST
    doc = read_json(path, MAX_MANIFEST_BYTES)
    if doc is None:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
        raise Refused(f"{path}: not a hepix manifest (no status)")
    if doc["status"] != "complete":
        return None
    _run_id(doc.get("run_id"), f"{path}: run_id")
    runs = doc.get("runs", [])
    if not isinstance(runs, list) or len(runs) > 100_000:
        raise Refused(f"{path}: runs is not a list of run ids")
    for r in runs:
        _run_id(r, f"{path}: runs entry")
    parent = doc.get("parent")
    if parent is not None:
        if not isinstance(parent, dict):
            raise Refused(f"{path}: parent is not a record")
        _run_id(parent.get("run_id"), f"{path}: parent.run_id")
    return doc


def read_owner_map(directory: Path) -> dict | None:
    """The owner map's ``owner.json`` in ``directory`` (the owner's own record of an encrypt run), or None when
    there is none; :class:`Refused` (one line) when it is not one ``hepix encrypt`` writes."""
    path = directory / OWNER_JSON
    doc = read_json(path, MAX_OWNER_JSON)
    if doc is None:
        return None
    if not isinstance(doc, dict) or doc.get("format") != 1 or not isinstance(doc.get("status"), str) \
            or not isinstance(doc.get("runs"), list):
        raise Refused(f"{path}: not an owner map hepix writes")
    for r in doc["runs"]:
        _run_id(r, f"{path}: runs entry")
    return doc


def local_path(path: str) -> Path | None:
    """``path`` as a local path, or None when it names another file system (``hdfs://``, ``s3a://``)."""
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(path.removeprefix("file://").removeprefix("file:"))


def _absolute(name: str, value: str, *, local: bool) -> str:
    value = value.rstrip("/") or value
    if "\x00" in value or "\n" in value:
        raise Refused(f"{name} holds a NUL or newline character")
    remote = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value) and not value.startswith("file:")
    if remote:
        if local:
            raise Refused(f"{name} {value!r} must be a local directory of the owner's machine")
        return value
    p = local_path(value)
    if not p.is_absolute():
        raise Refused(f"{name} {value!r} must be an absolute path")
    return value


def public_key_dir(value) -> str:
    """The run parameter ``public_keys``: a directory (absolute or a URL) that, where this machine can look,
    holds no secret key (encrypt and process, which the cluster runs, are handed only public keys)."""
    if not isinstance(value, str) or not value:
        raise Refused("the run parameter public_keys must name the public key directory")
    value = _absolute("the run parameter public_keys", value, local=False)
    local = local_path(value)
    if local is not None:
        held = [f for f in SECRET_FILES if os.path.lexists(local / f)]
        if held:
            raise Refused(f"the run parameter public_keys {value!r} holds a secret key ({', '.join(held)}): give the "
                          "directory `hepix export-public` wrote")
    return value


def split_args(name: str, value: str) -> list[str]:
    """A setting of several arguments, split as a shell would split words (quotes group, nothing runs)."""
    try:
        return shlex.split(value)
    except ValueError as e:
        raise Refused(f"{name}: {one_line(e)} in {one_line(repr(value), 80)}") from None


@dataclass(frozen=True)
class Paths:
    """One night's directories (docs/operations.md#the-nightly-dag-apache-airflow)."""

    night: str
    ct: str             # ROOT/ct/night=DS: encrypt's output, handed to the cluster
    processed: str      # ROOT/processed/night=DS: process's output
    owner: str          # OWNER_ROOT/owner/night=DS: encrypt's owner map
    dec: str            # OWNER_ROOT/dec/night=DS: decrypt's metrics


@dataclass(frozen=True)
class Config:
    """The DAG's settings (the HEPIX_NIGHTLY_* environment), checked."""

    root: str
    owner_root: str
    images: str
    hepix: str
    owner_master: str = "local[2]"
    keys: str = ""
    encrypt_args: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=lambda: ["brightness:20"])

    def __post_init__(self):
        object.__setattr__(self, "root", _absolute("HEPIX_NIGHTLY_ROOT", self.root, local=False))
        object.__setattr__(self, "owner_root", _absolute("HEPIX_NIGHTLY_OWNER_ROOT", self.owner_root, local=True))
        object.__setattr__(self, "images", _absolute("HEPIX_NIGHTLY_IMAGES", self.images, local=False))
        root, owner = local_path(self.root), local_path(self.owner_root)
        if root is not None and _inside(owner, root):
            raise Refused(f"HEPIX_NIGHTLY_OWNER_ROOT {self.owner_root!r} lies inside HEPIX_NIGHTLY_ROOT "
                          f"{self.root!r}, which the cluster reads: keep the owner's directory apart")
        if root is not None and _inside(root, owner):
            raise Refused(f"HEPIX_NIGHTLY_ROOT {self.root!r} lies inside HEPIX_NIGHTLY_OWNER_ROOT "
                          f"{self.owner_root!r}: keep the cluster's directory apart from the owner's")
        for a in self.encrypt_args:
            name = a.split("=", 1)[0]
            if len(name) > 2 and name.startswith("--") and any(o.startswith(name) for o in ENCRYPT_OWN):
                raise Refused(f"HEPIX_NIGHTLY_ENCRYPT_ARGS: {name} is an option the DAG sets itself "
                              f"({', '.join(ENCRYPT_OWN)})")

    @classmethod
    def from_env(cls, env, home: Path) -> "Config":
        """The settings in ``env`` (a mapping such as ``os.environ``); :class:`Refused` for a missing or bad one."""

        def get(name: str, default: str | None = None) -> str:
            value = env.get(name, default)
            if value is None:
                raise Refused(f"{name} is not set: the hepix_nightly DAG needs it in the environment of Airflow's "
                              "scheduler, DAG processor and workers (see conf/airflow/hepix_nightly.py)")
            return value

        venv = Path(get("HEPIX_VENV", str(home / ".venv")))
        root = get("HEPIX_NIGHTLY_ROOT")
        return cls(root=root, owner_root=get("HEPIX_NIGHTLY_OWNER_ROOT", root.rstrip("/") + ".owner"),
                   images=get("HEPIX_NIGHTLY_IMAGES"), hepix=get("HEPIX_NIGHTLY_HEPIX", str(venv / "bin" / "hepix")),
                   owner_master=get("HEPIX_NIGHTLY_OWNER_MASTER", "local[2]"), keys=get("HEPIX_NIGHTLY_KEYS", ""),
                   encrypt_args=split_args("HEPIX_NIGHTLY_ENCRYPT_ARGS", get("HEPIX_NIGHTLY_ENCRYPT_ARGS", "")),
                   ops=split_args("HEPIX_NIGHTLY_OPS", get("HEPIX_NIGHTLY_OPS", "brightness:20")))

    # --- a night ------------------------------------------------------------------------------------------
    def paths(self, night: str) -> Paths:
        night = night_name(night)
        return Paths(night=night, ct=f"{self.root}/ct/night={night}", processed=f"{self.root}/processed/night={night}",
                     owner=f"{self.owner_root}/owner/night={night}", dec=f"{self.owner_root}/dec/night={night}")

    def check_cluster_dirs(self, p: Paths) -> None:
        """:class:`Refused` when the night's directories in a local ROOT are symbolic links or lead outside ROOT:
        the cluster writes there, and a link planted as ``ROOT/ct/night=DS`` would send the owner's encrypt (which
        replaces what it finds) into another directory, such as the owner's own."""
        root = local_path(self.root)
        if root is None:
            return
        top = Path(os.path.realpath(root))
        for d in (p.ct, p.processed):
            d = local_path(d)
            for q in (d.parent, d):
                if q.is_symlink() or (q.exists() and not Path(os.path.realpath(q)).is_relative_to(top)):
                    raise Refused(f"{q} is a symbolic link or leads outside HEPIX_NIGHTLY_ROOT: the night's "
                                  "directories must be plain directories inside it")

    def owner_maps(self) -> str:
        return f"{self.owner_root}/owner"

    def owner_record(self, p: Paths, log) -> dict | None:
        """The night's owner map when it is readable, else None (a bad one: said in one line)."""
        try:
            return read_owner_map(local_path(p.owner))
        except Refused as e:
            log.warning("owner map refused: %s", e)
            return None

    # --- whether a step has done the night: the owner's records decide --------------------------------------
    def encrypt_done(self, p: Paths, log) -> bool:
        """The night's owner map says ``complete`` and the cluster's copy is that run (its manifest complete,
        its first run the owner map's first): an owner map alone decides that there is nothing to encrypt; the
        manifest in ROOT can only make encrypt run again (and repair what is missing there)."""
        owner = self.owner_record(p, log)
        if owner is None or owner["status"] != "complete":
            return False
        if local_path(p.ct) is None:
            return True                                 # an hdfs:// ROOT: the owner's record alone
        ct = _manifest(p.ct, log)
        return ct is not None and _same_encrypt_run(ct, owner)

    def process_done(self, p: Paths, log) -> bool:
        """Encrypt is done (the owner's record), and ROOT/processed holds a complete run whose parent is that
        encrypt run."""
        owner = self.owner_record(p, log)
        if owner is None or owner["status"] != "complete":
            return False
        ct, out = _manifest(p.ct, log), _manifest(p.processed, log)
        return ct is not None and out is not None and _same_encrypt_run(ct, owner) and _parent(out) == ct["run_id"]

    def decrypt_done(self, p: Paths, log) -> bool:
        """The owner's decrypted night (OWNER_ROOT/dec, written by decrypt on the owner's side) is complete and
        made from the processed run now in ROOT."""
        out, source = _manifest(p.dec, log), _manifest(p.processed, log)
        return out is not None and source is not None and _parent(out) == source["run_id"]

    def set_aside_decrypt(self, p: Paths, log) -> Path | None:
        """Before a night is decrypted again (its processed run is another, or an earlier decrypt failed half way):
        a non-empty ``OWNER_ROOT/dec/night=DS`` is moved to ``OWNER_ROOT/dec-replaced/night=DS/<UTC time>`` and
        kept (hepix decrypt writes into a new or empty directory only, and never deletes the owner's files; outside
        ``dec/``, queries over the nights' partitions do not see it).  The new path, or None when there was nothing
        to set aside."""
        dec = local_path(p.dec)
        if dec is None or not dec.is_dir() or dec.is_symlink() or not any(dec.iterdir()):
            return None
        kept = dec.parent.parent / "dec-replaced" / dec.name / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        kept.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.rename(dec, kept)
        return kept

    # --- the commands (argument lists, run without a shell) -------------------------------------------------
    def encrypt_command(self, p: Paths, public_keys: str, *, fresh: bool) -> list[str]:
        """``hepix encrypt`` of the night, the night's chain declared (``--for-op``: the ciphertexts stored as it
        needs, and the owner's spot samples keep its results).  ``fresh``: the owner has no record of the night
        (no ``owner.json``), so nothing in ROOT/ct/night=DS is the owner's run: ``--overwrite`` replaces
        whatever is there rather than refusing (or, as a planted "complete" manifest once did, skipping) the
        night."""
        return [self.hepix, "encrypt", *self.encrypt_args, f"--keys={public_keys}", f"--input={self.images}",
                f"--out={p.ct}", f"--owner={p.owner}", f"--skip-encrypted={self.owner_maps()}",
                *(f"--for-op={op}" for op in self.ops), f"--master={self.owner_master}", "--quiet",
                *(["--overwrite"] if fresh else [])]

    def process_args(self, p: Paths, public_keys: str) -> list[str]:
        """The arguments of ``spark-submit/hepix_main.py`` (SparkSubmitOperator passes them as a list)."""
        return ["process", f"--keys={public_keys}", f"--input={p.ct}", f"--out={p.processed}",
                *(f"--op={op}" for op in self.ops), "--quiet"]

    def verify_command(self, p: Paths) -> list[str]:
        return [self.hepix, "verify", f"--master={self.owner_master}", "--quiet", p.processed]

    def decrypt_command(self, p: Paths) -> list[str]:
        return [self.hepix, "decrypt", f"--keys={self.keys}", f"--input={p.processed}", f"--out={p.dec}",
                f"--owner={p.owner}", f"--images={self.images}", f"--master={self.owner_master}", "--quiet",
                *(f"--expect-ops={op}" for op in self.ops)]       # the run must record the chain asked for


def _inside(a: Path, b: Path) -> bool:
    a, b = Path(os.path.abspath(a)), Path(os.path.abspath(b))
    return a == b or a.is_relative_to(b)


def _manifest(directory: str, log) -> dict | None:
    try:
        return read_manifest(directory)
    except Refused as e:
        log.warning("manifest refused, counted as no complete run: %s", e)
        return None


def _parent(doc: dict) -> str | None:
    return (doc.get("parent") or {}).get("run_id")


def _same_encrypt_run(ct: dict, owner: dict) -> bool:
    """The encrypt manifest in ROOT is of the run the owner map records (hepix encrypt's own test on resume)."""
    return not owner["runs"] or ct.get("runs", [])[:1] == owner["runs"][:1]


def private_dirs(*paths: str) -> None:
    """Create each of ``paths`` (local) that is missing, mode 0700; existing ones are left as they are."""
    for p in paths:
        local_path(p).mkdir(mode=0o700, parents=True, exist_ok=True)


@contextmanager
def exclusive(owner_root: str, log):
    """Hold OWNER_ROOT's lock (waiting for it, saying so): one night's encrypt at a time.  An image lands in one
    night because each encrypt skips what earlier nights' owner maps hold, which two encrypts at once would not
    see of each other; Airflow 3 runs backfill runs besides scheduled ones (the DAG's ``max_active_runs`` counts
    only the latter), and a backfill runs ten at a time unless told ``--max-active-runs 1``."""
    path = local_path(owner_root) / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another night's encrypt holds %s: waiting for it to finish", path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Command:
    """One command (a list of arguments, no shell), its output passed line by line to a logger."""

    def __init__(self, argv: list[str]):
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise Refused(f"a command is a non-empty list of strings, not {one_line(repr(argv), 80)}")
        self.argv = argv
        self.proc: subprocess.Popen | None = None

    def run(self, log, env=None) -> int:
        """Run it (in a session of its own, as :meth:`kill` stops it whole); its exit status."""
        log.info("running %s", shlex.join(self.argv))
        with subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=env, start_new_session=True, text=True, errors="replace") as self.proc:
            for line in self.proc.stdout:
                log.info("%s", line.rstrip("\n"))
            return self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
