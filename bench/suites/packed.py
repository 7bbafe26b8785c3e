"""``hepix bench --suite packed``: the packed layout against TenSEAL and the pixel layout's ``full`` caching.

Everything runs in one process, one thread, on the same images in the same run:

* ``hepix-packed``: :func:`hecore.layouts.packed.encrypt_tiles` (a tile channel of up to N/2
  pixels per fresh public-key ciphertext, IND-CPA), at each preset; a second pass splits the time
  into encoding + encryption and serialisation (:func:`bench.timing.split_encryption`).
* ``hepix-packed-complex``: the same with complex packing (two pixels per slot, layout
  ``packed-complex``): twice the pixels per ciphertext.
* ``tenseal``: TenSEAL ``ckks_vector`` at the same N, primes and scale, on the same tiles (N/2
  values per vector), with public-key and with symmetric (secret-key) encryption, each serialised
  two ways (column ``serialization``): ``zstd``, as TenSEAL ships (``serialize()`` compresses),
  and ``none``, uncompressed like hepix's ciphertexts, so that a ratio is not an artefact of
  compression.  TenSEAL's Python API has no uncompressed serialisation (SEAL's default, zstd, is
  fixed when TenSEAL is built), so a ``none`` row is TenSEAL's encryption followed by SEAL's
  uncompressed serialisation of a ciphertext of the same parameters (through Pyfhel, on the same
  SEAL format: its bytes are what TenSEAL's ciphertext would take), each timed per vector.
  TenSEAL is a comparison baseline, imported lazily; without it those rows are skipped with a
  logged message.
* ``hepix-packed-symmetric`` (``-complex``, ``-complex-zstd``): :mod:`hecore.encrypt.symmetric`, the key
  owner's secure fast path: seeded secret-key encryption through the native extension, the whole
  image in one call; real packing and complex packing (layout ``packed-complex``, two pixels per
  slot), serialised uncompressed and, for the complex packing, also with zstd.  Skipped with a
  logged message when the extension is not installed.
* ``hepix-pixel-symmetric``: the secure path in the pixel layout (one seeded secret-key
  ciphertext per pixel value, batched in one native call) at ``paper-4096``, against ``full``
  caching; measured on the image's top-left 32x32 crop of its first channel (1,024 ciphertexts
  of 66 KB: a whole image would hold gigabytes), its row says so in width/height/pixels.
* ``hepix-pixel-full``: the pixel layout's ``full`` caching (iCHEETAH's fastest mode, §3.2; it
  leaks) at ``paper-4096``: the baseline the packed layout is measured against.

Every implementation, the pixel ``full`` baseline included, is timed ``repeats`` times
round-robin (every implementation once per round, so machine noise hits them alike) and the
median is reported.  Ratios on the same image, never absolute timings, are what hepix claims.
Writes ``OUT/bench_packed/<run_id>.parquet`` (``bench.schemas.BENCH_PACKED``).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from bench.datasets import packed_images
from bench.rows import run_columns, write_rows
from bench.schemas import BENCH_PACKED
from bench.timing import median, split_encryption
from hecore.ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS
from hecore.encrypt.strategies import make_strategy
from hecore.layouts.packed import block_values, default_tile
from hecore.layouts.packed import decrypt_tiles as packed_decrypt_tiles
from hecore.layouts.packed import encrypt_tiles as packed_encrypt_tiles
from hecore.layouts.pixel import channel_plane
from hecore.layouts.pixel import encrypt_tiles as pixel_encrypt_tiles
from hecore.layouts.tiling import tile_image, untile_channels
from hecore.quality import compare
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.kernels import warm_up
from hecore.seal.params import Params, preset
from jobs.runtime import runinfo
from jobs.runtime.console import table

from .pixel import DEFAULT_TILE as PIXEL_TILE

log = logging.getLogger(__name__)

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "sizes", "preset", "image", "repeats"})

HEPIX_PACKED = "hepix-packed"
HEPIX_PACKED_COMPLEX = "hepix-packed-complex"
TENSEAL = "tenseal"
PIXEL_FULL = "hepix-pixel-full"
HEPIX_SYMMETRIC = "hepix-packed-symmetric"
PIXEL_SYMMETRIC = "hepix-pixel-symmetric"
#: (complex packing, compression) of the symmetric rows.
SYMMETRIC_VARIANTS = ((False, "none"), (True, "none"), (True, "zstd"))
#: TenSEAL's serialisations: as it ships first (the reference of ``vs_tenseal_*``), then uncompressed.
TENSEAL_SERIALIZATIONS = ("zstd", "none")

DEFAULT_PRESETS = ("paper-4096", "tenseal-8192")
#: The pixel-layout baseline runs at iCHEETAH's parameters.
BASELINE_PRESET = "paper-4096"
DEFAULT_REPEATS = 5
DEFAULT_SIZE = 256
DEFAULT_IMAGES = 4


@dataclass
class PackedMeasurement:
    """One implementation at one parameter set, encryption type and serialisation on one image
    (see ``bench.schemas.BENCH_PACKED``)."""

    implementation: str
    library: str
    preset: str
    n: int
    qi_sizes: list
    scale_bits: int
    encryption: str            # public | symmetric | cached
    serialization: str         # none | zstd
    security: str              # ind-cpa | leaks
    image: str
    width: int
    height: int
    channels: int
    pixels: int                # width * height * channels: one value per channel of a pixel
    tile_h: int
    tile_w: int
    ciphertexts: int
    repeats: int
    seconds: float             # median over the repeats
    pixels_per_second: float
    encrypt_seconds: float | None    # encoding + encryption (median), when measured apart
    serialize_seconds: float | None  # serialisation (median), when measured apart
    setup_seconds: float       # keys / context / cache, not in ``seconds``
    bytes: int
    bytes_per_pixel: float
    exact_fraction: float | None = None
    max_abs_err: float | None = None
    vs_tenseal_public: float | None = None
    vs_tenseal_symmetric: float | None = None
    vs_tenseal_public_uncompressed: float | None = None
    vs_tenseal_symmetric_uncompressed: float | None = None
    vs_pixel_full: float | None = None
    bytes_vs_tenseal_symmetric: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Pass:
    """What one timed pass of an implementation over one image produced."""

    seconds: float
    encrypt_seconds: float | None
    serialize_seconds: float | None
    ciphertexts: int
    nbytes: int
    payload: object            # enough to decrypt the pass's ciphertexts afterwards (None: not decrypted)


class Implementation:
    """One implementation at one parameter set: a timed pass, and a decryption of a pass."""

    implementation: str
    library: str
    encryption: str
    serialization: str = "none"
    security: str
    params: Params
    tile: tuple[int, int]
    setup_seconds: float = 0.0

    def warm(self, image: np.ndarray) -> None:
        """Lazy initialisation (buffers, kernels) before anything is timed."""
        self.once(image[: min(8, image.shape[0]), : min(8, image.shape[1])])

    def once(self, image: np.ndarray) -> Pass:
        raise NotImplementedError

    def decrypt(self, image: np.ndarray, payload) -> np.ndarray | None:
        return None

    def region(self, image: np.ndarray) -> np.ndarray:
        """The part of ``image`` a pass encrypts (the whole image but for the pixel-symmetric row)."""
        return image


class HepixPacked(Implementation):
    implementation = HEPIX_PACKED
    encryption = "public"
    security = SECURITY_IND_CPA

    def __init__(self, params: Params, complex_packing: bool = False, ctx: HEContext | None = None):
        t = time.perf_counter()
        if ctx is None:
            ctx, _secret = HEContext.generate(params)     # throwaway keys, never written anywhere
        self.ctx, self.ev = ctx, Evaluator(ctx)
        self.setup_seconds = time.perf_counter() - t
        self.params = params
        self.complex_packing = complex_packing
        if complex_packing:
            self.implementation = HEPIX_PACKED_COMPLEX
        self.tile = default_tile(params, complex_packing=complex_packing)
        self.library = f"hepix / Pyfhel {metadata.version('Pyfhel')}"

    def once(self, image):
        th, tw = self.tile
        t = time.perf_counter()
        grid, produce = packed_encrypt_tiles(image, self.ctx, th, tw, complex_packing=self.complex_packing)
        tiles = list(produce)
        seconds = time.perf_counter() - t
        # The split, on the very values encrypt_tiles encrypts: encode + encrypt, and serialisation.
        enc = ser = 0.0
        _grid, plain = tile_image(image, th, tw)
        for tl in plain:
            for c in range(_grid.channels):
                split = split_encryption(self.ctx, self.ev,
                                         block_values(channel_plane(tl.pixels, c), 0, self.complex_packing))
                enc += split.encode + split.encrypt
                ser += split.serialize
        return Pass(seconds, enc, ser, len(tiles), sum(len(pt.ct) for pt in tiles), (grid, tiles))

    def decrypt(self, image, payload):
        grid, tiles = payload
        return packed_decrypt_tiles(self.ctx, grid, tiles)


class TenSEAL(Implementation):
    implementation = TENSEAL
    security = SECURITY_IND_CPA

    def __init__(self, ts, params: Params, symmetric: bool, serialization: str = "zstd", tctx=None):
        if serialization not in TENSEAL_SERIALIZATIONS:
            raise ValueError(f"TenSEAL serialisation {serialization!r}: choose from {TENSEAL_SERIALIZATIONS}")
        t = time.perf_counter()
        if tctx is None:
            kind = ts.ENCRYPTION_TYPE.SYMMETRIC if symmetric else ts.ENCRYPTION_TYPE.ASYMMETRIC
            tctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=params.n,
                              coeff_mod_bit_sizes=list(params.qi_sizes), encryption_type=kind, n_threads=1)
            tctx.global_scale = 2.0 ** params.scale_bits
        self.tctx = tctx
        if serialization == "none":
            # A ciphertext of the same parameters in SEAL's own format, serialised uncompressed per
            # vector in place of TenSEAL's (throwaway keys, never written anywhere).
            ctx, _secret = HEContext.generate(params, rotations=False)
            self.ev = Evaluator(ctx)
            self.same_shape = self.ev.load(ctx.encrypt_vector(np.zeros(params.slots)))
        self.setup_seconds = time.perf_counter() - t
        self.ts = ts
        self.params = params
        self.tile = default_tile(params)
        self.encryption = "symmetric" if symmetric else "public"
        self.serialization = serialization
        self.library = f"TenSEAL {getattr(ts, '__version__', '?')}"

    def once(self, image):
        ts, tctx = self.ts, self.tctx
        th, tw = self.tile
        enc = ser = 0.0
        out = []
        t = time.perf_counter()
        grid, tiles = tile_image(image, th, tw)
        for tl in tiles:
            for c in range(grid.channels):
                values = channel_plane(tl.pixels, c).reshape(-1).astype(np.float64).tolist()
                t0 = time.perf_counter()
                vec = ts.ckks_vector(tctx, values)
                t1 = time.perf_counter()
                enc += t1 - t0
                if self.serialization == "zstd":
                    data = vec.serialize()
                    kept = data                 # the bytes round-trip through ckks_vector_from
                else:
                    data = self.ev.dump(self.same_shape)
                    kept = vec                  # decrypted from the vector itself
                ser += time.perf_counter() - t1
                out.append((tl, c, kept, len(data)))
        seconds = time.perf_counter() - t
        return Pass(seconds, enc, ser, len(out), sum(n for *_, n in out), (grid, out))

    def decrypt(self, image, payload):
        grid, out = payload
        th, tw = self.tile

        def values(kept):
            vec = self.ts.ckks_vector_from(self.tctx, kept) if isinstance(kept, bytes) else kept
            return np.asarray(vec.decrypt(), dtype=np.float64)[: th * tw].reshape(th, tw)

        return untile_channels(grid, ((tl, c, values(kept)) for tl, c, kept, _n in out))


class HepixSymmetric(Implementation):
    encryption = "symmetric"
    security = SECURITY_IND_CPA

    def __init__(self, params: Params, complex_packing: bool, compression: str):
        from hecore.encrypt import symmetric

        t = time.perf_counter()
        self.ctx, secret = HEContext.generate(params, rotations=False)   # throwaway keys, never written
        self.enc = symmetric.SymmetricEncryptor(self.ctx.public, secret, compression=compression)
        self.setup_seconds = time.perf_counter() - t
        self.sym = symmetric
        self.params = params
        self.tile = default_tile(params, complex_packing=complex_packing)
        self.complex_packing = complex_packing
        self.serialization = compression
        self.implementation = HEPIX_SYMMETRIC + ("-complex" if complex_packing else "") + (
            f"-{compression}" if compression != "none" else "")
        self.library = f"hepix / hepix_seal (SEAL {symmetric.native_module().SEAL_VERSION})"

    def once(self, image):
        th, tw = self.tile
        t = time.perf_counter()
        grid, tiles = packed_encrypt_tiles(image, self.enc, th, tw, complex_packing=self.complex_packing)
        tiles = list(tiles)
        seconds = time.perf_counter() - t
        return Pass(seconds, None, None, len(tiles), sum(len(pt.ct) for pt in tiles), (grid, tiles))

    def decrypt(self, image, payload):
        grid, tiles = payload
        return packed_decrypt_tiles(self.ctx, grid, tiles)


class PixelSymmetric(Implementation):
    implementation = PIXEL_SYMMETRIC
    encryption = "symmetric"
    security = SECURITY_IND_CPA
    crop = 32

    def __init__(self, params: Params):
        from hecore.encrypt import symmetric

        t = time.perf_counter()
        self.ctx, secret = HEContext.generate(params, rotations=False)   # throwaway keys, never written
        self.enc = symmetric.SymmetricEncryptor(self.ctx.public, secret)
        self.setup_seconds = time.perf_counter() - t
        self.params = params
        self.tile = (self.crop, self.crop)
        self.library = f"hepix / hepix_seal (SEAL {symmetric.native_module().SEAL_VERSION})"

    def region(self, image):
        return np.ascontiguousarray(channel_plane(image, 0)[: self.crop, : self.crop])

    def once(self, image):
        crop = self.region(image)
        t = time.perf_counter()
        cts = self.enc.encrypt_real(crop.reshape(-1, 1))       # one ciphertext per pixel value
        seconds = time.perf_counter() - t
        return Pass(seconds, None, None, len(cts), sum(len(c) for c in cts), (crop.shape, cts))

    def decrypt(self, image, payload):
        shape, cts = payload
        return np.array([self.ctx.decrypt_slots(c, 1)[0] for c in cts]).reshape(shape)


class PixelFull(Implementation):
    implementation = PIXEL_FULL
    encryption = "cached"
    security = SECURITY_LEAKS

    def __init__(self, ctx: HEContext, tile: int = PIXEL_TILE):
        self.ctx = ctx
        self.params = ctx.params
        self.tile = (tile, tile)
        self.strategy = make_strategy("full", ctx, allow_leaky=True).prepare()
        self.setup_seconds = self.strategy.setup_seconds
        self.library = f"hepix / Pyfhel {metadata.version('Pyfhel')} + numba"

    def warm(self, image):
        # The output buffer of a whole tile is faulted in: steady state is what is timed.
        _grid, produce = pixel_encrypt_tiles(image, self.strategy, *self.tile, reuse_buffer=True)
        next(produce)

    def once(self, image):
        # As the pixel suite measures it: the output buffer is reused tile after tile (each tile's
        # ciphertexts would be written out before the next), nothing kept.
        count = nbytes = 0
        t = time.perf_counter()
        _grid, produce = pixel_encrypt_tiles(image, self.strategy, *self.tile, reuse_buffer=True)
        for pt in produce:
            count += len(pt.batch)
            nbytes += pt.batch.nbytes
        seconds = time.perf_counter() - t
        return Pass(seconds, None, None, count, nbytes, None)


def symmetric_implementations(params: list[Params], pixel: bool = False) -> list[Implementation]:
    """The symmetric rows (with ``pixel``, also the pixel layout's at the baseline preset), or none
    (with the reason logged) when the native extension is missing."""
    from hecore.encrypt.symmetric import NativeExtensionMissing, native_module

    try:
        native_module()
    except NativeExtensionMissing as e:
        log.warning("hepix-packed-symmetric rows skipped: %s", e)
        return []
    impls: list[Implementation] = [HepixSymmetric(p, cplx, compr) for p in params for cplx, compr in SYMMETRIC_VARIANTS]
    if pixel:
        impls.append(PixelSymmetric(preset(BASELINE_PRESET)))
    return impls


def tenseal_implementations(ts, params: list[Params]) -> list[Implementation]:
    """TenSEAL public and symmetric at each preset, each serialised as shipped (zstd) and uncompressed
    (one TenSEAL context per preset and encryption type, shared by both serialisations)."""
    impls: list[Implementation] = []
    for p in params:
        for symmetric in (False, True):
            shipped = TenSEAL(ts, p, symmetric, "zstd")
            impls.append(shipped)
            impls.append(TenSEAL(ts, p, symmetric, "none", tctx=shipped.tctx))
    # as shipped first: the rows other code finds first for (tenseal, encryption) are TenSEAL's own
    return sorted(impls, key=lambda i: TENSEAL_SERIALIZATIONS.index(i.serialization))


def import_tenseal():
    """The ``tenseal`` module, or None (with the reason logged) when it cannot be imported."""
    try:
        import tenseal
    except Exception as e:   # ImportError, or a broken binary wheel
        log.warning("TenSEAL rows skipped: tenseal cannot be imported (%s: %s); "
                    "install it with pip install 'hepix[bench]'", type(e).__name__, e)
        return None
    return tenseal


def run_packed_bench(images: dict[str, np.ndarray], *, presets=DEFAULT_PRESETS,
                     repeats: int = DEFAULT_REPEATS, tenseal: bool = True, pixel_full: bool = True,
                     symmetric: bool = True,
                     progress: Callable[[PackedMeasurement], None] | None = None) -> list[PackedMeasurement]:
    """Measure every implementation on every image (keyed by a display name); see the module docstring.

    Ratio columns compare ``pixels_per_second`` on the same image: ``vs_tenseal_*`` with TenSEAL at
    the same N (as shipped; ``*_uncompressed``: serialised without compression), ``vs_pixel_full``
    with the pixel ``full`` row.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    params = [preset(p) if isinstance(p, str) else p for p in presets]
    for p in params:
        p.ckks_only(f"the packed suite compares CKKS encryptions (TenSEAL ckks_vector); "
                    f"{p.name} is {p.scheme.upper()}: choose a CKKS preset", ValueError)
    impls: list[Implementation] = [HepixPacked(p) for p in params]
    impls += [HepixPacked(i.params, complex_packing=True, ctx=i.ctx) for i in list(impls)]
    ts = import_tenseal() if tenseal else None
    if ts is not None:
        impls += tenseal_implementations(ts, params)
    if symmetric:
        impls += symmetric_implementations(params, pixel=pixel_full)
    if pixel_full:
        base = next((i.ctx for i in impls if isinstance(i, HepixPacked) and i.params.name == BASELINE_PRESET),
                    None)
        if base is None:
            base, _secret = HEContext.generate(preset(BASELINE_PRESET))
        warm_up()
        impls.append(PixelFull(base))

    rows: list[PackedMeasurement] = []
    for name, image in images.items():
        image = np.ascontiguousarray(image)
        for impl in impls:          # warm-up: lazy initialisation is not what we time
            impl.warm(image)
        passes: dict[int, list[Pass]] = {id(i): [] for i in impls}
        for _ in range(repeats):
            for impl in impls:
                done = passes[id(impl)]
                if done:
                    done[-1].payload = None     # only the last pass is decrypted
                done.append(impl.once(image))

        image_rows = []
        for impl in impls:
            rs = passes[id(impl)]
            last = rs[-1]
            seconds = median(r.seconds for r in rs)
            region = impl.region(image)
            pixels = int(region.size)
            m = PackedMeasurement(
                implementation=impl.implementation, library=impl.library, preset=impl.params.name,
                n=impl.params.n, qi_sizes=list(impl.params.qi_sizes), scale_bits=impl.params.scale_bits,
                encryption=impl.encryption, serialization=impl.serialization, security=impl.security,
                image=name, width=int(region.shape[1]), height=int(region.shape[0]),
                channels=1 if region.ndim == 2 else int(region.shape[2]), pixels=pixels,
                tile_h=impl.tile[0], tile_w=impl.tile[1], ciphertexts=last.ciphertexts, repeats=len(rs),
                seconds=seconds, pixels_per_second=pixels / seconds,
                encrypt_seconds=median(r.encrypt_seconds for r in rs),
                serialize_seconds=median(r.serialize_seconds for r in rs),
                setup_seconds=impl.setup_seconds, bytes=last.nbytes, bytes_per_pixel=last.nbytes / pixels,
            )
            decrypted = impl.decrypt(image, last.payload)
            if decrypted is not None:
                q = compare(region, decrypted)
                m.exact_fraction, m.max_abs_err = q.exact_fraction, q.max_abs_err
            image_rows.append(m)

        fill_ratios(image_rows)
        for m in image_rows:
            if progress:
                progress(m)
        rows += image_rows
    return rows


def fill_ratios(rows: list[PackedMeasurement]) -> None:
    """Ratios of pixels/s (and bytes) to the references measured on the same image."""
    def tenseal(encryption, n, serialization):
        return next((r for r in rows if r.implementation == TENSEAL and r.encryption == encryption
                     and r.n == n and r.serialization == serialization), None)

    def ratio(r, ref):
        return r.pixels_per_second / ref.pixels_per_second if ref else None

    full = next((r for r in rows if r.implementation == PIXEL_FULL), None)
    for r in rows:
        if r.implementation != PIXEL_FULL:
            r.vs_tenseal_public = ratio(r, tenseal("public", r.n, "zstd"))
            r.vs_tenseal_symmetric = ratio(r, tenseal("symmetric", r.n, "zstd"))
            r.vs_tenseal_public_uncompressed = ratio(r, tenseal("public", r.n, "none"))
            r.vs_tenseal_symmetric_uncompressed = ratio(r, tenseal("symmetric", r.n, "none"))
            sym = tenseal("symmetric", r.n, "zstd")
            r.bytes_vs_tenseal_symmetric = r.bytes_per_pixel / sym.bytes_per_pixel if sym else None
        r.vs_pixel_full = ratio(r, full)


# --- the command line ------------------------------------------------------------------------------

def run(args) -> int:
    """``hepix bench --suite packed``: measure, write ``OUT/bench_packed/<run_id>.parquet``, print."""
    size = args.sizes[-1] if args.sizes else DEFAULT_SIZE
    count = args.images if args.images is not None else (1 if args.quick else DEFAULT_IMAGES)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else DEFAULT_REPEATS)
    if count < 1 or repeats < 1:
        raise SystemExit(f"hepix bench: --images and --repeats must be >= 1, got {count} and {repeats}")
    presets = (args.preset,) if args.preset else DEFAULT_PRESETS
    for p in presets:
        preset(p).ckks_only(f"hepix bench: the packed suite compares CKKS encryptions (TenSEAL ckks_vector); "
                            f"{p} is not CKKS: choose a CKKS preset", SystemExit)
    images = packed_images(count, size, args.image)
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: packed layout vs TenSEAL vs pixel full, {', '.join(presets)}, "
          f"{len(images)} image(s) at {size}x{size}, median of {repeats}, one process, one thread, "
          f"{runinfo.cores()} cores")

    def progress(m):
        print(f"  {m.image:<24} {m.implementation:<34} {m.preset:<12} {m.encryption:<9} {m.serialization:<4} "
              f"{m.pixels_per_second:>13,.0f} px/s", flush=True)

    try:
        measured = run_packed_bench(images, presets=presets, repeats=repeats, progress=progress)
    except ValueError as e:
        raise SystemExit(f"hepix bench: {e}")
    path = write_rows(measured, BENCH_PACKED, Path(args.out) / "bench_packed", run_id, run_columns(run_id, started))

    rows = [m.as_dict() for m in measured]
    print()
    print(table(rows, [
        ("image", "image", ""), ("implementation", "implementation", ""), ("preset", "preset", ""),
        ("encryption", "encryption", ""), ("serialization", "ser", ""), ("security", "security", ""),
        ("ciphertexts", "cts", "d"), ("seconds", "seconds", ".3f"), ("pixels_per_second", "px/s", ",.0f"),
        ("encrypt_seconds", "enc s", ".3f"), ("serialize_seconds", "ser s", ".3f"),
        ("bytes_per_pixel", "B/px", ",.1f"), ("vs_tenseal_public", "x TS pub", ".2f"),
        ("vs_tenseal_public_uncompressed", "x TS pub none", ".2f"), ("vs_tenseal_symmetric", "x TS sym", ".2f"),
        ("vs_tenseal_symmetric_uncompressed", "x TS sym none", ".2f"), ("vs_pixel_full", "x pixel full", ".1f"),
        ("bytes_vs_tenseal_symmetric", "B x TS sym", ".2f"), ("exact_fraction", "exact", ".4f"),
    ]))
    print()
    print(summary(rows))
    print(f"\nwrote {path}")
    return 0


