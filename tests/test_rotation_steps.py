"""Least-capability rotation keys: ``export-public --for-op`` gives the cluster the Galois keys of the steps the
chain takes on encrypt's tiles (hecore/seal/steps.py), and the copy vouches for them the way the rest does.

* the steps are what the chain's own code asks for (recorded from a run of it), and the chain run with the
  subset decrypts to what it decrypts to with the whole set -- and to the plaintext reference;
* the copy is smaller, its fingerprint is the owner's, and its manifest says which steps it holds; a manifest
  or a rotate.key changed afterwards is refused by name;
* a rotation by a step the copy lacks is refused, before any work, with what to export instead.
"""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from hecore.errors import KeyDirectoryError
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import parse_ops
from hecore.schemes.seal import SEAL, SealKeys, packed_steps, probe_geometry
from hecore.seal import keys as seal_keys
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator, MissingEvaluationKeys
from hecore.seal.params import preset
from hecore.seal.steps import check_steps, whole_set_keys

CHAIN = ["brightness:40", "watermark:10,10,255", "meanfilter:3"]


@pytest.fixture(scope="module")
def owner(tmp_path_factory):
    root = tmp_path_factory.mktemp("steps")
    seal_keys.keygen(preset("paper-4096"), root / "keys")
    SEAL.export_public(root / "keys", root / "pub", CHAIN)
    return root


def test_the_copy_holds_the_chains_steps_and_vouches_for_them(owner):
    whole, copy = seal_keys.read_public(owner / "keys"), seal_keys.read_public(owner / "pub")
    doc = json.loads((owner / "pub" / "hepix-keys.json").read_text())
    assert copy.fingerprint() == whole.fingerprint()
    assert copy.rotation_steps == tuple(doc["rotation_steps"]) and whole.rotation_steps is None
    assert doc["withheld"] == ["relin.key"]
    assert 0 < len(copy.rotation_steps) < whole_set_keys(whole.params.slots)
    assert len(copy.rotate_key) < 0.5 * len(whole.rotate_key)
    # the steps are those the chain's code takes on the tiles encrypt makes (packed 30x62 and complex 60x62,
    # both with a halo of 1: blocks 64 slots wide)
    ops = parse_ops(CHAIN)
    found = packed_steps(whole, ops, probe_geometry((30, 62), 1))
    assert found == set(copy.rotation_steps)
    assert found == {s * m for s in (1, 64) for m in (-1, 1, 2)}


def test_the_chain_with_the_subset_decrypts_as_with_the_whole_set(owner):
    secret = seal_keys.read_secret_key(owner / "keys")
    decryptor = HEContext.from_public(seal_keys.read_public(owner / "keys", eval_keys=False), secret_key=secret)
    rng = np.random.default_rng(3)
    block = rng.integers(0, 256, (32, 64)).astype(np.float64)
    geom = PackedGeometry(30, 62, 1, 0, 0, 30, 62)
    ops = parse_ops(CHAIN)
    out = {}
    for name in ("keys", "pub"):
        ctx = seal_keys.load_public(owner / name)
        ev = Evaluator(ctx)
        c, scale = apply_ops(ev, ev.load(ctx.encrypt_vector(block.reshape(-1))), ops, geom)
        out[name] = decryptor.decrypt_slots(ev.dump(c), block.size).reshape(block.shape) * scale
    core = (slice(1, 31), slice(1, 63))     # the tile; the halo's slots hold what wrapped round
    assert np.abs(out["pub"][core] - out["keys"][core]).max() < 1e-3


def test_a_rotation_the_copy_lacks_is_refused_naming_the_step(owner):
    ev = Evaluator(seal_keys.load_public(owner / "pub"))
    c = ev.load(ev.ctx.encrypt_vector(np.arange(8.0)))
    ev.rotate(c, 64)
    with pytest.raises(MissingEvaluationKeys, match="rotates by 3 slots"):
        ev.rotate(c, 3)


