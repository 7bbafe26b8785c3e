"""Encrypted inference on scikit-learn's digits through the jobs (hecore.infer.models does the work).

* ``hepix encrypt-digits --keys PUBLIC --out DIR [--task 01|all] [--pack]``: the data owner encrypts the
  test split of the digits task (the ML paper's 0-vs-1, or all ten digits) into a ``ciphertexts`` table
  of layout ``digits``: batches of up to N/2 samples, SIMD across samples (slot j = sample j), one
  ciphertext per pixel position -- or, with ``--pack`` (CKKS logistic regression), several pixel
  positions per ciphertext.  Column meanings for this layout: ``h`` samples in the batch, ``y``
  the first sample's index in the test split, ``tile_h`` the block (slots per pixel position),
  ``index`` the ciphertext's place in the batch.  ``--samples N`` encrypts the first N digits only;
  ``--model MODEL`` lets :func:`hecore.infer.layouts.choose` pick the fastest layout for N samples of
  that model and prints it -- for a few samples one ciphertext per sample (``coefficients`` for logreg,
  ``windows`` for TinyCNN in CKKS: each sample its own batch, ``tile_h`` 0), for many the batches
  above; ``--layout`` forces one.  ``--ringers P`` (default 0.1) keeps a secret share of the digits' pixels in
  an owner map (``--owner``, by default ``<--out>.owner``: jobs/runtime/inferringers.py).
* ``hepix process --op infer:MODEL[,task=01|all]`` (public keys only): the server trains its model on
  the public training split (fixed seeds) and runs it on every batch; each output row is one head
  output (``index`` = class, or 0 for the binary probability; one sample per ciphertext: one row per
  sample holding all its outputs), with ``post_scale`` the factor the key holder multiplies by (BFV's
  quantisation).  It prints the layout the digits were encrypted in.
* ``hepix decrypt``: the key holder decrypts the head outputs into ``predictions`` (one row per digit,
  with its label) and ``inference_metrics`` (accuracy per batch and overall, bytes per sample, times); with
  ``--owner``, a batch whose ringer's head outputs are not the model's is an ``integrity`` reject.

Every job here reads and writes its ciphertexts with pyarrow, never through Spark's JVM: encrypt-digits
writes its table on the driver; ``process`` and ``decrypt`` run in the Python workers, which read their
splits, check every row, and (process) send each batch's rows to one task through files of their own
before it runs the model and writes the outputs (tasks/infer.py, tasks/exchange.py); the owner's
workers (the driver itself for a few, one task's worth) decrypt the head outputs into small rows that
the driver judges batch by batch.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import pyarrow as pa

from hecore.errors import HepixError, InvalidParameters
from hecore.infer.ringers import DEFAULT_PROBABILITY
from schemas.manifest import Counts, RunManifest
from schemas.tables import CIPHERTEXTS, INFERENCE_METRICS, PARQUET_OPTIONS, PREDICTIONS
from tasks.infer import OPENED, InferPlan, OutputExpect, batch_number, decrypt_partition, output_problem, shape_problem

from .runtime import inferringers, runinfo
from .runtime.console import table
from .runtime.exchange import driver_rows, one_task, worker_rows, write_table
from .runtime.frames import driver_frame
from .runtime.inputcheck import reject_row
from .runtime.runs import add_spark_arguments, exit_status, open_run, rejects_place
from .runtime.session import plain_session, spark_info
from .runtime.storage import Output, Storage
from .runtime.tablefiles import describe_table, table_checksums

LAYOUT = "digits"


def add_encrypt_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="key directory (only its public part is read)")
    p.add_argument("--out", required=True, help="output directory: ciphertexts/, _manifest.json")
    p.add_argument("--task", choices=("01", "all"), default="01",
                   help="01: digits 0 and 1, the ML paper's task (108 test samples); all: ten classes (540)")
    p.add_argument("--pack", action="store_true",
                   help="several pixel positions per ciphertext (CKKS logistic regression only; fewer, "
                        "smaller ciphertexts per sample)")
    p.add_argument("--samples", type=int, default=None,
                   help="encrypt the first N test digits only (default: all of them)")
    p.add_argument("--model", choices=("logreg", "tinycnn"), default=None,
                   help="choose the fastest layout for this model and the number of samples (one sample per "
                        "ciphertext for a few, SIMD batches for many); the choice is printed")
    p.add_argument("--layout", default=None,
                   help="force a layout: pixel-per-ciphertext, block-B, coefficients (logreg) or windows "
                        "(TinyCNN, CKKS); needs --model")
    p.add_argument("--ringers", type=float, default=DEFAULT_PROBABILITY, metavar="P",
                   help="each digit becomes, with probability P drawn in secret (at least one per run), a ringer: "
                        "the owner map keeps its pixels and decrypt --owner compares its results with the model's, "
                        "rejecting a batch whose ringer differs as integrity (default %(default)s; 0: none)")
    p.add_argument("--owner", metavar="DIR",
                   help="the owner map that keeps the ringers (a local directory kept by the owner, never handed to "
                        "the cluster; default: <--out>.owner beside a local --out); decrypt --owner reads it")
    add_spark_arguments(p)


def run_encrypt(args) -> int:
    """``hepix encrypt-digits``: scikit-learn's digits (test split), encrypted with the public key."""
    from hecore.infer import encrypted, layouts
    from hecore.infer import models as infer
    from hecore.infer.arithmetic import arithmetic
    from hecore.seal.keys import load_public

    from .runtime import places

    places.check_new_out(args.out)          # a new or empty directory: nothing of the user's is replaced
    places.check_location(args.out, "--out", places.guarded(keys=args.keys))
    if not 0.0 <= args.ringers <= 1.0:
        raise HepixError(f"--ringers {args.ringers}: give the probability that a digit is a ringer, 0 to 1")
    owner_dir = inferringers.owner_dir(args)
    if owner_dir is not None:
        inferringers.check_owner_dir(owner_dir, out=args.out, keys=args.keys)
    ctx = load_public(args.keys, eval_keys=False)
    params = ctx.params
    if args.pack:
        why = arithmetic(params).ckks_only(f"--pack serves CKKS logistic regression; {params.name} is "
                                           f"{params.scheme.upper()}: leave --pack out")
        if why:
            raise HepixError(why)
    task = infer.digits_task(args.task)
    run_id, started = runinfo.new_run_id(), runinfo.now()
    n = len(task.y_test) if args.samples is None else args.samples
    if not 1 <= n <= len(task.y_test):
        raise HepixError(f"--samples {n} is not between 1 and the task's {len(task.y_test)} test digits")
    layout, model = _encrypt_layout(args, params, task, n)
    rows, batches = [], []
    t_all = time.perf_counter()
    per_sample = layout is not None and layout.per_sample
    step = 1 if per_sample else params.slots
    for b, start in enumerate(range(0, n, step)):
        x = task.x_test[start:min(n, start + step)]
        t0 = time.perf_counter()
        if layout is None:
            block = encrypted.block_for(len(x), params.slots, args.pack)
            cts = encrypted.encrypt_batch(ctx, x, block=block)
        else:
            block = 0 if per_sample else (layout.block or params.slots)
            cts = layouts.encrypt(ctx, layout, x, model)
        secs = (time.perf_counter() - t0) / len(cts)
        batches.append({"id": f"digits-{args.task}-{b}", "start": start, "x": x, "ciphertexts": len(cts)})
        for i, ct in enumerate(cts):
            rows.append({
                "run_id": run_id, "image_id": f"digits-{args.task}-{b}", "layout": LAYOUT, "scheme": params.scheme, "preset": params.name,
                "strategy": "fresh", "security": "ind-cpa", "key_fingerprint": ctx.fingerprint,
                "image_height": 8, "image_width": 8, "image_channels": 1, "tile_h": block, "tile_w": len(cts),
                "halo": 0, "tile_y": b, "tile_x": 0, "y": start, "x": 0, "h": len(x), "w": infer.PIXELS,
                "channel": 0, "index": i, "ops": [], "post_scale": 1.0, "level": 0,
                "scale_bits": params.scale_bits, "encrypt_seconds": secs, "process_seconds": 0.0, "ct": ct})
    enc_secs = time.perf_counter() - t_all
    drawn = 0
    if owner_dir is not None:                   # the owner's copy first: a run the owner cannot check never lands
        drawn = inferringers.keep(owner_dir, out=args.out, run_id=run_id, fingerprint=ctx.fingerprint,
                                  preset=params.name, task=args.task, probability=args.ringers, batches=batches)
    with plain_session("encrypt-digits", args.master, args.conf) as spark:
        out = Output(Storage(spark), args.out, run_id)
        try:
            files = {"ciphertexts": _write_digits(spark, out, rows)}
            nbytes = sum(len(r["ct"]) for r in rows)
            manifest = RunManifest(
                job="encrypt", run_id=run_id, status="complete", created=started.isoformat(),
                finished=runinfo.now().isoformat(), input=f"sklearn-digits:{args.task}:test", output=args.out,
                layout=LAYOUT, strategy="fresh", security="ind-cpa", preset=params.name, params=params.to_json(),
                key_fingerprint=ctx.fingerprint, options={"task": args.task, "pack": bool(args.pack), "samples": n,
                                                 "infer_layout": str(layout) if layout else None,
                                                 "ringers": owner_dir is not None},
                counts=Counts(images_in=n, images_encrypted=n, ciphertexts=len(rows), ciphertext_bytes=nbytes),
                timings={"encrypt_seconds": enc_secs}, versions=runinfo.versions(), spark=spark_info(spark),
                files=files, checksums=table_checksums(files))
            out.commit(manifest, ["ciphertexts"])
        except BaseException:
            out.abort()
            raise
    print(f"encrypted {n} digits (task {args.task}) in the {_layout_label(layout, args.pack, n, params)} layout into {len(rows)} ciphertexts, {nbytes / 2**20:.1f} MB "
          f"({nbytes / n:,.0f} bytes per sample) in {enc_secs:.2f} s with {params.name}; key {ctx.fingerprint[:16]}")
    if owner_dir is not None:
        print(f"owner map {owner_dir}: {drawn} of the {n} digits are ringers (drawn in secret); "
              "decrypt --owner compares their results with the model's")
    return 0


