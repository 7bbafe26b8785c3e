"""CKKS's polynomial approximation of threshold:T (hecore.ops.sign) against TFHE's exact mask."""
from __future__ import annotations

import numpy as np
import pytest

from bench.contexts import Keys
from hecore.ops.sign import approx_sign_mask, levels_needed, mask_errors, plain_sign_mask
from hecore.tfhe.ops import Threshold

PIXELS = np.arange(256, dtype=np.uint8)
#: CKKS's own error on top of the polynomial's, in mask units (0..255): the relative scale drift of
#: 32-bit primes (~1e-3) times values of a few units, with room; far below the 0.5 the check allows.
CKKS_SLACK = 1.0


@pytest.fixture(scope="module")
def keys():
    return Keys(rotations=False)


def band(threshold: int, steps) -> float:
    """From the polynomial itself (float64, no encryption): the half-width around T + 1/2 beyond which
    its mask is within 0.5 of the exact one on every 8-bit pixel."""
    exact = Threshold(threshold).reference(PIXELS).astype(np.float64)
    off = np.abs(plain_sign_mask(PIXELS, threshold, steps) - exact) > 0.5
    return float(np.abs(PIXELS[off].astype(np.float64) - threshold + 0.5).max()) if off.any() else 0.0


def violations(mask, threshold: int, margin: float) -> np.ndarray:
    """Pixels farther than ``margin`` from T + 1/2 whose mask is not within 0.5 (+ CKKS's slack) of the
    exact mask of ``threshold``, or that sit on the wrong side of 127.5 anywhere."""
    exact = Threshold(threshold).reference(PIXELS).astype(np.float64)
    far = np.abs(PIXELS.astype(np.float64) - threshold + 0.5) > margin
    bad = (far & (np.abs(mask - exact) > 0.5 + CKKS_SLACK)) | ((mask >= 127.5) != (exact > 0))
    return PIXELS[bad]


def encrypted_mask(keys, preset, threshold, steps):
    ctx, ev = keys.get(preset)
    ct = ev.load(ctx.encrypt_vector(PIXELS.astype(np.float64)))
    return ctx.decrypt_slots(approx_sign_mask(ev, ct, threshold, steps), PIXELS.size)


@pytest.mark.parametrize("preset, steps, threshold", [("dft-8192", "f3", 128), ("dft-8192", "f1", 37),
                                                       ("dft-16384", "f3.f1", 200)])
def test_the_encrypted_mask_is_exact_away_from_the_threshold(keys, preset, steps, threshold):
    mask = encrypted_mask(keys, preset, threshold, steps)
    assert np.abs(mask - plain_sign_mask(PIXELS, threshold, steps)).max() < CKKS_SLACK
    margin = band(threshold, steps)
    assert 0 < margin < 255          # an approximation: wrong near T, right far from it
    assert violations(mask, threshold, margin).size == 0
    errs = mask_errors(mask, PIXELS, threshold)
    assert errs.wrong_side_fraction == 0 and errs.off_band <= margin + 1
    # the check can fail: the same mask judged against another threshold, or with no margin at all
    assert violations(mask, threshold + 20 if threshold < 200 else threshold - 20, margin).size > 0


def test_the_check_fails_without_the_derived_margin(keys):
    mask = encrypted_mask(keys, "dft-8192", 128, "f3")
    exact = Threshold(128).reference(PIXELS).astype(np.float64)
    near = np.abs(PIXELS.astype(np.float64) - 127.5) <= band(128, "f3")
    assert (np.abs(mask - exact)[near] > 0.5 + CKKS_SLACK).any()    # inside the band it is off


def test_more_steps_narrow_the_band():
    assert band(128, "f3.f1") < band(128, "f3") < band(128, "f1")
    assert levels_needed("f3.f1") == 6 and levels_needed("f3") == 4


def test_bad_compositions_are_refused_with_the_way_out(keys):
    ctx, ev = keys.get("dft-8192")
    ct = ev.load(ctx.encrypt_vector(PIXELS.astype(np.float64)))
    with pytest.raises(ValueError, match="needs 6 levels.*affords 4"):
        approx_sign_mask(ev, ct, 128, "f3.f1")
    with pytest.raises(ValueError, match="may only be the first step"):
        approx_sign_mask(ev, ct, 128, "f1.f3")
    with pytest.raises(ValueError, match="threshold T must be an integer"):
        approx_sign_mask(ev, ct, 256, "f3")
    with pytest.raises(ValueError, match="expected names from"):
        approx_sign_mask(ev, ct, 128, "f9")
