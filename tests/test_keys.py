"""Tests of hecore.seal.keys: key directories, their permissions, and who may read the secret key."""
from __future__ import annotations

import os
import shutil
import stat
import sys

import numpy as np
import pytest

from hecore.errors import KeyDirectoryError, KeyMismatch, SecretKeyMissing
from hecore.seal.keys import (
    CONTEXT,
    MANIFEST,
    PUBLIC,
    RELIN,
    ROTATE,
    SECRET,
    check_fingerprint,
    export_public,
    keygen,
    load_public,
    load_secret,
    read_info,
)
from hecore.seal.params import PRESETS, preset


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- key directories (session-scoped: keygen is the expensive part) ---------------------

@pytest.fixture(scope="session")
def keys_paper(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys") / "paper"
    info = keygen(preset("paper-4096"), d)
    return d, info


@pytest.fixture(scope="session")
def keys_addonly(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys") / "addonly"
    info = keygen(preset("addonly-2048"), d)
    return d, info


@pytest.fixture(scope="session")
def keys_addonly_other(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys") / "addonly-other"
    info = keygen(preset("addonly-2048"), d)
    return d, info


@pytest.fixture
def keys_copy(keys_addonly, tmp_path):
    """A private copy of the add-only key directory that a test may damage."""
    src, info = keys_addonly
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)   # copies modes too
    return dst, info


# --- keygen --------------------------------------------------------------------------

def test_keygen_paper_4096_writes_the_six_files(keys_paper):
    d, _ = keys_paper
    assert set(os.listdir(d)) == {MANIFEST, CONTEXT, PUBLIC, RELIN, ROTATE, SECRET}
    assert {MANIFEST, CONTEXT, PUBLIC, RELIN, ROTATE, SECRET} == {
        "hepix-keys.json", "context.bin", "public.key", "relin.key", "rotate.key", "secret.key"}


def test_keygen_without_rotations_writes_no_rotate_key(tmp_path):
    keygen(PRESETS["paper-4096"], tmp_path / "k", rotations=False)
    assert ROTATE not in os.listdir(tmp_path / "k")
    assert load_public(tmp_path / "k").public.rotate_key is None


def test_load_public_without_eval_keys_reads_neither_relin_nor_rotate(keys_paper):
    d, _ = keys_paper
    ctx = load_public(d, eval_keys=False)
    assert ctx.public.relin_key is None and ctx.public.rotate_key is None
    assert ctx.fingerprint == load_public(d).fingerprint


def test_keygen_addonly_2048_writes_no_relin_key(keys_addonly):
    d, _ = keys_addonly
    assert set(os.listdir(d)) == {MANIFEST, CONTEXT, PUBLIC, SECRET}


def test_keygen_secret_key_mode_is_exactly_0600(keys_paper):
    d, _ = keys_paper
    assert _mode(d / SECRET) == 0o600


def test_keygen_directory_mode_is_exactly_0700(keys_paper):
    d, _ = keys_paper
    assert _mode(d) == 0o700


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_keygen_modes_do_not_depend_on_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        keygen(preset("addonly-2048"), tmp_path / "k")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "k") == 0o700
    assert _mode(tmp_path / "k" / SECRET) == 0o600


def test_keygen_into_an_existing_empty_directory_makes_it_0700(tmp_path):
    d = tmp_path / "empty"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    keygen(preset("addonly-2048"), d)
    assert _mode(d) == 0o700
    assert _mode(d / SECRET) == 0o600


def test_keygen_refuses_a_non_empty_directory(tmp_path):
    d = tmp_path / "busy"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    with pytest.raises(KeyDirectoryError, match="not empty"):
        keygen(preset("addonly-2048"), d)
    assert os.listdir(d) == ["notes.txt"]
    assert (d / "notes.txt").read_text() == "keep me"


def test_keygen_refuses_an_existing_key_directory(keys_copy):
    d, info = keys_copy
    with pytest.raises(KeyDirectoryError):
        keygen(preset("addonly-2048"), d)
    assert read_info(d).fingerprint == info.fingerprint


def test_keygen_info_matches_the_manifest_and_the_loaded_key(keys_addonly):
    d, info = keys_addonly
    assert read_info(d).fingerprint == info.fingerprint
    assert read_info(d).has_secret
    assert load_public(d).fingerprint == info.fingerprint
    assert len(info.fingerprint) == 64


# --- load_public never opens secret.key ---------------------------------------------

# ``sys.addaudithook`` cannot be removed again: install it once for the process and
# let it record only while ``_AUDIT["on"]`` is set.
_AUDIT = {"on": False, "installed": False, "opened": []}


def _audit_hook(event, args):
    if _AUDIT["on"] and event == "open":
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            _AUDIT["opened"].append(os.fsdecode(path))


def _record_opens(fn, *args):
    if not _AUDIT["installed"]:
        sys.addaudithook(_audit_hook)
        _AUDIT["installed"] = True
    _AUDIT["opened"] = []
    _AUDIT["on"] = True
    try:
        result = fn(*args)
    finally:
        _AUDIT["on"] = False
    return result, list(_AUDIT["opened"])


def test_load_public_never_opens_secret_key(keys_paper):
    d, info = keys_paper
    ctx, opened = _record_opens(load_public, d)
    names = {os.path.basename(p) for p in opened}
    # the hook does see the files load_public reads (otherwise this test proves nothing) ...
    assert PUBLIC in names and CONTEXT in names
    # ... and never the secret key
    assert SECRET not in names, opened
    assert not ctx.has_secret
    assert ctx.fingerprint == info.fingerprint


def test_load_secret_does_open_secret_key(keys_paper):
    # the counterpart of the test above: the hook would notice a read of secret.key
    d, _ = keys_paper
    ctx, opened = _record_opens(load_secret, d)
    assert SECRET in {os.path.basename(p) for p in opened}
    assert ctx.has_secret


def test_load_public_works_without_secret_key(keys_copy):
    d, info = keys_copy
    (d / SECRET).unlink()
    ctx = load_public(d)
    assert not ctx.has_secret
    assert ctx.fingerprint == info.fingerprint
    assert not read_info(d).has_secret


# --- export_public ------------------------------------------------------------------

def test_export_public_writes_a_directory_without_secret_key(keys_paper, tmp_path):
    d, info = keys_paper
    out = tmp_path / "public"
    exported = export_public(d, out)
    assert SECRET not in os.listdir(out)
    assert {MANIFEST, CONTEXT, PUBLIC, RELIN} <= set(os.listdir(out))
    assert not exported.has_secret
    assert exported.fingerprint == info.fingerprint


def test_export_public_is_accepted_by_load_public_with_the_same_fingerprint(keys_addonly, tmp_path):
    d, info = keys_addonly
    out = tmp_path / "public"
    export_public(d, out)
    ctx = load_public(out)
    assert ctx.fingerprint == info.fingerprint == load_secret(d).fingerprint
    assert not ctx.has_secret


def test_export_public_refuses_a_non_empty_directory(keys_addonly, tmp_path):
    d, _ = keys_addonly
    out = tmp_path / "busy"
    out.mkdir()
    (out / "x").write_bytes(b"")
    with pytest.raises(KeyDirectoryError):
        export_public(d, out)


# --- load_secret refusals ----------------------------------------------------------------

def test_load_secret_on_a_public_only_directory_raises_secret_key_missing(keys_addonly, tmp_path):
    d, _ = keys_addonly
    out = tmp_path / "public"
    export_public(d, out)
    with pytest.raises(SecretKeyMissing):
        load_secret(out)


def test_load_secret_refuses_a_world_readable_secret_key(keys_copy):
    d, _ = keys_copy
    os.chmod(d / SECRET, 0o644)
    with pytest.raises(KeyDirectoryError) as e:
        load_secret(d)
    assert not isinstance(e.value, SecretKeyMissing)
    assert "chmod 600" in str(e.value)


def test_load_secret_refuses_a_group_readable_secret_key(keys_copy):
    d, _ = keys_copy
    os.chmod(d / SECRET, 0o640)
    with pytest.raises(KeyDirectoryError, match="chmod 600"):
        load_secret(d)


def test_load_secret_on_a_directory_without_manifest_raises_key_directory_error(tmp_path):
    with pytest.raises(KeyDirectoryError, match="hepix keygen"):
        load_secret(tmp_path)


# --- mixed key sets and fingerprints ------------------------------------------------------

def test_public_key_swapped_in_from_another_directory_is_refused(keys_copy, keys_addonly_other):
    d, _ = keys_copy
    other, _ = keys_addonly_other
    shutil.copyfile(other / PUBLIC, d / PUBLIC)
    with pytest.raises(KeyDirectoryError, match="fingerprint"):
        load_public(d)
    with pytest.raises(KeyDirectoryError, match="fingerprint"):
        load_secret(d)


def test_check_fingerprint_raises_key_mismatch_naming_both_prefixes():
    expected = "a1" * 32
    actual = "b2" * 32
    with pytest.raises(KeyMismatch) as e:
        check_fingerprint(expected, actual)
    msg = str(e.value)
    assert expected[:16] in msg
    assert actual[:16] in msg


def test_check_fingerprint_accepts_equal_fingerprints():
    check_fingerprint("c3" * 32, "c3" * 32)


def test_decrypting_with_a_public_only_context_raises_secret_key_missing(keys_addonly):
    d, _ = keys_addonly
    ctx = load_public(d)
    ct = ctx.encrypt_value(42.0)            # encryption needs only the public key
    with pytest.raises(SecretKeyMissing):
        ctx.decrypt_slots(ct)
    batch = [memoryview(ct)]
    with pytest.raises(SecretKeyMissing):
        ctx.decrypt_pixels(batch)
    # the same ciphertext decrypts with the data owner's key directory
    assert load_secret(d).decrypt_slots(ct)[0] == pytest.approx(42.0, abs=1e-3)


def test_ciphertext_under_key_a_does_not_decrypt_under_key_b(keys_addonly, keys_addonly_other):
    # Why fingerprints exist: same parameters, other key -> Pyfhel loads the
    # ciphertext and "decrypts" it without complaint, into noise.
    a = load_secret(keys_addonly[0])
    b = load_secret(keys_addonly_other[0])
    assert a.fingerprint != b.fingerprint
    values = np.array([0.0, 17.0, 128.0, 255.0])
    for v in values:
        ct = a.encrypt_value(v)
        assert a.decrypt_slots(ct)[0] == pytest.approx(v, abs=1e-3)
        wrong = b.decrypt_slots(ct)[0]
        assert not abs(wrong - v) < 1e3, f"value {v} decrypted under the wrong key to {wrong}"


def test_a_relinearisation_key_from_another_key_set_is_refused(tmp_path):
    """The fingerprint covers parameters + public key; the recorded checksums cover every public file."""
    from hecore.errors import KeyDirectoryError
    from hecore.seal.keys import keygen, load_public
    from hecore.seal.params import preset

    keygen(preset("paper-4096"), tmp_path / "a")
    keygen(preset("paper-4096"), tmp_path / "b")
    (tmp_path / "a" / "relin.key").write_bytes((tmp_path / "b" / "relin.key").read_bytes())
    with pytest.raises(KeyDirectoryError, match="relin.key"):
        load_public(tmp_path / "a")