#: Rows per row group of an encrypt-digits table (the checking pass of ``process`` reads a few row groups
#: per task: several tasks for a few hundred digits).
DIGITS_GROUP_ROWS = 64


def _write_digits(spark, out, rows: list[dict]) -> list[dict]:
    """The digits' ciphertext rows as the staged ``ciphertexts`` table of ``out``: one Parquet file written
    here with pyarrow (tasks.files.RowGroupWriter), so no ciphertext byte passes through the JVM; its
    entry as the manifest records it.  Spark's writer only on a path the workers' file systems cannot
    reach."""
    import uuid

    from tasks.files import RowGroupWriter

    directory = out.table("ciphertexts")
    try:
        fs, base = out.storage.access(directory).open(directory)
    except HepixError:
        driver_frame(spark, CIPHERTEXTS, rows).write.options(**PARQUET_OPTIONS["ciphertexts"]).mode(
            "overwrite").parquet(directory)
        return describe_table(spark, out.storage, directory, checksums=True)
    fs.create_dir(base, recursive=True)
    name = f"part-00000-{uuid.uuid4().hex[:8]}.parquet"
    writer = RowGroupWriter(fs, f"{base}/.{name}.tmp")
    try:
        for start in range(0, len(rows), DIGITS_GROUP_ROWS):
            writer.add(pa.RecordBatch.from_pylist(rows[start:start + DIGITS_GROUP_ROWS], schema=CIPHERTEXTS))
            writer.flush()
    finally:
        writer.close()
    fs.move(writer.path, f"{base}/{name}")
    return [{"name": name, "rows": writer.rows, "bytes": fs.get_file_info(f"{base}/{name}").size,
             "xxh3_xor": writer.xxh3_xor}]


