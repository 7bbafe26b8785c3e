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

The fingerprint covers every public file (format 2: :meth:`PublicMaterial.fingerprint`), and every file
is read with a bound (:mod:`hecore.keyfiles`).  The manifest records the files' sha256 and the
fingerprint, but it sits in the same directory and vouches for nothing: a directory is trusted because
its public key belongs to the secret beside it (:func:`check_key_pair`, whenever the secret is read) or
because the owner's records name its fingerprint (:mod:`hecore.keyring`).  Key directories of format 1
(made before the fingerprint covered the evaluation keys) keep their fingerprint over the public key.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import HepixError, KeyDirectoryError, KeyMismatch
from ..keyfiles import MANIFEST, read_bounded, read_manifest, sha256_bounded
from ..secretfile import make_private_directory, read_owner_only, write_private
from .context import HEContext, PublicMaterial
from .params import Params

log = logging.getLogger(__name__)

CONTEXT = "context.bin"
PUBLIC = "public.key"
RELIN = "relin.key"
ROTATE = "rotate.key"
SECRET = "secret.key"
PUBLIC_FILES = (CONTEXT, PUBLIC, RELIN, ROTATE)
#: The evaluation keys ``hepix export-public --for-op`` may leave out: what a chain without a ciphertext
#: product, or without a rotation, does not need.
WITHHOLDABLE = (RELIN, ROTATE)
_FIELDS = {RELIN: "relin_key", ROTATE: "rotate_key"}
#: The format of new key directories (2: the fingerprint covers every public file); 1 is still read.
FORMAT = 2
FORMATS = (1, 2)
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
    _write_manifest(out, info, dict(pub.digests), FORMAT)
    from ..keyring import record

    record(info.fingerprint, scheme=params.scheme, directory=out)
    log.info("generated keys %s (%s) in %s", info.fingerprint[:16], params.describe(), out)
    return info


def _write_manifest(out: Path, info: KeyInfo, checksums: dict[str, str], fmt: int, withheld=(),
                    rotation: tuple[tuple[int, ...], str] | None = None) -> None:
    doc = {"format": fmt, "params": info.params.to_json(), "fingerprint": info.fingerprint,
           "created": info.created, "sha256": checksums}
    if withheld:
        doc["withheld"] = sorted(withheld)
    if rotation is not None:            # a chain's subset of the Galois keys: its steps and its own digest
        doc["rotation_steps"], doc["rotation_sha256"] = list(rotation[0]), rotation[1]
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)


def read_info(keys: str | os.PathLike) -> KeyInfo:
    """Read ``hepix-keys.json`` (does not read any key)."""
    keys = Path(keys)
    return _info(keys, manifest_doc(keys))


def _info(keys: Path, doc: dict) -> KeyInfo:
    path = keys / MANIFEST
    if doc.get("scheme") == TFHE_SCHEME:
        raise KeyDirectoryError(
            f"{keys} is a TFHE key directory (client.key / server.key); this needs CKKS, BFV or BGV keys "
            "(`hepix keygen --preset NAME`), or use TFHE ops with these keys")
    if doc.get("format") not in FORMATS:
        raise KeyDirectoryError(f"{path}: key directory format {str(doc.get('format'))[:40]!r} is not one of "
                                f"{', '.join(map(str, FORMATS))}")
    try:
        params = Params.from_json(doc["params"])
        fingerprint = doc["fingerprint"]
        if not isinstance(fingerprint, str) or len(fingerprint) != 64:
            raise ValueError(f"fingerprint {str(fingerprint)[:80]!r} is not 64 hex digits")
        created = str(doc.get("created", ""))[:64]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise KeyDirectoryError(f"{path} is malformed: {str(e).splitlines()[0][:200]}") from None
    return KeyInfo(params, fingerprint, created, has_secret=(keys / SECRET).exists())


def manifest_doc(keys: str | os.PathLike) -> dict:
    """The parsed ``hepix-keys.json`` of a key directory of any scheme (reads no key), or a
    :class:`KeyDirectoryError` saying how to make one, or that it is malformed."""
    path = Path(keys) / MANIFEST
    if not path.exists():
        raise KeyDirectoryError(
            f"{keys} is not a hepix key directory (no {MANIFEST}); create one with `hepix keygen --out {keys}`")
    return read_manifest(path)


