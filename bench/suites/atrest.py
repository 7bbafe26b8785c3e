"""Bytes at rest and the core's secure encryption speed, against the pixel layout's ``full`` caching.

One process, one thread, the same images, the same run (ratios within a run are what hepix claims):

* ``pixel-full``: the iCHEETAH paper's fastest mode (``full`` caching, which leaks), through
  :func:`hecore.layouts.pixel.encrypt_tiles` with ``reuse_buffer=True`` -- the baseline;
* ``symmetric-complex``: seeded secret-key encryption, complex packing, SEAL bytes at the first level
  (two primes at ``paper-4096``): today's ``hepix encrypt --encryption symmetric --layout packed-complex``;
* ``symmetric-complex-q0``: the same encrypted at the last level (q0 alone), SEAL bytes;
* ``compact-<chain>``: encrypted straight into the compact at-rest format (:mod:`hecore.seal.atrest`) at the
  storage the planner gives for the chain (:func:`hecore.planner.at_rest`), with the halo the chain
  needs; ``compact-lossless``: no chain declared (first level, nothing dropped);
* ``public-compact-<chain>``: public-key encryption, then compacted (c1 bit-packed, not seeded).

Packed rows use the tile that stores the image in the fewest ciphertexts for their halo
(:func:`hecore.seal.atrest.tile_for`).  For every row: pixels/s, its ratio to ``pixel-full`` on the same
image, bytes per image pixel (tile padding included), and for the compact rows the cost of expanding them back to SEAL bytes and of
decrypting, with the round trip's exactness.  Imports hecore and NumPy only.

``hepix bench --suite atrest [--image IMAGE,...]`` writes and prints the rows; ``--bytes-only`` prints
bytes per pixel alone (one pass, for large images); ``--loop SECONDS --only ROW`` runs one row in a loop
for a profiler (``perf record -g``, ``valgrind --tool=callgrind``).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from hecore.encrypt import PublicKeyEncryptor
from hecore.encrypt.strategies import make_strategy
from hecore.encrypt.symmetric import SymmetricEncryptor
from hecore.layouts.packed import decrypt_tiles, default_tile
from hecore.layouts.packed import encrypt_tiles as packed_encrypt_tiles
from hecore.layouts.pixel import encrypt_tiles as pixel_encrypt_tiles
from hecore.ops.spec import parse_ops
from hecore.planner import at_rest
from hecore.quality import round_to_uint8
from hecore.seal.atrest import AtRest, CompactEncryptor, Compactor, tile_for
from hecore.seal.context import HEContext
from hecore.seal.kernels import warm_up
from hecore.seal.params import preset

PIXEL_FULL = "pixel-full"
DEFAULT_PRESET = "paper-4096"
DEFAULT_REPEATS = 3
PIXEL_TILE = 32
#: (row name, the chain the storage is planned for, the halo that chain needs)
CHAINS = (("brightness", ["brightness:50"], 0),
          ("meanfilter3", ["meanfilter:3"], 1),
          ("meanfilter5", ["meanfilter:5"], 2))


@dataclass
class AtRestRow:
    """One encryption path on one image."""

    image: str
    implementation: str
    encryption: str            # cached | symmetric | public
    security: str              # leaks | ind-cpa
    chain: str                 # the ops the storage was planned for ('' when none)
    preset: str
    level: int                 # primes dropped from the first data level
    primes: int
    scale_bits: int
    drop0: int
    drop1: int
    halo: int
    tile: str
    pixels: int
    ciphertexts: int
    seconds: float             # median over the repeats
    pixels_per_second: float
    bytes: int
    bytes_per_pixel: float
    vs_pixel_full: float | None = None
    expand_seconds: float | None = None        # compact -> SEAL bytes, the whole image
    decrypt_seconds: float | None = None       # SEAL bytes -> pixel values (Pyfhel), the whole image
    expand_us_per_ciphertext: float | None = None
    decrypt_us_per_ciphertext: float | None = None
    exact_fraction: float | None = None
    max_abs_err: float | None = None
    error_bound: float | None = None


class _Path:
    implementation = ""
    encryption = "symmetric"
    security = "ind-cpa"
    chain = ""
    halo = 0
    store: AtRest | None = None

    def once(self, image):
        """Encrypt the whole image; returns (ciphertexts, bytes, payload)."""
        raise NotImplementedError

    def tile(self) -> str:
        return ""


class _PixelFull(_Path):
    implementation, encryption, security = PIXEL_FULL, "cached", "leaks"

    def __init__(self, ctx):
        self.strategy = make_strategy("full", ctx, allow_leaky=True).prepare()

    def tile(self):
        return f"{PIXEL_TILE}x{PIXEL_TILE}"

    def once(self, image):
        count = nbytes = 0
        _grid, produce = pixel_encrypt_tiles(image, self.strategy, PIXEL_TILE, PIXEL_TILE, reuse_buffer=True)
        for pt in produce:               # each tile's buffer is reused by the next: nothing kept
            count += len(pt.batch)
            nbytes += pt.batch.nbytes
        return count, nbytes, None


class _Packed(_Path):
    def __init__(self, name, encryptor, ctx, halo, store=None, chain="", encryption="symmetric"):
        self.implementation, self.enc, self.ctx, self.halo = name, encryptor, ctx, halo
        self.store, self.chain, self.encryption = store, chain, encryption
        self.th, self.tw = default_tile(ctx.params, halo, True)

    def fit(self, image) -> None:
        """The tile that stores this image in the fewest ciphertexts (hecore.seal.atrest.tile_for)."""
        self.th, self.tw = tile_for(self.ctx.params, self.halo, True, image.shape[0], image.shape[1])

    def tile(self):
        return f"{self.th}x{self.tw}"

    def once(self, image):
        grid, tiles = packed_encrypt_tiles(image, self.enc, self.th, self.tw, self.halo, True)
        tiles = list(tiles)
        return len(tiles), sum(len(t.ct) for t in tiles), (grid, tiles)


class _AtLevel:
    """Seeded SEAL bytes at one level (the native encrypt_at), as an encryptor the packed layout takes."""

    def __init__(self, sym: SymmetricEncryptor, level: int):
        self.sym, self.level = sym, level
        self.params, self.name, self.security = sym.params, sym.name, sym.security

    def encrypt(self, rows):
        from hecore.ciphertexts import CiphertextBatch

        return CiphertextBatch.from_list(self.sym.encrypt_at(rows, self.level), self.name, self.security)


def paths(ctx: HEContext, secret: bytes, *, baseline: bool = True) -> list[_Path]:
    """Every measured path, the baseline first (``baseline=False``: the packed paths only)."""
    params = ctx.params
    sym = SymmetricEncryptor(ctx.public, secret)
    last = params.data_primes - 1
    out: list[_Path] = [_PixelFull(ctx)] if baseline else []
    out += [_Packed("symmetric-complex", sym, ctx, 0),
                        _Packed("symmetric-complex-q0", _AtLevel(sym, last), ctx, 0)]
    lossless = at_rest(params, [], "packed-complex", declared=False)
    out.append(_Packed("compact-lossless", CompactEncryptor(sym, lossless), ctx, 0, lossless))
    for name, specs, halo in CHAINS:
        plan = at_rest(params, parse_ops(specs), "packed-complex")
        out.append(_Packed(f"compact-{name}", CompactEncryptor(sym, plan), ctx, halo, plan, " | ".join(specs)))
    name, specs, halo = CHAINS[0]
    plan = at_rest(params, parse_ops(specs), "packed-complex", seeded=False)
    out.append(_Packed(f"public-compact-{name}", CompactEncryptor(PublicKeyEncryptor(ctx), plan), ctx, halo, plan,
                       " | ".join(specs), encryption="public"))
    return out


def measure(images: dict[str, np.ndarray], *, preset_name: str = DEFAULT_PRESET,
            repeats: int = DEFAULT_REPEATS) -> list[dict]:
    """Measure every path on every image (name -> uint8 array, e.g. 256x256 USC-SIPI); one dict per row."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    ctx, secret = HEContext.generate(preset(preset_name))      # throwaway keys, never written
    warm_up()
    todo = paths(ctx, secret)
    rows: list[dict] = []
    for name, image in images.items():
        image = np.ascontiguousarray(image)
        for p in todo:                                   # lazy initialisation is not what we time
            if isinstance(p, _Packed):
                p.fit(image[:8, :8])
                p.once(image[:8, :8])
                p.fit(image)
            else:
                p.once(image[:8, :8])
        times = {id(p): [] for p in todo}
        last = {}
        for _ in range(repeats):                         # round-robin: machine noise hits every path alike
            for p in todo:
                t = time.perf_counter()
                count, nbytes, payload = p.once(image)
                times[id(p)].append(time.perf_counter() - t)
                last[id(p)] = (count, nbytes, payload)
        image_rows = []
        for p in todo:
            count, nbytes, payload = last[id(p)]
            secs = statistics.median(times[id(p)])
            s = p.store
            r = AtRestRow(
                image=name, implementation=p.implementation, encryption=p.encryption, security=p.security,
                chain=p.chain, preset=ctx.params.name,
                level=s.level if s else (ctx.params.data_primes - 1 if p.implementation.endswith("q0") else 0),
                primes=s.primes if s else (1 if p.implementation.endswith("q0") else ctx.params.data_primes),
                scale_bits=s.scale_bits if s else ctx.params.scale_bits, drop0=s.drop0 if s else 0,
                drop1=s.drop1 if s else 0, halo=p.halo, tile=p.tile(), pixels=int(image.size), ciphertexts=count,
                seconds=secs, pixels_per_second=image.size / secs, bytes=nbytes, bytes_per_pixel=nbytes / image.size,
                error_bound=s.error_bound if s else None)
            if payload is not None:
                _round_trip(ctx, r, payload, image)
            image_rows.append(r)
        full = next(r.pixels_per_second for r in image_rows if r.implementation == PIXEL_FULL)
        for r in image_rows:
            r.vs_pixel_full = r.pixels_per_second / full
        rows += [asdict(r) for r in image_rows]
    return rows


