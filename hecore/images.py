"""Load images as 8-bit L or RGB NumPy arrays, and the paper's preprocessing.

``load_image`` reads anything Pillow can read (TIFF, PNG, BMP, JPEG, GIF, ...)
from a path or from bytes (Spark's ``binaryFile`` source gives bytes plus a
path string) and returns a ``LoadedImage`` whose pixels are a C-contiguous
``uint8`` array of shape ``(H, W)`` (mode ``"L"``) or ``(H, W, 3)`` (``"RGB"``).
Every failure is a typed ``hecore.errors.ImageError`` naming the source, never
a raw Pillow or OS error.

Policy (``ImagePolicy``)
------------------------
* ``max_pixels``: width*height above it is refused with ``DecompressionBomb``
  using the size from the header, *before* any pixel data is decoded. Pillow's
  own ``DecompressionBombError``/``DecompressionBombWarning`` (its limit is
  ``PIL.Image.MAX_IMAGE_PIXELS``) are mapped to ``DecompressionBomb`` too.
* Strict by default: only L and RGB images are accepted as they are. Other
  modes need an explicit, documented conversion in ``conversions``:

  ``"palette"``  P / PA -> RGB (palette expanded; a PA alpha is discarded)
  ``"alpha"``    RGBA -> RGB, LA -> L, RGBX -> RGB: the alpha (or padding)
                 channel is dropped, *not* composited onto a background
  ``"16bit"``    16-bit grey (I;16 family, or I decoded from 16-bit data)
                 -> L by ``round(v / 257)`` (so 65535 -> 255, 257*k -> k).
                 16-bit RGB(A) files are also accepted with it, but Pillow
                 itself reduces those to 8 bits by keeping the high byte
                 (``v >> 8``), which can differ from ``round(v / 257)`` by 1.
  ``"bilevel"``  mode 1 -> L with values 0 and 255

  Without the option the image is refused with ``UnsupportedImageMode`` whose
  message names the mode and the option that would accept it.
* Always refused (``UnsupportedImageMode``): CMYK (no colour management here,
  a plain conversion changes the colours), YCbCr/LAB/HSV, F (float), I
  (32-bit), premultiplied alpha (La, RGBa) and any other mode.
* Multi-frame files (animated GIF, multi-page TIFF): the first frame is used
  and ``"first-frame"`` is reported.

Every conversion applied is listed in ``LoadedImage.conversions``, so callers
can record exactly what was done to a file.

Preprocessing follows the iCHEETAH paper (section 4.2): ``center_crop`` to a
square, ``resize`` to size x size, and ``export_bmp`` (the paper worked on BMP).

Warnings Pillow emits while reading (e.g. corrupt EXIF) are logged, not shown.
``warnings.catch_warnings`` is process-global, so load images from one thread
per process (as Spark's Python workers do).
"""
from __future__ import annotations

import io
import logging
import os
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Union

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from .errors import DecompressionBomb, EmptyImage, ImageError, TruncatedImage, UnreadableImage, UnsupportedImageMode

logger = logging.getLogger(__name__)

__all__ = [
    "CONVERSIONS",
    "ImagePolicy",
    "LoadedImage",
    "load_image",
    "center_crop",
    "resize",
    "preprocess",
    "export_bmp",
    "array_to_image_bytes",
]

#: The opt-in conversions ``ImagePolicy.conversions`` may contain.
CONVERSIONS = frozenset({"palette", "alpha", "16bit", "bilevel"})

#: The default pixel limit (decompression bombs are refused from the header, before decoding).
DEFAULT_MAX_PIXELS = 2**26

Source = Union[str, os.PathLike, bytes, bytearray, memoryview]


