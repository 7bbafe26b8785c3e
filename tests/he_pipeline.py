"""Helpers shared by the packed-layout tests (test_packed_ops, test_integer_schemes, test_matching).

Not a test module: it runs the packed pipeline the way the jobs do --
encrypt tiles with a halo, apply the ops with :func:`hecore.ops.packed.apply_ops`,
decrypt, apply the chain's :class:`~hecore.ops.spec.Finish` -- and measures the
result against :func:`hecore.ops.spec.reference`, rounded with
:func:`hecore.quality.round_to_uint8` on both sides.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from conftest import shared_dataset

from hecore.images import load_image
from hecore.layouts.packed import decrypt_tiles, encrypt_tiles
from hecore.ops.matching import distance_scale, pair_partial
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_ops, raw_range, reference
from hecore.quality import round_to_uint8
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

#: The bar: exact after rounding and clipping for at least this fraction of values.
EXACT_BAR = 0.9999

GREY = "5.1.12.tiff"        # 256x256 grey (clock)
COLOUR = "4.1.05.tiff"      # 256x256 RGB (house)
GREY_OTHER = "5.1.13.tiff"  # 256x256 grey (resolution chart)


def generate(name: str, *, rotations: bool = True):
    """``HEContext.generate`` at preset ``name``: ``(ctx, secret_key_bytes)``."""
    return HEContext.generate(preset(name), rotations=rotations)


def usc_crop(name: str, y: int = 96, x: int = 96, size: int = 64) -> np.ndarray:
    """A ``size x size`` crop of the USC-SIPI image ``name``, or of its stand-in without the data set."""
    img = load_image(shared_dataset(f"usc-sipi/{name}")).pixels[y:y + size, x:x + size]
    assert img.shape[:2] == (size, size) and img.dtype == np.uint8
    return img


@dataclass
class PackedRun:
    """The outcome of one packed pipeline run, measured against the plaintext reference."""

    specs: list
    raw: np.ndarray            # decrypted raw values (before post_scale)
    post_scale: float          # what apply_ops returned
    finished: np.ndarray       # Finish.apply(raw): true values before rounding
    expected: np.ndarray       # hecore.ops.spec.reference
    step: float                # the Finish grid step (raw units)
    snaps: bool

    @property
    def raw_error(self) -> float:
        """Largest |raw - reference / post_scale|: the encryption error in raw units."""
        return float(np.max(np.abs(self.raw - self.expected / self.post_scale)))

    @property
    def max_error(self) -> float:
        """Largest |raw x post_scale - reference|: the error before rounding, in pixel units."""
        return float(np.max(np.abs(self.raw * self.post_scale - self.expected)))

    @property
    def finished_error(self) -> float:
        return float(np.max(np.abs(self.finished - self.expected)))

    @property
    def exact_fraction(self) -> float:
        return float(np.mean(round_to_uint8(self.finished) == round_to_uint8(self.expected)))

    def report(self) -> str:
        return (f"{' | '.join(self.specs) or '(no ops)'}: exact fraction {self.exact_fraction:.6f}, "
                f"max error before rounding {self.max_error:.3g} (raw units {self.raw_error:.3g}), "
                f"after Finish {self.finished_error:.3g}")


def run_packed(ctx, img: np.ndarray, specs, tile_h: int, tile_w: int, halo: int,
               complex_packing: bool = False) -> PackedRun:
    """decrypt(op(encrypt(img))) in the packed layout, tile by tile, channel by channel."""
    specs = list(specs)
    ops = parse_ops(specs)
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, ctx, tile_h, tile_w, halo, complex_packing)
    out, scales = [], set()
    for t in tiles:
        geom = PackedGeometry(tile_h, tile_w, halo, t.y, t.x, grid.height, grid.width, complex_packing)
        c, ps = apply_ops(ev, ev.load(t.ct), ops, geom)
        scales.add(ps)
        out.append(t.with_ct(ev.dump(c)))
    assert len(scales) == 1, f"tiles disagree on post_scale: {scales}"
    (ps,) = scales
    finish = finish_for(ops)
    assert ps == float(finish.post_scale), f"apply_ops post_scale {ps} != Finish {finish.post_scale}"
    raw = decrypt_tiles(ctx, grid, out)
    assert raw.shape == img.shape
    return PackedRun(specs, raw, ps, finish.apply(raw), reference(img, ops), float(finish.step), finish.snaps)


def assert_exact(run: PackedRun, integer: bool) -> None:
    """The exactness bar, plus the precondition that makes it hold (error below half a grid step)."""
    assert run.exact_fraction >= EXACT_BAR, run.report()
    if integer:
        # BFV/BGV: raw values are exact integers, equal to reference / post_scale.
        assert np.array_equal(run.raw, np.rint(run.raw)), run.report()
        assert run.raw_error < 1e-6, run.report()
    elif run.snaps:
        assert run.raw_error < run.step / 2, run.report()


def op_chains(tile_h: int, tile_w: int, halo: int, size: int = 64) -> list[tuple[str, list[str]]]:
    """The op chains exercised for one tiling, with watermarks on the image border and on a
    pixel that lies in the halo of the neighbouring tiles (the last pixel of tile (0, 0)).

    Returns ``(id, specs)``; every chain fits the tiling's halo.
    """
    hx, hy = tile_w - 1, tile_h - 1          # in the halo of tiles (0, 1), (1, 0) and (1, 1)
    assert hx + 1 < size and hy + 1 < size
    corner = f"0,{size - 1}"                 # bottom-left corner: clamped copies beyond the image
    edge = f"{size - 1},{tile_h + 1}"        # right edge, next to a tile boundary
    chains = [
        ("brightness50", ["brightness:50"]),
        ("brightness60", ["brightness:60"]),
        ("wm-corner", [f"watermark:{corner},5"]),
        ("wm-edge", [f"watermark:{edge},5"]),
        ("wm-halo", [f"watermark:{hx},{hy},5"]),
        ("wm-halo-mean3", [f"watermark:{hx},{hy},5", "meanfilter:3"]),
        ("wm-corner-mean3", [f"watermark:{corner},5", "meanfilter:3"]),
        ("mean3", ["meanfilter:3"]),
        ("mean2", ["meanfilter:2"]),
        ("contrast2", ["contrast:2"]),
        ("chain", ["brightness:20", f"watermark:{hx},{hy},5", "meanfilter:3", "contrast:0.5"]),
    ]
    if halo >= 2:
        chains += [("mean4", ["meanfilter:4"]), ("mean5", ["meanfilter:5"])]
    return chains


def packed_distance(ctx, a: np.ndarray, b: np.ndarray, metric: str, tile_h: int, tile_w: int,
                    halo: int = 0, specs=()) -> dict:
    """The encrypted distance between ``a`` and ``b`` after ``specs``, summed over the tiles' partials.

    Returns the distance and what it was computed with (post_scale, the bound ``D`` of ``|d|``
    in raw units, the number of partials, the raw slot 0).
    """
    ops = parse_ops(list(specs))
    ev = Evaluator(ctx)
    lo, hi = raw_range(ops)
    bound = hi - lo
    ga, ta = encrypt_tiles(a, ctx, tile_h, tile_w, halo)
    gb, tb = encrypt_tiles(b, ctx, tile_h, tile_w, halo)
    ta, tb = list(ta), list(tb)
    assert len(ta) == len(tb) and ga == gb
    parts = len(ta)
    partials, ps = [], 1.0
    for x, y in zip(ta, tb):
        assert (x.ty, x.tx, x.channel) == (y.ty, y.tx, y.channel)
        geom = PackedGeometry(tile_h, tile_w, halo, x.y, x.x, ga.height, ga.width)
        ca, ps = apply_ops(ev, ev.load(x.ct), ops, geom)
        cb, _ = apply_ops(ev, ev.load(y.ct), ops, geom)
        partials.append(pair_partial(ev, ca, cb, metric, geom, bound, parts))
    raw = float(ctx.decrypt_slots(ev.add_many(partials), 1)[0])
    scale = distance_scale(metric, ps, bound, parts, ctx.params.is_integer)
    return {"distance": raw * scale, "raw": raw, "post_scale": ps, "bound": bound, "parts": parts,
            "ops": ops}
