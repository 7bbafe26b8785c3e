"""hecore.seal.evaluator: homomorphic arithmetic on loaded ciphertexts, against NumPy on the plain slots.

CKKS on paper-4096 (2048 slots, one level to spend), BFV on bfv-4096 (exact); the refusals on
addonly-2048 (no key switching) and on paper-4096 keys made without rotation keys.
"""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import generate

from hecore.errors import HepixError
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator, MissingEvaluationKeys

SLOTS = 2048
W = 62                                       # a row stride (the default tile's block width at N=4096)


@pytest.fixture(scope="module")
def bfv4096():
    return generate("bfv-4096")


@pytest.fixture(scope="module")
def no_rotations():
    return generate("paper-4096", rotations=False)


@pytest.fixture(scope="module", params=["ckks", "bfv"])
def setup(request, he_paper4096, bfv4096):
    """``(ctx, evaluator, values, ciphertext, exact)``: 2048 random pixel values in every slot."""
    ctx, _ = he_paper4096 if request.param == "ckks" else bfv4096
    ev = Evaluator(ctx)
    values = np.random.default_rng(11).integers(0, 256, size=SLOTS).astype(np.float64)
    return ctx, ev, values, ev.load(ctx.encrypt_vector(values)), request.param == "bfv"


def _check(ctx, c, expected, exact, atol=1e-2):
    got = ctx.decrypt_slots(c, len(expected))
    if exact:
        bad = np.flatnonzero(got != expected)
        assert bad.size == 0, f"slot {int(bad[0])}: {got[bad[0]]} != {expected[bad[0]]}"
    else:
        err = float(np.max(np.abs(got - expected)))
        assert err < atol, f"max error {err:.3g}"


@pytest.mark.parametrize("length", [1, 2, 3, 5, 16, 37])
@pytest.mark.parametrize("stride", [1, W])
def test_window_sum_matches_rolled_sums(setup, length, stride):
    ctx, ev, values, c, exact = setup
    expected = sum(np.roll(values, -j * stride) for j in range(length))
    _check(ctx, ev.window_sum(c, length, stride), expected, exact)


def test_window_sum_refuses_an_empty_window(setup):
    _, ev, _, c, _ = setup
    with pytest.raises(ValueError, match=r"window length must be >= 1, got 0"):
        ev.window_sum(c, 0)


@pytest.mark.parametrize("steps", [1, 7, -1, -3, -W, 1000, 1025, -1500, 2047, SLOTS, -SLOTS, 0, 3 * SLOTS + 5])
def test_rotate_moves_slot_i_plus_steps_to_slot_i(setup, steps):
    ctx, ev, values, c, exact = setup
    _check(ctx, ev.rotate(c, steps), np.roll(values, -steps), exact)


def test_rotate_by_a_negative_step_undoes_a_positive_one(setup):
    ctx, ev, values, c, exact = setup
    _check(ctx, ev.rotate(ev.rotate(c, 29), -29), values, exact)


def test_operations_leave_their_inputs_alone(setup):
    ctx, ev, values, c, exact = setup
    ev.rotate(c, 5)
    ev.add_values(c, 7)
    ev.window_sum(c, 5, W)
    ev.add(c, c)
    _check(ctx, c, values, exact)


def test_add_sub_negate_add_many(setup):
    ctx, ev, values, c, exact = setup
    other = np.arange(SLOTS, dtype=np.float64) % 100
    d = ev.load(ctx.encrypt_vector(other))
    _check(ctx, ev.add(c, d), values + other, exact)
    _check(ctx, ev.sub(c, d), values - other, exact)
    _check(ctx, ev.negate(c), -values, exact)
    _check(ctx, ev.add_many([c, d, c]), 2 * values + other, exact)
    _check(ctx, ev.add_many(iter([d])), other, exact)
    with pytest.raises(ValueError, match=r"at least one ciphertext"):
        ev.add_many([])


def test_add_values_scalar_and_vector(setup):
    ctx, ev, values, c, exact = setup
    _check(ctx, ev.add_values(c, 60), values + 60, exact)
    _check(ctx, ev.add_values(c, -255), values - 255, exact)
    vec = np.array([5, -3, 0, 100], dtype=np.float64)
    expected = values.copy()
    expected[:4] += vec                                     # the slots beyond the vector get 0
    _check(ctx, ev.add_values(c, vec), expected, exact)
    full = np.arange(SLOTS, dtype=np.float64)
    _check(ctx, ev.add_values(c, full), values + full, exact)
    with pytest.raises(ValueError, match=rf"{SLOTS + 1} values do not fit {SLOTS} slots"):
        ev.add_values(c, np.zeros(SLOTS + 1))


