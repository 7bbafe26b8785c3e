"""TFHE through the pipeline: `hepix keygen --scheme tfhe` -> encrypt (with the public keys only) -> process
(saturating brightness, then a threshold, server key only) -> decrypt, on Spark in local mode.

TFHE ops cost 0.1 to 0.35 s per pixel value, so the image is a 4x4 RGB crop of scikit-image's
astronaut (48 values), chosen to hold values that saturate under +60 (>= 196), values that stay
below the threshold after it, and values in between: the decrypted result is compared with the
plaintext reference (saturation after every op, as the circuits compute it) and must be exact.
"""
from __future__ import annotations

import builtins
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hostile import first_row_mask, image_ids, manifest, random_bytes, read_rows, set_where, write_rows
from PIL import Image
from secretbytes import files_holding

from hecore.tfhe.ops import Brightness as SatBrightness
from hecore.tfhe.ops import BrightnessWrap, Threshold
from jobs.cli import main

pytestmark = [pytest.mark.seconds(100), pytest.mark.spark]

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
def key_dirs(tmp_path_factory):
    """keygen -> export-public: the owner's key directory and the public one, (keys, public)."""
    root = tmp_path_factory.mktemp("tfhe-keys")
    keys, pub = root / "keys", root / "public"
    hepix_ok("keygen", "--scheme", "tfhe", "--out", keys)
    hepix_ok("export-public", "--keys", keys, "--out", pub)
    return keys, pub


@pytest.fixture(scope="module")
def run(tmp_path_factory, key_dirs):
    """keygen -> export-public -> encrypt with the public directory (the compact public key) -> process
    brightness:60 -> process threshold:128 -> decrypt."""
    root = tmp_path_factory.mktemp("tfhe-pipeline")
    images = root / "images"
    images.mkdir()
    Image.fromarray(crop()).save(images / "crop.png")
    keys, pub = key_dirs
    hepix_ok("encrypt", "--keys", pub, "--input", images, "--out", root / "enc", *SPARK)
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


def test_public_encrypt_writes_one_compact_ciphertext_per_pixel_value(run):
    root, _ = run
    manifest = json.loads((root / "enc" / "_manifest.json").read_text())
    assert manifest["preset"] == "tfhe-default" and manifest["strategy"] == "tfhe-compact"
    assert manifest["layout"] == "pixel" and manifest["options"] == {**manifest["options"], "encryption": "public",
                                                                     "encoding": "compact"}
    table = pq.read_table(root / "enc" / "ciphertexts")
    assert table.num_rows == crop().size
    assert set(table.column("scheme").to_pylist()) == {"tfhe"}
    assert set(table.column("strategy").to_pylist()) == {"tfhe-compact"}
    assert {len(c) for c in table.column("ct").to_pylist()} == {16627}     # bytes per pixel value, compact


