"""Measurements of the packed layout against TenSEAL and against the pixel layout's ``full`` caching.

Everything runs in one process, one thread, on the same images in the same run:

* ``hepix-packed``: :func:`hecore.layouts.packed.encrypt_tiles` (a tile channel of up
  to N/2 pixels per fresh public-key ciphertext, IND-CPA), at each preset; a
  second pass through :meth:`HEContext.encrypt_vector_timed` splits the time
  into encoding + encryption and serialization.
* ``hepix-packed-complex``: the same with complex packing (two pixels per
  slot, layout ``packed-complex``): twice the pixels per ciphertext.
* ``tenseal``: TenSEAL ``ckks_vector`` at the same N, primes and scale, on
  the same tiles (N/2 values per vector), with public-key and with symmetric
  (secret-key) encryption.  TenSEAL is a comparison baseline, imported lazily;
  without it those rows are skipped with a logged message.
* ``hepix-packed-symmetric`` (``-complex``, ``-complex-zstd``): :mod:`hecore.encrypt.symmetric`, the key
  owner's secure fast path: seeded secret-key encryption through the native extension, the whole
  image in one call; real packing and complex packing (layout ``packed-complex``, two pixels per
  slot), serialized uncompressed and, for the complex packing, also with zstd.  Skipped with a
  logged message when the extension is not installed.
* ``hepix-pixel-symmetric``: the secure path in the pixel layout (one seeded secret-key
  ciphertext per pixel value, batched in one native call) at ``paper-4096``, against ``full``
  caching; measured on the image's top-left 32x32 crop of its first channel (1,024 ciphertexts
  of 66 KB: a whole image would hold gigabytes), its row says so in width/height/pixels.
* ``hepix-pixel-full``: the pixel layout's ``full`` caching (iCHEETAH's
  fastest mode; it leaks) at ``paper-4096``, the baseline of the issue's goal
  "packed >= 100x the paper's fastest pixel mode, at IND-CPA".

The packed measurements are repeated round-robin (every implementation once
per round, so machine noise hits them alike) and the median is reported.
Ratios on the same image, never absolute timings, are what hepix claims.
"""
from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from hecore.ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS
from hecore.context import HEContext
from hecore.encrypt.strategies import make_strategy
from hecore.kernels import warm_up
from hecore.layouts.packed import block_values, default_tile
from hecore.layouts.packed import decrypt_tiles as packed_decrypt_tiles
from hecore.layouts.packed import encrypt_tiles as packed_encrypt_tiles
from hecore.layouts.pixel import channel_plane
from hecore.layouts.pixel import encrypt_tiles as pixel_encrypt_tiles
from hecore.layouts.tiling import tile_image, untile_channels
from hecore.params import Params, preset
from hecore.quality import compare

from .pixel import DEFAULT_TILE as PIXEL_TILE

log = logging.getLogger(__name__)

HEPIX_PACKED = "hepix-packed"
HEPIX_PACKED_COMPLEX = "hepix-packed-complex"
TENSEAL = "tenseal"
PIXEL_FULL = "hepix-pixel-full"
HEPIX_SYMMETRIC = "hepix-packed-symmetric"
PIXEL_SYMMETRIC = "hepix-pixel-symmetric"
#: (complex packing, compression) of the symmetric rows.
SYMMETRIC_VARIANTS = ((False, "none"), (True, "none"), (True, "zstd"))

DEFAULT_PRESETS = ("paper-4096", "tenseal-8192")
#: The pixel-layout baseline runs at the paper's parameters.
BASELINE_PRESET = "paper-4096"
DEFAULT_REPEATS = 5


