"""A real YARN: ``process`` through ``spark-submit/yarn.sh``, in client and in cluster deploy mode.

HDFS and YARN (one ResourceManager, one NodeManager) run in one JVM on loopback
(``tests/miniyarn.py``); its ``HADOOP_CONF_DIR`` is what yarn.sh is given.  The data owner's side
runs here on ``local[2]``: keygen, export-public, encrypt into HDFS (the owner map stays here),
and the clean run every YARN run is compared with -- the same ``process`` of the same ciphertexts
on ``local[2]``.  Then on YARN, with ``spark-submit/package.sh``'s archives (the packed
environment cached per dependency set, as for ``tests/test_cluster.py``): ``process`` in client
mode, with one executor container SIGKILLed while it runs a task, and ``process`` in cluster mode
(the driver in the application master, the public key directory a path of the node -- here, this
machine).  The cluster is stopped before any assertion runs.  Each output is verified and
decrypted here; decryption yields exactly the clean run's metrics and pixels, and the processed
ciphertext rows are exactly the clean run's, none missing, none twice.

The Spark jars come from pyspark's installation on the node (``spark.yarn.jars`` ``local:``, in the
spark-defaults.conf of a private ``SPARK_CONF_DIR``, the way a cluster's operator sets it) rather than
460 MB uploaded per application.  Skipped without Java (and a JDK's javac, Maven for the first fetch
of the jars: bench/clusters/minidfs.py).  Tiny images (32x32), the cheap ``addonly-2048`` keys.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from sparkcluster import NOT_ON_THE_CLUSTER, events_of, executor_ids_of_tasks, tail
from test_cluster import decrypted, keys_of, make_corpus

from bench.clusters.options import cluster_spark_opts
from bench.clusters.standalone import clean_env, cluster_dist, java_available, spark_home
from jobs.cli import main

pytestmark = [pytest.mark.seconds(335), pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.skipif(not java_available(), reason="no java on PATH and no JAVA_HOME: HDFS, YARN "
                                                              "and spark-submit need a JRE")]

SUBMIT = Path(__file__).resolve().parent.parent / "spark-submit"
OP = "brightness:20"
#: Eight ciphertext files, so that process runs eight tasks a stage on two one-core executors: the
#: killed executor's task is one of several still to run.
ENC = ["--tile", "8x8", "--partitions", "8", "--batch-images", "4"]
JOB_TIMEOUT = 900


def hdfs_conf(root: Path, webhdfs: str) -> Path:
    """Spark settings for the local runs that write to the one-data-node HDFS: its replication, and the
    name node's HTTP address, where the Python workers reach HDFS (as an owner's Hadoop configuration
    says it)."""
    conf = root / "local-spark.conf"
    conf.write_text("spark.hadoop.dfs.replication 1\n"
                    f"spark.hadoop.dfs.namenode.http-address {urlparse(webhdfs).netloc}\n")
    return conf


#: Where the packed environment is put on HDFS, readable by all: YARN's NodeManager localizes it once
#: (its public cache) for every application, instead of one upload and one unpacking per application.
ENV_ON_HDFS = "/apps/hepix/hepix-env.tar.gz"


def put_public(client, local: Path, remote: str) -> None:
    """``local`` to ``remote`` on HDFS, world-readable in world-searchable directories."""
    parent = remote.rsplit("/", 1)[0]
    client.makedirs(parent, permission="755")
    client.upload(remote, str(local), n_threads=1, overwrite=True, permission="644")
    while parent:
        client.set_permission(parent, "755")
        parent = parent.rsplit("/", 1)[0]


def yarn_env(cluster, dist: Path, root: Path, mode: str, event_log: Path) -> dict[str, str]:
    """yarn.sh's environment: the mini cluster's HADOOP_CONF_DIR, a SPARK_CONF_DIR whose
    spark-defaults.conf takes Spark's jars from this machine, the packed environment from HDFS
    (:data:`ENV_ON_HDFS`), small containers."""
    spark_conf = root / "spark-conf"
    spark_conf.mkdir(exist_ok=True)
    (spark_conf / "spark-defaults.conf").write_text(f"spark.yarn.jars local:{spark_home() / 'jars'}/*\n")
    event_log.mkdir(parents=True, exist_ok=True)
    opts = ["--conf", "spark.ui.enabled=false", "--conf", "spark.eventLog.enabled=true",
            "--conf", f"spark.eventLog.dir={event_log.as_uri()}", "--conf", "spark.eventLog.compress=false",
            "--conf", "spark.eventLog.rolling.enabled=false", *cluster_spark_opts()]
    return {**clean_env(), "HADOOP_CONF_DIR": str(cluster.conf_dir), "SPARK_CONF_DIR": str(spark_conf),
            "HEPIX_DIST": str(dist), "HEPIX_ENV_ARCHIVE": f"{cluster.uri}{ENV_ON_HDFS}", "HEPIX_VENV": sys.prefix,
            "HEPIX_DEPLOY_MODE": mode,
            "HEPIX_DRIVER_MEMORY": "1g", "HEPIX_EXECUTORS": "2", "HEPIX_EXECUTOR_MEMORY": "512m",
            "HEPIX_EXECUTOR_CORES": "1", "SPARK_LOCAL_IP": "127.0.0.1", "HEPIX_SPARK_OPTS": " ".join(opts)}


@dataclass
class Kill:
    """The executor container killed in the middle of the client-mode run."""

    container: str
    executor_id: str


def busy_executor(cluster):
    """An executor container whose JVM has started Python (so it runs, or has run, a task of the job)."""
    for c in cluster.containers("CoarseGrainedExecutorBackend"):
        for kid in cluster.children(c.pid):
            try:
                if b"python" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    return c
            except OSError:
                continue
    return None


def run_yarn(cluster, args: list, env: dict, log: Path, *, kill: bool = False) -> Kill | None:
    """``spark-submit/yarn.sh ARGS...`` to its end (failing the test with the output's end when it
    fails); with ``kill``, SIGKILL the first executor container that starts a Python worker."""
    killed = None
    with open(log, "w") as f:
        proc = subprocess.Popen([str(SUBMIT / "yarn.sh"), *map(str, args)], env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + JOB_TIMEOUT
        try:
            while kill and killed is None and proc.poll() is None and time.monotonic() < deadline:
                victim = busy_executor(cluster)
                if victim is None:
                    time.sleep(0.2)
                    continue
                cluster.kill_container(victim)
                words = victim.command.split()
                killed = Kill(victim.container_id, words[words.index("--executor-id") + 1])
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, f"yarn.sh {args[0]} exited with {proc.returncode}:\n{tail(log)}"
    assert not kill or killed, f"the job ended before an executor could be killed:\n{tail(log)}"
    return killed


@dataclass
class Runs:
    corpus: Path
    root: Path
    kill: Kill
    client_events: list[dict]
    cluster_events: list[dict]
    refusal: subprocess.CompletedProcess
    unpacked: dict[str, int]        # the NodeManager's copies of the environment, public and per user or app


def unpacked_environments(cluster) -> dict[str, int]:
    """How many copies of the packed environment the NodeManager unpacked into its public cache, and into
    its users' and applications' caches."""
    local = "target/test/data/*/*/*-localDir-nm-*/{}/hepix-env.tar.gz"
    return {where: len(list(cluster.workdir.glob(local.format(pattern))))
            for where, pattern in (("public", "filecache/*"), ("user", "usercache/*/filecache/*"),
                                   ("application", "usercache/*/appcache/*/filecache/*"))}


def download(client, remote: str, local: Path) -> Path:
    local.parent.mkdir(parents=True, exist_ok=True)
    client.download(remote, str(local), n_threads=1)
    return local


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    from miniyarn import MiniYarn, unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("yarn")
    cluster = MiniYarn(root / "cluster")                # comes up while the owner's side runs
    try:
        dist = cluster_dist(root / "dist", venv=Path(sys.prefix), without=NOT_ON_THE_CLUSTER)
        corpus = make_corpus(root / "corpus")
        pub, hdfs, owner = corpus / "pub", cluster.uri, root / "enc.owner"
        local = ["--master", "local[2]", "--conf", str(hdfs_conf(root, cluster.webhdfs)), "--quiet"]
        assert main(["encrypt", "--keys", str(pub), "--input", str(corpus / "images"), "--out", f"{hdfs}/enc",
                     "--owner", str(owner), *ENC, *local]) == 0
        assert main(["process", "--keys", str(pub), "--input", f"{hdfs}/enc", "--out", f"{hdfs}/local",
                     "--op", OP, *local]) == 0
        put_public(cluster.client(), dist / "hepix-env.tar.gz", ENV_ON_HDFS)
        process = ["process", "--keys", pub, "--input", f"{hdfs}/enc", "--op", OP]
        kill = run_yarn(cluster, [*process, "--out", f"{hdfs}/client"],
                        yarn_env(cluster, dist, root, "client", root / "client-events"), root / "client.log", kill=True)
        run_yarn(cluster, [*process, "--out", f"{hdfs}/cluster"],
                 yarn_env(cluster, dist, root, "cluster", root / "cluster-events"), root / "cluster.log")
        refusal = subprocess.run(
            [str(SUBMIT / "yarn.sh"), "decrypt", "--keys", str(corpus / "keys"), "--input", f"{hdfs}/client",
             "--out", f"{hdfs}/dec", "--owner", str(owner)],
            env=yarn_env(cluster, dist, root, "client", root / "refused-events"), capture_output=True, text=True,
            timeout=120, check=False)
        # The owner's side again: verify and decrypt each run here, the outputs copied out of HDFS.
        webhdfs = cluster.client()
        for name in ("local", "client", "cluster"):
            assert main(["verify", f"{hdfs}/{name}", *local]) == 0, name
            assert main(["decrypt", "--keys", str(corpus / "keys"), "--input", f"{hdfs}/{name}", "--out",
                         str(root / "dec" / name), "--owner", str(owner), "--images", str(corpus / "images"),
                         "--png", *local]) == 0, name
            download(webhdfs, f"/{name}", root / "got" / name)
        unpacked = unpacked_environments(cluster)
    finally:
        cluster.stop()
    return Runs(corpus, root, kill, events_of(root / "client-events"), events_of(root / "cluster-events"),
                refusal, unpacked)


def manifest(path: Path) -> dict:
    return json.loads((path / "_manifest.json").read_text())


@pytest.mark.parametrize("mode", ["client", "cluster"])
def test_process_on_yarn_decrypts_to_the_pixels_of_the_local_run(runs, mode):
    got, want = runs.root / "got" / mode, runs.root / "got" / "local"
    m = manifest(got)
    assert m["status"] == "complete" and m["spark"]["master"] == "yarn"
    assert m["counts"] == manifest(want)["counts"]
    owner = runs.root / "enc.owner"
    rows = keys_of(got, owner)
    assert rows == keys_of(want, owner) and max(rows.values()) == 1          # none missing, none twice
    assert sum(rows.values()) == 128

    dec_rows, pngs = decrypted(runs.root / "dec" / mode)
    want_rows, want_pngs = decrypted(runs.root / "dec" / "local")
    assert dec_rows == want_rows and len({r["source"] for r in dec_rows}) == 4
    assert all(r["exact_fraction"] == 1.0 for r in dec_rows)
    assert pngs.keys() == want_pngs.keys() and len(pngs) == 4
    for name, pixels in pngs.items():
        assert np.array_equal(pixels, want_pngs[name]), name


def test_an_executor_container_killed_mid_job_leaves_exactly_the_rows_of_the_clean_run(runs):
    """SIGKILL to one executor container (its JVM and its Python workers) while it runs the job's
    Python: YARN reports the container gone, Spark reruns its tasks elsewhere, and the output is
    exactly the clean run's (the test above, for the client run)."""
    events = runs.client_events
    removed = [i for i, e in enumerate(events) if e["Event"] == "SparkListenerExecutorRemoved"
               and e["Executor ID"] == runs.kill.executor_id]
    assert removed, f"no SparkListenerExecutorRemoved for executor {runs.kill.executor_id}"
    after = executor_ids_of_tasks(events[removed[0]:])
    assert after and runs.kill.executor_id not in after
    ends = [e for e in events if e["Event"] == "SparkListenerJobEnd"]
    assert ends and all(e["Job Result"]["Result"] == "JobSucceeded" for e in ends)
    # the cluster-mode run lost nothing: its two executors did the work
    assert len(executor_ids_of_tasks(runs.cluster_events)) == 2


def test_the_environment_on_hdfs_is_unpacked_once_for_both_applications(runs):
    """HEPIX_ENV_ARCHIVE names the world-readable archive on HDFS: both applications ran from the one copy in
    the NodeManager's public cache, and none was unpacked per user or per application."""
    assert runs.unpacked == {"public": 1, "user": 0, "application": 0}


def test_yarn_sh_refuses_decrypt_without_a_trusted_cluster(runs):
    assert runs.refusal.returncode == 1
    assert "'decrypt' handles the secret key" in runs.refusal.stderr
    assert "HEPIX_TRUSTED_CLUSTER=1" in runs.refusal.stderr
