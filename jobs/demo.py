"""`hepix demo`: the product on local Spark, on sample images that ship with scikit-image.

Part one runs what a first corpus run runs, with the defaults: keygen -> export-public (only the evaluation
keys the chain needs) -> encrypt (public-key
encryption, the samples at full size, the chain declared with ``--for-op``, so that the ciphertexts are
stored as it needs: complex packing, one prime, SEAL's zstd serialization) -> process (brightness, a
watermark, a 3x3 mean filter) with public keys only -> decrypt with metrics against the plaintext-processed
originals and a contact sheet (``--out``/demo.png, tasks/contactsheet.py).  A summary follows: each
job's time, pixel values per second, bytes at rest, where each table is, and a DuckDB query over the
metrics.  Part two shows the iCHEETAH paper's pixel layout and caching strategies against fresh
encryption, small and in this process: what each costs and what it leaks.  Everything lands in
``--out`` (default ``demo-out/``).
"""
from __future__ import annotations

import shutil
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hecore.encrypt.strategies import WHAT_LEAKS, make_strategy
from hecore.images import center_crop, resize
from hecore.layouts.pixel import decrypt_tiles, encrypt_tiles
from hecore.quality import compare
from hecore.seal.context import HEContext
from hecore.seal.keys import load_secret
from hecore.seal.params import DEFAULT_PRESET, PRESETS

from .runtime.console import table

#: scikit-image's bundled images (no download): two grey, one colour.
SAMPLES = ("camera", "coins", "astronaut")
#: The strategy comparison: fresh encryption, then the paper's caching strategies (which leak).
STRATEGIES = ("fresh", "radix", "radix-rand", "scan", "full")
#: Its tile side in pixels.
STRATEGY_TILE = 32
#: Where the contact sheet goes, in ``--out``.
SHEET = "demo.png"


def add_arguments(p):
    p.add_argument("--out", default="demo-out", help="working directory, replaced on each run (default demo-out)")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    p.add_argument("--size", type=int, default=None, metavar="S",
                   help="part one: centre-crop and resize the samples to SxS (encrypt --resize; default: their "
                        "full size, 512x512, 384x303 and 512x512 RGB)")
    p.add_argument("--pixel-size", type=int, default=24, metavar="S",
                   help="part two: the side of the image the pixel layout's strategies encrypt (default "
                        "%(default)s; one ~130 KB ciphertext per pixel value)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--skip-strategies", action="store_true", help="skip part two, the pixel layout's strategies")


def sample_arrays(size: int | None) -> dict[str, np.ndarray]:
    """The samples by name, as part one encrypts them (centre-cropped and resized to ``size``, if given)."""
    import skimage.data

    arrays = {name: np.asarray(getattr(skimage.data, name)()) for name in SAMPLES}
    return {n: resize(center_crop(a), size) for n, a in arrays.items()} if size else arrays


def write_samples(folder: Path) -> list[str]:
    """The samples at full size as PNG files in ``folder`` (encrypt's input); their file names."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for name, pixels in sample_arrays(None).items():
        path = folder / f"{name}.png"
        Image.fromarray(pixels).save(path)
        names.append(path.name)
    return names


def op_chain(images: dict[str, np.ndarray]) -> list[str]:
    """Part one's ops: brightness +40, a watermark of +255 at the centre of the smallest image, a 3x3 mean."""
    h = min(a.shape[0] for a in images.values())
    w = min(a.shape[1] for a in images.values())
    return ["brightness:40", f"watermark:{w // 2},{h // 2},255", "meanfilter:3"]


@dataclass(frozen=True)
class Paths:
    """Where part one puts everything, in ``--out``."""

    out: Path
    keys: Path
    public: Path
    images: Path
    encrypted: Path
    owner: Path
    processed: Path
    decrypted: Path
    sheet: Path

    @classmethod
    def under(cls, out: Path) -> Paths:
        return cls(out, out / "keys", out / "keys-public", out / "images", out / "encrypted", out / "owner",
                   out / "processed", out / "decrypted", out / SHEET)


