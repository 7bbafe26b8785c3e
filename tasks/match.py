"""``match:QUERY`` in the Python workers: the query's rows found, every image's encrypted distance to it
computed and written, and the distances decrypted on the owner's side -- no ciphertext byte through the
JVM.

* :func:`locate_partition` reads the ``image_id`` column alone of a task's splits and says which splits
  hold the query's rows; the driver reads those rows itself, checks them and broadcasts them once
  (:class:`Query`).
* :func:`partials_partition` is the work of the checking pass (:func:`tasks.rowchecks.check_and_work_partition`):
  for each good row of an image of the query's size, the pair's partial distance per metric
  (:func:`hecore.ops.matching.pair_partial`) against the query's ciphertext of the same tile, channel and
  index, summed per image in the task; the sums go to the task's exchanged file (:mod:`tasks.exchange`),
  by image, with one report row per image it saw (its size) and one for the file (:data:`MAPPED`).
* :func:`sum_partition` adds the partial sums of each image of its bucket -- of the images the driver
  kept -- into one encrypted distance per metric and writes them (ENCRYPTED_DISTANCES) itself.
* :func:`decrypt_partition` (the owner's job) checks every encrypted distance and decrypts the good ones
  into one small row each (:data:`OPENED`), which the driver judges (:mod:`tasks.distances`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hecore.layouts import Layout
from schemas.stages import WRITTEN
from schemas.tables import ENCRYPTED_DISTANCES

from .exchange import EXCHANGED, bucket_of, read_bucket, write_buckets
from .filesystem import FileAccess
from .splits import Split, read_split
from .worker import work_failed, worker_state

#: The key of a ciphertext within its image (what pairs an image's ciphertext with the query's).
PAIR_KEY = ("tile_y", "tile_x", "channel", "index")

#: What :func:`locate_partition` reports: a split (its index in the driver's list) holding ``rows`` rows of
#: the query, or (``split`` -1) up to three image ids the task saw, sorted (for an error naming a few).
LOCATED = pa.schema([("split", pa.int64()), ("rows", pa.int64()), ("ids", pa.list_(pa.string()))])

#: The partial sums a reading task sends on: one row per image and metric it holds pairs of.
PARTIALS = pa.schema([
    ("image_id", pa.string()), ("metric", pa.string()), ("pairs", pa.int64()), ("seconds", pa.float64()),
    ("layout", pa.string()), ("scheme", pa.string()), ("preset", pa.string()), ("key_fingerprint", pa.string()),
    ("ops", pa.list_(pa.string())), ("post_scale", pa.float64()), ("ct", pa.binary()),
])

#: The reading task's report: one row per image whose good rows it saw (``image``, its size, the pairs it
#: summed), and one (``image`` null) for its exchanged file.
MAPPED = pa.schema([("image", pa.string()), ("image_height", pa.int32()), ("image_width", pa.int32()),
                    ("image_channels", pa.int32()), ("pairs", pa.int64())] + list(EXCHANGED))

#: One decrypted (or refused) encrypted distance: the row without its ciphertext, where it was read, the
#: distance (null unless decrypted) and what refused it: ``stage`` "ct" (the keys' checker) or "file"
#: (its file could not be read: no row).
OPENED = pa.schema([pa.field(f.name, f.type) for f in ENCRYPTED_DISTANCES if f.name != "ct"] + [
    ("file", pa.string()), ("distance", pa.float64()), ("decrypt_seconds", pa.float64()),
    ("stage", pa.string()), ("reason", pa.string()), ("detail", pa.string())])

#: Loaded query ciphertexts a worker keeps (bytes of their serialized form); past it each is loaded per pair.
QUERY_CACHE_BYTES = 64 * 2**20


# --- the query ------------------------------------------------------------------------------------------

def locate_partition(ids: Iterator[pa.RecordBatch], *, splits: list[Split], tasks: tuple, access: FileAccess,
                     query: str) -> Iterator[pa.RecordBatch]:
    """For the tasks whose indexes ``ids`` holds (batches of an ``id`` column), which of their splits hold
    rows of the image ``query`` (LOCATED rows), reading the ``image_id`` column alone.  What cannot be
    read is left for the checking pass to report."""
    schema = pa.schema([("image_id", pa.string())])
    found, some = [], set()
    for rb in ids:
        for i in rb.column("id").to_pylist():
            for j in (tasks[i] if tasks else (i,)):
                rows = 0
                for batch in read_split(splits[j], access=access, schema=schema, problems=[]):
                    col = batch.column("image_id")
                    rows += int(pc.sum(pc.equal(col, query)).as_py() or 0)
                    ids = col.unique()
                    ids = ids.filter(pc.less_equal(pc.binary_length(ids), 64))
                    some = set(sorted(some | set(ids.drop_null().to_pylist()))[:3])
                if rows:
                    found.append({"split": j, "rows": rows, "ids": None})
    found.append({"split": -1, "rows": 0, "ids": sorted(some)})
    yield pa.RecordBatch.from_pylist(found, schema=LOCATED)


@dataclass(frozen=True)
class Query:
    """The query image as the workers get it (broadcast once): its id, size, and its checked ciphertexts by
    :data:`PAIR_KEY`."""

    image_id: str
    shape: tuple[int, int, int]                 # height, width, channels
    cts: dict = field(repr=False)               # (tile_y, tile_x, channel, index) -> serialized ciphertext

    @property
    def parts(self) -> int:
        """The pairs one distance sums: the query's ciphertexts (an image of its size has as many)."""
        return len(self.cts)