@dataclass
class PackedMeasurement:
    """One implementation at one parameter set and encryption type on one image
    (see ``schemas.tables.BENCH_PACKED``)."""

    implementation: str
    library: str
    preset: str
    n: int
    qi_sizes: list
    scale_bits: int
    encryption: str            # public | symmetric | cached
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
    serialize_seconds: float | None  # serialization (median), when measured apart
    setup_seconds: float       # keys / context / cache, not in ``seconds``
    bytes: int
    bytes_per_pixel: float
    exact_fraction: float | None = None
    max_abs_err: float | None = None
    vs_tenseal_public: float | None = None
    vs_tenseal_symmetric: float | None = None
    vs_pixel_full: float | None = None
    bytes_vs_tenseal_symmetric: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Run:
    """What one timed pass over one image produced."""

    seconds: float
    encrypt_seconds: float | None
    serialize_seconds: float | None
    ciphertexts: int
    nbytes: int
    payload: object            # enough to decrypt the pass's ciphertexts afterwards


class _Impl:
    """One implementation at one parameter set: a timed pass, and a decryption of a pass."""

    implementation: str
    library: str
    encryption: str
    security: str
    params: Params
    tile: tuple[int, int]
    setup_seconds: float = 0.0

    def once(self, image: np.ndarray) -> _Run:
        raise NotImplementedError

    def decrypt(self, image: np.ndarray, payload) -> np.ndarray | None:
        return None

    def region(self, image: np.ndarray) -> np.ndarray:
        """The part of ``image`` a pass encrypts (the whole image but for the pixel-symmetric row)."""
        return image

    @property
    def label(self) -> str:
        return f"{self.implementation} {self.params.name} {self.encryption}"


class _HepixPacked(_Impl):
    implementation = HEPIX_PACKED
    encryption = "public"
    security = SECURITY_IND_CPA

    def __init__(self, params: Params, complex_packing: bool = False, ctx: HEContext | None = None):
        from importlib import metadata

        t = time.perf_counter()
        if ctx is None:
            ctx, _secret = HEContext.generate(params)     # throwaway keys, never written anywhere
        self.ctx = ctx
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
        # The split, through the same HEContext call encrypt_plane makes, timed inside.
        enc = ser = 0.0
        _grid, plain = tile_image(image, th, tw)
        for tl in plain:
            for c in range(_grid.channels):
                values = block_values(channel_plane(tl.pixels, c), 0, self.complex_packing)
                _ct, e, s = self.ctx.encrypt_vector_timed(values)
                enc += e
                ser += s
        return _Run(seconds, enc, ser, len(tiles), sum(len(pt.ct) for pt in tiles), (grid, tiles))

    def decrypt(self, image, payload):
        grid, tiles = payload
        return packed_decrypt_tiles(self.ctx, grid, tiles)


class _TenSEAL(_Impl):
    implementation = TENSEAL
    security = SECURITY_IND_CPA

    def __init__(self, ts, params: Params, symmetric: bool):
        t = time.perf_counter()
        kind = ts.ENCRYPTION_TYPE.SYMMETRIC if symmetric else ts.ENCRYPTION_TYPE.ASYMMETRIC
        self.tctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=params.n,
                               coeff_mod_bit_sizes=list(params.qi_sizes), encryption_type=kind, n_threads=1)
        self.tctx.global_scale = 2.0 ** params.scale_bits
        self.setup_seconds = time.perf_counter() - t
        self.ts = ts
        self.params = params
        self.tile = default_tile(params)
        self.encryption = "symmetric" if symmetric else "public"
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
                data = vec.serialize()
                t2 = time.perf_counter()
                enc += t1 - t0
                ser += t2 - t1
                out.append((tl, c, data))
        seconds = time.perf_counter() - t
        return _Run(seconds, enc, ser, len(out), sum(len(d) for _, _, d in out), (grid, out))

    def decrypt(self, image, payload):
        grid, out = payload
        th, tw = self.tile
        return untile_channels(grid, (
            (tl, c, np.asarray(self.ts.ckks_vector_from(self.tctx, d).decrypt(), dtype=np.float64)
             [: th * tw].reshape(th, tw))
            for tl, c, d in out))


