"""bench.detect: the binary difference map of Fig. 8 and watermark detection after decryption."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_dataset
from PIL import Image

from bench.detect import detect_watermark, difference_map, expected_difference, save_difference_map


def _grey(h=16, w=20, seed=0):
    return np.random.default_rng(seed).integers(10, 240, size=(h, w), dtype=np.uint8)


def _marked(ref, x, y, v, channel=None):
    out = ref.astype(np.float64)
    if channel is None:
        out[y, x] += v
    else:
        out[y, x, channel] += v
    return out


# --- difference_map ------------------------------------------------------------------------

def test_map_marks_exactly_the_changed_pixel():
    ref = _grey()
    dec = ref.copy()
    dec[3, 7] += 5
    m = difference_map(dec, ref)
    assert m.shape == ref.shape and m.dtype == np.bool_
    assert m.sum() == 1 and m[3, 7]


def test_map_any_channel_and_threshold():
    ref = np.stack([_grey(seed=s) for s in range(3)], axis=2)
    dec = ref.copy()
    dec[1, 2, 2] += 3          # blue only
    dec[4, 5, 0] += 1          # red, by one
    assert set(zip(*np.nonzero(difference_map(dec, ref)))) == {(1, 2), (4, 5)}
    assert set(zip(*np.nonzero(difference_map(dec, ref, threshold=2)))) == {(1, 2)}


def test_map_does_not_wrap_and_sees_decreases():
    ref = np.zeros((3, 3), np.uint8)
    ref[1, 1] = 250
    dec = np.zeros((3, 3), np.uint8)           # 0 - 250 would wrap to 6 in uint8
    assert difference_map(dec, ref, threshold=100)[1, 1]


def test_map_rounds_raw_decrypted_floats():
    ref = _grey()
    raw = ref.astype(np.float64) + 0.49        # CKKS-sized noise: rounds back to the reference
    raw[2, 3] += 5.0
    m = difference_map(raw, ref)
    assert m.sum() == 1 and m[2, 3]


def test_map_grey_shapes_with_and_without_a_channel_axis_agree():
    ref = _grey()
    dec = ref.copy()
    dec[0, 0] = 0
    assert difference_map(dec[:, :, None], ref)[0, 0]


@pytest.mark.parametrize("dec_shape,ref_shape", [((16, 20), (20, 16)), ((16, 20, 3), (16, 20)),
                                                 ((16, 20), (16, 21))])
def test_map_shape_mismatch_is_a_clear_error(dec_shape, ref_shape):
    with pytest.raises(ValueError, match=r"decrypted image has shape .* but the reference image has shape"):
        difference_map(np.zeros(dec_shape, np.uint8), np.zeros(ref_shape, np.uint8))


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1", True])
def test_map_threshold_must_be_positive(bad):
    ref = _grey()
    with pytest.raises(ValueError, match="threshold"):
        difference_map(ref, ref, threshold=bad)


def test_map_rejects_non_images():
    ref = _grey()
    with pytest.raises(ValueError, match=r"shape \(H, W\)"):
        difference_map(np.zeros(5, np.uint8), np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="0..255"):
        difference_map(ref.astype(np.int32) + 300, ref)
    with pytest.raises(ValueError, match="8-bit integer"):
        difference_map(ref, ref.astype(np.float64))           # the reference is a plain image
    with pytest.raises(ValueError, match="NaN"):
        difference_map(np.full(ref.shape, np.nan), ref)


# --- detect_watermark ----------------------------------------------------------------------

def test_detects_the_watermark_pixel_as_x_y():
    ref = _grey()
    assert detect_watermark(_marked(ref, x=7, y=3, v=5.0), ref, 5.0) == [(7, 3)]


def test_other_changes_are_not_the_watermark():
    ref = _grey()
    dec = _marked(ref, x=7, y=3, v=5.0)
    dec[10, 1] += 2.0                          # some other change
    dec[11, 2] -= 5.0                          # the opposite sign
    assert detect_watermark(dec, ref, 5.0) == [(7, 3)]
    assert detect_watermark(dec, ref, threshold=1) == [(7, 3), (1, 10), (2, 11)]   # row by row


def test_fractional_value_means_within_half_after_rounding():
    ref = _grey()
    dec = _marked(ref, x=4, y=2, v=5.3)        # rounds to +5: |5 - 5.3| < 0.5
    assert detect_watermark(dec, ref, 5.3) == [(4, 2)]
    assert detect_watermark(dec, ref, 6.0) == []


def test_negative_value_and_rgb_watermarks():
    ref = np.stack([_grey(seed=s) for s in range(3)], axis=2)
    dec = ref.astype(np.float64)
    dec[5, 6, :] -= 5.0                         # hecore's watermark adds v to every channel
    dec[8, 9, 1] -= 5.0                         # one channel is enough
    assert detect_watermark(dec, ref, -5.0) == [(6, 5), (9, 8)]


def test_clipped_pixels_count_with_their_clipped_change():
    ref = _grey()
    ref[0, 0], ref[0, 1] = 253, 255
    dec = round_marked = _marked(ref, x=0, y=0, v=5.0)
    round_marked[0, 1] += 5.0                   # 255 + 5 clips back to 255: no visible change
    assert expected_difference(ref, 5.0)[0, 0] == 2
    assert detect_watermark(dec, ref, 5.0) == [(0, 0)]


def test_a_value_that_rounding_erases_is_undetectable():
    ref = _grey()
    assert detect_watermark(_marked(ref, x=1, y=1, v=0.3), ref, 0.3) == []


def test_detect_arguments():
    ref = _grey()
    with pytest.raises(ValueError, match="not both"):
        detect_watermark(ref, ref, 5.0, threshold=1)
    with pytest.raises(ValueError, match="not both and not neither"):
        detect_watermark(ref, ref)
    with pytest.raises(ValueError, match="finite"):
        detect_watermark(ref, ref, float("nan"))
    with pytest.raises(ValueError, match="unmarked reference has shape"):
        detect_watermark(ref, ref[:, :-1], 5.0)


# --- save_difference_map ---------------------------------------------------------------------

def test_saved_map_is_white_where_it_differs(tmp_path):
    m = np.zeros((4, 6), bool)
    m[1, 2] = True
    path = save_difference_map(m, tmp_path / "map.png")
    img = Image.open(path)
    assert img.format == "PNG" and img.mode == "L" and img.size == (6, 4)
    arr = np.array(img)
    assert arr[1, 2] == 255 and arr.sum() == 255


def test_saved_map_can_be_enlarged(tmp_path):
    m = np.zeros((3, 3), bool)
    m[2, 0] = True
    arr = np.array(Image.open(save_difference_map(m, tmp_path / "big.png", scale=4)))
    assert arr.shape == (12, 12) and (arr[8:12, 0:4] == 255).all() and arr.sum() == 16 * 255


def test_saved_map_rejects_other_arrays(tmp_path):
    with pytest.raises(ValueError, match=r"shape \(H, W\)"):
        save_difference_map(np.zeros((2, 2, 3), bool), tmp_path / "x.png")
    with pytest.raises(ValueError, match="booleans"):
        save_difference_map(np.full((2, 2), 7), tmp_path / "x.png")
    with pytest.raises(ValueError, match="scale"):
        save_difference_map(np.zeros((2, 2), bool), tmp_path / "x.png", scale=0)


# --- the real thing: an encrypted watermark --------------------------------------------------

def test_packed_encrypted_watermark_is_detected_exactly(he_paper4096, tmp_path):
    """Packed paper-4096: encrypt a 64x64 USC-SIPI crop, watermark:10,20,5 on the ciphertexts,
    decrypt, finish, round: the difference with the unmarked image is exactly pixel (10, 20)."""
    from hecore.images import center_crop, load_image
    from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
    from hecore.ops.packed import PackedGeometry, apply_ops
    from hecore.ops.spec import finish_for, parse_ops, reference
    from hecore.quality import round_to_uint8
    from hecore.seal.evaluator import Evaluator

    img = center_crop(load_image(shared_dataset("usc-sipi/7.1.01.tiff")).pixels, 64)
    assert img.shape == (64, 64) and img[20, 10] <= 250        # room for +5 below 255
    ctx, _secret = he_paper4096
    ev = Evaluator(ctx)
    ops = parse_ops(["watermark:10,20,5"])
    th, tw = default_tile(ctx.params)
    grid, produce = encrypt_tiles(img, ctx, th, tw)
    done = []
    for pt in produce:
        geom = PackedGeometry(th, tw, pt.halo, pt.y, pt.x, 64, 64)
        c, post_scale = apply_ops(ev, ev.load(pt.ct), ops, geom)
        assert post_scale == 1.0
        done.append(pt.with_ct(ev.dump(c)))
    decrypted = round_to_uint8(finish_for(ops).apply(decrypt_tiles(ctx, grid, done)))

    assert np.array_equal(decrypted, round_to_uint8(reference(img, ops)))
    assert detect_watermark(decrypted, img, 5.0) == [(10, 20)]
    m = difference_map(decrypted, img)
    assert set(zip(*np.nonzero(m))) == {(20, 10)}              # (row, column)
    saved = np.array(Image.open(save_difference_map(m, tmp_path / "fig8.png")))
    assert saved[20, 10] == 255 and saved.sum() == 255
