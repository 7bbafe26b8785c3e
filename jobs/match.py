"""`hepix process --op match:QUERY`: encrypted distances from one image to every other (public keys only),
and `hepix decrypt` of them (the key owner's side).

The Python workers read, compute and write everything; Spark runs their tasks, carries their small
reports and broadcasts the query's ciphertexts once, never a ciphertext byte of the tables
(tasks/match.py):

1. a pass over the ``image_id`` column alone says which splits hold the query's rows; the driver reads
   those rows itself, checks them as every row is checked, and broadcasts them once;
2. the checking pass (jobs/runtime/inputcheck.py) reads every split once, checks every row and, in the same
   task, turns each good row of an image of the query's size into its partial distance per metric against
   the query's ciphertext of the same tile, channel and index (hecore.ops.matching), summed per image; the
   sums go to files of the run's staging area, by image (tasks/exchange.py);
3. once the driver has judged the images, one task per bucket adds up each kept image's partial sums into
   one encrypted distance per metric and writes them itself.

Images whose size differs from the query's cannot be compared pixel by pixel: they go to the rejects
table with the reason, and the job goes on.

The cluster knows images by their ids only: ``match:QUERY`` names the query by its image id (the
owner finds it in its owner map, ``OWNER/images``), and the encrypted distances carry ids, not
names.  The owner's decrypt names them from the owner map (``--owner``); its workers check and decrypt
the distances (the driver itself reads a few, one task's worth), and the driver judges them
(tasks/distances.py).
"""
from __future__ import annotations

import functools
import time
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc

from hecore.errors import HepixError
from hecore.ops.spec import parse_ops, raw_range, run_kind
from hecore.planner import check as check_params
from schemas.manifest import Counts
from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS, DISTANCES, ENCRYPTED_DISTANCES, PARQUET_OPTIONS
from tasks.match import LOCATED, MAPPED, PAIR_KEY, Query, QueryCiphertexts, SumPlan, partials_partition, sum_partition
from tasks.splits import read_split

from .runtime.console import table
from .runtime.exchange import (
    driver_rows,
    exchange_directory,
    kept_buckets,
    kept_exchange,
    one_task,
    task_plan,
    worker_rows,
    write_table,
)
from .runtime.inputcheck import ImageSummary, image_problems, reject_row
from .runtime.progress import Progress
from .runtime.runs import check_recordable_ops, exit_status, open_run, rejects_place, table_place
from .runtime.sparktask import task_attempt


def query_error(query: str, ids: list[str]) -> HepixError:
    """The error of a query that no image of the input has (``ids``: some of the input's ids, sorted)."""
    shown = ", ".join(ids[:3])
    return HepixError(f"match:{query}: no image of the input has that id (the table names images by id only; "
                      f"the owner map's images/ table says which id is which file; ids here include: "
                      f"{shown}{' ...' if len(ids) > 3 else ''})")


