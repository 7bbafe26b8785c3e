"""The owner against a cluster it does not trust: one test (or a few) per way the cluster could hurt it.

A small packed corpus (addonly-2048, five images of 9 to 12 pixels a side, 8x8 tiles) is encrypted once
per module; each test copies the run, forges it the way a hostile cluster can (rows, files, manifest,
checksums recomputed: tests/hostile.py) and runs the owner's job on it.  To keep the Spark jobs few, one
forged run carries several forgeries, each on its own image, and is decrypted once (``forged_decrypt``);
the tests then look at what became of each image.
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
from hostile import (
    coefficient_above_q,
    first_row_mask,
    image_ids,
    image_mask,
    lie_in_footer,
    manifest,
    read_rows,
    set_where,
    split_by_image,
    tree,
    truncated,
    write_manifest,
    write_rows,
)
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.seconds(105), pytest.mark.spark]

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
    Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).save(images / "bobby.png")
    Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(images / "carol.png")
    Image.fromarray(rng.integers(0, 256, (10, 9), dtype=np.uint8)).save(images / "dave.png")
    Image.fromarray(rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)).save(images / "erin.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", "addonly-2048") == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", *ENC, *SPARK) == 0
    return root


def copy_run(corpus, tmp_path, name="enc") -> Path:
    dst = tmp_path / name
    shutil.copytree(corpus / "enc", dst)
    return dst


def decrypt(corpus, run: Path, out: Path, *extra) -> int:
    """The owner's decrypt of ``run``: its key, its owner map, its originals."""
    return hepix("decrypt", "--keys", corpus / "keys", "--input", run, "--out", out, "--owner", corpus / "enc.owner",
                 "--images", corpus / "images", *extra, *SPARK)


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


@pytest.mark.parametrize("variable", ["SPARK_EXECUTOR_DIRS", "SPARK_LOCAL_DIRS"])
def test_the_secret_session_refuses_an_environment_that_moves_its_private_directory(monkeypatch, tmp_path, variable):
    """Spark prefers SPARK_EXECUTOR_DIRS (then SPARK_LOCAL_DIRS) to spark.local.dir: either would put the
    secret session's shuffle and spill files in a directory it does not own."""
    from hecore.errors import UntrustedSession
    from jobs.runtime.session import secret_session

    rec = SessionRecorder(monkeypatch)
    monkeypatch.setenv(variable, str(tmp_path / "shared"))
    with pytest.raises(UntrustedSession, match=variable):
        with secret_session("decrypt", "local[1]", None, trusted=False):
            pass
    assert rec.masters == []                       # refused before any session


def test_the_secret_session_encrypts_shuffle_files_on_disk_and_removes_its_directory(tmp_path):
    """What decrypt's settings do, checked on disk: rows shuffled through a secret session leave no
    plaintext in its local directory (and the same shuffle without I/O encryption does: the scan can fail)."""
    import secrets

    from jobs.runtime.session import build_session, secret_session

    marker = "PLAINTEXT-" + secrets.token_hex(8)

    def shuffled_files_with_marker(spark, local_dir):
        from pyspark.sql import functions as F
        df = spark.range(0, 3000, numPartitions=3).select("id", F.concat(F.lit(marker), F.col("id").cast("string"))
                                                           .alias("s"))
        grouped = df.groupBy((F.col("id") % 5).alias("k")).agg(F.max("s"))
        grouped.collect()
        # ``grouped`` stays referenced while the files are read: Spark's cleaner deletes the shuffle files of a
        # plan the JVM no longer references, whenever a garbage collection happens to run.
        files = [p for p in Path(local_dir).rglob("*") if p.is_file()]
        assert any(p.name.startswith("shuffle_") and p.suffix == ".data" for p in files), files
        found = [p for p in files if marker.encode() in p.read_bytes()]
        del grouped
        return found

    with secret_session("probe", "local[1]", None, trusted=False) as spark:
        local_dir = spark.sparkContext.getConf().get("spark.local.dir")
        assert stat.S_IMODE(os.stat(local_dir).st_mode) == 0o700
        assert shuffled_files_with_marker(spark, local_dir) == []
    assert not os.path.exists(local_dir)
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    # Settings given to one session carry over to the next in the same process: say "off" explicitly.
    spark = build_session("probe", "local[1]", None, extra={
        "spark.local.dir": str(plain_dir), "spark.io.encryption.enabled": "false", "spark.authenticate": "false",
        "spark.network.crypto.enabled": "false"})
    try:
        assert shuffled_files_with_marker(spark, plain_dir) != []
    finally:
        spark.stop()


