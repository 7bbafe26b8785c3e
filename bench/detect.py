"""Watermark detection after decryption (iCHEETAH §4.4.4, Fig. 8).

The server adds a value ``v`` to one pixel of the encrypted image
(``watermark:X,Y,V``, :class:`hecore.ops.spec.Watermark`); the key holder
decrypts, rounds to 8 bits and compares with the unmarked image.  The paper
shows the result as a binary difference map (Fig. 8): white where the two
images differ.

* :func:`difference_map` -- that map: ``True`` where any channel differs by
  at least ``threshold`` (default 1, i.e. any change of the 8-bit image).
* :func:`detect_watermark` -- the pixels ``(x, y)`` whose change is the
  watermark's: the rounded difference equals what adding ``v`` to the
  reference and rounding gives, ``round_to_uint8(ref + v) - ref`` -- for a
  pixel far from 0 and 255 that is ``|diff - v| < 0.5`` -- in any channel;
  or, with ``threshold`` instead of ``v``, every pixel of the map.
* :func:`save_difference_map` -- the map as a PNG (white = differs).

Raw decrypted values (floats) are first rounded with
:func:`hecore.quality.round_to_uint8`, the rounding every hepix decryption
uses, so the comparison is on the 8-bit image the user sees.  A change of
``|v| < 0.5`` disappears in that rounding and cannot be detected; a pixel
that clipping leaves unchanged (255 + 5) cannot either.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hecore.quality import round_to_uint8

__all__ = ["difference_map", "detect_watermark", "expected_difference", "save_difference_map"]


def _as_image(arr, what: str, *, round_floats: bool) -> tuple[np.ndarray, tuple]:
    """``arr`` as an (H, W, C) uint8 array, and its original shape for messages."""
    a = np.asarray(arr)
    shape = a.shape
    if a.ndim not in (2, 3) or 0 in shape:
        raise ValueError(f"the {what} must be an image of shape (H, W) or (H, W, C), got shape {shape}")
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"the {what} must hold 8-bit pixel values, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating):
        if not round_floats:
            raise ValueError(f"the {what} must be an 8-bit integer image (uint8), got dtype {a.dtype}")
        a = round_to_uint8(a)               # NaN / inf are a ValueError there
    elif a.dtype != np.uint8:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi > 255:
            raise ValueError(f"the {what} has values {lo}..{hi}; 8-bit pixel values lie in 0..255")
        a = a.astype(np.uint8)
    if a.ndim == 2:
        a = a[:, :, None]
    return a, shape


def _pair(decrypted, reference, ref_what: str) -> tuple[np.ndarray, np.ndarray]:
    dec, dshape = _as_image(decrypted, "decrypted image", round_floats=True)
    ref, rshape = _as_image(reference, ref_what, round_floats=False)
    if dec.shape != ref.shape:
        raise ValueError(
            f"the decrypted image has shape {dshape} but the {ref_what} has shape {rshape}: "
            "they must have the same height, width and channels (crop or resize both alike)"
        )
    return dec, ref


def _check_threshold(threshold) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise ValueError(f"threshold must be a number, got {threshold!r}")
    t = float(threshold)
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"threshold must be a positive number (1: any change of the 8-bit image), got {threshold!r}")
    return t


def _diff(dec: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return dec.astype(np.int16) - ref.astype(np.int16)


def difference_map(decrypted_uint8, reference_uint8, threshold: float = 1) -> np.ndarray:
    """The binary difference map of Fig. 8: a boolean ``(H, W)`` array, True where any channel of
    the decrypted image differs from the reference by at least ``threshold``.

    ``decrypted_uint8``: the decrypted 8-bit image (raw float values are rounded with
    :func:`~hecore.quality.round_to_uint8` first); ``reference_uint8``: the image to compare
    with, 8-bit integers.  Shapes must match (``(H, W)`` and ``(H, W, 1)`` are the same).
    """
    t = _check_threshold(threshold)
    dec, ref = _pair(decrypted_uint8, reference_uint8, "reference image")
    return np.any(np.abs(_diff(dec, ref)) >= t, axis=2)


def expected_difference(reference_uint8, v: float) -> np.ndarray:
    """What a watermark of ``v`` changes each value of the 8-bit reference by, once the
    marked image is rounded and clipped: ``round_to_uint8(ref + v) - ref`` (int16, same shape)."""
    v = _check_value(v)
    ref, shape = _as_image(reference_uint8, "unmarked reference", round_floats=False)
    out = round_to_uint8(ref.astype(np.float64) + v).astype(np.int16) - ref.astype(np.int16)
    return out.reshape(shape)


def _check_value(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(float(v)):
        raise ValueError(f"the watermark value v must be a finite number, got {v!r}")
    return float(v)


def detect_watermark(decrypted, unmarked_reference, v: float | None = None, *,
                     threshold: float | None = None) -> list[tuple[int, int]]:
    """The pixels ``(x, y)`` (column, row), row by row, where the decrypted image carries a watermark.

    With ``v`` (the value the watermark added): the pixels where, in any channel, the rounded
    difference ``decrypted - reference`` is the watermark's change, ``round_to_uint8(ref + v) - ref``,
    and not zero -- ``|diff - v| < 0.5`` away from the 0..255 limits, the clipped change near them.
    Pixels changed by anything else are not reported (see :func:`difference_map` for those).

    With ``threshold`` instead of ``v``: every pixel whose difference is at least ``threshold``
    in some channel (the True pixels of :func:`difference_map`).

    ``decrypted``: 8-bit, or raw decrypted floats (rounded with
    :func:`~hecore.quality.round_to_uint8`); ``unmarked_reference``: the image before the
    watermark, 8-bit integers, of the same shape.
    """
    if (v is None) == (threshold is None):
        raise ValueError("give the watermark value v, or a threshold, not both and not neither")
    if v is None:
        hits = difference_map(decrypted, unmarked_reference, threshold)
    else:
        v = _check_value(v)
        dec, ref = _pair(decrypted, unmarked_reference, "unmarked reference")
        want = round_to_uint8(ref.astype(np.float64) + v).astype(np.int16) - ref.astype(np.int16)
        d = _diff(dec, ref)
        hits = np.any((d == want) & (d != 0), axis=2)
    ys, xs = np.nonzero(hits)
    return [(int(x), int(y)) for y, x in zip(ys, xs)]


def save_difference_map(diff_map, path, *, scale: int = 1) -> Path:
    """Write a difference map as a black-and-white PNG (white = differs) and return the path.

    ``scale`` enlarges every pixel to a ``scale x scale`` block, so that a single
    marked pixel is visible.
    """
    from PIL import Image

    m = np.asarray(diff_map)
    if m.ndim != 2 or 0 in m.shape:
        raise ValueError(f"a difference map has shape (H, W), got {m.shape}")
    if m.dtype != np.bool_:
        if not np.issubdtype(m.dtype, np.integer) or not np.isin(m, (0, 1)).all():
            raise ValueError(f"a difference map holds booleans (or 0/1), got dtype {m.dtype}")
        m = m.astype(bool)
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or scale < 1:
        raise ValueError(f"scale must be an integer >= 1, got {scale!r}")
    img = np.where(m, np.uint8(255), np.uint8(0))
    if scale > 1:
        img = np.repeat(np.repeat(img, scale, axis=0), scale, axis=1)
    path = Path(path)
    Image.fromarray(img, "L").save(path, format="PNG")
    return path
