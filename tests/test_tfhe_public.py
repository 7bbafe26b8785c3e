"""TFHE public-key encryption: the compact public key encrypts without the client key, the server key
casts and computes, the client key decrypts exactly; public-only and old key directories; forged
compact lists.

Keys are made once per session (a few seconds); ops cost 0.1 to 0.35 s per value, plus a key
switch and a bootstrap per pair of blocks for the cast, so the arrays are small.
"""
from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from hecore.errors import KeyDirectoryError, SecretKeyMissing
from hecore.schemes import open_keys
from hecore.tfhe import keys as tfhe_keys
from hecore.tfhe.checks import TfheCiphertextChecker
from hecore.tfhe.decryptor import TfheDecryptor
from hecore.tfhe.encryptor import TfheEncryptor, TfhePublicEncryptor
from hecore.tfhe.evaluator import TfheEvaluator
from hecore.tfhe.native import native_module
from hecore.tfhe.params import TFHE_DEFAULT

pytestmark = pytest.mark.seconds(60)

VALUES = np.array([0, 3, 4, 127, 128, 196, 254, 255], dtype=np.uint8)


@pytest.fixture(scope="session")
def owner_dir(tfhe_key_dir) -> Path:
    """The test run's TFHE key directory (conftest.py)."""
    return tfhe_key_dir


