"""Every table hepix writes, defined once, with the Parquet settings that suit it.

The pyarrow schemas here are the single source of truth; :func:`spark_schema`
derives the Spark ``StructType`` from them (imported lazily, so that code
without Spark can use this module).
"""
from __future__ import annotations

import pyarrow as pa

#: One row per measured configuration of the pixel-layout benchmark (``hepix bench pixel``).
BENCH_PIXEL = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
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

#: One row per configuration of the Spark overhead/scaling benchmark (``hepix bench --suite spark``).
BENCH_SPARK = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores_available", pa.int32()),
    pa.field("git_commit", pa.string()),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("images", pa.int32(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),
    pa.field("tile", pa.int32(), nullable=False),
    pa.field("config", pa.string(), nullable=False),       # hecore, one process | spark local[N]
    pa.field("cores", pa.int32(), nullable=False),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),     # decode + cache build + encrypt + write
    pa.field("wall_seconds", pa.float64()),                # including the Spark session start-up
    pa.field("ciphertexts_per_second", pa.float64(), nullable=False),
    pa.field("vs_hecore_alone", pa.float64(), nullable=False),
    pa.field("speedup_vs_local1", pa.float64()),
    pa.field("workers", pa.string()),                      # JSON: cache rebuilds, python workers, tasks
])

#: One row per (implementation, parameters, encryption type, image) of ``hepix bench --suite packed``:
#: hepix's packed layout against TenSEAL ``ckks_vector`` at equal parameters and against the pixel
#: layout's ``full`` caching.  ``pixels`` counts channel values (width x height x channels);
#: ``seconds`` is the median over ``repeats`` single-threaded passes over the image; the ``vs_*``
#: ratios are pixels/s over the reference's pixels/s on the same image (TenSEAL at the same N).
BENCH_PACKED = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("hepix_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("implementation", pa.string(), nullable=False),   # hepix-packed | tenseal | hepix-pixel-full
    pa.field("library", pa.string()),                          # e.g. "TenSEAL 0.3.18"
    pa.field("preset", pa.string(), nullable=False),
    pa.field("n", pa.int32(), nullable=False),
    pa.field("qi_sizes", pa.list_(pa.int32())),
    pa.field("scale_bits", pa.int32()),
    pa.field("encryption", pa.string(), nullable=False),       # public | symmetric | cached
    pa.field("security", pa.string(), nullable=False),         # ind-cpa | leaks
    pa.field("image", pa.string(), nullable=False),
    pa.field("width", pa.int32(), nullable=False),
    pa.field("height", pa.int32(), nullable=False),
    pa.field("channels", pa.int32(), nullable=False),
    pa.field("pixels", pa.int64(), nullable=False),
    pa.field("tile_h", pa.int32()),
    pa.field("tile_w", pa.int32()),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("repeats", pa.int32(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("pixels_per_second", pa.float64(), nullable=False),
    pa.field("encrypt_seconds", pa.float64()),                 # encoding + encryption, measured apart
    pa.field("serialize_seconds", pa.float64()),               # serialization, measured apart
    pa.field("setup_seconds", pa.float64()),                   # keys, context, cache: not in seconds
    pa.field("bytes", pa.int64(), nullable=False),             # serialized ciphertext bytes
    pa.field("bytes_per_pixel", pa.float64(), nullable=False),
    pa.field("vs_tenseal_public", pa.float64()),
    pa.field("vs_tenseal_symmetric", pa.float64()),
    pa.field("vs_pixel_full", pa.float64()),
    pa.field("exact_fraction", pa.float64()),                  # after decryption and rounding; null: not decrypted
    pa.field("max_abs_err", pa.float64()),
])

#: One row per ciphertext.  Safe to hand to an untrusted cluster: no key material, no pixels.
#: A row is one ciphertext of one channel of one tile; ``index`` numbers the ciphertexts of
#: that tile and channel (pixel layout: the pixel, row-major over the tile's valid h x w
#: region; packed layout: the chunk of slots).  ``post_scale`` is the public factor the key
#: holder applies after decryption (deferred plaintext scaling, see hecore.ops).
CIPHERTEXTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("content_sha256", pa.string(), nullable=False),
    pa.field("layout", pa.string(), nullable=False),
    pa.field("scheme", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),
    pa.field("security", pa.string(), nullable=False),
    pa.field("key_fingerprint", pa.string(), nullable=False),
    pa.field("image_height", pa.int32(), nullable=False),
    pa.field("image_width", pa.int32(), nullable=False),
    pa.field("image_channels", pa.int32(), nullable=False),
    pa.field("tile_h", pa.int32(), nullable=False),
    pa.field("tile_w", pa.int32(), nullable=False),
    pa.field("tile_y", pa.int32(), nullable=False),
    pa.field("tile_x", pa.int32(), nullable=False),
    pa.field("y", pa.int32(), nullable=False),
    pa.field("x", pa.int32(), nullable=False),
    pa.field("h", pa.int32(), nullable=False),
    pa.field("w", pa.int32(), nullable=False),
    pa.field("channel", pa.int32(), nullable=False),
    pa.field("index", pa.int32(), nullable=False),
    pa.field("ops", pa.list_(pa.string()), nullable=False),
    pa.field("post_scale", pa.float64(), nullable=False),
    pa.field("level", pa.int32(), nullable=False),
    pa.field("scale_bits", pa.int32(), nullable=False),
    pa.field("encrypt_seconds", pa.float64(), nullable=False),
    pa.field("process_seconds", pa.float64(), nullable=False),
    pa.field("ct", pa.binary(), nullable=False),
])

