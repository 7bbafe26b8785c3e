"""The Spark task a Python worker is running: what the worker side (:mod:`tasks`, which never imports
pyspark) is handed to name its files by the task that writes them (:func:`tasks.files.rows_to_file`)."""
from __future__ import annotations


def task_attempt() -> tuple[int, int]:
    """The partition and attempt numbers of the Spark task this Python worker is running."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.partitionId(), tc.attemptNumber()
