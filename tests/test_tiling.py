"""Tests of hecore.layouts.tiling: exact round trips, edge padding, untile checks, tile specs."""
from __future__ import annotations

import numpy as np
import pytest

from hecore.layouts.tiling import Tile, TileGrid, parse_tile_spec, tile_image, untile

RNG = np.random.default_rng(7)
GREY = RNG.integers(0, 256, (10, 13), dtype=np.uint8)
COLOUR = RNG.integers(0, 256, (10, 13, 3), dtype=np.uint8)


@pytest.mark.parametrize("pixels", [GREY, COLOUR], ids=["L", "RGB"])
@pytest.mark.parametrize("tile", [(5, 13), (2, 1), (4, 5), (3, 7), (16, 16), (1, 1)])
def test_round_trip_exact(pixels, tile):
    grid, tiles = tile_image(pixels, *tile)
    out = untile(grid, tiles)
    assert out.dtype == pixels.dtype
    np.testing.assert_array_equal(out, pixels)


def test_grid_geometry_uneven():
    grid, tiles = tile_image(COLOUR, 4, 5)
    assert (grid.rows, grid.cols, grid.count) == (3, 3, 9)
    assert (grid.padded_height, grid.padded_width, grid.channels) == (12, 15, 3)
    assert len(tiles) == 9


def test_grid_geometry_even():
    grid, _ = tile_image(GREY, 5, 13)
    assert (grid.rows, grid.cols, grid.padded_height, grid.padded_width, grid.channels) == (2, 1, 10, 13, 1)


def test_tiles_row_major_with_positions_and_valid_extent():
    _, tiles = tile_image(GREY, 4, 5)
    assert [(t.ty, t.tx) for t in tiles[:4]] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    last = tiles[-1]
    assert (last.y, last.x, last.h, last.w) == (8, 10, 2, 3)
    assert all(t.pixels.shape == (4, 5) for t in tiles)


def test_edge_padding_repeats_border_pixels():
    _, tiles = tile_image(GREY, 4, 5)
    last = tiles[-1]  # covers rows 8..11 and columns 10..14 of a 10x13 image
    np.testing.assert_array_equal(last.pixels[:2, :3], GREY[8:, 10:])
    np.testing.assert_array_equal(last.pixels[2:, :3], np.broadcast_to(GREY[9, 10:], (2, 3)))
    np.testing.assert_array_equal(last.pixels[:2, 3:], np.broadcast_to(GREY[8:, 12:13], (2, 2)))
    assert (last.pixels[2:, 3:] == GREY[9, 12]).all()


def test_edge_padding_rgb_keeps_channels():
    _, tiles = tile_image(COLOUR, 3, 3)
    corner = tiles[-1]  # rows 9..11, columns 12..14
    assert corner.pixels.shape == (3, 3, 3)
    assert (corner.pixels == COLOUR[9, 12]).all()


def test_untile_float_tiles_any_order():
    grid, tiles = tile_image(GREY, 3, 4)
    floats = [Tile(t.ty, t.tx, t.y, t.x, t.h, t.w, t.pixels.astype(np.float64) + 0.5) for t in tiles]
    out = untile(grid, reversed(floats))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, GREY + 0.5)


def test_untile_missing_tile_named():
    grid, tiles = tile_image(GREY, 4, 5)
    with pytest.raises(ValueError, match=r"missing tiles \(1, 2\)"):
        untile(grid, [t for t in tiles if (t.ty, t.tx) != (1, 2)])


def test_untile_duplicate_tile_named():
    grid, tiles = tile_image(GREY, 4, 5)
    with pytest.raises(ValueError, match=r"duplicated tiles \(0, 1\)"):
        untile(grid, tiles + [tiles[1]])


def test_untile_tile_outside_grid_named():
    grid, tiles = tile_image(GREY, 4, 5)
    extra = Tile(5, 0, 20, 0, 4, 5, tiles[0].pixels)
    with pytest.raises(ValueError, match=r"outside.*\(5, 0\)"):
        untile(grid, tiles + [extra])


def test_untile_wrong_tile_shape():
    grid, tiles = tile_image(GREY, 4, 5)
    tiles[0] = Tile(0, 0, 0, 0, 4, 5, tiles[0].pixels[:3])
    with pytest.raises(ValueError, match=r"\(0, 0\) has shape \(3, 5\)"):
        untile(grid, tiles)


def test_untile_empty_list_names_missing():
    grid = TileGrid(2, 2, 1, 1, 1)
    with pytest.raises(ValueError, match=r"missing tiles \(0, 0\), \(0, 1\), \(1, 0\), \(1, 1\)"):
        untile(grid, [])


@pytest.mark.parametrize("bad", [(0, 4), (4, 0), (-1, 2), (2.5, 2)])
def test_tile_sizes_validated(bad):
    with pytest.raises(ValueError, match="tile_"):
        tile_image(GREY, *bad)


def test_tile_image_rejects_other_shapes():
    with pytest.raises(ValueError, match=r"\(H, W\)"):
        tile_image(np.zeros((4, 4, 4), np.uint8), 2, 2)


@pytest.mark.parametrize("spec, expected", [("16x16", (16, 16)), ("16", (16, 16)),
                                            ("8x32", (8, 32)), (" 4 X 2 ", (4, 2))])
def test_parse_tile_spec(spec, expected):
    assert parse_tile_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "x", "16x", "x16", "0x4", "4x0", "-4", "4x4x4", "a", "4.5", "4*4"])
def test_parse_tile_spec_rejects_bad(spec):
    with pytest.raises(ValueError, match="tile spec"):
        parse_tile_spec(spec)
