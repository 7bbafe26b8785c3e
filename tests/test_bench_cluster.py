"""The cluster suite's HDFS mode (``hepix bench --suite cluster --hdfs``) without a cluster: the sampling of
the cluster's processes by role, the rows and their limits, the report, the table and the options.

Its end-to-end run (MiniDFSCluster, a standalone cluster, four applications each unpacking the packed
environment) takes minutes, not seconds: it is measured by running the suite (docs/benchmarks.md), and the
jobs it runs on HDFS and on a standalone cluster are tested end to end by tests/test_hdfs.py and
tests/test_cluster.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import clustertree
from bench.clustertree import ClusterSampler, ClusterUsage, classify
from bench.suites import corpus, corpuscluster
from bench.suites.corpus import JobRun


@pytest.mark.parametrize("tree, root, command, expected", [
    ("submit", False, "/usr/bin/java -cp x org.apache.spark.deploy.SparkSubmit", "driver_jvm"),
    ("submit", False, "/venv/bin/python3 hepix_main.py encrypt --keys k", "driver_python"),
    ("submit", True, "/venv/bin/python -m jobs.cli decrypt --master local[1]", "driver_python"),
    ("submit", False, "/venv/bin/python -m pyspark.daemon", "worker_python"),
    ("submit", True, "/bin/bash /repo/spark-submit/standalone.sh encrypt", "other"),
    ("worker", True, "java -cp jars org.apache.spark.deploy.worker.Worker", "worker_daemon_jvm"),
    ("worker", False, "java -cp jars org.apache.spark.executor.CoarseGrainedExecutorBackend", "executor_jvm"),
    ("worker", False, "./env/bin/python -m pyspark.daemon", "worker_python"),
    ("master", True, "java org.apache.spark.deploy.master.Master", "master_jvm"),
    ("hdfs", True, "java -cp lib/* org.apache.hadoop.test.MiniDFSClusterManager", "hdfs_jvm"),
])
def test_each_process_has_its_role_by_tree_and_program(tree, root, command, expected):
    assert classify(tree, root, command) == expected


class FakeProc:
    """A /proc of pids with command lines, children, CPU seconds and resident memory that a test advances."""

    def __init__(self, monkeypatch):
        self.cmd, self.children, self.cpu, self.rss = {}, {}, {}, {}
        monkeypatch.setattr(clustertree, "cmdline", lambda pid: self.cmd.get(pid, ""))
        monkeypatch.setattr(clustertree, "descendants", self._descendants)
        monkeypatch.setattr(clustertree, "cpu_seconds", lambda pid: self.cpu.get(pid))
        monkeypatch.setattr(clustertree, "proc_status", self.proc_status)

    def proc_status(self, pid):
        return {"VmHWM": self.rss[pid] * 1024, "VmRSS": self.rss[pid] * 1024} if pid in self.cpu else {}

    def _descendants(self, pid):
        out = []
        for c in self.children.get(pid, []):
            out += [c, *self._descendants(c)]
        return out

    def start(self, pid, parent, cmd, cpu=0.0, mb=100):
        self.cmd[pid], self.cpu[pid], self.rss[pid] = cmd, cpu, mb
        if parent:
            self.children.setdefault(parent, []).append(pid)

    def end(self, pid):
        self.cpu.pop(pid)


def test_the_daemons_count_from_the_first_sample_and_the_start_up_ends_with_the_first_python_worker(monkeypatch):
    p = FakeProc(monkeypatch)
    p.start(10, None, "java ...deploy.worker.Worker", cpu=500.0, mb=300)       # a daemon with a past
    p.start(20, None, "java ...deploy.master.Master", cpu=80.0, mb=250)
    sampler = ClusterSampler({"worker": 10, "master": 20})
    sampler.sample()
    p.start(30, None, "/bin/bash standalone.sh", cpu=0.1, mb=5)                 # the job's submitting side
    sampler.add_root("submit", 30)
    p.start(31, 30, "java ...SparkSubmit", cpu=6.0, mb=900)
    p.start(11, 10, "java ...CoarseGrainedExecutorBackend", cpu=4.0, mb=700)
    p.cpu[10] += 1.0
    sampler.sample()                                                             # start-up so far: no worker yet
    p.start(12, 11, "./env/bin/python -m pyspark.daemon", cpu=0.5, mb=80)
    p.start(13, 12, "./env/bin/python -m pyspark.daemon", cpu=2.0, mb=600)
    p.cpu[11] += 3.0
    sampler.sample()                                                             # the first Python worker
    p.cpu[11] += 5.0
    p.cpu[13] += 20.0
    p.cpu[31] += 2.0
    p.cpu[20] += 0.5
    sampler.sample()
    p.end(13)
    p.cpu[11] += 1.0
    r = sampler.finish().roles                                                  # (a last sample)
    assert r["worker_daemon_jvm"].cpu == 1.0 and r["master_jvm"].cpu == 0.5       # not their past
    assert r["executor_jvm"].cpu == 13.0 and r["executor_jvm"].startup_cpu == 7.0   # started while sampled: whole
    assert r["driver_jvm"].cpu == 8.0 and r["driver_jvm"].startup_cpu == 6.0
    assert r["worker_python"].cpu == 22.5 and r["worker_python"].processes == 2
    assert r["worker_python"].peak_mb == 600 and r["worker_python"].together_mb == 680
    assert r["worker_daemon_jvm"].peak_mb == 300 and r["other"].processes == 1
    assert sampler.usage.spark_jvm_cpu() == 22.5 and sampler.usage.spark_jvm_startup_cpu() == 14.0


def test_an_unknown_tree_is_refused():
    with pytest.raises(ValueError, match="unknown process trees"):
        ClusterSampler({"namenode": 1})


# --- rows, limits, report ------------------------------------------------------------------------

def _usage(jvm=(4.0, 10.0, 1.0, 0.5), startup=(3.0, 2.0, 0.2, 0.1), workers=30.0, hdfs=12.0) -> ClusterUsage:
    u = ClusterUsage()
    for role, cpu, first in zip(clustertree.SPARK_JVMS, jvm, startup):
        u.roles[role].cpu, u.roles[role].startup_cpu, u.roles[role].peak_mb = cpu, first, 1000.0
    u.roles["worker_python"].cpu, u.roles["worker_python"].peak_mb = workers, 500.0
    u.roles["worker_python"].processes = 2
    u.roles["driver_python"].cpu, u.roles["driver_python"].peak_mb = 2.0, 200.0
    u.roles["hdfs_jvm"].cpu = hdfs
    return u


def _job(job: str, seconds: float, implementation=corpuscluster.CLUSTER, input_bytes=2 * 10**9):
    timings = {} if job == "verify" else {corpus.WORK[job][-1]: seconds}
    run = JobRun({"counts": {"ciphertexts": 10, "ciphertext_bytes": 4000}, "timings": timings}, wall=seconds + 20,
                 peaks=corpuscluster.peaks_of(_usage()))
    return corpuscluster.cluster_row(job, run, _usage(), implementation=implementation, input_bytes=input_bytes,
                                     core=seconds / 2, load_before=0.5)


def _core(seconds: float) -> dict:
    return {j: corpus.CorpusRow(layout="packed", encryption="public", job=j, implementation="hecore, one core",
                                cores=1, images=2, pixels=600, ciphertexts=10, seconds=seconds,
                                seconds_per_ciphertext=seconds / 10, pixels_per_second=600 / seconds)
            for j in corpus.JOBS}


def _rows(copy_seconds=6.0):
    jobs = {"encrypt": _job("encrypt", 8.0, input_bytes=None), "process": _job("process", 10.0),
            "verify": _job("verify", 0.0), "decrypt": _job("decrypt", 5.0, corpuscluster.OWNER)}
    copy = corpuscluster.copy_row(copy_seconds, 2 * 10**9, 4, cpu=3.0, hdfs_cpu=9.0)
    return corpuscluster.limits(_core(4.0), jobs, copy)


def test_a_cluster_row_has_every_spark_jvm_by_role_and_their_cpu_per_gb_read():
    r = _job("process", 10.0)
    assert (r.implementation, r.cores, r.seconds, r.wall_seconds) == (corpuscluster.CLUSTER, 1, 10.0, 30.0)
    assert r.jvm_cpu_seconds == 15.5 and r.jvm_startup_cpu_seconds == pytest.approx(5.3)
    assert r.jvm_cpu_seconds_per_gb == 7.75                            # 15.5 s over 2 GB read
    assert (r.driver_jvm_cpu_seconds, r.executor_jvm_cpu_seconds, r.worker_daemon_cpu_seconds,
            r.master_cpu_seconds, r.hdfs_cpu_seconds) == (4.0, 10.0, 1.0, 0.5, 12.0)
    assert (r.driver_jvm_startup_cpu_seconds, r.executor_jvm_startup_cpu_seconds) == (3.0, 2.0)
    assert r.executor_jvm_peak_rss == 1000 * 2**20 and r.workers_peak_rss == 500 * 2**20
    assert r.core_seconds == 5.0


def test_verify_without_work_stages_counts_its_wall_time():
    r = _job("verify", 0.0)
    assert r.job == "verify" and r.seconds == 20.0 and r.core_seconds == 0.0


def test_process_is_held_to_the_slower_of_the_core_and_the_copy():
    at = {r.job: r for r in _rows(copy_seconds=6.0) if r.implementation != "hecore, one core"}
    assert at["process"].limit_seconds == 6.0 and at["process"].vs_limit == 0.6      # the copy: 6 s > core's 4
    assert at["process"].copy_seconds == 6.0
    assert at["encrypt"].limit_seconds == 4.0 and at["encrypt"].vs_limit == 0.5
    assert at["decrypt"].vs_limit == 0.8 and at["decrypt"].vs_core == 0.8
    assert all(at[j].vs_core_x2 is None for j in corpus.JOBS)                    # one core against one core
    assert at["verify"].vs_limit is None and at["copy"].seconds == 6.0
    slow_core = {r.job: r for r in _rows(copy_seconds=1.0) if r.implementation == corpuscluster.CLUSTER}
    assert slow_core["process"].limit_seconds == 4.0


def test_the_report_states_each_goal_and_the_roles():
    rows = _rows()
    rows[3].task_metrics = ('{"tasks": 8, "input_bytes": 0, "output_bytes": 0, "shuffle_read_bytes": 0, '
                            '"shuffle_write_bytes": 2000000, "result_bytes": 3000000, "executor_cpu_seconds": 4.5, '
                            '"executor_run_seconds": 9.0, "gc_seconds": 0.3}')
    assert (rows[3].job, rows[3].implementation) == ("process", corpuscluster.CLUSTER)
    text = corpuscluster.report(rows, "generated", "paper-4096")
    assert ("process, Spark's task metrics: 8 tasks; the JVMs read 0.000 GB, shuffled 0.002 GB, wrote 0.000 GB, "
            "returned 3.0 MB of results; task threads' CPU 4.5 s of 9.0 s run, GC 0.3 s") in text
    assert "encrypt 0.50, process 0.60, decrypt 0.80 (goal >= 0.7)" in text
    assert "process 7.8 (5.3 of 15.5 s before the first Python worker)" in text and "(goal <= 1.0" in text
    assert "6.0 s for 2.00 GB (0.33 GB/s" in text and "HDFS's 9.0 s" in text
    assert "executor JVM cpu" in text and "worker daemon MB" in text


def test_the_rows_fit_their_table(tmp_path):
    import pyarrow.parquet as pq

    from bench.rows import write_rows
    from bench.schemas import BENCH_CORPUS_CLUSTER

    common = {"run_id": "r", "started": corpus.runinfo.now(), "preset": "paper-4096", "dataset": "generated",
              "op": corpus.OP}
    table = pq.read_table(write_rows(_rows(), BENCH_CORPUS_CLUSTER, tmp_path, "r", common))
    assert table.schema.equals(BENCH_CORPUS_CLUSTER, check_metadata=False)
    got = {r["job"]: r for r in table.to_pylist() if r["implementation"] != "hecore, one core"}
    assert got["process"]["jvm_cpu_seconds_per_gb"] == 7.75 and got["copy"]["input_bytes"] == 2 * 10**9
    assert got["copy"]["timings"] == '{"copy_seconds": 6.0, "files": 4}'


def test_spark_task_metrics_are_summed_from_the_event_log(tmp_path):
    import json

    def end(cpu_ns, read, shuffle):
        return json.dumps({"Event": "SparkListenerTaskEnd", "Task Metrics": {
            "Executor CPU Time": cpu_ns, "Executor Run Time": 2000, "JVM GC Time": 100, "Result Size": 5000,
            "Input Metrics": {"Bytes Read": read}, "Output Metrics": {"Bytes Written": 0},
            "Shuffle Read Metrics": {"Remote Bytes Read": 0, "Local Bytes Read": shuffle},
            "Shuffle Write Metrics": {"Shuffle Bytes Written": shuffle}}})

    (tmp_path / "app-1").write_text("\n".join([json.dumps({"Event": "SparkListenerApplicationStart"}),
                                               end(1.5e9, 10**6, 0), end(0.5e9, 0, 300)]) + "\n")
    (tmp_path / "app-2.inprogress").write_text(end(9e9, 9, 9) + "\n")         # not finished: not read
    t = corpuscluster.task_metrics(tmp_path)
    assert (t["tasks"], t["input_bytes"], t["shuffle_read_bytes"], t["shuffle_write_bytes"]) == (2, 10**6, 300, 300)
    assert (t["executor_cpu_seconds"], t["executor_run_seconds"], t["gc_seconds"]) == (2.0, 4.0, 0.2)
    assert corpuscluster.task_metrics(tmp_path / "none") is None


# --- the options ---------------------------------------------------------------------------------

def test_only_the_cluster_suite_takes_hdfs(tmp_path):
    from jobs.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "--suite", "corpus", "--hdfs", "--out", str(tmp_path)])
    assert "not --hdfs" in str(e.value)


def test_the_hdfs_mode_runs_each_job_once():
    with pytest.raises(SystemExit) as e:
        corpuscluster.run(SimpleNamespace(repeats=3, images=None, quick=False, preset=None, out="x"))
    assert "--repeats 3" in str(e.value)


def test_the_suite_loads_the_checkouts_hdfs_and_cluster_helpers_once():
    from bench.checkout import checkout_module, launcher

    minidfs = checkout_module("minidfs")
    assert minidfs is checkout_module("minidfs") and hasattr(minidfs, "MiniDFS")
    assert hasattr(launcher(), "StandaloneCluster")
    with pytest.raises(SystemExit, match="runs from a checkout"):
        checkout_module("no_such_helper")


def test_the_cluster_suites_and_their_helpers_import_in_a_plain_interpreter(tmp_path):
    """What ``hepix bench --suite cluster`` (and ``--hdfs``) imports before it starts a cluster, as the installed
    ``hepix`` imports it: a fresh interpreter, neither pytest nor tests/ on its path, in another directory.  A
    helper that takes anything from the tests' configuration fails here in a second, not when the suite runs."""
    import os
    import subprocess
    import sys

    code = ("import sys\n"
            "import bench.suites.cluster, bench.suites.corpuscluster\n"
            "from bench.checkout import HELPERS, checkout_module, launcher\n"
            "assert hasattr(launcher(), 'StandaloneCluster') and hasattr(checkout_module('minidfs'), 'MiniDFS')\n"
            "assert all(checkout_module(name) is module for name, module in HELPERS.items())\n"
            "assert not {'pytest', 'conftest'} & set(sys.modules), 'the suites import the tests: pytest, conftest'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYTEST_")}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr


def test_the_startup_line_gives_both_applications_and_the_install_apart():
    from bench.startup import SECOND_STARTUP_GOAL, startup_line

    line = startup_line(11.7, 10.4, 1.04, unpacked=False)
    assert "the first 11.7 s, the second 10.4 s" in line and f"goal <= {SECOND_STARTUP_GOAL:.0f} s" in line
    assert "in 1.0 s (there already), in neither" in line
    assert "unpacked then" in startup_line(5.0, None, 30.0, unpacked=True)
    assert ", the second" not in startup_line(5.0, None)
