"""The packed layout's core: a tile per ciphertext, exact round trips, brightness on packed slots."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_dataset

from hecore.ciphertexts import CiphertextBatch
from hecore.errors import InvalidParameters
from hecore.images import load_image
from hecore.layouts.packed import check_tile_fits, decrypt_tiles, encrypt_tiles
from hecore.ops.pixel import add_constant
from hecore.quality import compare
from hecore.seal.params import preset


def test_a_64x64_grey_crop_round_trips_exactly_in_four_ciphertexts(he_paper4096):
    ctx, _ = he_paper4096
    img = load_image(shared_dataset("usc-sipi/5.1.12.tiff")).pixels[96:160, 96:160]
    grid, tiles = encrypt_tiles(img, ctx, 32, 32)
    tiles = list(tiles)
    assert len(tiles) == 4
    assert all(t.security == "ind-cpa" for t in tiles)
    q = compare(img, decrypt_tiles(ctx, grid, tiles))
    assert q.mse == 0 and q.exact_fraction == 1.0
    assert q.max_abs_err < 0.01


def test_rgb_with_tiles_that_do_not_divide_the_image_round_trips_exactly(he_addonly2048):
    ctx, _ = he_addonly2048
    img = np.random.default_rng(5).integers(0, 256, size=(21, 13, 3), dtype=np.uint8)
    grid, tiles = encrypt_tiles(img, ctx, 16, 8)
    tiles = list(tiles)
    assert len(tiles) == grid.count * 3
    q = compare(img, decrypt_tiles(ctx, grid, tiles))
    assert q.mse == 0 and q.exact_fraction == 1.0


def test_padding_slots_hold_the_replicated_border(he_addonly2048):
    ctx, _ = he_addonly2048
    img = np.arange(5 * 3, dtype=np.uint8).reshape(5, 3) * 10
    grid, tiles = encrypt_tiles(img, ctx, 8, 4)
    (tile,) = list(tiles)
    slots = np.rint(ctx.decrypt_slots(tile.ct, 32)).reshape(8, 4)
    assert np.array_equal(slots[:5, :3], img)
    assert np.array_equal(slots[5:, :3], np.repeat(img[-1:], 3, axis=0))   # bottom rows repeat the last
    assert np.array_equal(slots[:, 3], slots[:, 2])                        # right column repeats


def test_a_tile_larger_than_the_slots_is_refused_naming_a_preset_that_fits():
    with pytest.raises(InvalidParameters, match=r"64x64 tile has 4096 pixels .* 2048 slots.*tenseal-8192"):
        check_tile_fits(preset("paper-4096"), 64, 64)
    check_tile_fits(preset("paper-4096"), 32, 64)          # exactly 2048: fits


def test_brightness_on_packed_ciphertexts_adds_to_every_slot(he_addonly2048):
    ctx, _ = he_addonly2048
    img = np.random.default_rng(9).integers(0, 256, size=(16, 16), dtype=np.uint8)
    grid, tiles = encrypt_tiles(img, ctx, 16, 16)
    (tile,) = list(tiles)
    batch = CiphertextBatch.from_list([tile.ct], "fresh", "ind-cpa")
    brighter = add_constant(batch, ctx.ct_format, 50.0, 1.0, ctx.params.scale_bits)
    out = tile.with_ct(brighter[0])
    values = decrypt_tiles(ctx, grid, [out])
    assert np.array_equal(np.rint(values), img.astype(np.float64) + 50)
