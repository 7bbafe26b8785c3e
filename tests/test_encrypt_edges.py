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
    assert main(["encrypt", "--layout", "pixel", "--keys", str(tmp_path / "keys"), "--input", str(src), "--out", str(out),
                 "--master", "local[2]", "--quiet"]) == 0
    counts = json.loads((out / "_manifest.json").read_text())["counts"]
    assert (counts["images_in"], counts["images_encrypted"], counts["images_rejected"]) == (2, 0, 2)
    assert ds.dataset(out / "ciphertexts").to_table().num_rows == 0
    # the rejects name the owner's files: they are in the owner map, not next to the ciphertexts
    reasons = sorted(r["reason"] for r in ds.dataset(tmp_path / "enc.owner" / "rejects").to_table().to_pylist())
    assert reasons == ["empty-file", "not-an-image"]


def test_an_input_path_that_does_not_exist_is_a_clear_error(tmp_path, capsys):
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    missing = tmp_path / "no-such-folder"
    code = main(["encrypt", "--layout", "pixel", "--keys", str(tmp_path / "keys"), "--input", str(missing), "--out",
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
    assert main(["encrypt", "--layout", "pixel", "--keys", str(tmp_path / "keys"), "--input", str(src), "--out", str(enc),
                 "--writer", "spark", "--tile", "4x4", "--master", "local[2]", "--quiet"]) == 0
    assert not any(p.name.startswith("part-") and "-empty" in p.name for p in (enc / "ciphertexts").iterdir())
    assert ds.dataset(enc / "ciphertexts").to_table().num_rows == 8 * 8 * 3 + 8 * 8
    assert main(["decrypt", "--keys", str(tmp_path / "keys"), "--input", str(enc), "--out", str(dec),
                 "--owner", str(tmp_path / "enc.owner"), "--images", str(src), "--master", "local[2]", "--quiet"]) == 0
    metrics = ds.dataset(dec / "metrics").to_table().to_pylist()
    assert len(metrics) == 2 and all(m["mse"] == 0 and m["exact_fraction"] == 1.0 for m in metrics)


@pytest.fixture(scope="module")
def packed_run(tmp_path_factory):
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("packed")
    src = root / "in"
    src.mkdir()
    rng = np.random.default_rng(11)
    Image.fromarray(rng.integers(0, 256, (20, 13, 3), dtype=np.uint8)).save(src / "rgb.png")
    Image.fromarray(rng.integers(0, 256, (40, 37), dtype=np.uint8)).save(src / "grey.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    enc = root / "enc"
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(enc),
                 "--layout", "packed", "--master", "local[2]", "--quiet"]) == 0
    return root, src, enc


def test_packed_layout_makes_one_ciphertext_per_tile_channel_with_the_default_tile(packed_run):
    _, _, enc = packed_run
    m = json.loads((enc / "_manifest.json").read_text())
    assert m["layout"] == "packed" and m["security"] == "ind-cpa"
    assert m["options"]["tile"] == [30, 30] and m["options"]["halo"] == 1   # N=2048: 32x32 blocks, halo 1
    # rgb 20x13: one 30x30 tile x 3 channels; grey 40x37: 2x2 tiles x 1 channel
    assert m["counts"]["ciphertexts"] == 3 + 4
    t = ds.dataset(enc / "ciphertexts").to_table()
    assert set(t.column("layout").to_pylist()) == {"packed"}
    assert set(t.column("index").to_pylist()) == {0}


def test_packed_layout_decrypts_exactly(packed_run):
    root, src, enc = packed_run
    dec = root / "dec"
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(enc), "--out", str(dec),
                 "--owner", str(root / "enc.owner"), "--images", str(src), "--master", "local[2]", "--quiet"]) == 0
    metrics = ds.dataset(dec / "metrics").to_table().to_pylist()
    assert len(metrics) == 2
    assert all(r["mse"] == 0 and r["exact_fraction"] == 1.0 and r["reference"] == "original" for r in metrics)
    assert sum(r["ciphertexts"] for r in metrics) == 7


def test_process_runs_packed_pointwise_ops_on_addonly_keys_and_refuses_a_filter_naming_a_preset(packed_run, capsys):
    root, _, enc = packed_run
    base = ["process", "--keys", str(root / "pub"), "--input", str(enc), "--master", "local[2]", "--quiet"]
    assert main(base + ["--out", str(root / "proc"), "--op", "brightness:5"]) == 0
    t = ds.dataset(root / "proc" / "ciphertexts").to_table()
    assert t.num_rows == 7 and set(map(tuple, t.column("ops").to_pylist())) == {("brightness:5",)}
    # addonly-2048 has no key switching, so no rotations: the planner names a preset that has them
    assert main(base + ["--out", str(root / "filt"), "--op", "meanfilter:3"]) == 2
    err = capsys.readouterr().err
    assert "no key switching" in err and "hepix keygen --preset paper-4096" in err


def test_packed_layout_refuses_a_caching_strategy_and_an_oversized_tile(tmp_path, capsys):
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    base = ["encrypt", "--keys", str(tmp_path / "keys"), "--input", str(tmp_path), "--out", str(tmp_path / "e"),
            "--layout", "packed", "--master", "local[2]", "--quiet"]
    assert main(base + ["--strategy", "full", "--allow-leaky"]) == 2
    assert "pixel-layout mode" in capsys.readouterr().err
    assert main(base + ["--tile", "64x64"]) == 2
    assert "4356 pixels" in capsys.readouterr().err      # 66x66 with the default halo of 1
    assert main(base + ["--tile", "sixteen"]) == 2
    assert "--tile sixteen" in capsys.readouterr().err