class _HepixSymmetric(_Impl):
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
        self.implementation = HEPIX_SYMMETRIC + ("-complex" if complex_packing else "") + (
            f"-{compression}" if compression != "none" else "")
        self.library = f"hepix / hepix_seal (SEAL {symmetric.native_module().SEAL_VERSION})"

    def once(self, image):
        th, tw = self.tile
        t = time.perf_counter()
        grid, tiles = packed_encrypt_tiles(image, self.enc, th, tw, complex_packing=self.complex_packing)
        tiles = list(tiles)
        seconds = time.perf_counter() - t
        return _Run(seconds, None, None, len(tiles), sum(len(pt.ct) for pt in tiles), (grid, tiles))

    def decrypt(self, image, payload):
        grid, tiles = payload
        return packed_decrypt_tiles(self.ctx, grid, tiles)


class _PixelSymmetric(_Impl):
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
        return _Run(seconds, None, None, len(cts), sum(len(c) for c in cts), (crop.shape, cts))

    def decrypt(self, image, payload):
        shape, cts = payload
        return np.array([self.ctx.decrypt_slots(c, 1)[0] for c in cts]).reshape(shape)


def symmetric_impls(params: list[Params], pixel: bool = False) -> list[_Impl]:
    """The symmetric rows (with ``pixel``, also the pixel layout's at the baseline preset), or none
    (with the reason logged) when the native extension is missing."""
    from hecore.encrypt.symmetric import NativeExtensionMissing, native_module

    try:
        native_module()
    except NativeExtensionMissing as e:
        log.warning("hepix-packed-symmetric rows skipped: %s", e)
        return []
    impls: list[_Impl] = [_HepixSymmetric(p, cplx, compr) for p in params for cplx, compr in SYMMETRIC_VARIANTS]
    if pixel:
        impls.append(_PixelSymmetric(preset(BASELINE_PRESET)))
    return impls


class _PixelFull(_Impl):
    implementation = PIXEL_FULL
    encryption = "cached"
    security = SECURITY_LEAKS

    def __init__(self, ctx: HEContext, tile: int = PIXEL_TILE):
        from importlib import metadata

        self.ctx = ctx
        self.params = ctx.params
        self.tile = (tile, tile)
        self.strategy = make_strategy("full", ctx, allow_leaky=True).prepare()
        self.setup_seconds = self.strategy.setup_seconds
        self.library = f"hepix / Pyfhel {metadata.version('Pyfhel')} + numba"

    def warm(self, image):
        _grid, produce = pixel_encrypt_tiles(image, self.strategy, *self.tile, reuse_buffer=True)
        next(produce)

    def once(self, image):
        # As jobs.bench.suites.pixel measures it: the output buffer is reused tile after tile (each
        # tile's ciphertexts would be written out before the next), nothing kept.
        count = nbytes = 0
        t = time.perf_counter()
        _grid, produce = pixel_encrypt_tiles(image, self.strategy, *self.tile, reuse_buffer=True)
        for pt in produce:
            count += len(pt.batch)
            nbytes += pt.batch.nbytes
        seconds = time.perf_counter() - t
        return _Run(seconds, None, None, count, nbytes, None)