class QueryCiphertexts:
    """A worker's view of the broadcast :class:`Query`: its ciphertexts loaded on first use, kept while they
    fit :data:`QUERY_CACHE_BYTES`."""

    def __init__(self, query: Query):
        self.query = query
        self.loaded: dict = {}
        self.kept = 0

    def load(self, ev, key):
        c = self.loaded.get(key)
        if c is None:
            raw = self.query.cts[key]
            c = ev.load(raw)
            if self.kept + len(raw) <= QUERY_CACHE_BYTES:
                self.loaded[key] = c
                self.kept += len(raw)
        return c


# --- the reading task: partial distances -----------------------------------------------------------------

@dataclass
class _Sums:
    """One image's partial distances in one task."""

    meta: dict
    sums: dict = field(default_factory=dict)        # metric -> loaded ciphertext
    seconds: dict = field(default_factory=dict)     # metric -> seconds
    pairs: int = 0


def partials_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, query_token: str,
                       query_broadcast, metrics: list[str], bound: float, buckets: int, directory: str,
                       attempt: Callable[[], tuple[int, int]], access: FileAccess = FileAccess(), rebuilds=None,
                       tasks=None) -> Iterator[pa.RecordBatch]:
    """The good ciphertext rows of a task -> the partial distances of each image to the query, summed per
    image and metric and written to the task's exchanged file in ``directory`` (one bucket per image of
    ``buckets``), and the MAPPED report.  A row the library refuses is :func:`work_failed` (its image is
    then left out); the query's own rows and images of another size are passed over."""
    from hecore.ops.matching import pair_partial

    from .process import build_evaluator, packed_geometry

    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    query = worker_state(query_token, query_broadcast, QueryCiphertexts, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    q = query.query
    packed: dict[str, bool] = {}
    images: dict[str, list] = {}                # image -> [height, width, channels, pairs]
    sums: dict[str, _Sums] = {}
    for rb in batches:
        if rb.num_rows == 0:
            continue
        meta = rb.select([n for n in rb.schema.names if n != "ct"]).to_pylist()
        ct = rb.column("ct")
        for i, r in enumerate(meta):
            iid, shape = r["image_id"], (r["image_height"], r["image_width"], r["image_channels"])
            seen = images.setdefault(iid, [*shape, 0])
            key = tuple(r[k] for k in PAIR_KEY)
            if iid == q.image_id or shape != q.shape or key not in q.cts:
                continue
            layout = r["layout"]
            if layout not in packed:
                packed[layout] = Layout.parse(layout).packed
            t = time.perf_counter()
            try:
                a, b = ev.load(ct[i].as_buffer()), query.load(ev, key)
                geom = packed_geometry(r) if packed[layout] else None
                share = (time.perf_counter() - t) / len(metrics)
                entry = sums.get(iid)
                if entry is None:
                    entry = _Sums({k: r[k] for k in ("layout", "scheme", "preset", "key_fingerprint", "ops",
                                                     "post_scale")})
                for metric in metrics:
                    t = time.perf_counter()
                    p = pair_partial(ev, a, b, metric, geom, bound, q.parts)
                    total = entry.sums.get(metric)
                    entry.sums[metric] = p if total is None else ev.add(total, p)
                    entry.seconds[metric] = entry.seconds.get(metric, 0.0) + share + time.perf_counter() - t
            except Exception as e:  # noqa: BLE001 -- SEAL's refusals vary; the row's reject names the error
                if not work_failed(r, e):
                    raise
                continue
            sums[iid] = entry
            entry.pairs += 1
            seen[3] += 1
    out = [{"image": iid, "image_height": h, "image_width": w, "image_channels": c, "pairs": n}
           for iid, (h, w, c, n) in images.items()]
    rows = [{"image_id": iid, "metric": metric, "pairs": entry.pairs, "seconds": entry.seconds[metric],
             **entry.meta, "ct": ev.dump(entry.sums[metric])}
            for iid, entry in sums.items() for metric in metrics]
    report = write_buckets(pa.Table.from_pylist(rows, schema=PARTIALS),
                           [bucket_of(r["image_id"], buckets) for r in rows],
                           directory=directory, attempt=attempt, access=access)
    if report is not None:
        out.append(report)
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=MAPPED)


