"""Table schemas: ``schemas.tables`` is the single source of truth."""
from .tables import BENCH_PIXEL, TABLES, spark_schema

__all__ = ["BENCH_PIXEL", "TABLES", "spark_schema"]
