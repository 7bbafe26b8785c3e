"""``hepix bench --suite ops``: iCHEETAH's §4.4 cases, encrypted, in both layouts.

iCHEETAH (Wang et al., §4.4) shows four operations on encrypted images; the TenSEAL
study (Saker et al. 2025, §5.1) brightens by +60, and hepix adds a contrast stretch.
Each is run here end to end -- encrypt, operate on the ciphertexts, decrypt -- with
the three stages timed apart, and the result checked against the plaintext reference:

========================  =======  ==========================================================
case                      size     what is checked
========================  =======  ==========================================================
meanfilter (§4.4.1)       64x64    3x3 mean filter; exact_fraction against ``reference``
brightness (§4.4.2)       256x256  +50; exact_fraction
matching (§4.4.3)         128x128  L2² and L1 between image 1, image 2 (image 1 brightened
                                   by +30, clipped: a plain image) and image 3 (another
                                   image); whether d12 < d23 < d13 as in the paper's Table 3
watermark (§4.4.4)        64x64    +5.0 at one pixel; exact_fraction, and whether
                                   :func:`bench.detect.detect_watermark` finds exactly it
brightness-60 (Saker)     256/64   +60
contrast (hepix)          256/64   ``contrast:1.5``
========================  =======  ==========================================================

Layouts and parameters:

* **packed** (a tile channel per fresh ciphertext, IND-CPA): CKKS ``paper-4096``
  and BFV ``bfv-4096`` for the image operations (BFV: meanfilter, brightness,
  watermark; a contrast of 1.5 adds a non-integer raw constant, which BFV
  refuses); matching with ``tenseal-8192`` (L2), ``match-8192`` (L1 and L2)
  and ``bfv-8192`` (L2), through :func:`hecore.ops.matching.pair_partial` per tile.
* **pixel** (a ciphertext per pixel value, the paper's layout), CKKS
  ``paper-4096``, with the byte-level operations of :mod:`hecore.ops.spec`
  (:func:`~hecore.ops.pixel.apply_pointwise`, :func:`~hecore.ops.pixel.mean_filter_tile`),
  encrypted by ``fresh`` (IND-CPA) and by ``full`` (the paper's fastest
  caching, which leaks; rows say ``security='leaks'``).  Pixel decryption costs
  ~0.25 ms a ciphertext, so the big cases shrink: brightness +50 runs with
  ``full`` at 256x256 and with ``fresh`` at 128x128; the extras run at 64x64;
  matching runs per pixel (a squaring per pixel and pair at N=8192, several
  ms each) on the images resized to 32x32 (L2, ``tenseal-8192``) and 16x16
  (L1, ``match-8192``).  The ``size`` column says which.

Every image is grey, centre-cropped and resized (the paper's preprocessing),
from USC-SIPI when the data sets are there (:mod:`bench.datasets`), else from
scikit-image's samples.  Timings are single runs in one process on a shared
machine: compare rows of the same run, not runs.  iCHEETAH's own encryption times of
the four cases (:data:`bench.seeds.ICHEETAH_CASES`) are printed next to the pixel
rows of the same size.  Writes ``OUT/bench_ops/<run_id>.parquet`` (``bench.schemas.BENCH_OPS``); hepix's own
image ops -- convolutions, ``grey``, ``downsample`` -- run on a colour image in the same run
(:func:`colour_rows`, :mod:`bench.suites.imageops`) and go to ``OUT/bench_imageops/<run_id>.parquet``, same
schema.

Exactness: ``exact_fraction`` is the share of values equal to
``round_to_uint8(reference(image, ops))`` after decryption, the deferred
scaling (:func:`hecore.ops.spec.finish_for`) and :func:`~hecore.quality.round_to_uint8`;
``max_abs_err`` the largest ``|raw x post_scale - reference|`` before the
finish snaps and rounds (the scheme's own error; 0 for BFV).  For matching,
``distance_rel_err`` compares each encrypted distance with what it computes
exactly in plaintext: L2² itself, and for L1 the polynomial stand-in for
``|d|`` (:func:`hecore.ops.matching.plain_l1_approx`) -- the plaintext L1 itself
is in ``ref_d*``.
"""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bench import seeds
from bench.contexts import Keys
from bench.datasets import sample, usc_sipi_dir
from bench.detect import detect_watermark
from bench.rows import run_columns, write_rows
from bench.schemas import BENCH_OPS
from hecore.ciphertexts import SECURITY_IND_CPA
from hecore.encrypt.strategies import make_strategy, security_of
from hecore.images import center_crop, load_image, resize
from hecore.layouts.packed import decrypt_tiles as packed_decrypt_tiles
from hecore.layouts.packed import default_tile
from hecore.layouts.packed import encrypt_tiles as packed_encrypt_tiles
from hecore.layouts.pixel import encrypt_tiles as pixel_encrypt_tiles
from hecore.ops.matching import distance_scale, pair_partial, plain_distances
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.pixel import apply_pointwise, window_tile
from hecore.ops.spec import Op, finish_for, parse_ops, raw_range, reference
from hecore.quality import round_to_uint8
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.kernels import warm_up
from jobs.runtime import runinfo
from jobs.runtime.console import table