@pytest.fixture(scope="session")
def public_dir(owner_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tfhe-pk") / "public"
    tfhe_keys.export_public(owner_dir, out)
    return out


@pytest.fixture(scope="session")
def old_public_dir(public_dir, tmp_path_factory) -> Path:
    """A public directory as hepix wrote it before it made compact public keys: no public.key, no sha256
    of one in the manifest."""
    out = tmp_path_factory.mktemp("tfhe-pk") / "old-public"
    shutil.copytree(public_dir, out)
    (out / tfhe_keys.PUBLIC).unlink()
    manifest = out / "hepix-keys.json"
    doc = json.loads(manifest.read_text())
    del doc["sha256"][tfhe_keys.PUBLIC]
    doc["params"].pop("public_key")
    doc["format"] = 1                   # then the fingerprint was the server key's sha256
    doc["fingerprint"] = tfhe_keys.fingerprint((out / tfhe_keys.SERVER).read_bytes())
    manifest.write_text(json.dumps(doc))
    return out


@pytest.fixture(scope="session")
def pk_enc(public_dir) -> TfhePublicEncryptor:
    return TfhePublicEncryptor.from_key_directory(public_dir)


@pytest.fixture(scope="session")
def ev(public_dir) -> TfheEvaluator:
    return TfheEvaluator.from_key_directory(public_dir)


@pytest.fixture(scope="session")
def dec(owner_dir) -> TfheDecryptor:
    return TfheDecryptor.from_key_directory(owner_dir)


@pytest.fixture(scope="session")
def compact_cts(pk_enc) -> list[bytes]:
    return pk_enc.encrypt_bytes(VALUES)


def test_public_encrypt_then_brightness_and_threshold_decrypt_exactly(compact_cts, ev, dec):
    bright = ev.apply("brightness:60", compact_cts)
    assert dec.decrypt(bright).tolist() == [min(255, int(v) + 60) for v in VALUES]
    mask = ev.apply("threshold:128", compact_cts)
    assert dec.decrypt(mask).tolist() == [255 if v >= 128 else 0 for v in VALUES]


def test_fresh_public_ciphertexts_decrypt_with_the_server_key_and_are_refused_without(owner_dir, compact_cts, ev,
                                                                                     dec):
    with_server = TfheDecryptor.from_key_directory(owner_dir, server_key=ev)
    assert with_server.decrypt(compact_cts).tolist() == VALUES.tolist()
    with pytest.raises(ValueError, match=r"ciphertext 0: a public-key ciphertext .* process it first"):
        dec.decrypt(compact_cts)


def test_compact_ciphertexts_are_fresh_of_fixed_size_and_labelled(pk_enc, compact_cts):
    batch = pk_enc.encrypt(VALUES[:2])
    assert batch.strategy == "tfhe-compact" and pk_enc.max_row == 1
    assert {len(c) for c in compact_cts} == {dict(TFHE_DEFAULT.ct_bytes)["compact"]}
    again = pk_enc.encrypt_bytes(VALUES[:1])
    assert again[0] != compact_cts[0]                       # fresh randomness per value


def test_the_public_directory_holds_no_client_key_and_encrypts(public_dir, owner_dir):
    assert not (public_dir / tfhe_keys.CLIENT).exists()
    info = tfhe_keys.read_info(public_dir)
    assert info.has_public_key and not info.has_client_key
    assert (public_dir / tfhe_keys.PUBLIC).stat().st_mode & 0o777 == 0o644
    assert (public_dir / tfhe_keys.PUBLIC).read_bytes() == (owner_dir / tfhe_keys.PUBLIC).read_bytes()
    with pytest.raises(SecretKeyMissing):
        tfhe_keys.read_client_key(public_dir)
    keys = open_keys(public_dir, eval_keys=False)
    assert not keys.has_secret and keys.scheme.public_encryption
    keys.check_encryption(use_secret=False)
    shipped = keys.for_encryption(use_secret=False)         # what an encrypt job broadcasts: the public key alone
    assert shipped.server_key is None and shipped.client_key is None and shipped.public_key
    enc = shipped.encryptor(layout="pixel")
    assert isinstance(enc, TfhePublicEncryptor)
    assert keys.encryption_label(use_secret=False, strategy="fresh") == "tfhe-compact"
    assert keys.encryption_options(use_secret=False, compression="none") == {"encryption": "public",
                                                                             "encoding": "compact"}
    with pytest.raises(ValueError, match="client.key"):
        keys.encryptor(layout="pixel", use_secret=True)


def test_the_owner_directory_still_encrypts_with_the_client_key(owner_dir, ev, dec):
    keys = open_keys(owner_dir, secret=True, eval_keys=False)
    enc = keys.encryptor(layout="pixel", use_secret=True)
    assert isinstance(enc, TfheEncryptor) and enc.name == "tfhe-seeded"
    assert keys.encryption_options(use_secret=True, compression="none")["encryption"] == "symmetric"
    assert dec.decrypt(ev.apply("brightness:60", enc.encrypt_bytes(VALUES[:2]))).tolist() == [60, 63]


def test_an_old_key_directory_names_what_to_do(old_public_dir):
    with pytest.raises(KeyDirectoryError, match=r"no TFHE compact public key .*--encryption symmetric.*hepix keygen"):
        tfhe_keys.read_public_key(old_public_dir)
    with pytest.raises(KeyDirectoryError, match="no TFHE compact public key"):
        TfhePublicEncryptor.from_key_directory(old_public_dir)
    keys = open_keys(old_public_dir, eval_keys=False)       # the processing side still opens it
    assert keys.public_key is None
    with pytest.raises(ValueError, match=r"no compact public key .*--encryption symmetric"):
        keys.check_encryption(use_secret=False)
    with pytest.raises(ValueError, match="no compact public key"):
        keys.encryptor(layout="pixel")
    assert tfhe_keys.export_public(old_public_dir, old_public_dir.parent / "again").has_public_key is False


def test_a_swapped_public_key_file_is_refused(public_dir, tmp_path):
    forged = tmp_path / "forged"
    shutil.copytree(public_dir, forged)
    data = bytearray((forged / tfhe_keys.PUBLIC).read_bytes())
    data[-9] ^= 1
    (forged / tfhe_keys.PUBLIC).write_bytes(bytes(data))
    with pytest.raises(KeyDirectoryError, match="not the compact public key of key set"):
        tfhe_keys.read_public_key(forged)


def test_hostile_public_key_bytes_are_value_errors(public_dir):
    native = native_module()
    good = (public_dir / tfhe_keys.PUBLIC).read_bytes()
    server = (public_dir / tfhe_keys.SERVER).read_bytes()
    for bad in (b"", good[: len(good) // 2], server[:4096]):
        with pytest.raises(ValueError, match="not a tfhe-rs compact public key"):
            native.PublicKey(bad)
    assert "(compact)" in repr(native.PublicKey(good))


def _forged(valid: bytes) -> dict[str, bytes]:
    rng = np.random.default_rng(5)
    kind = bytearray(valid)                 # the element's block count (4: an FheUint8) set to 8: an FheUint16's
    assert struct.unpack("<Q", kind[-20:-12])[0] == 4, "the layout of a serialized compact list changed"
    kind[-20:-12] = struct.pack("<Q", 8)
    renamed = valid.replace(b"CompactCiphertextList", b"CompactCiphertextLisX", 1)
    huge = bytearray(valid)
    for off in range(0, 64, 8):
        huge[off:off + 8] = struct.pack("<Q", 1 << 62)
    return {"random": rng.integers(0, 256, len(valid), dtype=np.uint8).tobytes(), "other kind": bytes(kind),
            "renamed": renamed, "huge length prefix": bytes(huge), "truncated": valid[:-1]}


def test_forged_compact_lists_are_rejected_with_a_reason(compact_cts, ev):
    check = TfheCiphertextChecker(TFHE_DEFAULT)
    assert check.problems(compact_cts[:2]) == [None, None]
    forged = _forged(compact_cts[0])
    problems = dict(zip(forged, check.problems(list(forged.values()))))
    assert {k: p.reason for k, p in problems.items()} == {"random": "tfhe-refused", "other kind": "tfhe-refused",
                                                          "renamed": "tfhe-refused", "huge length prefix":
                                                          "tfhe-refused", "truncated": "ciphertext-size"}
    assert "CompactCiphertextList" in problems["other kind"].detail
    for kind in ("random", "other kind", "renamed"):        # what the evaluator refuses too, naming the index
        with pytest.raises(ValueError, match=r"ciphertext 1\b"):
            ev.apply("threshold:10", [compact_cts[0], forged[kind]])


def test_throughput_and_size_public_against_client_key(owner_dir, pk_enc, capsys):
    """Not a timing assertion: prints the encrypt rate and bytes per value of both encryptions (the
    numbers docs/tfhe.md quotes) and checks both encrypted the same count."""
    client = TfheEncryptor.from_key_directory(owner_dir)
    values = np.random.default_rng(1).integers(0, 256, 256, dtype=np.uint8)
    rows = {}
    for name, enc in (("public (compact)", pk_enc), ("client key (seeded)", client)):
        t0 = time.perf_counter()
        cts = enc.encrypt_bytes(values)
        seconds = time.perf_counter() - t0
        rows[name] = (len(cts), len(values) / seconds, sum(map(len, cts)) / len(cts))
    with capsys.disabled():
        for name, (n, rate, size) in rows.items():
            print(f"\nTFHE encrypt {name}: {rate:,.0f} values/s on one thread, {size:,.0f} bytes a value")
    assert [n for n, _, _ in rows.values()] == [len(values)] * 2
