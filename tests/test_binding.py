"""Binding (hecore/binding.py): keyed +-1 check values in the imaginary parts of CKKS's packed layout tie each
ciphertext to its place.  The values survive the real-linear ops exactly as the owner computes them from the
key alone; a ciphertext of another place passes its checks with probability 2^-24 at most, measured here over
hundreds of trials; through the jobs, a swap of two tiles of a flat image -- identical values, which no spot
sample can tell apart -- is rejected as ``integrity``, and ops the values would not survive are refused."""
from __future__ import annotations

import functools
import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore import binding
from hecore.layouts.packed import encrypt_blocks
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import parse_ops, recorded_reference_known
from jobs.cli import main

PRESET = "paper-4096"
CHAIN = ["brightness:20", "contrast:1.5", "conv:sharpen"]
TILE, HALO = (6, 10), 1


def reference(chain):
    return functools.partial(recorded_reference_known, specs=chain, preset=PRESET)


def test_the_check_values_survive_the_chain_as_the_key_alone_predicts(he_paper4096):
    from hecore.seal.evaluator import Evaluator

    ctx, secret = he_paper4096
    key = binding.new_key()
    block = np.random.default_rng(2).integers(0, 256, (TILE[0] + 2 * HALO, TILE[1] + 2 * HALO), dtype=np.uint8)
    checks = binding.check_values(key, "img", 0, 3, 4, block.shape)
    assert set(np.unique(checks)) == {-1.0, 1.0}
    ev = Evaluator(ctx)
    c = ev.load(bytes(encrypt_blocks(ctx, [block], HALO, checks=[checks])[0]))
    geom = PackedGeometry(*TILE, HALO, 0, 0, 64, 64)
    c, post_scale = apply_ops(ev, c, parse_ops(CHAIN), geom)
    z = ctx.decrypt_complex(ev.dump(c), block.size).reshape(block.shape)
    rows, cols, want = binding.expected(key, "img", 0, 3, 4, tile=TILE, halo=HALO, in_channels=1,
                                        reference=reference(CHAIN), post_scale=post_scale)
    assert np.abs(z.imag[rows, cols] - want).max() < 1e-2
    assert binding.wrong(z.imag, rows, cols, want) == 0
    # the real parts are the chain's result as without check values
    real = z.real[HALO:HALO + TILE[0], HALO:HALO + TILE[1]] * post_scale
    plain = recorded_reference_known(block.astype(np.float64), CHAIN, PRESET)[HALO:HALO + TILE[0], HALO:HALO + TILE[1]]
    assert np.abs(real - plain).max() < 1e-2
    # another place's values (the same pixels: a flat region) miss nearly every check
    for place in ((3, 5), (4, 4)):
        _, _, other = binding.expected(key, "img", 0, *place, tile=TILE, halo=HALO, in_channels=1,
                                       reference=reference(CHAIN), post_scale=post_scale)
        assert binding.wrong(z.imag, rows, cols, other) > binding.CHECKS // 4


def imaginary_parts(key, place, chain, channels, post_scale) -> np.ndarray:
    """The raw imaginary parts of a ciphertext of ``place`` after ``chain``: the chain's linear part on its
    check values, over the whole block (the places checked lie inside, where windows stay in the block)."""
    shape = (TILE[0] + 2 * HALO, TILE[1] + 2 * HALO)
    values = np.stack([binding.check_values(key, place[0], c, place[2], place[3], shape) for c in range(channels)],
                      axis=-1)
    out = reference(chain)(values) - reference(chain)(np.zeros_like(values))
    out = out if out.ndim == 3 else out[:, :, None]
    return out[:, :, place[1] if out.shape[2] > 1 else 0] / post_scale


@pytest.mark.parametrize("chain, channels", [(["brightness:20"], 1), (["meanfilter:3"], 1), (["grey"], 3),
                                             (["watermark:2,2,255", "conv:gauss3"], 3)])
def test_a_ciphertext_of_another_place_passes_at_no_more_than_the_formula_s_rate(chain, channels):
    """300 trials: the imaginary parts a ciphertext of another place (tile, image, channel, or another run's
    key) holds after the chain, checked against this place's expected values: the formula's bound is 2^-24."""
    from hecore.ops.spec import finish_for

    post = finish_for(parse_ops(chain)).post_scale_float
    rng = np.random.default_rng(9)
    passed = 0
    for trial in range(300):
        key = binding.new_key()
        here = ("a", 0, 1, 1)
        there = [("a", 0, 1, 2), ("a", 0, 2, 1), ("b", 0, 1, 1), ("a", 0, 1, 1)][trial % 4]
        other_key = binding.new_key() if there == here else key        # the same place of another run
        rows, cols, mine = binding.expected(key, *here, tile=TILE, halo=HALO, in_channels=channels,
                                            reference=reference(chain), post_scale=post)
        theirs = imaginary_parts(other_key, there, chain, channels, post)
        assert binding.wrong(imaginary_parts(key, here, chain, channels, post), rows, cols, mine) == 0
        passed += binding.wrong(theirs + rng.normal(0, 1e-3, theirs.shape), rows, cols, mine) == 0
    assert passed == 0


