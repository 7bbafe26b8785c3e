"""Contact sheets: each decrypted image beside its original, the same ops done in plaintext and the
difference, one row per image, captioned with its quality and what its ciphertexts cost.

Two halves.  :func:`panels` runs where decrypt scores an image (tasks/metrics.py): it keeps four
small 8-bit pictures of it -- the original, the plaintext-processed reference the metrics are computed
against, the decrypted image, and their difference amplified -- downscaled together when the image is
larger than :data:`MAX_SIDE`.  :func:`draw` runs on the key owner's driver and lays them out with Pillow.
The PNG records where each panel lies (a text chunk, :data:`LAYOUT_KEY`; :func:`read_layout`), so a panel
can be cropped back out of the sheet and checked.
"""
from __future__ import annotations

import io
import json
import math
import os
import tempfile
from dataclasses import dataclass

import numpy as np

#: The panels of a row, left to right.
PANEL_NAMES = ("original", "plaintext-processed", "decrypted", "difference")
#: At most this many images are drawn (a corpus run draws its first ones by name).
MAX_IMAGES = 12
#: A panel's longer side, in pixels: larger images are drawn downscaled (a box filter).
MAX_SIDE = 512
#: The difference panel shows |decrypted - plaintext-processed| times this, clipped to 255.
DIFF_GAIN = 32
#: The PNG text chunk that holds the panels' boxes (JSON: image, panel, box [x0, y0, x1, y1]).
LAYOUT_KEY = "hepix-panels"

_MARGIN, _GAP, _LINE = 12, 8, 18
_BACKGROUND, _INK, _FRAME = (255, 255, 255), (20, 20, 20), (160, 160, 160)


def difference(decrypted: np.ndarray, reference: np.ndarray, gain: int = DIFF_GAIN) -> np.ndarray:
    """|decrypted - reference| x ``gain``, clipped to 0..255 (uint8): black where the two agree."""
    d = np.abs(decrypted.astype(np.int32) - reference.astype(np.int32)) * gain
    return np.minimum(d, 255).astype(np.uint8)


def _shrink(a: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    if (a.shape[1], a.shape[0]) == size:
        return a
    return np.asarray(Image.fromarray(a).resize(size, Image.Resampling.BOX))


def panels(original: np.ndarray, reference: np.ndarray, decrypted: np.ndarray, max_side: int = MAX_SIDE) -> bytes:
    """The four panels of one image (uint8, H x W or H x W x 3 each, all of one shape) as ``.npz`` bytes.

    The difference is taken at full size; then all four are downscaled together so that the longer side
    is at most ``max_side`` (the original size is kept as ``full_size``)."""
    if not (original.shape == reference.shape == decrypted.shape):
        raise ValueError(f"panels of one image must have one shape: {original.shape}, {reference.shape}, "
                         f"{decrypted.shape}")
    h, w = original.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    pictures = (original, reference, decrypted, difference(decrypted, reference))
    buf = io.BytesIO()
    np.savez(buf, full_size=np.array([h, w]),
             **{name: _shrink(np.ascontiguousarray(p, dtype=np.uint8), size) for name, p in zip(PANEL_NAMES, pictures)})
    return buf.getvalue()


def read_panels(data: bytes) -> dict[str, np.ndarray]:
    """The panels :func:`panels` made (and ``full_size``: the image's height and width)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {name: z[name] for name in (*PANEL_NAMES, "full_size")}


@dataclass(frozen=True)
class SheetRow:
    """One image of a sheet: a title above its panels, a caption below."""

    title: str
    caption: str
    panels: dict[str, np.ndarray]


def _shown(v, spec: str) -> str:
    """A metric as a caption shows it: ``-`` when missing, ``inf`` for an infinite PSNR (an exact image)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return "inf" if isinstance(v, float) and math.isinf(v) else format(v, spec)


def caption(m: dict, full_size: tuple[int, int], drawn: tuple[int, int]) -> str:
    """Two lines from a ``metrics`` row: its quality against the reference; its ciphertexts and their bytes
    (and the size the panels are drawn at, when they were downscaled from ``full_size``; both height, width)."""
    values = m["width"] * m["height"] * m["channels"]
    quality = (f"MSE {_shown(m['mse'], '.3f')}   PSNR {_shown(m['psnr'], '.2f')} dB   "
               f"SSIM {_shown(m['ssim'], '.4f')}   max err {_shown(m['max_abs_err'], '.1e')}   exact {_shown(m['exact_fraction'], '.4f')}")
    cost = (f"{m['ciphertexts']:,} ciphertexts, {m['ciphertext_bytes']:,} bytes "
            f"({m['ciphertext_bytes'] / values:.1f} per pixel value)")
    if tuple(drawn) != tuple(full_size):
        cost += f"; drawn at {drawn[1]}x{drawn[0]}"
    return f"{quality}\n{cost}"


def sheet_rows(metrics: list[dict], drawn: dict[str, bytes]) -> list[SheetRow]:
    """The rows of a sheet, in the order of ``metrics`` (a decrypt run's rows), for the images ``drawn`` holds
    panels of (image id -> :func:`panels` bytes)."""
    rows = []
    for m in metrics:
        if m["image_id"] not in drawn:
            continue
        p = read_panels(drawn[m["image_id"]])
        full = tuple(int(v) for v in p.pop("full_size"))
        name = m["source"].rsplit("/", 1)[-1]
        kind = {1: "grey", 3: "RGB"}.get(m["channels"], f"{m['channels']} channels")
        title = f"{name}   {m['width']}x{m['height']} {kind}   {m['ops'] or 'no ops'}"
        rows.append(SheetRow(title, caption(m, full, p[PANEL_NAMES[0]].shape[:2]), p))
    return rows


def legend() -> str:
    """The header line that names the columns."""
    return (f"original  |  plaintext-processed (the same ops, no encryption)  |  decrypted  |  "
            f"difference of the two, x{DIFF_GAIN}")


def _font(size: int = 13):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):        # Pillow without FreeType: its bitmap font
        return ImageFont.load_default()


