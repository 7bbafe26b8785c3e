"""Spark's Python daemon, with the code hepix's tasks run imported before it forks the workers.

In local mode Spark starts one daemon process per session (``pyspark.daemon``) and forks the Python
workers from it; each worker imports what its first task runs -- NumPy, pyarrow, Pyfhel, :mod:`hecore`,
:mod:`tasks` -- about 0.6 s of a core, and a session starts two workers or more.  This daemon imports them
once, before it forks, so every worker starts with them.  ``jobs.runtime.session`` names it in
``spark.python.daemon.module`` for the sessions it starts on a local master; on a cluster, the executors
keep Spark's own daemon.

An import that fails here is left for the workers to meet again and report as the task's error.
"""
from __future__ import annotations

import importlib

#: The worker's entry point, then the modules whose functions the jobs hand to Spark.
PRELOAD = ("pyspark.worker", "tasks.checksums", "tasks.contactsheet", "tasks.decode", "tasks.decrypt",
           "tasks.encrypt", "tasks.files", "tasks.metrics", "tasks.process", "tasks.rowchecks", "tasks.splits")


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:       # noqa: BLE001 -- the worker that needs it raises it where Spark reports it
            pass


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
