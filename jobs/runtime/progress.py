"""Progress of long Spark jobs on stderr, from Spark's status tracker."""
from __future__ import annotations

import sys
import threading
import time


class Progress:
    """A background thread that prints the running stages' task counts every ``interval`` seconds.

    Prints only when something changed, and nothing when stderr is not wanted
    (``enabled=False``).  Use as a context manager around the Spark actions.
    """

    def __init__(self, spark, label: str, interval: float = 5.0, enabled: bool = True, stream=None):
        self._tracker = spark.sparkContext.statusTracker()
        self._label = label
        self._interval = interval
        self._enabled = enabled
        self._stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hepix-progress", daemon=True)
        self._last = ""
        self._stage = ""
        self._t0 = time.monotonic()

    def stage(self, name: str) -> None:
        """Name what the job is doing now (printed with the next report)."""
        self._stage = name
        if self._enabled:
            print(f"[{self._label}] {name} ...", file=self._stream, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            parts = []
            for sid in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(sid)
                if info is None:
                    continue
                parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                             + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else ""))
            line = "; ".join(parts)
            if line and line != self._last:
                elapsed = time.monotonic() - self._t0
                print(f"[{self._label}] {elapsed:6.0f}s {self._stage}: {line}", file=self._stream, flush=True)
                self._last = line

    def __enter__(self):
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._interval + 1)
        return False
