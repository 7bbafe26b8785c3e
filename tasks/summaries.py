"""Per-image summaries of a checking task: what the driver decides every image from.

A task that checks rows (tasks.rowchecks) makes one CHECKED row per ciphertext row.  Instead of sending
them all back to be grouped by a second Spark job, the task aggregates them itself, per image: how many
rows, which (channel, tile, index) keys, the sizes they claim (least and greatest), the layout, a file,
how many failed -- an IMAGE_SUMMARY row -- and it keeps the first :data:`FIRST_BAD` failed rows of each
image in the order the rejects list them (:func:`rank_key`).  The driver adds the summaries of an image
up over the tasks (jobs.runtime.inputcheck): the same counts, keys and first rejects as a Spark aggregation
over every CHECKED row gives, from a few rows per image and task.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from schemas.stages import CHECKED, IMAGE_SUMMARY

from .rowchecks import DIGITS, expected_rows, side_batch

#: The failed rows of one image a task keeps (the driver lists the first five of every image).
FIRST_BAD = 5
#: The columns whose least and greatest value a summary keeps.
RANGES = ("image_height", "image_width", "image_channels", "tile_h", "tile_w")
KEY_COLUMNS = ("channel", "tile_y", "tile_x", "index")
#: The order the failed rows of one image are listed in (ascending, nulls first, as Spark orders them).
RANK = KEY_COLUMNS + ("reason",)


@dataclass(frozen=True)
class ImageSummary:
    """What the rows of one image say about it (aggregated without the bytes)."""

    image_id: str
    rows: int
    keys: int                       # distinct (channel, tile_y, tile_x, index)
    layout: str
    heights: tuple[int, int]        # (min, max) over the rows
    widths: tuple[int, int]
    channels: tuple[int, int]
    tiles: tuple[int, int, int, int]   # min/max tile_h, min/max tile_w
    file: str | None = None
    bad: int = 0                    # rows that failed their row checks


def image_problems(s: ImageSummary, owner=None) -> tuple[str, str] | None:
    """Why the rows of one image (all good one by one) do not make a whole image, or None."""
    if s.heights[0] != s.heights[1] or s.widths[0] != s.widths[1] or s.channels[0] != s.channels[1] \
            or s.tiles[0] != s.tiles[1] or s.tiles[2] != s.tiles[3]:
        return "inconsistent-image", "its rows disagree on the image's size, channels or tile"
    H, W, C, th, tw = s.heights[0], s.widths[0], s.channels[0], s.tiles[0], s.tiles[2]
    if owner is not None:
        known = owner.get(s.image_id)
        if known is None:
            return "unknown-image", "no image of the owner map has this id: the owner never encrypted it"
        if (H, W, C) != (known.image_height, known.image_width, known.image_channels):
            return "size-mismatch", (f"the rows say {W}x{H}x{C}, the owner encrypted a "
                                     f"{known.image_width}x{known.image_height}x{known.image_channels} image")
    if s.layout == DIGITS:
        return None
    if s.keys != s.rows:
        return "duplicate-row", f"{s.rows - s.keys} of its {s.rows} rows repeat a (channel, tile, index) key"
    want = expected_rows(s.layout, H, W, C, th, tw)
    if s.rows != want:
        return "incomplete-image", f"{s.rows} of its {want} ciphertexts"
    return None


def rank_key(row: dict) -> tuple:
    """The sort key of a failed CHECKED row among its image's (nulls first)."""
    return tuple((row[k] is not None, row[k]) for k in RANK)


def summary_schema(work_schema: pa.Schema) -> pa.Schema:
    """The rows a checking task gives back: a ``summary`` (IMAGE_SUMMARY), a ``bad`` CHECKED row, or a
    ``work`` row of the job's own output -- one of the three per row."""
    def nullable(schema: pa.Schema) -> pa.DataType:        # a row of another side has none of these
        return pa.struct([f.with_nullable(True) for f in schema])

    return pa.schema([("summary", nullable(IMAGE_SUMMARY)), ("bad", nullable(CHECKED)),
                      ("work", nullable(work_schema))])


