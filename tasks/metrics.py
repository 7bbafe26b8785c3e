"""The metrics stage of decrypt: each decrypted image scored against its (plaintext-processed) original,
and written as PNG when asked -- or, for an image decrypt rejected, one row saying why.

PNG names never come from a table value as such: the image id (already checked against the strict id
pattern, tasks/rowchecks.py) and, when the owner map names the image, the stem of the owner's own file
name with anything but letters, digits, ``.``, ``_`` and ``-`` replaced; the path is then resolved and
checked to lie in the PNG directory before anything is written.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from hecore.images import DEFAULT_MAX_PIXELS
from schemas.tables import IMAGE_ID, METRICS

from .spots import spot_check, spot_sample

#: METRICS plus why an image was rejected (null for a scored one), and the contact-sheet panels of the images
#: asked for (tasks/contactsheet.py): decrypt splits them after this stage.
SCORED = pa.schema(list(METRICS) + [pa.field("reject_reason", pa.string()), pa.field("reject_detail", pa.string()),
                                    pa.field("sheet_panels", pa.binary())])

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_ID = re.compile(IMAGE_ID)


def png_name(image_id: str, source: str | None) -> str:
    """``<image_id>-<stem>.png`` (the stem of the owner's file name, made safe), or ``<image_id>.png``."""
    if not _ID.fullmatch(image_id):
        raise ValueError(f"image id {image_id[:80]!r} is not one hepix makes")
    stem = ""
    if source and source != image_id:
        stem = _UNSAFE.sub("_", source.rsplit("/", 1)[-1].rsplit(".", 1)[0]).lstrip(".")[:100]
    return f"{image_id}-{stem}.png" if stem else f"{image_id}.png"


def png_path(png_dir: str, image_id: str, source: str | None) -> str:
    """Where the PNG of ``image_id`` goes: a path checked to lie directly in ``png_dir``."""
    base = os.path.realpath(png_dir)
    path = os.path.realpath(os.path.join(base, png_name(image_id, source)))
    if os.path.dirname(path) != base:
        raise ValueError(f"the PNG of image {image_id[:80]!r} would leave {png_dir}")
    return path


def score(r: dict, raw: np.ndarray | None, *, run_id: str, png_dir: str | None = None,
          sheet_ids: frozenset[str] = frozenset()) -> dict:
    """The SCORED row of one image: ``r`` its IMAGES fields, its names (``source``, ``content_sha256``) and
    its original (``original`` bytes and ``orig_*`` size, or None); ``raw`` its raw values (H x W x C), None
    when it was rejected.  An image of ``sheet_ids`` with an original gets its contact-sheet panels."""
    from hecore.images import array_to_image_bytes
    from hecore.ops.spec import recorded_finish, recorded_reference, recorded_shape
    from hecore.quality import compare, round_to_uint8

    from .contactsheet import panels

    source = r.get("source") or r["image_id"]
    base = {"run_id": run_id, "image_id": r["image_id"], "source": source,
            "content_sha256": r.get("content_sha256") or "", "channel": -1, "ops": "|".join(r["ops"] or []),
            "layout": r["layout"], "strategy": r["strategy"], "security": r["security"],
            "preset": r["preset"], "width": r["width"], "height": r["height"],
            "channels": r["channels"], "ciphertexts": r["ciphertexts"] or 0,
            "ciphertext_bytes": r["ciphertext_bytes"] or 0, "encrypt_seconds": r.get("encrypt_seconds"),
            "process_seconds": r.get("process_seconds"), "decrypt_seconds": r.get("decrypt_seconds"),
            "reject_reason": r["reject_reason"], "reject_detail": r["reject_detail"]}
    if r["reject_reason"] is not None or raw is None:
        return {**base, "reference": "none"}
    shape = (r["height"], r["width"], r["channels"])
    if r["channels"] == 1:
        raw = raw[:, :, 0]
    ops = list(r["ops"] or [])
    finish = recorded_finish(ops, r["preset"])      # TFHE: the exact bytes
    values = finish.apply(raw)                      # the true values (the Finish decrypt applies)
    if r.get("spots") is not None:                  # the owner's secret spot checks, before anything is kept
        found = spot_check(r["spots"], ops, r["preset"], round_to_uint8(values))
        base.update(spot_positions=found.positions, spot_values=found.values)
        if not found.ok:
            base.update(reject_reason="integrity", reject_detail=found.describe())
            return {**base, "reference": "none"}
    original = r.get("original")
    orig_shape = (r.get("orig_height"), r.get("orig_width"), r.get("orig_channels"))
    if original is not None and recorded_shape(ops, r["preset"], *orig_shape) != shape:
        base.update(reject_reason="size-mismatch", reject_detail=(
            f"decrypts to {r['width']}x{r['height']}x{r['channels']}, its original is "
            f"{r['orig_width']}x{r['orig_height']}x{r['orig_channels']}"
            + (f" (after {'|'.join(ops)}: {'x'.join(map(str, recorded_shape(ops, r['preset'], *orig_shape)))})"
               if ops else "")))
        return {**base, "reference": "none"}
    if original is not None:
        orig = np.frombuffer(original, dtype=np.uint8).reshape(orig_shape)
        if r["orig_channels"] == 1:
            orig = orig[:, :, 0]
        expected = recorded_reference(orig, ops, r["preset"])   # TFHE: saturated after every op
        q = compare(round_to_uint8(expected), values)
        unsnapped = raw * finish.post_scale_float       # before snapping to the exact grid
        base.update(reference="plaintext-processed" if ops else "original", mse=q.mse,
                    psnr=q.psnr, ssim=q.ssim, exact_fraction=q.exact_fraction,
                    max_abs_err=float(np.max(np.abs(unsnapped - expected))))
        if r["image_id"] in sheet_ids:
            base["sheet_panels"] = panels(_shown_as(orig, values.shape), round_to_uint8(expected),
                                          round_to_uint8(values))
    else:
        base.update(reference="none")
    if png_dir:
        with open(png_path(png_dir, r["image_id"], r.get("source")), "wb") as f:
            f.write(array_to_image_bytes(round_to_uint8(values), "PNG"))
    return base


def metrics_partition(batches: Iterator[pa.RecordBatch], *, run_id: str, png_dir: str | None = None,
                      sheet_ids: frozenset[str] = frozenset()) -> Iterator[pa.RecordBatch]:
    """Quality of each assembled image (IMAGES rows joined with their names and originals) against its
    (plaintext-processed) original."""
    for rb in batches:
        rows = []
        for r in rb.to_pylist():
            raw = None
            if r["raw"] is not None:
                raw = np.frombuffer(r["raw"], dtype=np.float64).reshape(r["height"], r["width"], r["channels"])
            rows.append(score(r, raw, run_id=run_id, png_dir=png_dir, sheet_ids=sheet_ids))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=SCORED)


