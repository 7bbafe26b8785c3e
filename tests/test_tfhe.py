"""TFHE (hecore.tfhe over the hepix_tfhe extension): exact round trips, every op against its
plaintext reference, hostile ciphertext bytes, and the key-file discipline.

TFHE ops cost 0.1 to 0.35 s per pixel value (a table about 2 s), so the arrays are small: the
values that cross the nibble and carry boundaries each op's circuit distinguishes.  The plaintext
references themselves are checked over every input and constant in test_tfhe_api.py.
"""
from __future__ import annotations

import builtins
import hashlib
import json
import os
import stat
import struct
from pathlib import Path

import numpy as np
import pytest

from hecore.errors import KeyDirectoryError, KeyMismatch, SecretKeyMissing
from hecore.tfhe import keys as tfhe_keys
from hecore.tfhe.decryptor import TfheDecryptor as Decryptor
from hecore.tfhe.encryptor import TfheEncryptor as Encryptor
from hecore.tfhe.evaluator import TfheEvaluator as Evaluator
from hecore.tfhe.native import native_module
from hecore.tfhe.ops import Brightness, Threshold, parse_op, reference_chain
from hecore.tfhe.params import TFHE_DEFAULT

pytestmark = pytest.mark.seconds(70)

# Boundaries of the 2-bit blocks and 4-bit nibbles, the ends of the range, and a few others.
EDGES = np.array([0, 1, 3, 4, 15, 16, 17, 63, 64, 127, 128, 129, 191, 192, 194, 195, 196, 239, 240, 254, 255],
                 dtype=np.uint8)


@pytest.fixture(scope="session")
def key_dir(tfhe_key_dir) -> Path:
    """The test run's TFHE key directory (conftest.py: made once, keygen takes a few seconds)."""
    return tfhe_key_dir


@pytest.fixture(scope="session")
def enc(key_dir) -> Encryptor:
    return Encryptor.from_key_directory(key_dir, encoding="full")


@pytest.fixture(scope="session")
def dec(key_dir) -> Decryptor:
    return Decryptor.from_key_directory(key_dir)


@pytest.fixture(scope="session")
def ev(key_dir) -> Evaluator:
    return Evaluator.from_key_directory(key_dir)


@pytest.fixture(scope="session")
def edge_cts(enc):
    return enc.encrypt_bytes(EDGES)


@pytest.fixture(scope="session")
def camera_crop() -> np.ndarray:
    """A 4x4 crop of scikit-image's bundled camera image (dark coat and bright sky)."""
    from skimage import data

    return np.ascontiguousarray(data.camera()[96:100, 250:254])


