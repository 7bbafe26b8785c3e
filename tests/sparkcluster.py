"""Test helpers for a real Spark standalone cluster on loopback (``tests/test_cluster.py``).

The cluster, the archives and the submit command line are :mod:`bench.clusters.standalone`'s (the
cluster benchmark, ``hepix bench --suite cluster``, runs on the same); here: starting
it for a test module and stopping it whatever happens, running a job to its end, killing a
worker in the middle of one, and reading Spark's event log afterwards.  The cluster's node has the
packed environment unpacked once (``spark-submit/install-env.sh``, kept beside the cached archive for
later runs), so its applications ship and unpack none (``HEPIX_NODE_ENV``); the archive path is
``tests/test_yarn.py``'s.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.clusters.options import SHORT_JVM_OPTS, cluster_spark_opts, submit_jvm_env
from bench.clusters.standalone import (
    GIB,
    StandaloneCluster,
    cluster_dist,
    free_port,
    get_json,
    node_env,
    scratch_parent,
    standalone_command,
)

#: Generous: a loaded two-core machine runs each application's start-up and its job slowly.
JOB_TIMEOUT = 1200.0
#: tmpfs the cluster may use (its work and local directories; room for an application that ships the
#: packed environment and unpacks it three times).
SCRATCH_NEED = 4 * GIB
#: What the test's jobs (encrypt and process in the packed layout, decrypt here) never import on the
#: cluster, left out of its packed environment (``package.sh --without``; SciPy goes with scikit-image
#: and scikit-learn): about two thirds of the 1 GB every executor would unpack.
NOT_ON_THE_CLUSTER = ("duckdb", "matplotlib", "scikit-learn", "numba", "scikit-image")


@contextlib.contextmanager
def started_cluster(root: Path, workers: int = 2):
    """A master and ``workers`` one-core workers on 127.0.0.1, launched but not waited for (call
    ``wait_for_workers``), with the packed environment unpacked on the node (:func:`node_env`), and a
    ``HEPIX_DIST`` directory for ``standalone.sh``; every daemon stopped and the scratch removed on the
    way out, also when the test failed or the start did."""
    dist = cluster_dist(root / "dist", venv=Path(sys.prefix), without=NOT_ON_THE_CLUSTER)
    env = node_env(dist / "hepix-env.tar.gz")
    scratch = Path(tempfile.mkdtemp(prefix="hepix-test-cluster-", dir=scratch_parent(root, SCRATCH_NEED)))
    cluster = StandaloneCluster(root / "spark", workers=workers, scratch=scratch, java_options=SHORT_JVM_OPTS,
                                node_env=env.path)
    try:
        cluster.start(wait=False)
        yield cluster, dist
    finally:
        cluster.stop()


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


def app_command(cluster: StandaloneCluster, dist: Path, args: list, **options) -> tuple[list[str], dict[str, str]]:
    """:func:`standalone_command` for a test's application: its JVMs as the tests' own (``cluster_spark_opts``,
    and the spark-submit JVM's options, the driver's in client mode, from ``submit_jvm_env``)."""
    cmd, env = standalone_command(cluster, dist, [str(a) for a in args], venv=Path(sys.prefix),
                                  extra_opts=cluster_spark_opts(), **options)
    return cmd, {**env, **submit_jvm_env()}


def submit(cluster: StandaloneCluster, dist: Path, args: list, log: Path, *, cores: int = 2,
           event_log: Path | None = None) -> None:
    """``spark-submit/standalone.sh ARGS...`` on the cluster, to its end; fails the test with the
    output's end when the job fails."""
    cmd, env = app_command(cluster, dist, args, cores=cores, event_log=event_log)
    with open(log, "w") as f:
        code = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT,
                              check=False).returncode
    cluster.clear_finished_apps()
    assert code == 0, f"{' '.join(cmd[:2])} exited with {code}:\n{tail(log)}"


@dataclass
class Kill:
    """What :func:`kill_a_worker_mid_job` did."""

    returncode: int
    executor_id: str          # the killed worker's executor, as Spark names it ("0", "1", ...)
    worker: str               # the killed worker daemon's name
    output_tail: str


def batches_committed(out: Path) -> int:
    """How many batches the encrypt run into ``out`` has committed, as its owner map records them
    (``<out>.owner/owner.json``, replaced whole on each commit)."""
    try:
        return len(json.loads((out.with_name(out.name + ".owner") / "owner.json").read_text())["batches"])
    except (OSError, ValueError, KeyError):          # not written yet
        return 0


def _victim(cluster: StandaloneCluster, ui: int, *, busy_only: bool):
    """(executor id, worker daemon) of an executor of the running application, on a live worker:
    one running a task right now (as the driver's REST API says), or with ``busy_only=False`` any."""
    base = f"http://127.0.0.1:{ui}/api/v1/applications"
    apps = get_json(base)
    if not apps:
        return None
    app = apps[0]["id"]
    executors = [e for e in get_json(f"{base}/{app}/executors") if e["id"] != "driver" and e.get("isActive", True)]
    busy = {e["id"] for e in executors if e.get("activeTasks", 0) > 0}
    wanted = busy if busy_only else {e["id"] for e in executors}
    for daemon in cluster.live_workers():
        for ex in cluster.worker_executors(daemon):
            if ex.get("appid") == app and str(ex.get("id")) in wanted:
                return str(ex["id"]), daemon
    return None


def kill_a_worker_mid_job(cluster: StandaloneCluster, dist: Path, args: list, log: Path, *, out: Path,
                          event_log: Path, cores: int = 2) -> Kill:
    """Run the encrypt job ``args`` (into ``out``) on the cluster and, once a batch is committed,
    SIGKILL the process group of a worker whose executor runs a task at that moment, as the
    driver's REST API and the worker's JSON say -- or, should the second batch be committed before
    such a moment was seen (a loaded machine answers slowly), of any worker with an executor of
    the job, at once.  Waits for the job's end; fails the test when the job ended before a kill."""
    ui = free_port()
    cmd, env = app_command(cluster, dist, args, cores=cores, event_log=event_log, ui_port=ui)
    deadline = time.monotonic() + JOB_TIMEOUT
    killed = None
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            while killed is None and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
                done = batches_committed(out)
                if not done:
                    continue
                try:
                    victim = _victim(cluster, ui, busy_only=done < 2)
                except (OSError, ValueError):       # the UI between two states; ask again
                    continue
                if victim:
                    cluster.kill_worker(victim[1])
                    killed = victim
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    cluster.clear_finished_apps()
    assert killed is not None, (f"the job ended (exit {proc.returncode}) before a worker could be killed "
                                f"in the middle of it:\n{tail(log)}")
    return Kill(proc.returncode, killed[0], killed[1].name, tail(log))


def events_of(folder: Path) -> list[dict]:
    """The events of the one application whose (uncompressed, not rolled) event log is in ``folder``."""
    logs = [p for p in folder.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    assert len(logs) == 1, f"expected one finished event log in {folder}, found {[p.name for p in folder.iterdir()]}"
    return [json.loads(line) for line in logs[0].read_text().splitlines() if line.strip()]


def executor_ids_of_tasks(events: list[dict]) -> set[str]:
    """The executors on which tasks succeeded, among ``events``."""
    return {e["Task Info"]["Executor ID"] for e in events
            if e["Event"] == "SparkListenerTaskEnd" and e.get("Task End Reason", {}).get("Reason") == "Success"}
