"""The image operations on packed tiles (hecore.ops.packed), CKKS: decrypt(op(encrypt(img))) against
the plaintext reference, on 64x64 USC-SIPI crops, with tiles that do not divide the image.

BFV and BGV run the same matrix in test_integer_schemes.py.  Every exactness assertion carries
the exact fraction and the largest error before rounding in its message.
"""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import COLOUR, GREY, assert_exact, generate, op_chains, run_packed, usc_crop

from hecore.errors import InvalidParameters
from hecore.layouts.packed import check_tile_fits, default_tile, encrypt_tiles
from hecore.ops.packed import PackedGeometry, apply_op, apply_ops, check_packed_chain
from hecore.ops.spec import Brightness, MeanFilter, Watermark, parse_ops
from hecore.seal.evaluator import Evaluator, MissingEvaluationKeys
from hecore.seal.params import preset

#: (tile_h, tile_w, halo): 16x30 with a halo of 2 and the preset's default tile for a halo of 1
#: (30x62 at N=4096); neither divides 64.
TILINGS = [(16, 30, 2), default_tile(preset("paper-4096"), halo=1) + (1,)]


@pytest.fixture(scope="module")
def images():
    return {"grey": usc_crop(GREY), "colour": usc_crop(COLOUR)}


@pytest.fixture(scope="module")
def paper_no_rotations():
    """paper-4096 keys made without rotation keys (relinearisation key only)."""
    return generate("paper-4096", rotations=False)


def _cases():
    out = []
    for th, tw, halo in TILINGS:
        chains = op_chains(th, tw, halo) + [
            ("contrast1.5", ["contrast:1.5"]),
            ("contrast1.5-mean3", ["contrast:1.5", "meanfilter:3"]),
        ]
        for cid, specs in chains:
            for img in ("grey", "colour"):
                out.append(pytest.param(specs, img, (th, tw, halo), id=f"{cid}-{img}-{th}x{tw}h{halo}"))
    return out


def test_the_tilings_do_not_divide_the_image():
    assert TILINGS[1] == (30, 62, 1)
    for th, tw, _ in TILINGS:
        assert 64 % th or 64 % tw


@pytest.mark.parametrize("specs, img, tiling", _cases())
def test_packed_ckks_matches_the_plaintext_reference(he_paper4096, images, specs, img, tiling):
    ctx, _ = he_paper4096
    run = run_packed(ctx, images[img], specs, *tiling)
    assert_exact(run, integer=False)
    assert run.max_error < 1e-3, run.report()


@pytest.mark.parametrize("name", ["tenseal-8192", "match-8192"])
def test_packed_filters_are_exact_on_the_n8192_ckks_presets(images, name):
    # Regression: match-8192 had a special prime 22 bits smaller than its first data prime;
    # every rotation then added an error of up to ~1 at scale 2^40 and a 5x5 mean filter was
    # off by a whole grey level on ~0.1% of the pixels.
    ctx, _ = generate(name)
    for specs in (["meanfilter:5"], ["brightness:20", "watermark:39,23,5", "meanfilter:3", "contrast:0.5"]):
        run = run_packed(ctx, images["grey"], specs, 24, 40, 2)
        assert_exact(run, integer=False)
        assert run.raw_error < 0.01, run.report()


# --- the watermark reaches every copy of its pixel ---------------------------------------------

@pytest.mark.parametrize("x, y, copies", [
    (29, 15, 4),            # last pixel of tile (0, 0): its own slot and one in each of 3 neighbours' halos
    (0, 63, 9),             # bottom-left corner: its slot plus 8 clamped copies in the halo beyond the image
])
def test_a_watermark_reaches_every_copy_of_its_pixel(he_paper4096, images, x, y, copies):
    ctx, _ = he_paper4096
    img = images["grey"]
    th, tw, halo = 16, 30, 2
    ev = Evaluator(ctx)
    op = Watermark(x, y, 90)
    grid, tiles = encrypt_tiles(img, ctx, th, tw, halo)
    found = 0
    for t in tiles:
        geom = PackedGeometry(th, tw, halo, t.y, t.x, grid.height, grid.width)
        c, ps = apply_op(ev, ev.load(t.ct), op, geom, 1.0)
        assert ps == 1.0
        block = np.rint(ctx.decrypt_slots(ev.dump(c), geom.slots_used))
        sy, sx = geom.source_pixels()
        expected = img[sy, sx].astype(np.float64)
        hit = (sy == y) & (sx == x)
        expected[hit] += 90
        found += int(hit.sum())
        bad = np.flatnonzero(block != expected)
        assert bad.size == 0, (f"tile ({t.ty}, {t.tx}): slot {int(bad[0])} (source pixel "
                               f"({int(sx[bad[0]])}, {int(sy[bad[0]])})) is {block[bad[0]]}, expected "
                               f"{expected[bad[0]]}")
    assert found == copies


def test_a_mean_filter_after_a_watermark_in_the_halo_sees_every_copy(he_paper4096, images):
    # With V = 90 a missing halo copy would move the filtered neighbours by 10 grey levels.
    ctx, _ = he_paper4096
    for specs in (["watermark:29,15,90", "meanfilter:3"], ["watermark:0,63,90", "meanfilter:5"],
                  ["watermark:30,16,90", "meanfilter:4"]):
        run = run_packed(ctx, images["grey"], specs, 16, 30, 2)
        assert_exact(run, integer=False)


