"""hecore.ops.matching: encrypted distances between two 64x64 USC-SIPI crops.

L2² must be exact (BFV/BGV: bit for bit; CKKS tenseal-8192: after rounding); L1 on match-8192
must equal the plaintext evaluation of the same polynomial (relative 1e-6) and lie within the
polynomial's stated error of the exact L1.  Packed tiles (one and several per image, tiles that
do not divide the image) and the pixel layout (one value per ciphertext, ``geom=None``).
"""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import GREY, GREY_OTHER, generate, packed_distance, usc_crop

from hecore.errors import InvalidParameters
from hecore.ops.matching import (
    L1_POLY,
    check_match_params,
    distance_scale,
    l1_poly,
    l1_poly_error,
    pair_partial,
    plain_distances,
    plain_l1_approx,
)
from hecore.ops.spec import METRICS, Match, parse_match, reference
from hecore.planner import check
from hecore.seal.evaluator import Evaluator

#: (tile_h, tile_w, halo): the N=8192 default (the whole crop, one tile) and 24x40 tiles (six
#: partials, the last row and column of them partly outside the image).
ONE_TILE = (64, 64, 0)
SIX_TILES = (24, 40, 1)


@pytest.fixture(scope="module")
def crops():
    """The query and two others: a different picture and the same picture shifted by (4, 2)."""
    return {"a": usc_crop(GREY), "other": usc_crop(GREY_OTHER), "shifted": usc_crop(GREY, y=100, x=98)}


@pytest.fixture(scope="module")
def contexts():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = generate(name)
        return cache[name]
    return get


def _plain(crops, b, specs=(), bound=None):
    from hecore.ops.spec import parse_ops
    ops = parse_ops(list(specs))
    return plain_distances(reference(crops["a"], ops), reference(crops[b], ops), bound)


# --- L2² -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bfv-8192", "bgv-8192", "tenseal-8192"])
@pytest.mark.parametrize("tiling", [ONE_TILE, SIX_TILES], ids=["one-tile", "six-tiles"])
@pytest.mark.parametrize("b", ["other", "shifted"])
def test_l2_is_exact(contexts, crops, name, tiling, b):
    ctx, _ = contexts(name)
    got = packed_distance(ctx, crops["a"], crops[b], "l2", *tiling)
    want = _plain(crops, b)["l2"]
    assert want == int(want) and want > 0
    assert got["parts"] == (1 if tiling == ONE_TILE else 6)
    msg = f"{name}: encrypted L2² {got['distance']!r}, plain {want!r}"
    if ctx.params.is_integer:
        assert got["distance"] == want, msg
    else:
        assert abs(got["distance"] - want) < 0.25, msg
        assert round(got["distance"]) == want, msg


@pytest.mark.parametrize("name", ["bfv-8192", "tenseal-8192"])
def test_l2_after_ops_is_exact_in_raw_units(contexts, crops, name):
    # After meanfilter:3 the raw values are 9x the true ones: the raw sum is an integer, 81x the L2².
    ctx, _ = contexts(name)
    specs = ("brightness:20", "meanfilter:3")
    got = packed_distance(ctx, crops["a"], crops["other"], "l2", *SIX_TILES, specs=specs)
    assert got["post_scale"] == pytest.approx(1 / 9)
    want = _plain(crops, "other", specs)["l2"]
    raw_want = want * 81
    assert abs(raw_want - round(raw_want)) < 1e-3
    raw_got = got["distance"] * 81
    msg = f"{name}: encrypted L2² {got['distance']!r}, plain {want!r}"
    if ctx.params.is_integer:
        assert raw_got == pytest.approx(round(raw_want), abs=1e-6), msg
    else:
        assert round(raw_got) == round(raw_want), msg


def test_l2_of_an_image_with_itself_is_zero(contexts, crops):
    ctx, _ = contexts("bfv-8192")
    assert packed_distance(ctx, crops["a"], crops["a"], "l2", *ONE_TILE)["distance"] == 0


# --- L1 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("tiling", [ONE_TILE, SIX_TILES], ids=["one-tile", "six-tiles"])
@pytest.mark.parametrize("b", ["other", "shifted"])
def test_l1_equals_the_polynomial_and_lies_within_its_error_of_the_exact_l1(contexts, crops, tiling, b):
    ctx, _ = contexts("match-8192")
    got = packed_distance(ctx, crops["a"], crops[b], "l1", *tiling)
    assert got["bound"] == 255
    plain = _plain(crops, b, bound=got["bound"])
    rel = abs(got["distance"] - plain["l1_poly"]) / plain["l1_poly"]
    assert rel < 1e-6, f"encrypted L1 {got['distance']!r}, polynomial {plain['l1_poly']!r}, relative {rel:.3g}"
    pixels = crops["a"].size
    slack = l1_poly_error() * got["bound"] * pixels
    assert abs(got["distance"] - plain["l1"]) <= slack, \
        f"encrypted L1 {got['distance']!r}, exact {plain['l1']!r}, allowed {slack!r}"


