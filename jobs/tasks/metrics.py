"""The metrics stage of decrypt: each decrypted image scored against its (plaintext-processed) original,
and written as PNG when asked."""
from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import pyarrow as pa


def metrics_partition(batches: Iterator[pa.RecordBatch], *, run_id: str, png_dir: str | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """Quality of each decrypted image against its (plaintext-processed) original."""
    from hecore.images import array_to_image_bytes
    from hecore.ops.spec import parse_ops, reference
    from hecore.quality import compare, round_to_uint8
    from schemas.tables import METRICS

    for rb in batches:
        rows = []
        for r in rb.to_pylist():
            shape = (r["height"], r["width"], r["channels"])
            values = np.frombuffer(r["values"], dtype=np.float64).reshape(shape)
            unsnapped = np.frombuffer(r["unsnapped"], dtype=np.float64).reshape(shape)
            if r["channels"] == 1:
                values, unsnapped = values[:, :, 0], unsnapped[:, :, 0]
            ops = parse_ops(r["ops"])
            base = {"run_id": run_id, "image_id": r["image_id"], "source": r["source"],
                    "content_sha256": r["content_sha256"], "channel": -1, "ops": "|".join(r["ops"]),
                    "layout": r["layout"], "strategy": r["strategy"], "security": r["security"],
                    "preset": r["preset"], "width": r["width"], "height": r["height"],
                    "channels": r["channels"], "ciphertexts": r["ciphertexts"],
                    "ciphertext_bytes": r["ciphertext_bytes"], "encrypt_seconds": r["encrypt_seconds"],
                    "process_seconds": r["process_seconds"], "decrypt_seconds": r["decrypt_seconds"]}
            if r.get("original") is not None:
                orig = np.frombuffer(r["original"], dtype=np.uint8).reshape(
                    (r["orig_height"], r["orig_width"], r["orig_channels"]))
                if r["orig_channels"] == 1:
                    orig = orig[:, :, 0]
                expected = reference(orig, ops)
                q = compare(round_to_uint8(expected), values)
                base.update(reference="plaintext-processed" if ops else "original", mse=q.mse,
                            psnr=q.psnr, ssim=q.ssim, exact_fraction=q.exact_fraction,
                            max_abs_err=float(np.max(np.abs(unsnapped - expected))))
            else:
                base.update(reference="none")
            rows.append(base)
            if png_dir:
                name = f"{r['image_id']}-{r['source'].rsplit('/', 1)[-1].rsplit('.', 1)[0]}.png"
                with open(os.path.join(png_dir, name), "wb") as f:
                    f.write(array_to_image_bytes(round_to_uint8(values), "PNG"))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=METRICS)
