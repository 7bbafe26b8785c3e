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
covers the parameters, ``server.key`` and ``public.key`` (format 2; the server key's sha256 alone for
directories of format 1); it is recorded with every ciphertext so that ciphertexts of another key set
are refused by name.  The manifest vouches for nothing (it sits beside the keys it describes): whenever
the client key is read, the server and compact public keys are proven to be its own
(:func:`check_key_set`); without it, the owner's records must name the fingerprint
(:mod:`hecore.keyring`) before a public key encrypts.  :func:`read_public` / :func:`read_server_key`
never open ``client.key``, so a processing job can be pointed at the owner's directory without the secret
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
from ..keyfiles import MANIFEST, read_bounded, read_manifest
from ..secretfile import make_private_directory, read_owner_only, write_private
from .native import native_module
from .params import PARAMETERS, SCHEME, TFHE_DEFAULT, TfheParams, TfhePublicMaterial

log = logging.getLogger(__name__)

CLIENT = "client.key"
SERVER = "server.key"
PUBLIC = "public.key"
#: The format of new key directories (2: the fingerprint covers the public key too); 1 is still read.
FORMAT = 2
FORMATS = (1, 2)
#: The most bytes each public key file may hold (tfhe-rs's default parameters: a server key of 371 MB, a
#: compact public key of 33 KB).
MAX_BYTES = {SERVER: 1 << 30, PUBLIC: 16 << 20}


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
    """The fingerprint of a key set of format 1: sha256 of its serialized server key."""
    return hashlib.sha256(server_key).hexdigest()


def _digests(server: bytes, public: bytes | None) -> tuple[tuple[str, str], ...]:
    files = {SERVER: server} if public is None else {SERVER: server, PUBLIC: public}
    return tuple(sorted((name, hashlib.sha256(data).hexdigest()) for name, data in files.items()))


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
    material = TfhePublicMaterial(params, server, public, digests=_digests(server, public))
    info = TfheKeyInfo(params=params, fingerprint=material.fingerprint(),
                       created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), has_client_key=True,
                       has_public_key=True)
    _write_manifest(out, info, dict(material.digests), FORMAT)
    from ..keyring import record

    record(info.fingerprint, scheme=SCHEME, directory=out)
    log.info("generated TFHE keys %s in %s (%.1f s; server key %d bytes%s, compact public key %d bytes)",
             info.fingerprint[:16], out, seconds, len(server), ", compressed" if compressed_server_key else "",
             len(public))
    return info


def _write_manifest(out: Path, info: TfheKeyInfo, sums: dict[str, str], fmt: int) -> None:
    doc = {"format": fmt, "scheme": SCHEME, "params": info.params.to_json(),
           "parameters": info.params.parameters, "library": info.params.library,
           "fingerprint": info.fingerprint, "created": info.created, "sha256": sums}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)


def _manifest(keys: Path) -> dict:
    if not (keys / MANIFEST).exists():
        raise KeyDirectoryError(
            f"{keys} is not a hepix key directory (no {MANIFEST}); create one with `hepix keygen --scheme tfhe`")
    return read_manifest(keys / MANIFEST)


def is_tfhe_key_directory(keys: str | os.PathLike) -> bool:
    """Whether ``keys`` holds a manifest that says scheme "tfhe" (reads no key)."""
    try:
        return _manifest(Path(keys)).get("scheme") == SCHEME
    except KeyDirectoryError:
        return False


def read_info(keys: str | os.PathLike) -> TfheKeyInfo:
    """Read ``hepix-keys.json`` of a TFHE key directory (reads no key)."""
    keys = Path(keys)
    return _info(keys, _manifest(keys))


