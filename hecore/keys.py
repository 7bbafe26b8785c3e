"""Key directories.

Layout of a key directory (created with mode 0700)::

    hepix-keys.json   parameters, fingerprint, file list, creation time
    context.bin       the Pyfhel/SEAL context (zstd)
    public.key        public key (zstd)
    relin.key         relinearisation key, when the parameters allow key switching
    rotate.key        Galois (rotation) keys, likewise, unless made with rotations=False
    secret.key        the secret key, mode 0600 -- only on the data owner's side

:func:`load_public` reads only the public files: it never opens ``secret.key``,
so a processing job can be pointed at a directory that holds one without the
secret ever entering its memory (the processing job goes further and refuses
such a directory; see ``hepix process``).  :func:`export_public` writes a
copy without the secret key, to hand to the cluster.
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

from .context import HEContext, PublicMaterial
from .errors import KeyDirectoryError, KeyMismatch
from .params import Params
from .secretfile import make_private_directory, read_owner_only, write_private

log = logging.getLogger(__name__)

MANIFEST = "hepix-keys.json"
CONTEXT = "context.bin"
PUBLIC = "public.key"
RELIN = "relin.key"
ROTATE = "rotate.key"
SECRET = "secret.key"
PUBLIC_FILES = (CONTEXT, PUBLIC, RELIN, ROTATE)
FORMAT = 1
#: The scheme of a TFHE key directory's manifest (:mod:`hecore.tfhe.keys`; its secret is ``client.key``).
TFHE_SCHEME = "tfhe"


@dataclass(frozen=True)
class KeyInfo:
    """What ``hepix-keys.json`` records."""

    params: Params
    fingerprint: str
    created: str
    has_secret: bool


def keygen(params: Params, out: str | os.PathLike, *, overwrite: bool = False, rotations: bool = True) -> KeyInfo:
    """Generate keys for ``params`` into a new key directory ``out``.

    ``rotations=False`` leaves out the Galois keys (tens of MB at N=8192): the
    pixel layout and the packed pointwise ops do not need them, the packed
    mean filter and matching do.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise KeyDirectoryError(
                f"{out} exists and is not empty; choose a new directory (or pass overwrite=True "
                "to replace its keys -- ciphertexts made with the old keys can then no longer be decrypted)"
            )
        shutil.rmtree(out)
    make_private_directory(out)
    ctx, secret = HEContext.generate(params, rotations=rotations)
    pub = ctx.public
    write_private(out / CONTEXT, pub.context, 0o644)
    write_private(out / PUBLIC, pub.public_key, 0o644)
    if pub.relin_key is not None:
        write_private(out / RELIN, pub.relin_key, 0o644)
    if pub.rotate_key is not None:
        write_private(out / ROTATE, pub.rotate_key, 0o644)
    write_private(out / SECRET, secret, 0o600)
    info = KeyInfo(params=params, fingerprint=ctx.fingerprint,
                   created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), has_secret=True)
    _write_manifest(out, info, _public_checksums(out))
    log.info("generated keys %s (%s) in %s", info.fingerprint[:16], params.describe(), out)
    return info


def _public_checksums(keys: Path) -> dict[str, str]:
    """sha256 of every public file, so that files mixed in from another key set are caught."""
    return {name: hashlib.sha256((keys / name).read_bytes()).hexdigest()
            for name in PUBLIC_FILES if (keys / name).is_file()}


def _write_manifest(out: Path, info: KeyInfo, checksums: dict[str, str]) -> None:
    doc = {"format": FORMAT, "params": info.params.to_json(), "fingerprint": info.fingerprint,
           "created": info.created, "sha256": checksums}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)


def read_info(keys: str | os.PathLike) -> KeyInfo:
    """Read ``hepix-keys.json`` (does not read any key)."""
    keys = Path(keys)
    path = keys / MANIFEST
    if not path.is_file():
        raise KeyDirectoryError(
            f"{keys} is not a hepix key directory (no {MANIFEST}); create one with `hepix keygen --out {keys}`"
        )
    try:
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and doc.get("scheme") == TFHE_SCHEME:
            raise KeyDirectoryError(
                f"{keys} is a TFHE key directory (client.key / server.key); this needs CKKS, BFV or BGV keys "
                "(`hepix keygen --preset NAME`), or use TFHE ops with these keys")
        if doc.get("format") != FORMAT:
            raise KeyDirectoryError(f"{path}: key directory format {doc.get('format')!r} is not {FORMAT}")
        params = Params.from_json(doc["params"])
        fingerprint = str(doc["fingerprint"])
        created = str(doc.get("created", ""))
    except (ValueError, KeyError) as e:
        raise KeyDirectoryError(f"{path} is malformed: {e}") from e
    return KeyInfo(params, fingerprint, created, has_secret=(keys / SECRET).exists())


def manifest_doc(keys: str | os.PathLike) -> dict:
    """The parsed ``hepix-keys.json`` of a key directory of any scheme (reads no key), or a
    :class:`KeyDirectoryError` saying how to make one, or that it is malformed."""
    path = Path(keys) / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise KeyDirectoryError(
            f"{keys} is not a hepix key directory (no {MANIFEST}); create one with `hepix keygen --out {keys}`"
        ) from None
    except (OSError, ValueError) as e:
        raise KeyDirectoryError(f"{path} is malformed: {e}") from None
    if not isinstance(doc, dict):
        raise KeyDirectoryError(f"{path} is malformed: not a JSON object")
    return doc


