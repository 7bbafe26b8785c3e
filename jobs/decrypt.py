"""`hepix decrypt`: ciphertexts -> images and a metrics table (the data owner's job).

Decrypts every ciphertext, reassembles the images (applying the public
post-scale of the ops), and scores them against the original images given
with ``--images`` -- or, when ops were applied, against the originals with
the same ops applied in plaintext and the same single clipping at the end.
"""
from __future__ import annotations

import functools
import os
import time

from hecore.errors import HepixError
from hecore.images import DEFAULT_MAX_PIXELS
from jobs.tasks.decode import DecodeOptions, originals_partition
from jobs.tasks.decrypt import SecretPayload, assemble_group, decrypt_partition
from jobs.tasks.metrics import metrics_partition
from schemas.manifest import Counts
from schemas.stages import DECRYPTED, IMAGES, ORIGINALS
from schemas.tables import METRICS, spark_schema

from .console import table
from .progress import Progress
from .runs import add_spark_arguments, table_function
from .sources import read_images
from .tables import write_rejects


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="key directory WITH the secret key")
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` or `hepix process`")
    p.add_argument("--out", required=True, help="output directory: metrics/, _manifest.json (and images/)")
    p.add_argument("--images", help="the original images (as given to encrypt) to score against")
    p.add_argument("--png", action="store_true", help="also write the decrypted images as PNG (local --out only)")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --images")
    p.add_argument("--flood-std", type=float, default=0.0, metavar="S",
                   help="noise flooding before anything leaves the key owner (Li-Micciancio 2021): add Gaussian "
                        "noise of standard deviation S (pixel levels; distance units for match runs) to every "
                        "decrypted value; 0 = off (default). See docs/security.md, 'Noise flooding'")
    add_spark_arguments(p)


def check_arguments(args) -> None:
    """Refuse bad decrypt arguments before any key is read."""
    if not (args.flood_std >= 0 and args.flood_std != float("inf")):
        raise HepixError(f"--flood-std {args.flood_std}: give a finite standard deviation >= 0")
    if args.png and "://" in args.out and not args.out.startswith("file://"):
        raise HepixError("--png writes image files with plain file I/O; give a local --out")


def originals(run):
    """The reference images of ``--images``, decoded and preprocessed as encrypt did (keyed by content)."""
    opts = run.parent.options
    dopts = DecodeOptions(1, 1, opts.get("resize"), tuple(opts.get("conversions", [])),
                          opts.get("max_pixels", DEFAULT_MAX_PIXELS))
    return read_images(run.spark, run.args.images, run.args.recursive).mapInArrow(
        functools.partial(originals_partition, opts=dopts), spark_schema(ORIGINALS))


def metrics_plan(run, df, png_dir: str | None):
    """Decrypt ``df``'s rows, reassemble each image, join its reference and score it: the metrics rows."""
    from pyspark.sql import functions as F

    bc, token = run.broadcast(SecretPayload(public=run.keys.public, secret_key=run.keys.secret_key_bytes()))
    values = df.mapInArrow(functools.partial(decrypt_partition, token=token, broadcast=bc, rebuilds=run.rebuilds,
                                             tasks=run.tasks, flood_std=run.args.flood_std), spark_schema(DECRYPTED))
    images = values.groupBy("image_id").applyInArrow(table_function(assemble_group), spark_schema(IMAGES))
    if run.args.images:
        images = images.join(originals(run).dropDuplicates(["content_sha256"]), "content_sha256", "left")
    else:
        for name, type_ in zip(ORIGINALS.names[1:], ("binary", "int", "int", "int")):
            images = images.withColumn(name, F.lit(None).cast(type_))
    return images.mapInArrow(functools.partial(metrics_partition, run_id=run.run_id, png_dir=png_dir),
                             spark_schema(METRICS))


def run(run) -> int:
    """``hepix decrypt`` of images (the key owner's job): ``metrics`` (and PNGs) from an encrypt or process run."""
    args, parent = run.args, run.parent
    png_dir = None
    if args.png:
        png_dir = os.path.join(args.out.removeprefix("file://"), "_staging", run.run_id, "images")
        os.makedirs(png_dir, exist_ok=True)
    with Progress(run.spark, "decrypt", enabled=not args.quiet) as progress:
        t0 = time.perf_counter()
        progress.stage("decrypting")
        checked = run.checked_input("decrypt")
        run.write(metrics_plan(run, checked.df, png_dir), "metrics")
        run.timings["decrypt_seconds"] = time.perf_counter() - t0
        write_rejects(run.spark, checked.rejects, run.out.table("rejects"))
        files, checksums = run.describe({"metrics": False, "rejects": False})
        rows = [r.asDict() for r in run.spark.read.parquet(run.out.table("metrics")).orderBy("source").collect()]
    n_cts = sum(r["ciphertexts"] for r in rows)
    counts = Counts(images_in=parent.counts.images_encrypted, images_decrypted=len(rows), ciphertexts=n_cts,
                    ciphertext_bytes=sum(r["ciphertext_bytes"] for r in rows),
                    images_rejected=len(checked.bad_images), rejects=len(checked.rejects))
    manifest = run.manifest(options={**parent.options, "images": args.images, "flood_std": args.flood_std},
                            counts=counts, files=files, checksums=checksums)
    run.commit(manifest, ["metrics", "rejects"] + (["images"] if png_dir else []))
    print(table(rows, [("source", "image", ""), ("ops", "ops", ""), ("reference", "reference", ""),
                       ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"), ("ssim", "SSIM", ".4f"),
                       ("max_abs_err", "max err", ".1e"), ("exact_fraction", "exact", ".4f"),
                       ("ciphertexts", "cts", "d"), ("decrypt_seconds", "decrypt s", ".2f")]))
    print(f"decrypted {counts.images_decrypted} images ({n_cts} ciphertexts) in {run.timings['decrypt_seconds']:.1f} s; "
          f"metrics in {args.out}/metrics/")
    if checked.rejects:
        print(f"{len(checked.rejects)} ciphertext rows failed their checks; their {len(checked.bad_images)} images "
              f"were not decrypted and the rows are listed in {args.out}/rejects/")
    return 0
