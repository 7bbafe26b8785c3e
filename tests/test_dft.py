"""hecore.ops.dft: the DFT -- Hadamard -- iDFT pipeline, in plaintext (the FFT factorisation) and encrypted
(CKKS, dft-8192) at small N, against NumPy's FFT pipeline."""
from __future__ import annotations

import numpy as np
import pytest

from hecore.errors import InvalidParameters
from hecore.ops import dft
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

RNG = np.random.default_rng(2026)


def _pixels(n):
    return RNG.integers(0, 256, n).astype(np.float64)


@pytest.mark.parametrize("dims", [(2,), (16,), (128,), (8, 8), (4, 32)])
def test_stages_are_the_dft_in_bit_reversed_order(dims):
    n = int(np.prod(dims))
    x = _pixels(n) + 1j * _pixels(n)
    v = x.copy()
    for st in dft.dif_stages(dims):
        v = dft.apply_diagonals(st, v)
    want = np.fft.fftn(x.reshape(dims)).reshape(-1)[dft.spectrum_order(dims)] / n
    np.testing.assert_allclose(v, want, atol=1e-9)
    for st in dft.inverse_stages(dims):
        v = dft.apply_diagonals(st, v)
    np.testing.assert_allclose(v, x, atol=1e-9)


#: (stages, levels): the circulant is one matrix, so it has one level only.
GROUPINGS = [(s, lv) for s in dft.STAGES for lv in (1, 2, 3) if s != "circulant" or lv == 1]


@pytest.mark.parametrize("stages, levels", GROUPINGS)
@pytest.mark.parametrize("dims", [(64,), (8, 16)])
def test_grouped_pipeline_matches_numpy(dims, levels, stages):
    n = int(np.prod(dims))
    x = _pixels(n)
    mask = dft.lowpass_mask(dims, 0.4) * RNG.uniform(0.5, 1.5, n)      # not symmetric: complex output
    p = dft.DftPipeline.build(dims, mask, stages=stages, levels=levels)
    np.testing.assert_allclose(p.apply_plain(x), dft.reference(x, mask, dims), atol=1e-9)
    assert p.depth == {"three": 2 * levels + 1, "fold": 2 * levels, "circulant": 1}[stages]


def test_group_diagonal_count_is_small():
    # 10 stages in two groups of 5: at most 2^6 - 1 = 63 diagonals each, not 1024
    p = dft.DftPipeline.build((1024,), dft.lowpass_mask((1024,), 0.5), levels=2)
    fwd, inv = p.products
    assert max(g.diagonals for g in fwd + inv) <= 63
    assert p.rotations < 64


def test_lowpass_mask_is_symmetric_and_real_output():
    m = dft.lowpass_mask((8, 16), 0.5).reshape(8, 16)
    assert np.array_equal(m, np.roll(np.flip(m), 1, axis=(0, 1)))      # m[k] = m[-k]
    assert m[0, 0] == 1 and m.sum() < m.size
    y = dft.reference(_pixels(128), m.reshape(-1), (8, 16))
    assert np.abs(y.imag).max() < 1e-9


def test_bad_sizes_and_specs():
    with pytest.raises(InvalidParameters, match="powers of two"):
        dft.dif_stages((12,))
    with pytest.raises(InvalidParameters, match="levels"):
        dft.DftPipeline.build((16,), np.ones(16), levels=5)
    with pytest.raises(ValueError, match="lowpass"):
        dft.parse_dftfilter("levels=2")
    with pytest.raises(ValueError, match="cutoff"):
        dft.parse_dftfilter("lowpass=0")
    with pytest.raises(ValueError, match="stages"):
        dft.parse_dftfilter("lowpass=0.5,stages=fast")
    op = dft.parse_dftfilter("lowpass=0.5,levels=1,stages=three")
    assert (op.cutoff, op.levels, op.stages, op.depth) == (0.5, 1, "three", 3)
    assert dft.parse_dftfilter(op.spec.partition(":")[2]) == op


