"""Every table hepix writes, defined once, with the Parquet settings that suit it.

The pyarrow schemas here are the single source of truth; :func:`spark_schema`
derives the Spark ``StructType`` from them (imported lazily, so that code
without Spark can use this module).
"""
from __future__ import annotations

import pyarrow as pa

#: What an image id looks like (random hex from encrypt, ``digits-01-0`` from encrypt-digits).  Ids come
#: back from the cluster, so every job checks them against this before anything else.
IMAGE_ID = r"^[a-z0-9][a-z0-9-]{0,63}$"

#: One row per ciphertext: the table handed to the untrusted cluster.  Every value is a ciphertext or
#: says nothing a guess about the images could confirm: no key material, no pixels, no file name or
#: path, no hash of a plaintext.  ``image_id`` is random per run (tasks.decode.image_id_for: keyed
#: with a secret the encrypt run draws and forgets), so it links nothing across runs; which id is which
#: file stays with the owner (:data:`OWNER_IMAGES`).  What the cluster sees by construction: image sizes
#: and channels, tile positions, the layout, scheme, parameters, strategy, key fingerprint and ops.
#: A row is one ciphertext of one channel of one tile; ``index`` numbers the ciphertexts of
#: that tile and channel (pixel layout: the pixel, row-major over the tile's valid h x w
#: region; packed layout: the chunk of slots).  ``post_scale`` is the public factor the key
#: holder applies after decryption (deferred plaintext scaling, see hecore.ops.spec).
CIPHERTEXTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
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
    pa.field("halo", pa.int32(), nullable=False),            # packed: pixels around the tile in its slots
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
    pa.field("ct_xxh3", pa.int64()),        # XXH3-64 of ct (tasks.checksums); null: written before checksums
])

#: ``hepix process --op match:QUERY``: one encrypted distance per (image, metric).  Slot 0 of ``ct``
#: times ``distance_scale`` is the distance; only the key holder can read it.  Images are named by id.
ENCRYPTED_DISTANCES = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("query_image_id", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),           # l2 (squared L2) | l1 (polynomial |x|)
    pa.field("layout", pa.string(), nullable=False),
    pa.field("scheme", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("key_fingerprint", pa.string(), nullable=False),
    pa.field("ops", pa.list_(pa.string()), nullable=False),     # applied to both images before matching
    pa.field("bound", pa.float64(), nullable=False),            # D: the largest raw |difference| (L1 scaling)
    pa.field("parts", pa.int64(), nullable=False),              # ciphertext pairs summed
    pa.field("distance_scale", pa.float64(), nullable=False),
    pa.field("process_seconds", pa.float64(), nullable=False),
    pa.field("ct", pa.binary(), nullable=False),
])

#: ``hepix decrypt`` of a match run: the distances in the clear (the data owner's table); the sources come
#: from the owner map (the image id when decrypt has none).
DISTANCES = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("query_image_id", pa.string(), nullable=False),
    pa.field("query_source", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),
    pa.field("distance", pa.float64(), nullable=False),
    pa.field("l1_poly_max_error", pa.float64()),               # per pixel, in pixel units (l1 rows)
    pa.field("parts", pa.int64(), nullable=False),
    pa.field("process_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
])

#: ``hepix decrypt`` of an inference run (``process --op infer:MODEL`` on ``hepix encrypt-digits``): one row
#: per digit, its label, the decrypted prediction and head outputs (the data owner's table).
PREDICTIONS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("sample", pa.int32(), nullable=False),            # index in the task's test split
    pa.field("label", pa.int32(), nullable=False),
    pa.field("prediction", pa.int32(), nullable=False),
    pa.field("scores", pa.list_(pa.float64()), nullable=False),  # binary: the probability; else one per class
    pa.field("model", pa.string(), nullable=False),
    pa.field("task", pa.string(), nullable=False),
])

#: ``hepix decrypt`` of an inference run: accuracy and cost, one row per batch and one for all (batch_id "all");
#: ``ringers``: how many of the batch's samples were the owner's ringers, compared with the model (null without
#: ``--owner``).
INFERENCE_METRICS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("task", pa.string(), nullable=False),
    pa.field("scheme", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("samples", pa.int32(), nullable=False),
    pa.field("correct", pa.int32(), nullable=False),
    pa.field("accuracy", pa.float64(), nullable=False),
    pa.field("input_ciphertexts", pa.int64()),
    pa.field("input_bytes", pa.int64()),
    pa.field("bytes_per_sample", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("process_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("ringers", pa.int32()),
])

#: Inputs that could not be used, and why.  The job goes on without them.  ``source``: the input file
#: (encrypt: written to the owner map, never next to the ciphertexts), or for a ciphertext row the table
#: file it came from (the owner's decrypt puts the image's source there when its owner map knows it).
REJECTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("stage", pa.string(), nullable=False),      # read | decode | process | decrypt | verify | audit
    pa.field("reason", pa.string(), nullable=False),     # short tag, e.g. truncated, not-an-image
    pa.field("detail", pa.string(), nullable=False),     # the full message
    pa.field("bytes", pa.int64()),
    # A rejected ciphertext row (verify, process, decrypt): its key; null for rejected input files.
    pa.field("image_id", pa.string()),
    pa.field("channel", pa.int32()),
    pa.field("tile_y", pa.int32()),
    pa.field("tile_x", pa.int32()),
    pa.field("index", pa.int32()),
])

