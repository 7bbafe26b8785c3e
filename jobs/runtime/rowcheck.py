"""The checks every ciphertext row passes before a job uses it, and the images left out for a bad one.

Rows come from a directory a cluster held, so every value is checked before it reaches SEAL, sizes an
allocation or names anything: the row's checksum (storage faults), its key fingerprint (the job's key),
layout, parameters, ops and ``post_scale`` (those of the run), its image id (a strict pattern: ids
never become file names unchecked), its geometry (tile size and halo of the run, position inside the
image, channel and index in range, the image no larger than the owner's pixel limit) and its
ciphertext bytes (the checker of the keys' scheme, :meth:`hecore.schemes.KeySet.checker`: size, and the library's own
validation).  Then per image: every row agrees on the image's size, no key twice, and exactly
the rows the geometry says; with an owner map, the id is one the owner made and the size is the one
it recorded.

A bad row becomes a rejects row naming it (reason, detail, key); its whole image is left out; the job
goes on with the rest.  ``process``, ``decrypt`` and ``verify`` run this with Spark
(:func:`inspect_rows`; ``decrypt`` and, where its workers write the output, ``process`` do their own
work in the same task as the checks, so that they read every ciphertext once); ``audit`` runs the same
row function with pyarrow (:func:`check_batch`, :func:`image_problems`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hecore.images import DEFAULT_MAX_PIXELS
from hecore.layouts import Layout
from schemas.stages import CHECKED
from schemas.tables import IMAGE_ID, spark_schema

from ..tasks.checksums import ALGORITHM, ct_checksums

KEY = ("image_id", "channel", "tile_y", "tile_x", "index")
_ID = re.compile(IMAGE_ID)
DIGITS = "digits"


@dataclass(frozen=True)
class RowExpect:
    """What every row of one input must say (from the job's key, the owner's settings and the run)."""

    fingerprint: str | None          # the job's key; None: the rows must agree with the manifest's (verify)
    layout: str
    preset: str
    ops: tuple[str, ...] = ()
    tile: tuple[int, int] | None = None
    halo: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    check_ops: bool = True
    fixed_format: bool = False      # pixel layout in process: the byte-level kernels need the exact format
    security: str | None = None     # the run's label (ind-cpa | leaks); None: any of them
    strategies: frozenset | None = None   # the strategy labels the run's rows may carry; None: unchecked
    scheme: str | None = None       # the scheme the preset's parameters name
    scale_bits: int | None = None   # the run's ciphertext scale (2^scale_bits); None: unchecked
    max_level: int | None = None    # the most primes a row's ciphertext may be at

    @classmethod
    def from_manifest(cls, manifest, **overrides) -> RowExpect:
        """What a run's manifest says every row holds: its key, layout, preset, ops, tile, halo and the
        pixel limit encrypt was given; ``overrides`` (this job's key, the owner's settings) win."""
        tile = manifest.options.get("tile")
        fields = dict(fingerprint=manifest.key_fingerprint, layout=manifest.layout or "",
                      preset=manifest.preset or "", ops=tuple(manifest.ops), tile=tuple(tile) if tile else None,
                      halo=manifest.options.get("halo"),
                      max_pixels=int(manifest.options.get("settings", {}).get("max_pixels", DEFAULT_MAX_PIXELS)),
                      security=manifest.security)
        fields.update(overrides)
        labels = run_labels(fields["preset"], manifest.strategy, manifest.options)
        return cls(**{**labels, **fields})

    @property
    def post_scale(self) -> float | None:
        """The ``post_scale`` the ops give (image ops only)."""
        if not self.check_ops or self.layout == DIGITS:
            return None
        try:
            from hecore.ops.spec import recorded_finish

            return float(recorded_finish([o for o in self.ops if not o.startswith(("match:", "infer:"))],
                                         self.preset).post_scale)
        except (ValueError, TypeError):
            return None


def run_labels(preset: str, strategy: str | None, options: dict) -> dict:
    """What the labels of a run's rows must say, from its preset, strategy and at-rest format: the scheme,
    the strategies (the run's, and what the scheme's processing relabels it), the scale and the most primes.
    Empty when the preset is not one hepix knows (the rows are then refused by their preset)."""
    from hecore.errors import HepixError
    from hecore.schemes import scheme_for_preset

    try:
        scheme = scheme_for_preset(preset)
        params = scheme.preset(preset)
    except (HepixError, KeyError, ValueError):
        return {}
    store = options.get("store") or options.get("settings", {}).get("store")
    compact = isinstance(store, dict)
    labels = {"scheme": params.scheme,
              "scale_bits": int(store["scale_bits"] if compact else getattr(params, "scale_bits", 0)),
              "max_level": int(store["primes"] if compact else getattr(params, "data_primes", 0))}
    if strategy:
        labels["strategies"] = frozenset({strategy, scheme.processed_strategy(strategy)})
    return labels


def expected_rows(layout: str, height: int, width: int, channels: int, tile_h: int, tile_w: int) -> int:
    """How many ciphertext rows a whole image has in ``layout``."""
    if Layout.parse(layout).packed:
        return channels * -(-height // tile_h) * -(-width // tile_w)
    return height * width * channels


# --- one row ----------------------------------------------------------------------------------------

def _row_problem(r: dict, expect: RowExpect, post_scale: float | None) -> tuple[str, str] | None:
    """The reason and detail why row ``r`` (its metadata, no bytes) is not one this job may use, or None."""
    for k in ("image_id", "layout", "preset", "key_fingerprint", "image_height", "image_width", "image_channels",
              "tile_h", "tile_w", "halo", "tile_y", "tile_x", "y", "x", "h", "w", "channel", "index", "ops",
              "post_scale"):
        if r.get(k) is None:
            return "malformed-row", f"the row has no {k}"
    iid = r["image_id"]
    if not _ID.fullmatch(iid):
        return "bad-image-id", f"image id {iid[:80]!r} is not of the form hepix writes ({IMAGE_ID})"
    if expect.fingerprint is not None and r["key_fingerprint"] != expect.fingerprint:
        return "key-mismatch", (f"the row was made with key {str(r['key_fingerprint'])[:16]}, this job's key is "
                                f"{expect.fingerprint[:16]}")
    if r["layout"] != expect.layout:
        return "layout-mismatch", f"layout {_show(r['layout'])} in a {expect.layout} run"
    if r["preset"] != expect.preset:
        return "parameters-mismatch", f"preset {_show(r['preset'])} in a run of {expect.preset}"
    if expect.check_ops and list(r["ops"]) != list(expect.ops):
        return "ops-mismatch", (f"ops {_show('|'.join(r['ops']) or 'none')} in a run of "
                                f"{_show('|'.join(expect.ops) or 'none')}")
    labels = _label_problem(r, expect)
    if labels is not None:
        return labels
    ps = r["post_scale"]
    if not (isinstance(ps, float) and math.isfinite(ps) and ps != 0.0):
        return "bad-post-scale", f"post_scale {_show(ps)} is not a finite non-zero number"
    if post_scale is not None and abs(ps - post_scale) > 1e-9 * abs(post_scale):
        return "ops-mismatch", f"post_scale {ps!r} is not the {post_scale!r} of its ops"
    if expect.layout == DIGITS:
        return None
    return _geometry_problem(r, expect)


def _show(v, limit: int = 60) -> str:
    """``v`` as a reject detail echoes it: its repr, cut to ``limit`` characters."""
    s = repr(v)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _label_problem(r: dict, expect: RowExpect) -> tuple[str, str] | None:
    """Why the row's labels (security, strategy, scheme, scale, level) are not those of the run, or None."""
    for k in ("security", "strategy", "scheme", "level", "scale_bits"):
        if k in r and r[k] is None:
            return "malformed-row", f"the row has no {k}"
    if expect.security is not None and "security" in r and r["security"] != expect.security:
        return "label-mismatch", f"security {_show(r['security'])} in a run labelled {expect.security}"
    if expect.strategies is not None and "strategy" in r and r["strategy"] not in expect.strategies:
        return "label-mismatch", (f"strategy {_show(r['strategy'])} in a run of "
                                  f"{' or '.join(sorted(expect.strategies))}")
    if expect.scheme is not None and "scheme" in r and r["scheme"] != expect.scheme:
        return "parameters-mismatch", f"scheme {_show(r['scheme'])} in a run of {expect.scheme}"
    if expect.scale_bits is not None and "scale_bits" in r and r["scale_bits"] != expect.scale_bits:
        return "scale-mismatch", f"scale 2^{_show(r['scale_bits'])} in a run of scale 2^{expect.scale_bits}"
    if expect.max_level is not None and "level" in r and not 0 <= r["level"] <= expect.max_level:
        return "scale-mismatch", f"level {_show(r['level'])} outside the run's 0..{expect.max_level} primes"
    return None


