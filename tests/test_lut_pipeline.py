"""8-bit tables on packed BFV through the pipeline: `hepix keygen --op threshold:128` (planned: lut-16384)
-> export-public -> encrypt (packed) -> process threshold:128 (public keys: relinearisation, no secret)
-> process a saturating chain on its output -> decrypt, on Spark in local mode.

A table costs a few seconds per ciphertext (16,384 slots), so the images are small crops: a USC-SIPI
RGB picture's, a grey one's and, where the data set is present, a DIV2K picture's.  The decrypted results must equal the plaintext reference exactly
(saturation after every op, as TFHE's circuits compute it).
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import DATASETS, real_dataset_present, shared_dataset
from PIL import Image

from hecore.tfhe.ops import chain_table, parse_op
from jobs.cli import main

pytestmark = [pytest.mark.seconds(75), pytest.mark.spark]

SPARK = ["--master", "local[2]", "--quiet"]


def hepix_ok(*argv) -> None:
    assert main([str(a) for a in argv]) == 0, f"hepix {' '.join(map(str, argv))} failed"


def crops() -> dict[str, np.ndarray]:
    colour = np.asarray(Image.open(shared_dataset("usc-sipi/4.1.05.tiff")).convert("RGB"))
    grey = np.asarray(Image.open(shared_dataset("usc-sipi/5.1.12.tiff")).convert("L"))
    out = {"colour.png": np.ascontiguousarray(colour[100:124, 90:130]),
           "grey.png": np.ascontiguousarray(grey[96:136, 96:126])}
    if real_dataset_present("div2k"):           # a DIV2K crop too where the data set is here
        div2k = np.asarray(Image.open(DATASETS / "div2k" / "0001x2.png").convert("RGB"))
        out["div2k.png"] = np.ascontiguousarray(div2k[300:340, 500:548])
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lut-pipeline")
    images = root / "images"
    images.mkdir()
    for name, px in crops().items():
        Image.fromarray(px).save(images / name)
    keys, pub = root / "keys", root / "public"
    hepix_ok("keygen", "--op", "threshold:128", "--out", keys)
    hepix_ok("export-public", "--keys", keys, "--out", pub)
    hepix_ok("encrypt", "--keys", keys, "--input", images, "--out", root / "enc", *SPARK)
    hepix_ok("process", "--keys", pub, "--input", root / "enc", "--out", root / "mask", "--op", "threshold:128",
             *SPARK)
    hepix_ok("process", "--keys", pub, "--input", root / "enc", "--out", root / "shift", "--op", "brightness:100",
             "--op", "brightness:-100", "--op", "max:0", *SPARK)
    for out in ("mask", "shift"):
        hepix_ok("decrypt", "--keys", keys, "--input", root / out, "--out", root / f"dec-{out}", "--owner",
                 str(root / "enc") + ".owner", "--images", images, *SPARK)
    return root, keys, pub


def test_keygen_plans_the_table_preset_without_rotation_keys(run):
    _root, keys, pub = run
    info = json.loads((keys / "hepix-keys.json").read_text())
    assert "lut-16384" in json.dumps(info)
    assert not (keys / "rotate.key").exists() and (pub / "relin.key").exists() and not (pub / "secret.key").exists()


def test_the_public_process_run_is_a_packed_bfv_table(run):
    root, _keys, _pub = run
    manifest = json.loads((root / "mask" / "_manifest.json").read_text())
    assert manifest["preset"] == "lut-16384" and manifest["layout"] == "packed"
    assert manifest["ops"] == ["threshold:128"]
    table = pq.read_table(root / "mask" / "ciphertexts")
    assert set(table.column("scheme").to_pylist()) == {"bfv"}
    channels = sum(px.shape[2] if px.ndim == 3 else 1 for px in crops().values())
    assert table.num_rows == channels         # one ciphertext per channel: each crop fits one 16,384-slot tile


def test_threshold_decrypts_exactly(run):
    root, _keys, _pub = run
    metrics = pq.read_table(root / "dec-mask" / "metrics").to_pylist()
    assert len(metrics) == len(crops())
    for m in metrics:
        assert m["reference"] == "plaintext-processed" and m["ops"] == "threshold:128"
        assert m["mse"] == 0.0 and m["exact_fraction"] == 1.0 and m["max_abs_err"] == 0.0


def test_a_chain_is_one_table_saturating_after_every_op(run):
    root, _keys, _pub = run
    ops = [parse_op(s) for s in ("brightness:100", "brightness:-100", "max:0")]
    assert chain_table(ops)[200] == 155         # additive brightness would give 200: the run tells them apart
    assert max(px.max() for px in crops().values()) > 155
    metrics = pq.read_table(root / "dec-shift" / "metrics").to_pylist()
    assert len(metrics) == len(crops())
    for m in metrics:
        assert m["ops"] == "brightness:100|brightness:-100|max:0"
        assert m["mse"] == 0.0 and m["exact_fraction"] == 1.0


def test_a_table_output_is_refused_a_second_table_saying_to_chain(run, capsys):
    root, _keys, pub = run
    assert main(["process", "--keys", str(pub), "--input", str(root / "mask"), "--out", str(root / "never"),
                 "--op", "min:100", *SPARK]) == 2
    assert "give the whole chain to one `hepix process` run" in capsys.readouterr().err
    assert not (root / "never").exists()


def test_tables_are_refused_on_keys_that_cannot_run_them(run, tmp_path, capsys):
    root, _keys, _pub = run
    ckks = tmp_path / "ckks"
    hepix_ok("keygen", "--preset", "paper-4096", "--no-rotations", "--out", ckks)
    hepix_ok("export-public", "--keys", ckks, "--out", tmp_path / "ckks-pub")
    hepix_ok("encrypt", "--keys", ckks, "--input", root / "images", "--out", tmp_path / "enc", *SPARK)
    assert main(["process", "--keys", str(tmp_path / "ckks-pub"), "--input", str(tmp_path / "enc"), "--out",
                 str(tmp_path / "never"), "--op", "threshold:128", *SPARK]) == 2
    err = capsys.readouterr().err
    assert "lut-16384" in err and "threshold:128" in err
