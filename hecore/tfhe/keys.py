"""TFHE key directories.

Layout (the directory is created with mode 0700)::

    hepix-keys.json   scheme "tfhe", the parameter set (TfheParams.to_json), fingerprint, sha256 of
                      server.key and public.key
    server.key        the server (evaluation) key, mode 0644: public, what the cluster gets
    public.key        the compact public key, mode 0644: public, what an encrypting machine gets
    client.key        the client key, mode 0600: secret, only on the data owner's side

The client key encrypts and decrypts; the compact public key encrypts (``hepix encrypt`` without the
secret: :class:`~hecore.tfhe.encryptor.TfhePublicEncryptor`); the server key evaluates, casts public-key
ciphertexts to the computation parameters, and cannot decrypt.  Key directories made before hepix made
a compact public key have no ``public.key`` (and their server key no key-switching key for one): they
encrypt with the client key only, and :func:`read_public_key` says so.  The fingerprint
is the sha256 of ``server.key``'s bytes; it is recorded with every ciphertext so that ciphertexts of
another key set are refused by name.  :func:`read_public` / :func:`read_server_key` never open
``client.key``, so a processing job can be pointed at the owner's directory without the secret
entering its memory (the processing job goes further and refuses such a directory);
:func:`export_public` writes a copy without it, to hand to the cluster.  ``client.key`` is written
and read with the same discipline as CKKS's ``secret.key`` (:mod:`hecore.secretfile`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import KeyDirectoryError, KeyMismatch
from ..keys import MANIFEST
from ..secretfile import make_private_directory, read_owner_only, write_private
from .native import native_module
from .params import PARAMETERS, SCHEME, TFHE_DEFAULT, TfheParams, TfhePublicMaterial

log = logging.getLogger(__name__)

CLIENT = "client.key"
SERVER = "server.key"
PUBLIC = "public.key"
FORMAT = 1


@dataclass(frozen=True)
class TfheKeyInfo:
    """What ``hepix-keys.json`` of a TFHE key directory records."""

    params: TfheParams
    fingerprint: str
    created: str
    has_client_key: bool
    has_public_key: bool = False

    @property
    def parameters(self) -> str:
        return self.params.parameters

    @property
    def library(self) -> str:
        return self.params.library


def fingerprint(server_key: bytes) -> str:
    """The fingerprint of a key set: sha256 of its serialized server key."""
    return hashlib.sha256(server_key).hexdigest()


def keygen(out: str | os.PathLike, *, overwrite: bool = False, threads: int = 1,
           compressed_server_key: bool = False, params: TfheParams = TFHE_DEFAULT) -> TfheKeyInfo:
    """Generate a TFHE key set into a new key directory ``out``.

    ``compressed_server_key`` stores the server key in tfhe-rs's seeded form (a third of the bytes
    on disk and on the wire, expanded when loaded: seconds per load instead of under one).
    """
    params.validate()
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
    client, server, server_compressed, public = native.keygen(threads=threads)
    seconds = time.perf_counter() - t0
    server = server_compressed if compressed_server_key else server
    make_private_directory(out)
    write_private(out / SERVER, server, 0o644)
    write_private(out / PUBLIC, public, 0o644)
    write_private(out / CLIENT, client, 0o600)
    info = TfheKeyInfo(params=params, fingerprint=fingerprint(server),
                       created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), has_client_key=True,
                       has_public_key=True)
    _write_manifest(out, info, server, public)
    log.info("generated TFHE keys %s in %s (%.1f s; server key %d bytes%s, compact public key %d bytes)",
             info.fingerprint[:16], out, seconds, len(server), ", compressed" if compressed_server_key else "",
             len(public))
    return info


def _write_manifest(out: Path, info: TfheKeyInfo, server: bytes, public: bytes | None) -> None:
    sums = {SERVER: hashlib.sha256(server).hexdigest()}
    if public is not None:
        sums[PUBLIC] = hashlib.sha256(public).hexdigest()
    doc = {"format": FORMAT, "scheme": SCHEME, "params": info.params.to_json(),
           "parameters": info.params.parameters, "library": info.params.library,
           "fingerprint": info.fingerprint, "created": info.created, "sha256": sums}
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
            f"{keys} is not a hepix key directory (no {MANIFEST}); create one with `hepix keygen --scheme tfhe`"
        )
    try:
        doc = json.loads(path.read_text())
        if doc.get("scheme") != SCHEME:
            raise KeyDirectoryError(
                f"{path} is a key directory of scheme {doc.get('scheme', 'ckks/bfv/bgv (hecore.keys)')!r}, not "
                f"{SCHEME!r}; use a TFHE key directory (`hepix keygen --scheme tfhe`)"
            )
        if doc.get("format") != FORMAT:
            raise KeyDirectoryError(f"{path}: key directory format {doc.get('format')!r} is not {FORMAT}")
        params = TfheParams.from_json(doc["params"]) if "params" in doc else _legacy_params(doc)
        return TfheKeyInfo(params=params, fingerprint=str(doc["fingerprint"]), created=str(doc.get("created", "")),
                           has_client_key=(keys / CLIENT).exists(), has_public_key=PUBLIC in doc.get("sha256", {}))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise KeyDirectoryError(f"{path} is malformed: {e}") from e


def _legacy_params(doc: dict) -> TfheParams:
    """Directories written before the manifest recorded ``params``: the one parameter set there was."""
    if not str(doc["parameters"]).startswith(PARAMETERS):
        raise KeyDirectoryError(f"unknown TFHE parameters {doc['parameters']!r}; make new keys")
    return TFHE_DEFAULT


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


def read_public_key(keys: str | os.PathLike) -> bytes:
    """The compact public key bytes, checked against the sha256 the manifest records.  A key directory
    made before hepix made one is refused, saying what to do.  Never opens ``client.key``."""
    keys = Path(keys)
    info = read_info(keys)
    if not info.has_public_key:
        raise KeyDirectoryError(
            f"{keys} holds no TFHE compact public key ({PUBLIC}): its keys were made before hepix encrypted TFHE "
            "with a public key; encrypt on the data owner's side with the client key (`hepix encrypt "
            "--encryption symmetric` with the directory that holds client.key), or make a new key set with "
            "`hepix keygen --scheme tfhe` and hand its `hepix export-public` copy to the encrypting machine")
    path = keys / PUBLIC
    if not path.is_file():
        raise KeyDirectoryError(f"{keys} has no {PUBLIC} although its manifest records one; the key directory is "
                                "incomplete: copy it again with `hepix export-public`")
    data = path.read_bytes()
    recorded = json.loads((keys / MANIFEST).read_text())["sha256"][PUBLIC]
    if hashlib.sha256(data).hexdigest() != recorded:
        raise KeyDirectoryError(f"{path} is not the compact public key of key set {info.fingerprint[:16]}: the "
                                "directory was modified or mixed from two key sets")
    return data


def read_public(keys: str | os.PathLike) -> TfhePublicMaterial:
    """The public material of a TFHE key directory (parameters, checked server key and compact public key
    when it has one).  Never opens ``client.key``: what the processing side loads, like
    :func:`hecore.keys.read_public`."""
    info = read_info(keys)
    return TfhePublicMaterial(params=info.params, server_key=read_server_key(keys),
                              public_key=read_public_key(keys) if info.has_public_key else None)


def read_client_key(keys: str | os.PathLike) -> bytes:
    """The client (secret) key bytes, for the data owner's jobs (encryption, decryption).  Refuses a
    missing key, a symbolic link, anything but a regular file, a key that group or others can read and
    one owned by another user (:func:`hecore.secretfile.read_owner_only`, as for ``secret.key``)."""
    keys = Path(keys)
    read_info(keys)
    return read_owner_only(
        keys / CLIENT, what="the client key",
        missing=(f"{keys} holds no {CLIENT} (a public-only key directory); this needs the data owner's key "
                 "directory with its client key"))


def export_public(keys: str | os.PathLike, out: str | os.PathLike) -> TfheKeyInfo:
    """Copy the public part of ``keys`` (manifest, server key and compact public key when it has one) into
    a new directory ``out``."""
    keys, out = Path(keys), Path(out)
    material = read_public(keys)
    if out.exists() and any(out.iterdir()):
        raise KeyDirectoryError(f"{out} exists and is not empty; choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    write_private(out / SERVER, material.server_key, 0o644)
    if material.public_key is not None:
        write_private(out / PUBLIC, material.public_key, 0o644)
    info = read_info(keys)
    info = TfheKeyInfo(info.params, info.fingerprint, info.created, has_client_key=False,
                       has_public_key=material.public_key is not None)
    _write_manifest(out, info, material.server_key, material.public_key)
    log.info("exported TFHE server key %s%s to %s", info.fingerprint[:16],
             " and compact public key" if info.has_public_key else "", out)
    return info


def check_fingerprint(expected: str, actual: str, what: str = "ciphertexts") -> None:
    """Raise :class:`KeyMismatch` unless two fingerprints name the same key set."""
    if expected != actual:
        raise KeyMismatch(
            f"{what} were made with TFHE key {expected[:16]}, the key directory holds {actual[:16]}; "
            "use the key directory the ciphertexts were encrypted with"
        )


def check_key_pair(client_key: bytes, server_key: bytes, *, threads: int = 1) -> None:
    """Raise :class:`KeyMismatch` unless ``client_key`` and ``server_key`` belong to one key set.

    Nothing in a tfhe-rs server key names its client key, so this is a functional check: two values
    encrypted with the client key go through one op with the server key (one bootstrap per block),
    and must decrypt to the op's result.  Under a foreign server key each of the four blocks decodes
    to noise, so both results come out right by chance with probability about 2^-16.  A few
    bootstraps: do it once (the driver), not per task.
    """
    native = native_module()
    ck, sk = native.ClientKey(client_key), native.ServerKey(server_key)
    cts = ck.encrypt(bytes([3, 200]), threads=threads)
    got = ck.decrypt(sk.apply("ge-mask", cts, constant=128, threads=threads), threads=threads)
    if got != bytes([0, 255]):
        raise KeyMismatch(
            "the client key does not belong to the server key (an op evaluated with the server key does not "
            "decrypt under the client key): the key directory was mixed from two key sets; use one "
            "directory made by `hepix keygen --scheme tfhe`")
