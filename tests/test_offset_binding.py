"""Keyed offsets (hecore/binding.py): encrypt adds a keyed +-u to every pixel of a chain declared with --for-op,
so each ciphertext holds its place's offsets under the encryption, in both packed layouts.  The chain's linear
part of them is what the owner computes from the key alone and removes; a ciphertext of another place then lies
half a grid step off at about half its values -- measured here over hundreds of trials, and through the jobs,
where a swap of two tiles of a flat image (identical values: no spot sample tells them apart) is rejected as
``integrity`` by default, and decrypt without the owner map is refused by name."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore import binding
from hecore.layouts.packed import decrypt_block, encrypt_blocks
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_ops, reference
from jobs.cli import main

CHAIN = ["brightness:20", "contrast:1.5", "conv:sharpen"]
TILE, HALO = (8, 10), 1


@pytest.mark.parametrize("chain, unit", [
    (["brightness:20"], 0.25), (["meanfilter:3"], 0.25), (["grey", "conv:gauss5"], 0.25), (CHAIN, 0.25),
    (["downsample:2"], None), (["dftfilter:lowpass=0.5"], None), ([], None)])
def test_the_offsets_size_follows_the_chain(chain, unit):
    assert binding.offset_unit(parse_ops(chain)) == unit


def _block(seed: int, flat: bool = False) -> np.ndarray:
    shape = (TILE[0] + 2 * HALO, TILE[1] + 2 * HALO)
    return np.full(shape, 200, np.uint8) if flat else \
        np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("complex_packing", [False, True])
def test_the_offsets_come_off_exactly_and_another_place_s_do_not(he_paper4096, complex_packing):
    from hecore.seal.evaluator import Evaluator

    ctx, _ = he_paper4096
    key, ops = binding.new_key(), parse_ops(CHAIN)
    unit = binding.offset_unit(ops)
    block = _block(3)
    offsets = binding.offset_values(key, "img", 0, 3, 4, block.shape, unit)
    assert set(np.unique(offsets)) == {-unit, unit}
    ev = Evaluator(ctx)
    c = ev.load(bytes(encrypt_blocks(ctx, [block + offsets], HALO, complex_packing)[0]))
    c, post_scale = apply_ops(ev, c, ops, PackedGeometry(*TILE, HALO, 0, 0, 64, 64, complex_packing))
    raw = decrypt_block(ctx, ev.dump(c), *TILE, HALO, complex_packing)
    bound = binding.Binding(key, {"img": 1}, unit=unit)
    (values,), (wrong,) = bound.without_offsets([("img", 0, 3, 4)], [raw], ops, tile=TILE, halo=HALO)
    assert wrong == 0
    plain = reference(block.astype(np.float64), ops)[HALO:HALO + TILE[0], HALO:HALO + TILE[1]]
    finish = finish_for(ops)
    assert np.array_equal(finish.apply(values), finish.apply(plain / post_scale))
    assert np.abs(values * post_scale - plain).max() < 1e-2
    # the same ciphertext taken for another tile, channel or image: off the grid at many places
    for place in (("img", 0, 3, 5), ("img", 1, 3, 4), ("other", 0, 3, 4)):
        other = binding.Binding(key, {place[0]: 2}, unit=unit)
        checked = -(-TILE[0] // binding.check_stride(TILE)) * -(-TILE[1] // binding.check_stride(TILE))
        assert other.without_offsets([place], [raw], ops, tile=TILE, halo=HALO)[1][0] > checked // 4


def _raw(key, place, chain, pixels) -> np.ndarray:
    """A ciphertext's raw results for ``place`` after ``chain``, computed in the clear, with CKKS-sized noise."""
    from hostile import offset_raw

    ops = parse_ops(chain)
    return offset_raw(key, place, ops, pixels, binding.offset_unit(ops), halo=HALO)


@pytest.mark.parametrize("chain, channels", [(["brightness:20"], 1), (["meanfilter:3"], 1), (["grey"], 3),
                                             (["watermark:2,2,255", "conv:gauss3"], 3)])