@dataclass(frozen=True)
class ImagePolicy:
    """What ``load_image`` accepts: a pixel limit and opt-in mode conversions."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    conversions: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        conv = frozenset(self.conversions)
        unknown = conv - CONVERSIONS
        if unknown:
            raise ValueError(
                f"unknown conversion(s) {sorted(unknown)}; known: {sorted(CONVERSIONS)}"
            )
        if self.max_pixels < 0:
            raise ValueError(f"max_pixels must be >= 0, got {self.max_pixels}")
        object.__setattr__(self, "conversions", conv)


@dataclass(frozen=True)
class LoadedImage:
    """An 8-bit image: ``pixels`` is uint8 (H, W) for L or (H, W, 3) for RGB."""

    pixels: np.ndarray
    mode: str
    source: str
    format: str | None = None
    conversions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_pixels(self.pixels)
        expected = "L" if self.pixels.ndim == 2 else "RGB"
        if self.mode != expected:
            raise ValueError(f"mode {self.mode!r} does not match pixels of shape {self.pixels.shape}")

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def channels(self) -> int:
        return 1 if self.pixels.ndim == 2 else 3


# --- mode classification ----------------------------------------------------------------

@dataclass(frozen=True)
class _Kind:
    """How one Pillow mode becomes L/RGB: needed options, and what is done."""

    name: str
    description: str
    needs: tuple[str, ...] = ()
    action: str = ""


_ACCEPTED = {"L": _Kind("L", "grey"), "RGB": _Kind("RGB", "RGB")}

_OPT_IN = {
    "P": _Kind("P", "palette colour", ("palette",), "expand the palette to RGB"),
    "PA": _Kind("PA", "palette colour with alpha", ("palette",),
                "expand the palette to RGB and discard the alpha channel"),
    "RGBA": _Kind("RGBA", "RGB with alpha", ("alpha",), "discard the alpha channel"),
    "LA": _Kind("LA", "grey with alpha", ("alpha",), "discard the alpha channel"),
    "RGBX": _Kind("RGBX", "RGB with a padding channel", ("alpha",), "discard the fourth channel"),
    "1": _Kind("1", "bilevel, 1 bit per pixel", ("bilevel",), "map it to L with values 0/255"),
    "I16": _Kind("I16", "16-bit grey", ("16bit",), "scale it to 8 bits by round(v/257)"),
    "L16": _Kind("L16", "16-bit grey", ("16bit",),
                 "keep the high byte of each sample (Pillow's reduction)"),
    "RGB16": _Kind("RGB16", "16-bit RGB", ("16bit",),
                   "keep the high byte of each sample (Pillow's reduction)"),
    "RGBA16": _Kind("RGBA16", "16-bit RGB with alpha", ("16bit", "alpha"),
                    "keep the high byte of each sample and discard the alpha channel"),
    "LA16": _Kind("LA16", "16-bit grey with alpha", ("16bit", "alpha"),
                  "keep the high byte of each sample and discard the alpha channel"),
}

_REFUSED = {
    "CMYK": "CMYK cannot be turned into RGB without colour management (an ICC profile); "
            "a plain conversion changes the pixel values. Convert it to RGB with a "
            "colour-managed tool first",
    "YCbCr": "YCbCr is not RGB and there is no documented conversion here; convert it to RGB first",
    "LAB": "LAB is not RGB and there is no documented conversion here; convert it to RGB first",
    "HSV": "HSV is not RGB and there is no documented conversion here; convert it to RGB first",
    "F": "it holds floating-point samples, and the file does not say which range maps to 0..255",
    "I": "it holds 32-bit (or signed) integer samples; there is no documented mapping to 8 bits",
    "La": "its alpha is premultiplied, so dropping the alpha would leave altered colours",
    "RGBa": "its alpha is premultiplied, so dropping the alpha would leave altered colours",
}

_I16_MODES = {"I;16", "I;16L", "I;16B", "I;16N"}
# Raw modes of unsigned 16-bit samples ("I;16B", "RGB;16L", "LA;16B", ...). Not "BGR;16",
# which is 16 bits per *pixel* (5-6-5) in BMP, nor signed "I;16S".
_RAW16 = re.compile(r"^(I|L|LA|RGB|RGBA);16[LBN]?$")


def _rawmode(img: Image.Image) -> str | None:
    """The raw (file) mode of the first tile, read before decoding; None if unknown."""
    tiles = getattr(img, "tile", None) or []
    if not tiles:
        return None
    args = tiles[0][3] if len(tiles[0]) > 3 else None
    if isinstance(args, tuple) and args:
        args = args[0]
    return args if isinstance(args, str) else None


def _classify(mode: str, rawmode: str | None, source: str) -> _Kind:
    """Return the ``_Kind`` of a Pillow mode, or raise ``UnsupportedImageMode``."""
    match = _RAW16.match(rawmode or "")
    raw16 = match is not None
    if mode in _I16_MODES or (mode == "I" and raw16 and match.group(1) == "I"):
        return _OPT_IN["I16"]
    if raw16 and mode in ("L", "LA", "RGB", "RGBA"):  # Pillow already reduced to 8 bits
        return _OPT_IN[("LA" if rawmode.startswith("LA") else mode) + "16"]
    if mode in _ACCEPTED:
        return _ACCEPTED[mode]
    if mode in _OPT_IN:
        return _OPT_IN[mode]
    why = _REFUSED.get(mode, "only L and RGB images (plus the documented conversions) are supported")
    raise UnsupportedImageMode(source, f"image mode {mode!r} is never accepted: {why}")


def _require(kind: _Kind, mode: str, policy: ImagePolicy, source: str) -> None:
    """Refuse ``kind`` unless the policy opts in to every conversion it needs."""
    missing = [c for c in kind.needs if c not in policy.conversions]
    if not missing:
        return
    api = "{" + ", ".join(repr(c) for c in kind.needs) + "}"
    cli = " ".join(f"--convert {c}" for c in kind.needs)
    raise UnsupportedImageMode(
        source,
        f"image mode {mode!r} ({kind.description}) is not accepted; pass "
        f"conversions={api} (API) or {cli} (command line) to {kind.action}",
    )


def _to_array(img: Image.Image, kind: _Kind) -> np.ndarray:
    """Decoded Pillow image of ``kind`` -> uint8 L/RGB array (the documented conversions)."""
    name = kind.name
    if name in ("L", "RGB", "L16", "RGB16"):
        arr = np.asarray(img)
    elif name in ("P", "PA"):
        arr = np.asarray(img.convert("RGB"))
    elif name in ("RGBA", "RGBX", "RGBA16"):
        arr = np.asarray(img)[..., :3]
    elif name in ("LA", "LA16"):
        arr = np.asarray(img)[..., 0]  # LA16 is decoded by Pillow as grey RGBA
    elif name == "1":
        arr = np.asarray(img.convert("L"))
    elif name == "I16":
        wide = np.asarray(img).astype(np.int64)
        if wide.size and (wide.min() < 0 or wide.max() > 65535):
            raise ValueError("16-bit image has samples outside 0..65535")
        arr = (wide + 128) // 257  # == round(v / 257): v / 257 is never exactly .5
    else:  # pragma: no cover - every kind is handled above
        raise AssertionError(name)
    return np.ascontiguousarray(arr, dtype=np.uint8)


# --- loading ------------------------------------------------------------------------------

_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "PNG",
    b"\xff\xd8\xff": "JPEG",
    b"GIF87a": "GIF",
    b"GIF89a": "GIF",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
    b"II+\x00": "TIFF",
    b"MM\x00+": "TIFF",
    b"BM": "BMP",
}


def _sniff(fh) -> str | None:
    """The format named by the file's signature, or None (used to tell 'truncated' from 'not an image')."""
    try:
        fh.seek(0)
        head = fh.read(16)
    except (OSError, ValueError):
        return None
    for magic, fmt in _SIGNATURES.items():
        if head.startswith(magic):
            return fmt
    return None


