"""`hepix demo`: the whole chain on local Spark, on sample images that ship with scikit-image.

keygen -> encrypt (pixel layout, fresh) -> export-public -> process (brightness
+50, a watermark, 3x3 mean filter) with public keys only -> decrypt with
metrics against the plaintext-processed originals; then the paper's caching
strategies against fresh encryption, in one process, on one sample image.
Everything lands in ``--out`` (default ``demo-out/``) as tables to query.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from bench.suites.pixel import DEFAULT_STRATEGIES, run_pixel_bench
from hecore.images import center_crop, resize
from hecore.keys import load_secret
from hecore.params import DEFAULT_PRESET, PRESETS

from .console import table

#: scikit-image's bundled images (no download): two grey, one colour.
SAMPLES = ("camera", "coins", "astronaut")


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
        sample = {f"camera {args.size}x{args.size}": resize(center_crop(np.asarray(
            __import__("skimage.data", fromlist=["camera"]).camera())), args.size)}
        rows = run_pixel_bench(ctx, sample, strategies=DEFAULT_STRATEGIES)
        print(table([r.as_dict() for r in rows], [
            ("strategy", "strategy", ""), ("security", "security", ""), ("encrypt_seconds", "encrypt s", ".3f"),
            ("speedup_vs_fresh", "speedup", ".1f"), ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"),
            ("ssim", "SSIM", ".4f"), ("max_abs_err", "max err", ".1e")]))
        exact = exact and all(r.mse == 0 for r in rows)
    print(f"\nquery the tables: {out}/encrypted/ciphertexts (what the cluster gets), {out}/owner/images and "
          f"{out}/owner/rejects (the owner map), {out}/decrypted/metrics (Parquet; Spark SQL or pyarrow)")
    return 0 if exact else 1
