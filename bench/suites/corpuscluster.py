"""``hepix bench --suite cluster --hdfs``: the corpus pipeline where users run it, a cluster with its data on HDFS.

One run, on this machine's loopback:

* HDFS: Hadoop's MiniDFSCluster (:mod:`bench.clusters.minidfs`, which the tests use too, reached through
  :mod:`bench.checkout` as the cluster suite reaches its launcher), holding the images (``/corpus``), the
  cluster's key directory (``/cluster/keys``: public-only, ``hepix export-public``) and every job's output;
* a Spark standalone cluster with ONE worker of one core (:mod:`bench.clusters.standalone`), the jobs submitted
  through ``spark-submit/standalone.sh``: ``hepix encrypt`` (packed, public key; the owner map stays on the
  owner's disk), ``hepix process --op brightness:60``, ``hepix verify`` of the processed table;
* the owner's side: ``hepix decrypt --owner --images`` on ``local[1]`` with the owner's key directory on the
  owner's disk, reading the processed table and the images from HDFS and writing its metrics there;
* the limits, in the same run: hecore alone on one core (``bench.suites.corpus.baseline_one_core``:
  decode, encrypt, the op, decrypt and score on the same images), and a pyarrow copy, in one process, of
  the files ``process`` reads (the encrypted ciphertexts), from HDFS to HDFS over the same WebHDFS client
  the workers use -- no processing job can beat reading and writing its bytes.

The packed environment is unpacked on the node once, before the cluster starts
(``spark-submit/install-env.sh``, kept beside the cached archive for later runs, as on a real cluster's nodes;
its seconds are a row of their own, ``node env``), and every application runs its Python workers from it
(``HEPIX_NODE_ENV``): the report gives the start-up of the first application on the cluster (encrypt) and of
the second (process) apart.

Each job's processes are sampled by role (:class:`bench.clustertree.ClusterSampler`): the driver's Python
and JVM, the executor's JVM, the worker daemon, the master, the Python workers, and HDFS itself.  Per job:
its seconds (the manifest's work stages, as the corpus suite counts them; ``verify`` writes no manifest: its
wall time), its rate over its limit (``vs_limit``: the core's time, for ``process`` the larger of the core's
and the copy's; goal >= 0.7), and the Spark JVMs' CPU seconds per GB (10^9 bytes) of ciphertext it read
(``jvm_cpu_seconds_per_gb``; goal <= 1 for process and decrypt), of which start-up (before the first Python
worker ran).  Writes ``OUT/bench_corpus_cluster/<run_id>.parquet`` (``bench.schemas.BENCH_CORPUS_CLUSTER``).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.clusters.options import conf_args, event_log_settings
from bench.clustertree import ClusterSampler, ClusterUsage
from bench.proctree import MemoryPeaks
from bench.suites import corpus
from bench.suites.corpus import CorpusRow, JobRun

log = logging.getLogger(__name__)

DEFAULT_IMAGES, QUICK_IMAGES = 2, 1
LAYOUT, ENCRYPTION = "packed", "public"
#: The goals: each job's rate over its limit, and the Spark JVMs' CPU per GB of ciphertext read.
GOAL_VS_LIMIT, GOAL_JVM_CPU_PER_GB = 0.7, 1.0
GB = 10**9
CLUSTER = "spark standalone, 1 worker of 1 core"
OWNER = "spark local[1], the owner's"
COPY = "pyarrow copy, one process"
INSTALL = "spark-submit/install-env.sh, once per node"
#: The cluster side's Spark settings: one data node, so one replica.
SPARK_CONF = {"spark.hadoop.dfs.replication": "1"}
JOB_TIMEOUT = 3600.0


@dataclass
class ClusterCorpusRow(CorpusRow):
    """A :class:`~bench.suites.corpus.CorpusRow` with the cluster's processes by role and the limits
    (see ``bench.schemas.BENCH_CORPUS_CLUSTER``)."""

    load_1m_before: float | None = None
    input_bytes: int | None = None
    limit_seconds: float | None = None
    vs_limit: float | None = None
    jvm_cpu_seconds_per_gb: float | None = None
    jvm_startup_cpu_seconds: float | None = None
    driver_jvm_cpu_seconds: float | None = None
    driver_jvm_startup_cpu_seconds: float | None = None
    executor_jvm_cpu_seconds: float | None = None
    executor_jvm_startup_cpu_seconds: float | None = None
    worker_daemon_cpu_seconds: float | None = None
    master_cpu_seconds: float | None = None
    hdfs_cpu_seconds: float | None = None
    executor_jvm_peak_rss: int | None = None
    worker_daemon_peak_rss: int | None = None
    master_peak_rss: int | None = None
    task_metrics: str | None = None          # JSON: Spark's own task metrics, summed (:func:`task_metrics`)


# --- rows from what was sampled ------------------------------------------------------------------

def peaks_of(u: ClusterUsage) -> MemoryPeaks:
    """The corpus suite's :class:`MemoryPeaks` of a sampled cluster job: its driver (Python, JVM), its
    Python workers, and as ``driver_jvm_cpu`` the CPU of every Spark JVM (driver, executor, daemons)."""
    r = u.roles
    return MemoryPeaks(driver_python_mb=r["driver_python"].peak_mb, driver_jvm_mb=r["driver_jvm"].peak_mb,
                       worker_python_max_mb=r["worker_python"].peak_mb,
                       workers_together_mb=r["worker_python"].together_mb,
                       worker_processes=r["worker_python"].processes, samples=u.samples,
                       driver_python_cpu=r["driver_python"].cpu, driver_jvm_cpu=u.spark_jvm_cpu(),
                       worker_python_cpu=r["worker_python"].cpu)


def cluster_row(job: str, run: JobRun, usage: ClusterUsage, *, implementation: str, input_bytes: int | None,
                core: float | None, load_before: float | None = None) -> ClusterCorpusRow:
    """One job's row: the corpus suite's (:func:`bench.suites.corpus.job_row`: counts, stages, peaks) with
    the cluster's roles and the JVMs' CPU per GB of ``input_bytes`` added.  A job without timings (verify)
    counts its wall time."""
    if job in corpus.WORK:
        base = corpus.job_row(LAYOUT, ENCRYPTION, job, run, core)
    else:
        # verify times no work stages: the corpus suite's row of a job without them (its wall time), renamed;
        # the corpus suite's warning that a job's manifest lacks its timings does not apply
        corpus.log.disabled = True
        try:
            base = corpus.job_row(LAYOUT, ENCRYPTION, "process", run, core)
        finally:
            corpus.log.disabled = False
    r, mb = usage.roles, 2**20
    row = ClusterCorpusRow(**vars(base))
    row.job, row.implementation, row.cores = job, implementation, 1
    row.load_1m_before, row.input_bytes = load_before, input_bytes
    jvm = usage.spark_jvm_cpu()
    row.jvm_cpu_seconds, row.jvm_startup_cpu_seconds = jvm, usage.spark_jvm_startup_cpu()
    row.jvm_cpu_seconds_per_gb = jvm / (input_bytes / GB) if input_bytes else None
    row.driver_jvm_cpu_seconds, row.driver_jvm_startup_cpu_seconds = r["driver_jvm"].cpu, r["driver_jvm"].startup_cpu
    row.executor_jvm_cpu_seconds = r["executor_jvm"].cpu
    row.executor_jvm_startup_cpu_seconds = r["executor_jvm"].startup_cpu
    row.worker_daemon_cpu_seconds, row.master_cpu_seconds = r["worker_daemon_jvm"].cpu, r["master_jvm"].cpu
    row.hdfs_cpu_seconds = r["hdfs_jvm"].cpu
    row.executor_jvm_peak_rss = int(r["executor_jvm"].peak_mb * mb)
    row.worker_daemon_peak_rss = int(r["worker_daemon_jvm"].peak_mb * mb)
    row.master_peak_rss = int(r["master_jvm"].peak_mb * mb)
    return row


def copy_row(seconds: float, nbytes: int, files: int, cpu: float, hdfs_cpu: float) -> ClusterCorpusRow:
    """The pyarrow copy of process's input: its seconds, the copying process's CPU and HDFS's (the files
    copied in ``timings``)."""
    return ClusterCorpusRow(layout=LAYOUT, encryption=ENCRYPTION, job="copy", implementation=COPY, cores=1,
                            images=0, pixels=0, ciphertexts=0, seconds=seconds, seconds_per_ciphertext=0.0,
                            pixels_per_second=0.0, wall_seconds=seconds, input_bytes=nbytes,
                            bytes_at_rest=nbytes, driver_python_cpu_seconds=cpu, hdfs_cpu_seconds=hdfs_cpu,
                            timings=json.dumps({"copy_seconds": seconds, "files": files}))


def install_row(seconds: float, unpacked: bool) -> ClusterCorpusRow:
    """The packed environment's install on the node before the cluster's first application: its seconds, and
    whether it was unpacked then (else it was there already; in ``timings``)."""
    return ClusterCorpusRow(layout=LAYOUT, encryption=ENCRYPTION, job="node env", implementation=INSTALL, cores=1,
                            images=0, pixels=0, ciphertexts=0, seconds=seconds, seconds_per_ciphertext=0.0,
                            pixels_per_second=0.0, wall_seconds=seconds,
                            timings=json.dumps({"install_seconds": seconds, "unpacked": unpacked}))


def limits(core: dict[str, CorpusRow], jobs: dict[str, ClusterCorpusRow], copy: ClusterCorpusRow | None,
           install: ClusterCorpusRow | None = None) -> list[CorpusRow]:
    """The rows in order, each job's ratios filled in: ``vs_core`` (the core's rate; the corpus suite's
    :func:`~bench.suites.corpus.compare_rows`), ``limit_seconds`` (the core's time; for process the larger
    of it and the copy's) and ``vs_limit``.  One core against one core: no ``vs_core_x2``.  The copy's row and
    the environment's install (:func:`install_row`) last."""
    core = {j: ClusterCorpusRow(**vars(r)) for j, r in core.items()}
    rows = corpus.compare_rows(core, {j: jobs[j] for j in corpus.JOBS})
    for job in corpus.JOBS:
        s = jobs[job]
        s.vs_core_x2 = None
        s.limit_seconds = core[job].seconds
        if job == "process" and copy is not None:
            s.copy_seconds = copy.seconds
            s.limit_seconds = max(s.limit_seconds, copy.seconds)
        s.vs_limit = s.limit_seconds / s.seconds if s.vs_core is not None else None
    rest = [jobs[j] for j in jobs if j not in corpus.JOBS]
    return rows + rest + [r for r in (copy, install) if r is not None]


# --- the report ----------------------------------------------------------------------------------

def _mb(v: int | None) -> float | None:
    return None if v is None else v / 2**20


def roles_table(rows: list[ClusterCorpusRow]) -> str:
    """Each job's CPU seconds and peak memory by role."""
    from jobs.runtime.console import table

    shown = [vars(r) | {"py_mb": _mb(r.driver_python_peak_rss), "djvm_mb": _mb(r.driver_jvm_peak_rss),
                        "ejvm_mb": _mb(r.executor_jvm_peak_rss), "worker_mb": _mb(r.workers_peak_rss),
                        "daemon_mb": _mb(r.worker_daemon_peak_rss), "master_mb": _mb(r.master_peak_rss)}
             for r in rows if r.implementation in (CLUSTER, OWNER)]
    return table(shown, [("job", "job", ""), ("wall_seconds", "wall s", ".1f"),
                         ("startup_seconds", "start-up s", ".1f"),
                         ("driver_python_cpu_seconds", "driver py cpu", ".1f"),
                         ("driver_jvm_cpu_seconds", "driver JVM cpu", ".1f"),
                         ("driver_jvm_startup_cpu_seconds", "of which start-up", ".1f"),
                         ("executor_jvm_cpu_seconds", "executor JVM cpu", ".1f"),
                         ("executor_jvm_startup_cpu_seconds", "of which start-up", ".1f"),
                         ("worker_daemon_cpu_seconds", "worker daemon cpu", ".1f"),
                         ("master_cpu_seconds", "master cpu", ".1f"),
                         ("workers_cpu_seconds", "py workers cpu", ".1f"), ("core_seconds", "core s", ".1f"),
                         ("hdfs_cpu_seconds", "HDFS cpu", ".1f"), ("py_mb", "driver py MB", ",.0f"),
                         ("djvm_mb", "driver JVM MB", ",.0f"), ("ejvm_mb", "executor JVM MB", ",.0f"),
                         ("worker_mb", "py worker MB", ",.0f"), ("daemon_mb", "worker daemon MB", ",.0f"),
                         ("master_mb", "master MB", ",.0f")])


def goals(rows: list[ClusterCorpusRow]) -> list[str]:
    """One line a goal: each job's rate over its limit, and the JVMs' CPU per GB for process and decrypt."""
    jobs = {r.job: r for r in rows if r.implementation in (CLUSTER, OWNER)}
    copy = next((r for r in rows if r.job == "copy"), None)
    rates = ", ".join(f"{j} {jobs[j].vs_limit:.2f}" for j in corpus.JOBS if j in jobs and jobs[j].vs_limit is not None)
    lines = [(f"each job's rate over its limit (one core; process: max(core, pyarrow copy)): {rates} "
             f"(goal >= {GOAL_VS_LIMIT})")]
    per_gb = ", ".join(f"{j} {jobs[j].jvm_cpu_seconds_per_gb:.1f} ({jobs[j].jvm_startup_cpu_seconds:.1f} of "
                       f"{jobs[j].jvm_cpu_seconds:.1f} s before the first Python worker)"
                       for j in ("process", "decrypt", "verify")
                       if j in jobs and jobs[j].jvm_cpu_seconds_per_gb is not None)
    lines.append(f"Spark JVMs' CPU s per GB of ciphertext read: {per_gb} (goal <= {GOAL_JVM_CPU_PER_GB} for process "
                 "and decrypt)")
    for j, r in jobs.items():
        t = json.loads(r.task_metrics or "null")
        if t:
            lines.append(f"{j}, Spark's task metrics: {t['tasks']} tasks; the JVMs read {t['input_bytes'] / GB:.3f} GB,"
                         " "
                         f"shuffled {t['shuffle_write_bytes'] / GB:.3f} GB, wrote {t['output_bytes'] / GB:.3f} GB, "
                         f"returned {t['result_bytes'] / 1e6:.1f} MB of results; task threads' CPU "
                         f"{t['executor_cpu_seconds']:.1f} s of {t['executor_run_seconds']:.1f} s run, GC "
                         f"{t['gc_seconds']:.1f} s")
    if "encrypt" in jobs and jobs["encrypt"].implementation == CLUSTER:
        from bench.startup import startup_line

        second = jobs.get("process")
        install = next((r for r in rows if r.implementation == INSTALL), None)
        lines.append(startup_line(jobs["encrypt"].startup_seconds,
                                  second.startup_seconds if second and second.implementation == CLUSTER else None,
                                  *((install.seconds, json.loads(install.timings)["unpacked"]) if install else ())))
    if copy is not None and copy.seconds:
        lines.append(f"pyarrow copy HDFS -> HDFS of process's input, one process: {copy.seconds:.1f} s for "
                     f"{copy.input_bytes / GB:.2f} GB ({copy.input_bytes / GB / copy.seconds:.2f} GB/s read + written; "
                     f"its CPU {copy.driver_python_cpu_seconds:.1f} s, HDFS's {copy.hdfs_cpu_seconds:.1f} s)")
    return lines


def report(rows: list[ClusterCorpusRow], dataset: str, preset_name: str) -> str:
    from jobs.runtime.console import table

    shown = [vars(r) | {"ms_per_ct": r.seconds_per_ciphertext * 1e3, "gb": (r.input_bytes or 0) / GB or None}
             for r in rows]
    lines = [table(shown, [("job", "job", ""), ("implementation", "implementation", ""), ("ciphertexts", "cts", "d"),
                           ("seconds", "seconds", ".2f"), ("ms_per_ct", "ms/ct", ".3f"),
                           ("limit_seconds", "limit s", ".2f"), ("vs_limit", "x limit", ".2f"),
                           ("gb", "GB read", ".2f"), ("jvm_cpu_seconds", "JVM cpu s", ".1f"),
                           ("jvm_cpu_seconds_per_gb", "JVM s/GB", ".1f"), ("startup_seconds", "start-up s", ".1f"),
                           ("min_psnr", "min PSNR", ".1f"), ("min_exact_fraction", "exact", ".4f")]), ""]
    lines += goals(rows)
    lines += ["", ("by role (CPU seconds while the job ran, a lower bound; peak resident MB, the daemons' over "
                  "their life): the Spark JVMs are the driver's, the executor's, the worker daemon and the "
                  "master; HDFS (name and data node, serving WebHDFS) apart"), roles_table(rows), ""]
    load = corpus.load_1m()
    lines.append(f"{dataset}, {preset_name}, {corpus.OP}; HDFS on loopback (MiniDFSCluster); 1-minute load "
                 f"average at the end {load if load is None else round(load, 1)}")
    return "\n".join(lines)


# --- HDFS, through the workers' own client ---------------------------------------------------------

def upload(fs, local: Path, remote: str) -> None:
    """Every file of ``local`` into ``remote`` (a path of the pyarrow file system ``fs``)."""
    fs.create_dir(remote)
    for p in sorted(local.iterdir()):
        with fs.open_output_stream(f"{remote}/{p.name}") as out:
            out.write(p.read_bytes())


def read_json(access, uri: str) -> dict:
    fs, path = access.open(uri)
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())