def stored_bytes(image: np.ndarray, *, preset_name: str = DEFAULT_PRESET) -> list[dict]:
    """One pass of every packed path over ``image``: what it stores (no timing, no baseline), for images too
    large for the pixel layout."""
    ctx, secret = HEContext.generate(preset(preset_name), rotations=False)
    out = []
    for p in paths(ctx, secret, baseline=False):
        if isinstance(p, _Packed):
            p.fit(image)
            count, nbytes, _ = p.once(np.ascontiguousarray(image))
            out.append({"implementation": p.implementation, "tile": p.tile(), "halo": p.halo, "ciphertexts": count,
                        "bytes": nbytes, "bytes_per_pixel": nbytes / image.size})
    return out


def _round_trip(ctx: HEContext, r: AtRestRow, payload, image) -> None:
    """Expand (compact rows) and decrypt the last pass: cost and exactness."""
    grid, tiles = payload
    cts = [bytes(t.ct) for t in tiles]
    t = time.perf_counter()
    seal = Compactor.for_public(ctx.public).expand(cts)
    r.expand_seconds = time.perf_counter() - t
    r.expand_us_per_ciphertext = r.expand_seconds / len(cts) * 1e6
    t = time.perf_counter()
    raw = decrypt_tiles(ctx, grid, [tile.with_ct(c) for tile, c in zip(tiles, seal)])
    r.decrypt_seconds = time.perf_counter() - t
    r.decrypt_us_per_ciphertext = r.decrypt_seconds / len(cts) * 1e6
    r.exact_fraction = float(np.mean(round_to_uint8(raw) == image))
    r.max_abs_err = float(np.max(np.abs(raw - image)))


