"""Keyed offsets on exact integers (hecore/binding.py, BFV/BGV): encrypt adds to every pixel of a chain declared with
--for-op a keyed offset drawn uniformly mod t, and decrypt subtracts the chain's linear part of them mod t and
checks that every value then lies within the chain's raw range.  Measured here: the subtraction is exact (against
big integers, and through SEAL), a ciphertext of another place lands outside the range at nearly every value over
hundreds of trials on flat pixels, and through the jobs a BFV run is bound by default, decrypts exactly and has a
swap of two flat tiles rejected as ``integrity``."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore import binding
from hecore.ops.spec import finish_for, parse_ops, raw_range, reference
from jobs.cli import main

TILE, HALO = (8, 10), 2
T20 = 1032193                                   # bfv-4096's plaintext modulus


@pytest.fixture(scope="module")
def bfv4096():
    from hecore.seal.context import HEContext
    from hecore.seal.params import preset

    return HEContext.generate(preset("bfv-4096"))


@pytest.mark.parametrize("chain, kernel", [(["meanfilter:3"], np.ones((3, 3), int)),
                                           (["conv:gauss5"], np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]))])
@pytest.mark.parametrize("bits", [20, 40, 43])
def test_the_chain_s_linear_part_of_the_offsets_is_exact_mod_t(chain, kernel, bits):
    """Offsets of up to 43 bits through a 5x5 kernel: what float64 would round, the limbs keep exact."""
    t = {20: T20, 40: (1 << 40) - 87, 43: (1 << 43) - 57}[bits]
    key, ops = binding.new_key(), parse_ops(chain)
    places = [("a", 0, 0, 0), ("b", 2, 1, 0)]
    got = binding.modular_response(key, places, tile=TILE, halo=HALO, in_channels=3, modulus=t, ops=ops,
                                   post_scale=float(finish_for(ops).post_scale))
    offsets = binding.modular_offsets_of(key, places, (TILE[0] + 2 * HALO, TILE[1] + 2 * HALO), t)
    assert offsets.min() >= 0 and offsets.max() < t and offsets.max() > t // 2
    h = kernel.shape[0] // 2
    for p in range(len(places)):
        for y in range(HALO, HALO + TILE[0]):
            for x in range(HALO, HALO + TILE[1]):
                want = sum(int(kernel[a, b]) * int(offsets[p, y - h + a, x - h + b])
                           for a in range(kernel.shape[0]) for b in range(kernel.shape[1])) % t
                assert int(got[p, y - HALO, x - HALO]) == want


@pytest.mark.parametrize("chain", [["brightness:20", "meanfilter:3"], ["contrast:2"], ["conv:gauss5"],
                                   ["watermark:3,2,40", "meanfilter:3"], ["brightness:-30", "conv:laplace"]])
def test_the_offsets_come_off_exactly_through_seal_and_another_place_s_do_not(bfv4096, chain):
    from hecore.layouts.packed import decrypt_block, encrypt_blocks
    from hecore.ops.packed import PackedGeometry, apply_ops
    from hecore.seal.evaluator import Evaluator

    ctx, _ = bfv4096
    t = ctx.params.plain_modulus
    key, ops = binding.new_key(), parse_ops(chain)
    block = np.random.default_rng(3).integers(0, 256, (TILE[0] + 2 * HALO, TILE[1] + 2 * HALO))
    offsets = binding.modular_offsets_of(key, [("img", 0, 3, 4)], block.shape, t)[0]
    shaken = binding.centred(block + offsets, t)
    assert np.abs(shaken).max() <= (t - 1) // 2 and np.abs(shaken).max() > 255
    ev = Evaluator(ctx)
    raws = []
    for pixels in (shaken, block):              # bound, and the same tile encrypted without offsets
        c = ev.load(bytes(encrypt_blocks(ctx, [pixels], HALO)[0]))
        c, post_scale = apply_ops(ev, c, ops, PackedGeometry(*TILE, HALO, 0, 0, 64, 64))
        raws.append(decrypt_block(ctx, ev.dump(c), *TILE, HALO))
    raw, unbound = raws
    lo, hi = raw_range(ops)
    bound = binding.Binding(key, {"img": 1}, modulus=t)
    (values,), (wrong,) = bound.without_offsets([("img", 0, 3, 4)], [raw], ops, tile=TILE, halo=HALO)
    assert wrong == 0
    assert np.array_equal(values, unbound)                           # exact raw integers: BFV has no error
    for place in (("img", 0, 3, 5), ("img", 1, 3, 4), ("other", 0, 3, 4)):
        other = binding.Binding(key, {place[0]: 3}, modulus=t)
        # each value lands in the range with probability p = (range + 1) / t (6 % for gauss5): no more than its
        # mean and six standard deviations of the 80 stay (or 4, for a narrow range) -- a miss below 1e-5
        n, p = TILE[0] * TILE[1], (hi - lo + 1) / t
        inside = n - other.without_offsets([place], [raw], ops, tile=TILE, halo=HALO)[1][0]
        assert inside <= max(4, n * p + 6 * np.sqrt(n * p * (1 - p)))


def _raw(key, place, chain, pixels, t) -> np.ndarray:
    """A ciphertext's raw BFV results for ``place`` after ``chain``, computed in the clear: the chain's raw results
    plus the chain's linear part of the place's offsets, mod t, centred."""
    ops = parse_ops(chain)
    post_scale = float(finish_for(ops).post_scale)
    out = reference(pixels, ops)
    out = out if out.ndim == 3 else out[:, :, None]
    clean = np.rint(out[HALO:HALO + TILE[0], HALO:HALO + TILE[1], place[1] if out.shape[2] > 1 else 0] / post_scale)
    response = binding.modular_response(key, [place], tile=TILE, halo=HALO, in_channels=pixels.shape[2], modulus=t,
                                        ops=ops, post_scale=post_scale)[0]
    return binding.centred(clean.astype(np.int64) + response, t).astype(np.float64)


@pytest.mark.parametrize("chain, channels", [(["brightness:20"], 1), (["meanfilter:3"], 1), (["grey"], 3),
                                             (["watermark:2,2,255", "conv:gauss3"], 3)])
def test_a_ciphertext_of_another_place_passes_at_no_more_than_the_formula_s_rate(chain, channels):
    """300 trials on flat pixels (a swap there changes no value): another tile's, image's, channel's or run's
    ciphertext passes each value with probability (range + 1) / t -- none of 300 may pass all 80 -- while the
    right one passes every time."""
    ops = parse_ops(chain)
    lo, hi = raw_range(ops)
    pixels = np.full((TILE[0] + 2 * HALO, TILE[1] + 2 * HALO, channels), 120.0)
    from tests.hostile import places_apart

    passed, outside = 0, []
    for key, here, other_key, there in places_apart(np.random.default_rng(7), 300):
        bound = binding.Binding(key, {"a": channels, "b": channels}, modulus=T20)
        assert bound.without_offsets([here], [_raw(key, here, chain, pixels, T20)], ops, tile=TILE,
                                     halo=HALO)[1] == [0]
        wrong = bound.without_offsets([here], [_raw(other_key, there, chain, pixels, T20)], ops, tile=TILE,
                                      halo=HALO)[1][0]
        passed += wrong == 0
        outside.append(wrong / (TILE[0] * TILE[1]))
    assert passed == 0
    # each value lands in the range with probability (range + 1) / t: the rest lie outside
    assert np.mean(outside) > 1 - 3 * (hi - lo + 1) / T20


# --- through the jobs ---------------------------------------------------------------------------------

SPARK = ["--master", "local[1]", "--quiet"]
OPS = ["brightness:20", "meanfilter:3"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(40)
def test_a_bfv_chain_is_bound_by_default_runs_on_its_own_keys_decrypts_exactly_and_a_swap_is_rejected(tmp_path):
    from tests.hostile import swap_flat_tiles

    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((24, 24, 3), 200, np.uint8)).save(images / "flat.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (24, 24), dtype=np.uint8)).save(images / "grey.png")
    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "bfv-4096") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub", "--tile", "8x8",
                 *[a for op in OPS for a in ("--for-op", op)]) == 0
    # the cluster's least-capability copy for the chain: the Galois keys of its steps, no relinearisation key
    assert {p.name for p in (tmp_path / "pub").iterdir()} == {"context.bin", "public.key", "rotate.key",
                                                             "hepix-keys.json"}
    assert hepix("encrypt", "--keys", tmp_path / "pub", "--input", images, "--out", tmp_path / "enc", "--tile", "8x8",
                 *[a for op in OPS for a in ("--for-op", op)], *SPARK) == 0
    assert json.loads((tmp_path / "enc" / "_manifest.json").read_text())["options"]["bound_offsets"] is True
    assert json.loads((tmp_path / "enc.owner" / "owner.json").read_text())["settings"]["bind_modulus"] == T20
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "proc",
                 *[a for op in OPS for a in ("--op", op)], *SPARK) == 0
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "proc", "--out", tmp_path / "d",
                 "--owner", tmp_path / "enc.owner", "--images", images, *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["exact_fraction"] == 1.0 for r in rows)

    run = tmp_path / "forged"
    flat = swap_flat_tiles(tmp_path / "proc", run)             # two tiles of the flat image: the same values
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", run, "--out", tmp_path / "e", "--owner",
                 tmp_path / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "e" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    assert "outside the chain's range once its place's keyed offsets are removed" in rejects[0]["detail"]