def key_scheme(keys: str | os.PathLike) -> str:
    """The scheme of a key directory, from its manifest alone (reads no key): ``tfhe`` for TFHE keys,
    else the parameters' scheme (``ckks``, ``bfv``, ``bgv``).  :func:`hecore.schemes.scheme_of` gives
    the scheme's type."""
    if manifest_doc(keys).get("scheme") == TFHE_SCHEME:
        return TFHE_SCHEME
    return read_info(keys).params.scheme


def max_file_bytes(params: Params, name: str) -> int:
    """The most bytes a public file of a key set of ``params`` can hold: a public key is one ciphertext
    over every prime (two polynomials of N coefficients), a relinearisation key one per prime of the
    ciphertext modulus, the Galois keys that many per power-of-two rotation (both ways) and conjugation
    (SEAL's default set; hepix's CKKS sets leave the conjugation out);
    with SEAL's headers and a compression that never grows data by more than a fraction."""
    primes = len(params.qi_sizes)
    one = 2 * params.n * primes * 8
    count = {CONTEXT: 0, PUBLIC: 1, RELIN: max(1, primes - 1),
             ROTATE: max(1, primes - 1) * (2 * params.n.bit_length() + 1)}[name]
    return (1 << 20) + int(count * one * 1.05)


def _read(keys: Path, name: str, params: Params, required: bool = True) -> bytes | None:
    path = keys / name
    if not path.exists() and not path.is_symlink():
        if required:
            raise KeyDirectoryError(f"{keys} has no {name}; the key directory is incomplete")
        return None
    return read_bounded(path, max_file_bytes(params, name), what=f"{params.name}'s {name}")


def read_public(keys: str | os.PathLike, *, eval_keys: bool = True) -> PublicMaterial:
    """The public material of a key directory: every file within its bound, of the sha256 the manifest
    records, and the fingerprint recomputed over them equal to the recorded one (a directory consistent
    in itself; whether it is the owner's is :func:`check_key_pair`'s or :mod:`hecore.keyring`'s question).

    ``eval_keys=False`` leaves the relinearisation and rotation keys unread
    (encryption does not need them; they are the bulk of the directory).
    """
    keys = Path(keys)
    doc = manifest_doc(keys)
    info = _info(keys, doc)
    recorded = doc.get("sha256", {})
    if not isinstance(recorded, dict) or not all(
            name in PUBLIC_FILES and isinstance(v, str) and len(v) == 64 for name, v in recorded.items()):
        raise KeyDirectoryError(f"{keys / MANIFEST} is malformed: its sha256 record is not one per public key file")
    withheld = doc.get("withheld", [])
    if not isinstance(withheld, list) or not set(withheld) <= set(WITHHOLDABLE) & set(recorded):
        raise KeyDirectoryError(f"{keys / MANIFEST} is malformed: it withholds {str(withheld)[:80]}; only the "
                                f"evaluation keys ({', '.join(WITHHOLDABLE)}) the key set was made with can be")
    p = info.params
    steps, recorded = _rotation_subset(keys, doc, recorded, withheld, p)
    material = PublicMaterial(
        params=p,
        context=_read(keys, CONTEXT, p),
        public_key=_read(keys, PUBLIC, p),
        relin_key=_read(keys, RELIN, p, required=False) if eval_keys else None,
        rotate_key=_read(keys, ROTATE, p, required=False) if eval_keys else None,
        digests=tuple(sorted(doc["sha256"].items())) if doc["format"] >= 2 else None,
        rotation_steps=steps,
    )
    for name in PUBLIC_FILES:
        data = {CONTEXT: material.context, PUBLIC: material.public_key,
                RELIN: material.relin_key, ROTATE: material.rotate_key}[name]
        if name in withheld:            # left out by export-public --for-op: the fingerprint still names it
            if (keys / name).exists():
                raise KeyDirectoryError(f"{keys}/{name} is there, but {MANIFEST} says the key set was exported "
                                        "without it; the directory was modified or mixed from two key sets")
            continue
        if not eval_keys and name in (RELIN, ROTATE):       # not loaded, but the file there is checked all the same
            if not (keys / name).exists():
                continue
            digest = sha256_bounded(keys / name, max_file_bytes(p, name), what=f"{p.name}'s {name}")
        else:
            digest = None if data is None else hashlib.sha256(data).hexdigest()
        if (digest is None) != (name not in recorded) or (digest is not None and digest != recorded[name]):
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


