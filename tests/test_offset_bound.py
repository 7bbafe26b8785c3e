"""What a ciphertext of another place passes the keyed offsets' check with (hecore.binding.offset_pass_log2):
1/2 at every checked result under CKKS, (range + 1) / t under BFV/BGV, independently for every one of them --
not only for the results whose windows are disjoint.  Each checked result has an input no result before it in
row-major order has (the last of its window, at the least 2-adic weight or at a nonzero weight mod t), so the
checked results' parities have full rank over GF(2), and their sums full rank over GF(t).  Shown here by the
ranks themselves, and by the rate at which another place's offsets pass on tiles small enough to measure it."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from hecore import binding
from hecore.ops.spec import parse_ops, raw_range
from jobs.cli import main

PROBE = 33      # hecore.binding's probe image: the chain's weights around its centre


def weights_of(chain: list[str]) -> list[np.ndarray]:
    """The chain's integer weights in grid steps, one ``PROBE x PROBE x outputs`` array per input channel."""
    weights = binding._grid_weights(parse_ops(chain))
    assert weights is not None, chain
    return weights


def result_rows(coefficients: list[np.ndarray], tile: tuple[int, int], halo: int) -> list[dict]:
    """For each output channel and each checked result of ``tile`` (row-major), its inputs ``(output channel,
    channel, row, column)`` of the block (tile and halo) with their coefficients: ``coefficients``, one
    ``PROBE x PROBE x outputs`` array per input channel, an input's at its offset from the probe's centre."""
    every = binding.check_stride(tile)
    centre = PROBE // 2
    rows = []
    for k in range(coefficients[0].shape[2]):
        taps = [(c, int(dy), int(dx), int(a[dy, dx, k])) for c, a in enumerate(coefficients)
                for dy, dx in zip(*np.nonzero(a[:, :, k]))]
        for i in range(0, tile[0], every):
            for j in range(0, tile[1], every):
                rows.append({(k, c, halo + i - dy + centre, halo + j - dx + centre): coefficient
                             for c, dy, dx, coefficient in taps})
    return rows


def rank_mod(rows: list[dict], modulus: int) -> int:
    """The rank over GF(modulus) (a prime) of ``rows``, each a sparse row ``{column: coefficient}``."""
    pivots: dict = {}
    rank = 0
    for row in rows:
        row = {c: v % modulus for c, v in row.items() if v % modulus}
        while row:
            top = max(row)
            if top not in pivots:
                inverse = pow(row[top], -1, modulus)
                pivots[top] = {c: v * inverse % modulus for c, v in row.items()}
                rank += 1
                break
            factor = row[top]
            for c, v in pivots[top].items():
                row[c] = (row.get(c, 0) - factor * v) % modulus
                if not row[c]:
                    del row[c]
    return rank


CHAINS = [(["brightness:20"], 0), (["meanfilter:3"], 1), (["meanfilter:5"], 2), (["conv:sharpen"], 1),
          (["conv:gauss3"], 1), (["conv:sobel-x"], 1), (["grey", "conv:gauss5"], 2),
          (["meanfilter:3", "meanfilter:3"], 2), (["watermark:2,2,255", "conv:laplace"], 1)]
TILES = [(1, 1), (2, 3), (5, 4), (7, 9), (32, 40)]       # the last is checked at every other row and column


def parities(chain: list[str]) -> list[np.ndarray]:
    """Per input channel, which inputs' differing offsets move a result by half a step (CKKS): the weights of
    the least 2-adic valuation."""
    weights = weights_of(chain)
    least = binding._least_valuation(weights)
    return [(w >> least) & 1 for w in weights]


@pytest.mark.parametrize("chain, halo", CHAINS)
def test_every_checked_result_s_parity_is_independent_over_gf2(chain, halo):
    outputs = weights_of(chain)[0].shape[2]
    for tile in TILES:
        rows = result_rows(parities(chain), tile, halo)
        assert len(rows) == binding.checked_results(tile) * outputs
        assert rank_mod(rows, 2) == len(rows), (chain, tile)
        assert binding.offset_pass_log2(parse_ops(chain), tile) == -binding.checked_results(tile)


