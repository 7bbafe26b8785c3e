"""CPU time and peak memory by role of the processes a job uses on a Spark standalone cluster (Linux only).

On ``local[N]`` a job is one process tree (:class:`bench.proctree.TreeSampler`).  On a standalone
cluster it spans several: the submitting side (``spark-submit``'s shell, the driver JVM and the driver's
Python), the worker daemon (its JVM, the executor JVM it starts for the application, the executor's
Python workers), the master, and the storage (HDFS's name and data node).  :class:`ClusterSampler`
samples every such tree every ``interval`` seconds and keeps, per role (:data:`ROLES`):

* CPU seconds (``utime + stime``) spent while it sampled: a process already alive at the first sample
  (the daemons) counts from that sample on, one started later counts whole; a process's CPU after its
  last sample is missed (a lower bound, as in ``TreeSampler``);
* the CPU seconds spent before the first Python worker appeared -- the application's start-up (the
  driver's session, the executor's launch and the unpacking of the packed environment), apart from the
  work;
* the largest single process's peak resident memory (``VmHWM``: a daemon's is over its whole life), the
  largest sum over the role's processes at one sample, and how many processes it had.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from bench.peakmem import cmdline, descendants
from bench.proctree import cpu_seconds, proc_status

#: The roles, in the order reports show them.  The JVMs of Spark: :data:`SPARK_JVMS`.
ROLES = ("driver_python", "driver_jvm", "executor_jvm", "worker_daemon_jvm", "master_jvm", "worker_python",
         "hdfs_jvm", "other")
SPARK_JVMS = ("driver_jvm", "executor_jvm", "worker_daemon_jvm", "master_jvm")
#: What each root of a sampled tree is: the submitting side of a job, a worker daemon, the master, HDFS.
TREES = ("submit", "worker", "master", "hdfs")
#: A Python process running one of these modules is a PySpark worker (the daemon forks them): anything
#: else in Python is the job's driver.
WORKER_MODULES = ("pyspark.daemon", "pyspark.worker")


def classify(tree: str, is_root: bool, command: str) -> str:
    """The role of a process with this command line, in the tree of kind ``tree`` (:data:`TREES`), by the
    program it runs (``argv[0]``) and, for Python, by whether it runs a PySpark worker module."""
    program = os.path.basename(command.split(" ", 1)[0])
    if program.startswith("python"):
        return "worker_python" if any(m in command for m in WORKER_MODULES) else "driver_python"
    if not program.startswith("java"):
        return "other"
    if tree == "submit":
        return "driver_jvm"
    if tree == "worker":
        return "worker_daemon_jvm" if is_root else "executor_jvm"
    return "master_jvm" if tree == "master" else "hdfs_jvm"


@dataclass
class RoleUsage:
    """One role's processes over a sampled run."""

    cpu: float = 0.0                # CPU seconds while sampled
    startup_cpu: float = 0.0        # ... of which before the first Python worker appeared
    peak_mb: float = 0.0            # the largest single process's VmHWM
    together_mb: float = 0.0        # the largest sum of the role's RSS at one sample
    processes: int = 0


@dataclass
class _Seen:
    role: str
    first_cpu: float                # the CPU at the first sample (0 for a process started while sampling)
    last_cpu: float
    hwm_mb: float


@dataclass
class ClusterUsage:
    """:class:`RoleUsage` by role (every role of :data:`ROLES` present), and the sampling's own facts."""

    roles: dict[str, RoleUsage] = field(default_factory=lambda: {r: RoleUsage() for r in ROLES})
    samples: int = 0
    worker_seen: bool = False

    def spark_jvm_cpu(self) -> float:
        return sum(self.roles[r].cpu for r in SPARK_JVMS)

    def spark_jvm_startup_cpu(self) -> float:
        return sum(self.roles[r].startup_cpu for r in SPARK_JVMS)


class ClusterSampler:
    """``with ClusterSampler({"submit": pid, "worker": pid, ...}): ...`` samples those trees (keys from
    :data:`TREES`) every ``interval`` seconds in a thread; :attr:`usage` holds the result after the block.
    ``add_root`` adds a tree started inside the block (the job's own submitting process)."""

    def __init__(self, roots: dict[str, int], interval: float = 0.2):
        unknown = set(roots) - set(TREES)
        if unknown:
            raise ValueError(f"unknown process trees {sorted(unknown)}: give some of {', '.join(TREES)}")
        self.roots = {pid: tree for tree, pid in roots.items()}
        self.interval = interval
        self.usage = ClusterUsage()
        self._seen: dict[int, _Seen] = {}
        self._startup: dict[str, float] | None = None
        self._first = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add_root(self, tree: str, pid: int) -> None:
        with self._lock:
            self.roots[pid] = tree

    def _cpu_by_role(self) -> dict[str, float]:
        out = dict.fromkeys(ROLES, 0.0)
        for s in self._seen.values():
            out[s.role] += s.last_cpu - s.first_cpu
        return out

    def sample(self) -> None:
        with self._lock:
            roots = dict(self.roots)
        together = dict.fromkeys(ROLES, 0.0)
        for root, tree in roots.items():
            for pid in [root] + descendants(root):
                st, cpu = proc_status(pid), cpu_seconds(pid)
                if "VmHWM" not in st or cpu is None:
                    continue
                seen = self._seen.get(pid)
                if seen is None or seen.role == "other":      # a shell that exec'd a JVM is the JVM now
                    r = classify(tree, pid == root, cmdline(pid))
                    seen = self._seen[pid] = _Seen(r, cpu if self._first else 0.0, cpu, 0.0) \
                        if seen is None else _Seen(r, seen.first_cpu, cpu, seen.hwm_mb)
                seen.last_cpu, seen.hwm_mb = cpu, max(seen.hwm_mb, st["VmHWM"] / 1024)
                together[seen.role] += st.get("VmRSS", 0) / 1024
        self._first = False
        for r, mb in together.items():
            self.usage.roles[r].together_mb = max(self.usage.roles[r].together_mb, mb)
        if self._startup is None and any(s.role == "worker_python" for s in self._seen.values()):
            self._startup = self._cpu_by_role()
            self.usage.worker_seen = True
        self.usage.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self.sample()                       # the daemons' CPU so far, before the block starts anything
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.finish()
        return False

    def finish(self) -> ClusterUsage:
        """A last sample, and :attr:`usage` summed up from every process seen."""
        self.sample()
        cpu = self._cpu_by_role()
        startup = self._startup or cpu       # no Python worker ever: all of it was start-up
        for r, u in self.usage.roles.items():
            u.cpu, u.startup_cpu = cpu[r], startup[r]
        for s in self._seen.values():
            u = self.usage.roles[s.role]
            u.peak_mb = max(u.peak_mb, s.hwm_mb)
            u.processes += 1
        return self.usage