def _rgb(a: np.ndarray) -> np.ndarray:
    return np.repeat(a[:, :, None], 3, axis=2) if a.ndim == 2 else a


def _labels() -> list[str]:
    return [*PANEL_NAMES[:-1], f"{PANEL_NAMES[-1]} x{DIFF_GAIN}"]


def _geometry(rows: list[SheetRow], header: list[str], font) -> tuple[int, int, int]:
    """Column width, sheet width and height."""
    col = max(r.panels[PANEL_NAMES[0]].shape[1] for r in rows)
    text = header + [r.title for r in rows] + [line for r in rows for line in r.caption.splitlines()]
    width = max(len(PANEL_NAMES) * col + (len(PANEL_NAMES) - 1) * _GAP,
                max(int(font.getlength(t)) for t in text)) + 2 * _MARGIN
    height = _MARGIN + (len(header) + 1) * _LINE + _GAP
    for r in rows:
        height += _LINE + r.panels[PANEL_NAMES[0]].shape[0] + 4 + _LINE * len(r.caption.splitlines()) + _GAP
    return col, width, height + _MARGIN


def draw(rows: list[SheetRow], path: str, header: list[str]) -> list[dict]:
    """Write the sheet of ``rows`` as a PNG at ``path`` (atomically) under the ``header`` lines; returns the
    panels' boxes, which the PNG also holds (:data:`LAYOUT_KEY`)."""
    from PIL import Image, ImageDraw
    from PIL.PngImagePlugin import PngInfo

    if not rows:
        raise ValueError("a contact sheet needs at least one image")
    font = _font()
    col, width, height = _geometry(rows, header, font)
    sheet = Image.new("RGB", (width, height), _BACKGROUND)
    pen = ImageDraw.Draw(sheet)
    y = _MARGIN
    for line in header:
        pen.text((_MARGIN, y), line, fill=_INK, font=font)
        y += _LINE
    if all(font.getlength(label) <= col for label in _labels()):
        for i, label in enumerate(_labels()):
            pen.text((_MARGIN + i * (col + _GAP), y), label, fill=_INK, font=font)
    y += _LINE + _GAP
    boxes = []
    for r in rows:
        pen.text((_MARGIN, y), r.title, fill=_INK, font=font)
        y += _LINE
        for i, name in enumerate(PANEL_NAMES):
            picture = _rgb(r.panels[name])
            x = _MARGIN + i * (col + _GAP)
            box = (x, y, x + picture.shape[1], y + picture.shape[0])
            pen.rectangle((box[0] - 1, box[1] - 1, box[2], box[3]), outline=_FRAME)
            sheet.paste(Image.fromarray(picture), box[:2])
            boxes.append({"image": r.title, "panel": name, "box": list(box)})
        y += r.panels[PANEL_NAMES[0]].shape[0] + 4
        for line in r.caption.splitlines():
            pen.text((_MARGIN, y), line, fill=_INK, font=font)
            y += _LINE
        y += _GAP
    info = PngInfo()
    info.add_text(LAYOUT_KEY, json.dumps(boxes))
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".contact-sheet-", suffix=".png")
    try:
        with os.fdopen(fd, "wb") as f:
            sheet.save(f, format="PNG", pnginfo=info)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return boxes


#: PNG's signature, and the most bytes :func:`is_contact_sheet` reads before giving up.
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SHEET_PROBE_BYTES = 64 * 2**20


def is_contact_sheet(path: str) -> bool:
    """Whether the file ``path`` is a contact sheet :func:`draw` wrote: a PNG with the :data:`LAYOUT_KEY`
    text chunk before its image data.  Reads chunk headers and text keywords only (no pixel is decoded),
    at most :data:`_SHEET_PROBE_BYTES`, and never follows a symbolic link."""
    want = LAYOUT_KEY.encode("latin-1") + b"\0"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        if f.read(8) != _PNG_SIGNATURE:
            return False
        read = 8
        while read < _SHEET_PROBE_BYTES:
            head = f.read(8)
            if len(head) != 8:
                return False
            length, kind = int.from_bytes(head[:4], "big"), head[4:]
            if kind in (b"IDAT", b"IEND"):
                return False
            if kind in (b"tEXt", b"iTXt", b"zTXt") and length >= len(want):
                if f.read(len(want)) == want:
                    return True
                f.seek(length - len(want) + 4, os.SEEK_CUR)
            else:
                f.seek(length + 4, os.SEEK_CUR)
            read += 12 + length
    return False


def read_layout(path: str) -> list[dict]:
    """The panels' boxes a sheet records: ``{"image", "panel", "box": [x0, y0, x1, y1]}`` each."""
    from PIL import Image

    with Image.open(path) as im:
        return json.loads(im.text[LAYOUT_KEY])