def _usc(name: str) -> np.ndarray:
    """A USC-SIPI image read in place: ``$HEPIX_DATASETS/usc-sipi``, else the data sets beside the checkout."""
    import os
    from pathlib import Path

    from hecore.images import load_image

    root = Path(os.environ.get("HEPIX_DATASETS") or Path(__file__).resolve().parents[2].parent / "shared" / "datasets")
    return load_image(Path(name) if Path(name).exists() else root / "usc-sipi" / name).pixels


#: The options of ``hepix bench`` the ``atrest`` suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "image", "preset", "repeats", "bytes_only", "loop", "only"})
#: The row ``--loop`` runs unless ``--only`` names another.
DEFAULT_LOOP_ROW = "compact-brightness"
#: Its default images (USC-SIPI, read in place): one grey and one colour.
DEFAULT_IMAGES = ("5.1.12.tiff", "4.2.07.tiff")


def suite_images(count: int | None, image: str | None) -> dict[str, np.ndarray]:
    """``image`` when given (a comma list of files or USC-SIPI names, read in place); else the first
    ``count`` of :data:`DEFAULT_IMAGES`, or scikit-image's samples when the data set is absent (logged)."""
    import logging
    from pathlib import Path

    from bench.datasets import SAMPLES, sample, usc_sipi_dir

    if image:
        return {Path(n).name: _usc(n) for n in image.split(",") if n}
    names = DEFAULT_IMAGES[:count or len(DEFAULT_IMAGES)]
    if all((usc_sipi_dir() / n).is_file() for n in names):
        return {n: _usc(str(usc_sipi_dir() / n)) for n in names}
    logging.getLogger(__name__).warning("no USC-SIPI images in %s: using scikit-image's samples", usc_sipi_dir())
    return {f"skimage-{n}": sample(n) for n in SAMPLES[:len(names)]}