def key_scheme(keys: str | os.PathLike) -> str:
    """The scheme of a key directory, from its manifest alone (reads no key): ``tfhe`` for TFHE keys,
    else the parameters' scheme (``ckks``, ``bfv``, ``bgv``).  :func:`hecore.schemes.scheme_of` gives
    the scheme's type."""
    if manifest_doc(keys).get("scheme") == TFHE_SCHEME:
        return TFHE_SCHEME
    return read_info(keys).params.scheme


def _read(keys: Path, name: str, required: bool = True) -> bytes | None:
    path = keys / name
    if not path.is_file():
        if required:
            raise KeyDirectoryError(f"{keys} has no {name}; the key directory is incomplete")
        return None
    return path.read_bytes()


def read_public(keys: str | os.PathLike, *, eval_keys: bool = True) -> PublicMaterial:
    """The public material of a key directory, checked against its recorded fingerprint.

    ``eval_keys=False`` leaves the relinearisation and rotation keys unread
    (encryption does not need them; they are the bulk of the directory).
    """
    keys = Path(keys)
    info = read_info(keys)
    material = PublicMaterial(
        params=info.params,
        context=_read(keys, CONTEXT),
        public_key=_read(keys, PUBLIC),
        relin_key=_read(keys, RELIN, required=False) if eval_keys else None,
        rotate_key=_read(keys, ROTATE, required=False) if eval_keys else None,
    )
    recorded = json.loads((keys / MANIFEST).read_text()).get("sha256", {})
    for name in PUBLIC_FILES if eval_keys else (CONTEXT, PUBLIC):
        data = {CONTEXT: material.context, PUBLIC: material.public_key,
                RELIN: material.relin_key, ROTATE: material.rotate_key}[name]
        if (data is None) != (name not in recorded) or (
                data is not None and hashlib.sha256(data).hexdigest() != recorded[name]):
            raise KeyDirectoryError(
                f"{keys}/{name} is not the file key set {info.fingerprint[:16]} was created with (its sha256 "
                f"differs from the one in {MANIFEST}, or it is missing or extra): the fingerprint no longer "
                "vouches for it; the directory was modified or mixed from two key sets"
            )
    if material.fingerprint() != info.fingerprint:
        raise KeyDirectoryError(
            f"{keys}: the public key's fingerprint {material.fingerprint()[:16]} does not match the "
            f"recorded {info.fingerprint[:16]}; the directory was modified or mixed from two key sets"
        )
    return material


def load_public(keys: str | os.PathLike, *, eval_keys: bool = True) -> HEContext:
    """A context that can encrypt and evaluate but not decrypt.  Never opens ``secret.key``.

    ``eval_keys=False``: encryption only (no relinearisation or rotation keys loaded).
    """
    return HEContext.from_public(read_public(keys, eval_keys=eval_keys))


def load_secret(keys: str | os.PathLike) -> HEContext:
    """A context with the secret key.  Refuses a secret key file that others can read."""
    return HEContext.from_public(read_public(keys), secret_key=read_secret_key(keys))


def read_secret_key(keys: str | os.PathLike) -> bytes:
    """The secret key bytes of a key directory, for the key owner's own jobs (decryption, symmetric
    encryption).  Refuses a missing key, a symbolic link, something other than a regular file, a key
    that group or others can read, and one owned by another user, like :func:`load_secret`.

    The checks and the read use one file descriptor (opened with ``O_NOFOLLOW``, then ``fstat``): the
    file that was checked is the file that is read, whatever happens to the path in between.
    """
    keys = Path(keys)
    read_info(keys)
    return read_owner_only(
        keys / SECRET, what="the secret key",
        missing=(f"{keys} holds no {SECRET} (a public-only key directory); this needs the data owner's key "
                 "directory with its secret key"))


def export_public(keys: str | os.PathLike, out: str | os.PathLike) -> KeyInfo:
    """Copy the public part of ``keys`` into a new directory ``out`` (no secret key)."""
    keys, out = Path(keys), Path(out)
    material = read_public(keys)
    if out.exists() and any(out.iterdir()):
        raise KeyDirectoryError(f"{out} exists and is not empty; choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    for name in PUBLIC_FILES:
        if (keys / name).is_file():
            shutil.copyfile(keys / name, out / name)
    info = read_info(keys)
    info = KeyInfo(info.params, info.fingerprint, info.created, has_secret=False)
    _write_manifest(out, info, _public_checksums(out))
    log.info("exported public keys %s to %s", material.fingerprint()[:16], out)
    return info


def check_fingerprint(expected: str, actual: str, what: str = "ciphertexts") -> None:
    """Raise :class:`KeyMismatch` unless two fingerprints name the same key."""
    if expected != actual:
        raise KeyMismatch(
            f"{what} were made with key {expected[:16]}, the key directory holds {actual[:16]}; "
            "use the key directory the ciphertexts were encrypted with"
        )