@pytest.fixture(scope="module")
def forged_decrypt(corpus, tmp_path_factory):
    """One run forged five ways, decrypted once with --png under the session recorder:
    alice's rows carry a path for an id, bobby's first ciphertext has a coefficient above q, carol's rows
    claim a 2^30 x 2^30 image, the manifest's pixel limit says 1, and an unlisted copy of the table sits
    beside it.  dave and erin are left alone."""
    root = tmp_path_factory.mktemp("forged-decrypt")
    run = root / "enc"
    shutil.copytree(corpus / "enc", run)
    names = {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in table(corpus / "enc.owner" / "images")}
    t = read_rows(run)
    t = set_where(t, first_row_mask(t, names["bobby.png"]), "ct", coefficient_above_q)
    t = set_where(t, image_mask(t, names["carol.png"]), "image_height", 2**30)
    t = set_where(t, image_mask(t, names["carol.png"]), "image_width", 2**30)
    # OUT/_staging/<run>/images/../../../../escape-*.png would be root/escape-*.png
    t = set_where(t, image_mask(t, names["alice.png"]), "image_id", "../../../../escape")
    write_rows(run, t)
    doc = manifest(run)
    doc["options"]["settings"]["max_pixels"] = 1
    write_manifest(run, doc)
    shutil.copy(run / "ciphertexts" / doc["files"]["ciphertexts"][0]["name"],
                run / "ciphertexts" / "part-99999-planted.parquet")
    before = tree(root)
    with pytest.MonkeyPatch.context() as mp:
        rec = SessionRecorder(mp)
        rc = decrypt(corpus, run, root / "dec", "--png")
    return {"rc": rc, "root": root, "out": root / "dec", "names": names, "sessions": rec.sessions,
            "written": tree(root) - before, "rejects": table(root / "dec" / "rejects"),
            "metrics": {m["image_id"]: m for m in table(root / "dec" / "metrics")}}


def rejected(forged, name) -> set[str]:
    """The reasons decrypt gave for the image ``name`` (by its id; a forged id counts as the image's)."""
    iid = forged["names"][name]
    return {r["reason"] for r in forged["rejects"] if r["image_id"] == iid}


def test_decrypt_runs_with_spark_authentication_encryption_and_a_private_local_dir(forged_decrypt):
    (conf,) = forged_decrypt["sessions"]
    assert conf.get("spark.authenticate") == "true" and len(conf.get("spark.authenticate.secret", "")) >= 32
    assert conf.get("spark.network.crypto.enabled") == "true"
    assert conf.get("spark.io.encryption.enabled") == "true"
    assert conf["_local_dir_mode"] == 0o700
    assert not os.path.exists(conf["spark.local.dir"])         # removed afterwards


def test_decrypt_finishes_the_images_left_alone_exactly(forged_decrypt):
    f = forged_decrypt
    assert f["rc"] == 0
    good = {f["names"]["dave.png"], f["names"]["erin.png"]}
    assert set(f["metrics"]) == good
    for m in f["metrics"].values():
        assert (m["reference"], m["exact_fraction"], m["mse"]) == ("original", 1.0, 0.0), m
    c = manifest(f["out"])["counts"]
    assert (c["images_in"], c["images_decrypted"], c["images_rejected"]) == (6, 2, 4)   # 5 + the forged id


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

def test_decrypt_png_writes_nothing_outside_out_for_an_image_id_that_is_a_path(forged_decrypt):
    f = forged_decrypt
    assert {p for p in f["written"] if not p.startswith("dec/")} == set()
    assert rejected(f, "alice.png") == {"missing-image"}          # the owner's alice never came back
    assert {r["reason"] for r in f["rejects"] if r["image_id"] == "../../../../escape"} == {"bad-image-id"}
    pngs = sorted(p.name for p in (f["out"] / "images").iterdir())
    assert pngs == sorted(f"{f['names'][n]}-{n.removesuffix('.png')}.png" for n in ("dave.png", "erin.png"))