def table_files(access, uri: str) -> list:
    """The Parquet files of a table directory (``FileInfo``), without the ``_`` and ``.`` ones readers skip."""
    import pyarrow.fs as pafs

    fs, path = access.open(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return sorted((i for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet")
                   and not i.base_name.startswith(("_", "."))), key=lambda i: i.path)


def table_bytes(access, uri: str) -> int:
    return sum(i.size for i in table_files(access, uri))


def read_column(access, uri: str, column: str) -> list:
    import pyarrow.parquet as pq

    fs, _ = access.open(uri)
    return [v for i in table_files(access, uri)
            for v in pq.read_table(i.path, filesystem=fs, columns=[column]).column(column).to_pylist()]


def core_seconds(access, job: str, out: str) -> float | None:
    """:func:`bench.suites.corpus.core_seconds` of a table on HDFS."""
    table, column = corpus.CORE_COLUMN[job]
    try:
        return float(sum(v for v in read_column(access, f"{out}/{table}", column) if v is not None))
    except (OSError, KeyError, ValueError):
        return None


def pyarrow_copy(access, src: str, dst: str) -> tuple[float, int, int]:
    """Copy the table ``src`` to ``dst`` row group by row group with pyarrow, in this process, over
    ``access`` (the workers' WebHDFS client): (seconds, bytes read, files)."""
    import pyarrow.parquet as pq

    fs, _ = access.open(src)
    _, target = access.open(dst)
    files = table_files(access, src)
    t = time.perf_counter()
    fs.create_dir(target)
    for info in files:
        with fs.open_input_file(info.path) as f:
            pf = pq.ParquetFile(f)
            with pq.ParquetWriter(fs.open_output_stream(f"{target}/{info.base_name}"), pf.schema_arrow) as w:
                for i in range(pf.num_row_groups):
                    w.write_table(pf.read_row_group(i))
    return time.perf_counter() - t, sum(i.size for i in files), len(files)


def task_metrics(folder: Path) -> dict | None:
    """What Spark's event logs in ``folder`` (one application's) say its tasks did, summed over them: the bytes
    its JVMs read, shuffled and wrote for the tasks, the task threads' CPU and run time and the garbage
    collector's time (seconds).  None without a finished log."""
    logs = [p for p in folder.iterdir() if p.is_file() and not p.name.endswith(".inprogress")] \
        if folder.is_dir() else []
    if not logs:
        return None
    out = dict.fromkeys(("tasks", "input_bytes", "output_bytes", "shuffle_read_bytes", "shuffle_write_bytes",
                         "result_bytes", "executor_cpu_seconds", "executor_run_seconds", "gc_seconds"), 0)
    for line in logs[0].read_text().splitlines():
        if '"SparkListenerTaskEnd"' not in line:
            continue
        m = json.loads(line).get("Task Metrics") or {}
        sr, sw = m.get("Shuffle Read Metrics", {}), m.get("Shuffle Write Metrics", {})
        out["tasks"] += 1
        out["input_bytes"] += m.get("Input Metrics", {}).get("Bytes Read", 0)
        out["output_bytes"] += m.get("Output Metrics", {}).get("Bytes Written", 0)
        out["shuffle_read_bytes"] += sr.get("Remote Bytes Read", 0) + sr.get("Local Bytes Read", 0)
        out["shuffle_write_bytes"] += sw.get("Shuffle Bytes Written", 0)
        out["result_bytes"] += m.get("Result Size", 0)
        out["executor_cpu_seconds"] += m.get("Executor CPU Time", 0) / 1e9
        out["executor_run_seconds"] += m.get("Executor Run Time", 0) / 1e3
        out["gc_seconds"] += m.get("JVM GC Time", 0) / 1e3
    return out


# --- the jobs ----------------------------------------------------------------------------------------

def run_sampled(name: str, cmd: list[str], env: dict[str, str], log_path: Path, roots: dict[str, int]
                ) -> tuple[float, ClusterUsage]:
    """Run one job's command to its end with ``roots`` and its own tree sampled: wall seconds and usage."""
    with ClusterSampler(roots, corpus.SAMPLE_SECONDS) as sampler, open(log_path, "w") as f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        sampler.add_root("submit", proc.pid)
        try:
            code = proc.wait(timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        wall = time.perf_counter() - t
    if code:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"hepix {name} failed with exit code {code}; see {log_path}:\n{tail}")
    return wall, sampler.usage


def cluster_command(cluster, dist: Path, argv: list[str], webhdfs: str, events: Path
                    ) -> tuple[list[str], dict[str, str]]:
    """``spark-submit/standalone.sh`` on the one-core worker, its driver reaching HDFS over ``webhdfs``, its
    event log into ``events``."""
    from bench.checkout import launcher

    cmd, env = launcher().standalone_command(cluster, dist, [*argv, "--quiet"], cores=1, driver_memory="2g",
                                             event_log=events, extra_opts=tuple(conf_args(SPARK_CONF)))
    env["HEPIX_WEBHDFS"] = webhdfs
    return cmd, env


def owner_command(argv: list[str], webhdfs: str, conf: Path, events: Path) -> tuple[list[str], dict[str, str]]:
    """``hepix ARGV`` on the owner's machine: ``local[1]``, this checkout's code, its event log into ``events``."""
    settings = {**SPARK_CONF, **event_log_settings(events)}
    conf.write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
    env = dict(os.environ, HEPIX_WEBHDFS=webhdfs,
               PYTHONPATH=os.pathsep.join(filter(None, [str(corpus.REPO), os.environ.get("PYTHONPATH")])))
    return [sys.executable, "-m", "jobs.cli", *argv, "--master", "local[1]", "--conf", str(conf), "--quiet"], env


@dataclass
class Site:
    """Where the jobs run: the HDFS (:class:`bench.clusters.minidfs.MiniDFS`), the workers' client to it, the
    standalone cluster and its archives, the owner's key directory and scratch folder."""

    hdfs: object
    access: object
    cluster: object
    dist: Path
    keys: Path
    work: Path


def pipeline(site: Site) -> tuple[dict[str, ClusterCorpusRow], ClusterCorpusRow]:
    """encrypt -> process -> verify on the cluster, the copy, decrypt on the owner's side: each job's row."""
    base, access, webhdfs = site.hdfs.uri, site.access, site.hdfs.webhdfs
    enc, proc, dec, owner_map = f"{base}/enc", f"{base}/proc", f"{base}/dec", site.work / "enc.owner"
    daemons = {"worker": site.cluster.worker_daemons[0].proc.pid, "master": site.cluster.master.proc.pid,
               "hdfs": site.hdfs.proc.pid}
    steps = {"encrypt": (["encrypt", "--keys", f"{base}/cluster/keys", "--input", f"{base}/corpus", "--out", enc,
                          "--owner", str(owner_map), "--layout", LAYOUT, "--encryption", ENCRYPTION,
                          "--for-op", corpus.OP], enc, None),
             "process": (["process", "--keys", f"{base}/cluster/keys", "--input", enc, "--out", proc,
                          "--op", corpus.OP], proc, enc),
             "verify": (["verify", proc], proc, proc)}
    rows = {}
    for job, (argv, out, read) in steps.items():
        before = os.getloadavg()[0]
        cmd, env = cluster_command(site.cluster, site.dist, argv, webhdfs, site.work / "events" / job)
        wall, usage = run_sampled(job, cmd, env, site.work / f"{job}.log", daemons)
        site.cluster.clear_finished_apps()
        manifest = read_json(access, f"{out}/_manifest.json")
        if job == "verify":
            manifest = {"counts": manifest["counts"], "timings": {}}
        rows[job] = cluster_row(job, JobRun(manifest, wall, peaks_of(usage)), usage, implementation=CLUSTER,
                                input_bytes=table_bytes(access, f"{read}/ciphertexts") if read else None,
                                core=core_seconds(access, job, out) if job in corpus.WORK else None,
                                load_before=before)
        rows[job].task_metrics = json.dumps(task_metrics(site.work / "events" / job))
        if job == "process":
            copy = measured_copy(site, f"{enc}/ciphertexts", f"{base}/copy")
    before = os.getloadavg()[0]
    cmd, env = owner_command(["decrypt", "--keys", str(site.keys), "--input", proc, "--out", dec, "--owner",
                              str(owner_map), "--images", f"{base}/corpus"], webhdfs, site.work / "owner.conf",
                             site.work / "events" / "decrypt")
    wall, usage = run_sampled("decrypt", cmd, env, site.work / "decrypt.log", {"hdfs": site.hdfs.proc.pid})
    d = rows["decrypt"] = cluster_row("decrypt", JobRun(read_json(access, f"{dec}/_manifest.json"), wall,
                                                        peaks_of(usage)), usage, implementation=OWNER,
                                      input_bytes=table_bytes(access, f"{proc}/ciphertexts"),
                                      core=core_seconds(access, "decrypt", dec), load_before=before)
    d.task_metrics = json.dumps(task_metrics(site.work / "events" / "decrypt"))
    metrics = [dict(zip(("psnr", "exact_fraction", "max_abs_err"), v)) for v in zip(
        *(read_column(access, f"{dec}/metrics", c) for c in ("psnr", "exact_fraction", "max_abs_err")))]
    d.min_psnr = min(m["psnr"] for m in metrics)
    d.min_exact_fraction = min(m["exact_fraction"] for m in metrics)
    d.max_abs_err = max(m["max_abs_err"] for m in metrics)
    return rows, copy


def measured_copy(site: Site, src: str, dst: str) -> ClusterCorpusRow:
    """:func:`pyarrow_copy` with this process's CPU and HDFS's sampled; the copy deleted after."""
    before = time.process_time()
    with ClusterSampler({"hdfs": site.hdfs.proc.pid}, corpus.SAMPLE_SECONDS) as sampler:
        seconds, nbytes, files = pyarrow_copy(site.access, src, dst)
    cpu = time.process_time() - before
    fs, path = site.access.open(dst)
    fs.delete_dir(path)
    return copy_row(seconds, nbytes, files, cpu, sampler.usage.roles["hdfs_jvm"].cpu)


# --- the suite -------------------------------------------------------------------------------------

def run_corpus_cluster(work: Path, *, images: int, preset_name: str, width: int = corpus.WIDTH,
                       height: int = corpus.HEIGHT) -> tuple[str, list[ClusterCorpusRow]]:
    """The baseline on one core, then HDFS and the one-worker cluster up and the pipeline on them: the
    rows, and what the corpus is."""
    from bench.checkout import checkout_module, launcher
    from hecore.seal.keys import export_public, keygen
    from hecore.seal.params import preset
    from jobs.runtime.remote import hdfs_user
    from tasks.filesystem import FileAccess

    keys, public = work / "keys", work / "public"
    keygen(preset(preset_name), keys, rotations=False)       # brightness needs no rotation keys
    export_public(keys, public)
    dataset, folder = corpus.corpus_images(images, work / "images", width, height)
    core = corpus.baseline_one_core(sorted(folder.iterdir()), keys, LAYOUT, ENCRYPTION)
    sc = launcher()
    dist = sc.cluster_dist(work / "dist")
    env = sc.node_env(dist / "hepix-env.tar.gz")
    (work / "hdfs").mkdir()
    hdfs = checkout_module("minidfs").MiniDFS(work / "hdfs")
    try:
        access = FileAccess(webhdfs=hdfs.webhdfs, user=hdfs_user())
        fs, _ = access.open(f"{hdfs.uri}/")
        upload(fs, folder, "/corpus")
        upload(fs, public, "/cluster/keys")              # the cluster's: public-only
        scratch = Path(tempfile.mkdtemp(prefix="hepix-corpus-cluster-", dir=sc.scratch_parent(work, 4 * sc.GIB)))
        with sc.StandaloneCluster(work / "cluster", workers=1, scratch=scratch, node_env=env.path) as cluster:
            jobs, copy = pipeline(Site(hdfs, access, cluster, dist, keys, work))
    finally:
        hdfs.stop()
    return dataset, limits(core, jobs, copy, install_row(env.seconds, env.unpacked))


def run(args) -> int:
    """``hepix bench --suite cluster --hdfs``: measure, write ``OUT/bench_corpus_cluster/<run_id>.parquet``,
    print."""
    from bench.checkout import checkout_module, launcher
    from bench.rows import write_rows
    from bench.schemas import BENCH_CORPUS_CLUSTER
    from jobs.runtime import runinfo

    if args.repeats is not None:
        raise SystemExit(f"hepix bench: --repeats {args.repeats}: the cluster suite's --hdfs mode runs each job "
                         "once; leave --repeats out")
    if not launcher().java_available():
        raise SystemExit("hepix bench: the cluster suite needs Java (a JRE on the PATH or JAVA_HOME) for the "
                         "Spark master, the worker and HDFS")
    why = checkout_module("minidfs").unavailable()
    if why:
        raise SystemExit(f"hepix bench: the cluster suite's --hdfs mode starts a MiniDFSCluster: {why}")
    images = args.images if args.images is not None else (QUICK_IMAGES if args.quick else DEFAULT_IMAGES)
    if images < 1:
        raise SystemExit(f"hepix bench: --images {images}: give at least 1")
    preset_name = args.preset or corpus.DEFAULT_PRESET
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: corpus on HDFS, encrypt -> process {corpus.OP} -> verify on a standalone "
          f"cluster of one one-core worker, decrypt on local[1]; {images} images, {preset_name}, load average "
          f"{os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="hepix-bench-corpus-cluster-") as tmp:
        dataset, rows = run_corpus_cluster(Path(tmp), images=images, preset_name=preset_name)
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(),
              "cores_available": runinfo.cores(), "git_commit": runinfo.git_commit(), "preset": preset_name,
              "dataset": dataset, "op": corpus.OP, "load_1m": corpus.load_1m()}
    path = write_rows(rows, BENCH_CORPUS_CLUSTER, Path(args.out) / "bench_corpus_cluster", run_id, common)
    print(report(rows, dataset, preset_name))
    print(f"\nwrote {path}")
    return 0
