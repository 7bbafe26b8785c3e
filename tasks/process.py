"""The process stage: ciphertext rows in, processed ciphertext rows out, with public keys only.

Pixel layout: pointwise ops on the serialized bytes (:mod:`hecore.ops.pixel`), and a windowed op's (mean
filter, convolution) scatter (each ciphertext to its tile and the neighbours whose halo needs it) and
per-tile window sums.
Packed layouts: the whole op chain within each ciphertext (:mod:`hecore.ops.packed`).  Matching: one
image's ciphertexts joined with the query's, into one encrypted distance per metric.
"""
from __future__ import annotations

import os
import time
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hecore.layouts import Layout
from hecore.schemes.seal import SEAL
from hecore.schemes.tfhe import PROCESSED, TFHE
from schemas.stages import HALO_COLUMNS
from schemas.tables import CIPHERTEXTS

from . import handoff
from .checksums import ct_checksums
from .rows import RowMeta, ciphertext_rows, constant_column, pc_unique, pixel_positions, replace_columns, single_value
from .worker import work_failed, worker_state


def build_ct_format(keys):
    """A worker's view of the public keys (a :class:`hecore.schemes.KeySet`): the ciphertext byte format the
    byte-level ops need."""
    from hecore.seal.kernels import warm_up

    warm_up()
    return keys.context().ct_format


