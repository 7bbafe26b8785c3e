"""Key directories are verified, not trusted.

A key directory's own ``hepix-keys.json`` sits beside the keys it describes: whoever replaces a key file
rewrites its sha256 and fingerprint too.  So a public key encrypts only once something the owner holds
vouches for it -- the secret beside it (the public key must encrypt what the secret decrypts), or the
owner's records of the fingerprint (keygen's key records, ``--key-fingerprint``, the run's owner map) --
and the fingerprint covers every public file, so that no file of another key set passes under the
owner's name.  Here every key file of a key set is replaced by another key set's, with and without the
manifest rewritten to match, with and without the secret in the directory: encrypt and decrypt refuse
in one line, before Spark starts and before a pixel is encrypted.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from hecore import keyring
from hecore.errors import KeyDirectoryError, KeyMismatch
from hecore.schemes import open_keys
from hecore.seal import keys as seal_keys
from hecore.seal.context import PublicMaterial
from hecore.seal.params import preset
from hecore.tfhe import keys as tfhe_keys
from hecore.tfhe.params import TfhePublicMaterial
from jobs.cli import main

SEAL_FILES = (seal_keys.CONTEXT, seal_keys.PUBLIC, seal_keys.RELIN, seal_keys.ROTATE)
TFHE_FILES = (tfhe_keys.SERVER, tfhe_keys.PUBLIC)


@pytest.fixture(scope="module")
def sets(tmp_path_factory, tfhe_key_dir, monkeypatch_module):
    """Per scheme, the owner's key directory (recorded in the run's key records) and another key set's,
    made under key records of their own (the other holder's)."""
    root = tmp_path_factory.mktemp("binding")
    seal_keys.keygen(preset("paper-4096"), root / "seal-owner")
    tfhe_owner = root / "tfhe-owner"
    shutil.copytree(tfhe_key_dir, tfhe_owner)
    keyring.record(tfhe_keys.read_info(tfhe_owner).fingerprint, scheme="tfhe", directory=tfhe_owner)
    with monkeypatch_module.context() as m:
        m.setenv(keyring.KEYRING_ENV, str(root / "other-records" / "keyring.json"))
        seal_keys.keygen(preset("paper-4096"), root / "seal-other")
        tfhe_keys.keygen(root / "tfhe-other")
    (root / "img").mkdir()
    Image.fromarray(np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)).save(root / "img" / "a.png")
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def files_of(scheme: str) -> tuple[str, ...]:
    return SEAL_FILES if scheme == "seal" else TFHE_FILES


def secret_of(scheme: str) -> str:
    return seal_keys.SECRET if scheme == "seal" else tfhe_keys.CLIENT


def rewrite_manifest(keys: Path, scheme: str) -> None:
    """What an attacker who replaced a file does next: the manifest's sha256 and fingerprint recomputed from
    the files now in the directory, so that it is consistent in itself."""
    path = keys / seal_keys.MANIFEST
    doc = json.loads(path.read_text())
    sums = {n: hashlib.sha256((keys / n).read_bytes()).hexdigest() for n in doc["sha256"]}
    doc["sha256"] = sums
    digests = tuple(sorted(sums.items()))
    if scheme == "seal":
        info = seal_keys.read_info(keys)
        fake = PublicMaterial(info.params, b"", (keys / seal_keys.PUBLIC).read_bytes(), digests=digests)
    else:
        info = tfhe_keys.read_info(keys)
        fake = TfhePublicMaterial(info.params, b"", None, digests=digests)
    doc["fingerprint"] = fake.fingerprint()
    path.write_text(json.dumps(doc))


def tampered(sets: Path, dest: Path, scheme: str, name: str, *, rewrite: bool, with_secret: bool) -> Path:
    """A copy of the owner's directory (with its secret, recorded in the key records where it now is, as if
    keygen had made it there; or its public files only) whose ``name`` is the other key set's."""
    owner, other = sets / f"{scheme}-owner", sets / f"{scheme}-other"
    dest.mkdir(mode=0o700)
    for f in owner.iterdir():
        if f.name != secret_of(scheme) or with_secret:
            shutil.copy2(f, dest / f.name)
    if with_secret:
        keyring.record(open_keys(owner).fingerprint, scheme=scheme, directory=dest)
    shutil.copyfile(other / name, dest / name)
    if rewrite:
        rewrite_manifest(dest, scheme)
    return dest


