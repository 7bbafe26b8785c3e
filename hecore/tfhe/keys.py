"""TFHE key directories.

Layout (the directory is created with mode 0700)::

    hepix-keys.json   scheme "tfhe", the tfhe-rs parameters, fingerprint, sha256 of server.key
    server.key        the server (evaluation) key, mode 0644: public, what the cluster gets
    client.key        the client key, mode 0600: secret, only on the data owner's side

The client key decrypts; the server key evaluates and cannot decrypt.  The fingerprint is the
sha256 of ``server.key``'s bytes; it is recorded with every ciphertext so that ciphertexts of
another key set are refused by name.  :func:`read_server_key` never opens ``client.key``, so a
processing job can be pointed at the owner's directory without the secret entering its memory;
:func:`export_public` writes a copy without it, to hand to the cluster.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import KeyDirectoryError, KeyMismatch, SecretKeyMissing
from ..keys import MANIFEST, _write_private
from .native import native_module

log = logging.getLogger(__name__)

SCHEME = "tfhe"
CLIENT = "client.key"
SERVER = "server.key"
FORMAT = 1
#: The tfhe-rs parameter sets the keys are generated with (the library's defaults for 8-bit
#: integers, 128-bit security, failure probability 2^-128, with list compression enabled).
PARAMETERS = "PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128 + COMP_PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128"


@dataclass(frozen=True)
class TfheKeyInfo:
    """What ``hepix-keys.json`` of a TFHE key directory records."""

    fingerprint: str
    parameters: str
    library: str
    created: str
    has_client_key: bool


def fingerprint(server_key: bytes) -> str:
    """The fingerprint of a key set: sha256 of its serialized server key."""
    return hashlib.sha256(server_key).hexdigest()


def keygen(out: str | os.PathLike, *, overwrite: bool = False, threads: int = 1,
           compressed_server_key: bool = False) -> TfheKeyInfo:
    """Generate a TFHE key set into a new key directory ``out``.

    ``compressed_server_key`` stores the server key in tfhe-rs's seeded form (smaller on disk
    and on the wire, expanded when loaded).
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise KeyDirectoryError(
                f"{out} exists and is not empty; choose a new directory (or pass overwrite=True to "
                "replace its keys -- ciphertexts made with the old keys can then no longer be decrypted)"
            )
        shutil.rmtree(out)
    native = native_module()
    t0 = time.perf_counter()
    client, server, server_compressed = native.keygen(threads=threads)
    seconds = time.perf_counter() - t0
    server = server_compressed if compressed_server_key else server
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(out, 0o700)
    _write_private(out / SERVER, server, 0o644)
    _write_private(out / CLIENT, client, 0o600)
    info = TfheKeyInfo(fingerprint=fingerprint(server), parameters=PARAMETERS,
                       library=f"tfhe-rs {native.TFHE_RS_VERSION}",
                       created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), has_client_key=True)
    _write_manifest(out, info, server)
    log.info("generated TFHE keys %s in %s (%.1f s; server key %d bytes%s)", info.fingerprint[:16], out,
             seconds, len(server), ", compressed" if compressed_server_key else "")
    return info


def _write_manifest(out: Path, info: TfheKeyInfo, server: bytes) -> None:
    doc = {"format": FORMAT, "scheme": SCHEME, "parameters": info.parameters, "library": info.library,
           "fingerprint": info.fingerprint, "created": info.created,
           "sha256": {SERVER: hashlib.sha256(server).hexdigest()}}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)


def is_tfhe_key_directory(keys: str | os.PathLike) -> bool:
    """Whether ``keys`` holds a manifest that says scheme "tfhe" (reads no key)."""
    try:
        return json.loads((Path(keys) / MANIFEST).read_text()).get("scheme") == SCHEME
    except (OSError, ValueError, AttributeError):
        return False


def read_info(keys: str | os.PathLike) -> TfheKeyInfo:
    """Read ``hepix-keys.json`` of a TFHE key directory (reads no key)."""
    keys = Path(keys)
    path = keys / MANIFEST
    if not path.is_file():
        raise KeyDirectoryError(
            f"{keys} is not a hepix key directory (no {MANIFEST}); create one with hecore.tfhe.keys.keygen"
        )
    try:
        doc = json.loads(path.read_text())
        if doc.get("scheme") != SCHEME:
            raise KeyDirectoryError(
                f"{path} is a key directory of scheme {doc.get('scheme', 'ckks/bfv (hecore.keys)')!r}, not "
                f"{SCHEME!r}; use a TFHE key directory"
            )
        if doc.get("format") != FORMAT:
            raise KeyDirectoryError(f"{path}: key directory format {doc.get('format')!r} is not {FORMAT}")
        return TfheKeyInfo(fingerprint=str(doc["fingerprint"]), parameters=str(doc["parameters"]),
                           library=str(doc["library"]), created=str(doc.get("created", "")),
                           has_client_key=(keys / CLIENT).exists())
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise KeyDirectoryError(f"{path} is malformed: {e}") from e


def read_server_key(keys: str | os.PathLike) -> bytes:
    """The server key bytes, checked against the recorded fingerprint.  Never opens ``client.key``."""
    keys = Path(keys)
    info = read_info(keys)
    path = keys / SERVER
    if not path.is_file():
        raise KeyDirectoryError(f"{keys} has no {SERVER}; the key directory is incomplete")
    data = path.read_bytes()
    if fingerprint(data) != info.fingerprint:
        raise KeyDirectoryError(
            f"{path} is not the server key of key set {info.fingerprint[:16]} (its sha256 is "
            f"{fingerprint(data)[:16]}): the directory was modified or mixed from two key sets"
        )
    return data


def read_client_key(keys: str | os.PathLike) -> bytes:
    """The client (secret) key bytes, for the data owner's jobs.  Refuses a missing key and one
    that group or others can read."""
    keys = Path(keys)
    read_info(keys)
    path = keys / CLIENT
    if not path.is_file():
        raise SecretKeyMissing(
            f"{keys} holds no {CLIENT} (a public-only key directory); this needs the data owner's key "
            "directory with its client key"
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyDirectoryError(
            f"{path} has mode {mode:04o}: the client key is readable by other users; "
            f"run `chmod 600 {path}` (and check who may have read it)"
        )
    return path.read_bytes()


def export_public(keys: str | os.PathLike, out: str | os.PathLike) -> TfheKeyInfo:
    """Copy the public part of ``keys`` (manifest and server key) into a new directory ``out``."""
    keys, out = Path(keys), Path(out)
    server = read_server_key(keys)
    if out.exists() and any(out.iterdir()):
        raise KeyDirectoryError(f"{out} exists and is not empty; choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    _write_private(out / SERVER, server, 0o644)
    info = read_info(keys)
    info = TfheKeyInfo(info.fingerprint, info.parameters, info.library, info.created, has_client_key=False)
    _write_manifest(out, info, server)
    log.info("exported TFHE server key %s to %s", info.fingerprint[:16], out)
    return info


def check_fingerprint(expected: str, actual: str, what: str = "ciphertexts") -> None:
    """Raise :class:`KeyMismatch` unless two fingerprints name the same key set."""
    if expected != actual:
        raise KeyMismatch(
            f"{what} were made with TFHE key {expected[:16]}, the key directory holds {actual[:16]}; "
            "use the key directory the ciphertexts were encrypted with"
        )
