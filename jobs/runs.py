"""Arguments and helpers shared by the Spark jobs."""
from __future__ import annotations

from pathlib import Path

from pyspark.accumulators import AccumulatorParam

from hecore.errors import HepixError, KeyDirectoryError
from hecore.keys import SECRET, check_fingerprint
from schemas.manifest import RunManifest

from .storage import Storage, read_manifest


def add_spark_arguments(p) -> None:
    p.add_argument("--master", help="Spark master URL (default local[*]; ignored under spark-submit)")
    p.add_argument("--conf", metavar="FILE", help="Spark settings in spark-defaults.conf format")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


class ListAccumulator(AccumulatorParam):
    """Accumulates lists by concatenation (worker events: pids, cache rebuilds)."""

    def zero(self, value):
        return []

    def addInPlace(self, a, b):
        a.extend(b)
        return a


def worker_report(rebuilds, tasks) -> dict:
    """What the accumulators say about the Python workers of one stage."""
    pids = sorted({pid for pid in tasks.value})
    return {
        "cache_rebuilds": len(rebuilds.value),
        "rebuild_pids": sorted({pid for pid, _ in rebuilds.value}),
        "python_workers": len(pids),
        "tasks": len(tasks.value),
    }


def table_function(fn, **kwargs):
    """``fn`` with ``kwargs`` bound, as a plain ``pa.Table -> pa.Table`` function for ``applyInArrow``.

    PySpark 4.3 infers the kind of a grouped Arrow UDF from its type hints; a
    ``functools.partial`` has none, and the inference then fails with an
    UnboundLocalError inside PySpark.
    """
    import pyarrow as pa

    def apply(table: pa.Table) -> pa.Table:
        return fn(table, **kwargs)

    apply.__annotations__ = {"table": pa.Table, "return": pa.Table}
    return apply


def complete_run(storage: Storage, directory: str, jobs: tuple[str, ...]) -> RunManifest:
    """The manifest of a complete run of one of ``jobs`` in ``directory``, or a clear error."""
    manifest = read_manifest(storage, directory)
    if manifest is None:
        raise HepixError(
            f"{directory} holds no complete hepix run (no _manifest.json): it was never written, or its "
            "job did not finish; rerun the job that makes it"
        )
    if manifest.status != "complete" or manifest.job not in jobs:
        raise HepixError(f"{directory} holds a {manifest.status} '{manifest.job}' run; expected the output of "
                         f"{' or '.join(jobs)}")
    return manifest


def same_key(manifest: RunManifest, fingerprint: str, directory: str) -> None:
    check_fingerprint(manifest.key_fingerprint or "", fingerprint, what=f"the ciphertexts in {directory}")


def refuse_secret_key_directory(keys: str) -> None:
    """The processing side never opens a key directory that holds a secret key (it only looks)."""
    from .remote import is_hdfs, list_names

    if (SECRET in list_names(keys)) if is_hdfs(keys) else (Path(keys) / SECRET).exists():
        raise KeyDirectoryError(
            f"{keys} holds a secret key ({SECRET}); processing runs where the data owner's secret must "
            f"not be, so it refuses this directory without opening the file. Give it the public part: "
            f"`hepix export-public --keys {keys} --out PUBLIC_DIR`, then --keys PUBLIC_DIR"
        )
