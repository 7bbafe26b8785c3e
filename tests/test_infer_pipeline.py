"""Encrypted inference through the jobs: encrypt-digits -> process --op infer:MODEL -> decrypt
(predictions with labels, accuracy), CKKS and BFV, and the refusals."""
from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from jobs.cli import main

pytestmark = [pytest.mark.seconds(40), pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("sklearn")

SPARK = ["--master", "local[2]", "--quiet"]


def _keys(root, preset):
    assert main(["keygen", "--out", str(root / "keys"), "--preset", preset]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0


def _run(root, op, extra=()):
    assert main(["encrypt-digits", "--keys", str(root / "pub"), "--out", str(root / "enc"), *extra] + SPARK) == 0
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc"),
                 "--op", op] + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc"), "--out", str(root / "dec")]
                + SPARK) == 0
    metrics = ds.dataset(root / "dec" / "inference_metrics").to_table().to_pylist()
    preds = ds.dataset(root / "dec" / "predictions").to_table().to_pylist()
    return {m["batch_id"]: m for m in metrics}, preds


@pytest.mark.parametrize("preset,op,extra", [
    ("paper-4096", "infer:logreg", ["--pack"]),
    ("bfv-4096", "infer:logreg", []),
    ("match-8192", "infer:tinycnn", []),
])
def test_inference_decrypts_to_predictions_and_accuracy(tmp_path, preset, op, extra):
    _keys(tmp_path, preset)
    metrics, preds = _run(tmp_path, op, extra)
    overall = metrics["all"]
    assert overall["samples"] == 108 and len(preds) == 108
    assert overall["accuracy"] >= 0.98
    assert overall["bytes_per_sample"] == overall["input_bytes"] / 108
    assert sorted(p["sample"] for p in preds) == list(range(108))
    assert {p["label"] for p in preds} == {0, 1}
    assert all(len(p["scores"]) == 1 and 0 <= p["prediction"] <= 1 for p in preds)
    m = json.loads((tmp_path / "enc" / "_manifest.json").read_text())
    assert m["layout"] == "digits" and m["security"] == "ind-cpa"


def test_too_small_preset_is_refused_naming_one_that_works(tmp_path, capsys):
    _keys(tmp_path, "paper-4096")
    assert main(["encrypt-digits", "--keys", str(tmp_path / "pub"), "--out", str(tmp_path / "enc")] + SPARK) == 0
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"),
                 "--out", str(tmp_path / "proc"), "--op", "infer:tinycnn"] + SPARK) == 2
    err = capsys.readouterr().err
    assert "needs 3 level(s), paper-4096 has 1" in err and "hepix keygen --preset match-8192" in err
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"),
                 "--out", str(tmp_path / "proc"), "--op", "infer:logreg,task=all"] + SPARK) == 2
    assert "task=01" in capsys.readouterr().err


@pytest.mark.parametrize("preset,model,samples,layout", [
    ("bfv-4096", "logreg", 3, "coefficients"),
    ("match-8192", "tinycnn", 2, "windows"),
])
def test_a_few_digits_run_one_per_ciphertext_in_the_chosen_layout(tmp_path, capsys, preset, model, samples, layout):
    from hecore.infer import layouts
    from hecore.infer import models as infer

    _keys(tmp_path, preset)
    metrics, preds = _run(tmp_path, f"infer:{model}", ["--model", model, "--samples", str(samples)])
    out = capsys.readouterr().out
    assert f"layout {layout} (chosen for {samples} samples of {model} on {preset}" in out
    assert f"layout {layout} (chosen when the digits were encrypted)" in out
    m = json.loads((tmp_path / "enc" / "_manifest.json").read_text())
    assert m["options"]["infer_layout"] == layout and m["counts"]["ciphertexts"] == samples
    task = infer.digits_task("01")
    x = task.x_test[:samples]
    plain = infer.predictions(layouts.plain_outputs(infer.train(model, task), x), True)
    assert sorted((p["sample"], p["prediction"]) for p in preds) == list(enumerate(plain.tolist()))
    assert metrics["all"]["samples"] == samples and len(metrics) == samples + 1


def test_a_layout_for_another_model_is_refused(tmp_path, capsys):
    _keys(tmp_path, "paper-4096")
    assert main(["encrypt-digits", "--keys", str(tmp_path / "pub"), "--out", str(tmp_path / "enc"),
                 "--model", "logreg", "--layout", "windows"] + SPARK) == 2
    assert "windows layout serves TinyCNN" in capsys.readouterr().err
