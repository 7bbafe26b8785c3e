"""DataFrames of rows the driver holds.

``spark.createDataFrame`` of a Python list ships the rows through Python workers of their own: a daemon
and a worker per core, started for it in every session that does so, even for no rows (and apart from
the workers of the job's Arrow functions, whose environment differs).  An Arrow table is read by the JVM
directly and starts none.  Every DataFrame hepix builds from the driver's rows goes through
:func:`driver_frame`.
"""
from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from schemas.tables import spark_schema


def driver_frame(spark, schema: pa.Schema, rows: Iterable = ()):
    """A DataFrame of ``rows`` (dicts by column name, or tuples in ``schema``'s order) typed by the Arrow
    ``schema``."""
    rows = list(rows)
    if rows and not isinstance(rows[0], dict):
        rows = [dict(zip(schema.names, r)) for r in rows]
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema), spark_schema(schema))