@pytest.mark.parametrize("specs", [("brightness:20", "meanfilter:3"), ("meanfilter:5",)])
def test_l1_after_a_mean_filter(contexts, crops, specs):
    # Regression: on the old match-8192 (scale 2^40, 38-bit special prime) meanfilter:5 overflowed
    # the modulus after the two squarings (the distance came out 55% low), and rotations were noisy.
    ctx, _ = contexts("match-8192")
    got = packed_distance(ctx, crops["a"], crops["other"], "l1", 24, 40, 2, specs=specs)
    true_bound = got["bound"] * got["post_scale"]           # D in true-value units
    plain = _plain(crops, "other", specs, bound=true_bound)
    rel = abs(got["distance"] - plain["l1_poly"]) / plain["l1_poly"]
    assert rel < 1e-6, f"encrypted L1 {got['distance']!r}, polynomial {plain['l1_poly']!r}, relative {rel:.3g}"
    assert abs(got["distance"] - plain["l1"]) <= l1_poly_error() * true_bound * crops["a"].size


def test_the_l1_polynomial_and_its_error():
    c0, c1, c2 = L1_POLY
    t = np.linspace(-1, 1, 2001)
    assert np.allclose(l1_poly(t), c0 + c1 * t ** 2 + c2 * t ** 4)
    err = l1_poly_error()
    assert 0.01 < err < 0.2                                  # a quartic stand-in for |t|: ~0.13
    assert np.max(np.abs(np.abs(t) - l1_poly(t))) <= err + 1e-12
    d = np.array([[-255.0, 0.0], [10.0, 100.0]])
    assert plain_l1_approx(d, 255) == pytest.approx(float(np.sum(l1_poly(d / 255)) * 255))


def test_plain_distances():
    a = np.array([[0, 10], [20, 30]], dtype=np.uint8)
    b = np.array([[3, 10], [16, 30]], dtype=np.uint8)
    assert plain_distances(a, b) == {"l2": 25.0, "l1": 7.0}
    assert set(plain_distances(a, b, 255)) == {"l2", "l1", "l1_poly"}
    with pytest.raises(ValueError, match=r"shapes \(2, 2\) and \(2, 1\)"):
        plain_distances(a, b[:, :1])


# --- the pixel layout: one value per ciphertext, geom=None --------------------------------------------

def test_pixel_layout_partials_sum_to_the_l2(contexts):
    ctx, _ = contexts("tenseal-8192")
    ev = Evaluator(ctx)
    a = np.array([0, 255, 17, 128, 200, 3, 99], dtype=np.float64)
    b = np.array([255, 0, 20, 128, 1, 250, 98], dtype=np.float64)
    parts = len(a)
    partials = [pair_partial(ev, ev.load(ctx.encrypt_value(x)), ev.load(ctx.encrypt_value(y)), "l2", None, 255.0, parts)
                for x, y in zip(a, b)]
    raw = ctx.decrypt_slots(ev.add_many(partials), 1)[0]
    dist = raw * distance_scale("l2", 1.0, 255.0, parts, False)
    want = float(np.sum((a - b) ** 2))
    assert round(dist) == want and abs(dist - want) < 0.05, f"{dist!r} != {want!r}"


def test_pixel_layout_partials_sum_to_the_l1_polynomial(contexts):
    ctx, _ = contexts("match-8192")
    ev = Evaluator(ctx)
    a = np.array([0, 255, 17, 128, 200], dtype=np.float64)
    b = np.array([255, 0, 20, 128, 1], dtype=np.float64)
    partials = [pair_partial(ev, ev.load(ctx.encrypt_value(x)), ev.load(ctx.encrypt_value(y)), "l1", None, 255.0, 5)
                for x, y in zip(a, b)]
    dist = ctx.decrypt_slots(ev.add_many(partials), 1)[0] * distance_scale("l1", 1.0, 255.0, 5, False)
    want = plain_l1_approx(a - b, 255.0)
    assert dist == pytest.approx(want, rel=1e-6)


def test_pair_partial_refuses_an_unknown_metric(contexts):
    ctx, _ = contexts("tenseal-8192")
    ev = Evaluator(ctx)
    a, b = ev.load(ctx.encrypt_value(1.0)), ev.load(ctx.encrypt_value(2.0))
    with pytest.raises(ValueError, match=r"unknown metric 'l3'"):
        pair_partial(ev, a, b, "l3", None, 255.0, 1)


