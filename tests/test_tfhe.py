"""TFHE (hecore.tfhe over the hepix_tfhe extension): exact round trips, every op against its
plaintext reference, hostile ciphertext bytes, and the key-file discipline.

TFHE ops cost tens of milliseconds per pixel, so the arrays are small: a few dozen values,
chosen to cross every nibble and carry boundary the circuits distinguish.
"""
from __future__ import annotations

import builtins
import json
import os
import stat
import struct
from pathlib import Path

import numpy as np
import pytest

from hecore.errors import KeyDirectoryError, KeyMismatch, SecretKeyMissing
from hecore.tfhe import keys as tfhe_keys
from hecore.tfhe.decryptor import Decryptor
from hecore.tfhe.encryptor import Encryptor
from hecore.tfhe.evaluator import Evaluator
from hecore.tfhe.native import native_module
from hecore.tfhe.ops import Brightness, BrightnessWrap, Lut, Max, Min, Threshold, parse_op, reference_chain

# Boundaries of the 2-bit blocks and 4-bit nibbles, the ends of the range, and a few others.
EDGES = np.array([0, 1, 3, 4, 15, 16, 17, 63, 64, 127, 128, 129, 191, 192, 194, 195, 196, 239, 240, 254, 255],
                 dtype=np.uint8)


@pytest.fixture(scope="session")
def key_dir(tmp_path_factory) -> Path:
    """A TFHE key directory made once for the module (keygen takes a few seconds)."""
    out = tmp_path_factory.mktemp("tfhe") / "keys"
    tfhe_keys.keygen(out)
    return out


@pytest.fixture(scope="session")
def enc(key_dir) -> Encryptor:
    return Encryptor.from_key_directory(key_dir)


@pytest.fixture(scope="session")
def dec(key_dir) -> Decryptor:
    return Decryptor.from_key_directory(key_dir)


@pytest.fixture(scope="session")
def ev(key_dir) -> Evaluator:
    return Evaluator.from_key_directory(key_dir)


@pytest.fixture(scope="session")
def edge_cts(enc):
    return enc.encrypt(EDGES)


@pytest.fixture(scope="session")
def camera_crop() -> np.ndarray:
    """A 4x4 crop of scikit-image's bundled camera image (dark coat and bright sky)."""
    from skimage import data

    return np.ascontiguousarray(data.camera()[96:100, 250:254])