log = logging.getLogger(__name__)

#: The options of ``hepix bench`` this suite reads besides --out and --quick: none (fixed cases).
OPTIONS = frozenset()

PIXEL, PACKED = "pixel", "packed"

#: Preferred source images: a grey USC-SIPI photograph for the image operations and image 1 of
#: the matching, and candidates for image 3, tried in order (see :func:`load_sources`).
USC_SIPI_MAIN = "7.1.01.tiff"
USC_SIPI_OTHER = ("5.1.12.tiff", "7.1.02.tiff", "5.2.09.tiff", "4.2.05.tiff")
SKIMAGE_MAIN = "camera"
SKIMAGE_OTHER = ("page", "coffee", "moon")
#: The colour image of hepix's own image ops (convolutions, grey, downsample): USC-SIPI's house, else
#: scikit-image's astronaut.
USC_SIPI_COLOUR = "4.1.05.tiff"
SKIMAGE_COLOUR = "astronaut"


@dataclass(frozen=True)
class OpsConfig:
    """Sizes and parameters of one run (:data:`DEFAULT`, :data:`QUICK`)."""

    meanfilter_size: int = 64
    brightness_size: int = 256
    watermark_size: int = 64
    match_size: int = 128
    #: Pixel layout: the sizes brightness +50 runs at with ``full`` and with ``fresh``, and the extras' size.
    pixel_brightness_full_size: int = 256
    pixel_brightness_fresh_size: int = 128
    pixel_extras_size: int = 64
    #: Pixel layout matching: (preset, metrics, side of the resized images).
    pixel_match: tuple = (("tenseal-8192", ("l2",), 32), ("match-8192", ("l1",), 16))
    packed_ckks: str = "paper-4096"
    packed_bfv: str = "bfv-4096"
    packed_match: tuple = (("tenseal-8192", ("l2",)), ("match-8192", ("l1", "l2")), ("bfv-8192", ("l2",)))
    pixel_preset: str = "paper-4096"
    pixel_strategies: tuple = ("fresh", "full")
    pixel_tile: int = 32
    watermark: tuple = (10, 20, 5.0)        # x (column), y (row), value
    match_brighten: int = 30
    #: hepix's image ops on the colour image: its size in the packed layouts and in the pixel layout.
    colour_size: int = 128
    pixel_colour_size: int = 32

    @property
    def watermark_spec(self) -> str:
        x, y, v = self.watermark
        return f"watermark:{x},{y},{v:g}"


DEFAULT = OpsConfig()
#: ``--quick``: the same cases, smaller where one ciphertext per pixel makes them long (a smoke run).
QUICK = replace(DEFAULT, meanfilter_size=32, watermark_size=32, pixel_brightness_full_size=64,
                pixel_brightness_fresh_size=16, pixel_extras_size=16, pixel_match=(("tenseal-8192", ("l2",), 8),),
                colour_size=32, pixel_colour_size=8)


@dataclass(frozen=True)
class Case:
    name: str
    section: str
    specs: tuple[str, ...]


@dataclass
class OpsMeasurement:
    """One case in one layout, parameter set and strategy (see ``bench.schemas.BENCH_OPS``)."""

    case: str
    section: str
    ops: str
    layout: str
    scheme: str
    preset: str
    n: int
    strategy: str
    security: str
    image: str
    size: int
    channels: int
    pixels: int
    ciphertexts: int
    bytes: int
    setup_seconds: float
    encrypt_seconds: float
    op_seconds: float
    decrypt_seconds: float
    exact_fraction: float | None = None
    max_abs_err: float | None = None
    detected: bool | None = None
    detected_pixels: str | None = None
    metric: str | None = None
    d12: float | None = None
    d13: float | None = None
    d23: float | None = None
    ref_d12: float | None = None
    ref_d13: float | None = None
    ref_d23: float | None = None
    distance_rel_err: float | None = None
    order_as_paper: bool | None = None
    ref_order_as_paper: bool | None = None

    def as_dict(self) -> dict:
        return asdict(self)


