"""Keyed check slots (hecore/slotchecks.py): chains of 8-bit tables on packed BFV bound to their places.

Encrypt spreads each tile channel's pixels over its ciphertext's slots in a keyed order, the free slots holding
keyed check inputs drawn so that the declared table's outputs on them are uniform; decrypt puts the pixels back
and compares every check slot with the table's output on its input.  In-process: honest slots pass, a
ciphertext of another place or run agrees at each check with probability 1/outputs (measured against the
formula), a flat tile's swap is caught, a corrupted slot is caught as often as it is a check.  Through the jobs
(lut-16384, small tiles): exact, a swap of two flat tiles rejected as integrity, decrypt without the owner map
and an op that is not a table refused, and ``--bind`` shrinking the default tile to make room.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore.slotchecks import MIN_CHECKS, check_inputs, gather, room, slot_order, spread, swap_escape
from hecore.tfhe.ops import chain_table, parse_op

KEY, OTHER_KEY = bytes(range(32)), bytes(range(1, 33))
BLOCK = (8, 8)
SLOTS = 64 + 32                                     # 32 check slots beside an 8x8 block


def table(*specs: str) -> np.ndarray:
    return np.asarray(chain_table([parse_op(s) for s in specs]), dtype=np.int64)


THRESHOLD = table("threshold:128")                  # two outputs
TABLES = {"threshold:128": THRESHOLD, "threshold:250": table("threshold:250"),
          "brightness:100|max:0": table("brightness:100", "max:0"), "identity": np.arange(256)}


def as_bytes(t: np.ndarray) -> bytes:
    return bytes(int(v) for v in t)


def processed(rows: np.ndarray, t: np.ndarray) -> np.ndarray:
    """What the table does to every slot (the cluster's honest work)."""
    return t[np.rint(rows).astype(np.int64)]


def blocks_of(rng, n: int) -> list[np.ndarray]:
    return [rng.integers(0, 256, BLOCK) for _ in range(n)]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_honest_slots_give_the_table_of_every_pixel_and_pass_every_check(name):
    t = TABLES[name]
    rng = np.random.default_rng(0)
    places = [("img", c, ty, 0) for c in range(3) for ty in range(2)]
    blocks = blocks_of(rng, len(places))
    rows = spread(KEY, places, blocks, SLOTS, as_bytes(t))
    values, missed = gather(KEY, places, list(processed(rows, t)), BLOCK, as_bytes(t), t)
    assert missed == [0] * len(places)
    for got, block in zip(values, blocks):
        assert np.array_equal(got, t[block])


def test_the_order_is_a_permutation_that_differs_from_place_to_place():
    a, b = slot_order(KEY, ("img", 0, 0, 0), 4096), slot_order(KEY, ("img", 0, 0, 1), 4096)
    assert sorted(a) == list(range(4096)) and sorted(b) == list(range(4096))
    assert np.count_nonzero(a == b) < 20                         # about 1 of 4096 by chance
    assert not np.array_equal(a, slot_order(OTHER_KEY, ("img", 0, 0, 0), 4096))


def test_check_inputs_give_every_output_of_the_table_equally_often():
    t = table("threshold:250")                     # 250 inputs give 0, six give 255
    inputs = np.concatenate([check_inputs(KEY, ("img", 0, n, 0), 100, as_bytes(t)) for n in range(40)])
    share = np.mean(t[inputs] == 255)
    assert abs(share - 0.5) < 6 * np.sqrt(0.25 / inputs.size)
    assert set(np.unique(inputs[t[inputs] == 255])) <= set(range(250, 256))


def test_a_block_that_leaves_too_few_slots_is_refused():
    with pytest.raises(ValueError, match=f"{MIN_CHECKS} are needed"):
        spread(KEY, [("img", 0, 0, 0)], [np.zeros(BLOCK)], 64 + MIN_CHECKS - 1, as_bytes(THRESHOLD))
    assert room(16384, (127, 128)) == 128 >= MIN_CHECKS


@pytest.mark.parametrize("name, outputs", [("threshold:128", 2), ("brightness:100|max:0", 156)])
def test_a_ciphertext_of_another_place_agrees_at_each_check_as_the_formula_says(name, outputs):
    """300 swaps of random blocks: each check agrees with probability 1/outputs; none passes all 32."""
    t, trials = TABLES[name], 300
    rng = np.random.default_rng(7)
    agree = passed = 0
    for n in range(trials):
        here, there = ("img", 0, n, 0), ("img", int(rng.integers(0, 3)), n, 1)
        rows = processed(spread(KEY, [here, there], blocks_of(rng, 2), SLOTS, as_bytes(t)), t)
        _, (missed,) = gather(KEY, [here], [rows[1]], BLOCK, as_bytes(t), t)
        agree += SLOTS - 64 - missed
        passed += missed == 0
    checks = trials * (SLOTS - 64)
    p = 1 / len(np.unique(t))
    assert len(np.unique(t)) == outputs
    assert abs(agree / checks - p) < 6 * np.sqrt(p * (1 - p) / checks)
    assert passed == 0 and swap_escape(as_bytes(t), SLOTS - 64) == pytest.approx(p ** (SLOTS - 64), rel=1e-9)


def test_swapped_flat_tiles_and_a_replay_under_another_key_are_caught():
    """Two tiles of one flat image hold the same pixels (a value sample cannot tell them apart): every swap is
    caught, and so is the same tile of a run encrypted under another binding key."""
    t = THRESHOLD
    flat = [np.full(BLOCK, 200)] * 2
    for n in range(200):
        here, there = ("flat", 1, n, 0), ("flat", 1, n, 1)
        rows = processed(spread(KEY, [here, there], flat, SLOTS, as_bytes(t)), t)
        assert gather(KEY, [here], [rows[1]], BLOCK, as_bytes(t), t)[1][0] > 0
        replay = processed(spread(OTHER_KEY, [here], flat[:1], SLOTS, as_bytes(t)), t)[0]
        assert gather(KEY, [here], [replay], BLOCK, as_bytes(t), t)[1][0] > 0


def test_a_corrupted_slot_is_caught_as_often_as_it_is_a_check():
    """Every slot looks alike to the cluster: one changed slot is a check with probability checks/slots, and a
    check that changes to another output of the table is caught."""
    t, trials = THRESHOLD, 600
    rng = np.random.default_rng(3)
    caught = 0
    for n in range(trials):
        place = ("img", 0, n, 0)
        row = processed(spread(KEY, [place], blocks_of(rng, 1), SLOTS, as_bytes(t)), t)[0]
        where = int(rng.integers(0, SLOTS))
        row[where] = 255 - row[where]                  # the other output of the threshold
        caught += gather(KEY, [place], [row], BLOCK, as_bytes(t), t)[1][0] > 0
    p = (SLOTS - 64) / SLOTS
    assert caught / trials > p - 6 * np.sqrt(p * (1 - p) / trials)


def test_a_block_larger_than_the_slots_leave_is_counted_wrong_not_raised():
    """The tile comes from the cluster's rows: one that leaves fewer than the fewest check slots puts nothing back."""
    row = processed(spread(KEY, [("img", 0, 0, 0)], [np.zeros(BLOCK)], SLOTS, as_bytes(THRESHOLD)), THRESHOLD)[0]
    values, missed = gather(KEY, [("img", 0, 0, 0)], [row], (9, 9), as_bytes(THRESHOLD), THRESHOLD)
    assert missed[0] > 0 and np.isnan(values[0]).all() and values[0].shape == (9, 9)


def test_ops_that_are_not_the_declared_table_fail_the_checks():
    """Checks are compared with the table the run records: a cluster that runs another table (or records none)
    on the slots of a threshold run leaves check slots that differ."""
    t = THRESHOLD
    place = ("img", 0, 0, 0)
    rows = spread(KEY, [place], blocks_of(np.random.default_rng(5), 1), SLOTS, as_bytes(t))
    other = table("threshold:64")
    assert gather(KEY, [place], [processed(rows, other)[0]], BLOCK, as_bytes(t), t)[1][0] > 0
    assert gather(KEY, [place], [processed(rows, t)[0]], BLOCK, as_bytes(t), None)[1][0] == SLOTS - 64


# --- through the jobs ---------------------------------------------------------------------------------

SPARK = ["--master", "local[2]", "--quiet"]


def hepix(*argv) -> int:
    from jobs.cli import main

    return main([str(a) for a in argv])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(70)
def test_a_table_chain_with_room_is_bound_by_default_decrypts_exactly_and_a_swap_is_rejected(tmp_path, capsys):
    from tests.hostile import swap_flat_tiles

    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((16, 16, 3), 200, np.uint8)).save(images / "flat.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (8, 16), dtype=np.uint8)).save(images / "grey.png")
    keys, pub = tmp_path / "keys", tmp_path / "pub"
    assert hepix("keygen", "--op", "threshold:128", "--out", keys) == 0
    assert hepix("export-public", "--keys", keys, "--out", pub, "--for-op", "threshold:128") == 0
    assert hepix("encrypt", "--keys", pub, "--input", images, "--out", tmp_path / "enc", "--tile", "8x8",
                 "--for-op", "threshold:128", *SPARK) == 0
    assert json.loads((tmp_path / "enc" / "_manifest.json").read_text())["options"]["bound_slots"] is True
    settings = json.loads((tmp_path / "enc.owner" / "owner.json").read_text())["settings"]
    assert bytes.fromhex(settings["bind_table"]) == as_bytes(THRESHOLD)
    assert hepix("process", "--keys", pub, "--input", tmp_path / "enc", "--out", tmp_path / "proc",
                 "--op", "threshold:128", *SPARK) == 0
    assert hepix("decrypt", "--keys", keys, "--input", tmp_path / "proc", "--out", tmp_path / "d",
                 "--owner", tmp_path / "enc.owner", "--images", images, *SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "metrics").to_table().to_pylist()
    assert len(rows) == 2 and all(r["exact_fraction"] == 1.0 for r in rows)

    capsys.readouterr()
    assert hepix("decrypt", "--keys", keys, "--input", tmp_path / "proc", "--out", tmp_path / "n", *SPARK) != 0
    assert "give --owner DIR" in capsys.readouterr().err
    assert hepix("process", "--keys", pub, "--input", tmp_path / "enc", "--out", tmp_path / "m",
                 "--op", "brightness:20", *SPARK) != 0          # linear, but not a table: it would not saturate
    assert "keyed check slots" in capsys.readouterr().err

    run = tmp_path / "forged"
    flat = swap_flat_tiles(tmp_path / "proc", run)             # two tiles of the flat image: the same values
    assert hepix("decrypt", "--keys", keys, "--input", run, "--out", tmp_path / "e", "--owner",
                 tmp_path / "enc.owner", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "e" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(flat, "integrity")]
    assert "check slots differ from the chain's table" in rejects[0]["detail"]

    # --bind makes room in the default tile (128x128 fills lut-16384's slots): 127x128, 128 check slots
    assert hepix("encrypt", "--keys", pub, "--input", images / "grey.png", "--out", tmp_path / "b", "--bind",
                 "--for-op", "threshold:128", *SPARK) == 0
    manifest = json.loads((tmp_path / "b" / "_manifest.json").read_text())
    assert manifest["options"]["tile"] == [127, 128] and manifest["options"]["bound_slots"] is True
    assert hepix("process", "--keys", pub, "--input", tmp_path / "b", "--out", tmp_path / "bp",
                 "--op", "threshold:128", *SPARK) == 0
    assert hepix("decrypt", "--keys", keys, "--input", tmp_path / "bp", "--out", tmp_path / "bd",
                 "--owner", tmp_path / "b.owner", "--images", images, *SPARK) == 0
    assert [r["exact_fraction"] for r in ds.dataset(tmp_path / "bd" / "metrics").to_table().to_pylist()] == [1.0]
    # the unprocessed run, decrypted without the checks (the owner kept the threshold's results): the slots put
    # back in order are the pixels
    assert hepix("decrypt", "--keys", keys, "--input", tmp_path / "b", "--out", tmp_path / "bu", "--owner",
                 tmp_path / "b.owner", "--images", images, "--no-integrity", *SPARK) == 0
    assert [r["exact_fraction"] for r in ds.dataset(tmp_path / "bu" / "metrics").to_table().to_pylist()] == [1.0]