def steps(p: Paths, args, ops: list[str]) -> list[list[str]]:
    """Part one's commands, each as a user types it after ``hepix``."""
    resize_args = ["--resize", str(args.size)] if args.size else []
    return [
        ["keygen", "--out", str(p.keys), "--preset", args.preset],
        ["export-public", "--keys", str(p.keys), "--out", str(p.public), *[a for op in ops for a in ("--for-op", op)]],
        ["encrypt", "--keys", str(p.public), "--input", str(p.images), "--out", str(p.encrypted),
         "--owner", str(p.owner), *resize_args, *[a for op in ops for a in ("--for-op", op)], "--master", args.master],
        ["process", "--keys", str(p.public), "--input", str(p.encrypted), "--out", str(p.processed),
         *[a for op in ops for a in ("--op", op)], "--master", args.master],
        ["decrypt", "--keys", str(p.keys), "--input", str(p.processed), "--out", str(p.decrypted),
         "--owner", str(p.owner), "--images", str(p.images), "--png", "--contact-sheet", str(p.sheet),
         "--master", args.master],
    ]


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (a table directory): what it takes at rest."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def summary(p: Paths, seconds: dict[str, float], metrics: list[dict]) -> str:
    """Each job's time and pixel rate, what it wrote and the bytes that takes per pixel value."""
    values = sum(m["width"] * m["height"] * m["channels"] for m in metrics)
    wrote = {"keygen": p.keys, "export-public": p.public, "encrypt": p.encrypted / "ciphertexts",
             "process": p.processed / "ciphertexts", "decrypt": p.decrypted / "metrics"}
    rows = []
    for job, s in seconds.items():
        nbytes = folder_bytes(wrote[job])
        rows.append({"job": job, "seconds": s, "rate": values / s if job in ("encrypt", "process", "decrypt") else None,
                     "table": str(wrote[job]), "bytes": nbytes,
                     "per_value": nbytes / values if job in ("encrypt", "process") else None})
    rows.append({"job": "total", "seconds": sum(seconds.values()), "table": str(p.out)})
    return table(rows, [("job", "job", ""), ("seconds", "wall s", ".1f"), ("rate", "pixel values/s", ",.0f"),
                        ("table", "writes", ""), ("bytes", "bytes", ",d"), ("per_value", "B/pixel value", ".1f")])


def duckdb_query(p: Paths) -> str:
    """A query over the metrics table to try, for DuckDB (a hepix dependency)."""
    return ("SELECT regexp_extract(source, '[^/]+$') AS image, width, height, ciphertexts,\n"
            "       round(ciphertext_bytes / (width * height * channels), 1) AS bytes_per_value, mse, psnr, ssim\n"
            f"FROM read_parquet('{p.decrypted / 'metrics'}/*.parquet') ORDER BY image")


def compare_strategies(ctx: HEContext, image: np.ndarray, tile: int = STRATEGY_TILE) -> list[dict]:
    """Each of :data:`STRATEGIES` on ``image``, in this process: its cache built, one tile encrypted
    untimed (warm), then the whole image encrypted (timed), decrypted and scored against ``image``.
    ``speedup_vs_fresh`` is fresh's encryption time over the strategy's; ``bytes_per_value`` the
    ciphertext bytes per pixel value."""
    from hecore.seal.kernels import warm_up  # numba: here, not at import (the CLI imports this module)

    warm_up()
    rows: list[dict] = []
    for name in STRATEGIES:
        strategy = make_strategy(name, ctx, allow_leaky=True).prepare(image)
        next(encrypt_tiles(image, strategy, tile, tile)[1])
        t = time.perf_counter()
        grid, tiles = encrypt_tiles(image, strategy, tile, tile)
        encrypted = list(tiles)
        seconds = time.perf_counter() - t
        quality = compare(image, decrypt_tiles(ctx, grid, encrypted))
        fresh = rows[0]["encrypt_seconds"] if rows else seconds
        rows.append({"strategy": name, "security": strategy.security, "encrypt_seconds": seconds,
                     "speedup_vs_fresh": fresh / seconds,
                     "bytes_per_value": sum(t.batch.nbytes for t in encrypted) / image.size, **asdict(quality)})
    return rows