# --- a bad row is a rejects row ---------------------------------------------------------------------

def test_process_rejects_ciphertexts_seal_refuses_and_processes_the_rest(corpus, tmp_path):
    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    ids = image_ids(t)
    t = set_where(t, first_row_mask(t, ids[1]), "ct", truncated)
    write_rows(run, set_where(t, first_row_mask(t, ids[2]), "ct", coefficient_above_q))
    assert hepix("process", "--keys", corpus / "pub", "--input", run, "--out", tmp_path / "proc",
                 "--op", "brightness:5", *SPARK) == 0
    rejects = table(tmp_path / "proc" / "rejects")
    assert sorted((r["image_id"], r["reason"]) for r in rejects) == [(ids[1], "seal-refused"), (ids[2], "seal-refused")]
    out = read_rows(tmp_path / "proc")
    assert image_ids(out) == sorted(set(ids) - {ids[1], ids[2]})
    c = manifest(tmp_path / "proc")["counts"]
    assert (c["images_in"], c["images_encrypted"], c["images_rejected"]) == (5, 3, 2)
    assert hepix("process", "--keys", corpus / "pub", "--input", run, "--out", tmp_path / "strict",
                 "--op", "brightness:5", "--fail-on-rejects", *SPARK) == 1
    assert (tmp_path / "strict" / "_manifest.json").is_file()          # finished all the same


def test_decrypt_rejects_a_ciphertext_seal_refuses_and_decrypts_the_rest(forged_decrypt):
    assert rejected(forged_decrypt, "bobby.png") == {"seal-refused"}


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


def test_decrypt_takes_its_limits_from_the_owner_not_from_the_manifest(forged_decrypt):
    # the manifest's pixel limit of 1 would reject every original (and every row) if it were believed
    assert {m["reference"] for m in forged_decrypt["metrics"].values()} == {"original"}


def test_decrypt_rejects_rows_claiming_an_image_larger_than_the_owner_made(forged_decrypt):
    assert rejected(forged_decrypt, "carol.png") == {"image-too-large"}


def test_jobs_read_only_the_files_the_manifest_lists(forged_decrypt):
    # the planted copy would repeat every row (and reject every image as duplicated) if it were read
    f = forged_decrypt
    for m in f["metrics"].values():
        assert m["ciphertexts"] == {"dave.png": 4, "erin.png": 12}[m["source"].rsplit("/", 1)[-1]]


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
    shutil.copy(src / "bobby.png", src / ".dot.png")
    out = tmp_path / "enc"
    assert hepix("encrypt", "--keys", corpus / "pub", "--input", src, "--out", out, *ENC, *SPARK) == 0
    counts = manifest(out)["counts"]
    assert (counts["images_in"], counts["images_encrypted"], counts["images_rejected"]) == (7, 5, 2)
    reasons = {r["source"].rsplit("/", 1)[-1]: r["reason"] for r in table(tmp_path / "enc.owner" / "rejects")}
    assert reasons == {"_scan.png": "hidden-name", ".dot.png": "hidden-name"}


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
    from hecore.seal.keys import read_secret_key

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


# --- the hdfs:// secret key ----------------------------------------------------------------------------

class FakeWebHdfs:
    """A WebHDFS client for remote_keys: the files of a local key directory, with HDFS statuses."""

    def __init__(self, url, files: dict, permission="600", owner=None):
        self.url, self.files = url, files
        self.permission, self.owner = permission, owner
        self.fetched: list[str] = []

    def list(self, path):
        return sorted(self.files)

    def status(self, path):
        import getpass
        return {"type": "FILE", "permission": self.permission, "owner": self.owner or getpass.getuser()}

    def read(self, path):
        import contextlib
        import io
        self.fetched.append(path.rsplit("/", 1)[-1])
        return contextlib.nullcontext(io.BytesIO(self.files[path.rsplit("/", 1)[-1]]))


