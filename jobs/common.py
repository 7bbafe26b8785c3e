"""Arguments and helpers shared by the Spark jobs."""
from __future__ import annotations

from pyspark.accumulators import AccumulatorParam


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