def summarize(checked: Iterable[pa.RecordBatch]) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """The IMAGE_SUMMARY rows of the CHECKED batches ``checked`` (one per image id, rows without an id under
    a null id), and the first :data:`FIRST_BAD` failed CHECKED rows of each image."""
    batches = [b for b in checked if b.num_rows]
    if not batches:
        return pa.RecordBatch.from_pylist([], IMAGE_SUMMARY), pa.RecordBatch.from_pylist([], CHECKED)
    table = pa.Table.from_batches(batches, schema=CHECKED).combine_chunks()
    ids = table.column("image_id").to_pylist()
    groups: dict = {}
    for i, image in enumerate(ids):
        groups.setdefault(image, []).append(i)
    columns = {n: table.column(n) for n in CHECKED.names}
    ranges = {n: _with_nulls(columns[n]) for n in RANGES}
    keys = [_with_nulls(columns[n]) for n in KEY_COLUMNS]
    failed = columns["reason"].is_valid().to_numpy(zero_copy_only=False)
    files, layouts = columns["file"].to_pylist(), columns["layout"].to_pylist()
    summaries, bad_rows = [], []
    for image, rows in groups.items():
        idx = np.asarray(rows, dtype=np.int64)
        row = {"image_id": image, "rows": len(rows), "bad": int(failed[idx].sum()),
               "file": next((files[i] for i in rows if files[i] is not None), None),
               "layout": next((layouts[i] for i in rows if layouts[i] is not None), None)}
        for name, (values, valid) in ranges.items():
            ok = idx[valid[idx]]
            row[f"lo_{name}"] = int(values[ok].min()) if ok.size else None
            row[f"hi_{name}"] = int(values[ok].max()) if ok.size else None
        whole = np.logical_and.reduce([valid[idx] for _, valid in keys])
        quads = np.stack([values[idx[whole]] for values, _ in keys], axis=1).astype("<i4") if whole.any() \
            else np.zeros((0, 4), dtype="<i4")
        row["keys"] = np.unique(quads, axis=0).tobytes() if len(quads) else b""
        summaries.append(row)
        if row["bad"]:
            bad = table.take(pa.array(idx[failed[idx]])).to_pylist()
            bad_rows += sorted(bad, key=rank_key)[:FIRST_BAD]
    return (pa.RecordBatch.from_pylist(summaries, schema=IMAGE_SUMMARY),
            pa.RecordBatch.from_pylist(bad_rows, schema=CHECKED))


def _with_nulls(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(values, valid)`` of an integer column, nulls as 0 in ``values``."""
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return column.fill_null(0).to_numpy(zero_copy_only=False), valid


def keys_of(blob: bytes) -> np.ndarray:
    """The (n, 4) int32 keys of a summary's ``keys``."""
    return np.frombuffer(blob or b"", dtype="<i4").reshape(-1, 4)


def distinct_keys(blobs: Iterable[bytes]) -> int:
    """How many distinct keys the ``keys`` of one image's summaries hold together."""
    parts = [keys_of(b) for b in blobs if b]
    if not parts:
        return 0
    return len(np.unique(np.concatenate(parts), axis=0)) if len(parts) > 1 else len(parts[0])


def merge_summaries(rows: Iterable[dict]) -> list[ImageSummary]:
    """The :class:`ImageSummary` of every image of the IMAGE_SUMMARY ``rows`` (dicts) of one or more tasks:
    an image's rows, failed rows and keys added up, its least and greatest sizes, a file and its layout."""
    merged: dict = {}
    for r in rows:
        m = merged.get(r["image_id"])
        if m is None:
            merged[r["image_id"]] = {**r, "keys": [r["keys"]]}
            continue
        m["rows"] += r["rows"]
        m["bad"] += r["bad"]
        m["keys"].append(r["keys"])
        for k in ("file", "layout"):
            m[k] = m[k] if m[k] is not None else r[k]
        for name in RANGES:
            for side, pick in (("lo", min), ("hi", max)):
                a, b = m[f"{side}_{name}"], r[f"{side}_{name}"]
                m[f"{side}_{name}"] = b if a is None else a if b is None else pick(a, b)
    return [ImageSummary(image_id=i, rows=m["rows"], keys=distinct_keys(m["keys"]), layout=m["layout"],
                         heights=(m["lo_image_height"], m["hi_image_height"]),
                         widths=(m["lo_image_width"], m["hi_image_width"]),
                         channels=(m["lo_image_channels"], m["hi_image_channels"]),
                         tiles=(m["lo_tile_h"], m["hi_tile_h"], m["lo_tile_w"], m["hi_tile_w"]),
                         file=m["file"], bad=m["bad"])
            for i, m in merged.items()]


def checked_and_summarized(batches: Iterator[pa.RecordBatch], *, work_schema: pa.Schema, problems=None,
                           **check) -> Iterator[pa.RecordBatch]:
    """:func:`tasks.rowchecks.check_and_work_partition` (``check``: its arguments) giving
    :func:`summary_schema` rows: the work's rows as they come, then, once the task's input is done, its
    summaries and first failed rows (:func:`summarize`) instead of a CHECKED row per input row."""
    from .rowchecks import check_and_work_partition

    schema = summary_schema(work_schema)
    checked: list = []
    for out in check_and_work_partition(batches, work_schema=work_schema, problems=problems, checked_to=checked,
                                        **check):
        yield side_batch(out, schema, "work")
    summaries, bad = summarize(checked)
    if summaries.num_rows:
        yield side_batch(summaries, schema, "summary")
    if bad.num_rows:
        yield side_batch(bad, schema, "bad")