def refused(capsys, argv: list, *, out: Path) -> str:
    """``hepix argv`` exits 2 with one line on stderr naming the refusal, and writes nothing to ``out``."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert not out.exists()
    return err[0]


def encrypt_argv(sets: Path, keys: Path, out: Path) -> list:
    return ["encrypt", "--keys", keys, "--input", sets / "img", "--out", out, "--owner", str(out) + ".owner",
            "--master", "local[1]"]


# --- the case as found: another key set's compact public key in a public-only TFHE directory --------------

@pytest.mark.parametrize("fingerprint_too", [False, True], ids=["sha256-edited", "fingerprint-edited-too"])
def test_another_key_sets_tfhe_public_key_is_refused(sets, tmp_path, capsys, fingerprint_too):
    pub = tmp_path / "public"
    tfhe_keys.export_public(sets / "tfhe-owner", pub)
    shutil.copyfile(sets / "tfhe-other" / tfhe_keys.PUBLIC, pub / tfhe_keys.PUBLIC)
    doc = json.loads((pub / seal_keys.MANIFEST).read_text())
    doc["sha256"][tfhe_keys.PUBLIC] = hashlib.sha256((pub / tfhe_keys.PUBLIC).read_bytes()).hexdigest()
    (pub / seal_keys.MANIFEST).write_text(json.dumps(doc))
    if fingerprint_too:
        rewrite_manifest(pub, "tfhe")
    line = refused(capsys, encrypt_argv(sets, pub, tmp_path / "ct"), out=tmp_path / "ct")
    assert ("no record of yours vouches" if fingerprint_too else "mixed from two key sets") in line


def test_another_key_sets_public_key_beside_the_client_key_is_refused(sets, tmp_path, capsys):
    keys = tampered(sets, tmp_path / "keys", "tfhe", tfhe_keys.PUBLIC, rewrite=True, with_secret=True)
    line = refused(capsys, encrypt_argv(sets, keys, tmp_path / "ct"), out=tmp_path / "ct")
    assert "does not belong to the client key" in line


# --- the property: any key file of another key set, any way it is dressed up -------------------------------

@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=st.sampled_from(["seal", "tfhe"]), which=st.integers(0, 3), rewrite=st.booleans(),
       with_secret=st.booleans(), job=st.sampled_from(["encrypt", "decrypt"]))
def test_any_key_file_of_another_key_set_is_refused(sets, tmp_path_factory, capsys, scheme, which, rewrite,
                                                    with_secret, job):
    name = files_of(scheme)[which % len(files_of(scheme))]
    assume(job == "encrypt" or with_secret)               # decrypt needs the secret
    assume((sets / f"{scheme}-owner" / name).read_bytes() != (sets / f"{scheme}-other" / name).read_bytes())
    work = tmp_path_factory.mktemp("swap")
    keys = tampered(sets, work / "keys", scheme, name, rewrite=rewrite, with_secret=with_secret)
    out = work / "out"
    argv = (encrypt_argv(sets, keys, out) if job == "encrypt"
            else ["decrypt", "--keys", keys, "--input", work / "no-such-run", "--out", out])
    line = refused(capsys, argv, out=out)
    assert any(w in line for w in ("mixed from two key sets", "vouches for", "was replaced since",
                                   "does not belong", "does not load")), line


def test_the_untouched_directories_are_trusted(sets, tmp_path):
    """The control: without a swap, the same checks accept the owner's keys (public copy or not)."""
    for scheme in ("seal", "tfhe"):
        pub = tmp_path / f"{scheme}-public"
        open_keys(sets / f"{scheme}-owner").scheme.export_public(sets / f"{scheme}-owner", pub)
        for keys in (pub, sets / f"{scheme}-owner"):
            held = trusted(keys)
            assert held.fingerprint == open_keys(keys).fingerprint and not held.has_secret


def trusted(keys: Path, *, given: str | None = None, owner: str = "/nonexistent", skip=()):
    from hecore.schemes import scheme_of
    from jobs.encrypt import trusted_keys

    args = argparse.Namespace(keys=str(keys), key_fingerprint=given, skip_encrypted=list(skip))
    return trusted_keys(args, str(keys), scheme_of(keys), False, owner)


# --- what vouches for a public-only directory --------------------------------------------------------------

def test_a_public_copy_of_keys_made_elsewhere_needs_their_fingerprint(sets, tmp_path):
    pub = tmp_path / "public"
    seal_keys.export_public(sets / "seal-other", pub)          # keys this owner's records do not know
    fp = seal_keys.read_info(pub).fingerprint
    with pytest.raises(KeyDirectoryError, match=f"no record of yours vouches.*--key-fingerprint {fp}"):
        trusted(pub)
    assert trusted(pub, given=fp[:16]).fingerprint == fp
    assert trusted(pub, given=fp.upper()).fingerprint == fp
    with pytest.raises(KeyDirectoryError, match="not of"):
        trusted(pub, given=seal_keys.read_info(sets / "seal-owner").fingerprint)
    with pytest.raises(ValueError, match="is not a key fingerprint"):
        trusted(pub, given="12ab")


def test_the_owner_map_of_an_earlier_run_vouches(sets, tmp_path):
    from jobs.runtime.owner import OwnerMap

    pub = tmp_path / "public"
    seal_keys.export_public(sets / "seal-other", pub)
    fp = seal_keys.read_info(pub).fingerprint
    m = OwnerMap.for_encrypt(str(tmp_path / "night=2026-11-26"), out=str(tmp_path / "ct"), input_="images",
                             fingerprint=fp, settings={}, overwrite=False)
    m.save()
    assert trusted(pub, skip=[str(tmp_path)]).fingerprint == fp            # a directory of owner maps
    assert trusted(pub, owner=str(tmp_path / "night=2026-11-26")).fingerprint == fp   # the map being added to