# --- the source images ----------------------------------------------------------------------

def grey(pixels: np.ndarray) -> np.ndarray:
    """An 8-bit image as grey (ITU-R 601 luma, Pillow's ``convert('L')``); grey stays as it is."""
    if pixels.ndim == 2:
        return pixels
    from PIL import Image
    return np.array(Image.fromarray(pixels).convert("L"), dtype=np.uint8)


def prepared(pixels: np.ndarray, size: int) -> np.ndarray:
    """The paper's preprocessing: the largest centred square, resized to ``size`` x ``size``."""
    return resize(center_crop(grey(pixels)), size)


def brightened(pixels: np.ndarray, b: int) -> np.ndarray:
    """Image 2 of the matching: ``pixels + b`` clipped to 0..255 (a plain image, encrypted as such)."""
    return np.clip(pixels.astype(np.int16) + b, 0, 255).astype(np.uint8)


def paper_order(d12: float, d13: float, d23: float) -> bool:
    """The ordering of the paper's Table 3: d12 < d23 < d13."""
    return bool(d12 < d23 < d13)


@dataclass(frozen=True)
class Sources:
    """Full-size grey source images by role, each as (display name, pixels)."""

    main: tuple[str, np.ndarray]
    match1: tuple[str, np.ndarray]
    match3: tuple[str, np.ndarray]
    origin: str                   # usc-sipi | skimage
    colour: tuple[str, np.ndarray] | None = None     # RGB, for hepix's own image ops


def _plain_order_holds(one: np.ndarray, other: np.ndarray, config: OpsConfig) -> bool:
    a = prepared(one, config.match_size)
    b, c = brightened(a, config.match_brighten), prepared(other, config.match_size)
    bound = match_bound()
    d12, d13, d23 = plain_distances(a, b, bound), plain_distances(a, c, bound), plain_distances(b, c, bound)
    return all(paper_order(d12[m], d13[m], d23[m]) for m in ("l2", "l1", "l1_poly"))


def pick_image3(one: np.ndarray, candidates: list[tuple[str, np.ndarray]], config: OpsConfig):
    """Image 3: the first candidate for which the paper's ordering holds in plaintext (L2², L1 and
    the polynomial L1), else the first candidate (and the rows will say the ordering fails)."""
    for name, pixels in candidates:
        if _plain_order_holds(one, pixels, config):
            return name, pixels
    log.warning("no candidate image 3 gives the paper's ordering d12 < d23 < d13 in plaintext; using %s",
                candidates[0][0])
    return candidates[0]


def load_sources(folder: Path | None, config: OpsConfig = DEFAULT) -> Sources:
    """The source images: USC-SIPI files from ``folder`` (read in place) when it holds them, else
    scikit-image samples."""
    if folder is not None and Path(folder).is_dir():
        folder = Path(folder)
        main = folder / USC_SIPI_MAIN
        others = [folder / f for f in USC_SIPI_OTHER if (folder / f).is_file()]
        if main.is_file() and others:
            one = grey(load_image(main).pixels)
            candidates = [(f"usc-sipi/{p.name}", grey(load_image(p).pixels)) for p in others]
            name1 = f"usc-sipi/{main.name}"
            colour = folder / USC_SIPI_COLOUR
            colour = ((f"usc-sipi/{colour.name}", load_image(colour).pixels) if colour.is_file()
                      else (f"skimage-{SKIMAGE_COLOUR}", sample(SKIMAGE_COLOUR)))
            return Sources((name1, one), (name1, one), pick_image3(one, candidates, config), "usc-sipi", colour)
    one = grey(sample(SKIMAGE_MAIN))
    candidates = [(f"skimage-{n}", grey(sample(n))) for n in SKIMAGE_OTHER]
    name1 = f"skimage-{SKIMAGE_MAIN}"
    return Sources((name1, one), (name1, one), pick_image3(one, candidates, config), "skimage",
                   (f"skimage-{SKIMAGE_COLOUR}", sample(SKIMAGE_COLOUR)))


def prepared_colour(pixels: np.ndarray, size: int) -> np.ndarray:
    """The colour image's preprocessing: the largest centred square, resized, its channels kept."""
    return resize(center_crop(pixels), size)


