"""The owner against a cluster it does not trust: one test (or a few) per way the cluster could hurt it.

A small packed corpus (addonly-2048, 12x12 and 12x10 images, 8x8 tiles) is encrypted once per module;
each test copies the run, forges it the way a hostile cluster can (rows, files, manifest, checksums
recomputed: tests/hostile.py) and runs the owner's job on it.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from hostile import (coefficient_above_q, first_row_mask, image_ids, image_mask, manifest, read_rows, set_where,
                     tree, truncated, write_manifest, write_rows)
from PIL import Image

from jobs.cli import main

pytestmark = pytest.mark.spark

SPARK = ["--master", "local[1]", "--quiet"]
ENC = ["--tile", "8x8", "--halo", "1"]
REPO = Path(__file__).resolve().parent.parent


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


def table(path: Path) -> list[dict]:
    return ds.dataset(str(path), format="parquet").to_table().to_pylist()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("untrusted")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(21)
    Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).save(images / "alice.png")
    Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).save(images / "bob.png")
    Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(images / "carol.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", "addonly-2048") == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", *ENC, *SPARK) == 0
    return root


def copy_run(corpus, tmp_path, name="enc") -> Path:
    dst = tmp_path / name
    shutil.copytree(corpus / "enc", dst)
    return dst


def decrypt(corpus, run: Path, out: Path, *extra) -> int:
    return hepix("decrypt", "--keys", corpus / "keys", "--input", run, "--out", out, "--images", corpus / "images",
                 *extra, *SPARK)


# --- the secret key stays home --------------------------------------------------------------------

class SessionRecorder:
    """Wraps SparkSession.Builder.getOrCreate: records every session's settings; refuses non-local masters."""

    def __init__(self, monkeypatch):
        from pyspark.sql import SparkSession

        self.sessions: list[dict] = []
        self.masters: list[str] = []
        real = SparkSession.Builder.getOrCreate
        recorder = self

        def get_or_create(builder):
            master = builder._options.get("spark.master", "")
            recorder.masters.append(master)
            if not master.startswith("local"):
                raise RuntimeError(f"a session was built on master {master}")
            spark = real(builder)
            conf = dict(spark.sparkContext.getConf().getAll())
            local = conf.get("spark.local.dir")
            conf["_local_dir_mode"] = stat.S_IMODE(os.stat(local).st_mode) if local and os.path.isdir(local) else None
            recorder.sessions.append(conf)
            return spark

        monkeypatch.setattr(SparkSession.Builder, "getOrCreate", get_or_create)


@pytest.mark.parametrize("job", ["encrypt-symmetric", "decrypt"])
def test_a_job_holding_the_secret_key_refuses_a_cluster_master(corpus, tmp_path, monkeypatch, capsys, job):
    rec = SessionRecorder(monkeypatch)
    cluster = ["--master", "spark://127.0.0.1:7", "--quiet"]
    if job == "decrypt":
        argv = ["decrypt", "--keys", corpus / "keys", "--input", corpus / "enc", "--out", tmp_path / "out", *cluster]
    else:
        argv = ["encrypt", "--encryption", "symmetric", "--keys", corpus / "keys", "--input", corpus / "images",
                "--out", tmp_path / "out", *cluster]
    capsys.readouterr()
    assert hepix(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trusted-cluster" in err and "HEPIX_TRUSTED_CLUSTER" in err
    assert rec.masters == []                       # refused before any session
    assert not (tmp_path / "out").exists()


def test_decrypt_runs_with_spark_authentication_encryption_and_a_private_local_dir(corpus, tmp_path, monkeypatch):
    rec = SessionRecorder(monkeypatch)
    assert decrypt(corpus, corpus / "enc", tmp_path / "dec") == 0
    (conf,) = rec.sessions
    assert conf.get("spark.authenticate") == "true" and len(conf.get("spark.authenticate.secret", "")) >= 32
    assert conf.get("spark.network.crypto.enabled") == "true"
    assert conf.get("spark.io.encryption.enabled") == "true"
    assert conf["_local_dir_mode"] == 0o700
    assert not os.path.exists(conf["spark.local.dir"])         # removed afterwards


@pytest.mark.parametrize("script,env", [
    ("standalone.sh", {"SPARK_MASTER_URL": "spark://master.invalid:7077"}),
    ("yarn.sh", {"HADOOP_CONF_DIR": "hadoop-conf"}),
    ("k8s.sh", {"K8S_API": "https://api.invalid:6443", "HEPIX_IMAGE": "img", "HEPIX_ARTIFACTS": "s3a://b/h/"}),
])
@pytest.mark.parametrize("spelling", [["--encryption", "symmetric"], ["--encryption=symmetric"]])
def test_the_cluster_scripts_refuse_symmetric_encryption(tmp_path, script, env, spelling):
    dist = tmp_path / "dist"
    dist.mkdir()
    for name in ("hepix-env.tar.gz", "hepix-src.zip"):
        (dist / name).write_bytes(b"")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "HEPIX_"))}
    full.update(env, HEPIX_DIST=str(dist), HEPIX_DRY_RUN="1", HEPIX_VENV=str(REPO / ".venv"))
    argv = [str(REPO / "spark-submit" / script), "encrypt", *spelling, "--keys", "K", "--input", "I", "--out", "O"]
    r = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "HEPIX_TRUSTED_CLUSTER" in r.stderr, r.stderr
    trusted = subprocess.run(argv, env={**full, "HEPIX_TRUSTED_CLUSTER": "1"}, capture_output=True, text=True,
                             timeout=120)
    assert trusted.returncode == 0, trusted.stderr
    assert "HEPIX_TRUSTED_CLUSTER=1" in trusted.stdout          # the driver is told, wherever it runs


