"""BFV and BGV: exact integer slots, the packed ops on them, and what they refuse.

The packed matrix is the one of test_packed_ops.py (CKKS) on bfv-4096 and bgv-4096: the raw
values must come back as exactly the integers reference / post_scale, and the rounded image
equal the reference's.
"""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import COLOUR, GREY, assert_exact, generate, op_chains, run_packed, usc_crop

from hecore.errors import HepixError, InvalidParameters
from hecore.layouts.packed import default_tile
from hecore.seal.context import integer_slots
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

SCHEMES = ["bfv-4096", "bgv-4096"]
TILINGS = [(16, 30, 2), default_tile(preset("bfv-4096"), halo=1) + (1,)]


@pytest.fixture(scope="module")
def contexts():
    return {name: generate(name) for name in SCHEMES}


@pytest.fixture(scope="module")
def images():
    return {"grey": usc_crop(GREY), "colour": usc_crop(COLOUR)}


def _cases():
    out = []
    for name in SCHEMES:
        for th, tw, halo in TILINGS:
            for cid, specs in op_chains(th, tw, halo):
                for img in ("grey", "colour"):
                    out.append(pytest.param(name, specs, img, (th, tw, halo),
                                            id=f"{name}-{cid}-{img}-{th}x{tw}h{halo}"))
    return out


@pytest.mark.parametrize("name, specs, img, tiling", _cases())
def test_packed_integer_schemes_match_the_plaintext_reference(contexts, images, name, specs, img, tiling):
    ctx, _ = contexts[name]
    assert ctx.params.is_integer and ctx.params.scheme == name[:3]
    run = run_packed(ctx, images[img], specs, *tiling)
    assert_exact(run, integer=True)
    assert run.exact_fraction == 1.0, run.report()


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("specs, op", [
    (["contrast:1.5"], "contrast:1.5"),
    (["brightness:0.5"], "brightness:0.5"),
    (["brightness:10", "watermark:3,4,2.5"], "watermark:3,4,2.5"),
    (["meanfilter:2", "contrast:1.5"], "contrast:1.5"),     # -64 / (1/4 x 1.5) is not an integer
])
def test_non_integer_raw_constants_are_refused_naming_the_op(contexts, images, name, specs, op):
    ctx, _ = contexts[name]
    with pytest.raises(InvalidParameters) as info:
        run_packed(ctx, images["grey"], specs, 16, 30, 2)
    msg = str(info.value)
    assert msg.startswith(f"{op}:"), msg
    assert name[:3].upper() in msg and "integers only" in msg and "CKKS" in msg, msg


@pytest.mark.parametrize("name", SCHEMES)
def test_constants_that_become_integers_after_a_filter_are_accepted(contexts, images, name):
    # After meanfilter:2 the raw values are 4x the true ones: +0.5 is +2 raw, exactly.
    ctx, _ = contexts[name]
    for specs in (["meanfilter:2", "brightness:0.5", "watermark:10,10,0.25"],
                  ["meanfilter:3", "contrast:1.5"]):                   # -64 / (1/9 x 1.5) = -384
        run = run_packed(ctx, images["grey"], specs, 16, 30, 2)
        assert_exact(run, integer=True)
        assert run.exact_fraction == 1.0, run.report()


# --- integer slots ----------------------------------------------------------------------------------

#: bfv-4096's plaintext prime: the largest 20-bit prime = 1 mod 8192, below 2^20.
T_4096 = 1032193
HALF_4096 = (T_4096 - 1) // 2           # 516096, less than 2^19 = 524288


def test_the_plaintext_modulus_is_the_prime_seal_picks(contexts):
    for name in SCHEMES:
        ctx, _ = contexts[name]
        assert ctx.params.plain_modulus == ctx._he.t == T_4096
    assert preset("bfv-8192").plain_modulus == preset("bgv-8192").plain_modulus == 1099511480321
    assert preset("paper-4096").plain_modulus == 0


def test_integer_slots_accepts_whole_numbers_within_half_t():
    p = preset("bfv-4096")
    got = integer_slots(np.array([0.0, 3.0, -HALF_4096, HALF_4096]), p)
    assert got.dtype == np.int64 and got.tolist() == [0, 3, -HALF_4096, HALF_4096]
    assert integer_slots([1, 2, 3], p).tolist() == [1, 2, 3]


@pytest.mark.parametrize("values, pattern", [
    ([1.0, 0.5], r"BFV slots hold integers; value 0\.5 at slot 1 is not one"),
    ([np.nan], r"value nan at slot 0 is not one"),
    ([np.inf], r"value inf at slot 0"),
    ([0, HALF_4096 + 1], r"value 516097 at slot 1 does not fit the plaintext modulus of bfv-4096 "
                         r"\(t = 1032193, 20 bits: \|value\| <= 516096\)"),
    ([2**19 - 1], r"value 524287 at slot 0 does not fit"),     # below 2^19, above t/2: used to wrap
    ([-(2**19)], r"value -524288 at slot 0 does not fit"),
])
def test_integer_slots_refuses_fractions_and_values_out_of_range(values, pattern):
    with pytest.raises(ValueError, match=pattern):
        integer_slots(np.asarray(values), preset("bfv-4096"))