def _halo(ops: Sequence[Op]) -> int:
    return max((op.halo for op in ops), default=0)


# --- image operations --------------------------------------------------------------------------

@dataclass
class ChainResult:
    """What one encrypted run of an op chain produced, before scoring."""

    raw: np.ndarray
    encrypt_seconds: float
    op_seconds: float
    decrypt_seconds: float
    ciphertexts: int
    nbytes: int
    setup_seconds: float = 0.0


def run_packed_chain(ctx: HEContext, ev: Evaluator, img: np.ndarray, ops: Sequence[Op],
                     meter=None) -> ChainResult:
    """Packed layout: encrypt every tile channel, apply ``ops`` to each (load, operate, serialize),
    decrypt; the raw values (before the finish) of the whole image.  ``meter``: a
    :class:`bench.peakmem.PeakMeter` recording each stage's peak memory."""
    stage = meter.stage if meter is not None else (lambda _name: nullcontext())
    halo = _halo(ops)
    th, tw = default_tile(ctx.params, halo)
    h, w = img.shape[:2]
    with stage("encrypt"):
        t = time.perf_counter()
        grid, produce = packed_encrypt_tiles(img, ctx, th, tw, halo)
        tiles = list(produce)
        encrypt_seconds = time.perf_counter() - t

    with stage("op"):
        t = time.perf_counter()
        done = []
        for pt in tiles:
            geom = PackedGeometry(th, tw, halo, pt.y, pt.x, h, w)
            c, _post_scale = apply_ops(ev, ev.load(pt.ct), ops, geom)
            done.append(pt.with_ct(ev.dump(c)))
        op_seconds = time.perf_counter() - t

    with stage("decrypt"):
        t = time.perf_counter()
        raw = packed_decrypt_tiles(ctx, grid, done)
        decrypt_seconds = time.perf_counter() - t
    return ChainResult(raw, encrypt_seconds, op_seconds, decrypt_seconds, len(tiles),
                   sum(len(pt.ct) for pt in tiles))