def _encrypt_layout(args, params, task, n: int):
    """(layout, model): the layout ``--model``/``--layout`` ask for (None: the SIMD batches, packed with
    ``--pack``), printed with the chooser's estimates; the model trained as the server will (it is public)."""
    from hecore.infer import layouts
    from hecore.infer import models as infer

    if args.model is None:
        if args.layout:
            raise HepixError(f"--layout {args.layout} needs --model (logreg or tinycnn): the layout serves one model")
        return None, None
    if args.pack:
        raise HepixError("--pack and --model both choose a layout: leave --pack out (the chooser packs when it pays)")
    model = infer.train(args.model, task)
    try:
        if args.layout:
            layout = layouts.parse_layout(args.layout)
            layouts.check(layout, model, params, n)
            print(f"layout {layout} (forced by --layout) for {n} samples of {args.model} on {params.name}")
            return layout, model
        best = layouts.choose(model, params, n)
    except ValueError as e:
        raise HepixError(str(e)) from None
    others = ", ".join(f"{e.layout} ~{e.ms:,.1f} ms" for e in layouts.estimates(model, params, n)
                       if e.ms is not None and e.layout != best.layout)
    print(f"layout {best.layout} (chosen for {n} sample{'s' if n != 1 else ''} of {args.model} on {params.name}: "
          f"~{best.ms:,.1f} ms estimated{'; ' + others if others else ''})")
    return best.layout, model