def test_why_not_names_the_ops_the_values_do_not_survive():
    assert binding.why_not(parse_ops(CHAIN + ["grey", "meanfilter:3"])) is None
    why = binding.why_not(parse_ops(["downsample:2", "dftfilter:lowpass=0.5"]))
    assert "downsample:2" in why and "dftfilter" in why


# --- through the jobs ---------------------------------------------------------------------------------

SPARK = ["--master", "local[1]", "--quiet"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def bound(tmp_path_factory):
    root = tmp_path_factory.mktemp("bound")
    images = root / "images"
    images.mkdir()
    Image.fromarray(np.full((24, 24, 3), 200, np.uint8)).save(images / "flat.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (24, 24), dtype=np.uint8)).save(images / "grey.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", PRESET) == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", "--tile", "8x8",
                 "--bind", *SPARK) == 0
    assert hepix("process", "--keys", root / "pub", "--input", root / "enc", "--out", root / "proc",
                 "--op", "brightness:20", "--op", "meanfilter:3", *SPARK) == 0
    return root


@pytest.mark.spark
def test_an_honest_bound_run_decrypts_exactly_and_the_key_stays_with_the_owner(bound, tmp_path):
    key = bound / "enc.owner" / "binding.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == binding.KEY_BYTES
    assert json.loads((bound / "enc" / "_manifest.json").read_text())["options"]["bound"] is True
    assert not [p for p in (bound / "enc").rglob("*") if "binding" in p.name]
    assert hepix("decrypt", "--keys", bound / "keys", "--input", bound / "proc", "--out", tmp_path / "d",
                 "--owner", bound / "enc.owner", "--images", bound / "images", *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["exact_fraction"] == 1.0 for r in rows)
    assert ds.dataset(tmp_path / "d" / "rejects").to_table().num_rows == 0


@pytest.mark.spark
def test_tiles_swapped_on_a_flat_image_pass_the_spot_checks_and_fail_the_binding(bound, tmp_path):
    from hostile import swap_flat_tiles

    run = tmp_path / "forged"
    flat = swap_flat_tiles(bound / "proc", run)             # two tiles of the flat image: the same values
    assert hepix("decrypt", "--keys", bound / "keys", "--input", run, "--out", tmp_path / "d", "--owner",
                 bound / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "d" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    assert "check values under the encryption differ" in rejects[0]["detail"]
    # without the binding key the same forgery passes: the swapped tiles hold the right values
    (bound / "enc.owner" / "binding.key").rename(tmp_path / "kept.key")
    try:
        assert hepix("decrypt", "--keys", bound / "keys", "--input", run, "--out", tmp_path / "e", "--owner",
                     bound / "enc.owner", *SPARK) == 0
    finally:
        (tmp_path / "kept.key").rename(bound / "enc.owner" / "binding.key")
    assert ds.dataset(tmp_path / "e" / "rejects").to_table().num_rows == 0


@pytest.mark.spark
@pytest.mark.parametrize("argv, message", [
    (["process", "--keys", "PUB", "--input", "ENC", "--out", "OUT", "--op", "downsample:2"], "encrypted with --bind"),
    (["process", "--keys", "PUB", "--input", "ENC", "--out", "OUT", "--op", "match:QUERY"], "encrypted with --bind"),
    (["encrypt", "--keys", "PUB", "--input", "IMAGES", "--out", "OUT", "--bind", "--layout", "packed-complex"],
     "--layout packed"),
    (["encrypt", "--keys", "PUB", "--input", "IMAGES", "--out", "OUT", "--bind", "--for-op", "downsample:2"],
     "drop --bind"),
])
def test_what_the_check_values_would_not_survive_is_refused(bound, tmp_path, capsys, argv, message):
    where = {"PUB": bound / "pub", "ENC": bound / "enc", "OUT": tmp_path / "out", "IMAGES": bound / "images",
             "QUERY": bound / "images" / "grey.png"}
    assert hepix(*[where.get(a, a) for a in argv], *SPARK) == 2
    assert message in capsys.readouterr().err


def test_bind_is_refused_by_name_for_keys_without_complex_slots(tfhe_key_dir, tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(images / "z.png")
    assert hepix("encrypt", "--keys", tfhe_key_dir, "--input", images, "--out", tmp_path / "out", "--bind",
                 *SPARK) == 2
    assert "--bind puts check values in the imaginary parts of CKKS's packed layout" in capsys.readouterr().err