def test_symmetric_encrypt_writes_one_seeded_ciphertext_per_pixel_value(key_dirs, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(crop()[:2, :2]).save(images / "crop.png")
    hepix_ok("encrypt", "--encryption", "symmetric", "--keys", key_dirs[0], "--input", images, "--out",
             tmp_path / "enc", *SPARK)
    manifest = json.loads((tmp_path / "enc" / "_manifest.json").read_text())
    assert manifest["strategy"] == "tfhe-seeded" and manifest["options"]["encryption"] == "symmetric"
    table = pq.read_table(tmp_path / "enc" / "ciphertexts")
    assert {len(c) for c in table.column("ct").to_pylist()} == {871}       # bytes per pixel value, seeded


def test_public_encrypt_with_an_old_key_directory_says_what_to_do(key_dirs, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(key_dirs[1], old)
    (old / "public.key").unlink()
    doc = json.loads((old / "hepix-keys.json").read_text())
    del doc["sha256"]["public.key"]
    doc["format"] = 1                   # then the fingerprint was the server key's sha256
    doc["fingerprint"] = hashlib.sha256((old / "server.key").read_bytes()).hexdigest()
    (old / "hepix-keys.json").write_text(json.dumps(doc))
    assert main(["encrypt", "--keys", str(old), "--input", str(tmp_path), "--out", str(tmp_path / "enc"),
                 *SPARK]) == 2
    err = capsys.readouterr().err
    assert "no compact public key" in err and "--encryption symmetric" in err and "hepix keygen" in err


def test_process_runs_the_ops_with_the_server_key_only(run, key_dirs):
    root, opened = run
    assert opened.client_key() == [], "a process job opened the client key"
    secret = (key_dirs[0] / "client.key").read_bytes()
    for out in ("bright", "mask"):
        assert files_holding(secret, root / out) == []
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


def test_process_refuses_the_owners_directory_without_opening_the_client_key(run, key_dirs, monkeypatch, capsys):
    root, _ = run
    opened = Opened(monkeypatch)
    assert main(["process", "--keys", str(key_dirs[0]), "--input", str(root / "enc"), "--out",
                 str(root / "never"), "--op", "threshold:1", *SPARK]) == 2
    monkeypatch.undo()
    assert "client.key" in capsys.readouterr().err and opened.client_key() == []
    assert not (root / "never").exists()


def test_tfhe_keys_refuse_an_op_only_the_seal_schemes_run(run, key_dirs, capsys):
    root, _ = run
    assert main(["process", "--keys", str(key_dirs[1]), "--input", str(root / "enc"), "--out",
                 str(root / "never"), "--op", "meanfilter:3", *SPARK]) == 2
    assert "cannot run on TFHE keys" in capsys.readouterr().err


def test_process_rejects_a_ciphertext_tfhe_rs_refuses_and_processes_the_rest(key_dirs, tmp_path):
    """A cluster's garbage of the right size (871 bytes, checksum recomputed) in one image's row: process
    leaves that image out with a ``tfhe-refused`` rejects row naming the row, processes the other, exits 0
    (1 with --fail-on-rejects), and the owner decrypts the other exactly."""
    keys, pub = key_dirs
    images = tmp_path / "images"
    images.mkdir()
    for name, px in (("a.png", [[0, 150], [200, 255]]), ("b.png", [[10, 196], [90, 240]])):   # 2x2 grey
        Image.fromarray(np.array(px, dtype=np.uint8)).save(images / name)
    enc = tmp_path / "enc"
    hepix_ok("encrypt", "--keys", keys, "--input", images, "--out", enc, *SPARK)
    t = read_rows(enc)
    ids = image_ids(t)
    forged = first_row_mask(t, ids[0])
    assert {len(c) for c in t.column("ct").to_pylist()} == {16627}       # public-key (compact) rows
    write_rows(enc, set_where(t, forged, "ct", random_bytes))
    row = [r for r, m in zip(t.to_pylist(), forged) if m][0]

    hepix_ok("process", "--keys", pub, "--input", enc, "--out", tmp_path / "proc", "--op", "brightness:60", *SPARK)
    rejects = pq.read_table(tmp_path / "proc" / "rejects").to_pylist()
    assert [(r["image_id"], r["reason"], r["channel"], r["tile_y"], r["tile_x"], r["index"]) for r in rejects] == [
        (ids[0], "tfhe-refused", row["channel"], row["tile_y"], row["tile_x"], row["index"])]
    assert "tfhe-rs refuses the ciphertext (16627 bytes)" in rejects[0]["detail"] and rejects[0]["bytes"] == 16627
    out = read_rows(tmp_path / "proc")
    assert image_ids(out) == [ids[1]] and out.num_rows == 4
    c = manifest(tmp_path / "proc")["counts"]
    assert (c["images_in"], c["images_encrypted"], c["images_rejected"], c["rejects"]) == (2, 1, 1, 1)

    hepix_ok("decrypt", "--keys", keys, "--input", tmp_path / "proc", "--out", tmp_path / "dec", "--owner",
             str(enc) + ".owner", "--images", images, *SPARK)
    metrics = pq.read_table(tmp_path / "dec" / "metrics").to_pylist()
    assert [m["image_id"] for m in metrics] == [ids[1]]
    m = metrics[0]
    assert m["reference"] == "plaintext-processed" and m["ops"] == "brightness:60"
    assert m["mse"] == 0.0 and m["exact_fraction"] == 1.0 and m["ciphertexts"] == 4

    assert main([str(a) for a in ("process", "--keys", pub, "--input", enc, "--out", tmp_path / "strict", "--op",
                                  "brightness:60", "--fail-on-rejects", *SPARK)]) == 1
    assert (tmp_path / "strict" / "_manifest.json").is_file()          # finished all the same
