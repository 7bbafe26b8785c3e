"""Binding a chain with the DFT filter (hecore/binding.py): keyed check values uniform in [-16, 16] in the
imaginary parts follow the filter -- a real linear map of each tile's block, evaluated with complex weights --
and decrypt compares every place of the block.  A ciphertext of another place passes with a probability the
chain and tile bound (``block_pass_log2``); the bound is checked against measured rates where it is large
enough to measure, and hundreds of swaps are caught where it is tiny; through the jobs, ``--for-op`` binds the
chain by default and a swap of two tiles of a flat image -- the same values -- is rejected as ``integrity``."""
from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore import binding
from hecore.layouts import Layout
from hecore.layouts.packed import encrypt_blocks
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import parse_ops, recorded_reference_known
from jobs.cli import main

PRESET = "dft-8192"
TILE = (64, 64)


def chain(cutoff: float, *before: str) -> list[str]:
    return [*before, f"dftfilter:lowpass={cutoff},tile={TILE[0]}x{TILE[1]}"]


def reference(specs):
    return functools.partial(recorded_reference_known, specs=specs, preset=PRESET)


@pytest.fixture(scope="module")
def he():
    from hecore.seal.context import HEContext
    from hecore.seal.params import preset

    ctx, _ = HEContext.generate(preset(PRESET))
    return ctx


@pytest.mark.parametrize("specs", [chain(0.05), chain(0.1), chain(1.0), chain(0.5, "brightness:20", "contrast:1.5")])
def test_the_check_values_follow_the_filter_as_the_key_alone_predicts(he, specs):
    from hecore.seal.evaluator import Evaluator

    key = binding.new_key()
    block = np.random.default_rng(3).integers(0, 256, TILE, dtype=np.uint8)
    checks = binding.check_values(key, "img", 0, 1, 2, TILE, binding.SPREAD)
    assert np.abs(checks).max() <= binding.SPREAD and checks.std() > binding.SPREAD / 2    # uniform, not signs
    ev = Evaluator(he)
    c = ev.load(bytes(encrypt_blocks(he, [block], 0, checks=[checks])[0]))
    c, post_scale = apply_ops(ev, c, parse_ops(specs), PackedGeometry(*TILE, 0, 64, 128, 128, 192))
    z = he.decrypt_complex(ev.dump(c), block.size).reshape(TILE)
    (want,) = binding.expected_blocks(key, [("img", 0, 1, 2)], tile=TILE, in_channels=1, reference=reference(specs),
                                      post_scales=[post_scale], spread=binding.SPREAD)
    error = np.abs(z.imag - want).max()
    assert 0 < error < binding.BLOCK_TOLERANCE / 10          # CKKS's error, 10 times below the tolerance
    owner = binding.Binding(key, {"img": 1}, spread=binding.SPREAD)
    assert owner.mismatches([("img", 0, 1, 2)], [z.imag], tile=TILE, halo=0, reference=reference(specs),
                            post_scales=[post_scale]) == [0]
    # the same ciphertext taken for another tile, channel or image misses nearly every place
    for place in (("img", 0, 1, 3), ("img", 0, 2, 2), ("rgb", 1, 1, 2), ("other", 0, 1, 2)):
        missed = binding.Binding(key, {"img": 1, "rgb": 3, "other": 1}, spread=binding.SPREAD).mismatches(
            [place], [z.imag], tile=TILE, halo=0, reference=reference(specs), post_scales=[post_scale])
        assert missed[0] > TILE[0] * TILE[1] // 2, place
    # the real parts are the filter's result as without check values
    plain = recorded_reference_known(block.astype(np.float64), specs, PRESET)
    assert np.abs(z.real * post_scale - plain).max() < 1e-2


@pytest.mark.parametrize("tile, cutoff, tolerance", [((4, 8), 0.3, 0.5), ((4, 8), 0.3, 1.0), ((4, 8), 0.5, 2.0)])
def test_the_bound_holds_where_it_is_large_enough_to_measure(tile, cutoff, tolerance):
    """A small block, few frequencies and a wide tolerance make passing likely enough to count (1 in 200 to 1 in
    3,000): over 4,000 ciphertexts of other places (check values independent of the place's), the rate stays
    under the bound (which is 30 to 150 times larger: it takes the densities at their peak, at a few places)."""
    ops = parse_ops([f"dftfilter:lowpass={cutoff},tile={tile[0]}x{tile[1]}"])
    bound = 2.0 ** binding.block_pass_log2(ops, tile, tolerance=tolerance)
    assert 1e-3 < bound < 1, bound
    rng = np.random.default_rng(5)
    trials = 4000
    place = rng.uniform(-binding.SPREAD, binding.SPREAD, (trials, *tile))
    other = rng.uniform(-binding.SPREAD, binding.SPREAD, (trials, *tile))
    mask = ops[0].mask(tile).reshape(tile)
    filtered = np.fft.ifft2(np.fft.fft2(place - other) * mask).real
    passed = int(np.sum(np.abs(filtered).max(axis=(1, 2)) <= tolerance))
    assert passed / trials <= bound + 3 * np.sqrt(bound / trials), (passed, trials, bound)


def test_the_default_tolerance_and_spread_bind_cutoffs_that_keep_a_handful_of_frequencies():
    bounds = {c: binding.block_pass_log2(parse_ops(chain(c)), TILE) for c in (0.02, 0.05, 0.1, 0.5, 1.414)}
    assert bounds[0.02] == 0.0                  # the mean alone: nothing a place's values are told apart by
    assert -20 < bounds[0.05] < -10             # 9 frequencies: 2^-16, too weak to bind by default
    assert all(bounds[c] <= -64 for c in (0.1, 0.5, 1.414)), bounds      # 37 frequencies and more: 2^-64 or less


