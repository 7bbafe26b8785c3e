"""Runs that survive: failure injection, resume and --overwrite, checksums and `hepix verify`.

One tiny corpus (16x16 images, the cheap addonly-2048 keys, 8x8 packed tiles) and one clean
encrypt run that every other run is compared with, by its set of (image, channel, tile) keys.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.seconds(95), pytest.mark.spark, pytest.mark.slow]

KEY = ("image_id", "channel", "tile_y", "tile_x", "index")
ENC = ["--tile", "8x8", "--halo", "1", "--batch-images", "2", "--quiet"]


def keys_of(directory, owner=None) -> Counter:
    """(source, channel, tile_y, tile_x, index) of every row: image ids are random per encrypt run, so runs
    are compared by the owner map's source of each id (``owner``: default the encrypt run's ``<dir>.owner``)."""
    owner = owner or directory.with_name(directory.name + ".owner")
    names = {r["image_id"]: r["source"] for r in ds.dataset(owner / "images").to_table().to_pylist()}
    rows = ds.dataset(directory / "ciphertexts").to_table(columns=list(KEY)).to_pylist()
    return Counter((names[r["image_id"]],) + tuple(r[k] for k in KEY[1:]) for r in rows)


def manifest(directory) -> dict:
    return json.loads((directory / "_manifest.json").read_text())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("durable")
    rng = np.random.default_rng(11)
    images = root / "images"
    images.mkdir()
    for i in range(4):
        shape = (16, 16, 3) if i == 1 else (16, 16)
        Image.fromarray(rng.integers(0, 256, size=shape, dtype=np.uint8)).save(images / f"img{i}.png")
    (images / "broken.png").write_bytes(b"\x89PNG not really")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    clean = root / "clean"
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(images), "--out", str(clean),
                 "--master", "local[2]", *ENC]) == 0
    return root


def expected_keys(corpus) -> Counter:
    keys = keys_of(corpus / "clean")
    # 3 grey + 1 RGB image of 16x16 in 8x8 tiles: (3 + 3) x 4 tile channels, one ciphertext each
    assert sum(keys.values()) == len(keys) == 24
    return keys


def encrypt(corpus, out, *extra, master="local[2]"):
    return main(["encrypt", "--keys", str(corpus / "pub"), "--input", str(corpus / "images"), "--out", str(out),
                 "--master", master, *ENC, *extra])


def test_clean_run_lists_every_file_with_checksums_and_verifies(corpus, capsys):
    m = manifest(corpus / "clean")
    assert m["status"] == "complete" and m["counts"]["images_in"] == 5 and m["counts"]["images_rejected"] == 1
    listed = {e["name"] for e in m["files"]["ciphertexts"]}
    assert listed == {p.name for p in (corpus / "clean" / "ciphertexts").glob("*.parquet")}
    assert m["checksums"]["ciphertexts"]["rows"] == 24
    capsys.readouterr()
    assert main(["verify", str(corpus / "clean"), "--master", "local[2]", "--quiet"]) == 0
    assert "complete: OK" in capsys.readouterr().out


@pytest.mark.parametrize("fault,master", [("raise", "local[2,2]"), ("kill", "local-cluster[1,1,1024]")])
def test_a_failed_task_or_killed_worker_is_retried_into_exactly_the_clean_keys(corpus, tmp_path, fault, master):
    """A task that raises once (local[2, 2]: two attempts), and a Python worker killed with SIGKILL
    after writing part of its file (local-cluster: a real executor)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    conf = tmp_path / "spark.conf"
    conf.write_text(f"spark.executorEnv.HEPIX_TEST_FAULT {fault}:{marks}\nspark.task.maxFailures 4\n")
    out = tmp_path / "enc"
    assert encrypt(corpus, out, "--conf", str(conf), master=master) == 0
    assert [p.name for p in marks.iterdir()] == [f"encrypt-{fault}.once"]      # the fault did happen
    got = keys_of(out)
    assert got == expected_keys(corpus)                 # none missing, none twice
    assert max(got.values()) == 1
    assert manifest(out)["counts"]["ciphertexts"] == 24
    assert main(["verify", str(out), "--master", "local[2]", "--quiet"]) == 0


def test_a_crashed_run_is_partial_then_resumed_and_overwrite_redoes_everything(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "enc"
    monkeypatch.setenv("HEPIX_TEST_CRASH_AFTER_BATCHES", "1")
    with pytest.raises(RuntimeError, match="CRASH_AFTER_BATCHES"):
        encrypt(corpus, out)
    monkeypatch.delenv("HEPIX_TEST_CRASH_AFTER_BATCHES")
    first = manifest(out)
    assert first["status"] == "partial" and first["counts"]["images_in"] == 2
    # a half-written file of a batch that never committed: never taken in
    stray = out / "ciphertexts" / "part-99999-stray.parquet"
    shutil.copy(next((out / "ciphertexts").glob("*.parquet")), stray)
    capsys.readouterr()
    code = main(["process", "--keys", str(corpus / "pub"), "--input", str(out), "--out", str(tmp_path / "p"),
                 "--op", "brightness:5", "--master", "local[2]", "--quiet"])
    assert code == 2 and "partial" in capsys.readouterr().err
    assert main(["verify", str(out), "--master", "local[2]", "--quiet"]) == 1
    verdict = capsys.readouterr().out
    assert "unlisted-file" in verdict and "incomplete-run" in verdict

    assert encrypt(corpus, out) == 0                    # resume
    assert "resuming: 2 images already done" in capsys.readouterr().out
    m = manifest(out)
    assert m["status"] == "complete" and len(m["runs"]) == 2 and m["counts"]["images_in"] == 5
    assert not stray.exists()
    assert keys_of(out) == expected_keys(corpus)
    runs = set(ds.dataset(out / "ciphertexts").to_table(columns=["run_id"]).column("run_id").to_pylist())
    assert runs == set(m["runs"])

    before = sorted(p.name for p in (out / "ciphertexts").iterdir())
    assert encrypt(corpus, out) == 0                    # all done: nothing to encrypt, nothing touched
    assert "nothing to encrypt" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "ciphertexts").iterdir()) == before

    assert encrypt(corpus, out, "--overwrite") == 0     # redo all
    m = manifest(out)
    runs = set(ds.dataset(out / "ciphertexts").to_table(columns=["run_id"]).column("run_id").to_pylist())
    assert runs == {m["run_id"]} and m["runs"] == [m["run_id"]]
    assert keys_of(out) == expected_keys(corpus)

    capsys.readouterr()
    assert encrypt(corpus, out, "--tile", "4x4") == 2   # other settings: refused, not mixed in
    err = capsys.readouterr().err
    assert "tile" in err and "--overwrite" in err