@pytest.mark.parametrize("name", SCHEMES)
def test_encrypting_a_fraction_is_refused_naming_the_value(contexts, name):
    ctx, _ = contexts[name]
    with pytest.raises(ValueError, match=rf"{name[:3].upper()} slots hold integers; value 0\.5 at slot 2"):
        ctx.encrypt_vector(np.array([1.0, 2.0, 0.5]))
    with pytest.raises(ValueError, match=r"value 600000 at slot 0 does not fit"):
        ctx.encrypt_vector(np.array([600000]))


@pytest.mark.parametrize("name", SCHEMES)
def test_add_values_refuses_a_fraction_naming_it(contexts, name):
    ctx, _ = contexts[name]
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.arange(8)))
    with pytest.raises(ValueError, match=r"value 0\.5 at slot 0"):
        ev.add_values(c, 0.5)
    with pytest.raises(ValueError, match=r"value 1\.25 at slot 3"):
        ev.add_values(c, [1, 2, 3, 1.25])
    with pytest.raises(ValueError, match=r"value 1000000 at slot 0 does not fit"):
        ev.add_values(c, 1e6)
    with pytest.raises(ValueError, match=r"has no scale"):
        ev.scale_value(c, 2.0)


@pytest.mark.parametrize("name", SCHEMES)
def test_every_accepted_value_decrypts_to_itself_and_sums_wrap_mod_t(contexts, name):
    ctx, _ = contexts[name]
    ev = Evaluator(ctx)
    values = np.array([-5, 3, -HALF_4096, HALF_4096, 0])
    c = ev.load(ctx.encrypt_vector(values))
    assert ctx.decrypt_slots(c, 5).tolist() == values.tolist()
    wrapped = ctx.decrypt_slots(ev.add(c, c), 4)
    assert wrapped[3] == 2 * HALF_4096 - T_4096             # past t/2: wraps to the negative side
    assert wrapped[2] == T_4096 - 2 * HALF_4096


@pytest.mark.parametrize("name", SCHEMES)
def test_integer_arithmetic_is_exact(contexts, name):
    ctx, _ = contexts[name]
    ev = Evaluator(ctx)
    rng = np.random.default_rng(4)
    a = rng.integers(-700, 700, size=ctx.params.slots)
    b = rng.integers(-700, 700, size=ctx.params.slots)
    ca, cb = ev.load(ctx.encrypt_vector(a)), ev.load(ctx.encrypt_vector(b))
    n = ctx.params.slots
    assert np.array_equal(ctx.decrypt_slots(ev.add(ca, cb), n), a + b)
    assert np.array_equal(ctx.decrypt_slots(ev.sub(ca, cb), n), a - b)
    assert np.array_equal(ctx.decrypt_slots(ev.negate(ca), n), -a)
    assert np.array_equal(ctx.decrypt_slots(ev.square(ca), n), a * a)
    assert np.array_equal(ctx.decrypt_slots(ev.multiply(ca, cb), n), a * b)
    assert np.array_equal(ctx.decrypt_slots(ev.window_sum(ca, 37, 62), n),
                          sum(np.roll(a, -j * 62) for j in range(37)))


def test_bfv_noise_budget_shrinks_with_a_multiplication(contexts):
    ctx, _ = contexts["bfv-4096"]
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.arange(100)))
    fresh = ctx.noise_budget(c)
    squared = ctx.noise_budget(ev.square(c))
    assert fresh > squared > 0
    assert ctx.noise_budget(ev.rotate(c, 3)) > 0
    assert ctx.noise_budget(ev.dump(c)) == fresh            # bytes are accepted too


def test_noise_budget_is_refused_for_bgv_and_ckks(contexts, he_paper4096):
    # Pyfhel 3.5 raises a bare RuntimeError for BGV; hepix says what is going on.
    ctx, _ = contexts["bgv-4096"]
    c = ctx.encrypt_vector(np.arange(4))
    with pytest.raises(HepixError, match=r"BFV ciphertexts only, not BGV \(bgv-4096\)"):
        ctx.noise_budget(c)
    paper, _ = he_paper4096
    with pytest.raises(HepixError, match=r"CKKS has no noise budget"):
        paper.noise_budget(paper.encrypt_vector(np.arange(4)))


def test_integer_presets_describe_their_plaintext_modulus():
    for name, bits in (("bfv-4096", 20), ("bgv-4096", 20), ("bfv-8192", 40), ("bgv-8192", 40)):
        p = preset(name)
        assert p.is_integer and p.plain_modulus_bits == bits and p.scale_bits == 0 and p.depth == 0
        assert f"t={bits} bits" in p.describe()
