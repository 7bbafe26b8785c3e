"""Tests of hecore.quality: MSE, PSNR, SSIM, exactness and difference maps."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hecore.quality import Quality, compare, difference_map, psnr, round_to_uint8


def _gray(h: int = 16, w: int = 16, seed: int = 0) -> np.ndarray:
    # values in 10..244 so that +/- small perturbations are never clipped
    return np.random.default_rng(seed).integers(10, 245, size=(h, w), dtype=np.uint8)


def _rgb(h: int = 16, w: int = 16, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(10, 245, size=(h, w, 3), dtype=np.uint8)


# --- identical images ------------------------------------------------------------------

def test_identical_mse_is_zero():
    ref = _gray()
    assert compare(ref, ref.astype(np.float64)).mse == 0.0


def test_identical_psnr_is_infinite():
    ref = _gray()
    assert compare(ref, ref.astype(np.float64)).psnr == math.inf


def test_identical_ssim_is_one():
    ref = _gray()
    assert compare(ref, ref.astype(np.float64)).ssim == pytest.approx(1.0)


def test_identical_exact_fraction_is_one():
    ref = _gray()
    assert compare(ref, ref.astype(np.float64)).exact_fraction == 1.0


# --- a known perturbation -----------------------------------------------------------

def _quarter_plus_one(ref: np.ndarray) -> np.ndarray:
    dec = ref.astype(np.float64)
    dec[: ref.shape[0] // 2, : ref.shape[1] // 2] += 1.0  # exactly a quarter of the pixels
    return dec


def test_quarter_plus_one_mse():
    ref = _gray()
    assert compare(ref, _quarter_plus_one(ref)).mse == pytest.approx(0.25)


def test_quarter_plus_one_psnr():
    ref = _gray()
    expected = 10 * math.log10(255.0**2 / 0.25)  # 54.15 dB
    assert compare(ref, _quarter_plus_one(ref)).psnr == pytest.approx(expected, abs=1e-9)


def test_quarter_plus_one_exact_fraction():
    ref = _gray()
    assert compare(ref, _quarter_plus_one(ref)).exact_fraction == pytest.approx(0.75)


def test_perturbation_lowers_ssim():
    ref = _gray()
    assert compare(ref, _quarter_plus_one(ref)).ssim < 1.0


# --- error before rounding --------------------------------------------------------------

def test_max_abs_err_is_taken_before_rounding():
    ref = _gray()
    q = compare(ref, ref.astype(np.float64) + 0.4)
    assert q.max_abs_err == pytest.approx(0.4)
    assert q.mse == 0.0


def test_max_abs_err_sees_negative_errors():
    ref = _gray()
    dec = ref.astype(np.float64)
    dec[3, 4] -= 0.45
    assert compare(ref, dec).max_abs_err == pytest.approx(0.45)


# --- rounding --------------------------------------------------------------------------

def test_round_up_to_255():
    assert round_to_uint8(np.array([254.6]))[0] == 255


def test_round_clips_above_255():
    assert round_to_uint8(np.array([255.7]))[0] == 255


def test_round_clips_below_zero():
    assert round_to_uint8(np.array([-0.6]))[0] == 0


def test_round_returns_uint8():
    assert round_to_uint8(np.array([1.2, 3.7])).dtype == np.uint8


def test_round_ties_to_even():
    assert round_to_uint8(np.array([0.5, 1.5, 2.5])).tolist() == [0, 2, 2]


def test_round_rejects_nan():
    with pytest.raises(ValueError):
        round_to_uint8(np.array([1.0, np.nan]))


def test_clipped_values_count_as_exact():
    ref = np.full((8, 8), 255, dtype=np.uint8)
    q = compare(ref, np.full((8, 8), 255.7))
    assert q.exact_fraction == 1.0 and q.mse == 0.0


# --- L and RGB -----------------------------------------------------------------------------

def test_gray_pixel_count():
    ref = _gray(12, 10)
    assert compare(ref, ref.astype(np.float64)).pixels == 120


def test_rgb_pixel_count():
    ref = _rgb(12, 10)
    assert compare(ref, ref.astype(np.float64)).pixels == 12 * 10 * 3


def test_rgb_identical_ssim_is_one():
    ref = _rgb()
    assert compare(ref, ref.astype(np.float64)).ssim == pytest.approx(1.0)


def test_rgb_quarter_plus_one_mse():
    ref = _rgb()
    assert compare(ref, _quarter_plus_one(ref)).mse == pytest.approx(0.25)


def test_rgb_perturbation_lowers_ssim():
    ref = _rgb()
    assert compare(ref, _quarter_plus_one(ref)).ssim < 1.0


# --- tiny images ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (2, 9), (2, 2, 3), (5, 5, 3)])
def test_tiny_identical_images_have_ssim_one(shape):
    ref = np.random.default_rng(2).integers(10, 245, size=shape, dtype=np.uint8)
    assert compare(ref, ref.astype(np.float64)).ssim == pytest.approx(1.0)


@pytest.mark.parametrize("shape", [(2, 2), (5, 5), (2, 2, 3), (5, 5, 3)])
def test_tiny_different_images_have_ssim_below_one(shape):
    ref = np.random.default_rng(3).integers(10, 245, size=shape, dtype=np.uint8)
    dec = ref.astype(np.float64)
    dec[0, 0] += 40
    assert compare(ref, dec).ssim < 1.0


# --- errors ---------------------------------------------------------------------------------

def test_shape_mismatch_names_both_shapes():
    ref = _gray(4, 5)
    with pytest.raises(ValueError) as exc:
        compare(ref, np.zeros((5, 4)))
    assert "(4, 5)" in str(exc.value) and "(5, 4)" in str(exc.value)


# --- PSNR helper and the paper's figures ----------------------------------------------------

def test_psnr_of_zero_mse_is_infinite():
    assert psnr(0.0) == math.inf


def test_psnr_of_paper_mse():
    # The paper (section 4.3.2) reports MSE 0.476 and PSNR 51.30 dB, but both
    # are averages over images: the average of per-image PSNRs is not the
    # PSNR of the average MSE, so PSNR(0.476) = 51.35 dB is the right check.
    assert abs(psnr(0.476) - 51.35) < 0.05


def test_psnr_respects_max_value():
    assert psnr(1.0, max_value=1.0) == pytest.approx(0.0)


# --- Quality ---------------------------------------------------------------------------------

def test_as_dict_has_every_field():
    ref = _gray()
    d = compare(ref, ref.astype(np.float64)).as_dict()
    assert set(d) == {"mse", "psnr", "ssim", "max_abs_err", "exact_fraction", "pixels"}


def test_quality_is_frozen():
    q = Quality(mse=0.0, psnr=math.inf, ssim=1.0, max_abs_err=0.0, exact_fraction=1.0, pixels=1)
    with pytest.raises(AttributeError):
        q.mse = 1.0  # type: ignore[misc]


# --- difference map ---------------------------------------------------------------------------

def test_difference_map_finds_single_watermark_pixel():
    ref = _gray(10, 12)
    x, y = 7, 3  # column, row
    marked = ref.astype(np.float64)
    marked[y, x] += 5
    diff = difference_map(ref, marked, threshold=5)
    assert diff.sum() == 1 and diff[y, x]


def test_difference_map_rgb_any_channel():
    ref = _rgb(6, 6)
    marked = ref.astype(np.float64)
    marked[2, 4, 1] += 5  # only the green channel
    diff = difference_map(ref, marked, threshold=5)
    assert diff.shape == (6, 6) and diff.sum() == 1 and diff[2, 4]


def test_difference_map_does_not_wrap_uint8():
    a = np.zeros((3, 3), dtype=np.uint8)
    b = a.copy()
    b[1, 1] = 250  # a - b would wrap to 6 in uint8 arithmetic
    assert difference_map(a, b, threshold=100)[1, 1]


def test_difference_map_below_threshold_is_empty():
    ref = _gray(8, 8)
    assert not difference_map(ref, ref.astype(np.float64) + 4.9, threshold=5).any()


@pytest.mark.parametrize("shape", [(300, 40), (257, 31, 3), (129, 9)])
def test_ssim_in_strips_is_scikit_images_whole_plane_value(shape):
    """The SSIM map is computed in strips of rows (bounded memory); its mean is the whole plane's."""
    from skimage.metrics import structural_similarity

    from hecore import quality

    rng = np.random.default_rng(7)
    ref = rng.integers(0, 256, shape).astype(np.uint8)
    img = np.clip(ref.astype(int) + rng.integers(-12, 13, shape), 0, 255).astype(np.uint8)
    assert shape[0] > quality.SSIM_STRIP_ROWS          # more than one strip
    whole = structural_similarity(ref.astype(np.float64), img.astype(np.float64), data_range=255.0, win_size=7,
                                  **({"channel_axis": -1} if len(shape) == 3 else {}))
    assert quality._ssim(ref, img) == pytest.approx(whole, rel=1e-12, abs=1e-12)
