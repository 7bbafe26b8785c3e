"""The checks every ciphertext row passes before a job uses it, one row at a time, in the Python workers.

Rows come from a directory a cluster held, so every value is checked before it reaches SEAL, sizes an
allocation or names anything: the row's checksum (storage faults), its key fingerprint (the job's key),
layout, parameters, ops and ``post_scale`` (those of the run), its image id (a strict pattern: ids
never become file names unchecked), its geometry (tile size and halo of the run, position inside the
image, channel and index in range, the image no larger than the owner's pixel limit) and its
ciphertext bytes (the checker of the keys' scheme, :meth:`hecore.schemes.KeySet.checker`: size, and the library's own
validation).

Each row becomes a CHECKED row: its key, sizes, and why it is bad (or null) (:func:`check_partition`).
``decrypt`` and ``process`` do their own work in the same task as the checks
(:func:`check_and_work_partition`), so that they read every ciphertext once -- and SEAL loads it once:
the work takes each good row's metadata as the checks converted it and its ciphertext as the checker
loaded it (:func:`inspect_batch`, tasks.handoff) --; ``audit`` runs the same row function with pyarrow
(:func:`check_batch`).  Which images are then left out, and the rejects rows, the driver decides from the
CHECKED rows, or from what each task summed them up to (tasks.summaries).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hecore.images import DEFAULT_MAX_PIXELS
from hecore.layouts import Layout
from schemas.stages import CHECKED
from schemas.tables import IMAGE_ID

from . import handoff
from .checksums import ALGORITHM, ct_checksums

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
            from hecore.ops.spec import recorded_finish, run_kind

            return float(recorded_finish([o for o in self.ops if run_kind(o) == "image"], self.preset).post_scale)
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
        return "layout-mismatch", f"layout {shown(r['layout'])} in a {expect.layout} run"
    if r["preset"] != expect.preset:
        return "parameters-mismatch", f"preset {shown(r['preset'])} in a run of {expect.preset}"
    if expect.check_ops and list(r["ops"]) != list(expect.ops):
        return "ops-mismatch", (f"ops {shown('|'.join(r['ops']) or 'none')} in a run of "
                                f"{shown('|'.join(expect.ops) or 'none')}")
    labels = _label_problem(r, expect)
    if labels is not None:
        return labels
    ps = r["post_scale"]
    if not (isinstance(ps, float) and math.isfinite(ps) and ps != 0.0):
        return "bad-post-scale", f"post_scale {shown(ps)} is not a finite non-zero number"
    if post_scale is not None and abs(ps - post_scale) > 1e-9 * abs(post_scale):
        return "ops-mismatch", f"post_scale {ps!r} is not the {post_scale!r} of its ops"
    if expect.layout == DIGITS:
        return None
    return _geometry_problem(r, expect)


def shown(v, limit: int = 60) -> str:
    """``v`` as a reject detail echoes it: its repr, cut to ``limit`` characters."""
    s = repr(v)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def shown_id(image_id) -> str:
    """An image id as a detail names it: as it is when of hepix's form, else quoted and cut."""
    s = str(image_id)
    return s if _ID.fullmatch(s) else shown(s, 80)