@pytest.mark.parametrize("url,permission,owner,refused", [
    ("http://namenode.example:9870", "600", None, "in clear"),
    ("https://namenode.example:9871", "640", None, "chmod 600"),
    ("https://namenode.example:9871", "600", "mallory", "owned by HDFS user"),
    ("http://127.0.0.1:9870", "600", None, None),
    ("https://namenode.example:9871", "600", None, None),
])
def test_a_secret_key_on_hdfs_is_fetched_only_privately_and_only_when_hdfs_guards_it(corpus, monkeypatch, url,
                                                                                     permission, owner, refused):
    import jobs.runtime.remote as remote
    from hecore.errors import KeyDirectoryError

    files = {p.name: p.read_bytes() for p in (corpus / "keys").iterdir()}
    fake = FakeWebHdfs(url, files, permission, owner)
    monkeypatch.setattr(remote, "client", lambda uri, **kw: (fake, "/owner/keys"))
    if refused:
        with pytest.raises(KeyDirectoryError, match=refused):
            with remote.remote_keys("hdfs://namenode.example:9820/owner/keys", secret=True):
                pass
        assert "secret.key" not in fake.fetched
    else:
        with remote.remote_keys("hdfs://namenode.example:9820/owner/keys", secret=True) as local:
            from hecore.seal.keys import read_secret_key
            assert read_secret_key(local) == files["secret.key"]
    with remote.remote_keys("hdfs://namenode.example:9820/owner/keys") as local:     # the public side: never
        assert not (Path(local) / "secret.key").exists()


# --- smaller ones ---------------------------------------------------------------------------------------

def test_image_ids_are_unrelated_across_two_runs_of_the_same_files(corpus, tmp_path):
    assert hepix("encrypt", "--keys", corpus / "pub", "--input", corpus / "images", "--out", tmp_path / "again",
                 *ENC, *SPARK) == 0
    first = {r["source"]: r["image_id"] for r in table(corpus / "enc.owner" / "images")}
    second = {r["source"]: r["image_id"] for r in table(tmp_path / "again.owner" / "images")}
    assert set(first) == set(second) and len(first) == 5
    assert all(first[s] != second[s] for s in first)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in first.values())
    owner = corpus / "enc.owner"
    assert stat.S_IMODE(owner.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in owner.rglob("*") if p.is_file()} == {0o600}


def test_audit_metadata_flags_a_column_that_confirms_a_guessed_image(corpus, tmp_path, capsys):
    """The table as hepix wrote it before: the source path and the file's SHA-256 beside the ciphertexts."""
    import hashlib

    import pyarrow as pa

    run = copy_run(corpus, tmp_path)
    t = read_rows(run)
    names = {r["image_id"]: r["source"] for r in table(corpus / "enc.owner" / "images")}
    sources = [names[i] for i in t.column("image_id").to_pylist()]
    digests = [hashlib.sha256(Path(s.removeprefix("file:")).read_bytes()).hexdigest() for s in sources]
    t = t.append_column("source", pa.array(sources)).append_column("content_sha256", pa.array(digests))
    write_rows(run, t)
    capsys.readouterr()
    assert hepix("audit", "--input", run, "--out", tmp_path / "audit", "--images", corpus / "images") == 0
    assert "METADATA LEAKS" in capsys.readouterr().out
    verdicts = {r["detail"].split(":", 1)[0]: r for r in table(tmp_path / "audit" / "audit") if r["test"] == "metadata"}
    assert verdicts["content_sha256"]["verdict"] == "leaks" and "sha256(file bytes)" in verdicts["content_sha256"]["detail"]
    assert verdicts["source"]["verdict"] == "leaks"
    assert verdicts["image_id"]["verdict"] == "pass"
    assert hepix("audit", "--input", run, "--out", tmp_path / "audit2") == 0          # no candidates: by shape
    verdicts = {r["detail"].split(":", 1)[0]: r for r in table(tmp_path / "audit2" / "audit") if r["test"] == "metadata"}
    assert verdicts["content_sha256"]["verdict"] == "leaks" and verdicts["source"]["verdict"] == "leaks"


def test_verify_calls_a_packed_complex_run_whole(corpus, tmp_path, capsys):
    keys = tmp_path / "keys"
    assert hepix("keygen", "--out", keys, "--preset", "paper-4096", "--no-rotations") == 0
    out = tmp_path / "enc"
    assert hepix("encrypt", "--layout", "packed-complex", "--keys", keys, "--input", corpus / "images", "--out", out,
                 "--tile", "8x8", *SPARK) == 0
    capsys.readouterr()
    assert hepix("verify", out, *SPARK) == 0
    assert "complete: OK" in capsys.readouterr().out