# --- no table value names a file ------------------------------------------------------------------

def test_decrypt_png_writes_nothing_outside_out_for_an_image_id_that_is_a_path(corpus, tmp_path):
    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    victim = image_ids(t)[0]
    # OUT/_staging/<run>/images/../../../../escape-*.png would be tmp_path/escape-*.png
    write_rows(run, set_where(t, image_mask(t, victim), "image_id", "../../../../escape"))
    before = tree(tmp_path)
    rc = decrypt(corpus, run, tmp_path / "dec", "--png")
    outside = {p for p in tree(tmp_path) - before if not p.startswith("dec/")}
    assert outside == set()
    assert rc == 0
    rejects = table(tmp_path / "dec" / "rejects")
    assert {r["reason"] for r in rejects} == {"bad-image-id"}
    assert len(table(tmp_path / "dec" / "metrics")) == 2


# --- a bad row is a rejects row ---------------------------------------------------------------------

@pytest.mark.parametrize("damage", [truncated, coefficient_above_q], ids=["truncated", "coefficient-above-q"])
def test_process_rejects_a_ciphertext_seal_refuses_and_processes_the_rest(corpus, tmp_path, damage):
    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    victim = image_ids(t)[1]
    write_rows(run, set_where(t, first_row_mask(t, victim), "ct", damage))
    assert hepix("process", "--keys", corpus / "pub", "--input", run, "--out", tmp_path / "proc",
                 "--op", "brightness:5", *SPARK) == 0
    rejects = table(tmp_path / "proc" / "rejects")
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(victim, "seal-refused")]
    out = read_rows(tmp_path / "proc")
    assert victim not in image_ids(out) and len(image_ids(out)) == 2


def test_decrypt_rejects_a_ciphertext_seal_refuses_and_decrypts_the_rest(corpus, tmp_path):
    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    victim = image_ids(t)[2]
    write_rows(run, set_where(t, first_row_mask(t, victim), "ct", coefficient_above_q))
    assert decrypt(corpus, run, tmp_path / "dec") == 0
    assert {r["reason"] for r in table(tmp_path / "dec" / "rejects")} == {"seal-refused"}
    metrics = table(tmp_path / "dec" / "metrics")
    assert len(metrics) == 2 and all(m["exact_fraction"] == 1.0 for m in metrics)


def test_verify_reports_a_ciphertext_seal_refuses_even_with_its_checksum_recomputed(corpus, tmp_path, capsys):
    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    write_rows(run, set_where(t, first_row_mask(t, image_ids(t)[0]), "ct", truncated))
    capsys.readouterr()
    assert hepix("verify", run, *SPARK) == 1
    assert "seal-refused" in capsys.readouterr().out