def pointwise_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, spec: str,
                        run_id: str, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    from hecore.ciphertexts import CiphertextBatch
    from hecore.ops.pixel import apply_pointwise
    from hecore.ops.spec import parse_op

    fmt = worker_state(token, broadcast, build_ct_format, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    op = parse_op(spec)
    for rb in batches:
        if rb.num_rows == 0:
            continue
        post_scale = float(single_value(rb, "post_scale"))
        scale_bits = int(single_value(rb, "scale_bits"))

        def work(part: pa.RecordBatch, post_scale=post_scale, scale_bits=scale_bits) -> pa.Array:
            batch = CiphertextBatch.from_arrow(part.column("ct"))
            return apply_pointwise(batch, fmt, op, pixel_positions(part), post_scale, scale_bits).to_arrow()

        t = time.perf_counter()
        rb, new_ct = _whole_or_row_by_row(rb, work)
        if rb.num_rows == 0:
            continue
        dt = (time.perf_counter() - t) / rb.num_rows
        yield replace_columns(
            rb, ct=new_ct, ct_xxh3=ct_checksums(new_ct), run_id=constant_column(run_id, rb.num_rows, pa.string()),
            ops=pa.array([o + [spec] for o in rb.column("ops").to_pylist()], type=pa.list_(pa.string())),
            post_scale=constant_column(post_scale * op.post_scale_factor, rb.num_rows, pa.float64()),
            process_seconds=pa.array(rb.column("process_seconds").to_numpy() + dt, type=pa.float64()))


def _whole_or_row_by_row(rb: pa.RecordBatch, work) -> tuple[pa.RecordBatch, pa.Array]:
    """``work`` on the whole batch; when it fails, row by row, so that the rows it fails on become
    rejects (:func:`work_failed`) and the others go on.  The rows kept and their new ciphertexts."""
    try:
        return rb, work(rb)
    except Exception:  # noqa: BLE001 -- which row failed is found below, and reported there
        pass
    kept, cts = [], []
    for i, row in enumerate(rb.to_pylist()):
        try:
            cts.append(work(rb.slice(i, 1)))
        except Exception as e:  # noqa: BLE001 -- the row's reject names the error
            if not work_failed(row, e):
                raise
            continue
        kept.append(i)
    if not kept:
        return rb.slice(0, 0), pa.array([], type=pa.binary())
    return rb.take(pa.array(kept)), pa.concat_arrays(cts)


def build_evaluator(keys):
    """A worker's evaluator of the broadcast keys (a :class:`hecore.schemes.KeySet`): SEAL's public context
    with its relinearisation and rotation keys, or TFHE's server key."""
    return keys.evaluator()


def packed_geometry(r: dict):
    from hecore.ops.packed import PackedGeometry

    return PackedGeometry(r["tile_h"], r["tile_w"], r["halo"], r["y"], r["x"], r["image_height"], r["image_width"],
                          complex_packing=Layout.parse(r["layout"]).complex_packing)


def packed_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, specs: list[str],
                     run_id: str, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Apply the op chain to every packed ciphertext (one tile channel each), row by row.  A chain of 8-bit
    ops (threshold, min, max, lut; a row whose earlier ops were such a chain) is one BFV table
    (:mod:`hecore.ops.lut`)."""
    from hecore.ops.lut import evaluate_chain
    from hecore.ops.packed import apply_op
    from hecore.ops.spec import is_table_chain, parse_ops

    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    ops = None if is_table_chain(specs) else parse_ops(specs)
    context = getattr(ev, "_he", None)
    for rb in batches:
        if rb.num_rows == 0:
            continue
        cts, scales, secs, done = [], [], [], []
        # the row checks of this task converted the rows and loaded their ciphertexts already (tasks.handoff)
        given = handoff.take(rb, context)
        rows, loaded = given if given is not None else (rb.drop_columns(["ct"]).to_pylist(), None)
        stored = rb.column("ct")
        for i, r in enumerate(rows):
            t = time.perf_counter()
            try:
                original = stored[i].as_buffer()
                c = loaded[i] if loaded is not None and loaded[i] is not None else ev.load(original)
                ps = r["post_scale"]
                if ops is None or is_table_chain(r["ops"]):
                    c = evaluate_chain(ev, c, specs)
                else:
                    geom = packed_geometry(r)
                    for op in ops:
                        c, ps = apply_op(ev, c, op, geom, ps)
                cts.append(ev.dump_like(c, original))     # stored as the original was (hecore.seal.atrest)
            except Exception as e:  # noqa: BLE001 -- SEAL's refusals (a forged scale: "values too large") vary
                if not work_failed(r, e):
                    raise
                continue
            scales.append(ps)
            secs.append(r["process_seconds"] + time.perf_counter() - t)
            done.append(i)
        if len(done) < len(rows):
            if not done:
                continue
            rb, rows = rb.take(pa.array(done)), [rows[i] for i in done]
        new_ct = pa.array(cts, type=pa.binary())
        yield replace_columns(
            rb, ct=new_ct, ct_xxh3=ct_checksums(new_ct), run_id=constant_column(run_id, rb.num_rows, pa.string()),
            ops=pa.array([r["ops"] + list(specs) for r in rows], type=pa.list_(pa.string())),
            post_scale=pa.array(scales, type=pa.float64()), process_seconds=pa.array(secs, type=pa.float64()),
            **(_resized(rows, ops) if ops is not None and any(op.packed_stride > 1 for op in ops) else {}))


#: The geometry columns of a row (the image's size, its tile's, where it lies).
GEOMETRY = ("image_height", "image_width", "tile_h", "tile_w", "y", "x", "h", "w")


def _resized(rows: list[dict], ops) -> dict:
    """The geometry columns of packed rows after ``ops`` that shrink the image (a downsample): the image, the
    tile and its place, in output pixels (a tile's sides are multiples of the factor: each maps to one)."""
    out = {k: [] for k in GEOMETRY}
    for r in rows:
        (H, W, _), (th, tw) = (r["image_height"], r["image_width"], r["image_channels"]), (r["tile_h"], r["tile_w"])
        for op in ops:
            H, W, _ = op.out_shape(H, W, 1)
            th, tw = op.out_tile((th, tw), True)
        y, x = r["tile_y"] * th, r["tile_x"] * tw
        for k, v in zip(GEOMETRY, (H, W, th, tw, y, x, min(th, H - y), min(tw, W - x))):
            out[k].append(v)
    return {k: pa.array(v, type=pa.int32()) for k, v in out.items()}


def scatter_partition(batches: Iterator[pa.RecordBatch], *, spec: str) -> Iterator[pa.RecordBatch]:
    """Send each pixel ciphertext to the output tiles whose windows need it (:meth:`WindowOp.target_tiles`: a
    filter's own tile and the neighbours whose halo needs it; a downsample's one output tile)."""
    from hecore.ops.spec import parse_op

    op = parse_op(spec)
    for rb in batches:
        if rb.num_rows == 0:
            continue
        pos = pixel_positions(rb)
        th, tw = rb.column("tile_h").to_numpy(), rb.column("tile_w").to_numpy()
        hh, ww = rb.column("image_height").to_numpy(), rb.column("image_width").to_numpy()
        take, tys, txs = [], [], []
        for i in range(rb.num_rows):
            rows, cols = -(-int(hh[i]) // int(th[i])), -(-int(ww[i]) // int(tw[i]))
            for ty, tx in op.target_tiles(int(pos[i, 0]), int(pos[i, 1]), int(th[i]), int(tw[i]), rows, cols):
                take.append(i)
                tys.append(ty)
                txs.append(tx)
        out = rb.take(pa.array(take, type=pa.int64()))
        arrays = out.columns + [pa.array(tys, type=pa.int32()), pa.array(txs, type=pa.int32())]
        schema = out.schema
        for name, type_ in HALO_COLUMNS:
            schema = schema.append(pa.field(name, type_, nullable=False))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def window_group(table: pa.Table, *, token: str, broadcast, spec: str, run_id: str, rebuilds=None) -> pa.Table:
    """One output tile of a windowed op (mean filter, convolution, downsample) from the input ciphertexts its
    windows read (the tile and its halo; a downsample's blocks)."""
    from hecore.ciphertexts import SECURITY_LEAKS, CiphertextBatch
    from hecore.ops.pixel import window_tile
    from hecore.ops.spec import parse_op

    op = parse_op(spec)
    fmt = worker_state(token, broadcast, build_ct_format, rebuilds)
    rb = table.combine_chunks().to_batches()[0] if table.num_rows else None
    if rb is None:
        return pa.Table.from_batches([], schema=CIPHERTEXTS)
    first = rb.slice(0, 1).to_pylist()[0]
    ty, tx = first["target_ty"], first["target_tx"]
    th, tw = first["tile_h"], first["tile_w"]
    height, width = first["image_height"], first["image_width"]
    out_height, out_width, _ = op.out_shape(height, width, first["image_channels"])
    out_y, out_x = ty * th, tx * tw
    out_h, out_w = min(th, out_height - out_y), min(tw, out_width - out_x)
    pos = pixel_positions(rb)
    cts = CiphertextBatch.from_arrow(rb.column("ct"))
    tile_cts = {(int(py), int(px)): cts[i] for i, (py, px) in enumerate(pos)}
    securities = set(pc_unique(rb.column("security")))
    strategies = pc_unique(rb.column("strategy"))
    security = SECURITY_LEAKS if SECURITY_LEAKS in securities else securities.pop()
    t = time.perf_counter()
    batch = window_tile(fmt, tile_cts, height, width, op, out_y, out_x, out_h, out_w,
                        strategy=strategies[0], security=security)
    dt = (time.perf_counter() - t) / max(1, len(batch))
    # The output pixel (y, x) keeps the encryption time and history of the input its window starts from.
    own = {(int(py), int(px)): i for i, (py, px) in enumerate(pos)}
    step = op.stride
    order = [own[(step * (out_y + j // out_w), step * (out_x + j % out_w))] for j in range(out_h * out_w)]
    src = rb.take(pa.array(order, type=pa.int64()))
    tile = {**first, "image_height": out_height, "image_width": out_width, "tile_y": ty, "tile_x": tx,
            "y": out_y, "x": out_x, "h": out_h, "w": out_w}
    meta = RowMeta(run_id=run_id, layout=first["layout"], preset=first["preset"],
                       key_fingerprint=first["key_fingerprint"])
    out = ciphertext_rows(
        meta, tile, first["channel"], batch, strategies[0], security, first["scheme"],
        level=first["level"], scale_bits=first["scale_bits"], ops=list(first["ops"]) + [spec],
        post_scale=first["post_scale"] * op.post_scale_factor,
        encrypt_seconds=src.column("encrypt_seconds").to_numpy(),
        process_seconds=src.column("process_seconds").to_numpy() + dt)
    return pa.Table.from_batches([out])


def channel_group(table: pa.Table, *, token: str, broadcast, spec: str, run_id: str, rebuilds=None) -> pa.Table:
    """One tile's channels combined into one channel (``grey``): the rows of one (image, tile), every
    channel, in either layout; channel 0's rows come out with the combined ciphertexts and one channel."""
    from hecore.layouts import Layout
    from hecore.ops.spec import parse_op

    if not table.num_rows:
        return pa.Table.from_batches([], schema=CIPHERTEXTS)
    op = parse_op(spec)
    rb = table.combine_chunks().to_batches()[0]
    rb = rb.take(pc.sort_indices(rb, [("channel", "ascending"), ("index", "ascending")]))
    channels = rb.column("channel").to_numpy()
    count = int(np.sum(channels == 0))
    c = int(channels.max()) + 1
    if not count or len(channels) != count * c or (channels.reshape(c, count) != np.arange(c)[:, None]).any():
        raise ValueError(f"{spec}: the rows of tile ({rb.column('tile_y')[0]}, {rb.column('tile_x')[0]}) of image "
                         f"{rb.column('image_id')[0]} do not hold every channel once")
    first = rb.slice(0, count)
    ps = float(single_value(rb, "post_scale"))
    t = time.perf_counter()
    if Layout.parse(str(first.column("layout")[0])).packed:
        ev = worker_state(token, broadcast, build_evaluator, rebuilds)
        stored = [rb.column("ct")[i].as_buffer() for i in range(c)]
        combined, new_ps = op.packed_channels(ev, [ev.load(b) for b in stored], ps)
        new_ct = pa.array([ev.dump_like(combined, stored[0])], type=pa.binary())
    else:
        from hecore.ciphertexts import SECURITY_LEAKS, CiphertextBatch

        fmt = worker_state(token, broadcast, build_ct_format, rebuilds)
        securities = set(pc_unique(rb.column("security")))
        security = SECURITY_LEAKS if SECURITY_LEAKS in securities else securities.pop()
        batches = [CiphertextBatch.from_arrow(rb.column("ct").slice(k * count, count)) for k in range(c)]
        new_ct = op.pixel_channels(fmt, batches, strategy=pc_unique(rb.column("strategy"))[0],
                                   security=security).to_arrow()
        new_ps = ps * op.post_scale_factor
    dt = (time.perf_counter() - t) / count
    spent = rb.column("encrypt_seconds").to_numpy().reshape(c, count).sum(axis=0)
    out = replace_columns(
        first, ct=new_ct, ct_xxh3=ct_checksums(new_ct), run_id=constant_column(run_id, count, pa.string()),
        image_channels=constant_column(1, count, pa.int32()),
        ops=pa.array([o + [spec] for o in first.column("ops").to_pylist()], type=pa.list_(pa.string())),
        post_scale=constant_column(new_ps, count, pa.float64()),
        encrypt_seconds=pa.array(spent, type=pa.float64()),
        process_seconds=pa.array(first.column("process_seconds").to_numpy() + dt, type=pa.float64()))
    return pa.Table.from_batches([out])


# --- a chain cut at the ops that bring rows together ---------------------------------------------------

#: The columns Spark groups the rows by for each way of bringing them together (hecore.ops.base.ImageOp.regroup).
GROUP_KEYS = {"halo": ("image_id", "channel", "target_ty", "target_tx"), "channels": ("image_id", "tile_y", "tile_x"),
              "blocks": ("image_id", "channel", "target_ty", "target_tx")}

#: What sums a group of rows, for each way of bringing them together.
GROUP_FUNCTIONS = {"halo": window_group, "channels": channel_group, "blocks": window_group}


def split_chain(layout: str, specs: list[str]) -> list[tuple[list[str], str | None]]:
    """The chain cut after each op that brings rows together in ``layout`` (a windowed op in the pixel layout,
    ``grey`` in any): ``(ops that run row by row, the regrouping op or None)``, in order."""
    from hecore.ops.spec import is_table_chain, parse_op

    if is_table_chain(specs):                   # one BFV table, row by row (hecore.ops.lut)
        return [(list(specs), None)]
    packed = Layout.parse(layout).packed
    stages, local = [], []
    for spec in specs:
        if parse_op(spec).regroup(packed) is None:
            local.append(spec)
        else:
            stages.append((local, spec))
            local = []
    if local or not stages:
        stages.append((local, None))
    return stages


def rows_out(layout: str, specs: list[str], preset: str, shapes: dict) -> int:
    """How many ciphertext rows the chain ``specs`` leaves of images of ``shapes`` (id -> (height, width,
    channels, tile_h, tile_w)): each image's rows at its size after the chain (``grey``: one channel)."""
    from hecore.ops.spec import recorded_shape, recorded_tile

    from .rowchecks import expected_rows

    packed = Layout.parse(layout).packed
    return sum(expected_rows(layout, *recorded_shape(specs, preset, h, w, c),
                             *recorded_tile(specs, preset, (th, tw), packed))
               for h, w, c, th, tw in shapes.values())


def regroup_kind(layout: str, spec: str) -> str:
    from hecore.ops.spec import parse_op

    return parse_op(spec).regroup(Layout.parse(layout).packed)


def scatter_step(layout: str, spec: str):
    """The partition function that sends rows where the regrouping op ``spec`` needs them before Spark groups
    them (a windowed op's halo), or None when the rows are grouped as they are."""
    from functools import partial

    if regroup_kind(layout, spec) in ("halo", "blocks"):
        return partial(scatter_partition, spec=spec)
    return None


def row_steps(layout: str, specs: list[str], **common):
    """The partition function of ops that run row by row (``common``: the broadcast keys' token and broadcast,
    run id, accumulators), or None for no op: the whole sub-chain in each packed ciphertext, or the pixel
    layout's pointwise ops one after the other."""
    from functools import partial

    if not specs:
        return None
    if Layout.parse(layout).packed:
        return partial(packed_partition, specs=specs, **common)
    return partial(chained, steps=[partial(pointwise_partition, spec=s, **common) for s in specs])


# --- TFHE: one ciphertext per pixel value, any chain of 8-bit ops, server key only ------------------

def tfhe_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, specs: list[str],
                   run_id: str, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """The TFHE op chain on every pixel ciphertext of the partition (hecore.tfhe.evaluator: a chain whose
    8-bit function is one cheaper op runs as that op), one native batch per record batch."""
    from hecore.tfhe.ops import parse_op

    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    ops = [parse_op(s) for s in specs]
    for rb in batches:
        if rb.num_rows == 0:
            continue
        t = time.perf_counter()
        out = ev.apply_chain(ops, rb.column("ct").to_pylist())
        dt = (time.perf_counter() - t) / rb.num_rows
        new_ct = pa.array(out, type=pa.binary())
        yield replace_columns(
            rb, ct=new_ct, ct_xxh3=ct_checksums(new_ct), run_id=constant_column(run_id, rb.num_rows, pa.string()),
            strategy=constant_column(PROCESSED, rb.num_rows, pa.string()),
            ops=pa.array([o + list(specs) for o in rb.column("ops").to_pylist()], type=pa.list_(pa.string())),
            process_seconds=pa.array(rb.column("process_seconds").to_numpy() + dt, type=pa.float64()))


# --- the whole chain in one task, whichever scheme ---------------------------------------------------

def _seal_chain(layout: str, specs: list[str], **common):
    """CKKS/BFV/BGV: the whole chain within each packed ciphertext, or the pixel layout's pointwise ops one
    after the other on each batch; None when an op brings rows together (:func:`split_chain`): it needs a
    shuffle."""
    if split_chain(layout, specs)[0][1] is not None:
        return None
    return row_steps(layout, specs, **common)


def _per_value_chain(layout: str, specs: list[str], **common):
    """One ciphertext per value, any chain: every row through the evaluator's chain."""
    from functools import partial

    return partial(tfhe_partition, specs=specs, **common)


def _seal_state(layout: str):
    """The byte format for the pixel layout's byte-level ops, else the evaluator."""
    return build_evaluator if Layout.parse(layout).packed else build_ct_format


#: How each scheme runs a whole op chain in one task, and what its tasks build from the broadcast keys: the
#: one place the process stage routes by scheme.
CHAINS = {SEAL: _seal_chain, TFHE: _per_value_chain}
STATES = {SEAL: _seal_state, TFHE: lambda layout: build_evaluator}


def chain_state(scheme, layout: str):
    """What the partition function of :func:`chain_partition` builds in each worker from the broadcast keys
    (for a warm-up that builds it before the tasks ask)."""
    return STATES[scheme](layout)


def chain_partition(scheme, layout: str, specs: list[str], **common):
    """The partition function that runs the op chain ``specs`` on ``layout`` ciphertexts of ``scheme``'s
    keys (``common``: the broadcast keys' token and broadcast, run id, accumulators), or None when the
    chain needs a shuffle."""
    return CHAINS[scheme](layout, specs, **common)


def chained(batches, *, steps):
    """The partition functions ``steps`` applied one after the other, in one task."""
    for step in steps:
        batches = step(batches)
    return batches