def test_a_watermark_outside_the_image_is_refused(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.zeros(16)))
    geom = PackedGeometry(4, 4, 0, 0, 0, 4, 4)
    with pytest.raises(ValueError, match=r"watermark:4,0,5.*outside the 4x4 image"):
        apply_op(ev, c, Watermark(4, 0, 5), geom, 1.0)


def test_a_watermark_elsewhere_leaves_the_tile_unchanged(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    values = np.arange(36, dtype=np.float64)
    c = ev.load(ctx.encrypt_vector(values))
    geom = PackedGeometry(4, 4, 1, 0, 0, 20, 20)          # block = pixels -1..4 clamped
    out, _ = apply_op(ev, c, Watermark(10, 10, 5), geom, 1.0)
    assert np.allclose(ctx.decrypt_slots(ev.dump(out), 36), values, atol=1e-3)
    out, _ = apply_op(ev, c, Watermark(4, 4, 5), geom, 1.0)     # in the halo: slot (5, 5) = 35
    got = np.rint(ctx.decrypt_slots(ev.dump(out), 36))
    assert got[35] == 40 and np.array_equal(got[:35], values[:35])


# --- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("done, ops", [
    ([], ["meanfilter:3", "meanfilter:3"]),
    ([], ["meanfilter:3", "brightness:5", "meanfilter:2"]),
    (["meanfilter:3"], ["meanfilter:2"]),
])
def test_a_second_mean_filter_is_refused(done, ops):
    with pytest.raises(InvalidParameters, match=r"at most one mean filter.*--layout pixel"):
        check_packed_chain(parse_ops(done), parse_ops(ops), halo=4)


def test_apply_ops_refuses_two_filters_before_doing_anything(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.zeros(64)))
    with pytest.raises(InvalidParameters, match=r"meanfilter:3, meanfilter:3"):
        apply_ops(ev, c, parse_ops(["meanfilter:3", "meanfilter:3"]), PackedGeometry(4, 4, 2, 0, 0, 4, 4))


@pytest.mark.parametrize("k, halo, need", [(2, 0, 1), (3, 0, 1), (4, 1, 2), (5, 1, 2), (7, 2, 3), (8, 3, 4)])
def test_a_halo_too_small_is_refused_naming_the_halo_needed(k, halo, need):
    with pytest.raises(InvalidParameters, match=rf"meanfilter:{k} reaches {need} .*halo of {halo}.*`--halo {need}`"):
        check_packed_chain([], [MeanFilter(k)], halo)
    check_packed_chain([], [MeanFilter(k)], need)           # exactly enough: accepted


def test_apply_op_alone_also_refuses_a_halo_too_small(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.zeros(64)))
    with pytest.raises(InvalidParameters, match=r"`--halo 2`"):
        apply_op(ev, c, MeanFilter(4), PackedGeometry(6, 6, 1, 0, 0, 6, 6), 1.0)


def test_a_mean_filter_without_rotation_keys_is_refused(paper_no_rotations, images):
    ctx, _ = paper_no_rotations
    assert ctx.public.rotate_key is None and ctx.public.relin_key is not None
    with pytest.raises(MissingEvaluationKeys, match=r"rotation \(Galois\) keys.*paper-4096"):
        run_packed(ctx, images["grey"], ["meanfilter:3"], 16, 30, 2)
    # what needs no rotation still works with these keys
    assert_exact(run_packed(ctx, images["grey"], ["brightness:50", "watermark:29,15,5"], 16, 30, 2),
                 integer=False)


# --- geometry -------------------------------------------------------------------------------------

def test_default_tiles_fill_the_slots_with_their_halo():
    for name in ("paper-4096", "tenseal-8192", "bfv-4096"):
        p = preset(name)
        for halo in (0, 1, 2):
            th, tw = default_tile(p, halo)
            assert (th + 2 * halo) * (tw + 2 * halo) == p.slots
            check_tile_fits(p, th, tw, halo)
            grown = rf"a {th + 1}x{tw} tile" + (rf" \(with a halo of {halo}: " if halo else " has")
            with pytest.raises(InvalidParameters, match=grown):
                check_tile_fits(p, th + 1, tw, halo)
    with pytest.raises(InvalidParameters, match=r"halo of 16 leaves no room"):
        default_tile(preset("paper-4096"), 16)


def test_geometry_of_an_edge_tile():
    g = PackedGeometry(16, 30, 2, 48, 30, 64, 64)
    assert (g.rows, g.cols, g.slots_used) == (20, 34, 680)
    assert (g.h, g.w) == (16, 30)
    g = PackedGeometry(16, 30, 2, 48, 60, 64, 64)
    assert (g.h, g.w) == (16, 4)
    assert g.core_slot == 2 * 34 + 2
    sy, sx = g.source_pixels()
    assert sy.min() == 46 and sy.max() == 63 and sx.min() == 58 and sx.max() == 63
    block = np.arange(g.slots_used).reshape(g.rows, g.cols)
    assert g.core(block).shape == (16, 4) and g.core(block)[0, 0] == g.core_slot


def test_brightness_needs_no_evaluation_keys(he_addonly2048):
    ctx, _ = he_addonly2048
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.full(16, 100.0)))
    out, ps = apply_ops(ev, c, [Brightness(-30.5)], PackedGeometry(4, 4, 0, 0, 0, 4, 4))
    assert ps == 1.0
    assert np.allclose(ctx.decrypt_slots(ev.dump(out), 16), 69.5, atol=1e-3)
