"""Spark's Python daemon, with the code hepix's tasks run imported before it forks the workers.

In local mode Spark starts one daemon process per session (``pyspark.daemon``) and forks the Python
workers from it; each worker imports what its first task runs -- NumPy, pyarrow, Pyfhel, :mod:`hecore`,
:mod:`tasks` -- about 0.6 s of a core, and a session starts two workers or more.  This daemon imports them
once, before it forks, so every worker starts with them.  ``jobs.runtime.session`` names it in
``spark.python.daemon.module`` for the sessions it starts on a local master; on a cluster, the executors
keep Spark's own daemon.

An import that fails here is left for the workers to meet again and report as the task's error.

Besides the tasks' own modules, the daemon imports what workers otherwise import on their first task:
pandas (PySpark's Arrow serializer imports it in every worker that returns batches: 0.3 s of a core each),
the byte-level kernels with numba's compiler set up (0.5-1 s in each worker of the pixel layout and the
caching strategies) and scikit-image's SSIM (decrypt's metrics).  Measured with py-spy over
tests/test_pipeline.py: the workers' imports 2,084 -> 193 samples and the daemons' 340 -> 1,458 (a daemon
serves two workers or more), the collections after each task 668 -> 23 samples (those modules' objects are
frozen with the rest, below); all Python processes together 5,432 -> 4,333 samples.

In a process of many sessions (``HEPIX_KEEP_SESSION=1``: the tests, a notebook) only the first session's
daemon imports: the next ones are forked from a warm copy of it (:mod:`jobs.runtime.forkserver`).

What these imports made is then frozen (``gc.freeze``, meant for a process that forks): a reused worker
runs ``gc.collect()`` after every task, and that full collection no longer walks the 50,000-odd objects
of the modules, only what the worker made itself.  Measured with py-spy over six warm ``hepix process``
runs: the workers' collections 3.2 -> 1.3 s of a core.  The objects were alive for the worker's whole
life anyway; freezing also keeps the collector from writing to the pages the workers share with the
daemon.

Spark puts its own ``pyspark.zip`` and py4j's source zip first on the workers' path.  They hold sources
only, so every daemon compiled pyspark's modules afresh: 1.6 s of a core for the imports below instead
of 0.6 s.  When those zips are the ones inside the pyspark package this interpreter has installed --
the same files, whose compiled modules sit beside them -- :func:`prefer_installed_pyspark` moves them to
the end of the path, so that the installed package, compiled once, is what the daemon and its workers
import.  Zips from anywhere else (a cluster's Spark) are left where they are.  Moved there, they still cost
every worker: PySpark's worker calls ``importlib.invalidate_caches()`` when it puts the application's files
directory on its path, and a zip's importer answers that by reading its archive's whole directory again --
Spark's core jar too, which Spark also puts on the path and which holds no Python (6,000 entries: 60-100 ms of
a core in every new worker).  Measured with py-spy over ``make test``: 120 s of the local workers' CPU in those
re-reads.  So the daemon drops those zips and the installed pyspark's jars from the path, and their importers
with them (:func:`forget_entries`): the installed package holds the same modules.
"""
from __future__ import annotations

import gc
import importlib
import os
import sys

