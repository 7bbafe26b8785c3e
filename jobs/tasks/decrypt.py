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

from .decode import result_sha256
from .rows import constant_column, pc_unique, pixel_positions
from .worker import worker_state


@dataclass(frozen=True)
class SecretPayload:
    """Public material and the secret key, for the data owner's decrypt job only."""

    public: object
    secret_key: bytes = field(repr=False)   # never in a log line or an error message




def build_decryptor(payload: SecretPayload):
    if getattr(payload.public, "scheme", None) == "tfhe":
        from hecore.tfhe.decryptor import TfheDecryptor
        return TfheDecryptor(payload.secret_key)
    from hecore.context import HEContext
    return HEContext.from_public(payload.public, secret_key=payload.secret_key)


def plausible_range(ops: list[str], preset: str | None = None) -> tuple[float, float]:
    """The raw values (before ``post_scale``) the op chain can produce from pixels, widened by a margin far
    above the decryption error: a value outside it was not made from an image by these ops (a ciphertext
    of another key, or forged).  TFHE values are bytes, exact: 0..255."""
    from hecore.ops.spec import is_tfhe_preset, parse_ops, raw_range

    if is_tfhe_preset(preset):
        return 0.0, 255.0
    lo, hi = raw_range(parse_ops(list(ops)))
    margin = 0.5 + 1e-3 * (hi - lo)
    return lo - margin, hi + margin


def _error_batch(rb: pa.RecordBatch, i: int, error: str) -> pa.RecordBatch:
    """One DECRYPTED row saying that ciphertext ``i`` of ``rb`` could not be used (py = px = -1)."""
    r = rb.slice(i, 1).to_pylist()[0]
    row = {name: r.get(name) for name in DECRYPTED.names if name in r}
    row.update(py=-1, px=-1, raw=float("nan"), cts=1, ct_bytes=len(r["ct"] or b""), decrypt_seconds=0.0, error=error)
    return pa.RecordBatch.from_pylist([row], schema=DECRYPTED)


def decrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast,
                      rebuilds=None, tasks=None, flood_std: float = 0.0) -> Iterator[pa.RecordBatch]:
    """Decrypt rows; ``flood_std`` > 0 adds noise flooding (hecore.flooding) of that standard
    deviation, in pixel units, to every decrypted value.

    A ciphertext SEAL refuses here (it passed the checks before, so its file changed since), or whose
    values no image could give (:func:`plausible_range`, judged before any flooding), becomes one row
    with ``error`` set instead of its values; its image is then rejected, not the task."""
    ctx = worker_state(token, broadcast, build_decryptor, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    for rb in batches:
        if rb.num_rows == 0:
            continue
        bounds = plausible_range(rb.column("ops")[0].as_py() or [], rb.column("preset")[0].as_py())  # one per run
        if {Layout.parse(v) for v in pc_unique(rb.column("layout"))} == {Layout.PIXEL}:
            yield from _decrypt_pixel_rows(ctx, rb, bounds, flood_std)
        else:
            for i in range(rb.num_rows):
                yield _decrypt_packed_row(ctx, rb, i, bounds, flood_std)


def _decrypt_pixel_rows(ctx, rb: pa.RecordBatch, bounds, flood_std: float = 0.0):
    from hecore.ciphertexts import CiphertextBatch
    from hecore.flooding import flooding_noise

    refused = "tfhe-refused" if getattr(ctx, "scheme", None) == "tfhe" else "seal-refused"
    t = time.perf_counter()
    try:        # float64 whatever the scheme (TFHE decrypts to the bytes themselves)
        raw = np.asarray(ctx.decrypt_pixels(CiphertextBatch.from_arrow(rb.column("ct"), "pipeline", "leaks")),
                         dtype=np.float64)
    except Exception:  # noqa: BLE001 -- the library's refusal of one of them: find which, one by one
        for i in range(rb.num_rows):
            try:
                ctx.decrypt_pixels(CiphertextBatch.from_arrow(rb.column("ct").slice(i, 1), "pipeline", "leaks"))
            except Exception as e:  # noqa: BLE001
                yield _error_batch(rb, i, f"{refused}: {str(e).splitlines()[0][:160]}")
                return
        raise
    outside = np.flatnonzero(~((raw >= bounds[0]) & (raw <= bounds[1])))
    if outside.size:
        i = int(outside[0])
        yield _error_batch(rb, i, f"implausible-values: decrypts to {raw[i]:.6g}, outside the {bounds[0]:.6g}.."
                                  f"{bounds[1]:.6g} its ops can give (another key's ciphertext, or forged)")
        return
    if flood_std:      # raw x post_scale is the pixel value: scale the noise into raw units
        raw = raw + flooding_noise(len(raw), flood_std) / np.abs(rb.column("post_scale").to_numpy())
    dt = (time.perf_counter() - t) / rb.num_rows
    pos = pixel_positions(rb)
    cols = {name: rb.column(name) for name in DECRYPTED.names if name in rb.schema.names}
    cols.update(py=pa.array(pos[:, 0], type=pa.int32()), px=pa.array(pos[:, 1], type=pa.int32()),
                raw=pa.array(raw), cts=constant_column(1, rb.num_rows, pa.int64()),
                ct_bytes=pc.binary_length(rb.column("ct")).cast(pa.int64()),
                decrypt_seconds=constant_column(dt, rb.num_rows, pa.float64()),
                error=pa.nulls(rb.num_rows, pa.string()))
    yield pa.RecordBatch.from_arrays([cols[n] for n in DECRYPTED.names], schema=DECRYPTED)


def _decrypt_packed_row(ctx, rb: pa.RecordBatch, i: int, bounds, flood_std: float = 0.0) -> pa.RecordBatch:
    """One packed ciphertext -> one row per valid pixel of its tile channel (or one error row)."""
    r = rb.slice(i, 1).to_pylist()[0]
    from hecore.layouts.packed import decrypt_block

    th, tw, h, w = r["tile_h"], r["tile_w"], r["h"], r["w"]
    layout = Layout.parse(r["layout"])
    t = time.perf_counter()
    try:
        slots = decrypt_block(ctx, r["ct"], th, tw, r["halo"], layout.complex_packing)[:h, :w]
    except Exception as e:  # noqa: BLE001 -- SEAL refused it
        return _error_batch(rb, i, f"seal-refused: {str(e).splitlines()[0][:160]}")
    ok = (slots >= bounds[0]) & (slots <= bounds[1])
    if not ok.all():
        v = float(slots[~ok][0])
        return _error_batch(rb, i, f"implausible-values: decrypts to {v:.6g}, outside the {bounds[0]:.6g}.."
                                   f"{bounds[1]:.6g} its ops can give (another key's ciphertext, or forged)")
    if flood_std:
        from hecore.flooding import flood
        slots = flood(slots, flood_std / abs(r["post_scale"]))
    dt = time.perf_counter() - t
    n = h * w
    yy, xx = np.divmod(np.arange(n), w)
    first = np.zeros(n)
    first[0] = 1.0
    cols = {name: constant_column(r[name], n, DECRYPTED.field(name).type) for name in
            ("image_id", "image_height", "image_width", "image_channels", "layout", "strategy", "security",
             "preset", "channel")}
    cols.update(ops=pa.array([r["ops"]] * n, type=pa.list_(pa.string())),
                py=pa.array(r["y"] + yy, type=pa.int32()), px=pa.array(r["x"] + xx, type=pa.int32()),
                raw=pa.array(slots.reshape(-1)), cts=pa.array(first.astype(np.int64)),
                ct_bytes=pa.array((first * len(r["ct"])).astype(np.int64)),
                encrypt_seconds=pa.array(first * r["encrypt_seconds"]),
                process_seconds=pa.array(first * r["process_seconds"]), decrypt_seconds=pa.array(first * dt),
                error=pa.nulls(n, pa.string()))
    return pa.RecordBatch.from_arrays([cols[n] for n in DECRYPTED.names], schema=DECRYPTED)


def _rejected_image(first: dict, reason: str, detail: str, table: pa.Table) -> pa.Table:
    row = {k: first.get(k) for k in ("image_id", "layout", "strategy", "security", "preset", "ops")}
    row.update(height=first["image_height"], width=first["image_width"], channels=first["image_channels"],
               ciphertexts=int(np.sum(table.column("cts").to_numpy())),
               ciphertext_bytes=int(np.sum(table.column("ct_bytes").to_numpy())),
               reject_reason=reason, reject_detail=detail)
    return pa.Table.from_pylist([row], schema=IMAGES)


def assemble_group(table: pa.Table, *, max_values: int = 3 * 2**26) -> pa.Table:
    """All decrypted values of one image -> one row with the image's true values (float64), or a row
    saying why the image is rejected (a ciphertext refused or implausible, values missing).

    The rows were checked before (jobs/rowcheck.py: complete, consistent, within the owner's pixel
    limit); ``max_values`` bounds the allocation once more, whatever the rows claim."""
    from hecore.ops.spec import recorded_finish

    first = table.slice(0, 1).to_pylist()[0]
    errors = [e for e in table.column("error").to_pylist() if e]
    if errors:
        reason, _, detail = errors[0].partition(": ")
        return _rejected_image(first, reason, f"{detail} ({len(errors)} of its ciphertexts)", table)
    h, w, c = first["image_height"], first["image_width"], first["image_channels"]
    if not (0 < h and 0 < w and c in (1, 3)) or h * w * c > max_values or h * w * c > 2 * table.num_rows + 64:
        return _rejected_image(first, "bad-geometry", f"{w}x{h}x{c} from {table.num_rows} decrypted values", table)
    raw = np.full((h, w, c), np.nan)
    py, px, ch = (table.column(k).to_numpy() for k in ("py", "px", "channel"))
    if (py < 0).any() or (py >= h).any() or (px < 0).any() or (px >= w).any() or (ch < 0).any() or (ch >= c).any():
        return _rejected_image(first, "bad-geometry", "decrypted values outside the image", table)
    raw[py, px, ch] = table.column("raw").to_numpy()
    if np.isnan(raw).any():
        missing = int(np.isnan(raw).sum())
        return _rejected_image(first, "incomplete-image", f"{missing} of {raw.size} pixel values have no ciphertext",
                               table)
    finish = recorded_finish(first["ops"], first["preset"])
    values = finish.apply(raw)
    unsnapped = raw * finish.post_scale_float
    row = {k: first[k] for k in ("image_id", "layout", "strategy", "security", "preset", "ops")}
    row.update(height=h, width=w, channels=c, values=values.astype(np.float64).tobytes(),
               unsnapped=unsnapped.astype(np.float64).tobytes(),
               ciphertexts=int(np.sum(table.column("cts").to_numpy())),
               ciphertext_bytes=int(np.sum(table.column("ct_bytes").to_numpy())),
               encrypt_seconds=float(np.sum(table.column("encrypt_seconds").to_numpy())),
               process_seconds=float(np.sum(table.column("process_seconds").to_numpy())),
               decrypt_seconds=float(np.sum(table.column("decrypt_seconds").to_numpy())),
               reject_reason=None, reject_detail=None, result_sha256=result_sha256(values))
    return pa.Table.from_pylist([row], schema=IMAGES)