def test_a_ciphertext_of_another_place_passes_at_no_more_than_the_formula_s_rate(chain, channels):
    """300 trials on flat pixels (a swap there changes no value): a ciphertext of another tile, image, channel
    or run is checked at every value and passes with probability 2^-24 at most -- none of 300 may pass --
    while the right ciphertext passes every time."""
    ops = parse_ops(chain)
    unit = binding.offset_unit(ops)
    pixels = np.full((TILE[0] + 2 * HALO, TILE[1] + 2 * HALO, channels), 120.0)
    from hostile import places_apart

    passed = 0
    for key, here, other_key, there in places_apart(np.random.default_rng(7), 300):
        bound = binding.Binding(key, {"a": channels, "b": channels}, unit=unit)
        assert bound.without_offsets([here], [_raw(key, here, chain, pixels)], ops, tile=TILE, halo=HALO)[1] == [0]
        wrong = bound.without_offsets([here], [_raw(other_key, there, chain, pixels)], ops, tile=TILE, halo=HALO)[1]
        passed += wrong[0] == 0
    assert passed == 0


# --- through the jobs ---------------------------------------------------------------------------------

SPARK = ["--master", "local[1]", "--quiet"]
OPS = ["brightness:20", "meanfilter:3"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    root = tmp_path_factory.mktemp("offsets")
    images = root / "images"
    images.mkdir()
    Image.fromarray(np.full((24, 24, 3), 200, np.uint8)).save(images / "flat.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (24, 24), dtype=np.uint8)).save(images / "grey.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", "paper-4096") == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub", "--tile", "8x8",
                 *[a for op in OPS for a in ("--for-op", op)]) == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", "--tile", "8x8",
                 *[a for op in OPS for a in ("--for-op", op)], *SPARK) == 0
    assert hepix("process", "--keys", root / "pub", "--input", root / "enc", "--out", root / "proc",
                 *[a for op in OPS for a in ("--op", op)], *SPARK) == 0
    return root


@pytest.mark.spark
def test_a_declared_chain_is_bound_by_default_and_decrypts_exactly(declared, tmp_path):
    manifest = json.loads((declared / "enc" / "_manifest.json").read_text())
    assert manifest["layout"] == "packed-complex" and manifest["options"]["bound_offsets"] is True
    owner = json.loads((declared / "enc.owner" / "owner.json").read_text())
    assert owner["settings"]["bind_unit"] == 0.25
    key = declared / "enc.owner" / "binding.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == binding.KEY_BYTES
    assert not [p for p in (declared / "enc").rglob("*") if "binding" in p.name]
    assert hepix("decrypt", "--keys", declared / "keys", "--input", declared / "proc", "--out", tmp_path / "d",
                 "--owner", declared / "enc.owner", "--images", declared / "images", *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["exact_fraction"] == 1.0 for r in rows)
    assert ds.dataset(tmp_path / "d" / "rejects").to_table().num_rows == 0


@pytest.mark.spark
def test_tiles_swapped_on_a_flat_image_are_rejected_and_no_owner_map_is_refused(declared, tmp_path, capsys):
    from hostile import swap_flat_tiles

    run = tmp_path / "forged"
    flat = swap_flat_tiles(declared / "proc", run)             # two tiles of the flat image: the same values
    assert hepix("decrypt", "--keys", declared / "keys", "--input", run, "--out", tmp_path / "d", "--owner",
                 declared / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "d" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    assert "off the chain's grid once its place's keyed offsets are removed" in rejects[0]["detail"]
    capsys.readouterr()
    assert hepix("decrypt", "--keys", declared / "keys", "--input", declared / "proc", "--out", tmp_path / "e",
                 *SPARK) == 2
    assert "give --owner DIR" in capsys.readouterr().err


@pytest.mark.spark
def test_no_bind_leaves_a_declared_chain_unbound(declared, tmp_path):
    assert hepix("encrypt", "--keys", declared / "pub", "--input", declared / "images", "--out", tmp_path / "enc",
                 "--tile", "8x8", "--no-bind", *[a for op in OPS for a in ("--for-op", op)], *SPARK) == 0
    manifest = json.loads((tmp_path / "enc" / "_manifest.json").read_text())
    assert "bound_offsets" not in manifest["options"] and not (tmp_path / "enc.owner" / "binding.key").exists()