def _rotation_subset(keys: Path, doc: dict, recorded: dict, withheld: list, p: Params):
    """A manifest's record of a chain's subset of the Galois keys (``rotation_steps``, ``rotation_sha256``),
    checked: ``(steps or None, the digests rotate.key is checked against)``.  The fingerprint names the whole
    set the owner made; the subset, made from the same secret key by export-public, carries its own digest."""
    from .steps import check_steps

    if "rotation_steps" not in doc and "rotation_sha256" not in doc:
        return None, recorded
    digest = doc.get("rotation_sha256")
    try:
        steps = check_steps(doc.get("rotation_steps"), p.slots)
        if not (isinstance(digest, str) and len(digest) == 64 and all(ch in "0123456789abcdef" for ch in digest)):
            raise ValueError(f"rotation_sha256 {str(digest)[:80]!r} is not 64 hex digits")
        if ROTATE not in recorded or ROTATE in withheld:
            raise ValueError(f"it lists rotation steps for a key set whose {ROTATE} is not part of it")
    except ValueError as e:
        raise KeyDirectoryError(f"{keys / MANIFEST} is malformed: {e}") from None
    return steps, {**recorded, ROTATE: digest}


def check_owner_directory(keys: str | os.PathLike, public: PublicMaterial, secret_key: bytes) -> None:
    """The owner's key directory ``keys`` (its ``public`` material and secret read) is the key set it says:
    its public key belongs to the secret (:func:`check_key_pair`), and its fingerprint is the one keygen
    recorded for the directory, when it was made here (:func:`hecore.keyring.check_directory`)."""
    from ..keyring import check_directory

    check_key_pair(public, secret_key)
    check_directory(keys, public.fingerprint())


def check_key_pair(public: PublicMaterial, secret_key: bytes) -> None:
    """Raise :class:`KeyMismatch` unless ``secret_key`` decrypts what ``public``'s public key encrypts: the
    proof that a public key is the owner's, which no manifest can give.  A secret that does not load is a
    :class:`KeyDirectoryError` naming the file.  One encryption and one decryption: milliseconds."""
    import numpy as np

    probe = np.arange(1.0, 9.0)
    bare = dataclasses.replace(public, relin_key=None, rotate_key=None)
    got = HEContext.from_public(bare, secret_key=secret_key).decrypt_slots(
        HEContext.from_public(bare).encrypt_vector(probe), probe.size)
    if not np.allclose(got, probe, atol=1e-3):
        raise KeyMismatch(
            f"the secret key does not belong to key set {public.fingerprint()[:16]}: what that public key encrypts, "
            "the secret key cannot decrypt; the key directory was mixed from two key sets: use the directory "
            "`hepix keygen` made (and its secret.key), and do not encrypt with that public key")


def load_public(keys: str | os.PathLike, *, eval_keys: bool = True) -> HEContext:
    """A context that can encrypt and evaluate but not decrypt.  Never opens ``secret.key``.

    ``eval_keys=False``: encryption only (no relinearisation or rotation keys loaded).
    """
    return HEContext.from_public(read_public(keys, eval_keys=eval_keys))


def load_secret(keys: str | os.PathLike) -> HEContext:
    """A context with the secret key.  Refuses a secret key file that others can read."""
    public, secret = read_public(keys), read_secret_key(keys)
    check_owner_directory(keys, public, secret)
    return HEContext.from_public(public, secret_key=secret)


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


def holds_conjugation(material: PublicMaterial) -> bool:
    """Whether CKKS rotation keys hold SEAL's conjugation key (:func:`hecore.seal.galois.conjugation_element`):
    SEAL's default set, which hepix made before it made the set for the power-of-two steps alone.  False where
    the native extension that reads the keys' elements is missing, or the keys do not load."""
    from .galois import conjugation_element
    from .native import NativeExtensionMissing, native_module, seal_context_bytes

    if not material.params.complex_slots or material.rotate_key is None:
        return False
    try:
        native = native_module()
    except NativeExtensionMissing:
        return False
    try:
        security, _, seal_bytes = seal_context_bytes(material.context)
        held = native.galois_elements(seal_bytes, material.rotate_key, security)
    except (ValueError, HepixError):        # keys SEAL does not load: the jobs that load them say so
        return False
    return conjugation_element(material.params.n) in held