def _layout_label(layout, pack: bool, n: int, params) -> str:
    from hecore.infer import encrypted, layouts

    if layout is not None:
        return str(layout)
    block = encrypted.block_for(min(n, params.slots), params.slots, pack)
    return str(layouts.Layout(layouts.BLOCK, block)) if block != params.slots else layouts.PIXEL


def _parent_layout(parent):
    """The layout an encrypt-digits run wrote (older runs: SIMD batches, packed with --pack)."""
    from hecore.infer import layouts

    name = parent.options.get("infer_layout")
    return layouts.parse_layout(name) if name else None


# --- process ---------------------------------------------------------------------------------

def _check_fits(op, model, params, pack: bool) -> None:
    """Refuse keys that cannot run the model, naming a preset that can (CKKS: levels; BFV: t)."""
    from hecore.infer.arithmetic import arithmetic
    from hecore.seal.params import PRESETS

    ar = arithmetic(params)
    if ar.serves(op, model, pack=pack):
        return
    # the smallest preset that fits, one of the keys' own scheme first
    works = sorted((p for p in PRESETS.values() if arithmetic(p).serves(op, model, pack=pack)),
                   key=lambda p: (p.scheme != params.scheme, p.n, p.total_bits))
    need = ar.need(op)
    hint = f"use keys made with `hepix keygen --preset {works[0].name}` ({works[0].describe()})" if works else \
        "no preset can"
    raise InvalidParameters(f"{op.spec} cannot run on {params.name}: needs {need}; {hint}")


def run_process(args, chain) -> int:
    """``hepix process --op infer:MODEL``: the model on encrypted digits, public keys only (``chain.infer``).

    The Python workers read, check and write everything: the checking pass sends each good row to its
    batch's bucket (tasks.infer.bucket_partition), then one task per bucket checks each kept batch's shape
    and runs the model on it, writing the head outputs itself (tasks.infer.infer_partition)."""
    from hecore.infer import models as infer
    from hecore.seal.params import Params

    op = chain.infer
    with open_run(args, "process", inputs=("encrypt",)) as run:
        parent = run.parent
        if parent.layout != LAYOUT:
            raise HepixError(f"{op.spec} runs on encrypted digits (`hepix encrypt-digits`), not on the "
                             f"{parent.layout} layout of {args.input}")
        if parent.options.get("task") != op.task:
            raise HepixError(f"{args.input} holds the digits task {parent.options.get('task')!r}, the op asks for "
                             f"task={op.task}; use infer:{op.model},task={parent.options.get('task')}")
        t0 = time.perf_counter()
        model = infer.train(op.model, infer.digits_task(op.task))
        train_secs = time.perf_counter() - t0
        params = Params.from_json(parent.params)
        pack = bool(parent.options.get("pack"))
        try:
            _check_fits(op, model, params, pack)
            if pack and op.model != "logreg":
                raise InvalidParameters(f"{args.input} was encrypted with --pack, which serves logreg only; "
                                        f"encrypt again without --pack for {op.model}")
            layout = _parent_layout(parent)
            if layout is not None:
                from hecore.infer import layouts

                layouts.check(layout, model, params, int(parent.options.get("samples") or 1))
        except ValueError as e:
            raise HepixError(str(e)) from None
        print(f"hepix process {run.run_id}: {args.input} -> {args.out}; {op.spec} (trained in {train_secs:.1f} s on "
              f"the public training split); key {run.fingerprint[:16]} (public only)")
        print(f"layout {_layout_label(layout, pack, int(parent.options.get('samples') or 1), params)} "
              f"(chosen when the digits were encrypted)")
        t0 = time.perf_counter()
        checked, parts = _bucketed_input(run)
        plan = InferPlan(parts=[], keep=[], spec=op.spec, run_id=run.run_id, layout=str(layout) if layout else None,
                         pack=pack, slots=params.slots)
        entries, misfit = _inferred(run, parts, checked.good_ids, plan, model)
        for batch_id, why in misfit:            # batches the layout cannot run: left out, each a rejects row
            checked.bad_images.add(batch_id)
            checked.rejects.append(reject_row(run.run_id, "process", "", "bad-batch", why, {"image_id": batch_id}))
        run.write_rejects(checked.rejects)
        secs = time.perf_counter() - t0
        files, checksums = run.describe({"ciphertexts": True, "rejects": False}, {"ciphertexts": [
            {k: e[k] for k in ("name", "rows", "bytes", "xxh3_xor")} for e in entries]})
        run.timings.update(train_seconds=train_secs, process_seconds=secs)
        n = sum(e["rows"] for e in entries)
        manifest = run.manifest(
            layout=LAYOUT, ops=[op.spec],
            options={**parent.options, "model": op.model, "binary": bool(model.binary),
                     "input_ciphertexts": parent.counts.ciphertexts, "input_bytes": parent.counts.ciphertext_bytes,
                     "encrypt_seconds": parent.timings.get("encrypt_seconds")},
            counts=Counts(images_in=checked.images, images_encrypted=checked.images - len(checked.bad_images),
                          images_rejected=len(checked.bad_images), rejects=len(checked.rejects),
                          ciphertexts=n, ciphertext_bytes=sum(e["ct_bytes"] for e in entries)),
            workers={"cache_rebuilds": len(run.rebuilds.value)}, files=files, checksums=checksums)
        run.commit(manifest, ["ciphertexts", "rejects"])
    print(f"{op.spec}: {parent.options.get('samples')} digits in {secs:.1f} s, {n} output ciphertexts"
          + (f"; {len(checked.bad_images)} batches rejected, listed in {args.out}/rejects/" if checked.rejects else ""))
    return exit_status(args, len(checked.rejects))


