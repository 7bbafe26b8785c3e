"""Keyed offsets under the compact store (hecore/binding.py, hecore/seal/atrest.py): a declared linear chain stored
compact -- low bits dropped, c1 as its seed under secret-key encryption -- is bound by default as in SEAL's bytes.

The planner keeps the rounding the compact store adds within a quarter of the chain's tolerance (an eighth of a
grid step); the offsets' check allows a quarter step off the grid.  So an honest ciphertext's values, offsets
removed, stay inside the check (none off the grid here, over every value of every tile, in both packed layouts,
public- and secret-key), and the same ciphertext taken for another place lies half a step off at many places.
Through the jobs: a ``--store compact`` run of a declared chain is bound, decrypts exactly, and a swap of two
tiles of a flat image is an ``integrity`` reject."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore import binding
from hecore.encrypt import PublicKeyEncryptor, symmetric
from hecore.layouts.packed import decrypt_block, encrypt_blocks
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_ops, reference
from hecore.planner import at_rest
from hecore.seal.atrest import CompactEncryptor
from jobs.cli import main

pytestmark = [pytest.mark.seconds(40), pytest.mark.skipif(
    not symmetric.available(),
    reason="the native extension hepix_seal is not installed (make setup builds it with tools/build_native.sh)")]

TILE, HALO = (30, 30), 2
CHAINS = [["brightness:20"], ["meanfilter:3"], ["brightness:20", "contrast:1.5", "conv:sharpen"]]


@pytest.mark.parametrize("complex_packing", [True, False], ids=["complex", "real"])
@pytest.mark.parametrize("encryption", ["symmetric", "public"])
@pytest.mark.parametrize("chain", CHAINS, ids=["brightness", "mean3", "chain"])
def test_a_compact_ciphertext_keeps_its_offsets_check_and_another_place_fails_it(he_paper4096, chain, encryption,
                                                                                 complex_packing):
    from hecore.seal.evaluator import Evaluator

    ctx, secret = he_paper4096
    ops = parse_ops(chain)
    layout = "packed-complex" if complex_packing else "packed"
    plan = at_rest(ctx.params, ops, layout, seeded=encryption == "symmetric")
    assert plan.drop0 > 0 and plan.error_bound <= binding.OFF_GRID * plan.tolerance, plan
    inner = symmetric.SymmetricEncryptor(ctx.public, secret) if encryption == "symmetric" else PublicKeyEncryptor(ctx)
    enc, ev, key, unit = CompactEncryptor(inner, plan), Evaluator(ctx), binding.new_key(), binding.offset_unit(ops)
    rng = np.random.default_rng(11)
    shape = (TILE[0] + 2 * HALO, TILE[1] + 2 * HALO)
    blocks = [rng.integers(0, 256, shape).astype(np.float64) for _ in range(3)] + [np.full(shape, 200.0)]
    places = [("img", 0, i, 1) for i in range(len(blocks))]
    shaken = [b + binding.offset_values(key, *p, shape, unit) for b, p in zip(blocks, places)]
    bound = binding.Binding(key, {"img": 1, "other": 1}, unit=unit)
    finish = finish_for(ops)
    far = 0.0
    for block, place, ct in zip(blocks, places, encrypt_blocks(enc, shaken, HALO, complex_packing)):
        c, post_scale = apply_ops(ev, ev.load(bytes(ct)), ops, PackedGeometry(*TILE, HALO, 0, 0, 64, 64,
                                                                               complex_packing))
        raw = decrypt_block(ctx, ev.dump(c), *TILE, HALO, complex_packing)
        (values,), (wrong,) = bound.without_offsets([place], [raw], ops, tile=TILE, halo=HALO)
        plain = reference(block, ops)[HALO:HALO + TILE[0], HALO:HALO + TILE[1]]
        assert wrong == 0 and np.array_equal(finish.apply(values), finish.apply(plain / post_scale)), place
        grid = (values - float(finish.offset)) / float(finish.step)       # in steps from the chain's grid
        far = max(far, float(np.abs(grid - np.rint(grid)).max()))
        # the same ciphertext taken for another tile or image: half a step off the grid at many places
        for there in (("img", 0, place[2], 2), ("other", 0, place[2], 1)):
            assert bound.without_offsets([there], [raw], ops, tile=TILE, halo=HALO)[1][0] > TILE[0] * TILE[1] // 4
    # what the honest values kept of the check's margin: within half of it, as the planner's bound says
    assert far <= binding.OFF_GRID / 2, far


# --- through the jobs ---------------------------------------------------------------------------------

SPARK = ["--master", "local[1]", "--quiet"]
OPS = ["brightness:20", "meanfilter:3"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.mark.spark
def test_a_compact_run_of_a_declared_chain_is_bound_decrypts_exactly_and_a_flat_swap_is_rejected(tmp_path):
    from hostile import swap_flat_tiles

    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((24, 24, 3), 200, np.uint8)).save(images / "flat.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (24, 24), dtype=np.uint8)).save(images / "grey.png")
    declared = [a for op in OPS for a in ("--for-op", op)]
    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "paper-4096") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub", "--tile", "8x8",
                 *declared) == 0
    # secret-key encryption: c1 kept as its seed, the most bits dropped from c0 (the tightest margin)
    assert hepix("encrypt", "--keys", tmp_path / "keys", "--input", images, "--out", tmp_path / "enc", "--tile",
                 "8x8", "--store", "compact", "--encryption", "symmetric", *declared, *SPARK) == 0
    manifest = json.loads((tmp_path / "enc" / "_manifest.json").read_text())
    assert manifest["options"]["bound_offsets"] is True and manifest["options"]["store"]["drop0"] > 0
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "proc",
                 *[a for op in OPS for a in ("--op", op)], *SPARK) == 0
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "proc", "--out", tmp_path / "d",
                 "--owner", tmp_path / "enc.owner", "--images", images, *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["exact_fraction"] == 1.0 for r in rows)
    assert ds.dataset(tmp_path / "d" / "rejects").to_table().num_rows == 0
    flat = swap_flat_tiles(tmp_path / "proc", tmp_path / "forged")     # two tiles of the flat image: the same values
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "forged", "--out", tmp_path / "f",
                 "--owner", tmp_path / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "f" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    # and --no-bind leaves it unbound, in the same store
    assert hepix("encrypt", "--keys", tmp_path / "keys", "--input", images, "--out", tmp_path / "loose", "--tile",
                 "8x8", "--store", "compact", "--no-bind", *declared, *SPARK) == 0
    assert "bound_offsets" not in json.loads((tmp_path / "loose" / "_manifest.json").read_text())["options"]