def _pixel_positions(pt) -> np.ndarray:
    i = np.arange(pt.h * pt.w)
    return np.stack([pt.y + i // pt.w, pt.x + i % pt.w], axis=1)


def run_pixel_chain(ctx: HEContext, strategy_name: str, img: np.ndarray, ops: Sequence[Op],
                    tile: int) -> ChainResult:
    """Pixel layout: a ciphertext per value, the byte-level ops of :mod:`hecore.ops.spec`, decryption
    of every ciphertext.  Pointwise chains stream tile by tile (a tile's ciphertexts are
    encrypted, operated on and decrypted before the next is made: memory stays at one tile);
    a chain with a windowed op takes the image as one tile (its windows need the neighbours)."""
    strategy = make_strategy(strategy_name, ctx, allow_leaky=True).prepare(img)
    fmt, scale_bits = ctx.ct_format, ctx.params.scale_bits
    h, w = img.shape[:2]
    whole = any(op.windowed for op in ops)
    th, tw = (h, w) if whole else (min(tile, h), min(tile, w))
    if strategy.security != SECURITY_IND_CPA:
        # A caching strategy's first tile faults its output buffer in; steady state is what is timed.
        strategy.encrypt(img[:th, :tw].reshape(-1), reuse_buffer=True)
    raw = np.empty(img.shape, dtype=np.float64)
    enc = opt = dec = 0.0
    count = nbytes = 0
    _grid, produce = pixel_encrypt_tiles(img, strategy, th, tw, reuse_buffer=True)
    it = iter(produce)
    while True:
        t = time.perf_counter()
        pt = next(it, None)
        enc += time.perf_counter() - t
        if pt is None:
            break
        count += len(pt.batch)
        nbytes += pt.batch.nbytes
        t = time.perf_counter()
        batch, post_scale = pt.batch, 1.0
        for op in ops:
            if op.windowed:
                cts = {(int(py), int(px)): batch[i] for i, (py, px) in enumerate(_pixel_positions(pt))}
                batch = window_tile(fmt, cts, h, w, op, pt.y, pt.x, pt.h, pt.w,
                                    strategy=batch.strategy, security=batch.security)
            else:
                batch = apply_pointwise(batch, fmt, op, _pixel_positions(pt), post_scale, scale_bits)
            post_scale *= op.post_scale_factor
        opt += time.perf_counter() - t
        t = time.perf_counter()
        values = ctx.decrypt_pixels(batch).reshape(pt.h, pt.w)
        dec += time.perf_counter() - t
        if raw.ndim == 2:
            raw[pt.y:pt.y + pt.h, pt.x:pt.x + pt.w] = values
        else:
            raw[pt.y:pt.y + pt.h, pt.x:pt.x + pt.w, pt.channel] = values
        del batch
    return ChainResult(raw, enc, opt, dec, count, nbytes, strategy.setup_seconds)


def _score(m: OpsMeasurement, img: np.ndarray, ops: Sequence[Op], res: ChainResult) -> OpsMeasurement:
    finish = finish_for(ops)
    ref = reference(img, ops)
    decrypted = round_to_uint8(finish.apply(res.raw))
    m.exact_fraction = float(np.mean(decrypted == round_to_uint8(ref)))
    m.max_abs_err = float(np.max(np.abs(res.raw * finish.post_scale_float - ref)))
    marks = [op.mark for op in ops if op.mark is not None]
    if marks:
        x, y, v = marks[-1]
        found = detect_watermark(decrypted, img, v)
        m.detected = found == [(x, y)]
        m.detected_pixels = " ".join(f"({x},{y})" for x, y in found)
    return m


def _image_row(case: Case, layout: str, ctx: HEContext, strategy: str, security: str, name: str,
               img: np.ndarray, res: ChainResult, ops: Sequence[Op]) -> OpsMeasurement:
    p = ctx.params
    m = OpsMeasurement(
        case=case.name, section=case.section, ops="|".join(case.specs), layout=layout, scheme=p.scheme,
        preset=p.name, n=p.n, strategy=strategy, security=security, image=f"{name}@{img.shape[0]}",
        size=int(img.shape[0]), channels=1 if img.ndim == 2 else int(img.shape[2]), pixels=int(img.size),
        ciphertexts=res.ciphertexts, bytes=res.nbytes, setup_seconds=res.setup_seconds,
        encrypt_seconds=res.encrypt_seconds, op_seconds=res.op_seconds, decrypt_seconds=res.decrypt_seconds)
    return _score(m, img, ops, res)


def image_cases(config: OpsConfig) -> list[tuple[Case, int]]:
    """The image operations and their sizes in the packed layout (the paper's sizes)."""
    return [
        (Case("meanfilter", "4.4.1", ("meanfilter:3",)), config.meanfilter_size),
        (Case("brightness", "4.4.2", ("brightness:50",)), config.brightness_size),
        (Case("watermark", "4.4.4", (config.watermark_spec,)), config.watermark_size),
        (Case("brightness-60", BRIGHTNESS60_SECTION, ("brightness:60",)), config.brightness_size),
        (Case("contrast", EXTRA_SECTION, ("contrast:1.5",)), config.brightness_size),
    ]


#: The ``section`` of the cases that are not iCHEETAH's: the TenSEAL study's +60, hepix's contrast.
BRIGHTNESS60_SECTION = f"{seeds.TENSEAL_STUDY.short} §5.1"
EXTRA_SECTION = "hepix"
#: Cases the packed BFV rows run: the image operations whose raw constants are integers.
BFV_CASES = ("meanfilter", "brightness", "watermark")


def _pixel_size(case: Case, packed_size: int, strategy: str, config: OpsConfig) -> int:
    """The pixel layout's size for a case: the packed one, except where one ciphertext per pixel
    makes it too long (see the module docstring)."""
    if case.section in (BRIGHTNESS60_SECTION, EXTRA_SECTION):
        return min(packed_size, config.pixel_extras_size)
    if case.name == "brightness":
        return min(packed_size, config.pixel_brightness_fresh_size if strategy == "fresh"
                   else config.pixel_brightness_full_size)
    return packed_size


# --- hepix's own image ops, on a colour image ---------------------------------------------------

def colour_rows(sources: Sources, config: OpsConfig, keys=None, *,
                progress: Callable[[OpsMeasurement], None] | None = None) -> list[OpsMeasurement]:
    """Every case of :data:`bench.suites.imageops.COLOUR_CASES`: packed CKKS and BFV at ``colour_size``, the
    pixel layout (CKKS, ``fresh``) at ``pixel_colour_size``.  Written apart from iCHEETAH's cases, to
    ``OUT/bench_imageops``."""
    from .imageops import COLOUR_CASES, run_packed, run_pixel

    if sources.colour is None:
        return []
    keys = keys or Keys()
    name, pixels = sources.colour
    rows: list[OpsMeasurement] = []

    def add(m: OpsMeasurement):
        rows.append(m)
        if progress:
            progress(m)

    for case_name, specs in COLOUR_CASES:
        case, ops = Case(case_name, EXTRA_SECTION, specs), parse_ops(list(specs))
        img = prepared_colour(pixels, config.colour_size)
        for preset in (config.packed_ckks, config.packed_bfv):
            ctx, ev = keys.get(preset)
            raw, enc, opt, dec, count, nbytes = run_packed(ctx, ev, img, ops)
            add(_image_row(case, PACKED, ctx, "fresh", SECURITY_IND_CPA, name, img,
                                   ChainResult(raw, enc, opt, dec, count, nbytes), ops))
        ctx, _ev = keys.get(config.pixel_preset)
        small = prepared_colour(pixels, config.pixel_colour_size)
        strategy = make_strategy("fresh", ctx).prepare(small)
        raw, enc, opt, dec, count, nbytes = run_pixel(ctx, strategy, small, ops)
        add(_image_row(case, PIXEL, ctx, "fresh", SECURITY_IND_CPA, name, small,
                               ChainResult(raw, enc, opt, dec, count, nbytes, strategy.setup_seconds), ops))
    return rows


# --- matching ---------------------------------------------------------------------------------

def match_bound() -> float:
    """``D``, the bound on |a - b| of two images after no ops: 255."""
    lo, hi = raw_range([])
    return float(hi - lo)


def _match_row(label: str, size: int, images: list[np.ndarray], layout: str, ctx: HEContext,
               metric: str, enc: float, opt: float, dec: float, count: int, nbytes: int,
               values: list[float], setup: float = 0.0, strategy: str = "fresh") -> OpsMeasurement:
    p = ctx.params
    a, b, c = images
    bound = match_bound()
    refs = [plain_distances(x, y, bound) for x, y in ((a, b), (a, c), (b, c))]
    exact = [r[metric] for r in refs]
    target = [r["l1_poly"] if metric == "l1" else r["l2"] for r in refs]
    d12, d13, d23 = values
    return OpsMeasurement(
        case="matching", section="4.4.3", ops=f"match:{metric}", layout=layout, scheme=p.scheme, preset=p.name,
        n=p.n, strategy=strategy, security=SECURITY_IND_CPA, image=label, size=size,
        channels=1 if a.ndim == 2 else int(a.shape[2]), pixels=int(a.size), ciphertexts=count, bytes=nbytes,
        setup_seconds=setup, encrypt_seconds=enc, op_seconds=opt, decrypt_seconds=dec, metric=metric,
        d12=d12, d13=d13, d23=d23, ref_d12=exact[0], ref_d13=exact[1], ref_d23=exact[2],
        distance_rel_err=max(abs(v - t) / t if t else abs(v) for v, t in zip(values, target)),
        order_as_paper=paper_order(d12, d13, d23), ref_order_as_paper=paper_order(*exact),
    )


_PAIRS = ((0, 1), (0, 2), (1, 2))     # d12, d13, d23


def _packed_match(ctx: HEContext, ev: Evaluator, images: list[np.ndarray], metrics, label: str
                  ) -> list[OpsMeasurement]:
    th, tw = default_tile(ctx.params)
    h, w = images[0].shape[:2]
    t = time.perf_counter()
    enc = []
    for img in images:
        _grid, produce = packed_encrypt_tiles(img, ctx, th, tw)
        enc.append(list(produce))
    enc_s = time.perf_counter() - t
    count = sum(len(ts) for ts in enc)
    nbytes = sum(len(pt.ct) for ts in enc for pt in ts)
    bound, parts, integer = match_bound(), len(enc[0]), ctx.params.is_integer
    rows = []
    for metric in metrics:
        t = time.perf_counter()
        loaded = [[ev.load(pt.ct) for pt in ts] for ts in enc]
        sums = []
        for i, j in _PAIRS:
            partials = [pair_partial(ev, x, y, metric, PackedGeometry(th, tw, 0, pt.y, pt.x, h, w), bound, parts)
                        for x, y, pt in zip(loaded[i], loaded[j], enc[i])]
            sums.append(ev.dump(ev.add_many(partials)))
        op_s = time.perf_counter() - t
        t = time.perf_counter()
        factor = distance_scale(metric, 1.0, bound, parts, integer)
        values = [float(ctx.decrypt_slots(s, 1)[0]) * factor for s in sums]
        dec_s = time.perf_counter() - t
        rows.append(_match_row(label, h, images, PACKED, ctx, metric, enc_s, op_s, dec_s, count, nbytes, values))
    return rows


def _pixel_match(ctx: HEContext, ev: Evaluator, images: list[np.ndarray], metrics, label: str
                 ) -> list[OpsMeasurement]:
    strategy = make_strategy("fresh", ctx).prepare()
    t = time.perf_counter()
    batches = [strategy.encrypt(img.reshape(-1)) for img in images]
    enc_s = time.perf_counter() - t
    count = sum(len(b) for b in batches)
    nbytes = sum(b.nbytes for b in batches)
    bound, parts, integer = match_bound(), len(batches[0]), ctx.params.is_integer
    rows = []
    for metric in metrics:
        t = time.perf_counter()
        sums = []
        for i, j in _PAIRS:
            acc = None
            for x, y in zip(batches[i], batches[j]):
                part = pair_partial(ev, ev.load(x), ev.load(y), metric, None, bound, parts)
                acc = part if acc is None else ev.add(acc, part)
            sums.append(ev.dump(acc))
        op_s = time.perf_counter() - t
        t = time.perf_counter()
        factor = distance_scale(metric, 1.0, bound, parts, integer)
        values = [float(ctx.decrypt_slots(s, 1)[0]) * factor for s in sums]
        dec_s = time.perf_counter() - t
        rows.append(_match_row(label, images[0].shape[0], images, PIXEL, ctx, metric, enc_s, op_s, dec_s,
                               count, nbytes, values, strategy.setup_seconds))
    return rows


def match_images(sources: Sources, size: int, config: OpsConfig) -> tuple[list[np.ndarray], str]:
    """Images 1, 2, 3 of the matching at ``size``, and their label."""
    (n1, p1), (n3, p3) = sources.match1, sources.match3
    a = prepared(p1, size)
    images = [a, brightened(a, config.match_brighten), prepared(p3, size)]
    return images, f"{n1} | +{config.match_brighten} | {n3} @{size}"


# --- the run -------------------------------------------------------------------------------------

def run_ops_bench(sources: Sources, config: OpsConfig = DEFAULT, *,
                  progress: Callable[[OpsMeasurement], None] | None = None) -> list[OpsMeasurement]:
    """Every case in every layout and configuration of ``config``; see the module docstring."""
    warm_up()
    keys = Keys()
    rows: list[OpsMeasurement] = []

    def add(m: OpsMeasurement):
        rows.append(m)
        if progress:
            progress(m)

    main_name, main_pixels = sources.main
    for case, size in image_cases(config):
        ops = parse_ops(list(case.specs))
        img = prepared(main_pixels, size)
        presets = [config.packed_ckks] + ([config.packed_bfv] if case.name in BFV_CASES else [])
        for name in presets:
            ctx, ev = keys.get(name)
            add(_image_row(case, PACKED, ctx, "fresh", SECURITY_IND_CPA, main_name, img,
                           run_packed_chain(ctx, ev, img, ops), ops))
        ctx, _ev = keys.get(config.pixel_preset)
        for strategy in config.pixel_strategies:
            s = _pixel_size(case, size, strategy, config)
            small = img if s == size else prepared(main_pixels, s)
            res = run_pixel_chain(ctx, strategy, small, ops, config.pixel_tile)
            add(_image_row(case, PIXEL, ctx, strategy, security_of(strategy), main_name, small, res, ops))

    images, label = match_images(sources, config.match_size, config)
    for name, metrics in config.packed_match:
        ctx, ev = keys.get(name)
        for m in _packed_match(ctx, ev, images, metrics, label):
            add(m)
    for name, metrics, size in config.pixel_match:
        ctx, ev = keys.get(name)
        small, small_label = match_images(sources, size, config)
        for m in _pixel_match(ctx, ev, small, metrics, small_label):
            add(m)
    return rows


# --- the command line ------------------------------------------------------------------------------

def paper_encrypt_seconds(row: dict) -> float | None:
    """iCHEETAH's encryption time for a pixel-layout row of one of its §4.4 cases at the paper's
    size (``fresh``: without caching, ``full``: full caching), else None."""
    case = seeds.ICHEETAH_CASES.get(row["case"])
    if case is None or row["layout"] != PIXEL or row["size"] != case.size or row["case"] == "matching":
        return None
    figure = {"fresh": case.fresh_seconds, "full": case.full_seconds}.get(row["strategy"])
    return figure.value if figure else None


def run(args) -> int:
    """``hepix bench --suite ops``: measure, write ``OUT/bench_ops/<run_id>.parquet`` (iCHEETAH's cases) and
    ``OUT/bench_imageops/<run_id>.parquet`` (hepix's own ops on a colour image), print."""
    config = QUICK if args.quick else DEFAULT
    sources = load_sources(usc_sipi_dir(), config)
    if sources.origin != "usc-sipi":
        print(f"no USC-SIPI images in {usc_sipi_dir()}: using scikit-image's sample images")
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: iCHEETAH's 4.4 cases in both layouts{' (quick)' if args.quick else ''}, "
          f"image {sources.main[0]}, matching {sources.match1[0]} / +{config.match_brighten} / "
          f"{sources.match3[0]}, one process, {runinfo.cores()} cores")
    print("pixel-layout rows with strategy 'full' use iCHEETAH's leaking caching (security='leaks')")

    def progress(m):
        what = (f"exact {m.exact_fraction:.4f}" if m.exact_fraction is not None
                else f"d12 {m.d12:,.0f} d23 {m.d23:,.0f} d13 {m.d13:,.0f}")
        print(f"  {m.case:<13} {m.layout:<6} {m.preset:<12} {m.strategy:<5} {m.size:>4}px  "
              f"enc {m.encrypt_seconds:8.3f} s  op {m.op_seconds:8.3f} s  dec {m.decrypt_seconds:8.3f} s  {what}",
              flush=True)

    measured = run_ops_bench(sources, config, progress=progress)
    path = write_rows(measured, BENCH_OPS, Path(args.out) / "bench_ops", run_id, run_columns(run_id, started))
    own = colour_rows(sources, config, progress=progress)
    own_path = write_rows(own, BENCH_OPS, Path(args.out) / "bench_imageops", run_id, run_columns(run_id, started))

    rows = [m.as_dict() for m in measured + own]
    images = [{**r, "paper_encrypt_seconds": paper_encrypt_seconds(r)} for r in rows if r["case"] != "matching"]
    matching = [r for r in rows if r["case"] == "matching"]
    print()
    print(table(images, [
        ("case", "case", ""), ("section", "section", ""), ("layout", "layout", ""), ("preset", "preset", ""),
        ("strategy", "strategy", ""), ("security", "security", ""), ("size", "size", "d"),
        ("ciphertexts", "cts", ",d"), ("encrypt_seconds", "encrypt s", ".3f"),
        ("paper_encrypt_seconds", "iCHEETAH enc s", ".2f"), ("op_seconds", "op s", ".3f"),
        ("decrypt_seconds", "decrypt s", ".3f"), ("exact_fraction", "exact", ".4f"),
        ("max_abs_err", "max err", ".1e"), ("detected", "detected", ""),
    ]))
    print(f"iCHEETAH enc s: {seeds.ICHEETAH.cite()}, §4.4 (their machine; pixel rows at the paper's size only)")
    print()
    d = seeds.MATCHING_DISTANCES
    print("matching (d12: image 1 to its brightened copy; d13, d23: to the other image; l2 is squared; "
          f"iCHEETAH's Table 3 has d12 < d23 < d13: L1 {d['d12'].value:,.2f} < {d['d23'].value:,.2f} "
          f"< {d['d13'].value:,.2f} on its own images)")
    print(table(matching, [
        ("layout", "layout", ""), ("preset", "preset", ""), ("metric", "metric", ""), ("size", "size", "d"),
        ("ciphertexts", "cts", ",d"), ("encrypt_seconds", "encrypt s", ".3f"), ("op_seconds", "op s", ".3f"),
        ("decrypt_seconds", "decrypt s", ".3f"), ("d12", "d12", ",.1f"), ("d23", "d23", ",.1f"),
        ("d13", "d13", ",.1f"), ("ref_d12", "plain d12", ",.0f"), ("ref_d23", "plain d23", ",.0f"),
        ("ref_d13", "plain d13", ",.0f"), ("distance_rel_err", "rel err", ".1e"),
        ("order_as_paper", "order ok", ""),
    ]))
    bad = [r for r in images if r["exact_fraction"] != 1.0] + [r for r in images if r["detected"] is False]
    if bad:
        print(f"\nnot exact (or watermark not found): {len(bad)} row(s)")
    print(f"\nwrote {path} and {own_path}")
    return 0
