"""A real Spark standalone cluster: encrypt and process through ``spark-submit/standalone.sh``.

A master and two one-core workers on 127.0.0.1, started from pyspark's own distribution and
stopped before any assertion runs, whatever happens (``tests/sparkcluster.py``).  The jobs get the
archives of ``spark-submit/package.sh`` (the packed environment cached per dependency set, the
source zip built from this checkout), read and write a local path the driver and the workers
both see (the shared-mount case), and are decrypted here on a ``local[2]`` master, which holds the
secret key.  The same corpus goes through the same jobs on ``local[2]``: the clean run every
cluster run is compared with.

Two cluster applications, because each one spends most of its time starting (the driver and both
executors unpack the packed environment): the encrypt, during which one worker is killed, and the
process of its output on two workers again.  Ciphertexts are randomized and image ids are random
per encrypt run, so runs are compared by the keys of their ciphertext rows with each image named
by its source through the owner map (none missing, none twice), by their rejects and counts, and
by what decryption yields -- the metrics and the decrypted pixels, exactly.

Skipped without Java.  Tiny images (32x32) and the cheap ``addonly-2048`` keys.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image
from sparkcluster import Kill, events_of, executor_ids_of_tasks, kill_a_worker_mid_job, started_cluster, submit

from bench.clusters.standalone import java_available
from jobs.cli import main

pytestmark = [pytest.mark.seconds(210), pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.skipif(not java_available(), reason="no java on PATH and no JAVA_HOME: the Spark "
                                                              "master and workers need a JRE")]

KEY = ("image_id", "channel", "tile_y", "tile_x", "index")
PARTITIONS = 8
#: One image a batch (five batches): three are still to come after the first commit, when the worker is
#: killed, so that the kill lands inside the job however fast its batches go.  Each batch is a few Spark
#: jobs, which is most of the time the job takes.
#: The output is on a path the driver and the workers share: the Python workers write the files
#: (``--writer workers``), and the driver checks it sees every file they report.
ENC = ["--tile", "8x8", "--partitions", str(PARTITIONS), "--batch-images", "1", "--writer", "workers"]
OP = "brightness:20"
#: What decryption yields that depends neither on the ciphertexts' randomness nor on the run
#: (``image_id`` is random per encrypt run, ``max_abs_err`` is measured before rounding, the
#: timings and ``run_id`` differ from run to run).
SAME = ("source", "content_sha256", "channel", "ops", "reference", "layout", "strategy", "security", "preset",
        "width", "height", "channels", "mse", "psnr", "ssim", "exact_fraction", "ciphertexts")


def assert_same_counts(got: dict, want: dict) -> None:
    """Two runs' counts: equal, but for the ciphertexts' bytes, within 1%: fresh ciphertexts stored compressed
    (SEAL's zstd, the default) differ by a few bytes from one encryption to the next."""
    assert {k: v for k, v in got.items() if k != "ciphertext_bytes"} == \
        {k: v for k, v in want.items() if k != "ciphertext_bytes"}
    assert abs(got["ciphertext_bytes"] - want["ciphertext_bytes"]) <= 0.01 * want["ciphertext_bytes"]


def owner_of(enc: Path) -> Path:
    """The owner map encrypt wrote beside ``enc`` (its default, ``<--out>.owner``)."""
    return enc.with_name(enc.name + ".owner")


def keys_of(directory: Path, owner: Path) -> Counter:
    """(source, channel, tile_y, tile_x, index) of every ciphertext row of ``directory``."""
    names = {r["image_id"]: r["source"] for r in ds.dataset(owner / "images").to_table().to_pylist()}
    rows = ds.dataset(directory / "ciphertexts").to_table(columns=list(KEY)).to_pylist()
    return Counter((names[r["image_id"]],) + tuple(r[k] for k in KEY[1:]) for r in rows)


def rejects_of(owner: Path) -> list[tuple]:
    rows = ds.dataset(owner / "rejects").to_table(columns=["source", "stage", "reason"]).to_pylist()
    return sorted((r["source"], r["stage"], r["reason"]) for r in rows)


def manifest(directory: Path) -> dict:
    return json.loads((directory / "_manifest.json").read_text())


def decrypted(directory: Path) -> tuple[list[dict], dict[str, np.ndarray]]:
    """A decrypt run's metrics rows (the columns of :data:`SAME`, by source and channel) and its PNGs
    by input file stem (``<image_id>-<stem>.png``)."""
    rows = ds.dataset(directory / "metrics").to_table(columns=list(SAME)).to_pylist()
    rows.sort(key=lambda r: (r["source"], r["channel"]))
    pngs = {p.name.split("-", 1)[1]: np.asarray(Image.open(p)) for p in sorted((directory / "images").glob("*.png"))}
    return rows, pngs


def decrypt_here(corpus: Path, run: Path, owner: Path, out: Path) -> None:
    """Decrypt on the data owner's machine: a local master, the key directory with the secret key."""
    assert main(["decrypt", "--keys", str(corpus / "keys"), "--input", str(run), "--out", str(out),
                 "--owner", str(owner), "--images", str(corpus / "images"), "--png", "--master", "local[2]",
                 "--quiet"]) == 0


def make_corpus(root: Path) -> Path:
    """Images and keys: 2 grey and 2 RGB images of 32x32 and a broken file."""
    rng = np.random.default_rng(23)
    images = root / "images"
    images.mkdir(parents=True)
    for i in range(4):
        shape = (32, 32, 3) if i % 2 else (32, 32)
        Image.fromarray(rng.integers(0, 256, size=shape, dtype=np.uint8)).save(images / f"img{i}.png")
    (images / "broken.png").write_bytes(b"\x89PNG not really")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    return root


def run_locally(corpus: Path, local: Path) -> None:
    """The clean run on ``local[2]``: encrypt, process, and the decryption of the latter."""
    assert main(["encrypt", "--keys", str(corpus / "pub"), "--input", str(corpus / "images"), "--out",
                 str(local / "enc"), *ENC, "--master", "local[2]", "--quiet"]) == 0
    assert main(["process", "--keys", str(corpus / "pub"), "--input", str(local / "enc"), "--out",
                 str(local / "proc"), "--op", OP, "--master", "local[2]", "--quiet"]) == 0
    decrypt_here(corpus, local / "proc", owner_of(local / "enc"), local / "dec")
    # (2 grey + 2 x 3 RGB channels) x 16 tiles of 8x8; the broken file rejected
    assert sum(keys_of(local / "enc", owner_of(local / "enc")).values()) == 128


@dataclass
class Runs:
    corpus: Path
    local: Path           # the clean local[2] run: enc, proc, dec
    enc: Path             # on the cluster, a worker killed in the middle
    proc: Path            # on the cluster, two workers
    dec: Path             # proc decrypted here
    kill: Kill
    enc_events: list[dict]
    proc_events: list[dict]
    master_url: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    """The clean ``local[2]`` run, while the cluster comes up; then on the cluster the encrypt with a
    worker killed in the middle of it and, on two workers again, the process of its output; the
    cluster is stopped before the tests look at anything.  Then the decryption here."""
    root = tmp_path_factory.mktemp("cluster")
    corpus, local, enc, proc = make_corpus(root / "corpus"), root / "local", root / "enc", root / "proc"
    with started_cluster(root / "cluster") as (cl, dist):
        run_locally(corpus, local)
        cl.wait_for_workers(cl.workers)
        kill = kill_a_worker_mid_job(
            cl, dist, ["encrypt", "--keys", corpus / "pub", "--input", corpus / "images", "--out", enc, *ENC],
            root / "encrypt.log", out=enc, event_log=root / "enc-events")
        cl.add_worker()                 # two workers again
        submit(cl, dist, ["process", "--keys", corpus / "pub", "--input", enc, "--out", proc, "--op", OP],
               root / "process.log", event_log=root / "proc-events")
        master_url = cl.master_url
    decrypt_here(corpus, proc, owner_of(enc), root / "dec")
    return Runs(corpus, local, enc, proc, root / "dec", kill, events_of(root / "enc-events"),
                events_of(root / "proc-events"), master_url)


def test_a_worker_killed_mid_encrypt_leaves_exactly_the_rows_of_the_clean_run(runs):
    """SIGKILL to one worker's process group (the Worker JVM, its executor, their Python workers)
    once a batch is committed, while its executor runs a task: Spark reruns the lost work on the
    other worker, the half-written files of the lost attempts are never taken in, and the run
    commits every image exactly once."""
    run, local = runs, runs.local
    assert run.kill.returncode == 0, run.kill.output_tail
    # Spark saw the executor go while the job ran, and the job went on without it
    removed = [i for i, e in enumerate(run.enc_events) if e["Event"] == "SparkListenerExecutorRemoved"
               and e["Executor ID"] == run.kill.executor_id]
    assert removed, f"no SparkListenerExecutorRemoved for executor {run.kill.executor_id}"
    after = executor_ids_of_tasks(run.enc_events[removed[0]:])
    assert after and run.kill.executor_id not in after

    m, want = manifest(run.enc), manifest(local / "enc")
    assert m["status"] == "complete" and m["spark"]["master"] == run.master_url
    assert_same_counts(m["counts"], want["counts"])
    assert m["counts"]["images_rejected"] == 1
    got = keys_of(run.enc, owner_of(run.enc))
    assert got == keys_of(local / "enc", owner_of(local / "enc"))      # none missing ...
    assert max(got.values()) == 1                                       # ... none twice
    assert rejects_of(owner_of(run.enc)) == rejects_of(owner_of(local / "enc"))
    assert main(["verify", str(run.enc), "--master", "local[2]", "--quiet"]) == 0   # listed files only, checksums match


def test_process_on_the_cluster_decrypts_to_the_rows_of_the_local_run(runs):
    run, local = runs, runs.local
    m, want = manifest(run.proc), manifest(local / "proc")
    assert m["status"] == "complete" and m["spark"]["master"] == run.master_url
    assert_same_counts(m["counts"], want["counts"])
    got = keys_of(run.proc, owner_of(run.enc))
    assert got == keys_of(local / "proc", owner_of(local / "enc")) and max(got.values()) == 1
    # both workers' executors ran tasks of the process job
    assert len(executor_ids_of_tasks(run.proc_events)) == 2

    rows, pngs = decrypted(run.dec)
    want_rows, want_pngs = decrypted(local / "dec")
    assert rows == want_rows and len({r["source"] for r in rows}) == 4
    assert all(r["exact_fraction"] == 1.0 for r in rows)
    assert pngs.keys() == want_pngs.keys() and len(pngs) == 4
    for name, pixels in pngs.items():
        assert np.array_equal(pixels, want_pngs[name]), name