def _info(keys: Path, doc: dict) -> TfheKeyInfo:
    path = keys / MANIFEST
    if doc.get("scheme") != SCHEME:
        raise KeyDirectoryError(
            f"{path} is a key directory of scheme "
            f"{str(doc.get('scheme', 'ckks/bfv/bgv (hecore.seal.keys)'))[:40]!r}, not "
            f"{SCHEME!r}; use a TFHE key directory (`hepix keygen --scheme tfhe`)"
        )
    if doc.get("format") not in FORMATS:
        raise KeyDirectoryError(f"{path}: key directory format {str(doc.get('format'))[:40]!r} is not one of "
                                f"{', '.join(map(str, FORMATS))}")
    try:
        params = TfheParams.from_json(doc["params"]) if "params" in doc else _legacy_params(doc)
        sums = doc.get("sha256", {})
        if not isinstance(sums, dict) or not all(n in (SERVER, PUBLIC) and isinstance(v, str) and len(v) == 64
                                                  for n, v in sums.items()):
            raise ValueError("its sha256 record is not one per public key file")
        if not isinstance(doc["fingerprint"], str) or len(doc["fingerprint"]) != 64:
            raise ValueError(f"fingerprint {str(doc['fingerprint'])[:80]!r} is not 64 hex digits")
        return TfheKeyInfo(params=params, fingerprint=doc["fingerprint"], created=str(doc.get("created", ""))[:64],
                           has_client_key=(keys / CLIENT).exists(), has_public_key=PUBLIC in sums)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise KeyDirectoryError(f"{path} is malformed: {str(e).splitlines()[0][:200]}") from None


def _legacy_params(doc: dict) -> TfheParams:
    """Directories written before the manifest recorded ``params``: the one parameter set there was."""
    if not str(doc["parameters"]).startswith(PARAMETERS):
        raise KeyDirectoryError(f"unknown TFHE parameters {str(doc['parameters'])[:80]!r}; make new keys")
    return TFHE_DEFAULT


def _read_checked(keys: Path, name: str, doc: dict, fingerprint_: str) -> tuple[bytes, str]:
    """Key file ``name``, within its bound, of the sha256 the manifest records; and that sha256 (hex), which
    the fingerprint covers: the server key is hundreds of megabytes, hashed once per read."""
    path = keys / name
    if not path.exists() and not path.is_symlink():
        raise KeyDirectoryError(f"{keys} has no {name} although its manifest records one; the key directory is "
                                "incomplete: copy it again with `hepix export-public`")
    data = read_bounded(path, MAX_BYTES[name], what=f"a TFHE {name}")
    recorded, digest = doc.get("sha256", {}).get(name), hashlib.sha256(data).hexdigest()
    if recorded is not None and digest != recorded:
        what = "server key" if name == SERVER else "compact public key"
        raise KeyDirectoryError(f"{path} is not the {what} of key set {fingerprint_[:16]} (its sha256 differs from the "
                                f"one in {MANIFEST}): the directory was modified or mixed from two key sets")
    return data, digest


def read_server_key(keys: str | os.PathLike) -> bytes:
    """The server key bytes of a key directory consistent in itself (:func:`read_public`).  Never opens
    ``client.key``."""
    return read_public(keys).server_key


def read_public_key(keys: str | os.PathLike) -> bytes:
    """The compact public key bytes of a key directory consistent in itself (:func:`read_public`).  A key
    directory made before hepix made one is refused, saying what to do; so is one of format 1, whose
    fingerprint does not cover it.  Never opens ``client.key``."""
    keys = Path(keys)
    material = read_public(keys)
    if material.public_key is None:
        raise KeyDirectoryError(
            f"{keys} holds no TFHE compact public key ({PUBLIC}): its keys were made before hepix encrypted TFHE "
            "with a public key; encrypt on the data owner's side with the client key (`hepix encrypt "
            "--encryption symmetric` with the directory that holds client.key), or make a new key set with "
            "`hepix keygen --scheme tfhe` and hand its `hepix export-public` copy to the encrypting machine")
    return material.public_key