# --- manifests and sizes are checked --------------------------------------------------------------

def test_encrypt_resume_never_follows_a_file_name_out_of_its_directory(corpus, tmp_path, capsys):
    run = copy_run(corpus, tmp_path)
    doc = manifest(run)
    doc["status"] = "partial"
    doc["files"]["ciphertexts"][0]["name"] = "../../../../../../etc/passwd"
    write_manifest(run, doc)
    capsys.readouterr()
    rc = hepix("encrypt", "--keys", corpus / "pub", "--input", corpus / "images", "--out", run, *ENC, *SPARK)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "_manifest.json" in err and "files" in err


@pytest.mark.parametrize("field,value", [("surprise", 1), ("counts", {"images_in": "many"}), ("ops", "brightness:5"),
                                         ("format", 99), ("files", {"ciphertexts": [{"name": "a/b.parquet"}]})])
def test_a_malformed_manifest_is_a_one_line_error_naming_the_file_and_field(corpus, tmp_path, capsys, field, value):
    run = copy_run(corpus, tmp_path)
    doc = manifest(run)
    doc[field] = value
    write_manifest(run, doc)
    capsys.readouterr()
    assert hepix("process", "--keys", corpus / "pub", "--input", run, "--out", tmp_path / "p", "--op",
                 "brightness:5", *SPARK) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "_manifest.json" in err and field in err


def test_decrypt_takes_its_limits_from_the_owner_not_from_the_manifest(corpus, tmp_path):
    run = copy_run(corpus, tmp_path)
    doc = manifest(run)
    doc["options"]["settings"]["max_pixels"] = 1
    doc["options"]["max_pixels"] = 1
    write_manifest(run, doc)
    assert decrypt(corpus, run, tmp_path / "dec") == 0
    assert {m["reference"] for m in table(tmp_path / "dec" / "metrics")} == {"original"}


def test_decrypt_rejects_rows_claiming_an_image_larger_than_the_owner_made(corpus, tmp_path):
    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    victim = image_ids(t)[0]
    t = set_where(t, image_mask(t, victim), "image_height", 2**30)
    write_rows(run, set_where(t, image_mask(t, victim), "image_width", 2**30))
    assert decrypt(corpus, run, tmp_path / "dec") == 0
    assert len(table(tmp_path / "dec" / "metrics")) == 2
    assert {r["image_id"] for r in table(tmp_path / "dec" / "rejects")} == {victim}


def test_jobs_read_only_the_files_the_manifest_lists(corpus, tmp_path):
    run = copy_run(corpus, tmp_path)
    listed = manifest(run)["files"]["ciphertexts"][0]["name"]
    shutil.copy(run / "ciphertexts" / listed, run / "ciphertexts" / "part-99999-planted.parquet")
    assert decrypt(corpus, run, tmp_path / "dec") == 0
    metrics = table(tmp_path / "dec" / "metrics")
    assert sum(m["ciphertexts"] for m in metrics) == manifest(run)["counts"]["ciphertexts"]


def test_decrypt_rejects_rows_of_another_key_even_under_a_forged_manifest_fingerprint(corpus, tmp_path):
    other = tmp_path / "other"
    assert hepix("keygen", "--out", other, "--preset", "addonly-2048") == 0
    run = copy_run(corpus, tmp_path)
    doc = manifest(run)
    doc["key_fingerprint"] = json.loads((other / "hepix-keys.json").read_text())["fingerprint"]
    write_manifest(run, doc)
    assert hepix("decrypt", "--keys", other, "--input", run, "--out", tmp_path / "dec", *SPARK) == 0
    assert table(tmp_path / "dec" / "metrics") == []
    assert {r["reason"] for r in table(tmp_path / "dec" / "rejects")} == {"key-mismatch"}


def test_encrypt_refuses_a_negative_resize_in_one_line(corpus, tmp_path, capsys):
    capsys.readouterr()
    assert hepix("encrypt", "--keys", corpus / "pub", "--input", corpus / "images", "--out", tmp_path / "e",
                 "--resize", "-5", *SPARK) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--resize -5" in err


