"""A declared downsample is bound by keyed offsets (hecore/binding.py), as the chains linear in the pixels are.

``downsample:F`` sums each F x F block in place: the result of block (Y, X) sits in the slot of its top-left
input pixel, every F-th slot of every F-th row of the tile (``decrypt_block``'s stride).  The chain is linear in
the pixels, so the keyed offsets encrypt put under them come out as its linear part of them, which the owner
computes from the key alone on the decoded (smaller) tile and removes; a ciphertext of another place then lies
half a grid step off at about half its values.  Measured here through SEAL, over 300 trials on flat pixels (a
swap there changes no value), and through the jobs (two tiles of a flat image swapped: ``integrity``).
"""
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

TILE = (8, 12)          # the input tile; no halo (a downsample's blocks stay in their tile)


@pytest.mark.parametrize("chain, unit", [(["downsample:2"], 0.25), (["grey", "downsample:4"], 0.25),
                                         (["downsample:2", "brightness:20"], 0.25), (["dftfilter:lowpass=0.5"], None)])
def test_a_downsample_has_an_offset_unit_where_its_results_are_read_from_their_stride(chain, unit):
    ops = parse_ops(chain)
    assert binding.offset_unit(ops, strided=True) == unit
    assert binding.strides(ops) == max([op.packed_stride for op in ops])


def test_what_another_place_passes_with_is_one_half_per_result_checked():
    assert binding.strided_pass_log2(parse_ops(["downsample:8"]), (32, 64)) == -32
    assert binding.strided_pass_log2(parse_ops(["grey", "downsample:2"]), (8, 8)) == -16
    # 32x32 results (1,024 or more): every other row and column is compared, 256 of them
    assert binding.strided_pass_log2(parse_ops(["downsample:2"]), (64, 64)) == -256
    assert binding.strided_pass_log2(parse_ops(["meanfilter:3"]), (8, 8)) is None


