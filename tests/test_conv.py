"""``conv:``, the integer convolution: its parser, its plaintext reference (against an independent loop and
OpenCV's convention), and decrypt(op(encrypt(img))) equal to the reference in the pixel layout (CKKS, byte
level after the shuffle's halo) and the packed layouts (CKKS, complex packing, BFV, BGV) on USC-SIPI and
DIV2K crops."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import real_dataset_present, shared_dataset
from he_pipeline import COLOUR, GREY, assert_exact, generate, run_packed, usc_crop
from PIL import Image

from hecore.encrypt.strategies import make_strategy
from hecore.errors import InvalidParameters
from hecore.ops.pixel import halo_tiles, window_tile
from hecore.ops.spec import KERNELS, Convolution, MeanFilter, finish_for, parse_chain, parse_op, raw_range, reference
from hecore.planner import plan, requirements
from hecore.quality import round_to_uint8

DIV2K = "div2k/0004.png"


def _naive(img: np.ndarray, weights: np.ndarray, divisor: int) -> np.ndarray:
    """out(y, x) = sum_ij w[i, j] in(clamp(y + i - r), clamp(x + j - r)) / D, by explicit loops."""
    k = weights.shape[0]
    r = k // 2
    h, w = img.shape[:2]
    out = np.zeros(img.shape, dtype=np.float64)
    for y in range(h):
        for x in range(w):
            acc = 0.0
            for i in range(k):
                for j in range(k):
                    acc = acc + weights[i, j] * img[min(max(y + i - r, 0), h - 1), min(max(x + j - r, 0), w - 1)]
            out[y, x] = acc / divisor
    return out


def _div2k_crop(size: int) -> np.ndarray:
    if not real_dataset_present("div2k"):
        pytest.skip("the DIV2K data set is not there to read")
    img = np.asarray(Image.open(shared_dataset(DIV2K)).convert("RGB"))
    return np.ascontiguousarray(img[200:200 + size, 300:300 + size])


# --- the spec ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(KERNELS))
def test_named_kernels_parse_and_round_trip(name):
    op = parse_op(f"conv:{name}")
    assert isinstance(op, Convolution) and op.spec == f"conv:{name}"
    assert parse_op(op.spec) == op
    values, div = KERNELS[name]
    assert op.weights.ravel().tolist() == list(values) and op.divisor == div


@pytest.mark.parametrize("spec, k, div", [
    ("conv:1,2,1,2,4,2,1,2,1/16", 3, 16),
    ("conv: 0,-1,0,-1,5,-1,0,-1,0", 3, 1),
    ("conv:" + ",".join(["1"] * 25) + "/25", 5, 25),
])
def test_weight_lists_parse(spec, k, div):
    op = parse_op(spec)
    assert (op.k, op.divisor) == (k, div)
    assert parse_op(op.spec) == op


def test_a_weight_list_equal_to_a_named_kernel_is_the_same_op():
    assert parse_op("conv:1,2,1,2,4,2,1,2,1/16") == parse_op("conv:gauss3")


@pytest.mark.parametrize("spec, pattern", [
    ("conv", "expected 'conv:NAME'"),
    ("conv:blur", "expected 'conv:NAME'"),
    ("conv:1,2,3", "9 \\(3x3\\) or 25"),
    ("conv:" + ",".join(["1"] * 16), "9 \\(3x3\\) or 25"),
    ("conv:0,0,0,0,0,0,0,0,0", "keeps nothing"),
    ("conv:1,1,1,1,300,1,1,1,1", "-255..255"),
    ("conv:1,1,1,1,1,1,1,1,1/0", "divisor D must be an integer >= 1"),
    ("conv:1,1,1,1,1,1,1,1,1/70000", "larger than the supported 65536"),
    ("conv:1.5,1,1,1,1,1,1,1,1", "expected 'conv:NAME'"),
])
def test_bad_conv_specs_are_refused_naming_the_problem(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_op(spec)


def test_tfhe_keys_refuse_a_convolution_saying_why():
    with pytest.raises(ValueError, match="conv:sharpen cannot run on TFHE keys.*sums neighbours"):
        parse_chain(["conv:sharpen"], scheme="tfhe")


# --- the plaintext reference ---------------------------------------------------------------------

@pytest.mark.parametrize("spec", [f"conv:{n}" for n in KERNELS] + ["conv:3,-7,0,1,2,9,-4,5,1/7"])
def test_the_reference_is_the_clamped_correlation(spec):
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, size=(9, 11), dtype=np.uint8)
    op = parse_op(spec)
    np.testing.assert_allclose(reference(img, [op]), _naive(img.astype(np.float64), op.weights, op.divisor),
                               atol=1e-9)


def test_the_first_weight_multiplies_the_pixel_above_and_to_the_left():
    img = np.zeros((5, 5), dtype=np.uint8)
    img[1, 1] = 10                                     # above and left of the centre (2, 2)
    op = parse_op("conv:1,0,0,0,0,0,0,0,0")
    assert reference(img, [op])[2, 2] == 10


def test_the_mean_filter_is_the_all_ones_kernel_over_k_squared():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    np.testing.assert_allclose(reference(img, [MeanFilter(3)]), reference(img, [parse_op("conv:1,1,1,1,1,1,1,1,1/9")]))


def test_raw_range_and_finish_follow_the_weights():
    sobel = parse_op("conv:sobel-x")
    assert raw_range([sobel]) == (-4 * 255.0, 4 * 255.0)
    f = finish_for([parse_op("conv:gauss3"), parse_op("brightness:10")])
    assert f.post_scale == 1 / 16 and f.step == 1 and f.offset == 0


# --- the planner -------------------------------------------------------------------------------

def test_a_packed_convolution_needs_rotations_and_no_level():
    req = requirements([parse_op("conv:sharpen")], "packed")
    assert req.rotations and req.depth == 0 and not req.multiplies and req.integer_ok
    assert plan([parse_op("conv:sharpen")], "packed", scheme="bfv")


def test_a_convolution_in_the_pixel_layout_needs_no_rotation():
    assert not requirements([parse_op("conv:gauss5")], "pixel").rotations


# --- encrypted, pixel layout (byte level, halo tiles as after the shuffle) -------------------------

def _pixel_conv(ctx, img: np.ndarray, op, tile: int = 4) -> np.ndarray:
    """The pixel layout's window sums, tile by tile from each tile's own ciphertexts and its halo."""
    h, w = img.shape
    batch = make_strategy("fresh", ctx).encrypt(img)
    pos = np.stack([np.arange(h * w) // w, np.arange(h * w) % w], axis=1)
    rows, cols = -(-h // tile), -(-w // tile)
    inbox: dict = {}
    for i, (py, px) in enumerate(pos):
        for t in halo_tiles(int(py), int(px), tile, tile, rows, cols, op.halo):
            inbox.setdefault(t, {})[(int(py), int(px))] = batch[i]
    raw = np.full((h, w), np.nan)
    for (ty, tx), cts in inbox.items():
        oy, ox = ty * tile, tx * tile
        oh, ow = min(tile, h - oy), min(tile, w - ox)
        out = window_tile(ctx.ct_format, cts, h, w, op, oy, ox, oh, ow)
        raw[oy:oy + oh, ox:ox + ow] = ctx.decrypt_pixels(out).reshape(oh, ow)
    return raw


@pytest.mark.parametrize("spec", ["conv:sharpen", "conv:sobel-y", "conv:gauss5", "conv:3,-7,0,1,2,9,-4,5,1/7"])
def test_pixel_layout_convolution_is_exact(he_addonly2048, spec):
    ctx = he_addonly2048[0]
    img = usc_crop(GREY, size=12)
    op = parse_op(spec)
    raw = _pixel_conv(ctx, img, op)
    got = round_to_uint8(finish_for([op]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(reference(img, [op])))


# --- encrypted, packed layouts -------------------------------------------------------------------

CHAINS = [["conv:sharpen"], ["conv:gauss3", "brightness:20"], ["contrast:1.5", "conv:sobel-x"],
          ["watermark:9,9,40", "conv:laplace"], ["conv:gauss5"], ["conv:3,-7,0,1,2,9,-4,5,1/7", "contrast:0.5"]]


@pytest.mark.parametrize("specs", CHAINS, ids="|".join)
def test_packed_ckks_convolution_is_exact(he_paper4096, specs):
    ctx, _ = he_paper4096
    halo = max(parse_op(s).halo for s in specs)
    for img in (usc_crop(GREY, size=40), usc_crop(COLOUR, size=40)):
        run = run_packed(ctx, img, specs, 16, 30, halo)
        assert_exact(run, integer=False)
        assert run.exact_fraction == 1.0, run.report()


def test_complex_packed_convolution_is_exact(he_paper4096):
    ctx, _ = he_paper4096
    run = run_packed(ctx, usc_crop(GREY, size=40), ["conv:sharpen"], 16, 30, 1, complex_packing=True)
    assert run.exact_fraction == 1.0, run.report()


@pytest.mark.parametrize("name", ["bfv-4096", "bgv-4096"])
def test_packed_integer_convolution_is_exact(name):
    ctx, _ = generate(name)
    for specs in (["conv:gauss3", "brightness:20"], ["conv:sobel-y"], ["conv:gauss5"]):
        halo = max(parse_op(s).halo for s in specs)
        for img in (usc_crop(COLOUR, size=32), _div2k_crop(32)):
            run = run_packed(ctx, img, specs, 16, 30, halo)
            assert_exact(run, integer=True)
            assert run.exact_fraction == 1.0, run.report()


def test_a_packed_convolution_needs_the_halo(he_paper4096):
    ctx, _ = he_paper4096
    with pytest.raises(InvalidParameters, match="conv:gauss5 reaches 2 pixel.*--halo 2"):
        run_packed(ctx, usc_crop(GREY, size=32), ["conv:gauss5"], 16, 30, 1)


def test_a_packed_chain_takes_one_filter(he_paper4096):
    ctx, _ = he_paper4096
    with pytest.raises(InvalidParameters, match="at most one mean filter or convolution.*--layout pixel"):
        run_packed(ctx, usc_crop(GREY, size=32), ["conv:sharpen", "meanfilter:3"], 16, 30, 1)
