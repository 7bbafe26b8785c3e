"""The Arrow schemas that pass between the stages of a job (inside Spark, never written as tables).

``TILES``: decoded tiles (or a reject) from decode to encrypt; ``WRITTEN``: the files the encrypt tasks
wrote; ``HALO_COLUMNS``: the target tile a pixel ciphertext is sent to by the pixel layout's mean filter;
``DECRYPTED``, ``IMAGES``, ``ORIGINALS``, ``REFERENCES``: decrypt's blocks of values, assembled images and
reference images (by content and result; by image id);
``CHECKED``: one row per checked ciphertext row (verify, and before process and decrypt use a table);
``IMAGE_SUMMARY``: what one task's checked rows say of each image (what process and decrypt decide from).
"""
from __future__ import annotations

import pyarrow as pa

#: Internal: the decode stage's output, one row per tile and channel of raw pixels, or one per reject.
#: ``source`` and ``content_sha256`` go to the owner map only (jobs.runtime.owner), never to a ciphertext row.
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
    pa.field("halo", pa.int32()),
    pa.field("tile_y", pa.int32()),
    pa.field("tile_x", pa.int32()),
    pa.field("y", pa.int32()),
    pa.field("x", pa.int32()),
    pa.field("h", pa.int32()),
    pa.field("w", pa.int32()),
    pa.field("channel", pa.int32()),
    pa.field("pixels", pa.binary()),              # (tile_h + 2 halo) x (tile_w + 2 halo) uint8, one channel
    pa.field("reject_stage", pa.string()),
    pa.field("reject_reason", pa.string()),
    pa.field("reject_detail", pa.string()),
    pa.field("bytes", pa.int64()),
    pa.field("spots", pa.binary()),               # the owner's spot sample (first unit of an image only)
])


#: decrypt's stages: one row per decrypted ciphertext -- the block of raw values it held (its tile channel's
#: valid ``h x w`` values at ``(y, x)``; 1x1 in the pixel layout) --, then one row per assembled image (or why
#: it was not assembled: ``reject_reason``/``reject_detail``); sources come from the owner map later, joined
#: by image id.
DECRYPTED = pa.schema([
    ("image_id", pa.string()),
    ("image_height", pa.int32()), ("image_width", pa.int32()), ("image_channels", pa.int32()),
    ("layout", pa.string()), ("strategy", pa.string()), ("security", pa.string()), ("preset", pa.string()),
    ("ops", pa.list_(pa.string())), ("channel", pa.int32()),
    ("y", pa.int32()), ("x", pa.int32()), ("h", pa.int32()), ("w", pa.int32()),
    ("raw", pa.binary()),           # float64 h x w raw values (before post_scale), row-major
    ("cts", pa.int64()), ("ct_bytes", pa.int64()), ("encrypt_seconds", pa.float64()),
    ("process_seconds", pa.float64()), ("decrypt_seconds", pa.float64()),
    ("error", pa.string()),         # SEAL refused the ciphertext when it was decrypted (no values, h = w = 0)
])


IMAGES = pa.schema([
    ("image_id", pa.string()),
    ("height", pa.int32()), ("width", pa.int32()), ("channels", pa.int32()),
    ("layout", pa.string()), ("strategy", pa.string()), ("security", pa.string()), ("preset", pa.string()),
    ("ops", pa.list_(pa.string())),
    ("raw", pa.binary()),           # float64 H x W x C raw values, before the ops' Finish (post_scale, snapping)
    ("ciphertexts", pa.int64()), ("ciphertext_bytes", pa.int64()), ("encrypt_seconds", pa.float64()),
    ("process_seconds", pa.float64()), ("decrypt_seconds", pa.float64()),
    ("reject_reason", pa.string()), ("reject_detail", pa.string()),
    ("result_sha256", pa.string()),         # of the rounded result: finds its original without an owner map
])

#: The owner map's names for the images (joined to IMAGES by id in decrypt).
OWNER_NAMES = pa.schema([("image_id", pa.string()), ("source", pa.string()), ("content_sha256", pa.string())])


#: Reference images: keyed by the file's SHA-256 (found through the owner map) and by the SHA-256 of the
#: rounded plaintext result of the run's ops on them (found by what decrypts, without an owner map).
ORIGINALS = pa.schema([("content_sha256", pa.string()), ("original", pa.binary()),
                       ("orig_height", pa.int32()), ("orig_width", pa.int32()), ("orig_channels", pa.int32()),
                       ("result_sha256", pa.string()), ("orig_source", pa.string())])


#: The originals of the images an owner map names, by image id (decrypt assembles and scores each image in
#: one task, its decrypted blocks cogrouped with this row).
REFERENCES = pa.schema([("image_id", pa.string()), ("original", pa.binary()), ("orig_height", pa.int32()),
                        ("orig_width", pa.int32()), ("orig_channels", pa.int32())])


#: One row per encrypt task writing its own file: the file's name, rows and size, the XOR of its rows'
#: ``ct_xxh3`` and the sum of their ``ct`` lengths (what the manifest records of it).
WRITTEN = pa.schema([("file", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                     ("xxh3_xor", pa.int64()), ("ct_bytes", pa.int64())])


HALO_COLUMNS = [("target_ty", pa.int32()), ("target_tx", pa.int32())]


#: One row per checked ciphertext row (tasks.rowchecks): its key, what the bytes hash to, why it is bad (or null).
CHECKED = pa.schema([
    ("file", pa.string()), ("image_id", pa.string()), ("channel", pa.int32()),
    ("tile_y", pa.int32()), ("tile_x", pa.int32()), ("index", pa.int32()), ("layout", pa.string()),
    ("image_height", pa.int32()), ("image_width", pa.int32()), ("image_channels", pa.int32()),
    ("tile_h", pa.int32()), ("tile_w", pa.int32()), ("ct_bytes", pa.int64()), ("stored", pa.int64()),
    ("reason", pa.string()), ("detail", pa.string()),
])


#: One row per image (id, or null for rows without one) of one checking task: what its CHECKED rows say,
#: aggregated in the task (tasks.summaries), so that the driver decides each image from these rows alone --
#: no second pass over the checked rows.  ``keys``: the distinct (channel, tile_y, tile_x, index) of its rows,
#: four little-endian int32 each, sorted; ``bad``: how many of its rows failed their checks (the first few of
#: them travel as CHECKED rows beside this one).
IMAGE_SUMMARY = pa.schema([
    ("image_id", pa.string()), ("file", pa.string()), ("rows", pa.int64()), ("bad", pa.int64()),
    ("layout", pa.string()),
    ("lo_image_height", pa.int32()), ("hi_image_height", pa.int32()),
    ("lo_image_width", pa.int32()), ("hi_image_width", pa.int32()),
    ("lo_image_channels", pa.int32()), ("hi_image_channels", pa.int32()),
    ("lo_tile_h", pa.int32()), ("hi_tile_h", pa.int32()),
    ("lo_tile_w", pa.int32()), ("hi_tile_w", pa.int32()),
    ("keys", pa.binary()),
])