def test_an_old_tfhe_directory_cannot_vouch_for_its_public_key(sets, tmp_path):
    """Format 1: the fingerprint is the server key's sha256 alone, so no record of it proves the public key."""
    pub = tmp_path / "old"
    tfhe_keys.export_public(sets / "tfhe-owner", pub)
    doc = json.loads((pub / seal_keys.MANIFEST).read_text())
    doc["format"], doc["fingerprint"] = 1, tfhe_keys.fingerprint((pub / tfhe_keys.SERVER).read_bytes())
    (pub / seal_keys.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(KeyDirectoryError, match="older format"):
        trusted(pub, given=doc["fingerprint"])


def test_the_fingerprint_covers_every_public_file(sets):
    for scheme in ("seal", "tfhe"):
        doc = json.loads((sets / f"{scheme}-owner" / seal_keys.MANIFEST).read_text())
        assert doc["format"] == 2 and sorted(doc["sha256"]) == sorted(files_of(scheme))
        base = open_keys(sets / f"{scheme}-owner").fingerprint
        for name in files_of(scheme):
            digests = tuple(sorted({**doc["sha256"], name: "0" * 64}.items()))
            material = (PublicMaterial(seal_keys.read_info(sets / "seal-owner").params, b"", b"", digests=digests)
                        if scheme == "seal" else TfhePublicMaterial(tfhe_keys.read_info(sets / "tfhe-owner").params,
                                                                    b"", digests=digests))
            assert material.fingerprint() != base, name


# --- the owner's key records ---------------------------------------------------------------------------------

def test_keygen_records_the_key_set_owner_only(sets):
    path = keyring.keyring_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert seal_keys.read_info(sets / "seal-owner").fingerprint in keyring.recorded()
    assert seal_keys.read_info(sets / "seal-other").fingerprint not in keyring.recorded()


@pytest.mark.parametrize("damage", ["group-writable", "not-json", "deep", "symlink"])
def test_key_records_others_could_have_written_vouch_for_nothing(tmp_path, monkeypatch, damage):
    path = tmp_path / "records" / "keyring.json"
    monkeypatch.setenv(keyring.KEYRING_ENV, str(path))
    keyring.record("ab" * 32, scheme="ckks", directory=tmp_path)
    assert "ab" * 32 in keyring.recorded()
    if damage == "group-writable":
        os.chmod(path, 0o620)
    elif damage == "not-json":
        path.write_bytes(b"\xff{")
    elif damage == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        real = tmp_path / "elsewhere.json"
        path.rename(real)
        path.symlink_to(real)
    with pytest.raises(KeyDirectoryError):
        keyring.vouch("ab" * 32, directory=tmp_path)


# --- a damaged secret is one line, not a traceback -------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["seal", "tfhe"])
def test_a_garbled_secret_key_is_one_line(sets, tmp_path, capsys, scheme):
    keys = tmp_path / "keys"
    shutil.copytree(sets / f"{scheme}-owner", keys)
    secret = keys / secret_of(scheme)
    secret.write_bytes(os.urandom(secret.stat().st_size))
    os.chmod(secret, 0o600)
    line = refused(capsys, ["decrypt", "--keys", keys, "--input", tmp_path / "run", "--out", tmp_path / "out"],
                   out=tmp_path / "out")
    assert secret.name in line and "does not load" in line
    with pytest.raises(KeyDirectoryError):
        open_keys(keys, secret=True)


def test_a_key_file_larger_than_its_kind_or_not_a_file_is_refused(sets, tmp_path):
    keys = tmp_path / "keys"
    shutil.copytree(sets / "seal-owner", keys)
    limit = seal_keys.max_file_bytes(seal_keys.read_info(keys).params, seal_keys.PUBLIC)
    with open(keys / seal_keys.PUBLIC, "r+b") as f:
        f.truncate(limit + 1)                                  # sparse: no disk used
    with pytest.raises(KeyDirectoryError, match="more than"):
        open_keys(keys)
    (keys / seal_keys.PUBLIC).unlink()
    os.mkfifo(keys / seal_keys.PUBLIC)                          # a reader would block on it
    with pytest.raises(KeyDirectoryError, match="not a regular file"):
        open_keys(keys)


def test_a_mismatched_secret_of_the_same_parameters_is_a_key_mismatch(sets, tmp_path):
    keys = tmp_path / "keys"
    shutil.copytree(sets / "seal-owner", keys)
    shutil.copyfile(sets / "seal-other" / seal_keys.SECRET, keys / seal_keys.SECRET)
    with pytest.raises(KeyMismatch, match="does not belong"):
        open_keys(keys, secret=True)
