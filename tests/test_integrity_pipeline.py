"""The spot checks on by default, through the jobs: ``encrypt`` keeps a sample of every image in the owner map
(never in the output), ``decrypt --owner`` checks each decrypted image there, and a cluster that hands back
another answer -- ciphertexts swapped between images, one image's values shifted, with every checksum and the
manifest recomputed (tests/hostile.py) -- has those images rejected as ``integrity``: no metrics row, no PNG.
``--no-integrity`` skips the checks and says so; ``--expect-ops`` refuses a run that records another chain.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hostile import image_ids, image_mask, read_rows, write_rows
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.seconds(60), pytest.mark.spark]

SPARK = ["--master", "local[1]", "--quiet"]
OP = "brightness:20"


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


def table(path: Path) -> list[dict]:
    return ds.dataset(str(path), format="parquet").to_table().to_pylist()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three 24x24 images (two grey, one RGB) encrypted packed with the default spot samples, processed."""
    root = tmp_path_factory.mktemp("integrity")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(5)
    for name, shape in (("ann", (24, 24)), ("ben", (24, 24)), ("cat", (24, 24, 3))):
        Image.fromarray(rng.integers(0, 230, shape, dtype=np.uint8)).save(images / f"{name}.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", "addonly-2048") == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", "--tile", "8x8",
                 *SPARK) == 0
    assert hepix("process", "--keys", root / "pub", "--input", root / "enc", "--out", root / "proc", "--op", OP,
                 *SPARK) == 0
    return root


def decrypt(root: Path, run: Path, out: Path, *extra) -> int:
    return hepix("decrypt", "--keys", root / "keys", "--input", run, "--out", out, "--owner", root / "enc.owner",
                 "--png", *extra, *SPARK)


def test_the_samples_stay_in_the_owner_map(runs):
    kept = list((runs / "enc.owner" / "spots").glob("*.parquet"))
    assert kept and (kept[0].stat().st_mode & 0o777) == 0o600
    assert not [p for p in (runs / "enc").rglob("*") if "spot" in p.name]
    rows = table(kept[0])
    assert len(rows) == 3 and all(len(r["spots"]) > 24 * 24 for r in rows)   # small images: sampled whole


def test_an_honest_run_passes_with_every_image_checked(runs, tmp_path):
    assert decrypt(runs, runs / "proc", tmp_path / "dec") == 0
    rows = table(tmp_path / "dec" / "metrics")
    assert len(rows) == 3 and not table(tmp_path / "dec" / "rejects")
    assert all(r["spot_positions"] == 24 * 24 and r["spot_values"] == 24 * 24 * r["channels"] for r in rows)


def _forged(runs, tmp_path) -> tuple[Path, list[str]]:
    """The processed run with the first two images' ciphertexts exchanged (same sizes) and the third's values
    shifted by one more brightness step: a self-consistent answer to another question."""
    run = tmp_path / "forged"
    shutil.copytree(runs / "proc", run)
    t = read_rows(run)
    ids = sorted(image_ids(t), key=lambda i: sum(image_mask(t, i)))
    grey = [i for i in ids if sum(image_mask(t, i)) == min(sum(image_mask(t, j)) for j in ids)][:2]
    cts = t.column("ct").to_pylist()
    where = {i: [n for n, m in enumerate(image_mask(t, i)) if m] for i in grey}
    for a, b in zip(where[grey[0]], where[grey[1]]):
        cts[a], cts[b] = cts[b], cts[a]
    t = t.set_column(t.schema.get_field_index("ct"), "ct", pa.array(cts, type=t.schema.field("ct").type))
    write_rows(run, t)
    return run, grey


def test_a_lying_cluster_s_images_are_rejected_as_integrity(runs, tmp_path):
    run, swapped = _forged(runs, tmp_path)
    assert decrypt(runs, run, tmp_path / "dec") == 0
    rejects = table(tmp_path / "dec" / "rejects")
    assert {r["image_id"] for r in rejects if r["reason"] == "integrity"} == set(swapped)
    assert all("secret positions differ" in r["detail"] for r in rejects)
    good = table(tmp_path / "dec" / "metrics")
    assert len(good) == 1 and good[0]["image_id"] not in swapped
    assert len(list((tmp_path / "dec" / "images").glob("*.png"))) == 1         # no PNG of a rejected image
    # the same forgery with the checks skipped: decrypted as if right, and the run says it was not checked
    assert decrypt(runs, run, tmp_path / "unchecked", "--no-integrity") == 0
    unchecked = table(tmp_path / "unchecked" / "metrics")
    assert len(unchecked) == 3 and all(r["spot_positions"] is None for r in unchecked)


def test_decrypt_refuses_a_run_of_another_chain_when_told_the_chain(runs, tmp_path, capsys):
    assert decrypt(runs, runs / "proc", tmp_path / "a", "--expect-ops", "brightness:30") == 2
    err = capsys.readouterr().err
    assert "--expect-ops brightness:30" in err and "records the ops brightness:20" in err
    assert decrypt(runs, runs / "proc", tmp_path / "b", "--expect-ops", "brightness:20.0") == 0
    assert decrypt(runs, runs / "enc", tmp_path / "c", "--expect-ops", OP) == 2


