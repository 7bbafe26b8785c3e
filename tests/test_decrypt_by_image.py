"""``hepix decrypt`` by image (one task per image, no shuffle: jobs/imagedecrypt.py) against its other way
through Spark's shuffle (jobs/decrypt.py ``through_spark``): the same metrics rows, PNGs, contact-sheet
panels and rejects, on a processed run (one image per row group) and on an encrypt run (row groups
shared by images)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from jobs.cli import main
from tests.hostile import coefficient_above_q, first_row_mask, read_rows, set_where, with_checksums, write_rows

pytestmark = [pytest.mark.spark]

SPARK = ["--master", "local[2]", "--quiet"]
#: What differs between two decryptions of the same run: the run, and how long things took.
RUN_COLUMNS = {"run_id", "encrypt_seconds", "process_seconds", "decrypt_seconds"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("by-image")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(5)
    Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(images / "alpha.png")
    Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(images / "beta.png")
    Image.fromarray(rng.integers(0, 256, (20, 14), dtype=np.uint8)).save(images / "gamma.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(images), "--out", str(root / "enc"),
                 "--tile", "8x8", *SPARK]) == 0
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc"),
                 "--op", "brightness:20", *SPARK]) == 0
    return root


def decrypt(corpus: Path, run: Path, out: Path, *, through_spark: bool, monkeypatch) -> dict:
    """Decrypt ``run`` with --png and a contact sheet, by image or through Spark; what it wrote."""
    import jobs.imagedecrypt

    monkeypatch.setattr(jobs.imagedecrypt, "MAX_AMPLIFICATION", -1.0 if through_spark else 2.0)
    monkeypatch.setattr(jobs.imagedecrypt, "MAX_EXTRA_BYTES", -1 if through_spark else 2**28)
    sheet = out.parent / f"{out.name}-sheet.png"
    code = main(["decrypt", "--keys", str(corpus / "keys"), "--input", str(run), "--out", str(out), "--owner",
                 str(corpus / "enc.owner"), "--images", str(corpus / "images"), "--png", "--contact-sheet", str(sheet),
                 *SPARK])
    assert code == 0
    from tasks.contactsheet import read_layout

    rows = ds.dataset(out / "metrics").to_table().to_pylist()
    rejects = ds.dataset(out / "rejects").to_table().to_pylist() if (out / "rejects").exists() else []
    return {"manifest": json.loads((out / "_manifest.json").read_text()),
            "metrics": sorted(({k: v for k, v in r.items() if k not in RUN_COLUMNS} for r in rows),
                              key=lambda r: r["image_id"]),
            "pngs": {p.name: np.asarray(Image.open(p)) for p in sorted((out / "images").glob("*.png"))},
            "sheet": read_layout(sheet) if sheet.exists() else None,
            "rejects": sorted((r["image_id"] or "", r["reason"], r["channel"], r["tile_y"], r["tile_x"])
                              for r in rejects)}


def same(a: dict, b: dict) -> None:
    assert a["metrics"] == b["metrics"]
    assert a["pngs"].keys() == b["pngs"].keys()
    assert all(np.array_equal(a["pngs"][k], b["pngs"][k]) for k in a["pngs"])
    assert a["rejects"] == b["rejects"]
    assert a["sheet"] == b["sheet"] and a["sheet"]
    for k in ("images_in", "images_decrypted", "images_rejected", "ciphertexts", "rejects"):
        assert a["manifest"]["counts"][k] == b["manifest"]["counts"][k]


@pytest.mark.parametrize("run", ["proc", "enc"])
def test_by_image_and_through_spark_decrypt_to_the_same_tables(corpus, tmp_path, monkeypatch, run):
    by_image = decrypt(corpus, corpus / run, tmp_path / "by-image", through_spark=False, monkeypatch=monkeypatch)
    shuffled = decrypt(corpus, corpus / run, tmp_path / "shuffled", through_spark=True, monkeypatch=monkeypatch)
    assert "plan_seconds" in by_image["manifest"]["timings"] and "check_seconds" not in by_image["manifest"]["timings"]
    assert "check_seconds" in shuffled["manifest"]["timings"]
    same(by_image, shuffled)
    assert len(by_image["metrics"]) == 3 and all(r["exact_fraction"] == 1.0 for r in by_image["metrics"])
    assert all(r["reference"] == ("plaintext-processed" if run == "proc" else "original") for r in by_image["metrics"])


def test_an_image_with_a_bad_row_is_rejected_the_same_way_by_image(corpus, tmp_path, monkeypatch):
    run = tmp_path / "forged"
    shutil.copytree(corpus / "proc", run)
    t = read_rows(run)
    victim = sorted(set(t.column("image_id").to_pylist()))[0]
    write_rows(run, with_checksums(set_where(t, first_row_mask(t, victim), "ct", coefficient_above_q)))
    by_image = decrypt(corpus, run, tmp_path / "by-image", through_spark=False, monkeypatch=monkeypatch)
    shuffled = decrypt(corpus, run, tmp_path / "shuffled", through_spark=True, monkeypatch=monkeypatch)
    same(by_image, shuffled)
    assert [r[:2] for r in by_image["rejects"]] == [(victim, "seal-refused")]
    assert victim not in {r["image_id"] for r in by_image["metrics"]}
    assert not any(name.startswith(victim) for name in by_image["pngs"])


def test_the_sheet_still_shows_the_first_good_images_when_one_it_would_show_is_rejected(corpus, tmp_path,
                                                                                         monkeypatch):
    """The tasks draw the panels of the first images by name before any image is judged over all tasks;
    when one of those is then left out, the next good one is drawn by a second pass of its own."""
    import jobs.decrypt

    monkeypatch.setattr(jobs.decrypt, "MAX_IMAGES", 2)
    run = tmp_path / "forged"
    shutil.copytree(corpus / "proc", run)
    names = {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in ds.dataset(corpus / "enc.owner" / "images")
             .to_table().to_pylist()}
    t = read_rows(run)
    write_rows(run, with_checksums(set_where(t, first_row_mask(t, names["alpha.png"]), "ct", coefficient_above_q)))
    by_image = decrypt(corpus, run, tmp_path / "by-image", through_spark=False, monkeypatch=monkeypatch)
    shuffled = decrypt(corpus, run, tmp_path / "shuffled", through_spark=True, monkeypatch=monkeypatch)
    same(by_image, shuffled)
    assert {p["image"].split()[0] for p in by_image["sheet"]} == {"beta.png", "gamma.png"}
