"""encrypt, verify, process and decrypt against a real HDFS (Hadoop's MiniDFSCluster).

Images, key directories and every table live on ``hdfs://``: Spark reads and writes them with
its bundled Hadoop client, hepix's Python side fetches the keys over WebHDFS (``hdfs``
package), and the test itself uploads and reads back over WebHDFS.  Skips with the reason
where Java or Maven is missing (see bench/clusters/minidfs.py).
"""
from __future__ import annotations

import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.seconds(70), pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    from bench.clusters.minidfs import MiniDFS, unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    cluster = MiniDFS(tmp_path_factory.mktemp("minidfs"))
    yield cluster
    cluster.stop()


def upload_dir(client, local, remote: str) -> None:
    client.makedirs(remote)
    for p in sorted(local.iterdir()):
        mode = "600" if p.name == "secret.key" else "644"
        client.write(f"{remote}/{p.name}", data=p.read_bytes(), overwrite=True, permission=mode)


def read_json(client, remote: str) -> dict:
    with client.read(remote, encoding="utf-8") as f:
        return json.loads(f.read())


def read_table(client, remote: str):
    tables = []
    for name in sorted(client.list(remote)):
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            with client.read(f"{remote}/{name}") as f:
                tables.append(pq.read_table(io.BytesIO(f.read())))
    return tables


def test_the_pipeline_reads_and_writes_hdfs(hdfs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEPIX_WEBHDFS", hdfs.webhdfs)
    client = hdfs.client()
    rng = np.random.default_rng(5)
    local = tmp_path / "images"
    local.mkdir()
    Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(local / "grey.png")
    Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(local / "rgb.png")
    (local / "junk.png").write_bytes(b"not a png")
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(tmp_path / "keys"), "--out", str(tmp_path / "pub")]) == 0
    upload_dir(client, local, "/corpus")
    upload_dir(client, tmp_path / "keys", "/owner/keys")
    upload_dir(client, tmp_path / "pub", "/cluster/keys")
    conf = tmp_path / "spark.conf"
    conf.write_text("spark.hadoop.dfs.replication 1\n")
    base = hdfs.uri
    spark = ["--master", "local[2]", "--conf", str(conf), "--quiet"]

    owner = tmp_path / "owner-map"          # the owner map stays on the owner's machine, never on HDFS
    assert main(["encrypt", "--keys", f"{base}/cluster/keys", "--input", f"{base}/corpus", "--out", f"{base}/enc",
                 "--owner", str(owner), "--tile", "8x8", "--batch-images", "2", *spark]) == 0
    m = read_json(client, "/enc/_manifest.json")
    assert m["status"] == "complete" and m["counts"]["images_encrypted"] == 2 and m["counts"]["images_rejected"] == 1
    assert m["counts"]["ciphertexts"] == 4 + 3 * 4
    assert sorted(client.list("/enc/ciphertexts")) == sorted(e["name"] for e in m["files"]["ciphertexts"])
    assert sum(t.num_rows for t in read_table(client, "/enc/ciphertexts")) == 16

    capsys.readouterr()
    assert main(["verify", f"{base}/enc", *spark]) == 0
    assert main(["encrypt", "--keys", f"{base}/cluster/keys", "--input", f"{base}/corpus", "--out", f"{base}/enc",
                 "--owner", str(owner), "--tile", "8x8", "--batch-images", "2", *spark]) == 0
    assert "nothing to encrypt" in capsys.readouterr().out

    # the processing side refuses a key directory with a secret key, on HDFS too, without copying it
    assert main(["process", "--keys", f"{base}/owner/keys", "--input", f"{base}/enc", "--out", f"{base}/proc",
                 "--op", "brightness:20", *spark]) == 2
    assert "secret" in capsys.readouterr().err
    assert main(["process", "--keys", f"{base}/cluster/keys", "--input", f"{base}/enc", "--out", f"{base}/proc",
                 "--op", "brightness:20", *spark]) == 0
    assert main(["decrypt", "--keys", f"{base}/owner/keys", "--input", f"{base}/proc", "--out", f"{base}/dec",
                 "--owner", str(owner), "--images", f"{base}/corpus", *spark]) == 0
    metrics = [r for t in read_table(client, "/dec/metrics") for r in t.to_pylist()]
    assert sorted(r["source"].rsplit("/", 1)[-1] for r in metrics) == ["grey.png", "rgb.png"]
    assert all(r["exact_fraction"] == 1.0 and r["reference"] == "plaintext-processed" for r in metrics)
    dec = read_json(client, "/dec/_manifest.json")
    assert dec["status"] == "complete" and dec["counts"]["images_decrypted"] == 2


def test_symmetric_encryption_reads_its_secret_key_from_hdfs_and_refuses_a_readable_one(hdfs, tmp_path, monkeypatch,
                                                                                      capsys):
    """`encrypt --encryption symmetric` with an hdfs:// key directory: the key is fetched (loopback WebHDFS,
    mode 600, this user's) and the run decrypts exactly; a secret.key other HDFS users can read is refused."""
    monkeypatch.setenv("HEPIX_WEBHDFS", hdfs.webhdfs)
    client = hdfs.client()
    local = tmp_path / "images"
    local.mkdir()
    Image.fromarray(np.random.default_rng(6).integers(0, 256, (12, 12), dtype=np.uint8)).save(local / "a.png")
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "paper-4096", "--no-rotations"]) == 0
    upload_dir(client, tmp_path / "keys", "/sym/keys")
    spark = ["--master", "local[1]", "--quiet"]
    enc = tmp_path / "enc"
    assert main(["encrypt", "--encryption", "symmetric", "--keys", f"{hdfs.uri}/sym/keys", "--input", str(local),
                 "--out", str(enc), *spark]) == 0
    assert main(["decrypt", "--keys", str(tmp_path / "keys"), "--input", str(enc), "--out", str(tmp_path / "dec"),
                 "--owner", str(tmp_path / "enc.owner"), "--images", str(local), *spark]) == 0
    (r,) = [r for t in [pq.read_table(p) for p in (tmp_path / "dec" / "metrics").glob("*.parquet")]
            for r in t.to_pylist()]
    assert r["exact_fraction"] == 1.0
    client.set_permission("/sym/keys/secret.key", "644")
    capsys.readouterr()
    assert main(["encrypt", "--encryption", "symmetric", "--keys", f"{hdfs.uri}/sym/keys", "--input", str(local),
                 "--out", str(tmp_path / "enc2"), *spark]) == 2
    assert "chmod 600" in capsys.readouterr().err
