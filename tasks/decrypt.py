"""The decrypt stage (the key owner's job): ciphertext rows in, one row of decrypted values per ciphertext
out (its tile's block of raw values, or one value in the pixel layout), then one row per image with its
blocks put in place.

A ciphertext is decrypted in the task that read it (the ciphertext as its row check loaded it,
tasks.handoff) into one float64 block of its tile channel's values.  Decrypt by image puts the blocks of
an image together in that same task (tasks/imagedecrypt.py); otherwise they leave the task, and what is
grouped by image is one row per tile channel, not one per pixel value (which cost a shuffle of every
pixel and most of the job's time)."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hecore.images import DEFAULT_MAX_PIXELS
from hecore.layouts import Layout
from hecore.ops.spec import recorded_finish
from schemas.stages import DECRYPTED, IMAGES

from . import handoff
from .decode import result_sha256
from .rows import pc_unique, pixel_positions
from .worker import worker_state


def build_decryptor(keys):
    """A worker's decryptor and the rejects reason of its library's refusals, from the broadcast key set
    (:meth:`hecore.schemes.KeySet.for_decryption`: the owner's secret, on the owner's own executors)."""
    return keys.decryptor(), keys.scheme.refused_reason


def plausible_range(ops: list[str], preset: str | None = None) -> tuple[float, float]:
    """The raw values (before ``post_scale``) the op chain can produce from pixels, widened by a margin far
    above the decryption error, in the scheme of ``preset``: a value outside it was not made from an
    image by these ops (a ciphertext of another key, or forged)."""
    from hecore.schemes import scheme_for_preset

    return scheme_for_preset(preset).plausible_range(list(ops))


def _error_batch(rb: pa.RecordBatch, i: int, error: str) -> pa.RecordBatch:
    """One DECRYPTED row saying that ciphertext ``i`` of ``rb`` could not be used (no values)."""
    r = rb.slice(i, 1).to_pylist()[0]
    row = {name: r.get(name) for name in DECRYPTED.names if name in r}
    row.update(y=-1, x=-1, h=0, w=0, raw=b"", cts=1, ct_bytes=len(r["ct"] or b""), decrypt_seconds=0.0, error=error)
    return pa.RecordBatch.from_pylist([row], schema=DECRYPTED)


def blocks_column(blocks) -> pa.Array:
    """A binary column of float64 blocks (each row-major), built from one buffer: a list of arrays, or a
    2-D array of one equal-size block per row."""
    if isinstance(blocks, np.ndarray):
        n, k = blocks.shape
        offsets = np.arange(n + 1, dtype=np.int32) * (8 * k)
        data = np.ascontiguousarray(blocks, dtype=np.float64)
    else:
        n = len(blocks)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum([b.size * 8 for b in blocks], out=offsets[1:])
        data = np.concatenate([np.asarray(b, dtype=np.float64).reshape(-1) for b in blocks]) if blocks else np.zeros(0)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _values_batch(rb: pa.RecordBatch, keep: np.ndarray, y, x, h, w, blocks,
                  seconds: np.ndarray, decrypted: bool = True) -> pa.RecordBatch:
    """DECRYPTED rows of the ciphertexts ``keep`` of ``rb``: their metadata, block positions and values
    (``decrypted`` False: blocks of NaN for ciphertexts a spot check left undecrypted, counted as 0)."""
    n = len(keep)
    whole = n == rb.num_rows            # every row kept (the usual case): the columns as they are, no copy
    idx = None if whole else pa.array(keep, type=pa.int64())
    cols = {name: rb.column(name) if whole else rb.column(name).take(idx)
            for name in DECRYPTED.names if name in rb.schema.names}
    lengths = pc.binary_length(rb.column("ct"))         # the lengths alone: the ciphertexts are never copied
    cols.update(y=pa.array(y, type=pa.int32()), x=pa.array(x, type=pa.int32()), h=pa.array(h, type=pa.int32()),
                w=pa.array(w, type=pa.int32()), raw=blocks_column(blocks),
                cts=pa.array(np.full(n, 1 if decrypted else 0, dtype=np.int64)),
                ct_bytes=(lengths if whole else lengths.take(idx)).cast(pa.int64()),
                decrypt_seconds=pa.array(seconds, type=pa.float64()), error=pa.nulls(n, pa.string()))
    return pa.RecordBatch.from_arrays([cols[n].cast(DECRYPTED.field(n).type) for n in DECRYPTED.names],
                                      schema=DECRYPTED)


def decrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast,
                      rebuilds=None, tasks=None, flood_std: float = 0.0, spots_only=None,
                      binding=None) -> Iterator[pa.RecordBatch]:
    """Decrypt rows; ``flood_std`` > 0 adds noise flooding (hecore.flooding) of that standard
    deviation, in pixel units, to every decrypted value.  ``spots_only``: the owner's spot samples (as for
    :func:`tasks.spots.spot_sample`): only the ciphertexts holding values the spot checks compare are
    decrypted, the others give blocks of NaN (:func:`_sampled_rows`).  ``binding``: a run encrypted with
    ``--bind`` (:class:`hecore.binding.Binding`): each packed ciphertext's check values are compared too.

    A ciphertext SEAL refuses here (it passed the checks before, so its file changed since), or whose
    values no image could give (:func:`plausible_range`, judged before any flooding), becomes one row
    with ``error`` set instead of its values; its image is then rejected, not the task."""
    ctx, refused = worker_state(token, broadcast, build_decryptor, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    context = getattr(ctx, "_he", None)
    masks: dict = {}
    for rb in batches:
        if rb.num_rows == 0:
            continue
        # the row checks of this task loaded the ciphertexts already, on this context (tasks.handoff)
        given = handoff.take(rb, context)
        if spots_only is not None:
            rb, given, skipped = _sampled_rows(rb, given, spots_only, masks)
            if skipped is not None:
                yield skipped
            if rb.num_rows == 0:
                continue
        bounds = plausible_range(rb.column("ops")[0].as_py() or [], rb.column("preset")[0].as_py())  # one per run
        if {Layout.parse(v) for v in pc_unique(rb.column("layout"))} == {Layout.PIXEL}:
            yield from _decrypt_pixel_rows(ctx, rb, bounds, refused, flood_std)
        elif binding is not None and binding.table:
            yield from _decrypt_slot_rows(ctx, rb, bounds, refused, flood_std,
                                          given[1] if given is not None else None, binding)
        elif binding is not None and binding.offsets:
            yield from _decrypt_offset_rows(ctx, rb, bounds, refused, flood_std,
                                            given[1] if given is not None else None, binding)
        elif binding is not None:
            yield from _decrypt_bound_rows(ctx, rb, bounds, refused, flood_std,
                                           given[1] if given is not None else None, binding)
        else:
            yield from _decrypt_packed_rows(ctx, rb, bounds, refused, flood_std,
                                            loaded=given[1] if given is not None else None)


def _sampled_rows(rb: pa.RecordBatch, given, spots, masks: dict):
    """``rb`` cut into the rows whose blocks hold a value the image's spot check compares (with their
    handed-over ciphertexts) and one batch of NaN blocks, never decrypted, for the others (None when none)."""
    from .spots import spot_mask, spot_sample

    packed = {Layout.parse(v) for v in pc_unique(rb.column("layout"))} != {Layout.PIXEL}
    if packed:
        y, x, h, w = (rb.column(k).to_numpy(zero_copy_only=False).astype(np.int64) for k in ("y", "x", "h", "w"))
    else:
        pos = pixel_positions(rb)
        y, x = pos[:, 0].astype(np.int64), pos[:, 1].astype(np.int64)
        h = w = np.ones(rb.num_rows, dtype=np.int64)
    ops, preset = rb.column("ops")[0].as_py() or [], rb.column("preset")[0].as_py()
    need = np.zeros(rb.num_rows, dtype=bool)
    for i, image in enumerate(rb.column("image_id").to_pylist()):
        if image not in masks:
            masks[image] = spot_mask(spot_sample(spots, image), ops, preset)
        mask = masks[image]
        need[i] = mask is not None and bool(mask[y[i]:y[i] + h[i], x[i]:x[i] + w[i]].any())
    skip = np.flatnonzero(~need)
    if not skip.size:
        return rb, given, None
    blocks = [np.full((int(h[i]), int(w[i])), np.nan) for i in skip]
    skipped = _values_batch(rb, skip, y[skip], x[skip], h[skip], w[skip], blocks, np.zeros(skip.size),
                            decrypted=False)
    keep = np.flatnonzero(need)
    if given is not None:
        rows, loaded = given
        given = ([rows[i] for i in keep], [loaded[i] for i in keep] if loaded is not None else None)
    return rb.take(pa.array(keep, type=pa.int64())), given, skipped


def _decrypt_pixel_rows(ctx, rb: pa.RecordBatch, bounds, refused: str, flood_std: float = 0.0):
    """Pixel layout: one value per ciphertext, a 1x1 block at its pixel.  A ciphertext the library refuses
    or whose value is implausible becomes an error row; the batch's other rows are decrypted all the same
    (they may be of other images: the row checks' task decrypts before the images are judged)."""
    from hecore.ciphertexts import CiphertextBatch
    from hecore.flooding import flooding_noise

    n = rb.num_rows
    errors: dict[int, str] = {}
    t = time.perf_counter()
    try:        # float64 whatever the scheme (TFHE decrypts to the bytes themselves)
        raw = np.asarray(ctx.decrypt_pixels(CiphertextBatch.from_arrow(rb.column("ct"))),
                         dtype=np.float64)
    except Exception:  # noqa: BLE001 -- the library's refusal of one of them: find which, one by one
        raw = np.zeros(n)
        for i in range(n):
            try:
                raw[i] = ctx.decrypt_pixels(CiphertextBatch.from_arrow(rb.column("ct").slice(i, 1)))[0]
            except Exception as e:  # noqa: BLE001
                errors[i] = f"{refused}: {str(e).splitlines()[0][:160]}"
    for i in np.flatnonzero(~((raw >= bounds[0]) & (raw <= bounds[1]))):
        errors.setdefault(int(i), f"implausible-values: decrypts to {raw[i]:.6g}, outside the {bounds[0]:.6g}.."
                                  f"{bounds[1]:.6g} its ops can give (another key's ciphertext, or forged)")
    for i, error in sorted(errors.items()):
        yield _error_batch(rb, i, error)
    keep = np.asarray([i for i in range(n) if i not in errors], dtype=np.int64)
    if not keep.size:
        return
    raw = raw[keep]
    if flood_std:      # raw x post_scale is the pixel value: scale the noise into raw units
        raw = raw + flooding_noise(len(raw), flood_std) / np.abs(rb.column("post_scale").to_numpy()[keep])
    dt = (time.perf_counter() - t) / n
    pos = pixel_positions(rb)[keep]
    ones = np.ones(keep.size, dtype=np.int32)
    yield _values_batch(rb, keep, pos[:, 0], pos[:, 1], ones, ones, raw.reshape(-1, 1), np.full(keep.size, dt))


def _decrypt_packed_rows(ctx, rb: pa.RecordBatch, bounds, refused: str, flood_std: float = 0.0,
                         loaded: list | None = None):
    """Packed layouts: each ciphertext -> the block of its tile channel's valid values (or one error row);
    ``loaded``: the ciphertexts as the row checks loaded them on ``ctx`` (None where they did not)."""
    from hecore.layouts.packed import decrypt_block
    from hecore.ops.spec import recorded_stride

    cols = {k: rb.column(k).to_numpy(zero_copy_only=False)
            for k in ("tile_h", "tile_w", "halo", "h", "w", "y", "x", "post_scale")}
    complex_packing = [Layout.parse(v).complex_packing for v in rb.column("layout").to_pylist()]
    stride = recorded_stride(rb.column("ops")[0].as_py() or [], rb.column("preset")[0].as_py())  # one per run
    ct = rb.column("ct")
    keep, blocks, seconds = [], [], []
    for i in range(rb.num_rows):
        t = time.perf_counter()
        h, w = int(cols["h"][i]), int(cols["w"][i])
        try:
            c = loaded[i] if loaded is not None and loaded[i] is not None else ct[i].as_buffer()
            slots = decrypt_block(ctx, c, int(cols["tile_h"][i]), int(cols["tile_w"][i]),
                                  int(cols["halo"][i]), complex_packing[i], stride)[:h, :w]
        except Exception as e:  # noqa: BLE001 -- the library refused it
            yield _error_batch(rb, i, f"{refused}: {str(e).splitlines()[0][:160]}")
            continue
        refusal, slots = _judged(rb, i, slots, bounds, flood_std, float(cols["post_scale"][i]))
        if refusal is not None:
            yield refusal
            continue
        keep.append(i)
        blocks.append(slots)
        seconds.append(time.perf_counter() - t)
    if keep:
        k = np.asarray(keep)
        yield _values_batch(rb, k, cols["y"][k], cols["x"][k], cols["h"][k], cols["w"][k], blocks,
                            np.asarray(seconds))


def _judged(rb: pa.RecordBatch, i: int, slots: np.ndarray, bounds, flood_std: float, post_scale: float):
    """``(error row, None)`` for row ``i``'s values when no image could give them (:func:`plausible_range`),
    else ``(None, the values)``, noise-flooded when asked."""
    from hecore.flooding import flood

    ok = (slots >= bounds[0]) & (slots <= bounds[1])
    if not ok.all():
        v = float(slots[~ok][0])
        return _error_batch(rb, i, f"implausible-values: decrypts to {v:.6g}, outside the {bounds[0]:.6g}.."
                                   f"{bounds[1]:.6g} its ops can give (another key's ciphertext, or forged)"), None
    return None, (flood(slots, flood_std / abs(post_scale)) if flood_std else slots)


def _bound_columns(rb: pa.RecordBatch) -> tuple[dict, tuple[int, int, int]]:
    """The columns a bound run's rows are decrypted and checked with, and its tile's height, width and halo
    (one run: one tile)."""
    cols = {k: rb.column(k).to_numpy(zero_copy_only=False)
            for k in ("tile_h", "tile_w", "halo", "h", "w", "y", "x", "post_scale", "channel", "tile_y", "tile_x")}
    return cols, (int(cols["tile_h"][0]), int(cols["tile_w"][0]), int(cols["halo"][0]))


def _each_decrypted(rb: pa.RecordBatch, loaded, refused: str, decrypt):
    """``decrypt(i, ciphertext)`` of every row (the row checks' loaded ciphertext where there is one), an error
    batch yielded for each the library refuses; returns ``(row -> values, row -> seconds)``."""
    ct = rb.column("ct")
    decrypted, seconds = {}, {}
    for i in range(rb.num_rows):
        t = time.perf_counter()
        try:
            decrypted[i] = decrypt(i, loaded[i] if loaded is not None and loaded[i] is not None else ct[i].as_buffer())
        except Exception as e:  # noqa: BLE001 -- the library refused it
            yield _error_batch(rb, i, f"{refused}: {str(e).splitlines()[0][:160]}")
        seconds[i] = time.perf_counter() - t
    return decrypted, seconds


def _places(rb: pa.RecordBatch, cols: dict, rows: list) -> list[tuple]:
    """``(image id, channel, tile row, tile column)`` of the rows ``rows``: where each ciphertext belongs."""
    ids = rb.column("image_id").to_pylist()
    return [(ids[i], int(cols["channel"][i]), int(cols["tile_y"][i]), int(cols["tile_x"][i])) for i in rows]


def _decrypt_bound_rows(ctx, rb: pa.RecordBatch, bounds, refused: str, flood_std: float, loaded, binding):
    """Packed rows of a run encrypted with ``--bind``: each ciphertext's real parts are its tile's values (as
    :func:`_decrypt_packed_rows` gives them), its imaginary parts the check values the chain made of its
    place's (:mod:`hecore.binding`), compared for every row of the batch at once; a row whose values are not
    its place's is an ``integrity`` error."""
    from functools import partial

    from hecore.ops.spec import recorded_reference_known, recorded_shape

    cols, (th, tw, halo) = _bound_columns(rb)
    decrypted, seconds = yield from _each_decrypted(
        rb, loaded, refused,
        lambda i, c: np.asarray(ctx.decrypt_complex(c, (th + 2 * halo) * (tw + 2 * halo))).reshape(th + 2 * halo,
                                                                                                   tw + 2 * halo))
    rows = sorted(decrypted)
    t = time.perf_counter()
    places = _places(rb, cols, rows)
    specs, preset = rb.column("ops")[0].as_py() or [], rb.column("preset")[0].as_py()
    reference = partial(recorded_reference_known, specs=specs, preset=preset)
    missed = binding.mismatches(places, [decrypted[i].imag for i in rows], tile=(th, tw), halo=halo,
                                reference=reference, post_scales=[float(cols["post_scale"][i]) for i in rows],
                                channelwise=recorded_shape(specs, preset, 1, 1, 3)[2] == 3)
    share = (time.perf_counter() - t) / max(1, len(rows))
    values = [decrypted[i].real[halo:halo + th, halo:halo + tw] for i in rows]
    yield from _checked_rows(rb, cols, rows, values, missed, [seconds[i] + share for i in rows], bounds, flood_std,
                             f"{{}} of its {binding.checks((th, tw))} check values under the encryption differ")


def _checked_rows(rb: pa.RecordBatch, cols: dict, rows: list, values: list, missed: list, seconds: list, bounds,
                  flood_std: float, wrong_values: str):
    """Bound rows ``rows`` of ``rb`` once their checks ran: each one's tile ``values`` (raw), how many checks it
    ``missed`` (a row with any is an ``integrity`` error, ``wrong_values`` saying what, ``{}`` the count), and
    the ``seconds`` it took; the others judged (:func:`_judged`) and given as one values batch."""
    keep, blocks, spent = [], [], []
    for i, raw, wrong, took in zip(rows, values, missed, seconds):
        if wrong:
            yield _error_batch(rb, i, f"integrity: the ciphertext of channel {cols['channel'][i]}, tile "
                                      f"({cols['tile_y'][i]}, {cols['tile_x'][i]}) is not this place's: "
                                      f"{wrong_values.format(wrong)} (a ciphertext swapped, replayed or of another "
                                      "run, or ops that are not the chain's)")
            continue
        refusal, slots = _judged(rb, i, raw[:int(cols["h"][i]), :int(cols["w"][i])], bounds, flood_std,
                                 float(cols["post_scale"][i]))
        if refusal is not None:
            yield refusal
            continue
        keep.append(i)
        blocks.append(slots)
        spent.append(took)
    if keep:
        k = np.asarray(keep)
        yield _values_batch(rb, k, cols["y"][k], cols["x"][k], cols["h"][k], cols["w"][k], blocks,
                            np.asarray(spent))


def _decrypt_offset_rows(ctx, rb: pa.RecordBatch, bounds, refused: str, flood_std: float, loaded, binding):
    """Packed rows of a run bound by keyed offsets (:meth:`hecore.binding.Binding.without_offsets`): each
    ciphertext's tile values less the chain's linear part of its place's offsets, compared for every row of the
    batch at once; a row whose values then lie off the chain's grid (BFV/BGV: outside its range) is an
    ``integrity`` error."""
    from hecore.binding import strides
    from hecore.layouts.packed import decrypt_block
    from hecore.ops.spec import parse_ops

    cols, (th, tw, halo) = _bound_columns(rb)
    complex_packing = [Layout.parse(v).complex_packing for v in rb.column("layout").to_pylist()]
    try:
        ops = parse_ops(list(rb.column("ops")[0].as_py() or []))
    except ValueError:
        ops = None
    stride = strides(ops) if ops else 1          # a downsample's results: every F-th slot of every F-th row
    decrypted, seconds = yield from _each_decrypted(
        rb, loaded, refused, lambda i, c: decrypt_block(ctx, c, th, tw, halo, complex_packing[i], stride))
    rows = sorted(decrypted)
    t = time.perf_counter()
    places = _places(rb, cols, rows)
    values, missed = (binding.without_offsets(places, [decrypted[i] for i in rows], ops, tile=(th, tw), halo=halo)
                      if ops is not None else ([decrypted[i] for i in rows], [th * tw] * len(rows)))
    share = (time.perf_counter() - t) / max(1, len(rows))
    where = "outside the chain's range" if binding.modulus else "off the chain's grid"
    yield from _checked_rows(rb, cols, rows, values, missed, [seconds[i] + share for i in rows], bounds, flood_std,
                             f"{{}} of its {th * tw} values lie {where} once its place's keyed offsets are removed")


def _decrypt_slot_rows(ctx, rb: pa.RecordBatch, bounds, refused: str, flood_std: float, loaded, binding):
    """Packed rows of a run bound by keyed check slots (:meth:`hecore.binding.Binding.from_slots`): each
    ciphertext's slots put back in its place's order, its check slots compared with the recorded table's outputs
    on its place's check inputs; a row where any differs is an ``integrity`` error."""
    cols, (th, tw, halo) = _bound_columns(rb)
    slots = ctx.params.slots
    decrypted, seconds = yield from _each_decrypted(rb, loaded, refused,
                                                    lambda i, c: np.asarray(ctx.decrypt_slots(c, slots)))
    rows = sorted(decrypted)
    t = time.perf_counter()
    block = (th + 2 * halo, tw + 2 * halo)
    values, missed = binding.from_slots(_places(rb, cols, rows), [decrypted[i] for i in rows],
                                        list(rb.column("ops")[0].as_py() or []), block=block)
    share = (time.perf_counter() - t) / max(1, len(rows))
    yield from _checked_rows(rb, cols, rows, [v[halo:halo + th, halo:halo + tw] for v in values], missed,
                             [seconds[i] + share for i in rows], bounds, flood_std,
                             f"{{}} of its {slots - block[0] * block[1]} check slots differ from the chain's table "
                             "on its place's check inputs")


def _rejected(first: dict, reason: str, detail: str, table: pa.Table) -> tuple[dict, None]:
    row = {k: first.get(k) for k in ("image_id", "layout", "strategy", "security", "preset", "ops")}
    row.update(height=first["image_height"], width=first["image_width"], channels=first["image_channels"],
               ciphertexts=int(np.sum(table.column("cts").to_numpy())),
               ciphertext_bytes=int(np.sum(table.column("ct_bytes").to_numpy())),
               reject_reason=reason, reject_detail=detail)
    return row, None


def _offsets(chunk: pa.Array) -> np.ndarray:
    return np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]