# --- encrypted -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def he():
    ctx, _ = HEContext.generate(preset("dft-8192"))
    return ctx, Evaluator(ctx)


@pytest.mark.parametrize("dims,stages,levels", [((64,), "fold", 2), ((64,), "three", 1), ((8, 8), "fold", 2),
                                                ((32,), "circulant", 1), ((256,), "fold", 2),
                                                ((128,), "three", (2, 1))])
def test_encrypted_pipeline_matches_numpy(he, dims, stages, levels):
    ctx, ev = he
    n = int(np.prod(dims))
    x = _pixels(n)
    mask = dft.lowpass_mask(dims, 0.5)
    fwd, inv = levels if isinstance(levels, tuple) else (levels, levels)
    p = dft.DftPipeline.build(dims, mask, stages=stages, levels=fwd, inverse_levels=inv)
    assert p.depth == {"three": fwd + inv + 1, "fold": fwd + inv, "circulant": 1}[stages]
    c = ctx._encrypt(p.replicate(x, ev.slots))
    out = p.evaluate(ev, c)
    assert ev.level(out) == p.depth
    y = ctx.decrypt_slots(out, ev.slots).reshape(-1, n)          # every replica holds the result
    ref = dft.reference(x, mask, dims).real
    assert np.abs(y - ref).max() < 0.01
    assert np.abs(y - ref).max() > 0          # CKKS is approximate: a zero error would mean no encryption


def test_encrypted_mask_three_stages(he):
    ctx, ev = he
    dims, n = (32,), 32
    x = _pixels(n)
    mask = RNG.uniform(0, 1, n)
    mask = (mask + np.roll(mask[::-1], 1)) / 2                   # symmetric
    p = dft.DftPipeline.build(dims, None, stages="three", levels=1)
    c = ctx._encrypt(p.replicate(x, ev.slots))
    cm = ctx._encrypt(p.replicate(mask[dft.spectrum_order(dims)], ev.slots))
    out = p.evaluate(ev, c, encrypted_mask=cm)
    y = ctx.decrypt_slots(out, n)
    np.testing.assert_allclose(y, dft.reference(x, mask, dims).real, atol=0.01)


def test_encrypted_refusals(he):
    ctx, ev = he
    p = dft.DftPipeline.build((64,), dft.lowpass_mask((64,), 0.5), stages="three", levels=2)   # depth 5 > 4
    c = ctx._encrypt(p.replicate(_pixels(64), ev.slots))
    with pytest.raises(InvalidParameters, match="needs depth 5"):
        p.evaluate(ev, c)
    big = dft.DftPipeline.build((8192,), np.ones(8192), levels=2)
    with pytest.raises(InvalidParameters, match="at least 8192 slots"):
        big.evaluate(ev, c)


def test_gain_bounds_the_filtered_values_and_tiles_match_the_packed_layout():
    op = dft.parse_dftfilter("lowpass=0.5,tile=8x16")
    assert op.tile == (8, 16) and op.spec.endswith("tile=8x16")
    # the worst input for output pixel 0: 255 where the kernel is positive, 0 where negative
    k = np.real(np.fft.ifftn(op.mask((8, 16)).reshape(8, 16)))
    worst = np.where(np.roll(np.flip(k), 1, axis=(0, 1)) > 0, 255.0, 0.0)
    y = op.apply_block(worst)
    from hecore.ops.spec import raw_range
    lo, hi = raw_range([op])
    assert y.max() > 255 and lo <= y.min() and y.max() <= hi + 1e-9
    # a 20x20 image in 8x16 tiles: each tile is filtered on its own, edges repeated
    img = RNG.integers(0, 256, (20, 20)).astype(float)
    out = op.apply_plain(img)
    blk = img[np.ix_(np.clip(np.arange(16, 24), 0, 19), np.clip(np.arange(16, 32), 0, 19))]
    np.testing.assert_allclose(out[16:20, 16:20], op.apply_block(blk)[:4, :4])
