"""``downsample:F``: its parser and reference (against an explicit block mean with the edge replicated), the
pixel layout's strided window sums, the packed layout's in-place block sums read back with a stride, and the
refusals (tiles that are no multiple of F, complex packing, a neighbour-reading op after it in packed)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import real_dataset_present, shared_dataset
from he_pipeline import COLOUR, GREY, generate, usc_crop
from PIL import Image

from hecore.encrypt.strategies import make_strategy
from hecore.errors import InvalidParameters
from hecore.layouts.packed import decrypt_block, encrypt_tiles
from hecore.ops.downsample import Downsample
from hecore.ops.packed import PackedGeometry, apply_ops, check_packed_chain
from hecore.ops.pixel import window_tile
from hecore.ops.spec import finish_for, parse_chain, parse_op, parse_ops, recorded_shape, recorded_stride, reference
from hecore.planner import plan, requirements
from hecore.quality import round_to_uint8
from hecore.seal.evaluator import Evaluator


def _naive(img: np.ndarray, f: int) -> np.ndarray:
    h, w = img.shape[:2]
    out = np.zeros((-(-h // f), -(-w // f)) + img.shape[2:])
    for y in range(out.shape[0]):
        for x in range(out.shape[1]):
            acc = 0.0
            for i in range(f):
                for j in range(f):
                    acc = acc + img[min(f * y + i, h - 1), min(f * x + j, w - 1)].astype(np.float64)
            out[y, x] = acc / (f * f)
    return out


def _div2k_crop(size: int) -> np.ndarray:
    if not real_dataset_present("div2k"):
        pytest.skip("the DIV2K data set is not there to read")
    img = np.asarray(Image.open(shared_dataset("div2k/0004.png")).convert("RGB"))
    return np.ascontiguousarray(img[500:500 + size, 900:900 + size])


@pytest.mark.parametrize("spec, bad", [("downsample:3", "one of 2, 4, 8"), ("downsample", "'downsample:F'"),
                                       ("downsample:x", "'downsample:F'"), ("downsample:16", "one of 2, 4, 8")])
def test_bad_factors_are_refused(spec, bad):
    with pytest.raises(ValueError, match=bad):
        parse_op(spec)


def test_tfhe_keys_refuse_a_downsample_saying_why():
    with pytest.raises(ValueError, match="downsample:2 cannot run on TFHE keys"):
        parse_chain(["downsample:2"], scheme="tfhe")


@pytest.mark.parametrize("f, shape", [(2, (9, 7)), (4, (9, 7, 3)), (8, (17, 8))])
def test_the_reference_is_the_block_mean_with_the_edge_replicated(f, shape):
    img = np.random.default_rng(f).integers(0, 256, size=shape, dtype=np.uint8)
    np.testing.assert_allclose(reference(img, [Downsample(f)]), _naive(img, f), atol=1e-9)
    assert recorded_shape([f"downsample:{f}"], "paper-4096", *shape[:2], 1) == (-(-shape[0] // f), -(-shape[1] // f), 1)


def test_finish_planner_and_stride():
    assert finish_for([Downsample(4)]).post_scale == 1 / 16
    assert recorded_stride(["brightness:1", "downsample:2", "downsample:4"], "paper-4096") == 8
    assert requirements([Downsample(2)], "packed").rotations
    assert not requirements([Downsample(2)], "pixel").rotations
    assert "one pixel per slot" in requirements([Downsample(2)], "packed-complex").wrong_layout
    assert plan([Downsample(2)], "packed", scheme="bfv")


# --- pixel layout --------------------------------------------------------------------------------

@pytest.mark.parametrize("f", [2, 4])
def test_pixel_layout_downsample_is_exact(he_addonly2048, f):
    ctx = he_addonly2048[0]
    img = usc_crop(GREY, size=11)
    op = Downsample(f)
    batch = make_strategy("fresh", ctx).encrypt(img)
    cts = {(i // 11, i % 11): batch[i] for i in range(121)}
    oh, ow, _ = op.out_shape(11, 11, 1)
    raw = ctx.decrypt_pixels(window_tile(ctx.ct_format, cts, 11, 11, op, 0, 0, oh, ow)).reshape(oh, ow)
    got = round_to_uint8(finish_for([op]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(reference(img, [op])))


# --- packed layouts ------------------------------------------------------------------------------

def _packed(ctx, img, specs, tile=(16, 32), halo=1) -> np.ndarray:
    """decrypt(ops(encrypt(img))) in the packed layout, the output read back tile by tile with the stride."""
    ops = parse_ops(specs)
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, ctx, *tile, halo)
    shape = recorded_shape(specs, ctx.params.name, grid.height, grid.width, grid.channels)
    stride = recorded_stride(specs, ctx.params.name)
    out = np.full(shape, np.nan)
    ps = None
    for t in tiles:
        geom = PackedGeometry(*tile, halo, t.y, t.x, grid.height, grid.width)
        c, ps = apply_ops(ev, ev.load(t.ct), ops, geom)
        th, tw = tile[0] // stride, tile[1] // stride
        y, x = t.ty * th, t.tx * tw
        h, w = min(th, shape[0] - y), min(tw, shape[1] - x)
        block = decrypt_block(ctx, ev.dump(c), th, tw, halo, stride=stride)[:h, :w]
        out[y:y + h, x:x + w, t.channel] = block
    assert not np.isnan(out).any()
    assert ps == float(finish_for(ops).post_scale)
    return round_to_uint8(finish_for(ops).apply(out if img.ndim == 3 else out[:, :, 0]))


@pytest.mark.parametrize("specs", [["downsample:2"], ["brightness:9", "downsample:4", "contrast:0.5"],
                                   ["contrast:1.5", "downsample:8", "brightness:-20"]], ids="|".join)
def test_packed_ckks_downsample_is_exact(he_paper4096, specs):
    ctx, _ = he_paper4096
    for img in (usc_crop(COLOUR, size=40), usc_crop(GREY, size=37)):
        want = round_to_uint8(reference(img, parse_ops(specs)))
        np.testing.assert_array_equal(_packed(ctx, img, specs), want)


@pytest.mark.parametrize("name", ["bfv-4096", "bgv-4096"])
def test_packed_integer_downsample_is_exact(name):
    ctx, _ = generate(name)
    for img in (usc_crop(COLOUR, size=36), _div2k_crop(36)):
        specs = ["downsample:2", "brightness:-5"]
        np.testing.assert_array_equal(_packed(ctx, img, specs), round_to_uint8(reference(img, parse_ops(specs))))


def test_packed_downsample_refuses_tiles_that_are_no_multiple(he_paper4096):
    with pytest.raises(ValueError, match="multiples of 4.*--tile 28x60"):
        Downsample(4).for_tiles("packed", (30, 62), 1, 2048)
    with pytest.raises(ValueError, match="--layout packed"):
        Downsample(2).for_tiles("packed-complex", (16, 32), 0, 2048)
    Downsample(4).for_tiles("pixel", (5, 7), 0, 2048)               # the pixel layout re-tiles: any tile


def test_a_packed_op_that_reads_neighbours_cannot_follow_a_downsample():
    with pytest.raises(InvalidParameters, match="meanfilter:3 after downsample:2.*--layout pixel"):
        check_packed_chain([], parse_ops(["downsample:2", "meanfilter:3"]), 1)
    with pytest.raises(InvalidParameters, match="watermark:1,1,5 after downsample:2"):
        check_packed_chain(parse_ops(["downsample:2"]), parse_ops(["watermark:1,1,5"]), 1)
    with pytest.raises(InvalidParameters, match="conv:gauss3 before downsample:2.*--layout pixel"):
        check_packed_chain([], parse_ops(["conv:gauss3", "downsample:2"]), 1)
    check_packed_chain([], parse_ops(["brightness:3", "downsample:2", "contrast:2", "grey"]), 1)


def test_a_stride_the_slots_cannot_hold_is_refused_before_any_decryption(he_paper4096):
    ctx, _ = he_paper4096
    ct = ctx.encrypt_vector(np.zeros(16))
    with pytest.raises(ValueError, match="needs .* slots; a ciphertext of paper-4096 has 2048"):
        decrypt_block(ctx, ct, 15, 31, 1, stride=8 ** 20)