def _bucketed_input(run):
    """The checking pass, the workers reading the input's splits: every row checked and, in the same task,
    each good row sent to its batch's bucket (tasks.infer.bucket_partition).  The checked input, and where
    each bucket's rows are."""
    from tasks.exchange import EXCHANGED
    from tasks.infer import bucket_partition

    from .runtime.exchange import exchange_directory, kept_exchange
    from .runtime.sparktask import task_attempt

    exchanged, access = exchange_directory(run)
    work = functools.partial(bucket_partition, buckets=max(1, run.sc.defaultParallelism), directory=exchanged,
                             attempt=task_attempt, access=access, tasks=run.tasks)
    checked = run.checked_input("process", keys=run.keys.for_checks(), work=work, work_schema=EXCHANGED,
                                collect=True)
    reports = checked.df.to_pylist()
    return checked, kept_exchange(exchanged, [r for r in reports if r["file"] is not None], access)


def _inferred(run, parts: dict, good: list[str], plan, model) -> tuple[list[dict], list[tuple[str, str]]]:
    """The model run on every good batch by one task per bucket, each writing its head outputs itself
    (tasks.infer.infer_partition): the output table's entries as the manifest records them, and the
    batches whose rows are not a batch of the run's layout, with why, in id order."""
    import dataclasses

    from tasks.files import keep_reported, keep_schema
    from tasks.infer import INFERRED, infer_partition

    from .runtime.exchange import kept_buckets, task_plan
    from .runtime.sparktask import task_attempt

    directory, access = run.worker_directory("ciphertexts")
    buckets, keep = kept_buckets(run, good, parts)
    rows = []
    if buckets:
        plan = dataclasses.replace(plan, parts=[parts[b] for b in buckets],
                                   keep=[frozenset(keep[b]) for b in buckets])
        plan_bc, _ = run.broadcast(plan)
        bc, token = run.broadcast(run.keys)
        model_bc, _ = run.broadcast(model)
        fn = functools.partial(infer_partition, plan_broadcast=plan_bc, token=token, broadcast=bc,
                               model_broadcast=model_bc, exchanged=run.out.table("_exchange"), directory=directory,
                               attempt=task_attempt, access=access, rebuilds=run.rebuilds, tasks=run.tasks)
        rows = [r.asDict() for r in task_plan(run.spark, len(buckets), fn, INFERRED).collect()]
    misfit = sorted((r["batch"], r["detail"]) for r in rows if r["batch"] is not None)
    entries = keep_reported(directory, [r for r in rows if r["batch"] is None and r["file"] is not None], access)
    if not entries:                             # no output: the table still reads as one of its schema
        keep_schema(directory, access)
        entries = [{"name": n, "rows": 0, "bytes": b, "xxh3_xor": 0, "ct_bytes": 0}
                   for n, b in run.storage.list_files(directory).items()]
    return [{k: e[k] for k in ("name", "rows", "bytes", "xxh3_xor", "ct_bytes")} for e in entries], misfit


# --- decrypt ---------------------------------------------------------------------------------

