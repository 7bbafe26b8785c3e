"""Arrow helpers the stages share: ciphertext rows shaped after ``schemas.tables.CIPHERTEXTS``, constant
columns, column replacement, and the pixel positions of pixel-layout rows."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.checksums import ct_checksums
from schemas.tables import CIPHERTEXTS


@dataclass(frozen=True)
class RowMeta:
    """What every ciphertext row of a run carries besides its tile and its bytes."""

    run_id: str
    layout: str
    preset: str
    key_fingerprint: str


def constant_column(value, n: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type=type_), n)


def ciphertext_rows(meta: RowMeta, tile: dict, channel: int, batch, strategy_name: str,
                    security: str, scheme: str, level: int, scale_bits: int, ops: list[str],
                    post_scale: float, encrypt_seconds: np.ndarray, process_seconds: np.ndarray,
                    run_id: str | None = None) -> pa.RecordBatch:
    """One record batch of ciphertext rows (schema ``CIPHERTEXTS``) for one tile and channel."""
    n = len(batch)
    f = CIPHERTEXTS
    cols = {
        "run_id": constant_column(run_id or meta.run_id, n, pa.string()),
        "image_id": constant_column(tile["image_id"], n, pa.string()),
        "layout": constant_column(meta.layout, n, pa.string()),
        "scheme": constant_column(scheme, n, pa.string()),
        "preset": constant_column(meta.preset, n, pa.string()),
        "strategy": constant_column(strategy_name, n, pa.string()),
        "security": constant_column(security, n, pa.string()),
        "key_fingerprint": constant_column(meta.key_fingerprint, n, pa.string()),
    }
    for name in ("image_height", "image_width", "image_channels", "tile_h", "tile_w", "halo", "tile_y", "tile_x",
                 "y", "x", "h", "w"):
        cols[name] = constant_column(int(tile[name]), n, pa.int32())
    cols["channel"] = constant_column(channel, n, pa.int32())
    cols["index"] = pa.array(np.arange(n, dtype=np.int32))
    cols["ops"] = pa.array([ops] * n, type=pa.list_(pa.string()))
    cols["post_scale"] = constant_column(float(post_scale), n, pa.float64())
    cols["level"] = constant_column(level, n, pa.int32())
    cols["scale_bits"] = constant_column(scale_bits, n, pa.int32())
    cols["encrypt_seconds"] = pa.array(encrypt_seconds, type=pa.float64())
    cols["process_seconds"] = pa.array(process_seconds, type=pa.float64())
    cols["ct"] = batch.to_arrow()
    if cols["ct"].type != pa.binary():
        cols["ct"] = cols["ct"].cast(pa.binary())
    cols["ct_xxh3"] = ct_checksums(cols["ct"])
    return pa.RecordBatch.from_arrays([cols[name] for name in f.names], schema=f)


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
