"""The scheme interface: one key set for SEAL and TFHE, asked rather than compared (hecore.schemes)."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from hecore.errors import InvalidParameters, KeyDirectoryError
from hecore.layouts import Layout
from hecore.schemes import SCHEMES, SECRET_FILES, open_keys, scheme_for_preset, scheme_named, scheme_of
from hecore.schemes.seal import SEAL, SealKeys
from hecore.schemes.tfhe import TFHE, TfheKeys
from hecore.seal.keys import keygen
from hecore.seal.params import preset
from hecore.tfhe.params import TFHE_DEFAULT


@pytest.fixture(scope="module")
def seal_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("schemes") / "keys"
    keygen(preset("addonly-2048"), d)
    return d


def test_every_secret_file_of_every_scheme_is_refused_by_the_processing_side():
    assert SECRET_FILES == ("secret.key", "client.key") and [s.name for s in SCHEMES] == ["seal", "tfhe"]


def test_a_seal_directory_opens_as_seal_keys_public_unless_the_secret_is_asked_for(seal_dir):
    public = open_keys(seal_dir)
    owner = open_keys(seal_dir, secret=True)
    assert isinstance(public, SealKeys) and public.scheme is SEAL and scheme_of(seal_dir) is SEAL
    assert not public.has_secret and owner.has_secret and public.fingerprint == owner.fingerprint
    assert public.params.name == "addonly-2048" and public.scheme_name == "ckks"
    with pytest.raises(ValueError, match="only the owner"):
        public.secret_bytes()
    with pytest.raises(ValueError, match="only the owner"):
        public.decryptor()


def test_a_key_set_pickles_as_bytes_without_the_context_it_built(seal_dir):
    keys = open_keys(seal_dir, secret=True)
    ct = keys.context().encrypt_vector(np.arange(8.0))
    back = pickle.loads(pickle.dumps(keys))
    assert "_context" in keys.__dict__ and "_context" not in back.__dict__
    assert np.allclose(back.decryptor().decrypt_slots(ct, 8), np.arange(8.0), atol=1e-3)


def test_the_reduced_key_sets_hold_what_their_use_needs_and_no_more(seal_dir):
    owner = open_keys(seal_dir, secret=True)
    checks, dec = owner.for_checks(), owner.for_decryption()
    assert not checks.has_secret and checks.material.relin_key is None and checks.material.rotate_key is None
    assert dec.has_secret and dec.material.rotate_key is None and not owner.public().has_secret
    assert checks.checker().problem(b"") is not None


def test_tfhe_keys_reduced_for_the_checks_drop_both_keys():
    owner = TfheKeys(TFHE_DEFAULT, "f" * 64, b"server", b"client")
    assert owner.for_checks() == TfheKeys(TFHE_DEFAULT, "f" * 64)
    assert owner.for_decryption().client_key == b"client" and owner.for_decryption().server_key is None
    assert owner.public().client_key is None and owner.public().server_key == b"server"
    with pytest.raises(ValueError, match="no server key"):
        owner.for_checks().evaluator()
    assert "client" not in repr(owner) and "server" not in repr(owner).replace("server_key", "")


def test_a_tfhe_manifest_names_the_tfhe_scheme_without_any_key_read(tmp_path):
    (tmp_path / "hepix-keys.json").write_text(json.dumps({"format": 1, "scheme": "tfhe"}))
    assert scheme_of(tmp_path) is TFHE


def test_scheme_of_a_directory_without_a_manifest_says_how_to_make_one(tmp_path):
    with pytest.raises(KeyDirectoryError, match="hepix keygen"):
        scheme_of(tmp_path)
    (tmp_path / "hepix-keys.json").write_text("{")
    with pytest.raises(KeyDirectoryError, match="malformed"):
        scheme_of(tmp_path)


def test_presets_and_names_find_their_scheme():
    assert scheme_for_preset("tfhe-default") is TFHE and scheme_for_preset("paper-4096") is SEAL
    assert scheme_named("bfv") is SEAL and scheme_named("tfhe") is TFHE and scheme_named(None) is SEAL
    with pytest.raises(ValueError, match="unknown scheme"):
        scheme_named("paillier")
    with pytest.raises(InvalidParameters, match="tfhe-default"):
        TFHE.preset("tfhe-huge")


def test_what_each_scheme_can_do_is_asked_not_compared():
    assert TFHE.layouts == (Layout.PIXEL,) and TFHE.public_encryption and TFHE.strategies == ("fresh",)
    assert TFHE.symmetric_layouts == (Layout.PIXEL,) and "symmetric" in TFHE.encryptions
    assert SEAL.layouts[0] is Layout.PACKED and SEAL.public_encryption and "full" in SEAL.strategies
    assert all(lay.packed for lay in SEAL.symmetric_layouts)
    assert "compact" in SEAL.stores and "compact" not in TFHE.stores
    assert TFHE.plausible_range(["threshold:128"]) == (0.0, 255.0)
    lo, hi = SEAL.plausible_range(["brightness:10"])
    assert lo < 10 and 265 < hi < 266
    assert TFHE.processed_strategy("tfhe-seeded") == "tfhe-full" and SEAL.processed_strategy("fresh") == "fresh"


def test_integer_keys_fill_the_packed_layouts_only():
    from hecore.seal.context import PublicMaterial

    bfv = SealKeys(PublicMaterial(preset("bfv-4096"), b"", b""))
    assert Layout.PIXEL not in bfv.layouts and Layout.PACKED in bfv.layouts


def test_each_scheme_refuses_the_keygen_options_of_the_other():
    with pytest.raises(InvalidParameters, match="--compressed-server-key"):
        SEAL.keygen("/nonexistent", preset("addonly-2048"), compressed_server_key=True)
    with pytest.raises(InvalidParameters, match="--no-rotations"):
        TFHE.keygen("/nonexistent", TFHE_DEFAULT, rotations=False)


def test_planning_keys_names_the_smallest_preset_or_says_why_none(seal_dir):
    assert SEAL.plan_keys([], None).name == "paper-4096"
    assert SEAL.plan_keys(["brightness:5"], "packed").name == "addonly-2048"
    with pytest.raises(ValueError, match="TFHE cannot run meanfilter:3"):
        TFHE.plan_keys(["meanfilter:3"], None)


def test_a_chain_is_checked_by_the_scheme_of_the_keys():
    with pytest.raises(ValueError, match="TFHE ops run on ciphertexts made with these TFHE keys"):
        TFHE.check_chain(TFHE_DEFAULT, [], [], layout="pixel", options={}, preset="paper-4096")
    ops = SEAL.parse_chain(["brightness:5"]).ops
    assert SEAL.check_chain(preset("addonly-2048"), [], list(ops), layout="packed", options={"halo": 0},
                            preset="addonly-2048") == list(ops)