def assemble_and_score(values: pa.Table, refs: pa.Table, *, names: dict[str, tuple[str, str]], run_id: str,
                       png_dir: str | None = None, max_values: int = 3 * DEFAULT_MAX_PIXELS,
                       sheet_ids: frozenset[str] = frozenset(), spots=None, spots_only: bool = False) -> pa.Table:
    """One image's decrypted blocks (DECRYPTED rows) and its original (0 or 1 REFERENCES row) -> its SCORED
    row: assembled and scored in one task, so the image itself never leaves it.  ``names``: image id ->
    (source, content SHA-256) of the owner map; ``spots``: the owner's spot samples (:func:`spot_sample`);
    ``spots_only``: the blocks the spot checks do not read were left undecrypted (NaN)."""
    from .decrypt import assemble

    if values.num_rows == 0:            # an original no decrypted image asked for
        return SCORED.empty_table()
    row, raw = assemble(values, max_values=max_values, match_key=False, partial=spots_only)
    source, digest = names.get(row["image_id"], (row["image_id"], ""))
    row.update(source=source, content_sha256=digest, spots=spot_sample(spots, row["image_id"]))
    if refs.num_rows:
        row.update(refs.slice(0, 1).to_pylist()[0])
    return pa.Table.from_pylist([score(row, raw, run_id=run_id, png_dir=png_dir, sheet_ids=sheet_ids)],
                                schema=SCORED)


def _shown_as(original: np.ndarray, shape: tuple) -> np.ndarray:
    """The original as a panel beside results of ``shape`` (a chain that changes the size or the channels:
    resized with a box filter, converted to grey); the original itself when it has that shape."""
    if original.shape == tuple(shape):
        return original
    from PIL import Image

    picture = Image.fromarray(original).convert("L" if len(shape) == 2 else "RGB")
    return np.asarray(picture.resize((shape[1], shape[0]), Image.Resampling.BOX))
