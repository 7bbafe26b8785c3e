"""The image ops hepix adds to iCHEETAH's (convolutions, ``grey``, ``downsample``) on a colour image, end to
end in both layouts, for ``hepix bench --suite ops``.

Any chain of the registered ops runs here as ``hepix process`` runs it, without Spark: in the packed layout
each tile's channel ciphertexts go through the chain together (``grey`` sums them into one; every other op
works within each ciphertext), a downsampled tile is read back with its stride; in the pixel layout the whole
image is one tile (a window needs its neighbours), a windowed op sums its windows over it
(:func:`hecore.ops.pixel.window_tile`) and ``grey`` weighs the channel batches together
(:func:`hecore.ops.pixel.weighted_sum`).  The result is checked against the plaintext reference like every
row of the suite.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from hecore.layouts.packed import decrypt_block
from hecore.layouts.packed import default_tile as packed_default_tile
from hecore.layouts.packed import encrypt_tiles as packed_encrypt_tiles
from hecore.ops.packed import PackedGeometry
from hecore.ops.pixel import apply_pointwise, window_tile

__all__ = ["COLOUR_CASES", "run_packed", "run_pixel"]

#: The cases (name, specs), each on a colour image; every op here sums with integer weights: exact.
COLOUR_CASES = (
    ("conv-gauss3", ("conv:gauss3",)),
    ("conv-sharpen", ("conv:sharpen",)),
    ("conv-sobel-x", ("conv:sobel-x",)),
    ("conv-gauss5", ("conv:gauss5",)),
    ("grey", ("grey",)),
    ("downsample-2", ("downsample:2",)),
    ("downsample-4", ("downsample:4",)),
    ("grey-sharpen", ("grey", "conv:sharpen")),
)


def _shape_after(ops, shape):
    for op in ops:
        shape = op.out_shape(*shape)
    return shape


def run_packed(ctx, ev, img: np.ndarray, ops: Sequence):
    """Packed layout: ``(raw values, encrypt s, op s, decrypt s, ciphertexts, bytes)`` of ``ops`` on ``img``."""
    halo = max((op.halo for op in ops), default=0)
    step = math.lcm(*[op.packed_stride for op in ops]) if ops else 1
    th, tw = (max(step, v // step * step) for v in packed_default_tile(ctx.params, halo))
    h, w = img.shape[:2]
    t = time.perf_counter()
    grid, produce = packed_encrypt_tiles(img, ctx, th, tw, halo)
    tiles = list(produce)
    enc = time.perf_counter() - t
    by_tile: dict = {}
    for pt in tiles:
        by_tile.setdefault((pt.ty, pt.tx), []).append(pt)
    t = time.perf_counter()
    done = []
    for parts in by_tile.values():
        parts.sort(key=lambda p: p.channel)
        cs, ps = [ev.load(p.ct) for p in parts], 1.0
        geom = PackedGeometry(th, tw, halo, parts[0].y, parts[0].x, h, w)
        for op in ops:
            if op.regroup(True) == "channels":
                c, new_ps = op.packed_channels(ev, cs, ps)
                cs = [c]
            else:
                results = [op.packed(ev, c, geom, ps) for c in cs]
                cs, new_ps = [r[0] for r in results], results[0][1]
            ps = new_ps
        done.append((parts[0], [ev.dump(c) for c in cs]))
    op_s = time.perf_counter() - t
    t = time.perf_counter()
    stride = math.prod(op.packed_stride for op in ops)
    oh, ow, oc = _shape_after(ops, (h, w, grid.channels))
    raw = np.full((oh, ow, oc), np.nan)
    ot_h, ot_w = th // stride, tw // stride
    for pt, cts in done:
        y, x = pt.ty * ot_h, pt.tx * ot_w
        bh, bw = min(ot_h, oh - y), min(ot_w, ow - x)
        for c, ct in enumerate(cts):
            raw[y:y + bh, x:x + bw, c] = decrypt_block(ctx, ct, ot_h, ot_w, halo, stride=stride)[:bh, :bw]
    dec = time.perf_counter() - t
    return _plane(raw), enc, op_s, dec, len(tiles), sum(len(pt.ct) for pt in tiles)


def run_pixel(ctx, strategy, img: np.ndarray, ops: Sequence):
    """Pixel layout, the whole image one tile: the same tuple as :func:`run_packed`."""
    fmt, scale_bits = ctx.ct_format, ctx.params.scale_bits
    shape = img.shape[:2] + ((img.shape[2],) if img.ndim == 3 else (1,))
    planes = [img] if img.ndim == 2 else [np.ascontiguousarray(img[:, :, c]) for c in range(shape[2])]
    t = time.perf_counter()
    batches = [strategy.encrypt(p.reshape(-1)) for p in planes]
    enc = time.perf_counter() - t
    count, nbytes = sum(len(b) for b in batches), sum(b.nbytes for b in batches)
    t = time.perf_counter()
    ps = 1.0
    for op in ops:
        h, w, _ = shape
        if op.regroup(False) == "channels":
            batches = [op.pixel_channels(fmt, batches, strategy=batches[0].strategy, security=batches[0].security)]
        elif op.windowed:
            oh, ow, _ = op.out_shape(h, w, 1)
            batches = [window_tile(fmt, {(i // w, i % w): b[i] for i in range(h * w)}, h, w, op, 0, 0, oh, ow,
                                   strategy=b.strategy, security=b.security) for b in batches]
        else:
            i = np.arange(h * w)
            pos = np.stack([i // w, i % w], axis=1)
            batches = [apply_pointwise(b, fmt, op, pos, ps, scale_bits) for b in batches]
        ps *= op.post_scale_factor
        shape = op.out_shape(*shape)
    op_s = time.perf_counter() - t
    t = time.perf_counter()
    raw = np.stack([ctx.decrypt_pixels(b).reshape(shape[:2]) for b in batches], axis=2)
    dec = time.perf_counter() - t
    return _plane(raw), enc, op_s, dec, count, nbytes


def _plane(raw: np.ndarray) -> np.ndarray:
    return raw[:, :, 0] if raw.shape[2] == 1 else raw