def query_rows(run, splits: list, expect, query: str) -> Query:
    """The query image's rows, checked, for the workers: the splits holding them found by the workers
    reading the ``image_id`` column alone (tasks.match.locate_partition), then read here with pyarrow,
    checked row by row (tasks/rowchecks.py, against this key) and as an image (complete, consistent).
    A query no row names, or whose rows fail their checks, stops the job before any work."""
    from tasks.match import locate_partition
    from tasks.rowchecks import check_partition

    access = run.storage.access(run.args.input)
    # the image_id column alone is little to read: one task per core (each task costs the JVM some CPU)
    per_task = -(-len(splits) // max(1, run.sc.defaultParallelism))
    tasks = tuple(tuple(range(i, min(i + per_task, len(splits)))) for i in range(0, len(splits), per_task))
    located = [r.asDict() for r in task_plan(
        run.spark, len(tasks),
        functools.partial(locate_partition, splits=splits, tasks=tasks, access=access, query=query),
        LOCATED).collect()] if splits else []
    hits = sorted(r["split"] for r in located if r["split"] >= 0)
    if not hits:
        raise query_error(query, sorted({i for r in located for i in (r["ids"] or [])})[:4])
    problems: list = []
    parts = [rb.filter(pc.equal(rb.column("image_id"), query))
             for j in hits for rb in read_split(splits[j], access=access, schema=CIPHERTEXTS, problems=problems)]
    if problems:
        raise HepixError(f"match:{query}: the query's rows cannot be read ({problems[0][2]}); nothing was matched")
    parts = [rb for rb in parts if rb.num_rows]
    if not parts:
        raise query_error(query, sorted({i for r in located for i in (r["ids"] or [])})[:4])
    rows = pa.Table.from_batches(parts)
    keys = SimpleNamespace(value=run.keys.for_checks())
    checked = pa.Table.from_batches(list(check_partition(rows.to_batches(), expect=expect,
                                                         token=f"{run.run_id}/query", broadcast=keys)))
    bad = [(r, d) for r, d in zip(checked.column("reason").to_pylist(), checked.column("detail").to_pylist()) if r]
    c = {k: checked.column(k).to_pylist() for k in ("channel", "tile_y", "tile_x", "index", "image_height",
                                                     "image_width", "image_channels", "tile_h", "tile_w")}
    summary = ImageSummary(
        image_id=query, rows=checked.num_rows, keys=len(set(zip(c["channel"], c["tile_y"], c["tile_x"], c["index"]))),
        layout=checked.column("layout")[0].as_py(), heights=(min(c["image_height"]), max(c["image_height"])),
        widths=(min(c["image_width"]), max(c["image_width"])),
        channels=(min(c["image_channels"]), max(c["image_channels"])),
        tiles=(min(c["tile_h"]), max(c["tile_h"]), min(c["tile_w"]), max(c["tile_w"])))
    problem = bad[0] if bad else image_problems(summary)
    if problem is not None:
        raise HepixError(f"match:{query}: the query image fails its checks ({problem[0]}: {problem[1]}); "
                         "match against an image whose rows are whole")
    meta = rows.select(list(PAIR_KEY)).to_pylist()
    return Query(query, (summary.heights[0], summary.widths[0], summary.channels[0]),
                 {tuple(m[k] for k in PAIR_KEY): ct.as_py() for m, ct in zip(meta, rows.column("ct"))})


def size_rejects(run, sizes: dict, q: Query) -> tuple[list[str], list[dict]]:
    """The ids of the good images (``sizes``: id -> height, width, channels) of the query's size, the query
    left out, and a rejects row for every other, in id order."""
    ok, rejects = [], []
    for iid in sorted(sizes):
        if iid == q.image_id:
            continue
        h, w, c = sizes[iid]
        if (h, w, c) == q.shape:
            ok.append(iid)
            continue
        H, W, C = q.shape
        rejects.append(reject_row(run.run_id, "process", iid, "size-mismatch",
                                  f"{w}x{h}x{c}, the query {q.image_id} is {W}x{H}x{C}: distances need equal "
                                  "sizes (encrypt both with the same --resize)", {"image_id": iid}))
    return ok, rejects


def run(args, chain) -> int:
    """``hepix process --op match:QUERY``: one encrypted distance per image and metric (``chain.match``)."""
    match = chain.match
    with open_run(args, "process") as run:
        parent = run.parent
        if any(run_kind(op) == "match" for op in parent.ops):
            raise HepixError(f"{args.input} already holds distances, not images")
        check_recordable_ops(parent, [match.spec])
        if parent.options.get("bound_offsets"):
            raise HepixError(f"{args.input} holds keyed offsets that bind it to the chain declared at encrypt: "
                             f"{match.spec} squares differences, which the offsets would enter; encrypt with "
                             "--no-bind to match")
        if parent.options.get("bound_slots"):
            raise HepixError(f"{args.input} holds its pixels among keyed check slots that bind it to the chain "
                             f"declared at encrypt: {match.spec} compares pixels with the query's, slot by slot; "
                             "encrypt with --no-bind to match")
        if parent.options.get("bound"):
            raise HepixError(f"{args.input} was encrypted with --bind: {match.spec} squares differences, which "
                             "mixes the check values under the encryption into the distances; encrypt without "
                             "--bind to match")
        done = parse_ops(list(parent.ops))
        try:
            check_params(run.keys.params, done, parent.layout, match)   # scheme, depth, keys, value room
        except ValueError as e:
            raise HepixError(str(e)) from None
        lo, hi = raw_range(done)
        bound = hi - lo
        print(f"hepix process {run.run_id}: {args.input} -> {args.out}; {match.spec} "
              f"({', '.join(match.metrics)}); key {run.fingerprint[:16]} (public only)")
        with Progress(run.spark, "process", enabled=not args.quiet) as progress:
            t0 = time.perf_counter()
            progress.stage("finding the query's rows")
            _, _, splits = run.input_table(with_splits=True, frame=False)
            expect = run.expectation()
            query = query_rows(run, splits, expect, match.query)
            progress.stage(f"checking the input rows and matching them against {query.image_id}")
            checked, sizes, parts = partial_distances(run, expect, query, match.metrics, bound)
            if query.image_id not in checked.good_ids:
                raise query_error(query.image_id, checked.good_ids[:4])
            ok, mismatched = size_rejects(run, sizes, query)
            rejects = checked.rejects + mismatched
            progress.stage(f"adding up the distances of {len(ok)} images")
            entries = distances(run, parts, ok, query, bound)
            run.write_rejects(rejects)
            run.timings["process_seconds"] = time.perf_counter() - t0
        n = sum(e["rows"] for e in entries)
        if n != len(ok) * len(match.metrics):
            raise HepixError(f"internal error: {n} distances for {len(ok)} images x {len(match.metrics)} metrics; "
                             "nothing was committed")
        counts = Counts(images_in=checked.images, images_encrypted=len(ok),
                        images_rejected=checked.images - len(ok) - 1, ciphertexts=n, rejects=len(rejects))
        files, checksums = run.describe({"distances": False, "rejects": False}, {"distances": entries})
        manifest = run.manifest(
            ops=list(parent.ops) + [match.spec], counts=counts, files=files, checksums=checksums,
            options={**parent.options, "match": {"query": query.image_id, "query_image_id": query.image_id,
                                                 "metrics": list(match.metrics), "bound": bound}})
        run.commit(manifest, ["distances", "rejects"])
    print(f"{n} encrypted distances ({len(ok)} images x {', '.join(match.metrics)}) from image {query.image_id} in "
          f"{run.timings['process_seconds']:.1f} s; {len(rejects)} rejected; decrypt them with `hepix decrypt`")
    return exit_status(args, len(rejects))


def partial_distances(run, expect, query: Query, metrics, bound: float):
    """The checking pass, the workers reading the input's splits: every row checked
    (:meth:`jobs.runtime.runs.Run.checked_input`) and, in the same task, each good row's partial distances
    to the query summed per image into the task's exchanged file (tasks.match.partials_partition).  The
    checked input, the size of every good image, and where each bucket's partial sums are."""
    from tasks.process import build_evaluator

    bc, token = run.broadcast(run.keys)
    query_bc, query_token = run.broadcast(query)
    exchanged, exchange_access = exchange_directory(run)
    work = functools.partial(partials_partition, token=token, broadcast=bc, query_token=query_token,
                             query_broadcast=query_bc, metrics=list(metrics), bound=bound,
                             buckets=max(1, run.sc.defaultParallelism), directory=exchanged, attempt=task_attempt,
                             access=exchange_access, rebuilds=run.rebuilds, tasks=run.tasks)
    checked = run.checked_input("process", expect, keys=run.keys.for_checks(), work=work, work_schema=MAPPED,
                                collect=True, states=((token, bc, build_evaluator),
                                                      (query_token, query_bc, QueryCiphertexts)))
    mapped = checked.df.to_pylist()
    good = set(checked.good_ids)
    sizes = {r["image"]: (r["image_height"], r["image_width"], r["image_channels"])
             for r in mapped if r["image"] is not None and r["image"] in good}
    parts = kept_exchange(exchanged, [r for r in mapped if r["image"] is None and r["file"] is not None],
                          exchange_access)
    return checked, sizes, parts


def distances(run, parts: dict, ok: list[str], query: Query, bound: float) -> list[dict]:
    """One encrypted distance per image of ``ok`` and metric, added up from its partial sums (``parts``:
    where each bucket's are) by one task per bucket, which writes them itself (tasks.match.sum_partition):
    the staged table's entries as the manifest records them."""
    from tasks.files import keep_reported, keep_schema

    directory, access = run.worker_directory("distances")
    buckets, keep = kept_buckets(run, ok, parts)
    written = []
    if buckets:
        plan = SumPlan(parts=[parts[b] for b in buckets], keep=[frozenset(keep[b]) for b in buckets],
                       query_id=query.image_id, pairs=query.parts, bound=bound, run_id=run.run_id)
        plan_bc, _ = run.broadcast(plan)
        bc, token = run.broadcast(run.keys)
        fn = functools.partial(sum_partition, plan_broadcast=plan_bc, token=token, broadcast=bc,
                               exchanged=run.out.table("_exchange"), directory=directory, attempt=task_attempt,
                               access=access, rebuilds=run.rebuilds, tasks=run.tasks)
        written = task_plan(run.spark, len(buckets), fn, WRITTEN).collect()
    entries = keep_reported(directory, written, access)
    if not entries:                         # no distance: the table still reads as one of its schema
        keep_schema(directory, access, ENCRYPTED_DISTANCES)
        entries = [{"name": n, "rows": 0, "bytes": b} for n, b in run.storage.list_files(directory).items()]
    return [{k: e[k] for k in ("name", "rows", "bytes")} for e in entries]


def decrypt(run) -> int:
    """``hepix decrypt`` of a match run (the key owner's side): its distances in the clear, in the
    ``distances`` table, one row per image and metric (``--flood-std`` adds noise flooding); each
    encrypted distance is checked first (:func:`decrypt_distances`), a bad one is a rejects row."""
    import numpy as np

    args, parent = run.args, run.parent
    t0 = time.perf_counter()
    rows, rejects, ringers = decrypt_distances(run)
    if args.flood_std:
        from hecore.flooding import flood

        for r, noisy in zip(rows, flood(np.array([r["distance"] for r in rows]), args.flood_std)):
            r["distance"] = float(noisy)
    entries = write_table(run, "distances", DISTANCES, rows, PARQUET_OPTIONS["distances"]["compression"])
    run.write_rejects(rejects)
    secs = time.perf_counter() - t0
    run.timings["decrypt_seconds"] = secs
    images = {r["image_id"] for r in rows} | {r["image_id"] for r in rejects if r.get("image_id")}
    bad = {r["image_id"] for r in rejects if r.get("image_id")}
    files, checksums = run.describe({"distances": False, "rejects": False},
                                    {"distances": entries} if entries is not None else None)
    manifest = run.manifest(
        options={**parent.options, "flood_std": args.flood_std, "owner": run.owner is not None},
        counts=Counts(images_in=len(images), images_decrypted=len(images - bad), images_rejected=len(bad),
                      ciphertexts=len(rows), rejects=len(rejects)), workers={}, files=files, checksums=checksums)
    run.commit(manifest, ["distances", "rejects"])
    print(table(rows, [("query_source", "query", ""), ("source", "image", ""), ("metric", "metric", ""),
                       ("distance", "distance", ",.2f"), ("l1_poly_max_error", "L1 approx. bound", ",.0f"),
                       ("decrypt_seconds", "decrypt s", ".3f")]))
    print(f"decrypted {len(rows)} distances in {secs:.1f} s{table_place(args, 'distances')}"
          + (f"; {len(rejects)} rejected, listed in {rejects_place(args)}" if rejects else ""))
    if ringers is not None:
        share = (f"; the ringers are {ringers.checked} of {len(images)} images: a cluster that gets m images' "
                 f"distances wrong escapes them all with probability about (1 - {ringers.checked / len(images):.3g})^m"
                 if ringers.checked and images else "")
        print(f"ringers: {ringers.checked} images' distances compared with the owner's copies, "
              f"{len(ringers.wrong)} wrong (integrity)" + (f"; {ringers.why_not}" if ringers.why_not else share))
    args.ringers_compared = ringers.checked if ringers is not None else 0  # what `hepix verify --owner` accepts on
    return exit_status(args, len(rejects))


def decrypt_distances(run) -> tuple[list[dict], list[dict], object]:
    """The data owner's side: the encrypted distances of a match run, checked (tasks/distances.py) and
    decrypted by the Python workers, each reading its splits (tasks.match.decrypt_partition: a row's own
    checks before its ciphertext reaches the library), and judged here as they stream in: the row's
    checks again, against the owner map, a second row of one (image, metric), the keys' checker's
    verdict, the decrypted value's range.  Names from the owner map when there is one.  An image with a
    bad row, or two rows of one metric, has all its distances left out; so has a ringer whose distances are
    not the ones the owner's copies give (:func:`ringers_of`, whose verdict comes third)."""
    from hecore.ops.matching import l1_poly_error
    from tasks.match import OPENED, decrypt_partition

    from .runtime.distancecheck import DistanceExpect, KnownImages, row_problem, value_problem
    from .runtime.inputcheck import RejectLog

    run_id, owner = run.run_id, run.owner
    expect = DistanceExpect.for_run(run)
    most = len(owner.images()) * len(expect.metrics) if owner is not None else None
    _, rejects, splits = run.input_table("distances", ENCRYPTED_DISTANCES, max_rows=most, with_splits=True)
    known = owner.images() if owner is not None else {}
    name = (lambda i: known[i].source if i in known else i)
    if one_task(splits):                    # a few distances: the driver reads and decrypts them itself
        sizes = SimpleNamespace(value=KnownImages.of(owner)) if owner is not None else None
        fn = functools.partial(decrypt_partition, token="", broadcast=None, expect=expect, known_broadcast=sizes,
                               opener=(run.keys.context(), run.keys.checker()))
        opened = driver_rows(run, splits, ENCRYPTED_DISTANCES, fn, OPENED)
    else:
        bc, token = run.broadcast(run.keys.for_decryption())
        known_bc = run.broadcast(KnownImages.of(owner))[0] if owner is not None else None
        fn = functools.partial(decrypt_partition, token=token, broadcast=bc, expect=expect, known_broadcast=known_bc,
                               rebuilds=run.rebuilds, tasks=run.tasks)
        opened = worker_rows(run, splits, ENCRYPTED_DISTANCES, fn, OPENED)
    log = RejectLog(rejects)
    found: dict[tuple[str, str], dict] = {}
    bad: set[str] = set()
    for r in opened.toLocalIterator():
        r = r.asDict()
        if r["stage"] == "file":        # a file that changed or could not be read after its footer's check
            log.add(reject_row(run_id, "decrypt", (r["file"] or "").rsplit("/", 1)[-1], r["reason"], r["detail"]))
            continue
        iid = r["image_id"] if isinstance(r["image_id"], str) else ""
        problem = row_problem(r, expect, owner)
        if problem is None and (iid, r["metric"]) in found:
            problem = ("duplicate-row", f"a second {r['metric']} distance for this image")
        if problem is None and r["stage"] == "ct":
            problem = (r["reason"], r["detail"])
        if problem is None:
            if r["distance"] is None:
                raise HepixError(f"internal error: a distance of image {iid} passed its checks but was not "
                                 "decrypted; nothing was committed")
            distance, secs = r["distance"], r["decrypt_seconds"]
            problem = value_problem(distance, r, expect, owner)
        if problem is not None:
            log.add(reject_row(run_id, "decrypt", name(iid), *problem, {"image_id": iid[:80] or None}))
            bad.add(iid)
            continue
        # per pixel: the polynomial's error (in units of D) x D x post_scale = x distance_scale / parts
        l1_err = l1_poly_error() * abs(r["distance_scale"]) / r["parts"] if r["metric"] == "l1" else None
        found[(iid, r["metric"])] = {
            "run_id": run_id, "query_image_id": r["query_image_id"], "query_source": name(r["query_image_id"]),
            "image_id": iid, "source": name(iid), "metric": r["metric"], "distance": distance,
            "l1_poly_max_error": l1_err, "parts": r["parts"], "process_seconds": r["process_seconds"],
            "decrypt_seconds": secs}
    verdict = ringers_of(run, expect, {k: v for k, v in found.items() if k[0] not in bad})
    for iid, why in (verdict.wrong if verdict is not None else {}).items():
        log.add(reject_row(run_id, "decrypt", name(iid), "integrity", why, {"image_id": iid}))
        bad.add(iid)
    log.close(run_id, "decrypt")
    rows = [found[k] for k in sorted(found) if k[0] not in bad]
    return rows, rejects, verdict


def ringers_of(run, expect, found: dict):
    """The owner's ringers against the decrypted distances ``found`` (jobs/runtime/matchringers.py): None
    when the run is not checked (no owner map, ``--no-integrity``, noise flooding) or nothing was decrypted."""
    from .runtime.decryptinput import decode_options, spot_checked
    from .runtime.matchringers import check_ringers, query_original

    owner = run.owner
    if not found or not spot_checked(run, owner):
        return None
    query_id = next(iter(found.values()))["query_image_id"]
    query = None
    record = owner.images().get(query_id)
    if run.args.images and record is not None:
        query = query_original(run.args.images, record, decode_options(run, owner))
    return check_ringers(found, owner.spots(), expect, query_id, query)