def test_the_offsets_come_off_a_downsampled_tile_exactly_and_another_place_s_do_not(he_paper4096):
    from hecore.seal.evaluator import Evaluator

    ctx, _ = he_paper4096
    key, ops = binding.new_key(), parse_ops(["downsample:2", "brightness:20"])
    unit, stride = binding.offset_unit(ops, strided=True), binding.strides(ops)
    out = (TILE[0] // stride, TILE[1] // stride)
    block = np.random.default_rng(3).integers(0, 256, TILE).astype(np.float64)
    offsets = binding.offset_values(key, "img", 0, 3, 4, TILE, unit)
    ev = Evaluator(ctx)
    c = ev.load(bytes(encrypt_blocks(ctx, [block + offsets], 0, False)[0]))
    c, post_scale = apply_ops(ev, c, ops, PackedGeometry(*TILE, 0, 0, 0, 64, 64, False))
    raw = decrypt_block(ctx, ev.dump(c), *out, 0, False, stride)
    bound = binding.Binding(key, {"img": 1}, unit=unit)
    (values,), (wrong,) = bound.without_offsets([("img", 0, 3, 4)], [raw], ops, tile=out, halo=0)
    assert wrong == 0
    plain = reference(block, ops)
    finish = finish_for(ops)
    assert plain.shape == out
    assert np.array_equal(finish.apply(values), finish.apply(plain / post_scale))
    # the same ciphertext taken for another tile, channel or image: off the grid at many of its values
    for place in (("img", 0, 3, 5), ("img", 1, 3, 4), ("other", 0, 3, 4)):
        other = binding.Binding(key, {place[0]: 2}, unit=unit)
        assert other.without_offsets([place], [raw], ops, tile=out, halo=0)[1][0] > out[0] * out[1] // 4


def test_modular_offsets_come_off_a_downsampled_bfv_tile_exactly_and_another_place_s_do_not():
    from hecore.ops.spec import raw_range
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset

    ctx, _ = HEContext.generate(preset("bfv-4096"))
    t = ctx.params.plain_modulus
    key, ops = binding.new_key(), parse_ops(["downsample:2", "brightness:20"])
    stride = binding.strides(ops)
    out = (TILE[0] // stride, TILE[1] // stride)
    block = np.random.default_rng(3).integers(0, 256, TILE)
    shaken = binding.centred(block + binding.modular_offsets_of(key, [("img", 0, 3, 4)], TILE, t)[0], t)
    ev = Evaluator(ctx)
    raws = []
    for pixels in (shaken, block):              # bound, and the same tile encrypted without offsets
        c = ev.load(bytes(encrypt_blocks(ctx, [pixels], 0)[0]))
        c, _ = apply_ops(ev, c, ops, PackedGeometry(*TILE, 0, 0, 0, 64, 64))
        raws.append(decrypt_block(ctx, ev.dump(c), *out, 0, False, stride))
    raw, unbound = raws
    bound = binding.Binding(key, {"img": 1}, modulus=t)
    (values,), (wrong,) = bound.without_offsets([("img", 0, 3, 4)], [raw], ops, tile=out, halo=0)
    assert wrong == 0 and np.array_equal(values, unbound)            # exact raw integers: BFV has no error
    lo, hi = raw_range(ops)
    p = (hi - lo + 1) / t                       # a value of another place's lands in the range with this
    for place in (("img", 0, 3, 5), ("img", 1, 3, 4), ("other", 0, 3, 4)):
        other = binding.Binding(key, {place[0]: 3}, modulus=t)
        inside = out[0] * out[1] - other.without_offsets([place], [raw], ops, tile=out, halo=0)[1][0]
        assert inside <= max(4, out[0] * out[1] * p * 7)


def _raw(key, place, chain, pixels) -> np.ndarray:
    """A ciphertext's raw results for ``place`` after ``chain``, computed in the clear, with CKKS-sized noise."""
    from hostile import offset_raw

    ops = parse_ops(chain)
    return offset_raw(key, place, ops, pixels, binding.offset_unit(ops, strided=True))


@pytest.mark.parametrize("chain, channels, tile, trials", [
    (["downsample:2"], 1, TILE, 300), (["grey", "downsample:2"], 3, TILE, 300),
    (["downsample:4", "brightness:20"], 1, (20, 20), 300),
    (["downsample:4"], 1, (8, 8), 2000)])        # 4 results: 2^-4, a rate large enough to count
def test_a_ciphertext_of_another_place_passes_at_no_more_than_the_formula_s_rate(chain, channels, tile, trials):
    """Trials on flat pixels: a ciphertext of another tile, image, channel or run passes with probability 1/2 at
    each of its results (disjoint blocks), 2^-results -- below 2^-24 for 24 results or more, where none of 300 may
    pass; at 4 results the measured rate stays within the binomial's 3 sigma of 1/16 or below -- while the right
    one passes every time."""
    from hostile import places_apart

    ops = parse_ops(chain)
    unit, stride = binding.offset_unit(ops, strided=True), binding.strides(ops)
    out = (tile[0] // stride, tile[1] // stride)
    pixels = np.full((*tile, channels), 120.0)
    passed = 0
    for key, here, other_key, there in places_apart(np.random.default_rng(7), trials):
        bound = binding.Binding(key, {"a": channels, "b": channels}, unit=unit)
        assert bound.without_offsets([here], [_raw(key, here, chain, pixels)], ops, tile=out, halo=0)[1] == [0]
        wrong = bound.without_offsets([here], [_raw(other_key, there, chain, pixels)], ops, tile=out, halo=0)[1]
        passed += wrong[0] == 0
    bound_rate = 2.0 ** -(out[0] * out[1])
    if bound_rate < 2.0 ** -20:
        assert passed == 0
    else:
        assert passed <= trials * bound_rate + 3 * (trials * bound_rate * (1 - bound_rate)) ** 0.5, passed


# --- through the jobs ---------------------------------------------------------------------------------

SPARK = ["--master", "local[1]", "--quiet"]
OPS = ["downsample:2"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.mark.spark
@pytest.mark.seconds(20)
def test_a_declared_downsample_is_bound_decrypts_exactly_and_a_swap_is_rejected(tmp_path, capsys):
    from hostile import swap_flat_tiles

    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((16, 16, 3), 200, np.uint8)).save(images / "flat.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (16, 24), dtype=np.uint8)).save(images / "grey.png")
    keys, pub = tmp_path / "keys", tmp_path / "pub"
    declared = [a for op in OPS for a in ("--for-op", op)]
    assert hepix("keygen", "--out", keys, "--preset", "paper-4096") == 0
    assert hepix("export-public", "--keys", keys, "--out", pub, "--tile", "8x8", *declared) == 0
    assert hepix("encrypt", "--keys", pub, "--input", images, "--out", tmp_path / "enc", "--tile", "8x8",
                 *declared, *SPARK) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hepix encrypt")][0]
    assert first.endswith("bound by keyed offsets (a ciphertext of another place passes with probability 2^-16.0)")
    manifest = json.loads((tmp_path / "enc" / "_manifest.json").read_text())
    assert manifest["layout"] == "packed" and manifest["options"]["bound_offsets"] is True
    assert json.loads((tmp_path / "enc.owner" / "owner.json").read_text())["settings"]["bind_unit"] == 0.25
    assert hepix("process", "--keys", pub, "--input", tmp_path / "enc", "--out", tmp_path / "proc",
                 *[a for op in OPS for a in ("--op", op)], *SPARK) == 0
    assert hepix("decrypt", "--keys", keys, "--input", tmp_path / "proc", "--out", tmp_path / "d",
                 "--owner", tmp_path / "enc.owner", "--images", images, *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["exact_fraction"] == 1.0 and r["mse"] == 0 for r in rows)
    assert ds.dataset(tmp_path / "d" / "rejects").to_table().num_rows == 0

    run = tmp_path / "forged"
    flat = swap_flat_tiles(tmp_path / "proc", run)             # two tiles of the flat image: the same values
    assert hepix("decrypt", "--keys", keys, "--input", run, "--out", tmp_path / "e", "--owner",
                 tmp_path / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "e" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    assert "off the chain's grid once its place's keyed offsets are removed" in rejects[0]["detail"]