def bytes_only(images: dict[str, np.ndarray], preset_name: str) -> None:
    """``--bytes-only``: one pass of every packed path on each image, its bytes per pixel printed."""
    for name, image in images.items():
        for r in stored_bytes(image, preset_name=preset_name):
            print(f"{name:12s} {r['implementation']:28s} tile {r['tile']:>7s} halo {r['halo']} "
                  f"{r['ciphertexts']:>6d} ct {r['bytes']:>12,d} B {r['bytes_per_pixel']:>7.2f} B/px")


def loop(image: np.ndarray, preset_name: str, row: str, seconds: float) -> None:
    """``--loop SECONDS``: the path ``row`` on ``image`` over and over for ``seconds``, for a profiler."""
    ctx, secret = HEContext.generate(preset(preset_name), rotations=False)
    path = next(x for x in paths(ctx, secret, baseline=row == PIXEL_FULL) if x.implementation == row)
    if isinstance(path, _Packed):
        path.fit(image)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        path.once(image)
        n += 1
    print(f"{row}: {n} passes, {n * image.size / (time.perf_counter() - t0):,.0f} pixels/s")


def run(args) -> int:
    """``hepix bench --suite atrest``: :func:`measure`, written to ``OUT/bench_atrest/<run_id>.parquet``;
    or, with ``--bytes-only`` or ``--loop``, :func:`bytes_only` or :func:`loop`, printed only."""
    from pathlib import Path

    from bench.rows import write_rows
    from bench.schemas import BENCH_ATREST
    from bench.timing import load_1m
    from jobs.runtime import runinfo

    preset_name = args.preset or DEFAULT_PRESET
    repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    images = suite_images(1 if args.quick and args.images is None else args.images, args.image)
    if getattr(args, "bytes_only", None):
        bytes_only(images, preset_name)
        return 0
    if getattr(args, "loop", None):
        loop(next(iter(images.values())), preset_name, getattr(args, "only", None) or DEFAULT_LOOP_ROW, args.loop)
        return 0
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: bytes at rest and encryption speed, {len(images)} images, {preset_name}, "
          f"{repeats} repeats")
    rows = measure(images, preset_name=preset_name, repeats=repeats)
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(), "cores": runinfo.cores(),
              "git_commit": runinfo.git_commit(), "repeats": repeats, "load_1m": load_1m()}
    path = write_rows(rows, BENCH_ATREST, Path(args.out) / "bench_atrest", run_id, common)
    for r in rows:
        print(f"{r['image']:24s} {r['implementation']:28s} {r['pixels_per_second']:>12,.0f} px/s "
              f"{r['vs_pixel_full']:>7.1f}x  {r['bytes_per_pixel']:>9.2f} B/px")
    print(f"\nwrote {path}")
    return 0

