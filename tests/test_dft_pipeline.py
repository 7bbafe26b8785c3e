"""dftfilter through the Spark jobs: encrypt (packed, halo 0) -> process --op dftfilter -> decrypt against
the per-tile NumPy reference; the planner's refusal of a too-small preset."""
from __future__ import annotations

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK = ["--master", "local[2]", "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("dft")
    src = root / "in"
    src.mkdir()
    rng = np.random.default_rng(8)
    Image.fromarray(rng.integers(0, 256, (40, 70, 3), dtype=np.uint8)).save(src / "rgb.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "dft-8192"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(root / "enc"),
                 "--halo", "0"] + SPARK) == 0
    return root, src


def test_dftfilter_decrypts_to_the_tiled_numpy_pipeline(run):
    root, src = run
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc"),
                 "--op", "dftfilter:lowpass=0.5"] + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc"), "--out", str(root / "dec"),
                 "--owner", str(root / "enc.owner"), "--images", str(src)] + SPARK) == 0
    (r,) = ds.dataset(root / "dec" / "metrics").to_table().to_pylist()
    assert r["ops"] == "dftfilter:lowpass=0.5,levels=2,stages=fold,tile=64x64"
    assert r["reference"] == "plaintext-processed"
    assert r["max_abs_err"] < 0.05 and r["exact_fraction"] > 0.95, r


def test_too_small_preset_is_refused_naming_one_that_works(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(src / "g.png")
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(tmp_path / "keys"), "--out", str(tmp_path / "pub")]) == 0
    assert main(["encrypt", "--keys", str(tmp_path / "pub"), "--input", str(src), "--out", str(tmp_path / "enc"),
                 "--halo", "0"] + SPARK) == 0
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"),
                 "--out", str(tmp_path / "proc"), "--op", "dftfilter:lowpass=0.5"] + SPARK) == 2
    err = capsys.readouterr().err
    assert "needs 4 level(s), paper-4096 has 1" in err and "hepix keygen --preset dft-8192" in err


def test_a_ringer_compares_every_value_of_a_dft_run_and_passes_an_honest_one(run, tmp_path):
    root, src = run
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(tmp_path / "enc"),
                 "--halo", "0", "--spot-positions", "0", "--ringers", "1"] + SPARK) == 0
    assert main(["process", "--keys", str(root / "pub"), "--input", str(tmp_path / "enc"), "--out",
                 str(tmp_path / "proc"), "--op", "dftfilter:lowpass=0.5"] + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(tmp_path / "proc"), "--out",
                 str(tmp_path / "dec"), "--owner", str(tmp_path / "enc.owner")] + SPARK) == 0
    (r,) = ds.dataset(tmp_path / "dec" / "metrics").to_table().to_pylist()
    assert (r["spot_positions"], r["spot_values"]) == (40 * 70, 40 * 70 * 3)
    assert ds.dataset(tmp_path / "dec" / "rejects").to_table().num_rows == 0