def import_tenseal():
    """The ``tenseal`` module, or None (with the reason logged) when it cannot be imported."""
    try:
        import tenseal
    except Exception as e:   # ImportError, or a broken binary wheel
        log.warning("TenSEAL rows skipped: tenseal cannot be imported (%s: %s); "
                    "install it with pip install 'hepix[bench]'", type(e).__name__, e)
        return None
    return tenseal


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def run_packed_bench(images: dict[str, np.ndarray], *, presets=DEFAULT_PRESETS,
                     repeats: int = DEFAULT_REPEATS, tenseal: bool = True, pixel_full: bool = True,
                     symmetric: bool = True,
                     progress: Callable[[PackedMeasurement], None] | None = None) -> list[PackedMeasurement]:
    """Measure every implementation on every image (keyed by a display name); see the module docstring.

    Ratio columns compare ``pixels_per_second`` on the same image: ``vs_tenseal_*``
    with TenSEAL at the same N, ``vs_pixel_full`` with the pixel ``full`` row.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    params = [preset(p) if isinstance(p, str) else p for p in presets]
    for p in params:
        if p.scheme != "ckks":
            raise ValueError(f"the packed suite compares CKKS encryptions (TenSEAL ckks_vector); "
                             f"{p.name} is {p.scheme.upper()}: choose a CKKS preset")
    impls: list[_Impl] = [_HepixPacked(p) for p in params]
    impls += [_HepixPacked(i.params, complex_packing=True, ctx=i.ctx) for i in list(impls)]
    ts = import_tenseal() if tenseal else None
    if ts is not None:
        impls += [_TenSEAL(ts, p, sym) for p in params for sym in (False, True)]
    if symmetric:
        impls += symmetric_impls(params, pixel=pixel_full)
    full = None
    if pixel_full:
        base = next((i.ctx for i in impls if isinstance(i, _HepixPacked) and i.params.name == BASELINE_PRESET),
                    None)
        if base is None:
            base, _secret = HEContext.generate(preset(BASELINE_PRESET))
        warm_up()
        full = _PixelFull(base)

    rows: list[PackedMeasurement] = []
    for name, image in images.items():
        image = np.ascontiguousarray(image)
        small = image[: min(8, image.shape[0]), : min(8, image.shape[1])]
        for impl in impls:          # warm-up: lazy initialisation is not what we time
            impl.once(small)
        runs: dict[int, list[_Run]] = {id(i): [] for i in impls}
        for _ in range(repeats):
            for impl in impls:
                done = runs[id(impl)]
                if done:
                    done[-1].payload = None     # only the last pass is decrypted
                done.append(impl.once(image))
        measured = [(impl, runs[id(impl)]) for impl in impls]
        if full is not None:
            full.warm(image)
            measured.append((full, [full.once(image)]))

        image_rows = []
        for impl, rs in measured:
            last = rs[-1]
            seconds = _median([r.seconds for r in rs])
            region = impl.region(image)
            pixels = int(region.size)
            m = PackedMeasurement(
                implementation=impl.implementation, library=impl.library, preset=impl.params.name,
                n=impl.params.n, qi_sizes=list(impl.params.qi_sizes), scale_bits=impl.params.scale_bits,
                encryption=impl.encryption, security=impl.security, image=name,
                width=int(region.shape[1]), height=int(region.shape[0]),
                channels=1 if region.ndim == 2 else int(region.shape[2]), pixels=pixels,
                tile_h=impl.tile[0], tile_w=impl.tile[1], ciphertexts=last.ciphertexts, repeats=len(rs),
                seconds=seconds, pixels_per_second=pixels / seconds,
                encrypt_seconds=_median([r.encrypt_seconds for r in rs]),
                serialize_seconds=_median([r.serialize_seconds for r in rs]),
                setup_seconds=impl.setup_seconds, bytes=last.nbytes, bytes_per_pixel=last.nbytes / pixels,
            )
            decrypted = impl.decrypt(image, last.payload)
            if decrypted is not None:
                q = compare(region, decrypted)
                m.exact_fraction, m.max_abs_err = q.exact_fraction, q.max_abs_err
            image_rows.append(m)

        _fill_ratios(image_rows)
        for m in image_rows:
            if progress:
                progress(m)
        rows += image_rows
    return rows


def _fill_ratios(rows: list[PackedMeasurement]) -> None:
    """Ratios of pixels/s to the references measured on the same image."""
    def ref(implementation, encryption, n=None):
        return next((r.pixels_per_second for r in rows if r.implementation == implementation
                     and r.encryption == encryption and (n is None or r.n == n)), None)

    full = ref(PIXEL_FULL, "cached")
    for r in rows:
        pub, sym = ref(TENSEAL, "public", r.n), ref(TENSEAL, "symmetric", r.n)
        if r.implementation != PIXEL_FULL:
            r.vs_tenseal_public = r.pixels_per_second / pub if pub else None
            r.vs_tenseal_symmetric = r.pixels_per_second / sym if sym else None
            sym_bpp = next((t.bytes_per_pixel for t in rows if t.implementation == TENSEAL
                            and t.encryption == "symmetric" and t.n == r.n), None)
            r.bytes_vs_tenseal_symmetric = r.bytes_per_pixel / sym_bpp if sym_bpp else None
        r.vs_pixel_full = r.pixels_per_second / full if full else None