def _block_lengths(column: pa.ChunkedArray) -> np.ndarray:
    """The byte length of every value of a binary column (nulls count 0)."""
    parts = [np.diff(_offsets(c)) for c in column.chunks if len(c)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _flat_values(column: pa.ChunkedArray) -> np.ndarray:
    """Every float64 of a binary column of blocks, in row order (the blocks' bytes are contiguous per chunk)."""
    parts = []
    for chunk in column.chunks:
        if len(chunk):
            o = _offsets(chunk)
            parts.append(np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[o[0]:o[-1]].view(np.float64))
    return np.concatenate(parts) if parts else np.zeros(0)


def assemble(table: pa.Table, *, max_values: int = 3 * DEFAULT_MAX_PIXELS, match_key: bool = True,
             partial: bool = False) -> tuple[dict, np.ndarray | None]:
    """All decrypted blocks of one image -> its IMAGES row (without ``raw``) and its raw values (float64
    H x W x C, before the ops' post-scale); or a row saying why the image is rejected (a ciphertext refused
    or implausible, values missing or out of place) and None.  ``match_key``: compute ``result_sha256``
    (what finds the original without an owner map).  ``partial``: blocks a spot check left undecrypted
    (NaN, :func:`decrypt_partition`'s ``spots_only``) are 0 in the result, not a reject.

    The rows were checked before (jobs/runtime/inputcheck.py: complete, consistent, within the owner's pixel
    limit); ``max_values`` bounds the allocation once more, whatever the rows claim."""
    first = table.slice(0, 1).to_pylist()[0]
    errors = [e for e in table.column("error").to_pylist() if e]
    if errors:
        reason, _, detail = errors[0].partition(": ")
        return _rejected(first, reason, f"{detail} ({len(errors)} of its ciphertexts)", table)
    h, w, c = first["image_height"], first["image_width"], first["image_channels"]
    lengths = _block_lengths(table.column("raw")).astype(np.int64)
    given = int(lengths.sum()) // 8
    if not (0 < h and 0 < w and c in (1, 3)) or h * w * c > max_values or h * w * c > 2 * given + 64:
        return _rejected(first, "bad-geometry", f"{w}x{h}x{c} from {given} decrypted values", table)
    y, x, bh, bw, ch = (table.column(k).to_numpy() for k in ("y", "x", "h", "w", "channel"))
    if ((y < 0) | (x < 0) | (bh < 1) | (bw < 1) | (y + bh > h) | (x + bw > w) | (ch < 0) | (ch >= c)).any() \
            or (lengths != 8 * bh.astype(np.int64) * bw).any():
        return _rejected(first, "bad-geometry", "decrypted values outside the image", table)
    unset = np.inf if partial else np.nan          # partial: NaN is a block left undecrypted, inf one never given
    raw = np.full((h, w, c), unset)
    flat = _flat_values(table.column("raw"))
    if (bh == 1).all() and (bw == 1).all():          # the pixel layout: one value per ciphertext
        raw[y, x, ch] = flat
    else:
        ends = np.cumsum(lengths // 8)
        for i in range(len(ends)):
            raw[y[i]:y[i] + bh[i], x[i]:x[i] + bw[i], ch[i]] = flat[ends[i] - bh[i] * bw[i]:ends[i]].reshape(bh[i], bw[i])
    if partial:
        raw[np.isnan(raw)] = 0.0
    gaps = np.isinf(raw) if partial else np.isnan(raw)
    if gaps.any():
        missing = int(gaps.sum())
        return _rejected(first, "incomplete-image", f"{missing} of {raw.size} pixel values have no ciphertext", table)
    row = {k: first[k] for k in ("image_id", "layout", "strategy", "security", "preset", "ops")}
    row.update(height=h, width=w, channels=c,
               ciphertexts=int(np.sum(table.column("cts").to_numpy())),
               ciphertext_bytes=int(np.sum(table.column("ct_bytes").to_numpy())),
               encrypt_seconds=float(np.sum(table.column("encrypt_seconds").to_numpy())),
               process_seconds=float(np.sum(table.column("process_seconds").to_numpy())),
               decrypt_seconds=float(np.sum(table.column("decrypt_seconds").to_numpy())),
               reject_reason=None, reject_detail=None,
               result_sha256=(result_sha256(recorded_finish(first["ops"], first["preset"]).apply(raw))
                              if match_key and not partial else None))
    return row, raw


def assemble_group(table: pa.Table, *, max_values: int = 3 * DEFAULT_MAX_PIXELS) -> pa.Table:
    """:func:`assemble` as one IMAGES row (``raw`` as bytes; null for a rejected image)."""
    row, raw = assemble(table, max_values=max_values)
    row["raw"] = raw.tobytes() if raw is not None else None
    return pa.Table.from_pylist([row], schema=IMAGES)
