"""The images the benchmarks measure: the public data sets read in place, or bundled samples.

The data sets (USC-SIPI, DIV2K) are never copied into the project: they are read where
:data:`DATASETS` points, ``$HEPIX_DATASETS`` if set, else ``../shared/datasets`` next to the
repository.  Without them every suite falls back to scikit-image's bundled sample images (no
download) and says so.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from hecore.images import center_crop, load_image, resize

log = logging.getLogger(__name__)

#: ``$HEPIX_DATASETS``, else ``../shared/datasets`` next to the repository (this file is in its bench/).
DATASETS = Path(os.environ.get("HEPIX_DATASETS") or Path(__file__).resolve().parents[2] / "shared" / "datasets")

#: Preferred USC-SIPI images of the packed suite: colour and grey, 256x256 and 512x512 originals.
PACKED_USC_SIPI = ("4.1.05.tiff", "4.2.03.tiff", "5.1.12.tiff", "7.1.01.tiff")
#: The grey USC-SIPI photograph of Fig. 3 (512x512).
FIG3_USC_SIPI = "7.1.01.tiff"

#: scikit-image's bundled images (no download), used when the data sets are absent; ``camera`` first
#: (512x512 grey, the stand-in for the USC-SIPI photographs).
SAMPLES = ("camera", "astronaut", "coffee", "moon", "coins", "chelsea", "page")


def usc_sipi_dir() -> Path:
    return DATASETS / "usc-sipi"


def usc_sipi_files() -> list[Path]:
    """Every USC-SIPI TIFF, sorted by name; empty without the data set."""
    folder = usc_sipi_dir()
    return sorted(folder.glob("*.tif*")) if folder.is_dir() else []


def div2k_files() -> list[Path]:
    """Every DIV2K PNG, smallest file first (a quick run's full-size image is then an x2 LR one)."""
    folder = DATASETS / "div2k"
    if not folder.is_dir():
        return []
    return sorted(folder.rglob("*.png"), key=lambda p: (p.stat().st_size, p.name))


def sample(name: str) -> np.ndarray:
    """One of scikit-image's bundled images by name (e.g. ``camera``)."""
    import skimage.data

    if name not in SAMPLES:
        raise ValueError(f"unknown sample image {name!r}; choose from {', '.join(SAMPLES)}")
    return getattr(skimage.data, name)()


def source_image(path: str | Path | None) -> tuple[str, np.ndarray]:
    """``(display name, pixels)`` of an image file (a path, or a path under the data sets' directory such as
    ``usc-sipi/5.1.12.tiff``), or of the ``camera`` sample without one."""
    if path:
        p = Path(path)
        if not p.exists() and not p.is_absolute() and (DATASETS / p).is_file():
            p = DATASETS / p
        return p.name, load_image(p).pixels
    return "skimage-camera", sample("camera")


def fig3_source() -> tuple[str, np.ndarray]:
    """The image of Fig. 3: USC-SIPI's grey 7.1.01 when present, else the ``camera`` sample."""
    path = usc_sipi_dir() / FIG3_USC_SIPI
    if path.is_file():
        return f"usc-sipi/{FIG3_USC_SIPI}", load_image(path).pixels
    return "skimage-camera", sample("camera")


def packed_images(count: int, size: int, image: str | Path | None = None) -> dict[str, np.ndarray]:
    """The packed layout's images, centre-cropped and resized to ``size`` x ``size``, by display name:
    ``image`` alone when given, else the preferred USC-SIPI files (then the others) when the data
    set is present, else scikit-image's samples (logged)."""
    if image:
        name, pixels = source_image(image)
        return {f"{name}@{size}": resize(center_crop(pixels), size)}
    folder = usc_sipi_dir()
    files = [folder / f for f in PACKED_USC_SIPI if (folder / f).is_file()]
    files += [p for p in usc_sipi_files() if p not in files]
    out = {f"usc-sipi/{p.name}@{size}": resize(center_crop(load_image(p).pixels), size) for p in files[:count]}
    if out:
        return out
    log.warning("no USC-SIPI images in %s: using scikit-image's sample images", folder)
    names = (SAMPLES * (count // len(SAMPLES) + 1))[:count]
    return {f"skimage-{n}@{size}": resize(center_crop(sample(n)), size) for n in names}