def _batch_problem(rs: list[dict], task, slots: int, outputs: int | None, layout=None, pack: bool = False
                   ) -> str | None:
    """Why the rows of one batch of head outputs cannot be a batch this run made (its samples in the task,
    one row per output, the shape of the run's layout: :func:`shape_problem`), or None."""
    first = rs[0]
    n, start = first["h"], first["y"]
    if any((r["h"], r["y"], r["tile_h"], r["tile_w"]) != (n, start, first["tile_h"], first["tile_w"]) for r in rs):
        return "its rows disagree on the batch's samples"
    if not (1 <= n <= slots and 0 <= start and start + n <= len(task.y_test)):
        return f"samples {start}..{start + n - 1} are not in the task's {len(task.y_test)} test digits"
    if sorted(r["index"] for r in rs) != list(range(len(rs))) or (outputs is not None and len(rs) != outputs):
        return f"{len(rs)} head outputs with indices {sorted(r['index'] for r in rs)[:5]}"
    number = batch_number(first["image_id"])
    if number is None:
        return f"batch id {str(first['image_id'])[:80]!r} does not end in its number"
    return shape_problem(layout, pack, slots, number, n, start, first["tile_h"], first["tile_w"])


#: The largest |score| a head output may decrypt to: logits of 8x8 digits are far smaller; another key's
#: ciphertext, or a forged post_scale, gives far larger.
MAX_SCORE = 1e6


def _row_problem(r: dict, run, task_name: str, most_batches: int) -> tuple[str, str] | None:
    """Why one head-output row (without its bytes) is not one this run made, or None
    (:func:`tasks.infer.output_problem`, which the workers that decrypt run first)."""
    return output_problem(r, fingerprint=run.fingerprint, task=task_name, most_batches=most_batches)


def _checked_outputs(run, df, rejects: list[dict], task_name: str, most_batches: int, outputs: int):
    """The head-output rows of ``df`` by batch, streamed and checked one at a time: the good batches' rows
    (at most ``outputs`` each, one per index), the bad batch ids (a rejects row each, at most a few per
    batch), and how many rows were read.

    A row is checked here (:func:`_row_problem`, a repeated or unknown index) and its ciphertext by the
    keys' checker: here when the row holds it, or, for a row the workers decrypted (tasks.infer.OPENED),
    by their verdict; a file they could not read is a rejects row of its own."""
    from .runtime.inputcheck import RejectLog

    checker = None
    log = RejectLog(rejects)
    batches: dict[str, dict[int, dict]] = {}
    bad: set[str] = set()
    n = 0
    for r in df.toLocalIterator():
        r = r.asDict()
        if r.get("stage") == "file":            # a file that changed or could not be read after its footer's check
            log.add(reject_row(run.run_id, "decrypt", (r["file"] or "").rsplit("/", 1)[-1], r["reason"],
                               r["detail"]))
            continue
        n += 1
        iid = r["image_id"] if isinstance(r["image_id"], str) else ""
        problem = _row_problem(r, run, task_name, most_batches)
        if problem is None and (r["index"] in batches.get(iid, {}) or not 0 <= r["index"] < outputs):
            problem = ("duplicate-row", f"head output {r['index']} repeats or is not one of {outputs}")
        if problem is None and "ct" in r:
            checker = checker or run.keys.checker()
            p = checker.problem(r["ct"])
            problem = (p.reason, p.detail) if p else None
        elif problem is None and r.get("stage") == "ct":
            problem = (r["reason"], r["detail"])
        if problem is not None:
            log.add(reject_row(run.run_id, "decrypt", iid[:80], *problem,
                               {"image_id": iid[:80] or None, "index": r.get("index")}))
            bad.add(iid)
            batches.pop(iid, None)
            continue
        if iid not in bad:
            batches.setdefault(iid, {})[r["index"]] = r
    log.close(run.run_id, "decrypt")
    return {b: list(rs.values()) for b, rs in batches.items() if b not in bad}, bad, n


def _scores(rs: list[dict], per_sample: bool) -> np.ndarray:
    """The decrypted scores of a batch's head outputs (sorted by index), as the workers sent them: one
    sample's (one sample per ciphertext), or each output's samples side by side."""
    if per_sample:
        r = rs[0]
        values = np.asarray(r["scores"], dtype=np.float64)
        return values.reshape(r["score_rows"], -1) if r["score_rows"] and r["score_rows"] > 0 else values
    return np.stack([np.asarray(r["scores"], dtype=np.float64) for r in rs], axis=1)