@pytest.mark.slow
def test_flooding_reaches_the_scores_of_an_inference_run(tmp_path):
    pytest.importorskip("sklearn")
    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "paper-4096") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub") == 0
    assert hepix("encrypt-digits", "--keys", tmp_path / "pub", "--out", tmp_path / "enc", "--pack", *SPARK) == 0
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "proc",
                 "--op", "infer:logreg", *SPARK) == 0
    scores = {}
    for name, flood in (("plain", []), ("flooded", ["--flood-std", "0.5"])):
        assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "proc", "--out", tmp_path / name,
                     *flood, *SPARK) == 0
        scores[name] = {p["sample"]: p["scores"][0] for p in table(tmp_path / name / "predictions")}
    diffs = np.array([scores["flooded"][k] - scores["plain"][k] for k in scores["plain"]])
    assert len(diffs) == 108
    assert 0.3 < diffs.std() < 0.7                 # N(0, 0.5^2) on every released score


@pytest.mark.parametrize("mode", ["zlib", "zstd"])
def test_a_compressed_ciphertext_that_inflates_past_any_ciphertext_is_refused_before_seal(mode):
    """A few hundred bytes that SEAL would inflate to 16 MB before looking at them."""
    import struct
    import zlib

    import pyarrow as pa

    from hecore.seal.checks import CiphertextChecker
    from hecore.seal.params import preset

    zeros = bytes(16 * 2**20)
    if mode == "zlib":
        payload = zlib.compress(zeros, 9)
    else:
        sink = pa.BufferOutputStream()
        with pa.CompressedOutputStream(sink, "zstd") as f:
            f.write(zeros)
        payload = sink.getvalue().to_pybytes()
    header = struct.pack("<HBBBBHQ", 0xA15E, 16, 4, 1, {"zlib": 1, "zstd": 2}[mode], 0, 16 + len(payload))
    checker = CiphertextChecker.for_params(preset("addonly-2048"))
    assert len(header + payload) < checker.max_bytes
    problem = checker.problem(header + payload)
    assert problem is not None and problem.reason == "decompression-bomb", problem


@pytest.mark.parametrize("ops,ok", [(["brightness:5", "match:0a1b2c,l2"], True), (["infer:logreg,task=01"], True),
                                    (["match:x", "brightness:5"], False), (["meanfilter:999"], False),
                                    (["brightness:inf"], False)])
def test_manifest_ops_are_the_ops_hepix_writes(corpus, ops, ok):
    from schemas.manifest import ManifestInvalid, RunManifest

    doc = manifest(corpus / "enc")
    doc["ops"] = ops
    if ok:
        assert RunManifest.from_json(json.dumps(doc)).ops == ops
    else:
        with pytest.raises(ManifestInvalid, match=r"field 'ops\[\d\]'"):
            RunManifest.from_json(json.dumps(doc))


# --- what comes back around the rows: files, footers, match runs ------------------------------------------

def test_decrypt_reads_no_lying_footer_no_link_and_no_file_twice_and_finishes_the_rest(corpus, tmp_path, capsys):
    """One file per image: alice's footer claims a 2^40-byte column chunk, bobby's 10^12 rows, carol's file is
    a symbolic link to a copy outside the run, dave's is listed twice; erin is left alone.  decrypt refuses
    each of the first three before Spark reads it, reads dave's once, and decrypts dave and erin."""
    run = copy_run(corpus, tmp_path)
    where = split_by_image(run)
    names = {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in table(corpus / "enc.owner" / "images")}
    part = {n: run / "ciphertexts" / where[names[n]] for n in names}
    lie_in_footer(part["alice.png"], chunk_size=2**40)
    lie_in_footer(part["bobby.png"], rows=10**12)
    outside = tmp_path / "outside.parquet"
    shutil.move(part["carol.png"], outside)
    part["carol.png"].symlink_to(outside)
    doc = manifest(run)
    doc["files"]["ciphertexts"] += [e for e in doc["files"]["ciphertexts"] if e["name"] == part["dave.png"].name]
    write_manifest(run, doc)
    capsys.readouterr()
    assert decrypt(corpus, run, tmp_path / "dec") == 0
    assert "Traceback" not in capsys.readouterr().err
    by_file = {(r["source"], r["reason"]) for r in table(tmp_path / "dec" / "rejects") if r["source"].endswith(".parquet")}
    assert by_file == {(part["alice.png"].name, "unreadable-file"), (part["bobby.png"].name, "unreadable-file"),
                       (part["carol.png"].name, "unreadable-file"), (part["dave.png"].name, "duplicate-file")}
    done = {m["source"].rsplit("/", 1)[-1]: m for m in table(tmp_path / "dec" / "metrics")}
    assert set(done) == {"dave.png", "erin.png"} and all(m["exact_fraction"] == 1.0 for m in done.values())


