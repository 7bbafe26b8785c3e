"""Tests of hecore.layouts.pixel: encrypting an image tile by tile, channel by channel, and back."""
from __future__ import annotations

import numpy as np
import pytest

from hecore.encrypt.strategies import make_strategy
from hecore.layouts.pixel import decrypt_tiles, encrypt_tiles
from hecore.layouts.tiling import EncryptedTile


@pytest.fixture(scope="module")
def fresh(he_addonly2048):
    ctx, _ = he_addonly2048
    return make_strategy("fresh", ctx)


@pytest.fixture(scope="module")
def full(he_addonly2048):
    ctx, _ = he_addonly2048
    return make_strategy("full", ctx, allow_leaky=True, pool_size=4).prepare()


class _CountingStrategy:
    """Wraps a strategy and counts ``encrypt`` calls (and the values they were given)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0
        self.sizes: list[int] = []

    def encrypt(self, values, **kwargs):
        self.calls += 1
        self.sizes.append(np.asarray(values).size)
        return self.inner.encrypt(values, **kwargs)


def _grey(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(h, w), dtype=np.uint8)


def _rgb(h, w, seed=1):
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


# --- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["fresh", "full"])
def test_grey_image_with_a_non_dividing_tile_size_round_trips_exactly(strategy, request, he_addonly2048):
    ctx, _ = he_addonly2048
    img = _grey(10, 7)
    grid, tiles = encrypt_tiles(img, request.getfixturevalue(strategy), 4, 4)
    assert (grid.rows, grid.cols) == (3, 2)
    out = decrypt_tiles(ctx, grid, tiles)
    assert out.shape == img.shape
    assert np.array_equal(np.rint(out), img)
    assert np.max(np.abs(out - img)) < 0.01


def test_rgb_image_with_a_non_dividing_tile_size_round_trips_exactly(fresh, he_addonly2048):
    ctx, _ = he_addonly2048
    img = _rgb(10, 7)
    grid, tiles = encrypt_tiles(img, fresh, 4, 4)
    out = decrypt_tiles(ctx, grid, tiles)
    assert out.shape == img.shape
    assert np.array_equal(np.rint(out), img)


def test_round_trip_with_reuse_buffer(full, he_addonly2048):
    # each tile's batch is only valid until the next one: decrypt_tiles consumes them in turn
    ctx, _ = he_addonly2048
    img = _grey(9, 9, seed=3)
    grid, tiles = encrypt_tiles(img, full, 4, 4, reuse_buffer=True)
    assert np.array_equal(np.rint(decrypt_tiles(ctx, grid, tiles)), img)


def test_tiles_may_be_decrypted_in_any_order(full, he_addonly2048):
    ctx, _ = he_addonly2048
    img = _rgb(6, 5, seed=4)
    grid, tiles = encrypt_tiles(img, full, 4, 4)
    shuffled = list(tiles)[::-1]
    assert np.array_equal(np.rint(decrypt_tiles(ctx, grid, shuffled)), img)


# --- what is produced ----------------------------------------------------------------------

def test_border_tiles_hold_only_their_valid_pixels(full):
    img = _grey(10, 7)
    grid, tiles = encrypt_tiles(img, full, 4, 4)
    produced = list(tiles)
    assert len(produced) == grid.count == 6
    by_pos = {(t.ty, t.tx): t for t in produced}
    assert (by_pos[(0, 0)].h, by_pos[(0, 0)].w) == (4, 4)
    assert (by_pos[(0, 1)].h, by_pos[(0, 1)].w) == (4, 3)
    assert (by_pos[(2, 0)].h, by_pos[(2, 0)].w) == (2, 4)
    assert (by_pos[(2, 1)].h, by_pos[(2, 1)].w, by_pos[(2, 1)].y, by_pos[(2, 1)].x) == (2, 3, 8, 4)
    for t in produced:
        assert len(t.batch) == t.h * t.w     # no ciphertexts for padding pixels


def test_rgb_gives_three_pixel_tiles_per_tile_for_channels_0_1_2(full):
    img = _rgb(10, 7)
    grid, tiles = encrypt_tiles(img, full, 4, 4)
    produced = list(tiles)
    assert all(isinstance(t, EncryptedTile) for t in produced)
    assert len(produced) == 3 * grid.count
    channels: dict[tuple[int, int], list[int]] = {}
    for t in produced:
        channels.setdefault((t.ty, t.tx), []).append(t.channel)
    assert set(channels) == {(ty, tx) for ty in range(3) for tx in range(2)}
    assert all(c == [0, 1, 2] for c in channels.values())


def test_grey_gives_one_pixel_tile_per_tile_on_channel_0(full):
    grid, tiles = encrypt_tiles(_grey(10, 7), full, 4, 4)
    produced = list(tiles)
    assert len(produced) == grid.count
    assert {t.channel for t in produced} == {0}


def test_each_channel_batch_holds_that_channels_pixels_row_major(full, he_addonly2048):
    ctx, _ = he_addonly2048
    img = _rgb(5, 6, seed=7)
    _, tiles = encrypt_tiles(img, full, 4, 4)
    for t in tiles:
        expected = img[t.y:t.y + t.h, t.x:t.x + t.w, t.channel].reshape(-1)
        assert np.array_equal(np.rint(ctx.decrypt_pixels(t.batch)), expected)


# --- laziness ----------------------------------------------------------------------------

def test_iterator_is_lazy_first_tile_does_not_encrypt_the_others(full):
    counting = _CountingStrategy(full)
    grid, tiles = encrypt_tiles(_grey(10, 7), counting, 4, 4)
    assert counting.calls == 0                 # nothing encrypted before iteration
    first = next(tiles)
    assert counting.calls == 1
    assert counting.sizes == [first.h * first.w]
    rest = list(tiles)
    assert counting.calls == grid.count == 1 + len(rest)


def test_iterator_is_lazy_per_channel(full):
    counting = _CountingStrategy(full)
    grid, tiles = encrypt_tiles(_rgb(10, 7), counting, 4, 4)
    first = next(tiles)
    assert (first.channel, counting.calls) == (0, 1)
    second = next(tiles)
    assert (second.ty, second.tx, second.channel, counting.calls) == (first.ty, first.tx, 1, 2)


def test_producing_the_first_tile_encrypts_only_its_pixels(fresh, he_addonly2048, monkeypatch):
    ctx, _ = he_addonly2048
    calls = []
    original = ctx.encrypt_value
    monkeypatch.setattr(ctx, "encrypt_value", lambda v: (calls.append(v), original(v))[1])
    img = _grey(10, 7)
    _, tiles = encrypt_tiles(img, fresh, 4, 4)
    assert calls == []
    next(tiles)
    assert calls == img[:4, :4].reshape(-1).astype(float).tolist()