#: Inputs that could not be used, and why.  The job goes on without them.
REJECTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("stage", pa.string(), nullable=False),      # read | decode | encrypt | process | decrypt
    pa.field("reason", pa.string(), nullable=False),     # short tag, e.g. truncated, not-an-image
    pa.field("detail", pa.string(), nullable=False),     # the full message
    pa.field("bytes", pa.int64()),
])

#: Quality of decrypted images against the originals (or the plaintext-processed originals).
METRICS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("content_sha256", pa.string(), nullable=False),
    pa.field("channel", pa.int32(), nullable=False),       # -1: all channels together
    pa.field("ops", pa.string(), nullable=False),          # e.g. "brightness:50|meanfilter:3"
    pa.field("reference", pa.string(), nullable=False),    # original | plaintext-processed | none
    pa.field("layout", pa.string(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),
    pa.field("security", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("width", pa.int32(), nullable=False),
    pa.field("height", pa.int32(), nullable=False),
    pa.field("channels", pa.int32(), nullable=False),
    pa.field("mse", pa.float64()),
    pa.field("psnr", pa.float64()),
    pa.field("ssim", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("exact_fraction", pa.float64()),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("ciphertext_bytes", pa.int64(), nullable=False),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("process_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
])

#: Internal: the decode stage's output, one row per tile and channel of raw pixels, or one per reject.
TILES = pa.schema([
    pa.field("image_id", pa.string()),
    pa.field("source", pa.string(), nullable=False),
    pa.field("content_sha256", pa.string()),
    pa.field("image_height", pa.int32()),
    pa.field("image_width", pa.int32()),
    pa.field("image_channels", pa.int32()),
    pa.field("conversions", pa.list_(pa.string())),
    pa.field("tile_h", pa.int32()),
    pa.field("tile_w", pa.int32()),
    pa.field("tile_y", pa.int32()),
    pa.field("tile_x", pa.int32()),
    pa.field("y", pa.int32()),
    pa.field("x", pa.int32()),
    pa.field("h", pa.int32()),
    pa.field("w", pa.int32()),
    pa.field("channel", pa.int32()),
    pa.field("pixels", pa.binary()),              # tile_h x tile_w uint8 (one channel), edge-padded
    pa.field("reject_stage", pa.string()),
    pa.field("reject_reason", pa.string()),
    pa.field("reject_detail", pa.string()),
    pa.field("bytes", pa.int64()),
])

TABLES = {
    "ciphertexts": CIPHERTEXTS,
    "rejects": REJECTS,
    "metrics": METRICS,
    "bench_pixel": BENCH_PIXEL,
    "bench_spark": BENCH_SPARK,
    "bench_packed": BENCH_PACKED,
}

#: Parquet writer options per table (Spark ``DataFrameWriter.option``s).  Ciphertexts are
#: random-looking 100-400 KB values that no codec shrinks (measured: ~0%), so they are
#: written uncompressed, and the row-group size check runs every few rows instead of the
#: default 100 (row groups would otherwise overshoot by 100 x 400 KB).
PARQUET_OPTIONS = {
    "ciphertexts": {"compression": "none", "parquet.block.size": str(128 * 2**20),
                    "parquet.block.size.row.check.min": "4", "parquet.block.size.row.check.max": "64",
                    "parquet.page.size": str(8 * 2**20)},
    "rejects": {"compression": "zstd"},
    "metrics": {"compression": "zstd"},
}

#: Spark reader setting for tables with blob columns: 256 rows x 400 KB per batch, not 4096.
BLOB_READER_BATCH_ROWS = 256


def spark_schema(schema: pa.Schema):
    """The Spark StructType of a pyarrow schema (needs pyspark)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