def test_a_manifest_of_newlines_is_refused_in_one_line_without_reading_it_line_by_line(corpus, tmp_path, capsys):
    run = copy_run(corpus, tmp_path)
    (run / "_manifest.json").write_bytes(b"\n" * (4 * 2**20))
    capsys.readouterr()
    assert decrypt(corpus, run, tmp_path / "dec") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "_manifest.json" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def match_run(tmp_path_factory):
    """Six 8x8 grey images at tenseal-8192 (the smallest preset that squares), matched against the first."""
    root = tmp_path_factory.mktemp("match")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(5)
    for name in ("q", "a", "b", "c", "d", "e"):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(images / f"{name}.png")
    assert hepix("keygen", "--out", root / "keys", "--preset", "tenseal-8192") == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", *SPARK) == 0
    ids = {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in table(root / "enc.owner" / "images")}
    assert hepix("process", "--keys", root / "pub", "--input", root / "enc", "--out", root / "m",
                 "--op", f"match:{ids['q.png']},l2", *SPARK) == 0
    return root, ids


def test_decrypt_of_a_forged_match_run_rejects_each_forgery_and_decrypts_the_rest(match_run, tmp_path, capsys):
    """a's distance twice, b's distance_scale 1e300, c's ciphertext of another key, e's row relabelled with an
    id the owner never made; d is left alone and decrypts to its exact distance.  One row more than the
    owner's images x metrics, and the file is refused whole before it is read."""
    import pyarrow as pa

    from hecore.seal.context import HEContext
    from hecore.seal.params import preset

    root, ids = match_run
    run = tmp_path / "m"
    shutil.copytree(root / "m", run)
    t = read_rows(run, "distances")
    other, _ = HEContext.generate(preset("tenseal-8192"))
    t = set_where(t, image_mask(t, ids["b.png"]), "distance_scale", 1e300)
    t = set_where(t, image_mask(t, ids["c.png"]), "ct", lambda ct: other.encrypt_vector(np.full(8, 1e6)))
    t = set_where(t, image_mask(t, ids["e.png"]), "image_id", "0" * 16)
    t = pa.concat_tables([t, t.filter(pa.array(image_mask(t, ids["a.png"])))])
    write_rows(run, t, "distances")
    capsys.readouterr()
    decrypt_match = ["decrypt", "--keys", root / "keys", "--input", run, "--owner", root / "enc.owner", *SPARK]
    assert hepix(*decrypt_match, "--out", tmp_path / "d") == 0
    assert "Traceback" not in capsys.readouterr().err
    reasons = {(r["image_id"], r["reason"]) for r in table(tmp_path / "d" / "rejects")}
    assert {(ids["a.png"], "duplicate-row"), (ids["b.png"], "bad-distance-scale"),
            (ids["c.png"], "implausible-values"), ("0" * 16, "unknown-image")} <= reasons
    got = {r["source"].rsplit("/", 1)[-1]: r["distance"] for r in table(tmp_path / "d" / "distances")}
    q, d = (np.asarray(Image.open(root / "images" / n), dtype=np.float64) for n in ("q.png", "d.png"))
    assert set(got) == {"d.png"} and round(got["d.png"]) == int(((q - d) ** 2).sum())

    write_rows(run, pa.concat_tables([t, t.slice(0, 1)]), "distances")
    assert hepix(*decrypt_match, "--out", tmp_path / "d2") == 0
    (refused,) = table(tmp_path / "d2" / "rejects")
    assert refused["reason"] == "unreadable-file" and "owner made" in refused["detail"]
    assert table(tmp_path / "d2" / "distances") == []
