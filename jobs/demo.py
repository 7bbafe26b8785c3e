"""`hepix demo`: sample images through every strategy, on the embedded default.

Generates a throwaway key directory, encrypts and decrypts scikit-image's
bundled 'camera' (grey) and 'astronaut' (colour) images, cropped and resized
small, with every strategy, and prints time, speedup over fresh and
MSE/PSNR/SSIM.  (The Spark chain encrypt -> process -> decrypt joins it when
the pipeline lands.)
"""
from __future__ import annotations

import tempfile

import skimage.data

from hecore.bench import DEFAULT_STRATEGIES, run_pixel_bench
from hecore.images import center_crop, resize
from hecore.keys import keygen, load_secret
from hecore.params import DEFAULT_PRESET, PRESETS, preset

from .report import table


def add_arguments(p):
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    p.add_argument("--size", type=int, default=32, help="side of the sample images (default %(default)s)")


def run(args) -> int:
    params = preset(args.preset)
    images = {
        f"camera {args.size}x{args.size} L": resize(center_crop(skimage.data.camera()), args.size),
        f"astronaut {args.size // 2}x{args.size // 2} RGB": resize(center_crop(skimage.data.astronaut()), args.size // 2),
    }
    with tempfile.TemporaryDirectory(prefix="hepix-demo-keys-") as tmp:
        info = keygen(params, f"{tmp}/keys")
        ctx = load_secret(f"{tmp}/keys")
        print(f"hepix demo: keys {info.fingerprint[:16]}, {params.name} ({params.describe()})")
        print("strategies other than 'fresh' are the paper's caching modes: research modes that leak, "
              "run here with the explicit opt-in and labelled 'leaks'\n")
        rows = run_pixel_bench(ctx, images, strategies=DEFAULT_STRATEGIES,
                               progress=lambda m: print(f"  {m.image:<22} {m.strategy:<10} done", flush=True))
    print()
    print(table([r.as_dict() for r in rows], [
        ("image", "image", ""), ("strategy", "strategy", ""), ("security", "security", ""),
        ("encrypt_seconds", "encrypt s", ".3f"), ("speedup_vs_fresh", "speedup", ".1f"),
        ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"), ("ssim", "SSIM", ".4f"),
        ("max_abs_err", "max err", ".1e"), ("exact_fraction", "exact", ".4f"),
    ]))
    exact = all(r.mse == 0 for r in rows)
    print(f"\nall decryptions exact after rounding: {'yes' if exact else 'NO'} "
          f"(the paper reported MSE 0.476 / PSNR 51.30 dB)")
    return 0 if exact else 1
