"""Every table hepix writes, defined once.

The pyarrow schemas here are the single source of truth; :func:`spark_schema`
derives the Spark ``StructType`` from them (imported lazily, so that code
without Spark can use this module).
"""
from __future__ import annotations

import pyarrow as pa

#: One row per measured configuration of the pixel-layout benchmark (``hepix bench pixel``).
BENCH_PIXEL = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("s", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("hepix_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("n", pa.int32(), nullable=False),
    pa.field("qi_sizes", pa.list_(pa.int32())),
    pa.field("scale_bits", pa.int32()),
    pa.field("image", pa.string(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),
    pa.field("channels", pa.int32(), nullable=False),
    pa.field("pixels", pa.int64(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),
    pa.field("strategy_options", pa.string()),
    pa.field("security", pa.string(), nullable=False),
    pa.field("reuse_buffer", pa.bool_()),
    pa.field("setup_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("pixels_per_second", pa.float64()),
    pa.field("ciphertext_bytes", pa.int64()),
    pa.field("ciphertext_mb_per_second", pa.float64()),
    pa.field("speedup_vs_fresh", pa.float64()),
    pa.field("speedup_vs_fresh_with_setup", pa.float64()),
    pa.field("memcpy_mb_per_second", pa.float64()),
    pa.field("mse", pa.float64()),
    pa.field("psnr", pa.float64()),
    pa.field("ssim", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("exact_fraction", pa.float64()),
])

TABLES = {"bench_pixel": BENCH_PIXEL}


def spark_schema(schema: pa.Schema):
    """The Spark StructType of a pyarrow schema (needs pyspark)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