def _open_source(src: Source, source: str | None):
    """Return (name, binary file object) for a path or bytes; empty/unreadable -> typed error."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        name = source or "<bytes>"
        if memoryview(src).nbytes == 0:
            raise EmptyImage(name, "input is empty (0 bytes)")
        return name, io.BytesIO(src)
    if isinstance(src, (str, os.PathLike)):
        path = os.fsdecode(os.fspath(src))
        name = source or path
        try:
            fh = open(path, "rb")
        except OSError as e:
            raise UnreadableImage(name, f"cannot open file: {e.strerror or e}") from e
        try:
            empty = os.fstat(fh.fileno()).st_size == 0
        except OSError:
            empty = False
        if empty:
            fh.close()
            raise EmptyImage(name, "file is empty (0 bytes)")
        return name, fh
    raise TypeError(f"load_image needs a path or bytes, got {type(src).__name__}")


def _is_bomb_warning(w: warnings.WarningMessage) -> bool:
    return issubclass(w.category, Image.DecompressionBombWarning)


def _open_pil(fh, name: str, caught: list) -> ImageFile.ImageFile:
    """``Image.open`` (header only) with every failure mapped to a typed error."""
    try:
        img = Image.open(fh)
    except Image.DecompressionBombError as e:
        raise DecompressionBomb(name, f"Pillow refused it as a decompression bomb: {e}") from e
    except MemoryError:
        raise
    except Exception as e:  # Pillow raises many kinds (OSError, SyntaxError, struct.error, ...)
        fmt = _sniff(fh)
        if fmt is not None:
            raise TruncatedImage(
                name, f"looks like {fmt} but its header cannot be read (truncated or corrupt)"
            ) from e
        if isinstance(e, UnidentifiedImageError):
            raise UnreadableImage(name, "not an image Pillow can read (TIFF, PNG, BMP, JPEG, ...)") from e
        raise UnreadableImage(name, f"cannot read image: {type(e).__name__}: {e}") from e
    bombs = [w for w in caught if _is_bomb_warning(w)]
    if bombs:
        img.close()
        raise DecompressionBomb(name, f"Pillow warned of a decompression bomb: {bombs[0].message}")
    return img


def _decode(img: ImageFile.ImageFile, name: str, policy: ImagePolicy) -> LoadedImage:
    """Check size and mode from the header, then decode the first frame and convert it."""
    width, height = img.size
    if width * height > policy.max_pixels:
        raise DecompressionBomb(
            name,
            f"image is {width}x{height} = {width * height} pixels, more than the limit of "
            f"{policy.max_pixels} (ImagePolicy.max_pixels); refused before decoding",
        )
    if width == 0 or height == 0:
        raise EmptyImage(name, f"image has no pixels ({width}x{height})")
    conversions: list[str] = []
    try:
        frames = getattr(img, "n_frames", 1)
        if frames > 1:
            img.seek(0)
            conversions.append("first-frame")
            logger.info("%s: %d frames, using the first", name, frames)
        mode = img.mode
        kind = _classify(mode, _rawmode(img), name)
        _require(kind, mode, policy, name)
        img.load()  # decodes everything: truncation is detected here
        if img.mode != mode:  # a plugin may settle the mode only when decoding
            mode = img.mode
            kind = _classify(mode, None, name)
            _require(kind, mode, policy, name)
        pixels = _to_array(img, kind)
    except ImageError:
        raise
    except Image.DecompressionBombError as e:
        raise DecompressionBomb(name, f"Pillow refused it as a decompression bomb: {e}") from e
    except MemoryError:
        raise
    except Exception as e:  # OSError "image file is truncated", decoder errors, ...
        raise TruncatedImage(name, f"pixel data cannot be decoded (truncated or corrupt): {e}") from e
    conversions.extend(kind.needs)
    return LoadedImage(pixels, "L" if pixels.ndim == 2 else "RGB", name, img.format, tuple(conversions))


def load_image(
    src: Source, *, source: str | None = None, policy: ImagePolicy = ImagePolicy()
) -> LoadedImage:
    """Load ``src`` (a path, or the file's bytes) as an 8-bit L or RGB image.

    ``source`` names the input in errors (default: the path, or ``"<bytes>"``).
    Raises ``EmptyImage``, ``UnreadableImage``, ``TruncatedImage``,
    ``UnsupportedImageMode`` or ``DecompressionBomb`` (see the module docstring
    for the policy).
    """
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        logger.warning("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set: truncated files will not be detected")
    name, fh = _open_source(src, source)
    with fh, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _open_pil(fh, name, caught) as img:
                return _decode(img, name, policy)
        finally:
            for w in caught:
                if not _is_bomb_warning(w):
                    logger.warning("%s: Pillow: %s", name, w.message)


# --- preprocessing and output ------------------------------------------------------------

_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}


def _check_pixels(pixels: np.ndarray) -> None:
    """Raise ValueError unless ``pixels`` is a uint8 (H, W) or (H, W, 3) array."""
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8:
        raise ValueError(f"pixels must be a uint8 array, got {getattr(pixels, 'dtype', type(pixels))}")
    if pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[2] != 3):
        raise ValueError(f"pixels must have shape (H, W) or (H, W, 3), got {pixels.shape}")


def _to_pil(pixels: np.ndarray) -> Image.Image:
    _check_pixels(pixels)
    return Image.fromarray(np.ascontiguousarray(pixels), "L" if pixels.ndim == 2 else "RGB")


def center_crop(pixels: np.ndarray, size: int | None = None) -> np.ndarray:
    """Crop the largest centred square, or a centred ``size`` x ``size`` square."""
    height, width = pixels.shape[:2]
    side = min(height, width) if size is None else size
    if side < 1 or side > min(height, width):
        raise ValueError(f"cannot crop a {side}x{side} square from a {height}x{width} image")
    top, left = (height - side) // 2, (width - side) // 2
    return np.ascontiguousarray(pixels[top:top + side, left:left + side])


def resize(pixels: np.ndarray, size: int, resample: str = "bicubic") -> np.ndarray:
    """Resize to ``size`` x ``size`` with Pillow; stays uint8 and L/RGB."""
    if size < 1:
        raise ValueError(f"resize size must be >= 1, got {size}")
    if resample not in _RESAMPLE:
        raise ValueError(f"unknown resample {resample!r}; known: {sorted(_RESAMPLE)}")
    out = _to_pil(pixels).resize((size, size), _RESAMPLE[resample])
    return np.array(out, dtype=np.uint8)


def preprocess(img: LoadedImage, size: int | None) -> LoadedImage:
    """The paper's pipeline: centre crop to a square, then resize to ``size`` x ``size``.

    ``size=None`` returns ``img`` unchanged. ``conversions`` is kept as is: it
    records mode conversions only, not geometry.
    """
    if size is None:
        return img
    return replace(img, pixels=resize(center_crop(img.pixels), size))


def export_bmp(pixels: np.ndarray, path: str | os.PathLike) -> None:
    """Write ``pixels`` as a BMP file (the paper converted all images to BMP)."""
    _to_pil(pixels).save(path, format="BMP")


def array_to_image_bytes(pixels: np.ndarray, format: str = "PNG") -> bytes:
    """Encode ``pixels`` (uint8 L/RGB) in ``format`` and return the file's bytes."""
    buf = io.BytesIO()
    _to_pil(pixels).save(buf, format=format)
    return buf.getvalue()