# --- the combining task: one distance per image and metric -----------------------------------------------

@dataclass(frozen=True)
class SumPlan:
    """What the combining tasks do (broadcast once): task ``i`` adds up the partial sums of the images
    ``keep[i]`` found in ``parts[i]`` (:func:`tasks.exchange.bucket_parts` of its bucket)."""

    parts: list                                 # per task: [(file, bytes, row group, rows)]
    keep: list                                  # per task: frozenset of image ids
    query_id: str
    pairs: int                                  # the pairs each distance sums
    bound: float
    run_id: str


def sum_partition(ids: Iterator[pa.RecordBatch], *, plan_broadcast, token: str, broadcast, exchanged: str,
                  directory: str, attempt: Callable[[], tuple[int, int]], access: FileAccess = FileAccess(),
                  rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """The combining tasks whose indexes ``ids`` holds: the partial sums of each kept image read from the
    exchanged files (``exchanged``), added per metric into its encrypted distance, written as one Parquet
    file of ENCRYPTED_DISTANCES in ``directory``; one WRITTEN row.  An image whose partial sums do not
    add up to all its pairs gets no row (the driver's count of the rows then stops the job)."""
    from hecore.ops.matching import distance_scale

    from .process import build_evaluator

    plan: SumPlan = plan_broadcast.value
    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    found: dict[tuple[str, str], list] = {}     # (image, metric) -> [sum, pairs, seconds, meta]
    for rb in ids:
        for i in rb.column("id").to_pylist():
            keep = plan.keep[i]
            for table in read_bucket(plan.parts[i], directory=exchanged, schema=PARTIALS, access=access):
                for r in table.to_pylist():
                    if r["image_id"] not in keep:
                        continue
                    t = time.perf_counter()
                    c = ev.load(r["ct"])
                    entry = found.get((r["image_id"], r["metric"]))
                    if entry is None:
                        found[(r["image_id"], r["metric"])] = entry = [c, 0, 0.0, r]
                    else:
                        entry[0] = ev.add(entry[0], c)
                    entry[1] += r["pairs"]
                    entry[2] += r["seconds"] + time.perf_counter() - t
    rows = []
    for (iid, metric), (total, pairs, seconds, r) in sorted(found.items()):
        if pairs != plan.pairs:
            continue
        rows.append({
            "run_id": plan.run_id, "query_image_id": plan.query_id, "image_id": iid, "metric": metric,
            "layout": r["layout"], "scheme": r["scheme"], "preset": r["preset"],
            "key_fingerprint": r["key_fingerprint"], "ops": r["ops"], "bound": plan.bound, "parts": pairs,
            "distance_scale": distance_scale(metric, r["post_scale"], plan.bound, pairs, ev.params.is_integer),
            "process_seconds": seconds, "ct": ev.dump(total)})
    written = write_file(pa.Table.from_pylist(rows, schema=ENCRYPTED_DISTANCES), directory=directory,
                         attempt=attempt, access=access)
    yield pa.RecordBatch.from_pylist([written], schema=WRITTEN)


def write_file(table: pa.Table, *, directory: str, attempt: Callable[[], tuple[int, int]],
               access: FileAccess = FileAccess()) -> dict:
    """``table`` as one Parquet file in ``directory``, named for the task (as :func:`tasks.files.rows_to_file`
    names its files), under a temporary name until complete: its WRITTEN row (a null file without rows)."""
    import uuid

    import pyarrow.compute as pc

    from .files import WRITER_OPTIONS, replace_file

    if table.num_rows == 0:
        return {"file": None, "rows": 0, "bytes": 0, "xxh3_xor": 0, "ct_bytes": 0}
    partition, number = attempt()
    name = f"part-{partition:05d}-{number}-{uuid.uuid4().hex[:8]}.parquet"
    fs, base = access.open(directory)
    replace_file(table, fs, f"{base}/{name}", row_group_size=table.num_rows, **WRITER_OPTIONS)
    return {"file": name, "rows": table.num_rows, "bytes": fs.get_file_info(f"{base}/{name}").size,
            "xxh3_xor": 0, "ct_bytes": int(pc.sum(pc.binary_length(table.column("ct"))).as_py() or 0)}


# --- the owner's side: the distances decrypted ------------------------------------------------------------

def build_opener(keys):
    """A worker's decryption context and checker of the owner's broadcast keys
    (:meth:`hecore.schemes.KeySet.for_decryption`, on the owner's own executors)."""
    return keys.decryptor(), keys.checker()


def decrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, expect, known_broadcast=None,
                      problems: list | None = None, rebuilds=None, tasks=None, opener=None) -> Iterator[pa.RecordBatch]:
    """Encrypted distance rows (with a ``file`` column) -> OPENED rows.  Each row passes
    :func:`tasks.distances.row_problem` (against the owner's images, ``known_broadcast``'s
    :class:`tasks.distances.KnownImages`, or none) before its ciphertext goes to the keys' checker, and the
    checker before it is decrypted; the driver judges the rest (duplicates, the value's range).
    ``problems``: what the reader could not read (:func:`tasks.splits.read_splits`), a row each.
    ``opener``: the decryption context and checker already built (the driver running this itself), else
    the worker's, built once from the broadcast keys."""
    from .distances import row_problem

    ctx, checker = opener if opener is not None else worker_state(token, broadcast, build_opener, rebuilds)
    known = known_broadcast.value if known_broadcast is not None else None
    if tasks is not None:
        tasks.add([os.getpid()])
    names = [f.name for f in OPENED]
    for rb in batches:
        if rb.num_rows == 0:
            continue
        meta = rb.select([n for n in rb.schema.names if n != "ct"]).to_pylist()
        ct = rb.column("ct")
        out = []
        for i, r in enumerate(meta):
            row = {n: r.get(n) for n in names}
            if row_problem(r, expect, known) is None:
                raw = ct[i].as_buffer() if ct[i].is_valid else b""
                p = checker.problem(raw)
                if p is not None:
                    row.update(stage="ct", reason=p.reason, detail=p.detail)
                else:
                    t = time.perf_counter()
                    row["distance"] = float(ctx.decrypt_slots(raw, 1)[0]) * r["distance_scale"]
                    row["decrypt_seconds"] = time.perf_counter() - t
            out.append(row)
        yield pa.RecordBatch.from_pylist(out, schema=OPENED)
    if problems:
        yield pa.RecordBatch.from_pylist([{"file": f, "stage": "file", "reason": reason, "detail": detail}
                                          for f, reason, detail in problems], schema=OPENED)