def read_public(keys: str | os.PathLike) -> TfhePublicMaterial:
    """The public material of a TFHE key directory (parameters, server key, and the compact public key when
    it has one), every file within its bound and of the sha256 the manifest records, and the fingerprint
    recomputed over them equal to the recorded one: a directory consistent in itself.  Whether it is the
    owner's is :func:`check_key_set`'s question (with the client key) or :mod:`hecore.keyring`'s.
    Never opens ``client.key``: what the processing side loads, like :func:`hecore.seal.keys.read_public`."""
    keys = Path(keys)
    doc = _manifest(keys)
    info = _info(keys, doc)
    files = {SERVER: _read_checked(keys, SERVER, doc, info.fingerprint)}
    if info.has_public_key:
        files[PUBLIC] = _read_checked(keys, PUBLIC, doc, info.fingerprint)
    server, public = files[SERVER][0], files[PUBLIC][0] if PUBLIC in files else None
    if doc["format"] >= 2:
        digests = tuple(sorted((name, digest) for name, (_, digest) in files.items()))
        material = TfhePublicMaterial(info.params, server, public, digests=digests)
        if dict(material.digests) != doc.get("sha256"):
            raise KeyDirectoryError(f"{keys / MANIFEST} records other key files than the directory holds; it was "
                                    "modified or mixed from two key sets")
    else:
        material = TfhePublicMaterial(info.params, server, public)
    if material.fingerprint() != info.fingerprint:
        raise KeyDirectoryError(
            f"{keys}: its keys' fingerprint {material.fingerprint()[:16]} is not the recorded {info.fingerprint[:16]}: "
            "the directory was modified or mixed from two key sets")
    return material


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
    if (keys / CLIENT).exists():            # the owner's directory: its public keys proven to be the client key's
        check_owner_directory(keys, material, read_client_key(keys))
    if out.exists() and any(out.iterdir()):
        raise KeyDirectoryError(f"{out} exists and is not empty; choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    write_private(out / SERVER, material.server_key, 0o644)
    if material.public_key is not None:
        write_private(out / PUBLIC, material.public_key, 0o644)
    info = read_info(keys)
    info = TfheKeyInfo(info.params, info.fingerprint, info.created, has_client_key=False,
                       has_public_key=material.public_key is not None)
    _write_manifest(out, info, dict(material.digests or _digests(material.server_key, material.public_key)),
                    FORMAT if material.digests is not None else 1)
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
    _check_server(_client(client_key), _server(server_key), threads)


def check_owner_directory(keys: str | os.PathLike, public: TfhePublicMaterial, client_key: bytes) -> None:
    """The owner's key directory ``keys`` (its ``public`` material and client key read) is the key set it
    says: its server and public keys belong to the client key (:func:`check_key_set`), and its fingerprint
    is the one keygen recorded for the directory, when it was made here (:func:`hecore.keyring.check_directory`)."""
    from ..keyring import check_directory

    check_key_set(client_key, public)
    check_directory(keys, public.fingerprint())


def check_key_set(client_key: bytes, public: TfhePublicMaterial, *, threads: int = 1) -> None:
    """Raise :class:`KeyMismatch` unless the server key and the compact public key of ``public`` both
    belong to ``client_key`` (:func:`check_key_pair`, then four random bytes encrypted with the public key,
    cast with the server key, must decrypt to themselves: under another key set's public key each decodes
    to noise, all four right by chance with probability about 2^-32).  What proves a public key is the
    owner's whenever the client key is read; the manifest beside the keys cannot."""
    ck, sk = _client(client_key), _server(public.server_key)
    _check_server(ck, sk, threads)
    if public.public_key is None:
        return
    probe = os.urandom(4)
    try:
        got = ck.decrypt(native_module().PublicKey(public.public_key).encrypt(probe, threads=threads),
                         threads=threads, server_key=sk)
    except ValueError as e:
        raise KeyMismatch(f"the compact public key of key set {public.fingerprint()[:16]} does not work with the "
                          f"client key ({str(e).splitlines()[0][:120]}): the key directory was mixed from two key "
                          "sets") from None
    if bytes(got) != probe:
        raise KeyMismatch(
            f"the compact public key of key set {public.fingerprint()[:16]} does not belong to the client key (what it "
            "encrypts, the client key cannot decrypt): the key directory was mixed from two key sets; use the "
            "directory `hepix keygen --scheme tfhe` made, and do not encrypt with that public key")


def _check_server(ck, sk, threads: int) -> None:
    cts = ck.encrypt(bytes([3, 200]), threads=threads)
    got = ck.decrypt(sk.apply("ge-mask", cts, constant=128, threads=threads), threads=threads)
    if got != bytes([0, 255]):
        raise KeyMismatch(
            "the client key does not belong to the server key (an op evaluated with the server key does not "
            "decrypt under the client key): the key directory was mixed from two key sets; use one "
            "directory made by `hepix keygen --scheme tfhe`")


def _client(data: bytes):
    return _load("ClientKey", CLIENT, "client key", data)


def _server(data: bytes):
    return _load("ServerKey", SERVER, "server key", data)


def _load(cls: str, name: str, what: str, data: bytes):
    """A tfhe-rs key of the native module, or a :class:`KeyDirectoryError` naming the file that does not load."""
    try:
        return getattr(native_module(), cls)(data)
    except ValueError as e:
        raise KeyDirectoryError(f"{name} does not load as a tfhe-rs {what} ({str(e).splitlines()[0][:120]}): the "
                                "file is damaged or not a key of this kind; restore the key directory from the "
                                "owner's copy") from None