def export_public(keys: str | os.PathLike, out: str | os.PathLike, withhold=(),
                  rotation_steps: tuple[int, ...] | None = None) -> KeyInfo:
    """Copy the public part of ``keys`` into a new directory ``out`` (no secret key); the evaluation keys named
    in ``withhold`` (:data:`WITHHOLDABLE`) left out, and the manifest saying so (the fingerprint is the key
    set's all the same); with ``rotation_steps``, the Galois keys of those steps alone, made here from the
    owner's secret key (:mod:`hecore.seal.steps`), in place of the whole set."""
    keys, out = Path(keys), Path(out)
    material = read_public(keys)
    if not set(withhold) <= set(WITHHOLDABLE):
        raise ValueError(f"only {', '.join(WITHHOLDABLE)} can be withheld, not {sorted(set(withhold))}")
    if (withhold or rotation_steps is not None) and material.digests is None:
        raise KeyDirectoryError(f"{keys} was made before key sets recorded each file's digest; its evaluation keys "
                                "cannot be left out (make new keys with `hepix keygen`)")
    material = dataclasses.replace(material, **{_FIELDS[n]: None for n in withhold})
    secret = None
    if (keys / SECRET).exists():                # the owner's directory: its public key proven to be the secret's
        secret = read_secret_key(keys)
        check_owner_directory(keys, material, secret)
    rotation = None
    if rotation_steps is not None and material.rotate_key is not None and secret is None:
        log.warning("%s holds no secret key, which makes a chain's rotation keys: its rotation keys are copied as "
                    "they are (export from the owner's key directory for the chain's steps alone)", keys)
    elif rotation_steps is not None and material.rotate_key is not None:
        from .steps import check_steps

        steps = check_steps(sorted(set(rotation_steps)), material.params.slots)
        bare = dataclasses.replace(material, relin_key=None, rotate_key=None)
        subset = HEContext.from_public(bare, secret_key=secret).rotation_keys(steps)
        material = dataclasses.replace(material, rotate_key=subset, rotation_steps=steps)
        rotation = (steps, hashlib.sha256(subset).hexdigest())
    if out.exists() and any(out.iterdir()):
        raise KeyDirectoryError(f"{out} exists and is not empty; choose a new directory")
    if holds_conjugation(material):
        log.warning("%s holds SEAL's conjugation key (keys made by an earlier hepix), and so will %s: with it a "
                    "cluster can move the check values of `encrypt --bind` from one ciphertext to another; make new "
                    "keys with `hepix keygen`, or export --for-op CHAIN for the chain's rotation keys alone", keys, out)
    out.mkdir(parents=True, exist_ok=True)
    files = {CONTEXT: material.context, PUBLIC: material.public_key, RELIN: material.relin_key,
             ROTATE: material.rotate_key}
    for name, data in files.items():
        if data is not None:
            write_private(out / name, data, 0o644)
    info = read_info(keys)
    info = KeyInfo(info.params, info.fingerprint, info.created, has_secret=False)
    if material.digests is not None:
        if material.rotation_steps is not None and rotation is None:     # a copy of a copy keeps its subset
            rotation = (material.rotation_steps, hashlib.sha256(material.rotate_key).hexdigest())
        _write_manifest(out, info, dict(material.digests), 2,
                        withheld=[n for n in WITHHOLDABLE                 # this copy's, and a copy's copy's
                                  if n in dict(material.digests) and getattr(material, _FIELDS[n]) is None],
                        rotation=rotation)
    else:
        _write_manifest(out, info, {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if d is not None}, 1)
    log.info("exported public keys %s to %s", material.fingerprint()[:16], out)
    return info


def check_fingerprint(expected: str, actual: str, what: str = "ciphertexts") -> None:
    """Raise :class:`KeyMismatch` unless two fingerprints name the same key."""
    if expected != actual:
        raise KeyMismatch(
            f"{what} were made with key {expected[:16]}, the key directory holds {actual[:16]}; "
            "use the key directory the ciphertexts were encrypted with"
        )