def _label_problem(r: dict, expect: RowExpect) -> tuple[str, str] | None:
    """Why the row's labels (security, strategy, scheme, scale, level) are not those of the run, or None."""
    for k in ("security", "strategy", "scheme", "level", "scale_bits"):
        if k in r and r[k] is None:
            return "malformed-row", f"the row has no {k}"
    if expect.security is not None and "security" in r and r["security"] != expect.security:
        return "label-mismatch", f"security {shown(r['security'])} in a run labelled {expect.security}"
    if expect.strategies is not None and "strategy" in r and r["strategy"] not in expect.strategies:
        return "label-mismatch", (f"strategy {shown(r['strategy'])} in a run of "
                                  f"{' or '.join(sorted(expect.strategies))}")
    if expect.scheme is not None and "scheme" in r and r["scheme"] != expect.scheme:
        return "parameters-mismatch", f"scheme {shown(r['scheme'])} in a run of {expect.scheme}"
    if expect.scale_bits is not None and "scale_bits" in r and r["scale_bits"] != expect.scale_bits:
        return "scale-mismatch", f"scale 2^{shown(r['scale_bits'])} in a run of scale 2^{expect.scale_bits}"
    if expect.max_level is not None and "level" in r and not 0 <= r["level"] <= expect.max_level:
        return "scale-mismatch", f"level {shown(r['level'])} outside the run's 0..{expect.max_level} primes"
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
    then the ciphertext (``checker``: :class:`hecore.seal.checks.CiphertextChecker` or
    :class:`hecore.tfhe.checks.TfheCiphertextChecker`, asked once for the batch; or None to skip it)."""
    return inspect_batch(rb, expect, checker).problems


@dataclass
class Inspected:
    """One batch after its row checks (:func:`inspect_batch`)."""

    rb: pa.RecordBatch                      # the batch, its oversized values nulled (bounded_values)
    rows: list[dict]                        # each row's metadata as Python values (no ``ct``, ``ct_xxh3``)
    problems: list                          # each row's (reason, detail), or None for a good one
    loaded: list | None = None              # each good row's ciphertext as the checker loaded it (load=True)


def inspect_batch(rb: pa.RecordBatch, expect: RowExpect, checker, *, load: bool = False) -> Inspected:
    """:func:`check_batch`, keeping what the checks made on the way: the rows' metadata converted to Python
    values and, with ``load`` (and a checker that loads, :meth:`hecore.seal.checks.CiphertextChecker.checked_all`),
    each good row's loaded ciphertext -- what the job's work in the same task takes instead of converting
    and loading again (tasks.handoff)."""
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
    loaded = None
    if unchecked:
        buffers = [ct[i].as_buffer() for i in unchecked]
        if load and hasattr(checker, "checked_all"):
            loaded = [None] * rb.num_rows
            for i, (bad, c) in zip(unchecked, checker.checked_all(buffers)):
                if bad is not None:
                    out[i] = (bad.reason, bad.detail)
                else:
                    loaded[i] = c
        else:
            for i, bad in zip(unchecked, checker.problems(buffers)):
                if bad is not None:
                    out[i] = (bad.reason, bad.detail)
    return Inspected(rb, meta, out, loaded)


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


def checker_builder(expect: RowExpect):
    """What builds a worker's checker from the broadcast keys (as :func:`check_and_work_partition` does),
    for a warm-up that builds it before the job's tasks ask (jobs/runtime/warmup.py)."""
    import functools

    return functools.partial(_ciphertext_checker, expect)


def _keeps_scale(ops: tuple[str, ...]) -> bool:
    """Whether ciphertexts after ``ops`` are still at their stored scale and level: no op multiplies
    (additions and rotations only -- brightness, contrast, watermark, the mean filter's sums)."""
    from hecore.ops.spec import parse_ops

    try:
        return all(getattr(op, "depth", 1) == 0 for op in parse_ops(list(ops)))
    except (ValueError, TypeError):
        return False


def _checked_batch(rb: pa.RecordBatch, problems: list[tuple[str, str] | None], *,
                   bounded: bool = False) -> pa.RecordBatch:
    """The CHECKED rows of ``rb`` (``bounded``: its oversized values already nulled, :class:`Inspected`'s
    ``rb``): each row's key, sizes, and why it is bad (or null)."""
    if not bounded:
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
    from .worker import worker_state

    checker = worker_state(token, broadcast, lambda keys: _ciphertext_checker(expect, keys), rebuilds)
    for rb in batches:
        if rb.num_rows:
            yield _checked_batch(rb, check_batch(rb, expect, checker))


