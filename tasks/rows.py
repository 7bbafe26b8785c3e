"""Arrow helpers the stages share: ciphertext rows shaped after ``schemas.tables.CIPHERTEXTS``, constant
columns, column replacement, and the pixel positions of pixel-layout rows."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.tables import CIPHERTEXTS

from .checksums import ct_checksums


@dataclass(frozen=True)
class RowMeta:
    """What every ciphertext row of a run carries besides its tile and its bytes."""

    run_id: str
    layout: str
    preset: str
    key_fingerprint: str


def constant_column(value, n: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type=type_), n)


def constant_list(values: list[str], n: int) -> pa.Array:
    """``n`` rows of the same list of strings (the ``ops`` column), built in one call."""
    k = len(values)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * k),
                                    pa.array(list(values) * n, type=pa.string()))


def ciphertext_batch(meta: RowMeta, ct: pa.Array, **values) -> pa.RecordBatch:
    """Rows of ``CIPHERTEXTS``: the ciphertexts ``ct`` and their checksums, ``meta``'s columns, and every
    other column from ``values`` -- a NumPy array of one value per row, or one value for every row --
    built column by column (a record batch per tile channel cost more than the encryption of a
    symmetric ciphertext)."""
    n = len(ct)
    if ct.type != pa.binary():
        ct = ct.cast(pa.binary())
    given = {"run_id": meta.run_id, "layout": meta.layout, "preset": meta.preset,
             "key_fingerprint": meta.key_fingerprint, **values}
    cols = []
    for f in CIPHERTEXTS:
        if f.name == "ct":
            cols.append(ct)
        elif f.name == "ct_xxh3":
            cols.append(ct_checksums(ct))
        elif f.name == "ops":
            ops = given["ops"]
            cols.append(ops if isinstance(ops, pa.Array) else constant_list(list(ops), n))
        else:
            v = given[f.name]
            cols.append(pa.array(v, type=f.type) if isinstance(v, np.ndarray) else constant_column(v, n, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=CIPHERTEXTS)


def ciphertext_rows(meta: RowMeta, tile: dict, channel: int, batch, strategy_name: str,
                    security: str, scheme: str, level: int, scale_bits: int, ops: list[str],
                    post_scale: float, encrypt_seconds: np.ndarray, process_seconds: np.ndarray,
                    run_id: str | None = None) -> pa.RecordBatch:
    """One record batch of ciphertext rows (schema ``CIPHERTEXTS``) for one tile and channel."""
    n = len(batch)
    if run_id is not None:
        meta = RowMeta(run_id=run_id, layout=meta.layout, preset=meta.preset, key_fingerprint=meta.key_fingerprint)
    return ciphertext_batch(
        meta, batch.to_arrow(), image_id=tile["image_id"], scheme=scheme, strategy=strategy_name, security=security,
        **{name: int(tile[name]) for name in ("image_height", "image_width", "image_channels", "tile_h", "tile_w",
                                              "halo", "tile_y", "tile_x", "y", "x", "h", "w")},
        channel=int(channel), index=np.arange(n, dtype=np.int32), ops=ops, post_scale=float(post_scale),
        level=level, scale_bits=scale_bits, encrypt_seconds=np.asarray(encrypt_seconds, dtype=np.float64),
        process_seconds=np.asarray(process_seconds, dtype=np.float64))


#: The tile fields every ciphertext row of a tile channel repeats.
TILE_FIELDS = ("image_height", "image_width", "image_channels", "tile_h", "tile_w", "halo", "tile_y", "tile_x",
               "y", "x", "h", "w", "channel")


def tiles_rows(meta: RowMeta, tiles: list[dict], batches: list, strategy_name: str, security: str, scheme: str,
               level: int, scale_bits: int, encrypt_seconds: float) -> pa.RecordBatch:
    """One record batch of fresh ciphertext rows for many tile channels (``batches[i]`` encrypts ``tiles[i]``).

    The packed layouts give one ciphertext per tile channel: a record batch per tile channel (and a
    Parquet write of one row) cost a fifth of the encryption, so the rows of a group of tiles are
    built column by column at once."""
    counts = np.array([len(b) for b in batches], dtype=np.int64)
    ct = pa.concat_arrays([b.to_arrow().cast(pa.binary()) for b in batches])
    per_row = {name: np.repeat(np.array([int(t[name]) for t in tiles], dtype=np.int32), counts)
               for name in TILE_FIELDS}
    n = int(counts.sum())
    return ciphertext_batch(
        meta, ct, image_id=np.repeat(np.array([t["image_id"] for t in tiles], dtype=object), counts),
        scheme=scheme, strategy=strategy_name, security=security, **per_row,
        index=np.concatenate([np.arange(c, dtype=np.int32) for c in counts]) if n else np.zeros(0, np.int32),
        ops=[], post_scale=1.0, level=level, scale_bits=scale_bits,
        encrypt_seconds=np.full(n, float(encrypt_seconds)), process_seconds=np.zeros(n))


def replace_columns(rb: pa.RecordBatch, **columns) -> pa.RecordBatch:
    arrays = [columns.get(name, rb.column(i)) for i, name in enumerate(rb.schema.names)]
    return pa.RecordBatch.from_arrays(arrays, schema=rb.schema)


def pixel_positions(rb) -> np.ndarray:
    """(py, px) of every pixel-layout ciphertext row: its tile's origin + its index, row-major."""
    index = rb.column("index").to_numpy()
    w = rb.column("w").to_numpy()
    py = rb.column("y").to_numpy() + index // w
    px = rb.column("x").to_numpy() + index % w
    return np.stack([py, px], axis=1)


def single_value(rb, name: str):
    values = pc_unique(rb.column(name))
    if len(values) != 1:
        raise ValueError(f"a batch mixes {len(values)} values of {name}: {values[:4]}")
    return values[0]


def pc_unique(col) -> list:
    return pc.unique(col).to_pylist()
