"""The decrypt stage (the key owner's job): ciphertext rows in, decrypted pixel values out, then one row
per image with its values reassembled and the ops' public post-scale applied."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hecore.layouts import Layout
from schemas.stages import DECRYPTED, IMAGES

from .rows import constant_column, pc_unique, pixel_positions
from .worker import worker_state


@dataclass(frozen=True)
class SecretPayload:
    """Public material and the secret key, for the data owner's decrypt job only."""

    public: object
    secret_key: bytes = field(repr=False)   # never in a log line or an error message




def build_decryptor(payload: SecretPayload):
    from hecore.context import HEContext
    return HEContext.from_public(payload.public, secret_key=payload.secret_key)


def decrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast,
                      rebuilds=None, tasks=None, flood_std: float = 0.0) -> Iterator[pa.RecordBatch]:
    """Decrypt rows; ``flood_std`` > 0 adds noise flooding (hecore.flooding) of that standard
    deviation, in pixel units, to every decrypted value."""
    ctx = worker_state(token, broadcast, build_decryptor, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    for rb in batches:
        if rb.num_rows == 0:
            continue
        if {Layout.parse(v) for v in pc_unique(rb.column("layout"))} == {Layout.PIXEL}:
            yield _decrypt_pixel_rows(ctx, rb, flood_std)
        else:
            for i in range(rb.num_rows):
                yield _decrypt_packed_row(ctx, rb.slice(i, 1), flood_std)


def _decrypt_pixel_rows(ctx, rb: pa.RecordBatch, flood_std: float = 0.0) -> pa.RecordBatch:
    from hecore.ciphertexts import CiphertextBatch
    from hecore.flooding import flooding_noise

    t = time.perf_counter()
    raw = ctx.decrypt_pixels(CiphertextBatch.from_arrow(rb.column("ct"), "pipeline", "leaks"))
    if flood_std:      # raw x post_scale is the pixel value: scale the noise into raw units
        raw = raw + flooding_noise(len(raw), flood_std) / np.abs(rb.column("post_scale").to_numpy())
    dt = (time.perf_counter() - t) / rb.num_rows
    pos = pixel_positions(rb)
    cols = {name: rb.column(name) for name in DECRYPTED.names if name in rb.schema.names}
    cols.update(py=pa.array(pos[:, 0], type=pa.int32()), px=pa.array(pos[:, 1], type=pa.int32()),
                raw=pa.array(raw), cts=constant_column(1, rb.num_rows, pa.int64()),
                ct_bytes=pc.binary_length(rb.column("ct")).cast(pa.int64()),
                decrypt_seconds=constant_column(dt, rb.num_rows, pa.float64()))
    return pa.RecordBatch.from_arrays([cols[n] for n in DECRYPTED.names], schema=DECRYPTED)


def _decrypt_packed_row(ctx, row: pa.RecordBatch, flood_std: float = 0.0) -> pa.RecordBatch:
    """One packed ciphertext -> one row per valid pixel of its tile channel."""
    r = row.to_pylist()[0]
    from hecore.layouts.packed import decrypt_block

    th, tw, h, w = r["tile_h"], r["tile_w"], r["h"], r["w"]
    layout = Layout.parse(r["layout"])
    if not layout.packed:
        raise ValueError(f"{r['source']}: a {layout} row among packed ones")
    t = time.perf_counter()
    slots = decrypt_block(ctx, r["ct"], th, tw, r["halo"], layout.complex_packing)[:h, :w]
    if flood_std:
        from hecore.flooding import flood
        slots = flood(slots, flood_std / abs(r["post_scale"]))
    dt = time.perf_counter() - t
    n = h * w
    yy, xx = np.divmod(np.arange(n), w)
    first = np.zeros(n)
    first[0] = 1.0
    cols = {name: constant_column(r[name], n, DECRYPTED.field(name).type) for name in
            ("image_id", "source", "content_sha256", "image_height", "image_width", "image_channels",
             "layout", "strategy", "security", "preset", "channel")}
    cols.update(ops=pa.array([r["ops"]] * n, type=pa.list_(pa.string())),
                py=pa.array(r["y"] + yy, type=pa.int32()), px=pa.array(r["x"] + xx, type=pa.int32()),
                raw=pa.array(slots.reshape(-1)), cts=pa.array(first.astype(np.int64)),
                ct_bytes=pa.array((first * len(r["ct"])).astype(np.int64)),
                encrypt_seconds=pa.array(first * r["encrypt_seconds"]),
                process_seconds=pa.array(first * r["process_seconds"]), decrypt_seconds=pa.array(first * dt))
    return pa.RecordBatch.from_arrays([cols[n] for n in DECRYPTED.names], schema=DECRYPTED)




def assemble_group(table: pa.Table) -> pa.Table:
    """All decrypted values of one image -> one row with the image's true values (float64)."""
    from hecore.ops.spec import finish_for, parse_ops

    first = table.slice(0, 1).to_pylist()[0]
    h, w, c = first["image_height"], first["image_width"], first["image_channels"]
    raw = np.full((h, w, c), np.nan)
    raw[table.column("py").to_numpy(), table.column("px").to_numpy(),
        table.column("channel").to_numpy()] = table.column("raw").to_numpy()
    if np.isnan(raw).any():
        missing = int(np.isnan(raw).sum())
        raise ValueError(f"{first['source']}: {missing} of {raw.size} pixel values have no ciphertext")
    finish = finish_for(parse_ops(first["ops"]))
    values = finish.apply(raw)
    unsnapped = raw * finish.post_scale_float
    row = {k: first[k] for k in ("image_id", "source", "content_sha256", "layout", "strategy", "security",
                                 "preset", "ops")}
    row.update(height=h, width=w, channels=c, values=values.astype(np.float64).tobytes(),
               unsnapped=unsnapped.astype(np.float64).tobytes(),
               ciphertexts=int(np.sum(table.column("cts").to_numpy())),
               ciphertext_bytes=int(np.sum(table.column("ct_bytes").to_numpy())),
               encrypt_seconds=float(np.sum(table.column("encrypt_seconds").to_numpy())),
               process_seconds=float(np.sum(table.column("process_seconds").to_numpy())),
               decrypt_seconds=float(np.sum(table.column("decrypt_seconds").to_numpy())))
    return pa.Table.from_pylist([row], schema=IMAGES)
