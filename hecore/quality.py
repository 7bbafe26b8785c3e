"""Image quality of a decrypted image against its 8-bit reference.

The measures of the iCHEETAH paper -- MSE and PSNR with MAX = 255 (section
4.3.2) and SSIM (section 4.5) -- plus two exactness measures of our own:

* ``max_abs_err``: the largest |decrypted - reference| on the *raw* decrypted
  values, before any rounding; this is the CKKS approximation error.
* ``exact_fraction``: the fraction of values that come back exactly equal to
  the reference once rounded to the nearest integer and clipped to 0..255.

MSE, PSNR and SSIM are computed on the rounded image, i.e. the 8-bit image a
user actually sees after decryption, so an error below 0.5 everywhere gives
MSE 0, PSNR infinity and SSIM 1.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

#: Largest value of an 8-bit channel, the MAX of the PSNR formula.
MAX_VALUE = 255.0

#: scikit-image's default SSIM window side.
_DEFAULT_WIN = 7

#: Standard SSIM constants (K1 = 0.01, K2 = 0.03) for a data range of 255.
_C1 = (0.01 * MAX_VALUE) ** 2
_C2 = (0.03 * MAX_VALUE) ** 2


@dataclass(frozen=True)
class Quality:
    """Quality of one decrypted image against its reference.

    ``psnr`` is ``math.inf`` when ``mse`` is 0 (identical after rounding).
    ``pixels`` is the number of values compared, H * W * C.
    """

    mse: float
    psnr: float
    ssim: float
    max_abs_err: float
    exact_fraction: float
    pixels: int

    def as_dict(self) -> dict[str, float | int]:
        """The fields as a plain dict (``psnr`` may be ``math.inf``)."""
        return asdict(self)


def psnr(mse: float, max_value: float = MAX_VALUE) -> float:
    """Peak signal-to-noise ratio in dB: ``10 * log10(max_value**2 / mse)``.

    Returns ``math.inf`` for ``mse == 0``.  A negative or NaN ``mse`` is a
    ValueError.
    """
    mse = float(mse)
    if math.isnan(mse) or mse < 0:
        raise ValueError(f"mse must be a non-negative number, got {mse!r}")
    if max_value <= 0:
        raise ValueError(f"max_value must be positive, got {max_value!r}")
    if mse == 0:
        return math.inf
    return 10.0 * math.log10(float(max_value) ** 2 / mse)


def round_to_uint8(values: np.ndarray) -> np.ndarray:
    """Round raw decrypted values to the 8-bit image a user sees.

    Rounding is to the nearest integer with ties to even (NumPy's ``rint``:
    0.5 -> 0, 1.5 -> 2, 254.5 -> 254), then values are clipped to [0, 255]
    and cast to ``uint8``.  Non-finite values (NaN, inf) are a ValueError,
    since they have no meaningful 8-bit value.
    """
    arr = np.asarray(values)
    if np.iscomplexobj(arr):
        raise ValueError("values are complex; pass the real part of the decoded slots")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError("values contain NaN or infinity; cannot round them to 8 bits")
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def _check_image_shape(shape: tuple[int, ...], what: str) -> None:
    if len(shape) == 2 or (len(shape) == 3 and shape[2] == 3):
        if shape[0] > 0 and shape[1] > 0:
            return
        raise ValueError(f"{what} image is empty: shape {shape}")
    raise ValueError(f"{what} image must have shape (H, W) or (H, W, 3), got {shape}")


def _as_reference(reference: np.ndarray) -> np.ndarray:
    ref = np.asarray(reference)
    if ref.dtype == np.uint8:
        return ref
    if not np.issubdtype(ref.dtype, np.integer):
        raise ValueError(f"reference must be an 8-bit integer image, got dtype {ref.dtype}")
    if ref.min() < 0 or ref.max() > 255:
        raise ValueError(
            f"reference values must lie in 0..255, got {ref.min()}..{ref.max()}"
        )
    return ref.astype(np.uint8)


def _global_ssim(x: np.ndarray, y: np.ndarray) -> float:
    """SSIM over a single window covering the whole image, averaged over channels.

    Used for images with a side below 3 px, where no sliding window fits.
    Means, variances and covariance are population statistics (ddof=0), so a
    one-pixel image is defined too; constants are C1 = (0.01*255)^2 and
    C2 = (0.03*255)^2, as in Wang et al. (2004).
    """
    xs = x.reshape(-1, 1) if x.ndim == 2 else x.reshape(-1, x.shape[-1])
    ys = y.reshape(-1, 1) if y.ndim == 2 else y.reshape(-1, y.shape[-1])
    xs = xs.astype(np.float64)
    ys = ys.astype(np.float64)
    mx, my = xs.mean(axis=0), ys.mean(axis=0)
    vx, vy = xs.var(axis=0), ys.var(axis=0)
    cxy = ((xs - mx) * (ys - my)).mean(axis=0)
    s = ((2 * mx * my + _C1) * (2 * cxy + _C2)) / ((mx**2 + my**2 + _C1) * (vx + vy + _C2))
    return float(s.mean())


def _ssim(reference: np.ndarray, image: np.ndarray) -> float:
    """SSIM of two uint8 images of the same (H, W) or (H, W, 3) shape.

    scikit-image's 7x7 window for images at least 7 px on each side; the
    largest odd window that fits for sides 3..6; the single-window global
    formula (see ``_global_ssim``) for a side below 3.
    """
    side = min(reference.shape[0], reference.shape[1])
    if side < 3:
        return _global_ssim(reference, image)
    win = _DEFAULT_WIN if side >= _DEFAULT_WIN else (side if side % 2 else side - 1)
    if reference.ndim == 2:
        return _ssim_plane(reference, image, win)
    return float(np.mean([_ssim_plane(reference[..., c], image[..., c], win) for c in range(reference.shape[-1])]))


#: Rows of the SSIM map computed at once: bounds the memory of a large image's SSIM (scikit-image holds a
#: dozen float64 copies of the whole plane) without changing its value.
SSIM_STRIP_ROWS = 128


def _ssim_plane(reference: np.ndarray, image: np.ndarray, win: int) -> float:
    """scikit-image's mean SSIM of one plane (the map's mean without its ``(win - 1) // 2`` border), computed
    in strips of :data:`SSIM_STRIP_ROWS` rows: each strip is filtered with the rows its windows reach, and
    only the rows every window of which lies inside the strip are kept, so each kept value is the one the
    whole plane gives."""
    # SSIM comes from scikit-image rather than being written here: it is maintained, tested, and follows
    # the reference implementation of Wang et al. (2004), so our figures are comparable with everyone
    # else's.  Imported here: it brings SciPy's ndimage (~0.4 s), which the processes that only encrypt
    # or process (Spark's Python workers, most of them) never need.
    from skimage.metrics import structural_similarity

    pad = (win - 1) // 2
    h = reference.shape[0]
    total, count = 0.0, 0
    for r0 in range(pad, h - pad, SSIM_STRIP_ROWS):
        r1 = min(r0 + SSIM_STRIP_ROWS, h - pad)
        _, smap = structural_similarity(reference[r0 - pad:r1 + pad].astype(np.float64),
                                        image[r0 - pad:r1 + pad].astype(np.float64),
                                        data_range=MAX_VALUE, win_size=win, full=True)
        kept = smap[pad:pad + (r1 - r0), pad:smap.shape[1] - pad]
        total += float(kept.sum(dtype=np.float64))
        count += kept.size
    return total / count


def compare(reference: np.ndarray, decrypted: np.ndarray) -> Quality:
    """Compare a decrypted image with its reference.

    ``reference`` is the original 8-bit image, (H, W) or (H, W, 3);
    ``decrypted`` the raw decrypted values of the same shape (floats).
    MSE, PSNR and SSIM are computed on ``round_to_uint8(decrypted)``;
    ``max_abs_err`` on the raw values.  A shape mismatch is a ValueError
    naming both shapes.
    """
    ref = np.asarray(reference)
    dec = np.asarray(decrypted)
    if ref.shape != dec.shape:
        raise ValueError(
            f"shape mismatch: reference {ref.shape} vs decrypted {dec.shape}"
        )
    _check_image_shape(ref.shape, "reference")
    ref = _as_reference(ref)
    rounded = round_to_uint8(dec)  # also rejects complex / non-finite values

    ref_f = ref.astype(np.float64)
    max_abs_err = float(np.max(np.abs(dec.astype(np.float64) - ref_f)))
    mse = float(np.mean((rounded.astype(np.float64) - ref_f) ** 2))
    exact = float(np.mean(rounded == ref))

    return Quality(
        mse=mse,
        psnr=psnr(mse),
        ssim=_ssim(ref, rounded),
        max_abs_err=max_abs_err,
        exact_fraction=exact,
        pixels=int(ref.size),
    )


def difference_map(a: np.ndarray, b: np.ndarray, threshold: float) -> np.ndarray:
    """Boolean (H, W) map of the pixels where |a - b| >= ``threshold``.

    This is the watermark detection of the paper's Fig. 8.  For RGB images a
    pixel is marked when any of its channels differs by at least
    ``threshold``.  The difference is taken in float64, so uint8 inputs do
    not wrap around.  Shape mismatch or a negative/NaN threshold is a
    ValueError.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: a {a.shape} vs b {b.shape}")
    _check_image_shape(a.shape, "compared")
    threshold = float(threshold)
    if math.isnan(threshold) or threshold < 0:
        raise ValueError(f"threshold must be a non-negative number, got {threshold!r}")
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) >= threshold
    if diff.ndim == 3:
        diff = diff.any(axis=-1)
    return diff