@pytest.mark.parametrize("cutoff", [0.1, 0.5])
def test_hundreds_of_swapped_ciphertexts_are_caught(cutoff):
    """300 ciphertexts of other places (the same key: other tiles, channels, images) with CKKS-sized noise
    added: none passes, where the bound says 2^-64 or less."""
    specs = chain(cutoff)
    key, rng = binding.new_key(), np.random.default_rng(int(cutoff * 10))
    places = [(f"img{n % 7}", n % 3, n // 21, n % 5) for n in range(301)]
    found = binding.expected_blocks(key, places, tile=TILE, in_channels=1, reference=reference(specs),
                                    post_scales=[1.0] * len(places), spread=binding.SPREAD)
    noisy = [f + rng.normal(0, 1e-4, TILE) for f in found]
    owner = binding.Binding(key, {f"img{n}": 1 for n in range(7)}, spread=binding.SPREAD)
    honest = owner.mismatches(places, noisy, tile=TILE, halo=0, reference=reference(specs),
                              post_scales=[1.0] * len(places))
    assert honest == [0] * len(places)
    swapped = owner.mismatches(places[1:], noisy[:-1], tile=TILE, halo=0, reference=reference(specs),
                               post_scales=[1.0] * (len(places) - 1))
    assert min(swapped) > TILE[0] * TILE[1] // 2


def test_encrypt_binds_a_declared_dft_chain_by_default_where_the_bound_allows_it():
    from hecore.seal.params import preset
    from jobs.encrypt import block_binding, declared_chain

    keys = SimpleNamespace(params=preset(PRESET))

    def spread(cutoff, bind=False, no_bind=False, layout=Layout.PACKED):
        args = SimpleNamespace(for_op=[f"dftfilter:lowpass={cutoff}"], bind=bind, no_bind=no_bind)
        return block_binding(args, keys, layout, declared_chain(args), None, TILE, 0)

    value, bound = spread(0.5)
    assert value == binding.SPREAD and bound <= -64              # the bound's search stops at 2^-64
    assert spread(0.05) is None                                  # 2^-16: left unbound by default
    assert spread(0.05, bind=True)[0] == binding.SPREAD          # --bind: bound whatever the bound says
    assert -20 < spread(0.05, bind=True)[1] < -10
    assert spread(0.5, no_bind=True) is None
    assert spread(0.5, layout=Layout.PACKED_COMPLEX) is None     # no free imaginary parts


def test_encrypt_says_what_binds_the_run():
    from dataclasses import replace

    from jobs.encrypt import EncryptSettings

    plain = EncryptSettings(keys=None, layout=Layout.PACKED, tile=TILE, halo=0, strategy="fresh", strategy_options={},
                            use_secret=False, compression="none", store=None, spots=(1380, 1, 0.0))
    assert plain.binding_label == "not bound to their places (the spot checks only)"
    assert replace(plain, spots=None).binding_label == "not bound to their places, not spot-checked"
    over_tiles = replace(plain, bind=True, bind_spread=binding.SPREAD)
    assert over_tiles.binding_label == "bound by check values over whole tiles"
    assert replace(over_tiles, bind_bound=-16.3).binding_label == (
        "bound by check values over whole tiles (a ciphertext of another place passes with probability 2^-16.3)")
    assert replace(over_tiles, bind_bound=-70.2).binding_label.endswith("probability 2^-64 or less)")
    assert replace(plain, bind=True).binding_label == "bound by check values"
    assert replace(plain, bind_unit=0.25).binding_label == "bound by keyed offsets"
    assert replace(plain, bind_table=bytes(range(256))).binding_label == "bound by keyed check slots"


SPARK = ["--master", "local[1]", "--quiet"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("dftbound")
    images = root / "images"
    images.mkdir()
    Image.fromarray(np.full((128, 64), 90, np.uint8)).save(images / "flat.png")              # two tiles
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(images / "rgb.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", PRESET) == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", "--for-op",
                 "dftfilter:lowpass=0.5", *SPARK) == 0
    assert hepix("process", "--keys", root / "pub", "--input", root / "enc", "--out", root / "proc",
                 "--op", "dftfilter:lowpass=0.5", *SPARK) == 0
    return root


@pytest.mark.spark
def test_a_declared_dft_chain_is_bound_by_default_and_an_honest_run_passes(run, tmp_path):
    options = json.loads((run / "enc" / "_manifest.json").read_text())["options"]
    assert options["bound"] is True and options["settings"]["bind_spread"] == binding.SPREAD
    assert hepix("decrypt", "--keys", run / "keys", "--input", run / "proc", "--out", tmp_path / "d",
                 "--owner", run / "enc.owner", "--images", run / "images", *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["max_abs_err"] < 0.05 for r in rows), rows
    assert ds.dataset(tmp_path / "d" / "rejects").to_table().num_rows == 0


@pytest.mark.spark
def test_tiles_of_a_flat_image_swapped_after_the_filter_are_rejected(run, tmp_path):
    from hostile import swap_flat_tiles

    forged = tmp_path / "forged"
    flat = swap_flat_tiles(run / "proc", forged, channels=1, first=(0, 0, 0), second=(0, 1, 0))   # the same values
    assert hepix("decrypt", "--keys", run / "keys", "--input", forged, "--out", tmp_path / "d", "--owner",
                 run / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "d" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    assert f"of its {TILE[0] * TILE[1]} check values under the encryption differ" in rejects[0]["detail"]
