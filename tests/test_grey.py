"""``grey``: its parser and reference (against BT.601's integer weights written out), the byte-level weighted
sum of the pixel layout, and decrypt(op(encrypt(img))) equal to the reference in the packed layouts (CKKS,
complex packing, BFV, BGV) and the pixel layout, on USC-SIPI and DIV2K crops; a grey image passes unchanged."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import real_dataset_present, shared_dataset
from he_pipeline import COLOUR, GREY, generate, usc_crop
from PIL import Image

from hecore.encrypt.strategies import make_strategy
from hecore.layouts.packed import encrypt_tiles
from hecore.ops.channels import Grey
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_chain, parse_op, raw_range, recorded_shape, reference
from hecore.planner import requirements
from hecore.quality import round_to_uint8
from hecore.seal.evaluator import Evaluator


def _div2k_crop(size: int) -> np.ndarray:
    if not real_dataset_present("div2k"):
        pytest.skip("the DIV2K data set is not there to read")
    img = np.asarray(Image.open(shared_dataset("div2k/0004.png")).convert("RGB"))
    return np.ascontiguousarray(img[400:400 + size, 600:600 + size])


def _luma(img: np.ndarray) -> np.ndarray:
    r, g, b = (img[:, :, c].astype(np.float64) for c in range(3))
    return (77 * r + 150 * g + 29 * b) / 256


def test_grey_parses_bare_and_refuses_arguments():
    assert parse_op("grey") == Grey() == parse_op(" GREY ")
    assert parse_op("grey").spec == "grey"
    with pytest.raises(ValueError, match="'grey' \\(no argument\\)"):
        parse_op("grey:3")


def test_tfhe_keys_refuse_grey_saying_why():
    with pytest.raises(ValueError, match="grey cannot run on TFHE keys.*channels"):
        parse_chain(["grey"], scheme="tfhe")


def test_the_reference_is_bt601_in_integers_and_a_grey_image_is_unchanged():
    rng = np.random.default_rng(11)
    rgb = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    np.testing.assert_array_equal(reference(rgb, [Grey()]), np.round(_luma(rgb), 9))
    grey = rng.integers(0, 256, size=(6, 5), dtype=np.uint8)
    np.testing.assert_array_equal(round_to_uint8(reference(grey, [Grey()])), grey)


def test_shape_range_finish_and_planner():
    assert recorded_shape(["brightness:5", "grey"], "paper-4096", 30, 40, 3) == (30, 40, 1)
    assert recorded_shape(["grey"], "paper-4096", 30, 40, 1) == (30, 40, 1)
    assert raw_range([Grey()]) == (0.0, 255.0 * 256)
    f = finish_for([Grey(), parse_op("brightness:1")])
    assert f.post_scale == 1 / 256 and f.step == 1
    for layout in ("packed", "pixel"):
        req = requirements([Grey()], layout)
        assert not req.rotations and req.depth == 0 and not req.multiplies


# --- encrypted, packed ---------------------------------------------------------------------------

def _packed_grey(ctx, img: np.ndarray, before: list[str], after: list[str], tile=(16, 30), halo=0,
                 complex_packing=False) -> np.ndarray:
    """The packed pipeline as process runs it: ``before`` per ciphertext, grey over each tile's channels,
    ``after`` per ciphertext; the finished (rounded) result."""
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, ctx, *tile, halo, complex_packing)
    tiles = list(tiles)
    by_tile: dict = {}
    for t in tiles:
        geom = PackedGeometry(*tile, halo, t.y, t.x, grid.height, grid.width, complex_packing)
        c, ps = apply_ops(ev, ev.load(t.ct), [parse_op(s) for s in before], geom)
        by_tile.setdefault((t.ty, t.tx), []).append((t.channel, c, ps, t, geom))
    h, w = img.shape[:2]
    raw = np.full((h, w), np.nan)
    from hecore.layouts.packed import decrypt_block

    for parts in by_tile.values():
        parts.sort(key=lambda p: p[0])
        c, ps = Grey().packed_channels(ev, [p[1] for p in parts], parts[0][2])
        t, geom = parts[0][3], parts[0][4]
        c, ps = apply_ops(ev, c, [parse_op(s) for s in after], geom, ps)
        block = decrypt_block(ctx, ev.dump(c), *tile, halo, complex_packing)
        raw[t.y:t.y + t.h, t.x:t.x + t.w] = block[:t.h, :t.w]
    ops = [parse_op(s) for s in before + ["grey"] + after]
    assert ps == float(finish_for(ops).post_scale)
    return round_to_uint8(finish_for(ops).apply(raw))


@pytest.mark.parametrize("before, after", [([], []), (["brightness:20"], ["contrast:1.5"]),
                                           ([], ["conv:sharpen"]), (["conv:gauss3"], [])])
def test_packed_ckks_grey_is_exact(he_paper4096, before, after):
    ctx, _ = he_paper4096
    halo = max([parse_op(s).halo for s in before + after] + [0])
    img = usc_crop(COLOUR, size=40)
    want = round_to_uint8(reference(img, [parse_op(s) for s in before + ["grey"] + after]))
    np.testing.assert_array_equal(_packed_grey(ctx, img, before, after, halo=halo), want)


def test_packed_grey_passes_a_grey_image_unchanged(he_paper4096):
    ctx, _ = he_paper4096
    img = usc_crop(GREY, size=40)
    np.testing.assert_array_equal(_packed_grey(ctx, img, [], []), img)


def test_complex_packed_grey_is_exact(he_paper4096):
    ctx, _ = he_paper4096
    img = usc_crop(COLOUR, size=40)
    np.testing.assert_array_equal(_packed_grey(ctx, img, [], [], complex_packing=True),
                                  round_to_uint8(reference(img, [Grey()])))


@pytest.mark.parametrize("name", ["bfv-4096", "bgv-4096"])
def test_packed_integer_grey_is_exact(name):
    ctx, _ = generate(name)
    for img in (usc_crop(COLOUR, size=32), _div2k_crop(32)):
        np.testing.assert_array_equal(_packed_grey(ctx, img, [], ["brightness:-10"]),
                                      round_to_uint8(reference(img, [Grey(), parse_op("brightness:-10")])))


# --- encrypted, pixel layout ---------------------------------------------------------------------

@pytest.mark.parametrize("source", ["usc", "div2k"])
def test_pixel_layout_grey_is_exact(he_addonly2048, source):
    ctx = he_addonly2048[0]
    img = usc_crop(COLOUR, size=10) if source == "usc" else _div2k_crop(10)
    enc = make_strategy("fresh", ctx)
    batches = [enc.encrypt(np.ascontiguousarray(img[:, :, c])) for c in range(3)]
    out = Grey().pixel_channels(ctx.ct_format, batches, strategy="fresh", security="ind-cpa")
    raw = ctx.decrypt_pixels(out).reshape(img.shape[:2])
    got = round_to_uint8(finish_for([Grey()]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(reference(img, [Grey()])))


def test_the_weighted_sum_refuses_batches_of_different_counts(he_addonly2048):
    ctx = he_addonly2048[0]
    enc = make_strategy("fresh", ctx)
    a, b = enc.encrypt(np.zeros((2, 2), np.uint8)), enc.encrypt(np.zeros((1, 2), np.uint8))
    with pytest.raises(ValueError, match="must agree"):
        Grey().pixel_channels(ctx.ct_format, [a, b, a], strategy="fresh", security="ind-cpa")


@pytest.mark.parametrize("bits, n", [(54, 256), (60, 256), (60, 29), (62, 150)])
def test_word_products_are_exact_mod_q_on_both_paths(bits, n):
    from hecore.ops.pixel import _times_words

    rng = np.random.default_rng(bits + n)
    q = np.array([(1 << bits) - 93, (1 << (bits - 1)) - 1], dtype=np.uint64).repeat(8)
    x = (rng.integers(0, 1 << 62, size=(5, 16), dtype=np.uint64) % q).astype(np.uint64)
    got = _times_words(x, n, q, bits)
    want = np.array([[int(v) * n % int(m) for v, m in zip(row, q)] for row in x], dtype=np.uint64)
    np.testing.assert_array_equal(got, want)