def _random(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


# --- round trips -----------------------------------------------------------------------

def test_encrypt_decrypt_round_trip_is_exact(enc, dec):
    values = np.concatenate([EDGES, _random(11, 1)])
    assert np.array_equal(dec.decrypt(enc.encrypt(values)), values)


def test_seeded_round_trip_is_exact_and_smaller(enc, dec):
    values = _random(12, 2)
    full, seeded = enc.encrypt(values), enc.encrypt_seeded(values)
    assert np.array_equal(dec.decrypt(seeded), values)
    assert max(map(len, seeded)) * 10 < min(map(len, full))


def test_list_round_trip_is_exact_and_smaller(enc, dec, ev):
    values = _random(20, 3)
    blob = enc.encrypt_list(values, ev)
    assert np.array_equal(dec.decrypt_list(blob, ev), values)
    assert len(blob) * 10 < sum(map(len, enc.encrypt(values)))
    assert np.array_equal(dec.decrypt(ev.expand(blob)), values)


def test_decrypt_keeps_the_image_shape(enc, dec, camera_crop):
    got = dec.decrypt(enc.encrypt(camera_crop), shape=camera_crop.shape)
    assert got.shape == camera_crop.shape and np.array_equal(got, camera_crop)


def test_two_encryptions_of_one_value_differ(enc):
    a, b = enc.encrypt(np.array([7, 7], dtype=np.uint8))
    assert a != b


def test_encrypt_refuses_non_uint8(enc):
    with pytest.raises(ValueError, match="uint8"):
        enc.encrypt(np.array([1.5, 300.0]))


# --- every op against its plaintext reference --------------------------------------------

@pytest.mark.parametrize("spec", [
    "brightness:60", "brightness:-60", "brightness:255", "brightness:-1",
    "brightness-wrap:60", "brightness-wrap:-60",
    "threshold:128", "threshold:0", "threshold:255", "threshold:17",
    "min:200", "min:0", "max:50", "max:255", "min:129",
])
def test_op_equals_its_reference_on_the_edges(spec, ev, dec, edge_cts):
    op = parse_op(spec)
    assert np.array_equal(dec.decrypt(ev.apply(op, edge_cts)), op.reference(EDGES))


@pytest.mark.parametrize("spec", ["brightness:60", "threshold:100", "min:90", "max:160", "brightness-wrap:200"])
def test_op_equals_its_reference_on_random_pixels(spec, ev, enc, dec):
    values = _random(16, 4)
    op = parse_op(spec)
    assert np.array_equal(dec.decrypt(ev.apply(op, enc.encrypt(values))), op.reference(values))


@pytest.mark.parametrize("spec", ["lut:gamma-0.5", "lut:stretch-64-191", "lut:invert"])
def test_named_lut_equals_its_reference_on_a_camera_crop(spec, ev, enc, dec, camera_crop):
    op = parse_op(spec)
    got = dec.decrypt(ev.apply(op, enc.encrypt(camera_crop)), shape=camera_crop.shape)
    assert np.array_equal(got, op.reference(camera_crop))


def test_arbitrary_table_is_exact(ev, enc, dec):
    native = native_module()
    table = _random(256, 5).tobytes()
    values = np.array([0, 37, 128, 255, 200, 91], dtype=np.uint8)
    out = ev.native_key.apply("table", enc.encrypt(values), table=table)
    assert np.array_equal(dec.decrypt(out), np.frombuffer(table, np.uint8)[values])
    assert native.ServerKey.reference("table", table=table) == table


def test_brightness_then_threshold_chain_on_a_camera_crop(ev, enc, dec, camera_crop):
    ops = [parse_op("brightness:60"), parse_op("threshold:200")]
    got = dec.decrypt(ev.apply_chain(ops, enc.encrypt(camera_crop)), shape=camera_crop.shape)
    assert np.array_equal(got, reference_chain(camera_crop, ops))


def test_seeded_ciphertexts_go_straight_into_an_op(ev, enc, dec):
    values = _random(6, 6)
    op = Brightness(60)
    assert np.array_equal(dec.decrypt(ev.apply(op, enc.encrypt_seeded(values))), op.reference(values))


@pytest.mark.parametrize("spec,circuit", [
    ("brightness:60", "tfhe-rs"), ("brightness:-60", "tfhe-rs-min-add"), ("threshold:128", "tfhe-rs"),
    ("min:200", "tfhe-rs"), ("brightness:60", "table"),
])
def test_alternative_circuits_agree_with_the_reference(spec, circuit, ev, enc, dec):
    values = np.array([0, 195, 196, 255], dtype=np.uint8)
    op = parse_op(spec)
    assert np.array_equal(dec.decrypt(ev.apply(op, enc.encrypt(values), circuit=circuit)), op.reference(values))


def test_two_threads_give_the_same_result(key_dir, enc, dec):
    values = _random(8, 7)
    ev2 = Evaluator.from_key_directory(key_dir, threads=2)
    assert np.array_equal(dec.decrypt(ev2.apply("brightness:60", enc.encrypt(values))),
                          Brightness(60).reference(values))


def test_compressed_results_decrypt_exactly(ev, enc, dec):
    values = _random(10, 8)
    out = ev.apply("threshold:90", enc.encrypt(values))
    assert np.array_equal(dec.decrypt_list(ev.compress(out), ev), Threshold(90).reference(values))


# --- op objects and their references ---------------------------------------------------------

def test_references_clip_wrap_and_mask_exactly():
    x = np.array([0, 30, 200, 255], dtype=np.uint8)
    assert Brightness(60).reference(x).tolist() == [60, 90, 255, 255]
    assert Brightness(-60).reference(x).tolist() == [0, 0, 140, 195]
    assert BrightnessWrap(60).reference(x).tolist() == [60, 90, 4, 59]
    assert Threshold(30).reference(x).tolist() == [0, 255, 255, 255]
    assert Min(100).reference(x).tolist() == [0, 30, 100, 100]
    assert Max(100).reference(x).tolist() == [100, 100, 200, 255]
    assert Lut("invert").reference(x).tolist() == [255, 225, 55, 0]
    assert Lut("stretch-64-191").reference(np.array([64, 191, 10, 250], np.uint8)).tolist() == [0, 255, 0, 255]
    assert Lut("gamma-2").reference(np.array([0, 255, 128], np.uint8)).tolist() == [0, 255, 64]


def test_native_reference_matches_the_python_references():
    native = native_module()
    for op in [Brightness(60), Brightness(-77), BrightnessWrap(-3), Threshold(128), Min(9), Max(250)]:
        assert native.ServerKey.reference(op.native_op, constant=op.constant) == op.table().tobytes(), op.spec


@pytest.mark.parametrize("spec,match", [
    ("brightness:256", "-255..255"), ("threshold:-1", "integer"), ("min:300", "0..255"),
    ("lut:gamma-20", "0.1..10"), ("lut:stretch-200-100", "LO < HI"), ("lut:sepia", "unknown lookup table"),
    ("blur:3", "unknown TFHE operation"), ("brightness", "bad TFHE operation"), ("brightness:1.5", "integer"),
])
def test_bad_specs_name_the_problem(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_op(spec)


def test_native_refuses_unknown_ops_circuits_and_short_tables(ev, edge_cts):
    with pytest.raises(ValueError, match="unknown operation"):
        ev.native_key.apply("blur", edge_cts[:1])
    with pytest.raises(ValueError, match="unknown circuit"):
        ev.native_key.apply("min", edge_cts[:1], constant=3, circuit="fastest")
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
    assert doc["scheme"] == "tfhe"
    assert doc["fingerprint"] == tfhe_keys.fingerprint((key_dir / tfhe_keys.SERVER).read_bytes())


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

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(Path, "open", spy_path_open)
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
    out = Evaluator.from_key_directory(pub).apply("brightness:60", enc.encrypt(values))
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
