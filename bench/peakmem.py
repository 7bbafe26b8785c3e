"""Peak resident memory of a stage: this process, and the processes it started.

Linux only (``/proc``), no extra dependency.  The driver's peak is the
kernel's own high-water mark (``VmHWM``), reset at the start of each stage by
writing ``5`` to ``/proc/self/clear_refs``; where that is refused, the peak
since the process started is reported and the stage says so
(``driver_reset=False``).  The peak of child processes (a Spark JVM and its
Python workers) is sampled every ``interval`` seconds, so a spike shorter
than that can be missed: it is a lower bound.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def _status_kb(pid: int | str, key: str) -> int | None:
    try:
        with open(PROC / str(pid) / "status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes(pid: int | str = "self") -> int | None:
    kb = _status_kb(pid, "VmRSS")
    return None if kb is None else kb * 1024


def peak_rss_bytes() -> int | None:
    """This process's resident high-water mark (since start or since :func:`reset_peak`)."""
    kb = _status_kb("self", "VmHWM")
    return None if kb is None else kb * 1024


def reset_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS; False where the kernel refuses."""
    try:
        with open(PROC / "self" / "clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in PROC.iterdir():
        if not d.name.isdigit():
            continue
        try:
            with open(d / "stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
    return kids


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (default: this one)."""
    pid = os.getpid() if pid is None else pid
    kids, out, todo = _children(), [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (arguments joined by spaces); empty when it is gone."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class StagePeak:
    """Peaks of one stage, in bytes: ``driver`` (this process, plus a JVM it started), ``workers``
    (other descendants together, e.g. PySpark's Python workers; None when there were none)."""

    stage: str
    driver: int | None = None
    workers: int | None = None
    driver_reset: bool = True


class PeakMeter:
    """``with meter.stage("encrypt"): ...`` records a :class:`StagePeak` per stage name.

    ``children=True`` also samples the descendants every ``interval`` seconds: a JVM
    child (Spark's driver in local mode) counts toward the driver, every other
    descendant toward the workers (their RSS summed at each sample).
    """

    def __init__(self, *, children: bool = False, interval: float = 0.05):
        self.children = children
        self.interval = interval
        self.stages: dict[str, StagePeak] = {}

    def stage(self, name: str):
        return _Stage(self, name)

    def as_columns(self) -> dict:
        """``driver_peak_rss_<stage>`` and ``workers_peak_rss_<stage>`` for every recorded stage."""
        out = {}
        for name, p in self.stages.items():
            out[f"driver_peak_rss_{name}"] = p.driver
            out[f"workers_peak_rss_{name}"] = p.workers
        return out


class _Stage:
    def __init__(self, meter: PeakMeter, name: str):
        self.meter, self.name = meter, name
        self._stop = threading.Event()
        self._jvm = 0
        self._workers = 0
        self._seen_workers = False

    def _sample(self) -> None:
        jvm = workers = 0
        seen = False
        for pid in descendants():
            rss = rss_bytes(pid) or 0
            if "java" in cmdline(pid).split(" ", 1)[0]:
                jvm += rss
            else:
                workers += rss
                seen = True
        self._jvm = max(self._jvm, jvm)
        self._workers = max(self._workers, workers)
        self._seen_workers = self._seen_workers or seen

    def _loop(self) -> None:
        while not self._stop.wait(self.meter.interval):
            self._sample()

    def __enter__(self):
        self._reset = reset_peak()
        if self.meter.children:
            self._sample()
            self._thread = threading.Thread(target=self._loop, name=f"peakmem-{self.name}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        driver = peak_rss_bytes()
        if self.meter.children:
            self._stop.set()
            self._thread.join()
            self._sample()
        if driver is not None:
            driver += self._jvm
        self.meter.stages[self.name] = StagePeak(
            self.name, driver, self._workers if self._seen_workers else None, self._reset)
        return False
