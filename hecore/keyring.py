"""The owner's key records: the fingerprints of the key sets this user made, kept where only the user writes.

A public key directory is a copy that travels (to an encrypting machine, a shared file system, HDFS), and
its own ``hepix-keys.json`` cannot vouch for it: whoever can replace ``public.key`` can rewrite the sha256
and the fingerprint beside it.  Encrypting under a public key is safe only when the owner knows that key
is its own, so before ``hepix encrypt`` uses a public-only key directory its fingerprint (which covers
every public component of the key set: :meth:`hecore.seal.context.PublicMaterial.fingerprint`,
:meth:`hecore.tfhe.params.TfhePublicMaterial.fingerprint`) must be vouched for by something the owner
holds (:func:`vouch`):

* the owner's key records, this module: every key set ``keygen`` makes is recorded in
  ``$HEPIX_KEYRING``, by default ``$XDG_CONFIG_HOME/hepix/keyring.json`` (``~/.config/hepix/...``), a
  0600 file in a 0700 directory of the user's, read only when no other user can have written it;
* a fingerprint the owner names (``hepix encrypt --key-fingerprint``: the one ``hepix keygen`` printed);
* the owner map a run adds to (a resumed or incremental encrypt: the fingerprint its first run used).

A directory that holds the secret is checked against the secret itself instead (the key set's
``open(secret=True)``): the public key must encrypt what the secret decrypts.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from .errors import KeyDirectoryError, SecretKeyMissing
from .keyfiles import parse_json_object
from .secretfile import make_private_directory, read_owner_only

log = logging.getLogger(__name__)

KEYRING_ENV = "HEPIX_KEYRING"
FORMAT = 1
#: The largest key records file read (an entry is about 200 bytes).
MAX_BYTES = 16 * 2**20
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")
#: The shortest fingerprint prefix accepted where the owner names one (64 bits: no key set is found to match).
MIN_PREFIX = 16


def keyring_path() -> Path:
    """Where the owner's key records are: ``$HEPIX_KEYRING``, else ``hepix/keyring.json`` in the user's
    configuration directory."""
    given = os.environ.get(KEYRING_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "hepix" / "keyring.json"


def recorded() -> dict[str, dict]:
    """The key sets the owner recorded, by fingerprint; empty when there are no records yet.  A records
    file that another user could have written (or that is not this user's, a link, malformed) is refused
    with a :class:`KeyDirectoryError`: it would vouch for keys the owner never made."""
    path = keyring_path()
    try:
        data = read_owner_only(path, what="the owner's key records", missing="")
    except SecretKeyMissing:
        return {}
    try:
        doc = parse_json_object(data, max_bytes=MAX_BYTES)
        if doc.get("format") != FORMAT or not isinstance(doc.get("keys"), dict):
            raise ValueError("not a key records file of format 1")
        keys = {k: v for k, v in doc["keys"].items() if isinstance(k, str) and _FINGERPRINT.match(k)
                and isinstance(v, dict)}
    except ValueError as e:
        raise KeyDirectoryError(f"{path}: {e}; move it aside (new key sets are then recorded afresh) or set "
                                f"{KEYRING_ENV}") from None
    return keys


def record(fingerprint: str, *, scheme: str, directory: str | os.PathLike) -> Path | None:
    """Add a key set the owner just made to its records (keygen); the records file's path, or None when
    it cannot be written (a warning says what that means: encrypt then needs ``--key-fingerprint``)."""
    path = keyring_path()
    try:
        make_private_directory(path.parent)
        with open(path.parent / (path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            here = os.path.abspath(directory)
            keys = {fp: e for fp, e in recorded().items() if e.get("directory") != here}   # keys made over old ones
            keys[fingerprint] = {"scheme": scheme, "directory": here,
                                 "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"format": FORMAT, "keys": keys}, f, indent=1, sort_keys=True)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        return path
    except (OSError, KeyDirectoryError) as e:
        log.warning("key set %s was not recorded in the owner's key records %s (%s): encrypting with a public "
                    "copy of it then needs --key-fingerprint %s", fingerprint[:16], path,
                    str(e).splitlines()[0][:160], fingerprint)
        return None


def check_directory(directory: str | os.PathLike, fingerprint: str) -> None:
    """Refuse the owner's key directory ``directory`` when keygen recorded another fingerprint for it: one of
    its public files was replaced (and its manifest rewritten to match) since the keys were made there."""
    here = os.path.abspath(directory)
    for fp, entry in recorded().items():
        if entry.get("directory") == here and fp != fingerprint:
            raise KeyDirectoryError(
                f"{directory} holds key set {fingerprint[:16]}, but keygen made key set {fp[:16]} there: one of its "
                "public files was replaced since (its manifest rewritten to match); restore the directory from a "
                "copy made when the keys were, or make new keys")


def check_fingerprint_text(given: str) -> str:
    """A fingerprint (or prefix of at least :data:`MIN_PREFIX` hex digits) the owner typed, lower-cased;
    a ValueError naming it otherwise."""
    text = given.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{%d,64}" % MIN_PREFIX, text):
        raise ValueError(f"--key-fingerprint {given[:80]!r} is not a key fingerprint: give the {MIN_PREFIX} to 64 "
                         "hex digits `hepix keygen` printed for the key set")
    return text


def vouch_for(keys, *, directory: str | os.PathLike, given: str | None = None, owner: Iterable[str] = ()) -> str:
    """Why the owner trusts the public key set ``keys`` (a :class:`hecore.schemes.KeySet` without its secret,
    read from ``directory``) to encrypt under: :func:`vouch` for its fingerprint, once the fingerprint is
    known to cover the public key."""
    if not keys.public_key_bound:
        raise KeyDirectoryError(
            f"{directory} is a key directory of an older format whose fingerprint does not cover its public key, so "
            "no record can vouch for it: encrypt with the owner's key directory (the one with "
            f"{keys.scheme.secret_file}, which proves its public key), or make a new key set")
    return vouch(keys.fingerprint, directory=directory, given=given, owner=owner)


def vouch(fingerprint: str, *, directory: str | os.PathLike, given: str | None = None,
          owner: Iterable[str] = ()) -> str:
    """Why the owner trusts public keys of ``fingerprint`` (read from ``directory``, which holds no
    secret): the fingerprint named (``given``), the owner map's (``owner``), or the owner's key records.
    A :class:`KeyDirectoryError` saying how to vouch for them otherwise; a named fingerprint that differs
    is refused even when the records know the key set."""
    if given is not None:
        text = check_fingerprint_text(given)
        if fingerprint.startswith(text):
            return "the fingerprint given"
        raise KeyDirectoryError(
            f"{directory} holds the public keys of key set {fingerprint[:16]}, not of {text[:16]} (--key-fingerprint): "
            "the directory is another key set's, or one of its files was replaced; do not encrypt with it, and "
            "export the public keys again from the owner's key directory (`hepix export-public`)")
    if fingerprint in set(owner):
        return "the owner map"
    if fingerprint in recorded():
        return "the owner's key records"
    raise KeyDirectoryError(
        f"{directory} holds public keys of key set {fingerprint[:16]}, which no record of yours vouches for (its own "
        f"hepix-keys.json cannot: whoever replaces a key rewrites it too): if {fingerprint[:16]} is the fingerprint "
        f"`hepix keygen` printed for your keys, pass --key-fingerprint {fingerprint}; or encrypt with the owner's "
        f"key directory, or on the machine that made the keys (its records: {keyring_path()})")