def corrupt_one_ciphertext(table_dir, *, truncate: bool) -> dict:
    """Damage the ``ct`` of the first row of one file; returns that row's key."""
    path = sorted(table_dir.glob("*.parquet"))[0]
    t = pq.read_table(path)
    row = t.slice(0, 1).to_pylist()[0]
    ct = row["ct"]
    if truncate:      # rewrite the file with the ciphertext cut short (its stored checksum kept)
        cts = t.column("ct").to_pylist()
        cts[0] = ct[: len(ct) // 2]
        import pyarrow as pa
        t = t.set_column(t.schema.get_field_index("ct"), "ct", pa.array(cts, type=pa.binary()))
        pq.write_table(t, path, compression="none")
    else:             # flip one byte in place: same file size, the Parquet file still reads
        data = bytearray(path.read_bytes())
        at = data.find(ct[1000:1064])
        assert at > 0
        data[at + 5] ^= 0xFF
        path.write_bytes(bytes(data))
    return {k: row[k] for k in KEY}


def test_corrupted_and_truncated_ciphertexts_are_reported_by_row_in_verify_process_and_decrypt(
        corpus, tmp_path, capsys):
    enc = tmp_path / "enc"
    shutil.copytree(corpus / "clean", enc)
    flipped = corrupt_one_ciphertext(enc / "ciphertexts", truncate=False)

    capsys.readouterr()
    assert main(["verify", str(enc), "--master", "local[2]", "--quiet", "--rejects", str(tmp_path / "v")]) == 1
    assert "checksum-mismatch" in capsys.readouterr().out
    found = ds.dataset(tmp_path / "v").to_table().to_pylist()
    assert [{k: r[k] for k in KEY} for r in found if r["reason"] == "checksum-mismatch"] == [flipped]

    proc = tmp_path / "proc"
    assert main(["process", "--keys", str(corpus / "pub"), "--input", str(enc), "--out", str(proc),
                 "--op", "brightness:5", "--master", "local[2]", "--quiet"]) == 0
    rejects = ds.dataset(proc / "rejects").to_table().to_pylist()
    assert [{k: r[k] for k in KEY} for r in rejects] == [flipped] and rejects[0]["stage"] == "process"
    left = keys_of(proc, owner=corpus / "clean.owner")
    names = {r["image_id"]: r["source"] for r in ds.dataset(corpus / "clean.owner" / "images").to_table().to_pylist()}
    assert all(k[0] != names[flipped["image_id"]] for k in left)   # the damaged image is left out whole
    assert left == Counter({k: 1 for k in expected_keys(corpus) if k[0] != names[flipped["image_id"]]})
    assert main(["verify", str(proc), "--master", "local[2]", "--quiet"]) == 0

    enc2 = tmp_path / "enc2"
    shutil.copytree(corpus / "clean", enc2)
    cut = corrupt_one_ciphertext(enc2 / "ciphertexts", truncate=True)
    dec = tmp_path / "dec"
    assert main(["decrypt", "--keys", str(corpus / "keys"), "--input", str(enc2), "--out", str(dec),
                 "--owner", str(corpus / "clean.owner"), "--images", str(corpus / "images"),
                 "--master", "local[2]", "--quiet"]) == 0
    rejects = ds.dataset(dec / "rejects").to_table().to_pylist()
    assert [{k: r[k] for k in KEY} for r in rejects] == [cut] and rejects[0]["reason"] == "checksum-mismatch"
    metrics = ds.dataset(dec / "metrics").to_table().to_pylist()
    assert len(metrics) == 3 and all(m["exact_fraction"] == 1.0 for m in metrics)
    assert cut["image_id"] not in {m["image_id"] for m in metrics}
    capsys.readouterr()
    assert main(["verify", str(enc2), "--master", "local[2]", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "file-size-mismatch" in out and "checksum-mismatch" in out

    # a file cut short (no Parquet footer): reported as unreadable, not a crash
    victim = sorted((enc2 / "ciphertexts").glob("*.parquet"))[-1]
    victim.write_bytes(victim.read_bytes()[:1000])
    assert main(["verify", str(enc2), "--master", "local[2]", "--quiet"]) == 1
    assert "unreadable-file" in capsys.readouterr().out
