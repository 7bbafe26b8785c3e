"""Complex packing (layout ``packed-complex``): two pixels per CKKS slot, the tile's top half in the
real parts and its bottom half in the imaginary parts, each with its own halo.  The same op chains
as the real packing (test_packed_ops.py) must give the same exact results, including watermarks
on the rows where the two halves meet (each lies in the other half's halo)."""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import COLOUR, GREY, assert_exact, op_chains, run_packed, usc_crop

from hecore.errors import InvalidParameters
from hecore.layouts.packed import (
    check_tile_fits,
    complex_halves,
    decrypt_tiles,
    default_tile,
    encrypt_tiles,
    join_halves,
)
from hecore.ops.matching import pair_partial
from hecore.ops.packed import PackedGeometry, apply_op
from hecore.ops.spec import Watermark, parse_match, parse_ops
from hecore.planner import plan, requirements
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

#: (tile_h, tile_w, halo): 20x30 with a halo of 2 (halves of 10 rows) and the preset's default
#: complex tile for a halo of 1 (60x62 at N=4096); neither divides 64.
TILINGS = [(20, 30, 2), default_tile(preset("paper-4096"), halo=1, complex_packing=True) + (1,)]


@pytest.fixture(scope="module")
def images():
    return {"grey": usc_crop(GREY), "colour": usc_crop(COLOUR)}


def _cases():
    out = []
    for th, tw, halo in TILINGS:
        seam = th // 2                     # first row of the bottom half of tile (0, 0)
        chains = op_chains(th, tw, halo) + [
            ("contrast1.5-mean3", ["contrast:1.5", "meanfilter:3"]),
            ("wm-seam-top-mean3", [f"watermark:7,{seam - 1},40", "meanfilter:3"]),
            ("wm-seam-bottom-mean3", [f"watermark:7,{seam},40", "meanfilter:3"]),
        ]
        for cid, specs in chains:
            for img in ("grey", "colour"):
                out.append(pytest.param(specs, img, (th, tw, halo), id=f"{cid}-{img}-{th}x{tw}h{halo}"))
    return out


def test_default_complex_tile_doubles_the_real_one():
    p = preset("paper-4096")
    assert default_tile(p, 1, complex_packing=True) == (60, 62)
    assert default_tile(p, 1) == (30, 62)
    check_tile_fits(p, 60, 62, 1, complex_packing=True)
    with pytest.raises(InvalidParameters, match="62x62 tile .* needs 2112 slots"):
        check_tile_fits(p, 62, 62, 1, complex_packing=True)
    with pytest.raises(InvalidParameters, match="height 59 is odd"):
        check_tile_fits(p, 59, 62, 1, complex_packing=True)
    with pytest.raises(InvalidParameters, match="needs CKKS.*bfv-4096"):
        check_tile_fits(preset("bfv-4096"), 60, 62, 1, complex_packing=True)


def test_halves_round_trip_in_plaintext():
    rng = np.random.default_rng(1)
    th, tw, halo = 8, 6, 2
    block = rng.integers(0, 256, size=(th + 2 * halo, tw + 2 * halo))
    z = complex_halves(block, halo)
    assert z.size == (th // 2 + 2 * halo) * (tw + 2 * halo)
    assert np.array_equal(join_halves(z, th, tw, halo), block[halo:halo + th, halo:halo + tw])


def test_round_trip_is_exact_and_holds_twice_the_pixels(he_paper4096, images):
    ctx, _ = he_paper4096
    img = images["colour"]
    th, tw = default_tile(ctx.params, 1, complex_packing=True)
    grid, tiles = encrypt_tiles(img, ctx, th, tw, 1, complex_packing=True)
    tiles = list(tiles)
    rh, rw = default_tile(ctx.params, 1)
    assert th * tw == 2 * rh * rw                            # twice the pixels per ciphertext
    assert len(tiles) == grid.rows * grid.cols * 3 == 12     # 64x64 RGB: 2x2 tiles (real packing: 3x2)
    raw = decrypt_tiles(ctx, grid, tiles)
    assert np.abs(raw - img).max() < 1e-3
    assert np.array_equal(np.rint(raw).astype(np.uint8), img)


@pytest.mark.parametrize("specs, img, tiling", _cases())
def test_complex_packing_matches_the_plaintext_reference(he_paper4096, images, specs, img, tiling):
    ctx, _ = he_paper4096
    run = run_packed(ctx, images[img], specs, *tiling, complex_packing=True)
    assert_exact(run, integer=False)
    assert run.max_error < 1e-3, run.report()


def test_a_watermark_on_the_seam_reaches_both_halves(he_paper4096, images):
    ctx, _ = he_paper4096
    img = images["grey"]
    th, tw, halo = 20, 30, 2
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, ctx, th, tw, halo, complex_packing=True)
    t = next(iter(tiles))                                  # tile (0, 0): rows 0..19, halves 0..9 | 10..19
    geom = PackedGeometry(th, tw, halo, t.y, t.x, grid.height, grid.width, complex_packing=True)
    c, _ = apply_op(ev, ev.load(t.ct), Watermark(7, 9, 90), geom, 1.0)
    z = ctx.decrypt_complex(ev.dump(c), geom.slots_used)
    for part, values in enumerate((np.rint(z.real), np.rint(z.imag))):
        sy, sx = geom.source_pixels(part)
        expected = img[sy, sx].astype(np.float64)
        expected[(sy == 9) & (sx == 7)] += 90
        assert np.array_equal(values, expected), f"part {part}"
    # row 9 is the top half's last core row and lies in the bottom half's halo: both have a copy
    assert ((geom.source_pixels(0)[0] == 9).any() and (geom.source_pixels(1)[0] == 9).any())


def test_matching_and_integer_schemes_refuse_complex_packing(he_paper4096):
    ctx, _ = he_paper4096
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_complex(np.zeros(8, dtype=complex)))
    geom = PackedGeometry(4, 4, 0, 0, 0, 4, 4, complex_packing=True)
    with pytest.raises(InvalidParameters, match="--layout packed"):
        pair_partial(ev, c, c, "l2", geom, 255.0, 1)
    with pytest.raises(InvalidParameters, match="complex-packed"):
        requirements([], "packed-complex", parse_match("match:q.png"))
    assert all(p.scheme == "ckks" for p in plan(parse_ops(["brightness:50"]), "packed-complex"))
    assert any(p.scheme == "bfv" for p in plan(parse_ops(["brightness:50"]), "packed"))