@pytest.mark.parametrize("name, metric", [("tenseal-8192", "l2"), ("match-8192", "l1"), ("match-8192", "l2"),
                                          ("bfv-8192", "l2"), ("bgv-8192", "l2")])
def test_byte_identical_ciphertexts_have_distance_zero(contexts, name, metric):
    # Equal pixels of a deterministic (leaky, pixel-layout) strategy are byte-identical; their
    # difference is an exact zero, which SEAL refuses to hold as a ciphertext ("transparent").
    ctx, _ = contexts(name)
    ev = Evaluator(ctx)
    ct = ctx.encrypt_value(77.0)
    a, b = ev.load(ct), ev.load(ct)
    other = pair_partial(ev, ev.load(ctx.encrypt_value(70.0)), ev.load(ctx.encrypt_value(77.0)), metric,
                         None, 255.0, 2)
    same = pair_partial(ev, a, b, metric, None, 255.0, 2)
    raw = ctx.decrypt_slots(ev.add_many([same, other]), 1)[0]
    dist = raw * distance_scale(metric, 1.0, 255.0, 2, ctx.params.is_integer)
    want = 49.0 if metric == "l2" else plain_l1_approx(np.array([0.0, -7.0]), 255.0)
    assert dist == pytest.approx(want, rel=1e-6, abs=1e-6 if ctx.params.is_integer else 1e-3), (dist, want)


def test_distance_scale():
    assert distance_scale("l2", 1 / 9, 2295, 6, False) == pytest.approx(6 / 81)
    assert distance_scale("l2", 1 / 9, 2295, 6, True) == pytest.approx(1 / 81)
    assert distance_scale("l1", 0.5, 255, 4, False) == pytest.approx(255 * 0.5 * 4)


# --- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, pattern", [
    ("bfv-8192", r"bfv-8192 \(BFV, integers mod t\) cannot evaluate.*match-8192"),
    ("bgv-8192", r"bgv-8192 \(BGV, integers mod t\) cannot evaluate.*match-8192"),
    ("tenseal-8192", r"match:q,l1 needs 3 levels but tenseal-8192 affords 2; use match-8192"),
])
def test_l1_is_refused_where_it_cannot_run(contexts, name, pattern):
    ctx, _ = contexts(name)
    ev = Evaluator(ctx)
    with pytest.raises(InvalidParameters, match=pattern):
        check_match_params(ev, parse_match("match:q,l1"))
    check_match_params(ev, parse_match("match:q,l2"))       # L2 is fine on all three
    with pytest.raises(InvalidParameters, match=rf"cannot run on {name}: .*--preset match-8192"):
        check(ctx.params, [], "packed", parse_match("match:q,l1"))


def test_matching_without_a_relinearisation_key_is_refused(he_addonly2048):
    ctx, _ = he_addonly2048
    with pytest.raises(InvalidParameters, match=r"addonly-2048 has no relinearisation key.*tenseal-8192"):
        check_match_params(Evaluator(ctx), parse_match("match:q,l2"))


def test_match_8192_accepts_both_metrics(contexts):
    ctx, _ = contexts("match-8192")
    check_match_params(Evaluator(ctx), parse_match("match:q"))
    check(ctx.params, [], "packed", parse_match("match:q"))


# --- parse_match ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, query, metrics", [
    ("match:img1", "img1", ("l2", "l1")),
    ("match:img1,l2", "img1", ("l2",)),
    ("match:img1,l1", "img1", ("l1",)),
    ("match:img1,l1,l2", "img1", ("l2", "l1")),
    ("match:img1, l2, l2", "img1", ("l2",)),
    ("MATCH:usc-sipi/5.1.12.tiff,L1", "usc-sipi/5.1.12.tiff", ("l1",)),
    ("  match: 0a1b2c ,l2  ", "0a1b2c", ("l2",)),
])
def test_parse_match_forms(spec, query, metrics):
    m = parse_match(spec)
    assert m == Match(query, metrics)
    assert parse_match(m.spec) == m
    assert m.depth == (3 if "l1" in metrics else 1)


@pytest.mark.parametrize("spec", ["match:", "match", "match:q,l3", "match:q,,l2", "match:q,l2,", "matches:q",
                                  "brightness:5", "", None, 5])
def test_parse_match_errors(spec):
    with pytest.raises(ValueError, match=r"bad match spec .*expected 'match:QUERY'"):
        parse_match(spec)


def test_match_spec_spells_the_default_metrics_briefly():
    assert Match("q").spec == "match:q" and Match("q").metrics == METRICS
    assert Match("q", ("l1",)).spec == "match:q,l1"
