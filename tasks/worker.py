"""What every Python worker keeps between tasks, and the failure-injection switch of the tests.

Expensive worker state (an HE context, an encryptor and its cache, an evaluator with its keys) is built
from broadcast bytes once per Python worker and kept in a module-level cache keyed by the broadcast's
token -- not once per task.  A worker can outlive its job (a session kept for the next job of the same
process): the cache holds the states of the last few tokens only.  A job can have its workers build their
states before its tasks come (:func:`warm_partition`, jobs/runtime/warmup.py).
"""
from __future__ import annotations

import os
from typing import Callable

#: token -> state built from a broadcast, least recently used first.
_WORKER_CACHE: dict[str, object] = {}
#: States kept: more than one job's stages use at once (row checks, the work, a model).
CACHED_STATES = 8


def worker_state(token: str, broadcast, build: Callable[[object], object], rebuilds=None):
    """The state for ``token``, built from ``broadcast.value`` the first time this worker needs it."""
    state = _WORKER_CACHE.pop(token, None)
    if state is None:
        state = build(broadcast.value)
        if rebuilds is not None:
            rebuilds.add([(os.getpid(), token)])
    _WORKER_CACHE[token] = state                    # the most recently used last
    while len(_WORKER_CACHE) > CACHED_STATES:
        del _WORKER_CACHE[next(iter(_WORKER_CACHE))]
    return state


class ListAccumulator:
    """Accumulates lists by concatenation: what the workers report to the driver (pids, cache rebuilds).
    Spark's ``AccumulatorParam`` in all but the name (``zero`` and ``addInPlace`` are all an accumulator
    calls), so that this package needs no pyspark; it lives here, beside the workers' state, because every
    worker that adds to an accumulator unpickles it -- from :mod:`jobs`, it imported the driver's modules."""

    def zero(self, value):
        return []

    def addInPlace(self, a, b):
        a.extend(b)
        return a


#: ``KIND:DIR`` -- make ONE task of the job fail: ``raise`` an exception before the task's first
#: output, or ``kill`` its Python worker with SIGKILL after the first output (a half-written
#: file).  ``DIR`` (shared by all workers, so local and local-cluster masters only) receives a
#: marker file that makes it happen once.  Set it through Spark (``spark.executorEnv.``) so it
#: reaches the Python workers; tests only.
FAULT_ENV = "HEPIX_TEST_FAULT"


def inject_fault(stage: str, *, before_output: bool) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    kind, _, directory = spec.partition(":")
    if (kind == "raise") != before_output or kind not in ("raise", "kill"):
        return
    try:
        fd = os.open(os.path.join(directory, f"{stage}-{kind}.once"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return                      # already happened in this job
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    if kind == "raise":
        raise RuntimeError(f"{FAULT_ENV}: injected failure in a {stage} task (once)")
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


# --- failures of the work on one row ------------------------------------------------------------------
#: The rows the job's work failed on in the running checking pass (tasks.rowchecks collects them as
#: rejects rows); None when no such pass runs.
_failures: list | None = None


def work_failed(row: dict, error: BaseException) -> bool:
    """Record that the work failed on ``row`` (its key, and the error's first line) for the checking pass
    around it; False when there is none (the caller then raises)."""
    if _failures is None:
        return False
    key = tuple(row.get(k) for k in ("image_id", "channel", "tile_y", "tile_x", "index"))
    _failures.append((key, f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"))
    return True


def collect_failures(into: list | None) -> None:
    """Start (a list) or stop (None) collecting :func:`work_failed`'s records in this worker."""
    global _failures
    _failures = into


# --- warming up -----------------------------------------------------------------------------------------

def warm_partition(batches, *, states, rebuilds=None):
    """Build the worker states ``states`` (``(token, broadcast, build)`` each, as the job's tasks will ask
    :func:`worker_state` for them) in this Python worker, before the job's tasks come: one row (the pid)
    per task.  What fails here is left for the job's own tasks to meet and report."""
    import pyarrow as pa

    for _ in batches:
        pass
    for token, broadcast, build in states:
        try:
            worker_state(token, broadcast, build, rebuilds)
        except Exception:  # noqa: BLE001 -- the job's task that needs the state raises it where Spark reports it
            break
    yield pa.RecordBatch.from_pydict({"pid": pa.array([os.getpid()], pa.int64())})
