"""Ringers: images the owner keeps whole (hecore/integrity.py ``ringer``), so that decrypt compares every value
of their result -- a global op's (the DFT filter) too, which a sample of a few positions never reaches.
Through the jobs: ``encrypt --ringers 1`` makes every image one, and a forged run is caught on them."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from hecore import integrity
from hecore.ops.spec import recorded_reference_known
from jobs.cli import main
from tasks.spots import spot_check, spot_mask

#: The DFT filter as a run records it (the tile it was planned for): every output depends on every pixel.
DFT = ["dftfilter:lowpass=0.5,levels=2,stages=fold,tile=32x32"]
PRESET = "dft-8192"


def image(seed: int = 3, shape=(32, 32)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def result_of(pixels: np.ndarray, chain) -> np.ndarray:
    return np.clip(np.rint(recorded_reference_known(pixels.astype(np.float64), chain, PRESET)), 0, 255).astype(np.uint8)


def test_a_ringer_round_trips_in_one_byte_per_value():
    pixels = image(shape=(20, 30, 3))
    data = integrity.ringer(pixels).to_bytes()
    back = integrity.SpotSample.from_bytes(data, shape=(20, 30, 3))
    assert back.whole and np.array_equal(back.image(), pixels.astype(np.float64))
    assert len(data) - len(integrity.draw(pixels, positions=1, radius=0).to_bytes()) == 20 * 30 * 3 - 3 - 4


def test_a_ringer_checks_every_value_of_a_global_op_where_a_sample_checks_none():
    pixels = image()
    truth = result_of(pixels, DFT)
    found = spot_check(integrity.ringer(pixels).to_bytes(), DFT, PRESET, truth)
    assert found.ok and found.positions == 32 * 32 and found.values == 32 * 32
    assert spot_mask(integrity.ringer(pixels).to_bytes(), DFT, PRESET).all()
    wrong = truth.copy()
    wrong[17, 5] ^= 1                               # one value of 1,024 off by one
    found = spot_check(integrity.ringer(pixels).to_bytes(), DFT, PRESET, wrong)
    assert not found.ok and found.wrong == 1 and found.first[:2] == (17, 5)
    sampled = spot_check(integrity.draw(pixels, positions=200, radius=1).to_bytes(), DFT, PRESET, wrong)
    assert sampled.ok and sampled.positions == 0    # a sample's pixels decide no value of a global op


@pytest.mark.parametrize("change", [
    lambda d: d[:-1],                                                   # a byte short
    lambda d: d[:14] + bytes([1]) + d[15:],                             # a ringer of radius 1
    lambda d: d + b"\0",                                                # a byte too many
])
def test_a_changed_ringer_does_not_read(change):
    data = integrity.ringer(image()).to_bytes()
    with pytest.raises(integrity.SpotSampleError):
        integrity.SpotSample.from_bytes(change(data))


def test_the_escape_probability():
    assert integrity.ringer_escape(0.05, 20) == pytest.approx(0.95 ** 20)
    assert integrity.ringer_escape(1.0, 1) == 0.0 and integrity.ringer_escape(0.0, 50) == 1.0


@pytest.mark.spark
def test_encrypt_ringers_keeps_every_image_whole_and_decrypt_compares_every_value(tmp_path):
    from hostile import image_ids, image_mask, read_rows, write_rows

    images = tmp_path / "images"
    images.mkdir()
    for n in range(2):
        Image.fromarray(image(n, (16, 16))).save(images / f"i{n}.png")
    spark = ["--master", "local[1]", "--quiet"]
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(tmp_path / "keys"), "--out", str(tmp_path / "pub")]) == 0
    assert main(["encrypt", "--keys", str(tmp_path / "pub"), "--input", str(images), "--out", str(tmp_path / "enc"),
                 "--tile", "8x8", "--spot-positions", "0", "--ringers", "1", *spark]) == 0
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"), "--out",
                 str(tmp_path / "proc"), "--op", "brightness:20", *spark]) == 0
    t = read_rows(tmp_path / "proc")                # one tile of the first image replaced by the second's
    ids = sorted(image_ids(t))
    cts = t.column("ct").to_pylist()
    a, b = ([n for n, m in enumerate(image_mask(t, i)) if m] for i in ids)
    cts[a[0]] = cts[b[0]]
    import pyarrow as pa

    write_rows(tmp_path / "proc", t.set_column(t.schema.get_field_index("ct"), "ct",
                                                pa.array(cts, type=t.schema.field("ct").type)))
    assert main(["decrypt", "--keys", str(tmp_path / "keys"), "--input", str(tmp_path / "proc"), "--out",
                 str(tmp_path / "dec"), "--owner", str(tmp_path / "enc.owner"), *spark]) == 0
    import pyarrow.dataset as ds

    metrics = ds.dataset(str(tmp_path / "dec" / "metrics")).to_table().to_pylist()
    rejects = ds.dataset(str(tmp_path / "dec" / "rejects")).to_table().to_pylist()
    assert [r["spot_positions"] for r in metrics] == [16 * 16]
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(ids[0], "integrity")]


def test_an_approximate_chain_is_compared_within_its_error_and_no_further():
    pixels = image(5)
    want = recorded_reference_known(pixels.astype(np.float64), DFT, PRESET)
    sample = integrity.ringer(pixels).to_bytes()
    near = np.abs(np.abs(want - np.floor(want)) - 0.5) < 0.005           # references just by a rounding edge
    assert near.any()
    flipped = np.where(want - np.floor(want) < 0.5, np.floor(want) + 1, np.floor(want))   # the other side
    honest = np.clip(np.where(near, flipped, np.rint(want)), 0, 255).astype(np.uint8)  # as CKKS's error may round
    assert spot_check(sample, DFT, PRESET, honest).ok
    lie = honest.copy()
    far = np.argwhere(~near & (want > 2) & (want < 253))[0]
    lie[tuple(far)] = np.rint(want[tuple(far)]) + 1
    assert not spot_check(sample, DFT, PRESET, lie).ok


def test_a_ringer_too_large_for_the_owner_map_is_sampled_instead():
    from tasks.decode import _spot_sample

    big = np.zeros((2400, 2400, 3), dtype=np.uint8)            # 17.3 M values: more than a sample may take
    assert not integrity.ringer_fits(*big.shape) and integrity.ringer_fits(2000, 2000, 3)
    sample = integrity.SpotSample.from_bytes(_spot_sample(big, (50, 1, 1.0)))
    assert not sample.whole and len(sample.centers) == 50
    assert integrity.SpotSample.from_bytes(_spot_sample(big[:100, :100], (50, 1, 1.0))).whole
