"""`hepix audit` end to end: encrypt a 64x64 USC-SIPI crop with Spark, audit the table without keys.

Preset addonly-2048 (one prime, N=2048) keeps the encryptions cheap and shows the
audit is not tied to the paper's parameters; the layouts and strategies differ per run.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from he_pipeline import usc_crop
from PIL import Image

from jobs.cli import main

pytestmark = pytest.mark.spark

SPARK = ["--master", "local[2]", "--quiet"]


def hepix_ok(*argv) -> None:
    assert main([str(a) for a in argv]) == 0, f"hepix {' '.join(map(str, argv))} failed"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit-job")
    (root / "img").mkdir()
    Image.fromarray(usc_crop("5.1.12.tiff")).save(root / "img" / "clock.png")
    hepix_ok("keygen", "--preset", "addonly-2048", "--out", root / "keys")
    hepix_ok("export-public", "--keys", root / "keys", "--out", root / "public")
    return root


_runs: dict = {}


@pytest.fixture
def audited(setup, capsys):
    """audited(layout, strategy) -> (audit rows by test, stdout of hepix audit, output directory)."""
    def run(layout: str, strategy: str):
        key = (layout, strategy)
        if key not in _runs:
            enc, out = setup / f"enc-{layout}-{strategy}", setup / f"audit-{layout}-{strategy}"
            extra = ["--allow-leaky"] if strategy != "fresh" else []
            hepix_ok("encrypt", "--keys", setup / "public", "--input", setup / "img", "--out", enc,
                     "--layout", layout, "--strategy", strategy, *extra, *SPARK)
            capsys.readouterr()
            hepix_ok("audit", "--input", enc, "--out", out, "--images", setup / "img", "--owner",
                     enc.with_name(enc.name + ".owner"), "--seed", "1")
            stdout = capsys.readouterr().out
            rows = ds.dataset(str(out / "audit"), format="parquet").to_table().to_pylist()
            metadata = [r for r in rows if r["test"] == "metadata"]
            _runs[key] = ({r["test"]: r for r in rows if r["test"] != "metadata"}, stdout, out, metadata)
        return _runs[key]
    return run


def test_audit_flags_full_caching_and_recovers_the_grey_levels(audited):
    rows, stdout, out, _ = audited("pixel", "full")
    assert rows["recurring-differences"]["verdict"] == "leaks"
    assert rows["recurring-differences"]["recovered_fraction"] >= 0.95
    assert rows["linear-dependence"]["verdict"] == "leaks"
    assert rows["identical"]["security"] == "leaks" and rows["identical"]["strategy"] == "full"
    assert "LEAKS:" in stdout and "recurring-differences" in stdout
    picture = out / rows["recurring-differences"]["picture"]
    assert Image.open(picture).size == (64, 64)


def test_audit_recovers_exact_differences_from_zinc(audited):
    rows, stdout, _, _ = audited("pixel", "zinc")
    assert rows["small-difference"]["verdict"] == "leaks"
    assert rows["small-difference"]["exact_difference_fraction"] == 1.0


@pytest.mark.parametrize("layout", ["pixel", "packed"])
def test_audit_passes_fresh_public_key_outputs(audited, layout):
    rows, stdout, _, metadata = audited(layout, "fresh")
    assert set(rows) == {"identical", "recurring-differences", "linear-dependence", "small-difference"}
    assert all(r["verdict"] == "pass" for r in rows.values()), {t: r["detail"] for t, r in rows.items()}
    assert "no test distinguished" in stdout
    # no column besides the ciphertexts confirms the candidate image (hepix's table carries none)
    assert metadata and all(r["verdict"] == "pass" for r in metadata), [r["detail"] for r in metadata]


def test_audit_writes_a_manifest_naming_its_input_and_no_key(audited):
    _, _, out, _ = audited("pixel", "full")
    doc = json.loads((Path(out) / "_manifest.json").read_text())
    assert doc["job"] == "audit" and doc["status"] == "complete"
    assert not any("keys" in str(v) for v in doc["options"].values())


def test_audit_refuses_a_directory_without_a_run(tmp_path, capsys):
    assert main(["audit", "--input", str(tmp_path), "--out", str(tmp_path / "a")]) == 2
    assert "no _manifest.json" in capsys.readouterr().err
