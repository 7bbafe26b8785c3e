"""TFHE through the pipeline: `hepix keygen --scheme tfhe` -> encrypt -> process (saturating brightness,
then a threshold, server key only) -> decrypt, on Spark in local mode.

TFHE ops cost 0.1 to 0.35 s per pixel value, so the image is a 4x4 RGB crop of scikit-image's
astronaut (48 values), chosen to hold values that saturate under +60 (>= 196), values that stay
below the threshold after it, and values in between: the decrypted result is compared with the
plaintext reference (saturation after every op, as the circuits compute it) and must be exact.
"""
from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from hecore.tfhe.ops import Brightness as SatBrightness
from hecore.tfhe.ops import BrightnessWrap, Threshold
from jobs.cli import main

pytestmark = pytest.mark.spark

SPARK = ["--master", "local[2]", "--quiet"]


def hepix_ok(*argv) -> None:
    assert main([str(a) for a in argv]) == 0, f"hepix {' '.join(map(str, argv))} failed"


def crop() -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(data.astronaut()[32:36, 400:404])


class Opened:
    """Every path this process opens while it is installed (builtins.open, Path.open, os.open)."""

    def __init__(self, monkeypatch):
        self.paths: list[str] = []
        real_open, real_os_open, real_path_open = builtins.open, os.open, Path.open

        def spy_open(file, *a, **k):
            self.paths.append(os.fspath(file) if not isinstance(file, int) else "")
            return real_open(file, *a, **k)

        def spy_os_open(path, *a, **k):
            self.paths.append(os.fspath(path))
            return real_os_open(path, *a, **k)

        def spy_path_open(p, *a, **k):
            self.paths.append(os.fspath(p))
            return real_path_open(p, *a, **k)

        monkeypatch.setattr(builtins, "open", spy_open)
        monkeypatch.setattr(os, "open", spy_os_open)
        monkeypatch.setattr(Path, "open", spy_path_open)

    def client_key(self) -> list[str]:
        return [p for p in self.paths if p.endswith("client.key")]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """keygen -> export-public -> encrypt -> process brightness:60 -> process threshold:128 -> decrypt."""
    root = tmp_path_factory.mktemp("tfhe-pipeline")
    images = root / "images"
    images.mkdir()
    Image.fromarray(crop()).save(images / "crop.png")
    keys, pub = root / "keys", root / "public"
    hepix_ok("keygen", "--scheme", "tfhe", "--out", keys)
    hepix_ok("export-public", "--keys", keys, "--out", pub)
    hepix_ok("encrypt", "--keys", keys, "--input", images, "--out", root / "enc", *SPARK)
    mp = pytest.MonkeyPatch()
    opened = Opened(mp)
    try:
        hepix_ok("process", "--keys", pub, "--input", root / "enc", "--out", root / "bright", "--op", "brightness:60",
                 *SPARK)
        hepix_ok("process", "--keys", pub, "--input", root / "bright", "--out", root / "mask", "--op",
                 "threshold:128", *SPARK)
    finally:
        mp.undo()
    hepix_ok("decrypt", "--keys", keys, "--input", root / "mask", "--out", root / "dec", "--owner",
             str(root / "enc") + ".owner", "--images", images, *SPARK)
    return root, opened


def test_the_crop_tells_saturation_from_wrapping():
    x = crop()
    sat = Threshold(128).reference(SatBrightness(60).reference(x))
    wrap = Threshold(128).reference(BrightnessWrap(60).reference(x))
    assert (sat != wrap).sum() >= 6 and 0 < (sat == 0).sum() < x.size


def test_encrypt_writes_one_seeded_ciphertext_per_pixel_value(run):
    root, _ = run
    manifest = json.loads((root / "enc" / "_manifest.json").read_text())
    assert manifest["preset"] == "tfhe-default" and manifest["strategy"] == "tfhe-seeded"
    assert manifest["layout"] == "pixel" and manifest["options"]["encoding"] == "seeded"
    table = pq.read_table(root / "enc" / "ciphertexts")
    assert table.num_rows == crop().size
    assert set(table.column("scheme").to_pylist()) == {"tfhe"}
    assert {len(c) for c in table.column("ct").to_pylist()} == {871}       # bytes per pixel value, seeded


def test_process_runs_the_ops_with_the_server_key_only(run):
    root, opened = run
    assert opened.client_key() == [], "a process job opened the client key"
    secret = (root / "keys" / "client.key").read_bytes()
    window = secret[len(secret) // 2: len(secret) // 2 + 48]
    for out in ("bright", "mask"):
        for f in (root / out).rglob("*"):
            assert not f.is_file() or window not in f.read_bytes(), f
    manifest = json.loads((root / "mask" / "_manifest.json").read_text())
    assert manifest["ops"] == ["brightness:60", "threshold:128"] and manifest["strategy"] == "tfhe-full"


def test_decrypt_is_exact_against_the_saturating_reference(run):
    root, _ = run
    metrics = pq.read_table(root / "dec" / "metrics").to_pylist()
    assert len(metrics) == 1
    m = metrics[0]
    assert m["reference"] == "plaintext-processed" and m["ops"] == "brightness:60|threshold:128"
    assert m["mse"] == 0.0 and m["exact_fraction"] == 1.0 and m["max_abs_err"] == 0.0
    assert m["ciphertexts"] == crop().size


def test_process_refuses_the_owners_directory_without_opening_the_client_key(run, monkeypatch, capsys):
    root, _ = run
    opened = Opened(monkeypatch)
    assert main(["process", "--keys", str(root / "keys"), "--input", str(root / "enc"), "--out",
                 str(root / "never"), "--op", "threshold:1", *SPARK]) == 2
    monkeypatch.undo()
    assert "client.key" in capsys.readouterr().err and opened.client_key() == []
    assert not (root / "never").exists()


def test_tfhe_keys_refuse_an_op_only_the_seal_schemes_run(run, capsys):
    root, _ = run
    assert main(["process", "--keys", str(root / "public"), "--input", str(root / "enc"), "--out",
                 str(root / "never"), "--op", "meanfilter:3", *SPARK]) == 2
    assert "cannot run on TFHE keys" in capsys.readouterr().err