def _geometry_problem(r: dict, expect: RowExpect) -> tuple[str, str] | None:
    H, W, C = r["image_height"], r["image_width"], r["image_channels"]
    th, tw, halo = r["tile_h"], r["tile_w"], r["halo"]
    if C not in (1, 3) or H < 1 or W < 1:
        return "bad-geometry", f"an image of {W}x{H}x{C} (hepix images are at least 1x1, with 1 or 3 channels)"
    if H * W > expect.max_pixels:
        return "image-too-large", (f"the row claims a {W}x{H} image, more than the {expect.max_pixels} pixels "
                                   "the owner allows")
    if expect.tile is not None and (th, tw) != tuple(expect.tile):
        return "bad-geometry", f"tile {th}x{tw} in a run of {expect.tile[0]}x{expect.tile[1]} tiles"
    if th < 1 or tw < 1:
        return "bad-geometry", f"tile {th}x{tw}"
    if expect.halo is not None and halo != expect.halo:
        return "bad-geometry", f"halo {halo} in a run with halo {expect.halo}"
    ty, tx, ch = r["tile_y"], r["tile_x"], r["channel"]
    rows, cols = -(-H // th), -(-W // tw)
    if not (0 <= ty < rows and 0 <= tx < cols and 0 <= ch < C):
        return "bad-geometry", f"tile ({ty}, {tx}) channel {ch} outside a {rows}x{cols}-tile, {C}-channel image"
    y, x = ty * th, tx * tw
    h, w = min(th, H - y), min(tw, W - x)
    if (r["y"], r["x"], r["h"], r["w"]) != (y, x, h, w):
        return "bad-geometry", (f"tile ({ty}, {tx}) says it covers {r['h']}x{r['w']} at ({r['y']}, {r['x']}); "
                                f"it covers {h}x{w} at ({y}, {x})")
    index = r["index"]
    if Layout.parse(expect.layout).packed:
        if index != 0:
            return "bad-geometry", f"index {index} in a packed layout (one ciphertext per tile channel)"
    elif not 0 <= index < h * w:
        return "bad-geometry", f"index {index} outside the tile's {h * w} pixels"
    return None


def check_batch(rb: pa.RecordBatch, expect: RowExpect, checker) -> list[tuple[str, str] | None]:
    """The problem of every row of ``rb`` (None for a good one): metadata first, then the checksum,
    then the ciphertext (``checker``: :class:`hecore.checks.CiphertextChecker` or
    :class:`hecore.tfhe.checks.TfheCiphertextChecker`, asked once for the batch; or None to skip it)."""
    names = rb.schema.names
    rb, oversized = bounded_values(rb)
    meta = rb.select([n for n in names if n not in ("ct", "ct_xxh3")]).to_pylist()
    ct = rb.column("ct") if "ct" in names else pa.nulls(rb.num_rows, pa.binary())
    stored = rb.column("ct_xxh3") if "ct_xxh3" in names else pa.nulls(rb.num_rows, pa.int64())
    lengths = pc.binary_length(ct).fill_null(0).to_numpy(zero_copy_only=False)
    computed = ct_checksums(ct.fill_null(b"")).to_numpy(zero_copy_only=False)
    has = stored.is_valid().to_numpy(zero_copy_only=False)
    st = stored.fill_null(0).to_numpy(zero_copy_only=False)
    post_scale = expect.post_scale
    out = []
    unchecked = []                  # rows whose ciphertext is checked next, in one call per batch
    for i, r in enumerate(meta):
        p = oversized[i] or _row_problem(r, expect, post_scale)
        if p is None and lengths[i] == 0:
            p = ("empty-ciphertext", "the ct value is empty")
        if p is None and has[i] and st[i] != computed[i]:
            p = ("checksum-mismatch", f"ct ({int(lengths[i])} bytes) hashes to {int(computed[i])}, the row says "
                                      f"{int(st[i])} ({ALGORITHM}): truncated or corrupted bytes")
        if p is None and checker is not None:
            unchecked.append(i)
        out.append(p)
    if unchecked:
        for i, bad in zip(unchecked, checker.problems([ct[i].as_buffer() for i in unchecked])):
            if bad is not None:
                out[i] = (bad.reason, bad.detail)
    return out


#: The longest string a row's column holds (ids: 64, key fingerprints: 64, labels: a few dozen), and the most
#: ops and the longest op of a row (schemas.manifest.MAX_OPS; an op spec is at most 200 characters).
MAX_VALUE_CHARS = 256
MAX_OPS = 64
MAX_OP_CHARS = 200


def bounded_values(rb: pa.RecordBatch) -> tuple[pa.RecordBatch, list[tuple[str, str] | None]]:
    """``rb`` with every string longer than :data:`MAX_VALUE_CHARS` (and every ops list longer than
    :data:`MAX_OPS` items or holding an op longer than :data:`MAX_OP_CHARS`) set to null, and each such
    row's problem.  Measured with Arrow's kernels on the column buffers, so no such value is ever copied
    into a Python string, a CHECKED row or a reject's detail."""
    import numpy as np

    n = rb.num_rows
    problems: list[tuple[str, str] | None] = [None] * n
    columns = []
    for name, col in zip(rb.schema.names, rb.columns):
        t = col.type
        over = None
        if name not in ("ct", "file") and (pa.types.is_string(t) or pa.types.is_large_string(t)
                                            or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            lengths = pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)
            over = lengths > MAX_VALUE_CHARS
            what = f"more than the {MAX_VALUE_CHARS} characters hepix writes"
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            counts = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
            over = counts > MAX_OPS
            flat = pc.list_flatten(col)
            if len(flat) and (pa.types.is_string(flat.type) or pa.types.is_binary(flat.type)):
                longest = np.zeros(n, dtype=np.int64)
                np.maximum.at(longest, pc.list_parent_indices(col).to_numpy(zero_copy_only=False),
                              pc.binary_length(flat).fill_null(0).to_numpy(zero_copy_only=False))
                over = over | (longest > MAX_OP_CHARS)
            what = f"more than {MAX_OPS} values or a value of more than {MAX_OP_CHARS} characters"
        if over is not None and over.any():
            for i in np.flatnonzero(over):
                problems[i] = problems[i] or ("oversized-value", f"column {name} holds {what}")
            col = pc.if_else(pa.array(over), pa.nulls(n, t), col)
        columns.append(col)
    if not any(problems):
        return rb, problems
    return pa.RecordBatch.from_arrays(columns, schema=rb.schema), problems


def _ciphertext_checker(expect: RowExpect, keys):
    """The checker of the rows' ciphertexts: the keys' (a :class:`hecore.schemes.KeySet`), or without keys the
    keyless one of the expected preset's scheme."""
    if keys is None:
        from hecore.schemes import scheme_for_preset

        return scheme_for_preset(expect.preset).keyless_checker(expect.preset)
    exact = None
    if expect.layout != DIGITS and expect.scale_bits is not None and expect.max_level and _keeps_scale(expect.ops):
        exact = (expect.scale_bits, expect.max_level)
    return keys.checker(fixed_format=expect.fixed_format, exact_scale=exact)


def _keeps_scale(ops: tuple[str, ...]) -> bool:
    """Whether ciphertexts after ``ops`` are still at their stored scale and level: no op multiplies
    (additions and rotations only -- brightness, contrast, watermark, the mean filter's sums)."""
    from hecore.ops.spec import parse_ops

    try:
        return all(getattr(op, "depth", 1) == 0 for op in parse_ops(list(ops)))
    except (ValueError, TypeError):
        return False


def _checked_batch(rb: pa.RecordBatch, problems: list[tuple[str, str] | None]) -> pa.RecordBatch:
    """The CHECKED rows of ``rb``: each row's key, sizes, and why it is bad (or null)."""
    rb = bounded_values(rb)[0]
    cols = {name: rb.column(name) for name in CHECKED.names if name in rb.schema.names}
    cols.update(ct_bytes=pc.binary_length(rb.column("ct")).cast(pa.int64()),
                stored=rb.column("ct_xxh3"),
                reason=pa.array([p[0] if p else None for p in problems], type=pa.string()),
                detail=pa.array([p[1] if p else None for p in problems], type=pa.string()))
    if "file" not in cols:
        cols["file"] = pa.nulls(rb.num_rows, pa.string())
    return pa.RecordBatch.from_arrays([cols[n].cast(CHECKED.field(n).type) for n in CHECKED.names], schema=CHECKED)


def check_partition(batches: Iterator[pa.RecordBatch], *, expect: RowExpect, token: str, broadcast,
                    rebuilds=None) -> Iterator[pa.RecordBatch]:
    """One CHECKED row per ciphertext row: its key, sizes, and why it is bad (or null)."""
    from ..tasks.worker import worker_state

    checker = worker_state(token, broadcast, lambda keys: _ciphertext_checker(expect, keys), rebuilds)
    for rb in batches:
        if rb.num_rows:
            yield _checked_batch(rb, check_batch(rb, expect, checker))


def fused_schema(work_schema: pa.Schema) -> pa.Schema:
    """The rows of a check-and-work pass: each holds either a ``check`` (CHECKED) or a ``work`` row."""
    return pa.schema([("check", pa.struct(list(CHECKED))), ("work", pa.struct(list(work_schema)))])


def _fused_batch(batch: pa.RecordBatch, schema: pa.Schema, side: str) -> pa.RecordBatch:
    """``batch`` as the ``side`` ("check" or "work") of ``schema``'s rows, the other side null."""
    arrays = []
    for f in schema:
        if f.name == side:
            children = [batch.column(c.name).cast(c.type) for c in f.type]
            arrays.append(pa.StructArray.from_arrays(children, fields=list(f.type)))
        else:
            arrays.append(pa.nulls(batch.num_rows, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def check_and_work_partition(batches: Iterator[pa.RecordBatch], *, expect: RowExpect, token: str, broadcast,
                             work, work_schema: pa.Schema, rebuilds=None,
                             problems: list | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`check_partition` and the job's own work in the same task, so every ciphertext is read once.

    ``work`` (a partition function: batches of input rows in, batches of ``work_schema`` out) is given
    the rows that pass their row checks, as they are checked; its output and the CHECKED rows leave the
    task side by side (:func:`fused_schema`).  Whether a row's image is kept is decided later, from all
    the CHECKED rows (:func:`inspect_rows`): the work of an image found bad then is dropped unused.
    ``problems``: ``(file, reason, detail)`` of what the input's reader could not read
    (:func:`jobs.tasks.splits.read_splits`), each a CHECKED row of no image at the end."""
    from collections import deque

    from ..tasks.worker import collect_failures, worker_state

    checker = worker_state(token, broadcast, lambda keys: _ciphertext_checker(expect, keys), rebuilds)
    schema = fused_schema(work_schema)
    checked: deque = deque()
    failures: list = []

    def good_rows():
        for rb in batches:
            if rb.num_rows == 0:
                continue
            problems = check_batch(rb, expect, checker)
            checked.append(_checked_batch(rb, problems))
            good = rb.filter(pa.array([p is None for p in problems]))
            if good.num_rows:
                yield good.drop_columns(["file"]) if "file" in good.schema.names else good

    collect_failures(failures)
    try:
        for out in work(good_rows()):
            while checked:
                yield _fused_batch(_with_failures(checked.popleft(), failures), schema, "check")
            if out.num_rows:
                yield _fused_batch(out, schema, "work")
        while checked:
            yield _fused_batch(_with_failures(checked.popleft(), failures), schema, "check")
        if problems:
            yield _fused_batch(_problem_batch(problems), schema, "check")
    finally:
        collect_failures(None)


def _problem_batch(problems: list) -> pa.RecordBatch:
    """One CHECKED row of no image per ``(file, reason, detail)`` the input's reader met."""
    cols = {n: pa.nulls(len(problems), CHECKED.field(n).type) for n in CHECKED.names}
    for i, name in enumerate(("file", "reason", "detail")):
        cols[name] = pa.array([p[i] for p in problems], type=pa.string())
    return pa.RecordBatch.from_arrays([cols[n] for n in CHECKED.names], schema=CHECKED)


@dataclass(frozen=True)
class SplitSource:
    """The input as the Python workers read it: the checked files' splits, how to reach them, the table's
    schema (:mod:`jobs.tasks.splits`)."""

    splits: list
    access: object                  # jobs.tasks.filesystem.FileAccess
    schema: pa.Schema

    def plan(self, spark, fn, schema):
        """A Spark plan of one task per split running ``fn(ids)`` (``ids``: batches of the ``id`` column of
        ``spark.range``, the split indexes of the task) giving rows of the Spark ``schema``."""
        return spark.range(0, len(self.splits), 1, max(1, len(self.splits))).mapInArrow(fn, schema)

    def rows(self, ids: Iterator[pa.RecordBatch], problems: list) -> Iterator[pa.RecordBatch]:
        """The rows of the splits whose indexes ``ids`` holds (:func:`jobs.tasks.splits.read_splits`)."""
        from ..tasks.splits import read_splits

        mine = [self.splits[i] for rb in ids for i in rb.column("id").to_pylist()]
        return read_splits(mine, access=self.access, schema=self.schema, problems=problems)

    def partition(self, ids: Iterator[pa.RecordBatch], fn, **kwargs) -> Iterator[pa.RecordBatch]:
        """``fn`` (:func:`check_and_work_partition`) over :meth:`rows`, given what could not be read."""
        problems: list = []
        yield from fn(self.rows(ids, problems), problems=problems, **kwargs)


def _with_failures(batch: pa.RecordBatch, failures: list) -> pa.RecordBatch:
    """The CHECKED ``batch`` with the rows the work failed on (:func:`jobs.tasks.worker.work_failed`) given
    the reason ``work-failed``: their images are then left out like those of any bad row."""
    if not failures:
        return batch
    failed = dict(failures)
    keys = zip(*(batch.column(k).to_pylist() for k in KEY))
    why = [failed.get(tuple(k)) for k in keys]
    if not any(why):
        return batch
    reasons = [r if w is None else "work-failed" for r, w in zip(batch.column("reason").to_pylist(), why)]
    details = [d if w is None else f"the work failed on it: {w}"
               for d, w in zip(batch.column("detail").to_pylist(), why)]
    i, j = batch.schema.get_field_index("reason"), batch.schema.get_field_index("detail")
    batch = batch.set_column(i, batch.schema.field(i), pa.array(reasons, type=pa.string()))
    return batch.set_column(j, batch.schema.field(j), pa.array(details, type=pa.string()))


# --- per image ----------------------------------------------------------------------------------------

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


@dataclass
class CheckedInput:
    """A job's input rows after the checks: ``df`` without the images that have a bad row (or, with
    :func:`inspect_rows`' work, that work's output)."""

    df: object
    rejects: list[dict]             # one rejects row per bad ciphertext row or image
    bad_images: set[str]            # ids of the images left out
    bad_image_rows: int             # how many rows those images have
    images: int = 0                 # images seen in the input (good and bad)
    rows: int = 0                   # rows read
    good_ids: list[str] = field(default_factory=list)
    id_less: bool = False           # some rows had no image id (each a rejects row)
    input: object = None            # with inspect_rows' work: the input rows of the good images
    cached: object = None           # the persisted check-and-work output ``df`` reads (inspect_rows' work)

    def release(self) -> None:
        """Drop the persisted work output once the job has used ``df`` (nothing to do without one)."""
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def reject_row(run_id: str, stage: str, source: str, reason: str, detail: str, key: dict | None = None,
               nbytes=None) -> dict:
    key = key or {}
    where = ""
    if key.get("channel") is not None:
        where = f"channel {key['channel']}, tile ({key['tile_y']}, {key['tile_x']}), index {key['index']}: "
    return {"run_id": run_id, "source": source, "stage": stage, "reason": reason,
            "detail": f"image {_shown_id(key['image_id'])}: {where}{detail}" if key.get("image_id") else detail,
            "bytes": nbytes, **{k: key.get(k) for k in KEY}}


def _shown_id(image_id) -> str:
    """An image id as a detail names it: as it is when of hepix's form, else quoted and cut."""
    s = str(image_id)
    return s if _ID.fullmatch(s) else _show(s, 80)


def _file_name(path: str | None) -> str:
    return (path or "").rsplit("/", 1)[-1]


def inspect_rows(spark, df, expect: RowExpect, *, run_id: str, stage: str, keys=None, owner=None,
                 token: str = "rowcheck", work=None, work_schema: pa.Schema | None = None,
                 source: SplitSource | None = None) -> CheckedInput:
    """Check every row of ``df`` (ciphertext rows) and every image; leave out the images with a problem.

    ``keys``: the job's keys (:meth:`hecore.schemes.KeySet.for_checks`: their checker loads each ciphertext);
    None checks against the parameters alone (no key).  ``owner``: the owner map (jobs.runtime.owner.OwnerMap) when the owner runs this.

    Without ``work`` the result's ``df`` is ``df`` without the bad images, for the job to read again.
    With ``work`` (a partition function, rows in, ``work_schema`` rows out) the job's work runs in the
    checking task on the rows that pass their row checks (:func:`check_and_work_partition`): every
    ciphertext is read once, and the result's ``df`` is the work's output for the good images.  That
    output is kept on the executors' local disk, not in memory (decrypt's blocks hold eight bytes per
    pixel value: in memory they would grow the JVM with the corpus), until the caller's
    :meth:`CheckedInput.release`.  With a ``source`` that pass reads the input's rows in the Python
    workers, one task per split (:class:`SplitSource`), instead of through Spark's reader of ``df``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    bc = spark.sparkContext.broadcast(keys)
    token = f"{token}/{bc._jbroadcast.id()}"
    rows = df.withColumn("file", F.input_file_name())
    if work is None:
        checked = (rows.mapInArrow(lambda it: check_partition(it, expect=expect, token=token, broadcast=bc),
                                   spark_schema(CHECKED))
                   .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            return _decide(spark, checked, df, run_id=run_id, stage=stage, owner=owner)
        finally:
            checked.unpersist()
    args = dict(expect=expect, token=token, broadcast=bc, work=work, work_schema=work_schema)
    if source is not None:
        plan = source.plan(spark, lambda it: source.partition(it, check_and_work_partition, **args),
                           spark_schema(fused_schema(work_schema)))
    else:
        plan = rows.mapInArrow(lambda it: check_and_work_partition(it, **args), spark_schema(fused_schema(work_schema)))
    fused = plan.persist(StorageLevel.DISK_ONLY)
    try:
        result = _decide(spark, fused.where(F.col("check").isNotNull()).select("check.*"), df,
                         run_id=run_id, stage=stage, owner=owner)
    except BaseException:
        fused.unpersist()
        raise
    done = fused.where(F.col("work").isNotNull()).select("work.*")
    # a work output without image ids (the files the workers wrote) is the caller's to clean of bad images
    result.input, result.df = result.df, (_keep(spark, done, result) if "image_id" in work_schema.names else done)
    result.cached = fused
    return result


def image_summaries(checked) -> list[ImageSummary]:
    """One :class:`ImageSummary` per image id of the CHECKED rows ``checked`` (rows without an id under
    None), aggregated by Spark without the bytes: what :func:`image_problems` judges."""
    from pyspark.sql import functions as F

    rows = checked.groupBy("image_id").agg(
        F.count("*").alias("n"), F.countDistinct("channel", "tile_y", "tile_x", "index").alias("keys"),
        F.first("layout").alias("layout"), F.first("file").alias("file"), F.count("reason").alias("bad"),
        *[agg(c).alias(f"{name}_{c}") for c in ("image_height", "image_width", "image_channels", "tile_h",
                                                  "tile_w") for name, agg in (("lo", F.min), ("hi", F.max))]
    ).collect()
    return [ImageSummary(image_id=s["image_id"], rows=s["n"], keys=s["keys"], layout=s["layout"],
                         heights=(s["lo_image_height"], s["hi_image_height"]),
                         widths=(s["lo_image_width"], s["hi_image_width"]),
                         channels=(s["lo_image_channels"], s["hi_image_channels"]),
                         tiles=(s["lo_tile_h"], s["hi_tile_h"], s["lo_tile_w"], s["hi_tile_w"]), file=s["file"],
                         bad=s["bad"])
            for s in rows]


def _decide(spark, checked, df, *, run_id: str, stage: str, owner) -> CheckedInput:
    """The rejects and the images left out, from the CHECKED rows ``checked``; ``df`` without those images."""

    summaries = image_summaries(checked)
    # ranking the bad rows is a job of its own: only when there are some
    rejects, bad = first_rejects(checked, run_id=run_id, stage=stage) if any(s.bad for s in summaries) else ([], set())
    rows_of = {}
    for summary in summaries:
        rows_of[summary.image_id] = summary.rows
        if summary.image_id is None or summary.image_id in bad:
            continue
        p = image_problems(summary, owner)
        if p is not None:
            bad.add(summary.image_id)
            rejects.append(reject_row(run_id, stage, _file_name(summary.file), p[0], p[1],
                                      {"image_id": summary.image_id}))
    good = sorted(i for i in rows_of if i is not None and i not in bad)
    total = sum(rows_of.values())
    if None in rows_of:            # rows without an id belong to no image: they count as read, not as images
        bad_rows = sum(n for i, n in rows_of.items() if i in bad or i is None)
    else:
        bad_rows = sum(n for i, n in rows_of.items() if i in bad)
    result = CheckedInput(df, rejects, bad, bad_rows, images=len([i for i in rows_of if i is not None]),
                          rows=total, good_ids=good, id_less=None in rows_of)
    result.df = _keep(spark, df, result)
    return result


#: The bad rows of one image the driver keeps as rejects rows; the rest are counted in one more row.
REJECTS_PER_IMAGE = 5


class RejectLog:
    """Rejects rows appended to ``rows`` as a job streams its input: the first :data:`REJECTS_PER_IMAGE` of
    each image and at most :data:`MAX_REJECTS` in all; :meth:`close` adds one row counting the others."""

    MAX_REJECTS = 10_000

    def __init__(self, rows: list[dict]):
        self.rows = rows
        self.per_image: dict = {}
        self.dropped = 0

    def add(self, row: dict) -> None:
        key = row.get("image_id")
        n = self.per_image.get(key, 0)
        if n >= REJECTS_PER_IMAGE or len(self.rows) >= self.MAX_REJECTS:
            self.dropped += 1
            return
        if len(self.per_image) < self.MAX_REJECTS:
            self.per_image[key] = n + 1
        self.rows.append(row)

    def close(self, run_id: str, stage: str) -> None:
        if self.dropped:
            self.rows.append(reject_row(run_id, stage, "", "more-rejects",
                                        f"{self.dropped} more rows were rejected (not listed one by one)"))
            self.dropped = 0


def first_rejects(checked, *, run_id: str, stage: str) -> tuple[list[dict], set[str]]:
    """The rejects rows of the bad CHECKED rows of ``checked`` -- the first :data:`REJECTS_PER_IMAGE` of each
    image (rows without an id: of all of them), then one row (of the last one's reason) counting the others
    --, and the bad image ids.
    Spark ranks and counts; the driver never holds every bad row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    bad_rows = checked.where(F.col("reason").isNotNull())
    order = Window.partitionBy("image_id").orderBy("channel", "tile_y", "tile_x", "index", "reason")
    ranked = bad_rows.withColumn("_rank", F.row_number().over(order)) \
        .withColumn("_count", F.count(F.lit(1)).over(Window.partitionBy("image_id")))
    rejects: list[dict] = []
    bad: set[str] = set()
    for r in ranked.where(F.col("_rank") <= REJECTS_PER_IMAGE).orderBy("image_id", "_rank").toLocalIterator():
        key = {k: r[k] for k in KEY}
        rejects.append(reject_row(run_id, stage, _file_name(r["file"]), r["reason"], r["detail"], key,
                                  r["ct_bytes"]))
        if r["image_id"] is not None:
            bad.add(r["image_id"])
        if r["_rank"] == REJECTS_PER_IMAGE and r["_count"] > REJECTS_PER_IMAGE:
            rejects.append(reject_row(run_id, stage, _file_name(r["file"]), r["reason"],
                                      f"{r['_count'] - REJECTS_PER_IMAGE} more rows of it were rejected (not "
                                      "listed one by one)", {"image_id": r["image_id"]}))
    return rejects, bad


def _keep(spark, df, checked: CheckedInput):
    """The rows of ``df`` of the good images of ``checked`` (in ``df``'s column order)."""
    from pyspark.sql import functions as F

    columns = df.columns
    if checked.bad_images:
        good = checked.good_ids
        keep = spark.createDataFrame([(i,) for i in good] or [("",)], "image_id string")
        # a join reorders columns; the stages' Arrow functions return batches by position: restore the order
        return (df.join(F.broadcast(keep), "image_id", "left_semi") if good else df.limit(0)).select(*columns)
    if checked.id_less:
        return df.where(F.col("image_id").isNotNull())
    return df