def test_process_refuses_in_one_line_a_chain_the_keys_were_not_exported_for(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.random.default_rng(1).integers(0, 200, (16, 16), dtype=np.uint8)).save(images / "x.png")
    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "paper-4096") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub", "--for-op", OP) == 0
    assert not (tmp_path / "pub" / "relin.key").exists() and not (tmp_path / "pub" / "rotate.key").exists()
    assert hepix("encrypt", "--keys", tmp_path / "pub", "--input", images, "--out", tmp_path / "enc", *SPARK) == 0
    capsys.readouterr()
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "p",
                 "--op", "meanfilter:3", *SPARK) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exported without rotate.key" in err[0] and "Traceback" not in err[0]
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "q",
                 "--op", OP, *SPARK) == 0


def test_a_copy_for_a_filter_holds_its_steps_runs_it_exactly_and_refuses_other_tiles(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.random.default_rng(2).integers(0, 200, (20, 20, 3), dtype=np.uint8)).save(images / "x.png")
    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "paper-4096") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub",
                 "--for-op", "meanfilter:3") == 0
    whole, copy = (tmp_path / "keys" / "rotate.key").stat().st_size, (tmp_path / "pub" / "rotate.key").stat().st_size
    assert copy < whole / 2
    for run, tile in (("enc", []), ("small", ["--tile", "8x8"])):
        assert hepix("encrypt", "--keys", tmp_path / "pub", "--input", images, "--out", tmp_path / run, *tile,
                     *SPARK) == 0
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "p",
                 "--op", "meanfilter:3", *SPARK) == 0
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "p", "--out", tmp_path / "d",
                 "--owner", tmp_path / "enc.owner", "--images", images, *SPARK) == 0
    (row,) = table(tmp_path / "d" / "metrics")
    assert row["exact_fraction"] == 1.0 and row["spot_positions"] > 0
    capsys.readouterr()
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "small", "--out", tmp_path / "q",
                 "--op", "meanfilter:3", *SPARK) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tile 8x8 --halo 1" in err[0] and "Traceback" not in err[0]


def test_verify_owner_accepts_an_honest_run_decrypting_only_the_tiles_it_samples(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.random.default_rng(4).integers(0, 200, (64, 64), dtype=np.uint8)).save(images / "big.png")
    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "addonly-2048") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub") == 0
    assert hepix("encrypt", "--keys", tmp_path / "pub", "--input", images, "--out", tmp_path / "enc", "--tile", "8x8",
                 "--spot-positions", "3", *SPARK) == 0
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "proc",
                 "--op", OP, *SPARK) == 0
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "proc", "--out", tmp_path / "spots",
                 "--owner", tmp_path / "enc.owner", "--spots-only", *SPARK) == 0
    (row,) = table(tmp_path / "spots" / "metrics")
    assert row["spot_positions"] == 3 and 1 <= row["ciphertexts"] <= 3          # of the image's 64 tiles
    assert row["mse"] is None and not table(tmp_path / "spots" / "rejects")
    capsys.readouterr()
    assert hepix("verify", tmp_path / "proc", "--owner", tmp_path / "enc.owner", "--keys", tmp_path / "keys",
                 *SPARK) == 0
    out = capsys.readouterr().out
    assert "every image passed its spot checks" in out and f"of the owner's {8 * 8} ciphertexts" in out


def test_verify_owner_does_not_accept_a_lying_cluster_s_run(runs, tmp_path, capsys):
    run, swapped = _forged(runs, tmp_path)
    assert hepix("decrypt", "--keys", runs / "keys", "--input", run, "--out", tmp_path / "spots", "--owner",
                 runs / "enc.owner", "--spots-only", *SPARK) == 1
    assert {r["image_id"] for r in table(tmp_path / "spots" / "rejects") if r["reason"] == "integrity"} == set(swapped)
    capsys.readouterr()
    assert hepix("verify", run, "--owner", runs / "enc.owner", "--keys", runs / "keys", *SPARK) == 1
    out = capsys.readouterr().out
    assert "2 failed (integrity)" in out and "not accepted" in out
    assert not list(Path("/tmp").glob("hepix-verify-*/spots"))          # its working tables are gone


@pytest.mark.parametrize("argv, message", [
    (["verify", "RUN", "--owner", "OWNER"], "--owner and --keys go together"),
    (["decrypt", "--keys", "KEYS", "--input", "RUN", "--out", "OUT", "--spots-only"], "give --owner"),
    (["decrypt", "--keys", "KEYS", "--input", "RUN", "--out", "OUT", "--owner", "OWNER", "--spots-only", "--png"],
     "drop --png"),
])
def test_spot_checks_alone_refuse_what_they_cannot_do(runs, tmp_path, capsys, argv, message):
    where = {"RUN": runs / "proc", "OWNER": runs / "enc.owner", "KEYS": runs / "keys", "OUT": tmp_path / "out"}
    assert hepix(*[where.get(a, a) for a in argv], *SPARK) == 2
    assert message in capsys.readouterr().err