def part_two(p: Paths, size: int, packed_per_value: float | None) -> bool:
    """The paper's pixel layout and caching strategies on the camera sample at ``size``; whether every
    strategy decrypted exactly."""
    import skimage.data

    camera = resize(center_crop(np.asarray(skimage.data.camera())), size)
    rows = compare_strategies(load_secret(p.keys), camera)
    fresh = rows[0]["bytes_per_value"]
    packed = f" (the packed layout above: {packed_per_value:.1f})" if packed_per_value else ""
    print(f"Part two: the iCHEETAH paper's pixel layout and its caching strategies, on camera at {size}x{size}, in "
          "this process (no Spark).\n"
          f"The pixel layout makes one ciphertext per pixel value: {fresh:,.0f} bytes per pixel value{packed}. "
          "The caching strategies\nbuild each ciphertext from cached ones instead of encrypting afresh: faster, "
          "and not IND-CPA secure.\nThey run here as research modes, with the explicit opt-in, labelled 'leaks':\n")
    print(table(rows, [
        ("strategy", "strategy", ""), ("security", "security", ""), ("encrypt_seconds", "encrypt s", ".3f"),
        ("speedup_vs_fresh", "speedup", ".1f"), ("bytes_per_value", "B/pixel value", ",.0f"), ("mse", "MSE", ".3f"),
        ("psnr", "PSNR dB", ".2f"), ("ssim", "SSIM", ".4f"), ("max_abs_err", "max err", ".1e")]))
    print("\nWhat each leaks, without the key (hepix audit finds it; docs/security.md):")
    for r in rows[1:]:
        print(textwrap.fill(f"{r['strategy']}: {WHAT_LEAKS[r['strategy']]}", 110, initial_indent="  ",
                            subsequent_indent="    "))
    return all(r["mse"] == 0 for r in rows)


def prepare(out: Path) -> None:
    """A fresh ``out``: replaced if an earlier demo made it, refused if anything else did."""
    if out.exists():
        if not (out / ".hepix-demo").exists():
            raise SystemExit(f"hepix demo: {out} exists and is not a demo directory; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / ".hepix-demo").write_text("made by hepix demo; replaced on the next run\n")


def run(args) -> int:
    import duckdb
    import pyarrow.dataset as ds

    from .cli import main as hepix

    for flag, value in (("--size", args.size), ("--pixel-size", args.pixel_size)):
        if value is not None and value < 4:
            raise SystemExit(f"hepix demo: {flag} {value}: give a side of 4 pixels or more")
    p = Paths.under(Path(args.out))
    prepare(p.out)
    names = write_samples(p.images)
    size = f"{args.size}x{args.size}" if args.size else "full size"
    print(f"hepix demo: {len(names)} scikit-image samples ({', '.join(names)}) at {size}, preset {args.preset}, "
          f"Spark {args.master}; everything goes to {p.out}/\n\nPart one: a first corpus run, with the defaults "
          "(public-key encryption; the chain declared with --for-op, so the ciphertexts are stored as it needs:\n"
          "two pixels per slot, one prime, SEAL's zstd serialization).\n")
    seconds = {}
    for step in steps(p, args, op_chain(sample_arrays(args.size))):
        print(f"$ hepix {' '.join(step)}")
        t = time.perf_counter()
        code = hepix(step)
        seconds[step[0]] = time.perf_counter() - t
        print()
        if code:
            return code

    metrics = ds.dataset(p.decrypted / "metrics").to_table().to_pylist()
    exact = all(r["mse"] == 0 and r["exact_fraction"] == 1.0 for r in metrics)
    print(f"decrypted images equal the same ops done in plaintext, after rounding: {'yes' if exact else 'NO'}")
    checked = [r["spot_positions"] for r in metrics]
    print(f"every image checked at the owner's secret positions (spot-checked column; a wrong result would be a "
          f"reject 'integrity'): {'yes' if all(checked) else 'NO'}, {min(checked or [0])} to {max(checked or [0])} "
          "positions each\n")
    print(summary(p, seconds, metrics))
    query = duckdb_query(p)
    print(f"\nthe owner map (which id is which file): {p.owner}/images; decrypted PNGs: {p.decrypted}/images/\n"
          f"query the tables with DuckDB (or pyarrow, Spark SQL; docs/pipeline.md):\n\n"
          f"import duckdb\nduckdb.sql(\"\"\"{query}\"\"\").show()\n")
    print(duckdb.sql(query))
    if not args.skip_strategies:
        values = sum(m["width"] * m["height"] * m["channels"] for m in metrics)
        exact = part_two(p, args.pixel_size, folder_bytes(p.encrypted / "ciphertexts") / values) and exact
        print()
    print(f"contact sheet: {p.sheet} (original | plaintext-processed | decrypted | difference, one row per image)")
    return 0 if exact else 1