@pytest.mark.parametrize("chain, halo", [(["meanfilter:3"], 1), (["conv:sobel-x"], 1), (["grey"], 0),
                                         (["grey", "conv:gauss3"], 1)])
def test_every_checked_result_s_sum_is_independent_mod_t(chain, halo):
    t = 1032193                         # bfv-4096's plaintext modulus: a prime
    for tile in TILES[:4]:
        rows = result_rows(weights_of(chain), tile, halo)
        assert rank_mod(rows, t) == len(rows), (chain, tile)
    lo, hi = raw_range(parse_ops(chain))
    if hi - lo + 1 < t:                 # else the chain does not fit t: no BFV run of it
        got = binding.offset_pass_log2(parse_ops(chain), (7, 9), modulus=t)
        assert got == pytest.approx(63 * np.log2((np.floor(hi) - np.ceil(lo) + 1) / t)) and got < -63


def test_chains_the_offsets_do_not_bind_have_no_bound_and_a_downsample_s_counts_its_results():
    for chain in (["dftfilter:lowpass=0.5"], ["meanfilter:3", "dftfilter:lowpass=0.5"]):
        assert binding.offset_pass_log2(parse_ops(chain), (8, 8)) is None
    assert binding.offset_pass_log2(parse_ops(["downsample:2"]), (8, 8)) == -16       # 4x4 results
    assert binding.offset_pass_log2(parse_ops(["downsample:4"]), (64, 64)) == -256    # 16x16, every one checked
    assert binding.offset_pass_log2(parse_ops(["brightness:9"]), (64, 64)) == -1024   # every other row and column


@pytest.mark.parametrize("chain, tile, halo, channels", [
    (["meanfilter:3"], (1, 2), 1, 1), (["meanfilter:3"], (2, 2), 1, 1), (["conv:sharpen"], (1, 3), 1, 1),
    (["grey"], (1, 3), 0, 3)])
def test_another_place_passes_at_the_formula_s_rate_on_tiles_small_enough_to_measure(chain, tile, halo, channels):
    """Flat pixels (a swap there changes no value), 1,600 trials: the rate another place's offsets pass with is
    2^-(checked results) -- within four standard deviations, on both sides -- where disjoint windows alone would
    promise only 1/2 for the overlapping windows of a 3x3 filter."""
    from hostile import offset_raw, places_apart

    ops = parse_ops(chain)
    unit = binding.offset_unit(ops)
    pixels = np.full((tile[0] + 2 * halo, tile[1] + 2 * halo, channels), 120.0)
    trials, passed = 1600, 0
    for key, here, other_key, there in places_apart(np.random.default_rng(11), trials):
        bound = binding.Binding(key, {"a": channels, "b": channels}, unit=unit)
        other = offset_raw(other_key, there, ops, pixels, unit, halo=halo)
        passed += bound.without_offsets([here], [other], ops, tile=tile, halo=halo)[1][0] == 0
    p = 2.0 ** binding.offset_pass_log2(ops, tile)
    assert p == 2.0 ** -(tile[0] * tile[1])
    assert abs(passed - trials * p) <= 4 * np.sqrt(trials * p * (1 - p)), (passed, trials * p)


@pytest.mark.spark
def test_encrypt_s_first_line_gives_a_filter_s_bound(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((8, 8), 90, np.uint8)).save(images / "flat.png")
    keys = tmp_path / "keys"
    assert main(["keygen", "--out", str(keys), "--preset", "paper-4096"]) == 0
    capsys.readouterr()
    assert main(["encrypt", "--keys", str(keys), "--input", str(images), "--out", str(tmp_path / "enc"),
                 "--tile", "4x4", "--for-op", "meanfilter:3", "--master", "local[1]", "--quiet"]) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hepix encrypt")][0]
    assert first.endswith("bound by keyed offsets (a ciphertext of another place passes with probability 2^-16.0)")