def test_hidden_input_files_are_rejected_not_lost(corpus, tmp_path):
    src = tmp_path / "in"
    shutil.copytree(corpus / "images", src)
    shutil.copy(src / "alice.png", src / "_scan.png")
    shutil.copy(src / "bob.png", src / ".dot.png")
    out = tmp_path / "enc"
    assert hepix("encrypt", "--keys", corpus / "pub", "--input", src, "--out", out, *ENC, *SPARK) == 0
    counts = manifest(out)["counts"]
    assert (counts["images_in"], counts["images_encrypted"], counts["images_rejected"]) == (5, 3, 2)


# --- the table the cluster gets says nothing a guess could confirm ----------------------------------

def test_the_cluster_table_holds_no_path_no_name_and_no_plaintext_hash(corpus):
    import hashlib

    enc = corpus / "enc"
    cols = set(ds.dataset(str(enc / "ciphertexts"), format="parquet").schema.names)
    assert not cols & {"source", "content_sha256"}
    needles = [str(corpus / "images").encode(), str(corpus).encode()]
    for f in sorted((corpus / "images").iterdir()):
        needles += [f.stem.encode(), hashlib.sha256(f.read_bytes()).hexdigest().encode(),
                    hashlib.sha256(str(f).encode()).hexdigest()[:16].encode(),
                    hashlib.sha256(f"file:{f}".encode()).hexdigest()[:16].encode()]
    for p in enc.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert [n for n in needles if n in data] == [], p


# --- audit ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def leaky_run(corpus):
    """A pixel-layout run of the caching strategy ``full``: audit draws pictures of what leaks."""
    out = corpus / "enc-full"
    if not out.exists():
        assert hepix("encrypt", "--layout", "pixel", "--strategy", "full", "--allow-leaky", "--keys", corpus / "pub",
                     "--input", corpus / "images", "--out", out, "--tile", "6x6", *SPARK) == 0
    return out


def test_audit_writes_nothing_outside_out_for_an_image_id_that_is_a_path(corpus, leaky_run, tmp_path):
    run = tmp_path / "enc"
    shutil.copytree(leaky_run, run)
    t = read_rows(run)
    # AUDIT/images/../../escape-*.png would be tmp_path/escape-*.png
    write_rows(run, set_where(t, image_mask(t, image_ids(t)[0]), "image_id", "../../escape"))
    before = tree(tmp_path)
    rc = hepix("audit", "--input", run, "--out", tmp_path / "audit", "--seed", "1")
    assert {p for p in tree(tmp_path) - before if not p.startswith("audit/")} == set()
    assert rc == 0


def test_audit_rejects_a_ciphertext_seal_refuses_and_audits_the_rest(corpus, leaky_run, tmp_path):
    run = tmp_path / "enc"
    shutil.copytree(leaky_run, run)
    t = read_rows(run)
    victim = image_ids(t)[0]
    write_rows(run, set_where(t, first_row_mask(t, victim), "ct", truncated))
    assert hepix("audit", "--input", run, "--out", tmp_path / "audit", "--seed", "1") == 0
    audited = {r["image_id"] for r in table(tmp_path / "audit" / "audit") if r["test"] != "metadata"}
    assert audited == set(image_ids(t)) - {victim}
    assert {r["reason"] for r in table(tmp_path / "audit" / "rejects")} == {"seal-refused"}


# --- key files ----------------------------------------------------------------------------------------

def test_read_secret_key_refuses_a_symlink_and_a_key_owned_by_someone_else(corpus, tmp_path):
    from hecore.errors import KeyDirectoryError
    from hecore.keys import read_secret_key

    keys = tmp_path / "keys"
    shutil.copytree(corpus / "keys", keys)
    real = tmp_path / "elsewhere.key"
    os.replace(keys / "secret.key", real)
    os.symlink(real, keys / "secret.key")
    with pytest.raises(KeyDirectoryError, match="symbolic link"):
        read_secret_key(keys)
    os.unlink(keys / "secret.key")
    os.replace(real, keys / "secret.key")
    assert read_secret_key(keys)
    if os.geteuid() == 0:           # only root can give a file away
        os.chown(keys / "secret.key", 54321, -1)
        with pytest.raises(KeyDirectoryError, match="owned by"):
            read_secret_key(keys)