def fused_schema(work_schema: pa.Schema) -> pa.Schema:
    """The rows of a check-and-work pass: each holds either a ``check`` (CHECKED) or a ``work`` row."""
    return pa.schema([("check", pa.struct(list(CHECKED))), ("work", pa.struct(list(work_schema)))])


def side_batch(batch: pa.RecordBatch, schema: pa.Schema, side: str) -> pa.RecordBatch:
    """``batch`` as the ``side`` of ``schema``'s rows (a struct column each: "check" or "work" here, and the
    summaries' sides in tasks.summaries), the other sides null."""
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
                             problems: list | None = None, checked_to: list | None = None
                             ) -> Iterator[pa.RecordBatch]:
    """:func:`check_partition` and the job's own work in the same task, so every ciphertext is read once.

    ``work`` (a partition function: batches of input rows in, batches of ``work_schema`` out) is given
    the rows that pass their row checks, as they are checked -- with their metadata as the checks converted
    it and their ciphertexts as the checker loaded them (tasks.handoff) --; its output and the CHECKED rows
    leave the task side by side (:func:`fused_schema`).  Whether a row's image is kept is decided later, on
    the driver, from all the CHECKED rows: the work of an image found bad then is dropped unused.
    ``problems``: ``(file, reason, detail)`` of what the input's reader could not read
    (:func:`tasks.splits.read_splits`), each a CHECKED row of no image at the end.  With ``checked_to`` (a
    list) the CHECKED batches are appended to it when the input is done, and the work's batches are given
    as they are (``work_schema``), not fused (:func:`tasks.summaries.checked_and_summarized`)."""
    from collections import deque

    from .worker import collect_failures, worker_state

    checker = worker_state(token, broadcast, lambda keys: _ciphertext_checker(expect, keys), rebuilds)
    schema = fused_schema(work_schema)
    checked: deque = deque()
    failures: list = []
    context = getattr(checker, "context", None)

    def good_rows():
        for rb in batches:
            if rb.num_rows == 0:
                continue
            seen = inspect_batch(rb, expect, checker, load=True)
            checked.append(_checked_batch(seen.rb, seen.problems, bounded=True))
            keep = [i for i, p in enumerate(seen.problems) if p is None]
            if not keep:
                continue
            good = rb if len(keep) == rb.num_rows else rb.take(pa.array(keep, type=pa.int64()))
            if "file" in good.schema.names:
                good = good.drop_columns(["file"])
            # the work takes the rows' metadata and loaded ciphertexts instead of making them again
            handoff.give(good, [seen.rows[i] for i in keep],
                         None if seen.loaded is None else [seen.loaded[i] for i in keep], context)
            yield good

    collect_failures(failures)
    try:
        if checked_to is not None:
            for out in work(good_rows()):
                if out.num_rows:
                    yield out
            checked_to.extend(_with_failures(b, failures) for b in checked)
            if problems:
                checked_to.append(_problem_batch(problems))
            return
        for out in work(good_rows()):
            while checked:
                yield side_batch(_with_failures(checked.popleft(), failures), schema, "check")
            if out.num_rows:
                yield side_batch(out, schema, "work")
        while checked:
            yield side_batch(_with_failures(checked.popleft(), failures), schema, "check")
        if problems:
            yield side_batch(_problem_batch(problems), schema, "check")
    finally:
        collect_failures(None)
        handoff.clear()


def _problem_batch(problems: list) -> pa.RecordBatch:
    """One CHECKED row of no image per ``(file, reason, detail)`` the input's reader met."""
    cols = {n: pa.nulls(len(problems), CHECKED.field(n).type) for n in CHECKED.names}
    for i, name in enumerate(("file", "reason", "detail")):
        cols[name] = pa.array([p[i] for p in problems], type=pa.string())
    return pa.RecordBatch.from_arrays([cols[n] for n in CHECKED.names], schema=CHECKED)


def _with_failures(batch: pa.RecordBatch, failures: list) -> pa.RecordBatch:
    """The CHECKED ``batch`` with the rows the work failed on (:func:`tasks.worker.work_failed`) given
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