def summary(rows: list[dict]) -> str:
    """Per implementation and configuration, over all images: pixels/s over total seconds, and the
    ratios' geometric means."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["implementation"], r["preset"], r["encryption"], r["serialization"]), []).append(r)

    def gmean(vals):
        vals = [v for v in vals if v]
        return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None

    out = []
    for (impl, pre, enc, ser), rs in groups.items():
        exact = [r["exact_fraction"] for r in rs if r["exact_fraction"] is not None]
        out.append({
            "implementation": impl, "preset": pre, "encryption": enc, "serialization": ser,
            "security": rs[0]["security"], "images": len(rs),
            "pixels_per_second": sum(r["pixels"] for r in rs) / sum(r["seconds"] for r in rs),
            "bytes_per_pixel": sum(r["bytes"] for r in rs) / sum(r["pixels"] for r in rs),
            **{k: gmean(r[k] for r in rs) for k in (
                "vs_tenseal_public", "vs_tenseal_public_uncompressed", "vs_tenseal_symmetric",
                "vs_tenseal_symmetric_uncompressed", "vs_pixel_full", "bytes_vs_tenseal_symmetric")},
            "exact_fraction": min(exact) if exact else None,
        })
    return "all images (px/s over total time; ratios: geometric mean over images; exact: worst image)\n" + table(
        out, [("implementation", "implementation", ""), ("preset", "preset", ""), ("encryption", "encryption", ""),
              ("serialization", "ser", ""), ("security", "security", ""), ("images", "images", "d"),
              ("pixels_per_second", "px/s/core", ",.0f"), ("bytes_per_pixel", "B/px", ",.1f"),
              ("vs_tenseal_public", "x TS pub", ".2f"), ("vs_tenseal_public_uncompressed", "x TS pub none", ".2f"),
              ("vs_tenseal_symmetric", "x TS sym", ".2f"),
              ("vs_tenseal_symmetric_uncompressed", "x TS sym none", ".2f"),
              ("vs_pixel_full", "x pixel full", ".1f"), ("bytes_vs_tenseal_symmetric", "B x TS sym", ".2f"),
              ("exact_fraction", "exact", ".4f")])
