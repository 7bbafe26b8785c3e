"""``infer:MODEL`` in the Python workers: the model run on every batch of encrypted digits, and the head
outputs decrypted on the owner's side -- no ciphertext byte through the JVM.

A model needs every ciphertext of its batch at once, and a batch's rows may lie in several files: the
checking pass's work (:func:`bucket_partition`) sends each good row to its batch's bucket
(:mod:`tasks.exchange`); :func:`infer_partition` then reads each bucket's rows, checks that each batch
the driver kept is a batch of the run's layout (:func:`batch_problem`), runs the model on it and writes
the head outputs itself.  :func:`decrypt_partition` checks and decrypts head outputs one row at a time
into small rows (:data:`OPENED`) for the driver, which judges each batch.

The checks of a batch's shape and of a head-output row (:func:`shape_problem`, :func:`output_problem`)
live here, for the workers, and the driver runs the same ones (jobs/infer.py).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS

from .exchange import EXCHANGED, bucket_of, read_bucket, write_buckets
from .filesystem import FileAccess
from .worker import worker_state

#: A combining task's report: its file (WRITTEN's columns), or a batch it did not run (``batch``, the
#: rejects reason and detail).
INFERRED = pa.schema(list(WRITTEN) + [("batch", pa.string()), ("reason", pa.string()), ("detail", pa.string())])

#: The columns of a head-output row the owner's checks read (CIPHERTEXTS without ``ct``).
_OUTPUT_COLUMNS = ("run_id", "image_id", "key_fingerprint", "post_scale", "h", "y", "tile_h", "tile_w", "index",
                   "process_seconds")

#: One decrypted (or refused) head output: the row's checked columns, where it was read, its scores in the
#: clear (``score_rows`` rows of them, row-major; null unless decrypted) and what refused it: ``stage`` "ct"
#: (the keys' checker) or "file" (its file could not be read: no row).
OPENED = pa.schema([pa.field(n, CIPHERTEXTS.field(n).type) for n in _OUTPUT_COLUMNS] + [
    ("file", pa.string()), ("scores", pa.list_(pa.float64())), ("score_rows", pa.int32()),
    ("stage", pa.string()), ("reason", pa.string()), ("detail", pa.string())])


# --- what a batch and a head output must be -------------------------------------------------------------

def batch_number(image_id) -> int | None:
    """The number of a digits batch from its id (``digits-<task>-<number>``), or None."""
    tail = image_id.rpartition("-")[2] if isinstance(image_id, str) else ""
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) <= 9 else None


def shape_problem(layout, pack: bool, slots: int, number: int, n, start, block, cts) -> str | None:
    """Why batch ``number`` whose rows say ``n`` samples from ``start``, ``block`` slots per pixel position
    (``tile_h``) and ``cts`` ciphertexts (``tile_w``) is not a batch of the layout the run's manifest
    names (``infer_layout``, ``pack``), as encrypt-digits lays them out; or None.  The manifest is
    untrusted: a layout that does not fit the ciphertexts is refused here, before it indexes anything."""
    from hecore.infer import encrypted
    from hecore.infer.models import PIXELS

    if any(not isinstance(v, int) for v in (n, start, block, cts)):
        return "h, y, tile_h or tile_w is missing"
    said = f"{n} samples from {start}, block {block}, {cts} ciphertexts"
    if layout is not None and layout.per_sample:
        if (n, start, block, cts) != (1, number, 0, 1):
            return (f"the run's layout {layout} holds one sample per batch (batch {number}: sample {number}, block "
                    f"0, one ciphertext); its rows say {said}")
        return None
    if start != number * slots or not 1 <= n <= slots:
        return f"batch {number} of {slots}-slot batches starts at sample {number * slots}; its rows say {said}"
    want = (layout.block or slots) if layout is not None else encrypted.block_for(n, slots, pack)
    need = -(-PIXELS // (slots // want)) if 1 <= want <= slots else -1
    if (block, cts) != (want, need):
        name = str(layout) if layout is not None else ("packed" if pack else "pixel-per-ciphertext")
        return f"the run's layout {name} has block {want} and {need} ciphertexts per batch; its rows say {said}"
    return None


def batch_problem(image_id, rows: list[dict], layout, pack: bool, slots: int) -> str | None:
    """Why the checked digits rows ``rows`` of batch ``image_id`` do not make a batch of the run's layout:
    one row per ciphertext index 0..tile_w-1, all saying the same samples, block and ciphertexts
    (:func:`shape_problem`); or None."""
    columns = ("h", "y", "tile_h", "tile_w")
    number = batch_number(image_id)
    lows = [min(r[c] for r in rows) for c in columns]
    if number is None:
        return f"batch id {str(image_id)[:80]!r} does not end in its number"
    if lows != [max(r[c] for r in rows) for c in columns]:
        return "its rows disagree on the batch's samples, block or ciphertexts"
    indexes = [r["index"] for r in rows]
    shape = (len(rows), len(set(indexes)), min(indexes), max(indexes))
    if shape != (lows[3], lows[3], 0, lows[3] - 1):
        return f"{shape[0]} rows with {shape[1]} indexes {shape[2]}..{shape[3]}, for {lows[3]} ciphertexts"
    return shape_problem(layout, pack, slots, number, *lows)


def output_problem(r: dict, *, fingerprint: str, task: str, most_batches: int) -> tuple[str, str] | None:
    """Why one head-output row (without its bytes) is not one this run made, or None."""
    from .distances import valid_id

    iid = r["image_id"]
    if not valid_id(iid) or not iid.startswith(f"digits-{task}-") \
            or not iid.rpartition("-")[2].isdigit() or not 0 <= int(iid.rpartition("-")[2]) < most_batches:
        return "bad-image-id", f"batch id {str(iid)[:80]!r} is not one of the {most_batches} batches of this task"
    if r["key_fingerprint"] != fingerprint:
        return "key-mismatch", f"made with key {str(r['key_fingerprint'])[:16]}, this key is {fingerprint[:16]}"
    ps = r["post_scale"]
    if ps is None or not math.isfinite(ps) or not 1e-12 <= abs(ps) <= 1.0 or r["h"] is None or r["y"] is None \
            or r["index"] is None:
        return "malformed-row", "post_scale (finite, 1e-12..1), h, y or index is missing or out of range"
    return None


# --- the reading task: rows to their batch's bucket -----------------------------------------------------

def bucket_partition(batches: Iterator[pa.RecordBatch], *, buckets: int, directory: str,
                     attempt: Callable[[], tuple[int, int]], access: FileAccess = FileAccess(),
                     tasks=None) -> Iterator[pa.RecordBatch]:
    """The good digits rows of a task, each to the bucket of its batch, written as the task's exchanged file
    in ``directory``: its EXCHANGED report (none without rows)."""
    if tasks is not None:
        tasks.add([os.getpid()])
    parts = [rb.select(CIPHERTEXTS.names).cast(CIPHERTEXTS) for rb in batches if rb.num_rows]
    if not parts:
        return
    table = pa.Table.from_batches(parts, schema=CIPHERTEXTS)
    report = write_buckets(table, [bucket_of(i, buckets) for i in table.column("image_id").to_pylist()],
                           directory=directory, attempt=attempt, access=access)
    if report is not None:
        yield pa.RecordBatch.from_pylist([report], schema=EXCHANGED)


# --- the combining task: the model on whole batches -----------------------------------------------------

@dataclass(frozen=True)
class InferPlan:
    """What the combining tasks do (broadcast once): task ``i`` runs the model on the batches ``keep[i]``
    whose rows ``parts[i]`` holds (:func:`tasks.exchange.bucket_parts` of its bucket)."""

    parts: list                                 # per task: [(file, bytes, row group, rows)]
    keep: list                                  # per task: frozenset of batch ids
    spec: str
    run_id: str
    layout: str | None                          # the run's infer_layout (None: SIMD batches)
    pack: bool
    slots: int


def infer_partition(ids: Iterator[pa.RecordBatch], *, plan_broadcast, token: str, broadcast, model_broadcast,
                    exchanged: str, directory: str, attempt: Callable[[], tuple[int, int]],
                    access: FileAccess = FileAccess(), rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """The combining tasks whose indexes ``ids`` holds: every kept batch of their buckets checked
    (:func:`batch_problem`: a bad one is an INFERRED row naming it) and run through the model, one row per
    head output (one sample per ciphertext layouts: one row holding all of the sample's outputs), written
    as one Parquet file of CIPHERTEXTS in ``directory`` (its INFERRED row)."""
    from hecore.infer import layouts

    from .files import rows_to_file
    from .process import build_evaluator

    plan: InferPlan = plan_broadcast.value
    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    layout = layouts.parse_layout(plan.layout) if plan.layout else None
    refused: list[dict] = []
    batches: dict[str, list[dict]] = {}
    for rb in ids:
        for i in rb.column("id").to_pylist():
            keep = plan.keep[i]
            for table in read_bucket(plan.parts[i], directory=exchanged, schema=CIPHERTEXTS, access=access):
                for r in table.to_pylist():
                    if r["image_id"] in keep:
                        batches.setdefault(r["image_id"], []).append(r)

    def outputs():
        for batch_id in sorted(batches):
            rows = batches.pop(batch_id)
            why = batch_problem(batch_id, rows, layout, plan.pack, plan.slots)
            if why is not None:
                refused.append({"batch": batch_id, "reason": "bad-batch", "detail": why})
                continue
            yield run_model(ev, model_broadcast.value, sorted(rows, key=lambda r: r["index"]), spec=plan.spec,
                            run_id=plan.run_id, layout=layout)

    out = [{**w, "batch": None, "reason": None, "detail": None}
           for rb in rows_to_file(outputs(), directory=directory, attempt=attempt, access=access)
           for w in rb.to_pylist()]
    yield pa.RecordBatch.from_pylist(out + [{"file": None, "rows": 0, "bytes": 0, "xxh3_xor": 0, "ct_bytes": 0, **r}
                                            for r in refused], schema=INFERRED)


def run_model(ev, model, rows: list[dict], *, spec: str, run_id: str, layout=None) -> pa.RecordBatch:
    """One batch's ciphertext rows (sorted by index) -> its head outputs as CIPHERTEXTS rows: the first row's
    labels, the op added, BFV's quantisation in ``post_scale`` and each output's checksum."""
    from hecore.infer import encrypted, layouts
    from hecore.infer.arithmetic import arithmetic

    from .checksums import ct_checksums

    first = rows[0]
    t0 = time.perf_counter()
    cts = [ev.load(r["ct"]) for r in rows]
    q = arithmetic(ev.params).prepared(model)
    if layout is None:
        outs = encrypted.infer_encrypted(ev, model, cts, quantised=q, block=first["tile_h"])
    else:
        outs = layouts.infer(ev, model, layout, cts, quantised=q)
    secs = time.perf_counter() - t0
    data = [ev.dump(c) for c in outs]
    sums = ct_checksums(pa.array(data, type=pa.binary())).to_pylist()
    out = []
    for i, (c, raw) in enumerate(zip(outs, data)):
        r = dict(first)
        r.update(run_id=run_id, index=i, ops=list(first["ops"]) + [spec],
                 post_scale=(1.0 / q.divisor) if q else 1.0, level=ev.level(c),
                 process_seconds=secs / len(outs), ct=raw, ct_xxh3=sums[i])
        out.append(r)
    return pa.RecordBatch.from_pylist(out, schema=CIPHERTEXTS)


# --- the owner's side: head outputs decrypted -----------------------------------------------------------

@dataclass(frozen=True)
class OutputExpect:
    """What the owner's workers need to check and decrypt a head output of one inference run."""

    fingerprint: str
    task: str                                   # the digits task (01 | all)
    most_batches: int
    layout: str | None                          # the run's infer_layout, when it holds one sample per ciphertext
    classes: int


def decrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, expect: OutputExpect,
                      problems: list | None = None, rebuilds=None, tasks=None, opener=None) -> Iterator[pa.RecordBatch]:
    """Head-output rows (with a ``file`` column) -> OPENED rows.  Each row passes :func:`output_problem`
    before its ciphertext goes to the keys' checker, and the checker before it is decrypted: into its
    ``h`` samples' scores (SIMD batches, when ``h`` is within the slots; else the driver's batch check
    refuses it) or, one sample per ciphertext, the sample's ``classes`` scores.  ``problems``: what the
    reader could not read (:func:`tasks.splits.read_splits`), a row each.  ``opener``: the decryption
    context and checker already built (the driver running this itself), else the worker's."""
    from hecore.infer import layouts

    from .match import build_opener

    ctx, checker = opener if opener is not None else worker_state(token, broadcast, build_opener, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    layout = layouts.parse_layout(expect.layout) if expect.layout else None
    slots = ctx.params.slots
    for rb in batches:
        if rb.num_rows == 0:
            continue
        meta = rb.select([n for n in _OUTPUT_COLUMNS + ("file",) if n in rb.schema.names]).to_pylist()
        ct = rb.column("ct")
        out = []
        for i, r in enumerate(meta):
            if output_problem(r, fingerprint=expect.fingerprint, task=expect.task,
                              most_batches=expect.most_batches) is None:
                raw = ct[i].as_buffer() if ct[i].is_valid else b""
                p = checker.problem(raw)
                if p is not None:
                    r.update(stage="ct", reason=p.reason, detail=p.detail)
                elif layout is not None:
                    s = layouts.decrypt(ctx, layout, [raw], 1, classes=expect.classes, binary=False) * r["post_scale"]
                    r.update(scores=s.reshape(-1).tolist(), score_rows=s.shape[0] if s.ndim == 2 else -1)
                elif isinstance(r["h"], int) and 1 <= r["h"] <= slots:
                    r.update(scores=(ctx.decrypt_slots(raw, r["h"]) * r["post_scale"]).tolist(), score_rows=r["h"])
            out.append(r)
        yield pa.RecordBatch.from_pylist(out, schema=OPENED)
    if problems:
        yield pa.RecordBatch.from_pylist([{"file": f, "stage": "file", "reason": reason, "detail": detail}
                                          for f, reason, detail in problems], schema=OPENED)
