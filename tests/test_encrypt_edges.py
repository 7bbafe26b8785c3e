"""Edge cases of `hepix encrypt` that the main pipeline tests do not reach."""
from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from jobs.cli import main

pytestmark = pytest.mark.spark


def test_a_corpus_with_no_usable_image_yields_empty_tables_and_rejects_everything(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "notes.txt").write_text("not an image\n")
    (src / "empty.png").write_bytes(b"")
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    out = tmp_path / "enc"
    assert main(["encrypt", "--keys", str(tmp_path / "keys"), "--input", str(src), "--out", str(out),
                 "--master", "local[2]", "--quiet"]) == 0
    counts = json.loads((out / "_manifest.json").read_text())["counts"]
    assert (counts["images_in"], counts["images_encrypted"], counts["images_rejected"]) == (2, 0, 2)
    assert ds.dataset(out / "ciphertexts").to_table().num_rows == 0
    reasons = sorted(r["reason"] for r in ds.dataset(out / "rejects").to_table().to_pylist())
    assert reasons == ["empty-file", "not-an-image"]


def test_an_input_path_that_does_not_exist_is_a_clear_error(tmp_path, capsys):
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    missing = tmp_path / "no-such-folder"
    code = main(["encrypt", "--keys", str(tmp_path / "keys"), "--input", str(missing), "--out",
                 str(tmp_path / "enc"), "--master", "local[2]", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot read images" in err and "no-such-folder" in err
    assert not (tmp_path / "enc" / "_manifest.json").exists()


def test_spark_parquet_writer_path_round_trips_exactly(tmp_path):
    """The path clusters and hdfs:// use: Spark's own Parquet writer for the ciphertext rows."""
    import numpy as np
    from PIL import Image

    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(src / "rgb.png")
    Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(src / "grey.png")
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    enc, dec = tmp_path / "enc", tmp_path / "dec"
    assert main(["encrypt", "--keys", str(tmp_path / "keys"), "--input", str(src), "--out", str(enc),
                 "--writer", "spark", "--tile", "4x4", "--master", "local[2]", "--quiet"]) == 0
    assert not any(p.name.startswith("part-") and "-empty" in p.name for p in (enc / "ciphertexts").iterdir())
    assert ds.dataset(enc / "ciphertexts").to_table().num_rows == 8 * 8 * 3 + 8 * 8
    assert main(["decrypt", "--keys", str(tmp_path / "keys"), "--input", str(enc), "--out", str(dec),
                 "--images", str(src), "--master", "local[2]", "--quiet"]) == 0
    metrics = ds.dataset(dec / "metrics").to_table().to_pylist()
    assert len(metrics) == 2 and all(m["mse"] == 0 and m["exact_fraction"] == 1.0 for m in metrics)
