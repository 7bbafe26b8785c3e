"""Peak memory and CPU time of a process tree, by role, sampled from ``/proc`` (Linux only).

A ``hepix`` job run as a child process is a tree: the job's Python driver (the root), the Spark JVM
(in local mode both the driver and the executor; spark-submit's shell becomes it by ``exec``), and
PySpark's Python workers.  :class:`TreeSampler` samples that tree every ``interval`` seconds in a
thread and records, per role:

* the peak resident memory: each process's ``VmHWM`` (the kernel's high-water mark of its resident
  set), so a short spike between samples is not missed while the process lives;
* the CPU time: ``utime + stime`` of ``/proc/PID/stat``, the last value seen per pid, summed per role.
  The CPU a process uses after its last sample (a worker that ends between two samples) is missed,
  so the figure is a lower bound that gets closer as ``interval`` gets shorter (0.2 s is a fair
  trade against the sampler's own cost).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from bench.peakmem import cmdline, descendants

#: The roles of a job's processes.
ROLES = ("driver_python", "driver_jvm", "worker_python", "other")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_status(pid: int) -> dict[str, int]:
    """``VmHWM`` and ``VmRSS`` (kB) of ``pid``; empty when it is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0])
    except (OSError, ValueError):
        pass
    return out


def cpu_seconds(pid: int) -> float | None:
    """``utime + stime`` of ``pid`` in seconds (its own threads, not its reaped children); None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS     # fields 14 and 15 of proc(5)
    except (OSError, ValueError, IndexError):
        return None


def role(pid: int, root: int) -> str:
    """What ``pid`` is in the tree of the job whose Python driver is ``root``, by the program it runs
    (``argv[0]``), not by words in its arguments: spark-submit's shell names ``pyspark`` in its script's
    path before it becomes the JVM."""
    if pid == root:
        return "driver_python"
    program = os.path.basename(cmdline(pid).split(" ", 1)[0])
    if program.startswith("java"):
        return "driver_jvm"
    if program.startswith("python"):
        return "worker_python"
    return "other"


@dataclass
class MemoryPeaks:
    """Peak resident memory (MB) and CPU seconds by role, from the sampled process tree."""

    driver_python_mb: float = 0.0
    driver_jvm_mb: float = 0.0
    worker_python_max_mb: float = 0.0      # the largest single Python worker
    workers_together_mb: float = 0.0       # the largest sum over the workers alive at one sample
    worker_processes: int = 0
    samples: int = 0
    driver_python_cpu: float = 0.0         # CPU seconds (utime + stime) of each role's processes
    driver_jvm_cpu: float = 0.0
    worker_python_cpu: float = 0.0
    other_cpu: float = 0.0
    per_pid: dict = field(default_factory=dict)    # pid -> (role, peak MB, last CPU seconds)


class TreeSampler:
    """``with TreeSampler(pid): ...`` samples the tree under ``pid`` every ``interval`` seconds in a thread;
    :attr:`peaks` holds the peaks and CPU seconds by role after the block."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval = pid, interval
        self.peaks = MemoryPeaks()
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _role(self, pid: int) -> str:
        r = self._roles.get(pid)
        if r is None or r == "other":
            # Not cached until it is known: spark-submit's shell becomes the driver JVM by exec (same pid),
            # after a short launcher JVM of its own; a pid first seen as the shell is the JVM later.
            r = self._roles[pid] = role(pid, self.pid)
        return r

    def sample(self) -> None:
        together = 0.0
        for pid in [self.pid] + descendants(self.pid):
            st = proc_status(pid)
            cpu = cpu_seconds(pid)
            if "VmHWM" not in st or cpu is None:
                continue
            r = self._role(pid)
            _, hwm, _ = self.peaks.per_pid.get(pid, (r, 0.0, 0.0))
            self.peaks.per_pid[pid] = (r, max(hwm, st["VmHWM"] / 1024), cpu)
            if r == "worker_python":
                together += st.get("VmRSS", 0) / 1024
        self.peaks.workers_together_mb = max(self.peaks.workers_together_mb, together)
        self.peaks.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        p = self.peaks
        for r, hwm, cpu in p.per_pid.values():
            setattr(p, f"{r}_cpu", getattr(p, f"{r}_cpu") + cpu)
            if r == "driver_python":
                p.driver_python_mb = max(p.driver_python_mb, hwm)
            elif r == "driver_jvm":
                p.driver_jvm_mb = max(p.driver_jvm_mb, hwm)
            elif r == "worker_python":
                p.worker_python_max_mb = max(p.worker_python_max_mb, hwm)
                p.worker_processes += 1
        return False