def test_square_and_multiply(setup):
    ctx, ev, values, c, exact = setup
    small = values % 20                   # paper-4096 has 10 bits above the scale after a rescale
    other = (values // 20) % 20
    cs, co = ev.load(ctx.encrypt_vector(small)), ev.load(ctx.encrypt_vector(other))
    sq = ev.square(cs)
    _check(ctx, sq, small * small, exact, atol=0.05)
    _check(ctx, ev.multiply(cs, co), small * other, exact, atol=0.05)
    # what follows a multiplication runs at its level: plaintexts are encoded to match
    _check(ctx, ev.add_values(sq, 3), small * small + 3, exact, atol=0.05)
    _check(ctx, ev.rotate(sq, 4), np.roll(small * small, -4), exact, atol=0.05)
    if not exact:
        assert ev.level(sq) == 1 and ev.level(cs) == 0


# --- CKKS: the scale trick ------------------------------------------------------------------------

@pytest.mark.parametrize("factor", [0.25, 3.0, 1 / 9, 1e-3])
def test_scale_value_multiplies_the_value_through_the_scale(he_paper4096, factor):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    values = np.linspace(-200, 200, 64)
    c = ev.load(ctx.encrypt_vector(values))
    s = ev.scale_value(c, factor)
    assert ev.level(s) == ev.level(c) == 0                  # no level spent
    assert ev.scale(s) == pytest.approx(ev.scale(c) / factor, rel=1e-15)
    got = ctx.decrypt_slots(s, 64)
    assert np.max(np.abs(got - values * factor)) < 1e-4 * max(1.0, factor)
    # two ciphertexts scaled alike add up; scaled and unscaled do not
    both = ev.add(s, ev.scale_value(c, factor))
    assert np.max(np.abs(ctx.decrypt_slots(both, 64) - 2 * values * factor)) < 1e-3
    with pytest.raises(ValueError, match=r"cannot add ciphertexts at scales"):
        ev.add(s, c)


@pytest.mark.parametrize("factor", [0.0, -2.0, float("inf"), float("nan")])
def test_scale_value_refuses_non_positive_or_non_finite_factors(he_paper4096, factor):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.ones(4)))
    with pytest.raises(ValueError, match=r"scale factor must be positive and finite"):
        ev.scale_value(c, factor)


def test_scale_value_is_ckks_only(bfv4096):
    ctx, _ = bfv4096
    ev = Evaluator(ctx)
    with pytest.raises(ValueError, match=r"BFV has no scale"):
        ev.scale_value(ev.load(ctx.encrypt_vector(np.ones(4))), 2.0)


# --- refusals -----------------------------------------------------------------------------------

def test_adding_ciphertexts_at_different_levels_is_refused(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.ones(8)))
    sq = ev.square(c)
    for what, fn in (("add", ev.add), ("subtract", ev.sub), ("multiply", ev.multiply)):
        with pytest.raises(ValueError, match=rf"cannot {what} ciphertexts at levels 0 and 1"):
            fn(c, sq)
    with pytest.raises(ValueError, match=r"cannot add ciphertexts at levels 1 and 0"):
        ev.add_many([sq, c])


def test_a_multiplication_past_the_last_level_is_refused(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    sq = ev.square(ev.load(ctx.encrypt_vector(np.full(8, 2.0))))
    with pytest.raises(HepixError, match=r"a squaring needs a level .*paper-4096 affords 1"):
        ev.square(sq)
    with pytest.raises(HepixError, match=r"a multiplication needs a level"):
        ev.multiply(sq, sq)


def test_squaring_on_addonly_2048_is_refused(he_addonly2048):
    ctx, _ = he_addonly2048
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.ones(4)))
    with pytest.raises(MissingEvaluationKeys, match=r"relinearisation key.*addonly-2048"):
        ev.square(c)
    with pytest.raises(MissingEvaluationKeys, match=r"relinearisation key"):
        ev.multiply(c, c)
    with pytest.raises(MissingEvaluationKeys, match=r"rotation \(Galois\) keys.*addonly-2048"):
        ev.rotate(c, 1)
    # additions need no evaluation key
    assert np.allclose(ctx.decrypt_slots(ev.add_values(ev.add(c, c), 1.5), 4), 3.5, atol=1e-3)


def test_rotation_without_rotation_keys_is_refused(no_rotations):
    ctx, _ = no_rotations
    assert ctx.public.rotate_key is None and ctx.public.relin_key is not None
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.arange(8.0)))
    with pytest.raises(MissingEvaluationKeys, match=r"rotation \(Galois\) keys.*paper-4096.*--no-rotations"):
        ev.rotate(c, 1)
    with pytest.raises(MissingEvaluationKeys):
        ev.window_sum(c, 3)
    # a rotation by a multiple of the slot count is a copy and needs no key; squaring needs relin only
    assert np.allclose(ctx.decrypt_slots(ev.rotate(c, SLOTS), 8), np.arange(8.0), atol=1e-3)
    assert np.allclose(ctx.decrypt_slots(ev.square(c), 8), np.arange(8.0) ** 2, atol=0.05)


def test_the_public_material_alone_evaluates(he_paper4096):
    ctx, _ = he_paper4096
    public = HEContext.from_public(ctx.public)
    assert not public.has_secret
    ev = Evaluator(public)
    values = np.arange(SLOTS, dtype=np.float64) % 50
    c = ev.load(ctx.encrypt_vector(values))
    out = ev.add_values(ev.window_sum(c, 3, W), 1)
    got = ctx.decrypt_slots(ev.dump(out), SLOTS)            # the key holder decrypts the bytes
    expected = sum(np.roll(values, -j * W) for j in range(3)) + 1
    assert np.max(np.abs(got - expected)) < 1e-2