def _random(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


# --- round trips -----------------------------------------------------------------------

def test_round_trips_are_exact_in_every_encoding_and_the_compact_ones_are_smaller(key_dir, enc, dec, ev,
                                                                                   edge_cts):
    assert np.array_equal(dec.decrypt(edge_cts), EDGES)
    seeded = Encryptor.from_key_directory(key_dir, encoding="seeded").encrypt(EDGES)
    assert seeded.strategy == "tfhe-seeded" and np.array_equal(dec.decrypt(seeded), EDGES)
    assert max(map(len, seeded)) * 10 < min(map(len, edge_cts))
    sizes = dict(TFHE_DEFAULT.ct_bytes)            # what the row checks accept (hecore.tfhe.checks)
    assert {len(c) for c in seeded} == {sizes["seeded"]} and {len(c) for c in edge_cts} == {sizes["full"]}
    blob = enc.encrypt_list(EDGES, ev)
    assert np.array_equal(dec.decrypt_list(blob, ev), EDGES)
    assert len(blob) * 5 < sum(map(len, seeded))
    assert np.array_equal(dec.decrypt(ev.expand(blob)), EDGES)


def test_decrypt_keeps_the_image_shape(enc, dec, camera_crop):
    got = dec.decrypt(enc.encrypt(camera_crop), shape=camera_crop.shape)
    assert got.shape == camera_crop.shape and np.array_equal(got, camera_crop)


def test_two_encryptions_of_one_value_differ(enc):
    a, b = enc.encrypt_bytes(np.array([7, 7], dtype=np.uint8))
    assert a != b


def test_encrypt_refuses_what_is_not_8_bit(enc):
    with pytest.raises(ValueError, match="uint8"):
        enc.encrypt(np.array([1.5, 300.0]))
    with pytest.raises(ValueError, match="300 at index 1"):
        enc.encrypt(np.array([1, 300]))


# --- every op against its plaintext reference --------------------------------------------

# The saturating brightness is the op the pipeline is for: every edge, both directions.
@pytest.mark.parametrize("spec", ["brightness:60", "brightness:-60"])
def test_saturating_brightness_equals_its_reference_on_every_edge(spec, ev, dec, edge_cts):
    op = parse_op(spec)
    assert np.array_equal(dec.decrypt(ev.apply(op, edge_cts)), op.reference(EDGES))


def test_threshold_equals_its_reference_on_every_edge_and_at_both_ends(ev, enc, dec, edge_cts):
    op = Threshold(128)
    assert np.array_equal(dec.decrypt(ev.apply(op, edge_cts)), op.reference(EDGES))
    ends = np.array([0, 1, 254, 255], dtype=np.uint8)
    for t in (0, 255, 17):
        assert np.array_equal(dec.decrypt(ev.apply(Threshold(t), enc.encrypt_bytes(ends))),
                              Threshold(t).reference(ends)), t


# Values on both sides of the constant and of the nibble boundaries near it.
@pytest.mark.parametrize("spec,values", [
    ("min:200", [0, 127, 199, 200, 201, 255]), ("max:50", [0, 49, 50, 51, 200, 255]),
    ("min:129", [128, 129, 130, 144]), ("brightness-wrap:60", [0, 195, 196, 255]),
    ("brightness-wrap:-60", [0, 59, 60, 255]),
])
def test_op_equals_its_reference_around_its_constant(spec, values, ev, enc, dec):
    values = np.array(values, dtype=np.uint8)
    op = parse_op(spec)
    assert np.array_equal(dec.decrypt(ev.apply(op, enc.encrypt_bytes(values))), op.reference(values))


def test_a_lookup_table_is_exact(ev, enc, dec):
    # A table costs ~164 bootstraps a value: two values, a named one, and the native reference.
    values = np.array([37, 200], dtype=np.uint8)
    op = parse_op("lut:gamma-0.5")
    assert np.array_equal(dec.decrypt(ev.apply(op, enc.encrypt_bytes(values))), op.reference(values))
    table = _random(256, 5).tobytes()
    assert native_module().ServerKey.reference("table", table=table) == table


def test_brightness_then_threshold_chain_on_a_camera_crop(ev, enc, dec, camera_crop):
    ops = [parse_op("brightness:60"), parse_op("threshold:200")]
    got = dec.decrypt(ev.apply_chain(ops, enc.encrypt(camera_crop)), shape=camera_crop.shape)
    assert np.array_equal(got, reference_chain(camera_crop, ops))
    unfused = dec.decrypt(ev.apply_chain(ops, enc.encrypt_bytes(camera_crop[0]), fused=False))
    assert np.array_equal(unfused, reference_chain(camera_crop[0], ops))


def test_process_takes_seeded_ciphertexts_and_returns_a_compressed_list(key_dir, ev, dec):
    values = np.array([195, 196], dtype=np.uint8)
    seeded = Encryptor.from_key_directory(key_dir, encoding="seeded").encrypt(values)
    out = ev.process(seeded, [Brightness(60)], encoding="seeded", output="list")
    assert out.strategy == "tfhe-list" and len(out) == 1
    assert np.array_equal(dec.decrypt_list(out[0], ev), Brightness(60).reference(values))
    full = ev.process(seeded, [], encoding="seeded", output="full")
    assert np.array_equal(dec.decrypt(full), values)


def test_an_alternative_circuit_agrees_with_the_reference(ev, enc, dec):
    values = np.array([195, 196], dtype=np.uint8)
    out = ev.apply(Brightness(60), enc.encrypt_bytes(values), circuit="tfhe-rs")
    assert np.array_equal(dec.decrypt(out), Brightness(60).reference(values))
    with pytest.raises(ValueError, match="unknown circuit"):
        ev.apply(Brightness(60), enc.encrypt_bytes(values[:1]), circuit="fastest")


def test_two_threads_give_the_same_result(key_dir, enc, dec):
    values = _random(8, 7)
    ev2 = Evaluator.from_key_directory(key_dir, threads=2)
    assert np.array_equal(dec.decrypt(ev2.apply("threshold:90", enc.encrypt_bytes(values))),
                          Threshold(90).reference(values))


def test_the_key_pair_check_passes_for_one_key_set(key_dir):
    tfhe_keys.check_key_pair(tfhe_keys.read_client_key(key_dir), tfhe_keys.read_server_key(key_dir))


def test_native_refuses_unknown_ops_and_bad_arguments(ev, edge_cts):
    with pytest.raises(ValueError, match="unknown operation"):
        ev.native_key.apply("blur", edge_cts[:1])
    with pytest.raises(ValueError, match="256 values"):
        ev.native_key.apply("table", edge_cts[:1], table=b"\x00" * 255)
    with pytest.raises(ValueError, match="0..=255"):
        ev.native_key.apply("ge-mask", edge_cts[:1], constant=256)
    with pytest.raises(ValueError, match="threads"):
        ev.native_key.apply("min", edge_cts[:1], constant=3, threads=0)


# --- hostile ciphertext bytes ------------------------------------------------------------------

def _hostile(valid: bytes) -> dict[str, bytes]:
    rng = np.random.default_rng(9)
    huge = bytearray(valid)
    # Every u64 little-endian length prefix in the first bytes set to 2^62: whichever is read as a
    # length must be refused by the size limit, not allocated.
    for off in range(0, 64, 8):
        huge[off:off + 8] = struct.pack("<Q", 1 << 62)
    return {
        "truncated": valid[: len(valid) // 2],
        "random": rng.integers(0, 256, len(valid), dtype=np.uint8).tobytes(),
        "empty": b"",
        "huge length prefix": bytes(huge),
        "one byte short": valid[:-1],
    }


@pytest.mark.parametrize("kind", ["truncated", "random", "empty", "huge length prefix", "one byte short"])
def test_hostile_ciphertext_is_a_value_error_naming_its_index_on_decrypt(kind, dec, edge_cts):
    bad = list(edge_cts[:3])
    bad.insert(2, _hostile(edge_cts[0])[kind])
    with pytest.raises(ValueError, match=r"ciphertext 2\b"):
        dec.decrypt(bad)


@pytest.mark.parametrize("kind", ["truncated", "random", "empty", "huge length prefix"])
def test_hostile_ciphertext_is_a_value_error_naming_its_index_on_apply(kind, ev, edge_cts):
    bad = [edge_cts[0], _hostile(edge_cts[0])[kind]]
    with pytest.raises(ValueError, match=r"ciphertext 1\b"):
        ev.apply("threshold:10", bad)


def test_the_keyless_row_check_refuses_what_the_keyed_loads_refuse(key_dir, ev, edge_cts):
    from hecore.tfhe.checks import TfheCiphertextChecker

    check = TfheCiphertextChecker(TFHE_DEFAULT)
    seeded = [bytes(c) for c in Encryptor.from_key_directory(key_dir, encoding="seeded").encrypt(EDGES[:2])]
    processed = ev.apply("threshold:10", seeded[:1])
    assert check.problems([*seeded, edge_cts[0], *processed]) == [None] * 4
    hostile = {**_hostile(edge_cts[0]), **{f"seeded {k}": v for k, v in _hostile(seeded[0]).items()}}
    reasons = {kind: p.reason for kind, p in zip(hostile, check.problems(list(hostile.values())))}
    assert reasons == {**{k: "ciphertext-size" for k in ("truncated", "one byte short", "seeded truncated",
                                                          "seeded one byte short")},
                       "empty": "empty-ciphertext", "seeded empty": "empty-ciphertext",
                       "random": "tfhe-refused", "huge length prefix": "tfhe-refused",
                       "seeded random": "tfhe-refused", "seeded huge length prefix": "tfhe-refused"}
    bad = check.problem(hostile["seeded random"])
    assert "tfhe-rs refuses the ciphertext (871 bytes)" in bad.detail
    for kind in ("random", "seeded random", "seeded huge length prefix"):   # what the check lets through, the
        with pytest.raises(ValueError, match=r"ciphertext 0\b"):            # evaluator would have failed on
            ev.apply("threshold:10", [hostile[kind]])


def test_a_ciphertext_of_another_type_is_refused(ev, dec, key_dir):
    server = tfhe_keys.read_server_key(key_dir)
    with pytest.raises(ValueError, match="ciphertext 0"):
        dec.decrypt([server[:4096]])
    with pytest.raises(ValueError, match="not a compressed ciphertext list"):
        dec.decrypt_list(b"\x01" * 100, ev)


def test_hostile_key_bytes_are_value_errors():
    native = native_module()
    with pytest.raises(ValueError, match="not a tfhe-rs client key"):
        native.ClientKey(b"\xff" * 64)
    with pytest.raises(ValueError, match="not a tfhe-rs server key"):
        native.ServerKey(struct.pack("<Q", 1 << 62) * 8)


# --- key directories ------------------------------------------------------------------------

def test_key_directory_modes(key_dir):
    assert stat.S_IMODE(key_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((key_dir / tfhe_keys.CLIENT).stat().st_mode) == 0o600
    assert stat.S_IMODE((key_dir / tfhe_keys.SERVER).stat().st_mode) == 0o644
    doc = json.loads((key_dir / "hepix-keys.json").read_text())
    assert doc["scheme"] == "tfhe" and doc["format"] == 2
    # the fingerprint covers the server key and the compact public key, not the server key alone
    server, public = ((key_dir / n).read_bytes() for n in (tfhe_keys.SERVER, tfhe_keys.PUBLIC))
    assert doc["fingerprint"] == tfhe_keys.read_public(key_dir).fingerprint() != tfhe_keys.fingerprint(server)
    assert doc["sha256"] == {tfhe_keys.SERVER: hashlib.sha256(server).hexdigest(),
                             tfhe_keys.PUBLIC: hashlib.sha256(public).hexdigest()}


def test_readable_client_key_is_refused(key_dir, tmp_path):
    copy = tmp_path / "keys"
    copy.mkdir(mode=0o700)
    for name in ("hepix-keys.json", tfhe_keys.SERVER, tfhe_keys.CLIENT):
        (copy / name).write_bytes((key_dir / name).read_bytes())
    os.chmod(copy / tfhe_keys.CLIENT, 0o640)
    with pytest.raises(KeyDirectoryError, match="chmod 600"):
        tfhe_keys.read_client_key(copy)
    os.chmod(copy / tfhe_keys.CLIENT, 0o604)
    with pytest.raises(KeyDirectoryError, match="0604"):
        Decryptor.from_key_directory(copy)
    os.chmod(copy / tfhe_keys.CLIENT, 0o600)
    assert tfhe_keys.read_client_key(copy) == (key_dir / tfhe_keys.CLIENT).read_bytes()


def test_public_side_loads_without_opening_the_client_key(key_dir, monkeypatch):
    opened: list[str] = []
    real_open, real_path_open = builtins.open, Path.open

    def spy_open(file, *args, **kwargs):
        opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    def spy_path_open(self, *args, **kwargs):  # Path.read_bytes / read_text go through it
        opened.append(os.fspath(self))
        return real_path_open(self, *args, **kwargs)

    real_os_open = os.open

    def spy_os_open(file, *args, **kwargs):     # the key files are read with os.open (hecore.keyfiles)
        opened.append(os.fspath(file))
        return real_os_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(Path, "open", spy_path_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    Evaluator.from_key_directory(key_dir)
    tfhe_keys.read_info(key_dir)
    assert opened and not any(p.endswith(tfhe_keys.CLIENT) for p in opened)


def test_exported_public_directory_evaluates_but_holds_no_client_key(key_dir, tmp_path, enc, dec):
    pub = tmp_path / "public"
    info = tfhe_keys.export_public(key_dir, pub)
    assert not (pub / tfhe_keys.CLIENT).exists() and not info.has_client_key
    with pytest.raises(SecretKeyMissing, match="client.key"):
        tfhe_keys.read_client_key(pub)
    values = np.array([10, 250], dtype=np.uint8)
    out = Evaluator.from_key_directory(pub).apply("brightness:60", enc.encrypt_bytes(values))
    assert dec.decrypt(out).tolist() == [70, 255]


def test_modified_server_key_is_refused(key_dir, tmp_path):
    pub = tmp_path / "public"
    tfhe_keys.export_public(key_dir, pub)
    data = bytearray((pub / tfhe_keys.SERVER).read_bytes())
    data[-1] ^= 1
    (pub / tfhe_keys.SERVER).write_bytes(bytes(data))
    with pytest.raises(KeyDirectoryError, match="not the server key"):
        tfhe_keys.read_server_key(pub)


def test_keygen_refuses_a_non_empty_directory(key_dir):
    with pytest.raises(KeyDirectoryError, match="not empty"):
        tfhe_keys.keygen(key_dir)


def test_a_ckks_key_directory_is_not_read_as_tfhe(tmp_path):
    (tmp_path / "hepix-keys.json").write_text(json.dumps({"format": 1, "params": {}, "fingerprint": "ab"}))
    assert not tfhe_keys.is_tfhe_key_directory(tmp_path)
    with pytest.raises(KeyDirectoryError, match="not 'tfhe'"):
        tfhe_keys.read_info(tmp_path)


def test_fingerprint_mismatch_names_both_keys():
    with pytest.raises(KeyMismatch, match="3f2a.*91c0"):
        tfhe_keys.check_fingerprint("3f2a" * 16, "91c0" * 16)


def test_client_key_never_shows_in_reprs(key_dir, enc, dec):
    secret = (key_dir / tfhe_keys.CLIENT).read_bytes()
    native_key = native_module().ClientKey(secret)
    assert repr(native_key) == "<hepix_tfhe.ClientKey (secret)>"
    for text in (repr(native_key), str(native_key), repr(enc), repr(dec)):
        assert secret[-32:].hex() not in text and repr(secret[-32:])[2:-1] not in text
