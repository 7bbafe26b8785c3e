"""`hepix demo`: the whole chain on local Spark, on sample images that ship with scikit-image.

keygen -> encrypt (pixel layout, fresh) -> export-public -> process (brightness
+50, a watermark, 3x3 mean filter) with public keys only -> decrypt with
metrics against the plaintext-processed originals; then the paper's caching
strategies against fresh encryption, in one process, on one sample image.
Everything lands in ``--out`` (default ``demo-out/``) as tables to query.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from hecore.context import HEContext
from hecore.encrypt.strategies import make_strategy
from hecore.images import center_crop, resize
from hecore.kernels import warm_up
from hecore.keys import load_secret
from hecore.layouts.pixel import decrypt_tiles, encrypt_tiles
from hecore.params import DEFAULT_PRESET, PRESETS
from hecore.quality import compare

from .runtime.console import table

#: scikit-image's bundled images (no download): two grey, one colour.
SAMPLES = ("camera", "coins", "astronaut")
#: The strategy comparison: fresh encryption, then the paper's caching strategies (which leak).
STRATEGIES = ("fresh", "radix", "radix-rand", "scan", "full")
#: Its tile side in pixels.
STRATEGY_TILE = 32


def add_arguments(p):
    p.add_argument("--out", default="demo-out", help="working directory, replaced on each run (default demo-out)")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    p.add_argument("--size", type=int, default=24,
                   help="images are centre-cropped and resized to SIZE x SIZE (default %(default)s; the pixel "
                        "layout makes one ~130 KB ciphertext per pixel value)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--skip-strategies", action="store_true", help="skip the in-process strategy comparison")


def write_samples(folder: Path) -> list[str]:
    import skimage.data
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for name in SAMPLES:
        path = folder / f"{name}.png"
        Image.fromarray(getattr(skimage.data, name)()).save(path)
        names.append(path.name)
    return names


def compare_strategies(ctx: HEContext, image: np.ndarray, tile: int = STRATEGY_TILE) -> list[dict]:
    """Each of :data:`STRATEGIES` on ``image``, in this process: its cache built, one tile encrypted
    untimed (warm), then the whole image encrypted (timed), decrypted and scored against ``image``.
    ``speedup_vs_fresh`` is fresh's encryption time over the strategy's."""
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
                     "speedup_vs_fresh": fresh / seconds, **asdict(quality)})
    return rows


def run(args) -> int:
    from .cli import main as hepix

    out = Path(args.out)
    if out.exists():
        if not (out / ".hepix-demo").exists():
            raise SystemExit(f"hepix demo: {out} exists and is not a demo directory; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / ".hepix-demo").write_text("made by hepix demo; replaced on the next run\n")
    keys, pub, images = out / "keys", out / "keys-public", out / "images"
    names = write_samples(images)
    print(f"hepix demo: {len(names)} scikit-image samples ({', '.join(names)}) at {args.size}x{args.size}, "
          f"preset {args.preset}, Spark {args.master}; everything goes to {out}/\n")

    ops = ["brightness:50", f"watermark:{args.size // 2},{args.size // 3},5", "meanfilter:3"]
    steps = [
        ["keygen", "--out", str(keys), "--preset", args.preset],
        ["export-public", "--keys", str(keys), "--out", str(pub)],
        ["encrypt", "--layout", "pixel", "--keys", str(pub), "--input", str(images), "--out", str(out / "encrypted"),
         "--owner", str(out / "owner"), "--resize", str(args.size), "--master", args.master],
        ["process", "--keys", str(pub), "--input", str(out / "encrypted"), "--out", str(out / "processed"),
         *[a for op in ops for a in ("--op", op)], "--master", args.master],
        ["decrypt", "--keys", str(keys), "--input", str(out / "processed"), "--out", str(out / "decrypted"),
         "--owner", str(out / "owner"), "--images", str(images), "--png", "--master", args.master],
    ]
    for step in steps:
        print(f"$ hepix {' '.join(step)}")
        code = hepix(step)
        print()
        if code:
            return code

    import pyarrow.dataset as ds
    metrics = ds.dataset(out / "decrypted" / "metrics").to_table().to_pylist()
    exact = all(r["mse"] == 0 and r["exact_fraction"] == 1.0 for r in metrics)
    print(f"processed images equal the plaintext reference after rounding: {'yes' if exact else 'NO'} "
          f"(decrypted PNGs in {out}/decrypted/images/)")

    if not args.skip_strategies:
        print("\nThe paper's caching strategies against fresh encryption (one process, no Spark). They leak,\n"
              "so they run here as research modes with the explicit opt-in and are labelled 'leaks':")
        ctx = load_secret(keys)
        camera = resize(center_crop(np.asarray(__import__("skimage.data", fromlist=["camera"]).camera())), args.size)
        rows = compare_strategies(ctx, camera)
        print(table(rows, [
            ("strategy", "strategy", ""), ("security", "security", ""), ("encrypt_seconds", "encrypt s", ".3f"),
            ("speedup_vs_fresh", "speedup", ".1f"), ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"),
            ("ssim", "SSIM", ".4f"), ("max_abs_err", "max err", ".1e")]))
        exact = exact and all(r["mse"] == 0 for r in rows)
    print(f"\nquery the tables: {out}/encrypted/ciphertexts (what the cluster gets), {out}/owner/images and "
          f"{out}/owner/rejects (the owner map), {out}/decrypted/metrics (Parquet; Spark SQL or pyarrow)")
    return 0 if exact else 1
