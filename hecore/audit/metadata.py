"""The metadata test: which column of a ciphertext table, other than the ciphertexts, gives images away.

IND-CPA covers the ``ct`` column only.  Any other column that is a deterministic function of the
plaintext -- a hash of the image file or of its pixels, its file name or path, an id computed from
them -- lets whoever holds the table confirm a guess (compute the function on a candidate image,
compare) and link the same image across runs and corpora, whatever the encryption.  The test plays
that attacker, without any key:

* **guess confirmation** (with candidate images, ``hepix audit --images``): for every candidate file it
  computes what a guesser would -- SHA-256, SHA-1, MD5 and BLAKE2b of the file's bytes and of its
  decoded pixels, in hex and as prefixes, the file's name, stem and path in the spellings Spark and
  the shell use, and the same hashes of those -- and flags every column holding one of them;
* **shape** (without candidates): a per-image text column that looks like a path or a file name, or
  like a hash digest, is flagged as a likely function of the plaintext;
* **classification** of the rest: what hepix shows by construction (image size, channels, tile
  positions), values constant over the run (layout, parameters, key fingerprint, ops), functions of
  the ciphertext (its checksum) and measured times pass; an image id passes when no candidate
  matches it (hepix's are keyed with a secret the encrypt run drew and forgot).

One :class:`ColumnVerdict` per column.  The test can show a column leaks; it cannot prove one does not
(a function it does not try) -- which is why hepix's own table carries nothing but the above.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Shown by construction: an image's size and channels, where a tile sits (see docs/threat-model.md).
VISIBLE = ("image_height", "image_width", "image_channels", "tile_h", "tile_w", "halo", "tile_y", "tile_x", "y", "x",
           "h", "w", "channel", "index")
#: One value for the whole run: what the run is, not what an image is.
RUN_CONSTANT = ("run_id", "layout", "scheme", "preset", "strategy", "security", "key_fingerprint", "ops",
                "post_scale", "level", "scale_bits")
#: Functions of the ciphertext (covered by the ciphertext tests) and measured times.
OF_CIPHERTEXT = ("ct", "ct_xxh3")
MEASURED = ("encrypt_seconds", "process_seconds")

_HEX = re.compile(r"^[0-9a-fA-F]{16,128}$")
_PATHLIKE = re.compile(r"[/\\]|\.(png|jpe?g|tiff?|bmp|gif|webp|pgm|ppm)$", re.IGNORECASE)
_MIN_MATCH = 8          # shorter values match too much by chance


@dataclass(frozen=True)
class ColumnVerdict:
    column: str
    verdict: str            # pass | leaks | skipped
    statistic: float | None
    detail: str


def _hashes(data: bytes, what: str) -> dict[str, str]:
    out = {}
    for name in ("sha256", "sha1", "md5", "blake2b", "sha512"):
        out[f"{name}({what})"] = hashlib.new(name, data).hexdigest()
    return out


def candidate_values(path: str | Path, content: bytes, pixels: np.ndarray | None) -> dict[str, str]:
    """What a guesser computes from one candidate image: name -> value (hex digests, names, paths)."""
    p = Path(path)
    out = _hashes(content, "file bytes")
    if pixels is not None:
        out.update(_hashes(np.ascontiguousarray(pixels).tobytes(), "decoded pixels"))
    spellings = {"file name": p.name, "file stem": p.stem, "path": str(p)}
    try:
        a = p.resolve()
        spellings.update({"absolute path": str(a), "file: URI": f"file:{a}", "file:// URI": a.as_uri()})
    except OSError:
        pass
    for label, text in list(spellings.items()):
        out[label] = text
        out.update(_hashes(text.encode("utf-8"), label))
    return out


def _matches(value: str, candidate: str) -> bool:
    """``value`` is ``candidate``, or a prefix of it of at least 8 characters (truncated digests, paths)."""
    if len(value) < _MIN_MATCH:
        return value == candidate and len(value) > 0
    return candidate == value or candidate.startswith(value) or (len(candidate) >= _MIN_MATCH and value.endswith(
        candidate) and ("/" in value or "\\" in value))


def column_verdicts(per_image: dict[str, dict[str, list]], columns: list[str],
                    candidates: list[dict[str, str]] | None) -> list[ColumnVerdict]:
    """One verdict per column.  ``per_image``: image id -> column -> the distinct values its rows hold;
    ``candidates``: :func:`candidate_values` of each candidate image, or None without candidates."""
    out = []
    images = len(per_image)
    for col in columns:
        if col in OF_CIPHERTEXT:
            out.append(ColumnVerdict(col, "pass", None, f"{col}: the ciphertext, or a function of it (covered by "
                                                        "the ciphertext tests)"))
            continue
        values = [v for d in per_image.values() for v in d.get(col, [])]
        texts = {str(v) for v in values if v is not None}
        hit = _guess_hits(per_image, col, candidates) if candidates else None
        if hit:
            label, n = hit
            out.append(ColumnVerdict(col, "leaks", n / max(1, images),
                                     f"{col}: holds {label} of a candidate image for {n} of {images} images: anyone "
                                     "holding a guess can confirm it, and link the image across runs"))
            continue
        if col in VISIBLE:
            out.append(ColumnVerdict(col, "pass", None, f"{col}: image size or tile position, visible by construction"))
        elif col in RUN_CONSTANT:
            distinct = {repr(v) for v in values}
            if len(distinct) <= 1 or images < 2 or _constant_over_images(per_image, col):
                out.append(ColumnVerdict(col, "pass", None, f"{col}: the same for every image of the run"))
            else:
                out.append(ColumnVerdict(col, "leaks", None, f"{col}: differs between images of one run "
                                                             f"({len(distinct)} values): it says something per image"))
        elif col in MEASURED:
            out.append(ColumnVerdict(col, "pass", None, f"{col}: a measured time, not a function of the pixel values"))
        elif col == "image_id":
            detail = ("image_id: no candidate's hash, name or path" if candidates else
                      "image_id: not a function of the image hepix can test without candidates (--images)")
            if texts and all(_HEX.match(t) for t in texts) and len(texts) == images:
                out.append(ColumnVerdict(col, "pass" if candidates else "skipped", None, detail))
            else:
                out.append(_shape_verdict(col, texts, images) or ColumnVerdict(col, "skipped", None, detail))
        else:
            out.append(_shape_verdict(col, texts, images) or ColumnVerdict(
                col, "skipped" if not candidates else "pass", None,
                f"{col}: a column hepix does not write; no candidate's hash, name or path"
                + ("" if candidates else " tried (give --images to try)")))
    return out


def _constant_over_images(per_image, col) -> bool:
    firsts = {repr(d.get(col, [None])[0]) for d in per_image.values()}
    return len(firsts) <= 1


def _guess_hits(per_image, col, candidates) -> tuple[str, int] | None:
    best = None
    labels = sorted({label for c in candidates for label in c})
    for label in labels:
        n = 0
        for d in per_image.values():
            vals = [str(v) for v in d.get(col, []) if v is not None]
            if any(_matches(v, c[label]) for v in vals for c in candidates if label in c):
                n += 1
        if n and (best is None or n > best[1]):
            best = (label, n)
    return best


def _shape_verdict(col, texts: set[str], images: int) -> ColumnVerdict | None:
    if not texts:
        return None
    if all(_PATHLIKE.search(t) for t in texts):
        return ColumnVerdict(col, "leaks", None, f"{col}: per-image values that look like file names or paths "
                                                 f"({len(texts)} values): they name the images")
    if all(_HEX.match(t) for t in texts) and len(texts) > 1:
        return ColumnVerdict(col, "leaks", None, f"{col}: per-image values that look like digests ({len(texts)} "
                                                 "values): a hash of the image would let a guess be confirmed")
    return None