def test_process_is_told_which_tiles_to_export_for(owner):
    keys = SealKeys(seal_keys.read_public(owner / "pub"))
    ops = parse_ops(["meanfilter:3"])
    assert keys.lacks_for(ops, "packed", {"tile": [30, 62], "halo": 1}) is None
    assert keys.lacks_for(ops, "packed-complex", {"tile": [60, 62], "halo": 1}) is None
    why = keys.lacks_for(ops, "packed", {"tile": [8, 8], "halo": 1})
    assert "--tile 8x8 --halo 1" in why and "rotates by" in why
    assert SealKeys(seal_keys.read_public(owner / "keys")).lacks_for(ops, "packed", {"tile": [8, 8], "halo": 1}) is None


def test_tiles_given_at_export_are_the_ones_served(owner, tmp_path):
    SEAL.export_public(owner / "keys", tmp_path / "pub", ["meanfilter:3"], tile=(8, 8), halo=1)
    held = seal_keys.read_public(tmp_path / "pub").rotation_steps
    assert held == (-10, -1, 1, 2, 10, 20)
    assert SealKeys(seal_keys.read_public(tmp_path / "pub")).lacks_for(
        parse_ops(["meanfilter:3"]), "packed", {"tile": [8, 8], "halo": 1}) is None


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(rotation_sha256="0" * 64), "not the file"),
    (lambda d: d.update(rotation_steps=d["rotation_steps"][::-1]), "sorted and distinct"),
    (lambda d: d.update(rotation_steps=[0]), "not a non-zero integer"),
    (lambda d: d.update(rotation_steps=[1, 4096]), "not a non-zero integer"),
    (lambda d: d.update(rotation_steps=["1"]), "not a non-zero integer"),
    (lambda d: d.update(rotation_steps=list(range(1, 5000))), "a list of 1 to"),
    (lambda d: d.pop("rotation_sha256"), "rotation_sha256"),
    (lambda d: d.update(withheld=["relin.key", "rotate.key"]), "not part of it"),
])
def test_a_changed_manifest_is_refused(owner, tmp_path, change, message):
    import shutil

    shutil.copytree(owner / "pub", tmp_path / "pub")
    path = tmp_path / "pub" / "hepix-keys.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyDirectoryError, match=message):
        seal_keys.read_public(tmp_path / "pub")


def test_the_whole_sets_rotate_key_under_a_subsets_manifest_is_refused(owner, tmp_path):
    import shutil

    shutil.copytree(owner / "pub", tmp_path / "pub")
    shutil.copy(owner / "keys" / "rotate.key", tmp_path / "pub" / "rotate.key")
    with pytest.raises(KeyDirectoryError, match="not the file"):
        seal_keys.read_public(tmp_path / "pub")


def test_a_public_copy_cannot_make_a_subset_and_keeps_its_keys(owner, tmp_path, caplog):
    seal_keys.export_public(owner / "keys", tmp_path / "whole")
    with caplog.at_level(logging.WARNING):
        SEAL.export_public(tmp_path / "whole", tmp_path / "again", ["meanfilter:3"])
    assert "holds no secret key" in caplog.text
    assert seal_keys.read_public(tmp_path / "again").rotation_steps is None
    SEAL.export_public(owner / "pub", tmp_path / "copy")               # a copy of the subset keeps it
    assert seal_keys.read_public(tmp_path / "copy").rotation_steps == seal_keys.read_public(owner / "pub").rotation_steps


def test_a_chain_no_packed_tile_runs_gets_no_rotation_keys(owner, tmp_path):
    SEAL.export_public(owner / "keys", tmp_path / "pub", ["conv:sharpen", "meanfilter:3"])   # pixel layout only
    assert not (tmp_path / "pub" / "rotate.key").exists()
    assert seal_keys.read_public(tmp_path / "pub").rotate_key is None


def test_tiles_without_a_chain_are_refused(owner, tmp_path):
    with pytest.raises(ValueError, match="give the chain with --for-op"):
        SEAL.export_public(owner / "keys", tmp_path / "x", (), tile=(8, 8))


def test_check_steps():
    assert check_steps([-3, 1, 2], 2048) == (-3, 1, 2)
    for bad in ([], [2, 1], [1, 1], [0], [1025], [True], "1", None):
        with pytest.raises(ValueError):
            check_steps(bad, 2048)
