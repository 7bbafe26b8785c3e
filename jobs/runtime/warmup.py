"""The Python workers started, and their state built, while the driver still plans the job.

A job's first task waits for its Python worker: Spark starts the daemon and forks a worker per core, which
imports what the tasks run (jobs/runtime/pydaemon.py), then each worker reads the broadcast keys and builds
its state from them -- a SEAL context, an evaluator with its evaluation keys, a decryptor --, seconds in
all.  Meanwhile the driver checks the input's footers and plans the tasks, with the cores idle.

:func:`warm_up` overlaps the two: before the driver's checks, it submits (asynchronously, in the JVM) a
Spark job of one task per core that builds the states the job's tasks will ask for
(:func:`tasks.worker.warm_partition`: the same tokens, the same broadcasts), then, from a thread of its
own, anything else the job wants run on the warm workers before its own tasks (:meth:`WarmUp.then`: a
small job of its own, such as decrypt's index of the originals).  The job's own tasks, submitted once the
driver has planned them, queue behind these and find the states built.  A warm-up that fails costs nothing
but its time: the job's tasks build what they need themselves and report what fails.
"""
from __future__ import annotations

import functools
import logging
import threading
import time

log = logging.getLogger(__name__)


class WarmUp:
    """A warm-up submitted (:func:`warm_up`); :meth:`then` runs a Spark action after it, :meth:`result`
    waits for that."""

    def __init__(self, spark, future, started: float):
        self._spark, self._future, self._started = spark, future, started
        self._thread: threading.Thread | None = None
        self._result: tuple = (None, None)            # (value, exception) of the action of :meth:`then`

    def _wait_for_workers(self) -> None:
        if self._future is not None:
            try:
                self._future.get()
                log.debug("the workers are warm (%.2f s)", time.perf_counter() - self._started)
            except Exception as e:  # noqa: BLE001 -- the job's own tasks meet and report what fails here
                log.debug("the warm-up failed: %s", e)
            self._future = None

    def then(self, action) -> WarmUp:
        """Run ``action`` (a Spark action on a plan the caller's thread made) in a thread of its own once the
        workers are warm, its value (or what it raised) kept for :meth:`result`."""
        from pyspark import InheritableThread

        spark = self._spark

        def run() -> None:
            # this thread's JVM side has no active session of its own: the job's, for the action's plan
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            self._wait_for_workers()
            try:
                self._result = (action(), None)
            except BaseException as e:  # noqa: BLE001 -- raised again where the job asks for the value
                self._result = (None, e)

        self._thread = InheritableThread(target=run, name="hepix-warm-up", daemon=True)
        self._thread.start()
        return self

    def result(self):
        """Wait for the action of :meth:`then`: its value, or what it raised, raised here."""
        self.wait()
        value, error = self._result
        if error is not None:
            raise error
        return value

    def wait(self) -> None:
        """Wait for the warm-up (and the action of :meth:`then`)."""
        if self._thread is not None:
            self._thread.join()
        else:
            self._wait_for_workers()


def warm_up(spark, states: list[tuple], *, rebuilds=None) -> WarmUp:
    """Start the Python workers and build ``states`` (``(token, broadcast, build)``, as the job's tasks ask
    :func:`tasks.worker.worker_state`) in each, one task per core: a job submitted (by the JVM, asynchronously)
    before this returns, so that it runs before any job the driver submits after it."""
    from tasks.worker import warm_partition

    started = time.perf_counter()
    n = max(1, spark.sparkContext.defaultParallelism)
    fn = functools.partial(warm_partition, states=list(states), rebuilds=rebuilds)
    future = None
    if states:
        try:
            future = spark.range(0, n, 1, n).mapInArrow(fn, "pid long")._jdf.javaRDD().countAsync()
            log.debug("the warm-up was submitted (%.2f s)", time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 -- the job's own tasks meet and report what fails here
            log.debug("the warm-up was not submitted: %s", e)
    return WarmUp(spark, future, started)