#: The worker's entry point, then the modules whose functions the jobs hand to Spark.
PRELOAD = ("pyspark.worker", "tasks.checksums", "tasks.contactsheet", "tasks.decode", "tasks.decrypt",
           "tasks.distances", "tasks.encrypt", "tasks.exchange", "tasks.files", "tasks.handoff",
           "tasks.imagedecrypt", "tasks.imagesplits", "tasks.infer", "tasks.match", "tasks.metrics",
           "tasks.originals", "tasks.process", "tasks.rowchecks", "tasks.splits", "tasks.summaries",
           # imported by every worker that writes Arrow batches back (PySpark's serializer asks for it)
           "pandas",
           # what some workers import when their first task needs it: the byte-level ops (numba's kernels) and
           # the quality metrics' SSIM (scikit-image, SciPy)
           "hecore.ops.pixel", "skimage.metrics._structural_similarity",
           # and what py-spy over `make test` still found the workers importing on their first task: Parquet and
           # the file systems (reading splits, writing tables), the layouts, the row checks, the stored formats,
           # the tables and the integrity checks, and the image formats Pillow opens first (its preinit)
           "pyarrow.parquet", "pyarrow.fs", "pyarrow.pandas_compat", "hecore.layouts.tiling",
           "hecore.layouts.packed", "hecore.seal.checks", "hecore.seal.atrest", "hecore.integrity",
           "hecore.ops.lut", "tasks.hops", "PIL.BmpImagePlugin", "PIL.GifImagePlugin", "PIL.JpegImagePlugin",
           "PIL.PpmImagePlugin", "PIL.PngImagePlugin")


def _package_dir(name: str, entries: list[str]) -> str | None:
    """The directory of package ``name`` under the first of ``entries`` (directories, not zips) that has it."""
    for entry in entries:
        if entry and os.path.isfile(os.path.join(entry, name, "__init__.py")):
            return os.path.realpath(os.path.join(entry, name))
    return None


def prefer_installed_pyspark() -> list[str]:
    """Move the zips of ``<installed pyspark>/python/lib/`` behind the installed packages on ``sys.path``
    (py4j's only when py4j is installed too); return the entries moved."""
    directories = [e for e in sys.path if e and os.path.isdir(e)]
    installed = _package_dir("pyspark", directories)
    if installed is None:
        return []
    own = os.path.join(installed, "python", "lib") + os.sep
    py4j_installed = _package_dir("py4j", directories) is not None
    moved = [e for e in sys.path if e.endswith(".zip") and os.path.realpath(e).startswith(own)
             and (py4j_installed or "py4j" not in os.path.basename(e))]
    sys.path[:] = [e for e in sys.path if e not in moved] + moved
    return moved


def installed_spark_jars() -> list[str]:
    """The entries of ``sys.path`` that are jars of the installed pyspark (``<installed pyspark>/jars/``): Spark
    puts its core jar on the workers' path, and it holds Java classes only."""
    installed = _package_dir("pyspark", [e for e in sys.path if e and os.path.isdir(e)])
    if installed is None:
        return []
    own = os.path.join(installed, "jars") + os.sep
    return [e for e in sys.path if e.endswith(".jar") and os.path.realpath(e).startswith(own)]


def forget_entries(entries: list[str]) -> None:
    """Take ``entries`` off ``sys.path`` and drop their importers, so that no import searches them and
    ``importlib.invalidate_caches()`` has nothing of theirs to read again."""
    gone = set(entries)
    sys.path[:] = [e for e in sys.path if e not in gone]
    for entry in list(sys.path_importer_cache):     # the entries', and those of folders inside them
        if entry in gone or any(entry.startswith(g + os.sep) for g in gone):
            del sys.path_importer_cache[entry]


def forget_installed_archives() -> list[str]:
    """The installed pyspark's own zips and jars off ``sys.path``, their importers dropped (what the daemon and
    spark-submit's driver, ``spark-submit/hepix_main.py``, do first); return the entries forgotten."""
    entries = prefer_installed_pyspark() + installed_spark_jars()
    forget_entries(entries)
    return entries


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:       # noqa: BLE001 -- the worker that needs it raises it where Spark reports it
            pass
    try:
        from hecore.seal.kernels import warm_up

        warm_up()               # numba's compiler set up and the kernels loaded from its cache, once
    except Exception:           # noqa: BLE001 -- as above
        pass


if __name__ == "__main__":
    forget_installed_archives()
    from jobs.runtime import forkserver

    if not forkserver.handed_over():        # a warm copy of this process's first daemon forked the daemon
        preload()
        from pyspark import daemon

        gc.freeze()
        forkserver.start_beside()           # the first daemon of a process that asked for one: the copy
        daemon.manager()
