"""Table schemas and the run manifest: the single source of truth for what hepix writes."""
from .manifest import Counts, RunManifest
from .tables import (
    BENCH_PIXEL,
    BENCH_SPARK,
    BLOB_READER_BATCH_ROWS,
    CIPHERTEXTS,
    METRICS,
    PARQUET_OPTIONS,
    REJECTS,
    TABLES,
    TILES,
    spark_schema,
)

__all__ = ["BENCH_PIXEL", "BENCH_SPARK", "BLOB_READER_BATCH_ROWS", "CIPHERTEXTS", "Counts", "METRICS",
           "PARQUET_OPTIONS", "REJECTS", "RunManifest", "TABLES", "TILES", "spark_schema"]
