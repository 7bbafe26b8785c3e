"""Tests of hecore.ops.spec: op specs, the plaintext references, and the encrypted pixel-layout ops.

Encrypted tests use the cheap ``addonly-2048`` preset (one test runs on
``paper-4096``, which has two data primes) and images of a few dozen pixels.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from hecore.ciphertexts import SECURITY_IND_CPA, CiphertextBatch
from hecore.encrypt.strategies import make_strategy
from hecore.ops.pixel import (
    MissingNeighbour,
    add_constant,
    apply_pointwise,
    constant_word,
    halo_tiles,
    mean_filter_tile,
    window_multiplicities,
)
from hecore.ops.spec import Brightness, MeanFilter, Watermark, finish_for, parse_op, parse_ops, reference
from hecore.quality import round_to_uint8
from hecore.seal.kernels import add_constant_c0

RNG_SEED = 20240601


# --- helpers -------------------------------------------------------------------------------

def _naive_mean(img: np.ndarray, k: int) -> np.ndarray:
    """The k x k mean with clamped coordinates, by explicit loops (offsets -(k//2) .. -(k//2)+k-1)."""
    h, w = img.shape[:2]
    out = np.zeros(img.shape, dtype=np.float64)
    lo = -(k // 2)
    for y in range(h):
        for x in range(w):
            acc = np.zeros(img.shape[2:], dtype=np.float64)
            for dy in range(lo, lo + k):
                for dx in range(lo, lo + k):
                    acc = acc + img[min(max(y + dy, 0), h - 1), min(max(x + dx, 0), w - 1)]
            out[y, x] = acc / (k * k)
    return out


def _image(h: int, w: int, seed: int = RNG_SEED) -> np.ndarray:
    """A uint8 test image holding 0 and 255 and random values in between."""
    img = np.random.default_rng(seed).integers(0, 256, size=(h, w), dtype=np.uint8)
    img[0, 0] = 0
    img[-1, -1] = 255
    return img


def _positions(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([yy.ravel(), xx.ravel()], axis=1)


def _encrypt(ctx, img: np.ndarray) -> CiphertextBatch:
    return make_strategy("fresh", ctx).encrypt(img)


def _whole_image_mean(ctx, batch: CiphertextBatch, h: int, w: int, k: int) -> CiphertextBatch:
    cts = {(int(py), int(px)): batch[i] for i, (py, px) in enumerate(_positions(h, w))}
    return mean_filter_tile(ctx.ct_format, cts, h, w, k, 0, 0, h, w)


# --- specs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, op", [
    ("brightness:50", Brightness(50)),
    ("brightness:-30", Brightness(-30)),
    ("brightness:0.5", Brightness(0.5)),
    ("brightness:+1e1", Brightness(10)),
    ("watermark:10,20,5", Watermark(10, 20, 5)),
    ("watermark: 0, 3, -2.5", Watermark(0, 3, -2.5)),
    ("meanfilter:3", MeanFilter(3)),
    ("MeanFilter:2", MeanFilter(2)),
])
def test_parse_op_good_specs(spec, op):
    assert parse_op(spec) == op


@pytest.mark.parametrize("op", [Brightness(60), Brightness(-0.25), Watermark(3, 4, 5.5), MeanFilter(4)])
def test_spec_round_trips_through_parse_op(op):
    assert parse_op(op.spec) == op


@pytest.mark.parametrize("spec, expected", [
    ("brightness", "brightness:B"),
    ("brightness:", "brightness:B"),
    ("brightness:abc", "brightness:B"),
    ("brightness:inf", "brightness:B"),
    ("watermark:1,2", "watermark:X,Y,V"),
    ("watermark:-1,2,5", "watermark:X,Y,V"),
    ("watermark:1.5,2,5", "watermark:X,Y,V"),
    ("meanfilter:0", "meanfilter:K"),
    ("meanfilter:3.0", "meanfilter:K"),
    ("meanfilter:999", "meanfilter:K"),
    ("blur:3", "meanfilter:K"),
    ("", "brightness:B"),
])
def test_parse_op_bad_specs_name_spec_and_form(spec, expected):
    with pytest.raises(ValueError) as info:
        parse_op(spec)
    assert repr(spec) in str(info.value)
    assert expected in str(info.value)


def test_parse_ops_keeps_order():
    assert parse_ops(["meanfilter:3", "brightness:1"]) == [MeanFilter(3), Brightness(1)]


def test_parse_ops_rejects_a_bare_string():
    with pytest.raises(ValueError, match="list"):
        parse_ops("brightness:1")


def test_op_attributes():
    for op in (Brightness(1), Watermark(0, 0, 1), MeanFilter(3)):
        assert op.depth == 0 and op.needs_rotation is False
    assert Brightness(1).post_scale_factor == 1.0
    assert Watermark(0, 0, 1).post_scale_factor == 1.0
    assert MeanFilter(3).post_scale_factor == pytest.approx(1 / 9)
    assert MeanFilter(4).halo == 2 and MeanFilter(3).halo == 1 and MeanFilter(1).halo == 0


# --- plaintext references ----------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7])
def test_meanfilter_plain_matches_naive_gray(k):
    img = _image(6, 5).astype(np.float64)
    np.testing.assert_allclose(MeanFilter(k).apply_plain(img), _naive_mean(img, k), rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_meanfilter_plain_matches_naive_rgb(k):
    img = np.random.default_rng(1).integers(0, 256, size=(4, 7, 3)).astype(np.float64)
    np.testing.assert_allclose(MeanFilter(k).apply_plain(img), _naive_mean(img, k), rtol=0, atol=1e-12)


def test_meanfilter_even_window_reaches_up_and_left():
    img = np.zeros((5, 5))
    img[2, 2] = 1.0
    out = MeanFilter(2).apply_plain(img)
    expected = np.zeros((5, 5))
    expected[2:4, 2:4] = 0.25          # outputs whose window (y-1..y, x-1..x) holds (2, 2)
    np.testing.assert_array_equal(out, expected)


def test_meanfilter_corner_replicates_edge():
    img = np.arange(12, dtype=np.float64).reshape(3, 4)
    out = MeanFilter(3).apply_plain(img)
    a, b, c, d = img[0, 0], img[0, 1], img[1, 0], img[1, 1]
    assert out[0, 0] == pytest.approx((4 * a + 2 * b + 2 * c + d) / 9)


def test_brightness_plain_adds_everywhere():
    img = _image(3, 4)
    np.testing.assert_array_equal(Brightness(-30).apply_plain(img), img.astype(np.float64) - 30)


def test_watermark_plain_changes_one_pixel_in_all_channels():
    img = np.zeros((4, 5, 3))
    out = Watermark(x=3, y=1, v=5).apply_plain(img)
    assert out[1, 3].tolist() == [5.0, 5.0, 5.0]
    out[1, 3] = 0
    assert not out.any()


def test_watermark_plain_outside_image_is_an_error():
    with pytest.raises(ValueError, match="outside"):
        Watermark(x=5, y=0, v=1).apply_plain(np.zeros((4, 5)))


def test_reference_does_not_clip_between_ops():
    img = _image(4, 4)
    out = reference(img, [Brightness(250), Brightness(-250)])
    np.testing.assert_array_equal(out, img.astype(np.float64))


def test_reference_keeps_values_above_255_until_the_caller_clips():
    img = np.full((2, 2), 250, dtype=np.uint8)
    out = reference(img, [Brightness(50)])
    assert out.max() == 300.0
    assert round_to_uint8(out).max() == 255


def test_window_multiplicities_clamp_at_borders():
    coords, counts = window_multiplicities(3, 5, 0)
    assert coords.tolist() == [0, 1] and counts.tolist() == [2, 1]
    coords, counts = window_multiplicities(2, 5, 4)
    assert coords.tolist() == [3, 4] and counts.tolist() == [1, 1]
    coords, counts = window_multiplicities(5, 2, 1)
    assert coords.tolist() == [0, 1] and counts.tolist() == [2, 3]


def test_finish_snaps_half_integer_grid():
    fin = finish_for([Brightness(0.5), MeanFilter(3)])
    assert fin.post_scale == Fraction(1, 9) and fin.offset == Fraction(1, 2) and fin.snaps
    # raw 31.5 (+ CKKS error) is exactly 3.5 after the division, a tie rint sends to 4
    assert fin.apply(np.array([31.5 + 3e-6, 31.5 - 3e-6])).tolist() == [3.5, 3.5]


# --- halo tiles ----------------------------------------------------------------------------------

def test_halo_tiles_interior_pixel_only_own_tile():
    assert halo_tiles(5, 5, 4, 4, 3, 3, 1) == [(1, 1)]


def test_halo_tiles_edge_pixel_two_tiles():
    assert halo_tiles(4, 5, 4, 4, 3, 3, 1) == [(0, 1), (1, 1)]
    assert halo_tiles(5, 7, 4, 4, 3, 3, 1) == [(1, 1), (1, 2)]


def test_halo_tiles_corner_pixel_four_tiles():
    assert halo_tiles(4, 4, 4, 4, 3, 3, 1) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert halo_tiles(3, 7, 4, 4, 3, 3, 1) == [(0, 1), (0, 2), (1, 1), (1, 2)]


def test_halo_tiles_image_border_adds_no_tile():
    assert halo_tiles(0, 0, 4, 4, 3, 3, 1) == [(0, 0)]


def test_halo_tiles_route_exactly_each_tiles_extended_region():
    h, w, th, tw, r = 10, 7, 4, 3, 2
    rows, cols = -(-h // th), -(-w // tw)
    got: dict = {}
    for py in range(h):
        for px in range(w):
            for t in halo_tiles(py, px, th, tw, rows, cols, r):
                got.setdefault(t, set()).add((py, px))
    for ty in range(rows):
        for tx in range(cols):
            want = {(py, px) for py in range(max(0, ty * th - r), min(h, (ty + 1) * th + r))
                    for px in range(max(0, tx * tw - r), min(w, (tx + 1) * tw + r))}
            assert got[(ty, tx)] == want


# --- constants and the kernel -----------------------------------------------------------------------

def test_constant_word_reduces_negatives_mod_each_prime(he_paper4096):
    layout = he_paper4096[0].ct_format
    words = constant_word(layout, -3.0, 1.0, 30)
    # the 30-bit prime is below 3 * 2^30: the residue is q - (3 * 2^30 mod q), not q - 3 * 2^30
    assert words.tolist() == [q - (3 * 2**30) % q for q in layout.primes]


def test_constant_word_divides_by_post_scale(he_addonly2048):
    layout = he_addonly2048[0].ct_format
    assert constant_word(layout, 50.0, 1 / 9, 30).tolist() == [450 * 2**30]


def test_constant_word_rejects_huge_constants(he_addonly2048):
    with pytest.raises(ValueError, match="2\\^62"):
        constant_word(he_addonly2048[0].ct_format, 2.0**40, 1.0, 30)


def test_add_constant_kernel_matches_numpy():
    rng = np.random.default_rng(7)
    primes = np.array([(1 << 40) - 87, (1 << 30) - 35], dtype=np.uint64)
    n, count, hdr = 8, 3, 13
    words = 2 * len(primes) * n
    coeffs = np.stack([rng.integers(0, primes[i % 2], size=(count, n), dtype=np.uint64)
                       for i in range(2 * len(primes))], axis=1).reshape(count, words)
    header = np.arange(hdr, dtype=np.uint8)
    data = np.concatenate([np.concatenate([header, c.view(np.uint8)]) for c in coeffs])
    consts = np.array([primes[0] - 1, 5], dtype=np.uint64)
    mask = np.array([1, 0, 1], dtype=np.uint8)
    out = np.empty_like(data)
    add_constant_c0(out, data, count, header, consts, n, primes, mask, np.empty(len(primes) * n, np.uint64))
    stride = hdr + 8 * words
    for m in range(count):
        row = out[m * stride:(m + 1) * stride]
        assert row[:hdr].tolist() == header.tolist()
        got = row[hdr:].copy().view(np.uint64).reshape(2, len(primes), n)
        want = coeffs[m].reshape(2, len(primes), n).copy()
        if mask[m]:
            for p in range(len(primes)):
                want[0, p] = [(int(v) + int(consts[p])) % int(primes[p]) for v in want[0, p]]
        np.testing.assert_array_equal(got, want)


# --- encrypted pointwise ops -----------------------------------------------------------------------

@pytest.mark.parametrize("b", [50.0, -30.0, 0.5])
def test_encrypted_brightness_decrypts_to_values_plus_b(he_addonly2048, b):
    ctx = he_addonly2048[0]
    img = _image(8, 8)
    batch = _encrypt(ctx, img)
    out = apply_pointwise(batch, ctx.ct_format, Brightness(b), _positions(8, 8), 1.0, ctx.params.scale_bits)
    np.testing.assert_allclose(ctx.decrypt_pixels(out), img.ravel() + b, rtol=0, atol=1e-3)


def test_encrypted_brightness_respects_post_scale(he_addonly2048):
    ctx = he_addonly2048[0]
    img = _image(2, 3)
    batch = _encrypt(ctx, img)
    out = add_constant(batch, ctx.ct_format, 50.0, 1 / 9, ctx.params.scale_bits)
    np.testing.assert_allclose(ctx.decrypt_pixels(out), img.ravel().astype(np.float64) + 450, rtol=0, atol=1e-3)


def test_add_constant_keeps_labels_and_input(he_addonly2048):
    ctx = he_addonly2048[0]
    batch = _encrypt(ctx, _image(2, 2))
    before = batch.data.copy()
    out = add_constant(batch, ctx.ct_format, 1.0, 1.0, ctx.params.scale_bits)
    assert (out.strategy, out.security) == ("fresh", SECURITY_IND_CPA)
    assert out.data is not batch.data
    np.testing.assert_array_equal(batch.data, before)


def test_encrypted_watermark_changes_exactly_one_ciphertext(he_addonly2048):
    ctx = he_addonly2048[0]
    h, w = 4, 5
    img = _image(h, w)
    batch = _encrypt(ctx, img)
    op = Watermark(x=3, y=2, v=5.0)
    out = apply_pointwise(batch, ctx.ct_format, op, _positions(h, w), 1.0, ctx.params.scale_bits)
    target = 2 * w + 3
    changed = [i for i in range(len(batch)) if bytes(out[i]) != bytes(batch[i])]
    assert changed == [target]
    assert ctx.decrypt_pixels(out)[target] == pytest.approx(float(img[2, 3]) + 5.0, abs=1e-3)


def test_add_constant_rejects_ciphertexts_of_another_preset(he_addonly2048, he_paper4096):
    ctx = he_addonly2048[0]
    foreign = _encrypt(he_paper4096[0], _image(1, 2))
    with pytest.raises(ValueError, match="ciphertext 0"):
        add_constant(foreign, ctx.ct_format, 1.0, 1.0, ctx.params.scale_bits)


def test_add_constant_names_the_first_ciphertext_with_a_bad_header(he_addonly2048):
    ctx = he_addonly2048[0]
    batch = _encrypt(ctx, _image(1, 4)).copy()
    stride = ctx.ct_format.stride
    batch.data[2 * stride + 73] ^= 0x01          # a bit of ciphertext 2's scale
    with pytest.raises(ValueError, match="ciphertext 2 .*header"):
        add_constant(batch, ctx.ct_format, 1.0, 1.0, ctx.params.scale_bits)


# --- encrypted mean filter ----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [3, 2])
def test_mean_filter_whole_image_is_exact(he_addonly2048, k):
    ctx = he_addonly2048[0]
    h, w = 6, 5
    img = _image(h, w)
    raw = ctx.decrypt_pixels(_whole_image_mean(ctx, _encrypt(ctx, img), h, w, k)).reshape(h, w)
    ref = reference(img, [MeanFilter(k)])
    np.testing.assert_allclose(raw / k**2, ref, rtol=0, atol=1e-3)
    got = round_to_uint8(finish_for([MeanFilter(k)]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(ref))


def test_mean_filter_k2_has_ties_and_they_round_like_the_reference(he_addonly2048):
    ctx = he_addonly2048[0]
    img = np.array([[0, 1, 2], [1, 1, 3], [5, 0, 0]], dtype=np.uint8)   # many window sums = 2 mod 4
    ref = reference(img, [MeanFilter(2)])
    assert np.any(ref % 1 == 0.5)
    raw = ctx.decrypt_pixels(_whole_image_mean(ctx, _encrypt(ctx, img), 3, 3, 2)).reshape(3, 3)
    got = round_to_uint8(finish_for([MeanFilter(2)]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(ref))


def test_mean_filter_tiled_with_halo_is_exact(he_addonly2048):
    ctx = he_addonly2048[0]
    h, w, th, tw, k = 10, 7, 4, 4, 3
    rows, cols = -(-h // th), -(-w // tw)
    img = _image(h, w)
    batch = _encrypt(ctx, img)
    inbox: dict = {}
    for i, (py, px) in enumerate(_positions(h, w)):
        for t in halo_tiles(int(py), int(px), th, tw, rows, cols, MeanFilter(k).halo):
            inbox.setdefault(t, {})[(int(py), int(px))] = batch[i]
    raw = np.full((h, w), np.nan)
    for (ty, tx), cts in inbox.items():
        y, x = ty * th, tx * tw
        oh, ow = min(th, h - y), min(tw, w - x)
        out = mean_filter_tile(ctx.ct_format, cts, h, w, k, y, x, oh, ow)
        raw[y:y + oh, x:x + ow] = ctx.decrypt_pixels(out).reshape(oh, ow)
    assert len(inbox) == rows * cols
    got = round_to_uint8(finish_for([MeanFilter(k)]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(reference(img, [MeanFilter(k)])))


def test_mean_filter_on_paper4096_is_exact(he_paper4096):
    ctx = he_paper4096[0]
    h, w = 4, 3
    img = _image(h, w)
    raw = ctx.decrypt_pixels(_whole_image_mean(ctx, _encrypt(ctx, img), h, w, 3)).reshape(h, w)
    got = round_to_uint8(finish_for([MeanFilter(3)]).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(reference(img, [MeanFilter(3)])))


def test_mean_filter_tile_names_the_missing_neighbour(he_addonly2048):
    ctx = he_addonly2048[0]
    h, w = 3, 3
    batch = _encrypt(ctx, _image(h, w))
    cts = {(int(py), int(px)): batch[i] for i, (py, px) in enumerate(_positions(h, w))}
    del cts[(1, 2)]
    with pytest.raises(KeyError, match=r"py=1, px=2"):
        mean_filter_tile(ctx.ct_format, cts, h, w, 3, 0, 0, 1, 2)
    with pytest.raises(MissingNeighbour):   # also a ValueError
        mean_filter_tile(ctx.ct_format, cts, h, w, 3, 0, 0, 1, 2)


def test_mean_filter_tile_small_table_budget_gives_same_bytes(he_addonly2048, monkeypatch):
    import hecore.ops.pixel as ops

    ctx = he_addonly2048[0]
    h, w = 5, 4
    batch = _encrypt(ctx, _image(h, w))
    whole = _whole_image_mean(ctx, batch, h, w, 3)
    monkeypatch.setattr(ops, "TABLE_BUDGET_BYTES", 1)      # one output row per block
    blocked = _whole_image_mean(ctx, batch, h, w, 3)
    assert bytes(blocked.data) == bytes(whole.data)


# --- chains ----------------------------------------------------------------------------------------------

def _run_chain(ctx, img: np.ndarray, ops) -> np.ndarray:
    """The encrypted pipeline on one whole-image tile: returns the raw decrypted values (H, W)."""
    h, w = img.shape
    batch, post_scale = _encrypt(ctx, img), 1.0
    pos = _positions(h, w)
    for op in ops:
        if isinstance(op, MeanFilter):
            batch = _whole_image_mean(ctx, batch, h, w, op.k)
        else:
            batch = apply_pointwise(batch, ctx.ct_format, op, pos, post_scale, ctx.params.scale_bits)
        post_scale *= op.post_scale_factor
    assert post_scale == pytest.approx(float(finish_for(ops).post_scale))
    return ctx.decrypt_pixels(batch).reshape(h, w)


@pytest.mark.parametrize("specs", [
    ["brightness:50", "meanfilter:3", "watermark:2,1,5"],
    ["brightness:0.5", "meanfilter:3", "brightness:-0.25", "meanfilter:2"],
])
def test_chain_matches_reference_after_rounding(he_addonly2048, specs):
    ctx = he_addonly2048[0]
    ops = parse_ops(specs)
    img = _image(5, 6)
    img[3:, 3:] = 250                            # +50 takes these to 300 before the final clip
    ref = reference(img, ops)
    raw = _run_chain(ctx, img, ops)
    got = round_to_uint8(finish_for(ops).apply(raw))
    np.testing.assert_array_equal(got, round_to_uint8(ref))


def test_chain_exceeds_255_before_the_final_clip(he_addonly2048):
    ctx = he_addonly2048[0]
    ops = parse_ops(["brightness:50", "meanfilter:3", "watermark:0,0,5"])
    img = np.full((3, 4), 250, dtype=np.uint8)
    img[0, 0] = 0
    raw = _run_chain(ctx, img, ops)
    values = finish_for(ops).apply(raw)
    assert values.max() == 300.0                 # no clipping inside the encrypted pipeline
    np.testing.assert_array_equal(round_to_uint8(values), round_to_uint8(reference(img, ops)))
    assert round_to_uint8(values).max() == 255