def decrypt(run) -> int:
    """``hepix decrypt`` of an inference run (the key holder's side): head outputs -> predictions (with
    labels) and accuracy.  Every row is checked first (its key, SEAL's validation, the batch's samples
    within the task); a bad batch is a rejects row.  ``--flood-std`` floods the scores."""
    args, parent, params, run_id = run.args, run.parent, run.keys.params, run.run_id
    from hecore.ops.spec import run_kind

    if not (parent.ops and run_kind(parent.ops[-1]) == "infer"):
        raise HepixError(f"{args.input} holds encrypted digits no model has run on; "
                         "run `hepix process --op infer:MODEL` first")
    from hecore.infer import models as infer
    from hecore.infer.arithmetic import arithmetic

    op = infer.parse_infer(parent.ops[-1].partition(":")[2])
    ar = arithmetic(params)
    task = infer.digits_task(op.task)
    binary = task.n_classes == 2                        # the task's, never the manifest's word
    classes = 1 if binary else task.n_classes
    try:
        layout = _parent_layout(parent)
    except ValueError as e:
        raise HepixError(f"{args.input}: the manifest's infer_layout {parent.options.get('infer_layout')!r}: "
                         f"{e}") from None
    pack = bool(parent.options.get("pack"))
    per_sample = layout is not None and layout.per_sample
    outputs = 1 if per_sample else classes              # head-output rows per batch
    t0 = time.perf_counter()
    most_batches = len(task.y_test) if per_sample else -(-len(task.y_test) // params.slots)
    _, rejects, splits = run.input_table(max_rows=most_batches * outputs, with_splits=True)
    expect = OutputExpect(fingerprint=run.fingerprint, task=op.task, most_batches=most_batches,
                          layout=str(layout) if per_sample else None, classes=classes)
    if one_task(splits):                        # a few head outputs: the driver reads and decrypts them itself
        fn = functools.partial(decrypt_partition, token="", broadcast=None, expect=expect,
                               opener=(run.keys.context(), run.keys.checker()))
        opened = driver_rows(run, splits, CIPHERTEXTS, fn, OPENED)
    else:
        bc, token = run.broadcast(run.keys.for_decryption())
        fn = functools.partial(decrypt_partition, token=token, broadcast=bc, expect=expect, rebuilds=run.rebuilds,
                               tasks=run.tasks)
        opened = worker_rows(run, splits, CIPHERTEXTS, fn, OPENED)
    batches, bad, rows = _checked_outputs(run, opened, rejects, op.task, most_batches, outputs)
    checks = _ringer_checks(run, op, task, ar)
    preds, metrics = [], []
    for batch_id in sorted(batches):
        if batch_id in bad:
            continue
        rs = sorted(batches[batch_id], key=lambda r: r["index"])
        why = _batch_problem(rs, task, params.slots, outputs, layout, pack)
        if why is not None:
            rejects.append(reject_row(run_id, "decrypt", batch_id, "bad-batch", why, {"image_id": batch_id}))
            bad.add(batch_id)
            continue
        n, start = rs[0]["h"], rs[0]["y"]
        s = _scores(rs, per_sample)                 # decrypted by the workers, in the row's post_scale
        if s.shape != (n, classes):                 # what the rows' shape checks already make sure of
            rejects.append(reject_row(run_id, "decrypt", batch_id, "bad-batch",
                                      f"decrypts to {'x'.join(str(d) for d in s.shape)} scores, not {n} samples x "
                                      f"{classes}",
                                      {"image_id": batch_id}))
            bad.add(batch_id)
            continue
        if not np.all(np.abs(s) <= MAX_SCORE):
            rejects.append(reject_row(run_id, "decrypt", batch_id, "implausible-values",
                                      f"scores up to {float(np.nanmax(np.abs(s))):.3g}, beyond {MAX_SCORE:g}: "
                                      "not this model's (another key's ciphertext, or a forged scale)",
                                      {"image_id": batch_id}))
            bad.add(batch_id)
            continue
        if checks is not None:                     # the owner's ringers, on the values before any flooding
            why = checks.problem(batch_id, start, n, ar.finished(s, binary))
            if why is not None:
                rejects.append(reject_row(run_id, "decrypt", batch_id, "integrity", why, {"image_id": batch_id}))
                bad.add(batch_id)
                continue
        if args.flood_std:                         # before anything leaves the key owner: the scores too
            from hecore.flooding import flood

            s = flood(s, args.flood_std)
        s = ar.finished(s, binary)                 # BFV returns the score; the sigmoid line after decryption
        p = infer.predictions(s, binary)
        labels = task.y_test[start:start + n]
        for j in range(n):
            preds.append({"run_id": run_id, "batch_id": batch_id, "sample": start + j, "label": int(labels[j]),
                          "prediction": int(p[j]), "scores": [float(v) for v in s[j]], "model": op.model,
                          "task": op.task})
        metrics.append({"batch_id": batch_id, "samples": n, "correct": int((p == labels).sum()),
                        "process_seconds": float(sum(r["process_seconds"] for r in rs)),
                        "ringers": checks.ringers_of(batch_id) if checks is not None else None})
    if checks is not None:                      # what the owner encrypted and the run does not hold
        for batch_id in sorted(checks.batches - set(batches) - bad):
            rejects.append(reject_row(run_id, "decrypt", batch_id, "missing-image",
                                      f"batch {batch_id}, which the owner's encrypt-digits made, is not in the run",
                                      {"image_id": batch_id}))
            bad.add(batch_id)
    secs = time.perf_counter() - t0
    total = sum(m["samples"] for m in metrics)
    correct = sum(m["correct"] for m in metrics)
    opts = parent.options
    common = {"run_id": run_id, "model": op.model, "task": op.task, "scheme": params.scheme,
              "preset": params.name}
    rows_m = [{**common, **m, "accuracy": m["correct"] / m["samples"]} for m in metrics]
    rows_m.append({**common, "batch_id": "all", "samples": total, "correct": correct,
                   "accuracy": correct / max(1, total), "input_ciphertexts": opts.get("input_ciphertexts"),
                   "input_bytes": opts.get("input_bytes"),
                   "bytes_per_sample": (opts.get("input_bytes") or 0) / max(1, total),
                   "encrypt_seconds": opts.get("encrypt_seconds"),
                   "process_seconds": parent.timings.get("process_seconds"), "decrypt_seconds": secs,
                   "ringers": checks.checked if checks is not None else None})
    written = {name: write_table(run, name, schema, rs, PARQUET_OPTIONS[name]["compression"])
               for name, schema, rs in (("predictions", PREDICTIONS, preds), ("inference_metrics", INFERENCE_METRICS,
                                                                              rows_m))}
    run.write_rejects(rejects)
    run.timings["decrypt_seconds"] = secs
    files, checksums = run.describe({"predictions": False, "inference_metrics": False, "rejects": False},
                                    {name: e for name, e in written.items() if e is not None})
    manifest = run.manifest(counts=Counts(images_in=total, images_decrypted=total, ciphertexts=rows,
                                          images_rejected=len(bad), rejects=len(rejects)),
                            options={**parent.options, "flood_std": args.flood_std}, workers={}, files=files,
                            checksums=checksums)
    run.commit(manifest, ["predictions", "inference_metrics", "rejects"])
    print(table(rows_m, [("batch_id", "batch", ""), ("model", "model", ""), ("task", "task", ""),
                         ("preset", "preset", ""), ("samples", "samples", "d"), ("accuracy", "accuracy", ".4f"),
                         ("bytes_per_sample", "bytes/sample", ",.0f")]))
    if checks is not None:
        print(checks.summary())
    if rejects:
        print(f"{len(bad)} batches were not decrypted; the reasons are listed in {rejects_place(args)}")
    args.ringers_compared = checks.checked if checks is not None else 0     # what `hepix verify --owner` accepts on
    return exit_status(args, len(rejects))


def _ringer_checks(run, op, task, ar):
    """The owner's ringers of this run (:class:`jobs.runtime.inferringers.RingerCheck`), with the model the run
    names trained as the server trained it (public split, fixed seeds) and, under BFV/BGV, quantised for ``t``;
    None without ``--owner`` or with ``--no-integrity`` (a line says what goes unchecked)."""
    from hecore.infer import models as infer

    if run.owner is None:
        if run.parent.options.get("ringers"):
            print("not checked: this run's digits have ringers in the owner map encrypt-digits wrote; give it with "
                  "--owner DIR and decrypt compares their results with the model's")
        return None
    if run.args.no_integrity:
        print("not checked: --no-integrity leaves the owner's ringers uncompared; every batch is decrypted as if "
              "right")
        return None
    model = infer.train(op.model, task)
    return inferringers.RingerCheck.load(run.owner, task=op.task, model=model, quantised=ar.prepared(model))