#: The owner's spot samples (hecore/integrity.py), one per image, in the owner map beside OWNER_IMAGES: secret
#: positions and the original pixels around them.  Never written where the cluster can read it.
OWNER_SPOTS = pa.schema([
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("spots", pa.binary(), nullable=False),
])

#: The owner map (jobs/runtime/owner.py): which image id of an encrypt run is which of the owner's files.  Written
#: by encrypt next to nothing the cluster gets (``--owner``, 0700/0600), read by decrypt and audit to find
#: the originals and name the results, and by a resumed encrypt to skip what is done.  ``ciphertexts``:
#: how many rows the owner wrote for the image, which the cluster's answer must match.
OWNER_IMAGES = pa.schema([
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("content_sha256", pa.string(), nullable=False),
    pa.field("image_height", pa.int32(), nullable=False),
    pa.field("image_width", pa.int32(), nullable=False),
    pa.field("image_channels", pa.int32(), nullable=False),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("bytes", pa.int64()),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("batch", pa.string(), nullable=False),             # the batch tag the files were committed under
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
    # The owner's spot checks (hecore/integrity.py): sampled positions whose output was compared, and output
    # values compared; null when the image was not checked (no sample kept, or decrypt --no-integrity).
    pa.field("spot_positions", pa.int32()),
    pa.field("spot_values", pa.int64()),
])

#: ``hepix audit``: one row per (image, channel, test) of distinguishers run over a ciphertext table
#: WITHOUT any key.  ``verdict``: pass | leaks | skipped.  ``statistic``: identical -> distinct / count;
#: recurring-differences -> fraction of distinct ciphertexts linked by a recurring difference;
#: linear-dependence -> rank / sample size mod the first prime; small-difference -> fraction of distinct
#: ciphertexts sharing a second component up to a small polynomial.  With ``--images``:
#: ``recovered_fraction`` of the values occurring at least twice (``classes_true``) whose pixels the attack
#: put in exactly one class; ``exact_difference_fraction`` of pixels whose decoded difference is exact (Zinc).
AUDIT = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("input_run_id", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("channel", pa.int32(), nullable=False),
    pa.field("layout", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),        # as labelled in the table
    pa.field("security", pa.string(), nullable=False),        # as labelled in the table
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("test", pa.string(), nullable=False),            # identical | recurring-differences | ...
    pa.field("verdict", pa.string(), nullable=False),         # pass | leaks | skipped
    pa.field("statistic", pa.float64()),
    pa.field("detail", pa.string(), nullable=False),
    pa.field("classes_found", pa.int64()),
    pa.field("classes_true", pa.int64()),
    pa.field("recovered_fraction", pa.float64()),
    pa.field("exact_difference_fraction", pa.float64()),
    pa.field("picture", pa.string()),                         # PNG of what the attacker sees, relative path
    pa.field("seconds", pa.float64(), nullable=False),
])


TABLES = {
    "ciphertexts": CIPHERTEXTS,
    "rejects": REJECTS,
    "metrics": METRICS,
    "encrypted_distances": ENCRYPTED_DISTANCES,
    "distances": DISTANCES,
    "predictions": PREDICTIONS,
    "inference_metrics": INFERENCE_METRICS,
    "audit": AUDIT,
    "owner_images": OWNER_IMAGES,
}

#: Parquet writer options per table (Spark ``DataFrameWriter.option``s).  Ciphertexts are
#: random-looking values (under 1 KB for a seeded TFHE value, 20-400 KB for SEAL's) that no
#: codec shrinks (measured: ~0%), so they are written uncompressed, and the row-group size
#: check runs every few rows instead of the default 100 (row groups would otherwise overshoot
#: by 100 x 400 KB).
PARQUET_OPTIONS = {
    "ciphertexts": {"compression": "none", "parquet.block.size": str(128 * 2**20),
                    "parquet.block.size.row.check.min": "4", "parquet.block.size.row.check.max": "64",
                    "parquet.page.size": str(8 * 2**20)},
    "rejects": {"compression": "zstd"},
    "metrics": {"compression": "zstd"},
    "distances": {"compression": "none"},
    "predictions": {"compression": "zstd"},
    "inference_metrics": {"compression": "zstd"},
    "audit": {"compression": "zstd"},
}

#: Spark reader setting for tables with blob columns: 256 rows x 400 KB per batch, not 4096.
BLOB_READER_BATCH_ROWS = 256


def spark_schema(schema: pa.Schema):
    """The Spark StructType of a pyarrow schema (needs pyspark)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
