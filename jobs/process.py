"""`hepix process`: operations on ciphertexts, with public keys only.

Runs where the data owner's secret must never be: it refuses a key directory
that holds a secret key, and checks the input's key fingerprint before any
work, and checks that the key's parameters can run the ops (the planner
names a preset that can when they cannot).  It reads exactly the files the
input's manifest lists and checks every row before it is used (tasks/rowchecks.py): a row
SEAL refuses, or of the wrong size, parameters or key, is a rejects row and
its image is left out; the rest is processed.  A ciphertext is read, checked,
processed and written in one task by the Python workers (local paths, a
shared mount or hdfs://: no ciphertext byte passes through the JVM; SEAL loads
it once, for its check, and the chain takes it from there), the images are
judged from what each task sums its checked rows up to, and the images found
bad are taken out of the written files afterwards (:func:`process_in_one_pass`).
The workers are started and their keys loaded while the driver checks the
input's footers (jobs/runtime/warmup.py).  The pixel layout's mean filter, which needs
a shuffle, scatters in the reading task and sums its windows after Spark's
shuffle, where the tasks write the files.

Pixel layout: pointwise ops (brightness, contrast, watermark) are one pass
over the rows; the mean filter sends each ciphertext to its tile and to the
neighbour tiles whose halo needs it, then sums each output window per tile.
Packed layout: every op works within one ciphertext (the tile carries its
halo), so the whole chain is one pass over the rows.
"""
from __future__ import annotations

import functools
import time

import pyarrow as pa

from hecore.errors import HepixError
from schemas.manifest import Counts
from schemas.stages import HALO_COLUMNS, WRITTEN
from schemas.tables import CIPHERTEXTS, spark_schema
from tasks.files import drop_images, keep_reported, keep_schema, rows_to_file, work_to_file
from tasks.process import (
    GROUP_FUNCTIONS,
    GROUP_KEYS,
    chain_partition,
    chain_state,
    chained,
    regroup_kind,
    row_steps,
    rows_out,
    scatter_step,
    split_chain,
)

from .runtime.progress import Progress
from .runtime.runs import (
    add_reject_arguments,
    add_spark_arguments,
    check_recordable_ops,
    exit_status,
    open_run,
    table_function,
)
from .runtime.sparktask import task_attempt
from .runtime.tablefiles import describe_files


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="PUBLIC key directory (one with secret.key or TFHE's client.key "
                        "is refused)")
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` (or of process)")
    p.add_argument("--out", required=True, help="output directory for the processed ciphertexts")
    p.add_argument("--op", action="append", required=True, metavar="SPEC",
                   help="brightness:B, contrast:F, watermark:X,Y,V, meanfilter:K, conv:NAME or "
                        "conv:W1,...,W9[/D] (NAME gauss3, gauss5, sharpen, sobel-x, sobel-y, laplace; 9 or 25 "
                        "integer weights, row-major), grey (RGB to one channel) or "
                        "dftfilter:lowpass=R[,levels=L][,stages=fold|three|circulant] (CKKS, packed, halo 0: "
                        "a low-pass filter per tile through the encrypted DFT); repeat to chain, applied "
                        "in order. Or, alone: match:QUERY[,l2|,l1] -- encrypted distances from the image QUERY "
                        "(its id or file name) to every other image; or, alone, on `hepix encrypt-digits` "
                        "output: infer:MODEL[,task=01|all] with MODEL logreg or tinycnn. With TFHE keys: "
                        "brightness:B (saturating at 0 and 255), brightness-wrap:B, threshold:T, min:C, max:C, "
                        "lut:gamma-G|stretch-LO-HI|invert|hex-... (exact, server key only)")
    add_spark_arguments(p)
    add_reject_arguments(p)


def check_ops_fit(df, ops, sizes: dict | None = None) -> None:
    """Refuse ops that do not fit some image (a watermark outside it), naming the images: the images of
    ``sizes`` (id -> (width, height), as the checking tasks summed them up), else of the rows ``df``."""
    # the ops that can miss an image: those that miss a 1x1 one (TFHE's and the tables' ops never do)
    marks = [op for op in ops if hasattr(op, "misfit") and op.misfit(1, 1)]
    if not marks:
        return
    if sizes is not None:
        sizes = [{"image_id": i, "image_width": w, "image_height": h} for i, (w, h) in sorted(sizes.items())]
    else:
        sizes = df.select("image_id", "image_width", "image_height").distinct().collect()   # no ct column read
    for op in marks:
        outside = [r for r in sizes if op.misfit(r["image_width"], r["image_height"])]
        if outside:
            shown = ", ".join(f"image {r['image_id']} ({r['image_width']}x{r['image_height']})" for r in outside[:3])
            more = f" and {len(outside) - 3} more" if len(outside) > 3 else ""
            raise HepixError(f"{op.spec} does not fit {len(outside)} image(s): {shown}{more} "
                             f"({op.misfit(outside[0]['image_width'], outside[0]['image_height'])}); choose a pixel "
                             "inside every image")


def planned_ops(run, ops) -> list:
    """``ops`` checked against the input run and the keys by the keys' scheme
    (:meth:`hecore.schemes.base.Scheme.check_chain`): for CKKS/BFV/BGV the parameters run the whole chain
    (the planner names a preset that can when they cannot), a packed chain fits the tiles' halo and a
    frequency-domain filter gets the input's tile; for TFHE the input holds these keys' pixel ciphertexts
    and TFHE ops."""
    parent = run.parent
    try:
        ops = run.keys.scheme.check_chain(run.keys.params, list(parent.ops), ops, layout=parent.layout,
                                          options=dict(parent.options), preset=parent.preset)
    except ValueError as e:
        raise HepixError(str(e)) from None
    lacking = run.keys.lacks_for(ops, parent.layout, dict(parent.options))
    if lacking:
        raise HepixError(lacking)
    if parent.options.get("bound_slots"):
        from hecore.ops.spec import is_table_chain

        if not is_table_chain([o.spec for o in ops]):
            raise HepixError(f"{run.args.input} holds its pixels among keyed check slots that bind it to the chain "
                             f"of 8-bit tables declared at encrypt: {' | '.join(o.spec for o in ops)} is not such a "
                             "chain (a window or a product would mix the slots); encrypt with --no-bind (or --for-op "
                             "this chain) for it")
    elif parent.options.get("bound"):
        from hecore.binding import strides, why_not

        why = why_not(ops, blocks=bool((parent.options.get("settings") or {}).get("bind_spread")),
                      strided=bool(parent.options.get("bound_offsets")))
        if why:
            raise HepixError(f"{run.args.input} was encrypted with --bind: {why}; encrypt without --bind for "
                             "this chain" if not parent.options.get("bound_offsets") else
                             f"{run.args.input} holds keyed offsets that bind it to the chain declared at encrypt: "
                             f"{why}; encrypt with --no-bind (or --for-op this chain) for it")
        halo = parent.options.get("halo")
        if parent.options.get("bound_offsets") and halo and strides(ops) > 1:
            raise HepixError(f"{run.args.input} holds keyed offsets that bind it to the chain declared at encrypt, "
                             f"on tiles with a halo of {halo}: a downsample's blocks would not line up with their "
                             "check; encrypt with --no-bind for this chain")
    return ops


def process_work(run, ops):
    """The whole chain as one partition function (ciphertext rows in, CIPHERTEXTS rows out), or None when
    it needs a shuffle (the pixel layout's mean filter): :func:`tasks.process.chain_partition`."""
    bc, token = run.broadcast(run.keys)
    return chain_partition(run.keys.scheme, run.parent.layout, [o.spec for o in ops], token=token, broadcast=bc,
                           run_id=run.run_id, rebuilds=run.rebuilds, tasks=run.tasks)


def work_states(run) -> tuple:
    """What the chain's tasks build from the broadcast keys (:func:`tasks.process.chain_state`), for the
    warm-up that builds it while the driver checks the footers."""
    bc, token = run.broadcast(run.keys)
    return ((token, bc, chain_state(run.keys.scheme, run.parent.layout)),)


HALO_SCHEMA = pa.schema(list(CIPHERTEXTS) + [pa.field(name, type_, nullable=False) for name, type_ in HALO_COLUMNS])


def shuffle_steps(run, ops):
    """For a chain with an op that brings rows together (:func:`tasks.process.split_chain`: a windowed op in
    the pixel layout, grey in any): the work of the reading task -- the ops before it, row by row, then the
    scatter it needs (a windowed op's: each ciphertext sent to its tile and to the neighbour tiles whose halo
    needs it) --, the schema of its rows, and a function turning those rows (a Spark DataFrame) into the
    Spark plan of the rest: each group of rows summed, then the ops that follow, cut the same way."""
    layout = run.parent.layout
    bc, token = run.broadcast(run.keys)
    common = dict(token=token, broadcast=bc, run_id=run.run_id, rebuilds=run.rebuilds)
    schema, halo_schema = spark_schema(CIPHERTEXTS), spark_schema(HALO_SCHEMA)
    stages = split_chain(layout, [o.spec for o in ops])

    def steps(local, group):
        """The row-by-row ops and the scatter before ``group``: (partition function, schema of its rows)."""
        parts = [(row_steps(layout, local, tasks=run.tasks, **common), schema)]
        if group is not None:
            parts.append((scatter_step(layout, group), halo_schema))
        return [(fn, out) for fn, out in parts if fn is not None]

    reading = steps(*stages[0])

    def rest(df):
        for i, (local, group) in enumerate(stages):
            for fn, out in steps(local, group) if i else ():
                df = df.mapInArrow(fn, out)
            if group is not None:
                kind = regroup_kind(layout, group)
                df = (df.groupBy(*GROUP_KEYS[kind])
                      .applyInArrow(table_function(GROUP_FUNCTIONS[kind], spec=group, **common), schema))
        return df

    reading_schema = HALO_SCHEMA if reading and reading[-1][1] is halo_schema else CIPHERTEXTS
    return functools.partial(chained, steps=[fn for fn, _ in reading]), reading_schema, rest


def process_in_one_pass(run, expect, ops):
    """Read, check, process and write every ciphertext in one pass, the Python workers reading their input
    split and writing the Parquet files (:func:`jobs.runtime.inputcheck.inspect_rows` with the chain as its
    work); the checked input and the written files' entries as the workers reported them (None when they
    must be described again: images were taken out of them).

    A chain without a shuffle writes in the reading task (:func:`tasks.files.work_to_file`), each row group
    of one image; the rows of the images found bad are then taken out of the written files.  The checks
    and the work share the keys' broadcast (one SEAL context per worker: the work takes the ciphertexts the
    checks loaded), and the images are judged from the tasks' summaries.  The pixel layout's mean filter
    (:func:`shuffle_steps`) scatters in the reading task; the good images' rows then go through Spark's
    shuffle and the tasks after it write the files."""
    work = process_work(run, ops)
    directory, access = run.worker_directory("ciphertexts")
    shared = run.broadcast(run.keys)
    if work is not None:
        checked = run.checked_input("process", expect, keys=run.keys, work_schema=WRITTEN, broadcast=shared,
                                    collect=True, states=work_states(run),
                                    work=functools.partial(work_to_file, work=work, directory=directory,
                                                           attempt=task_attempt, access=access, by_image=True))
        written = checked.df.to_pylist()
    else:
        reading, reading_schema, rest = shuffle_steps(run, ops)
        checked = run.checked_input("process", expect, keys=run.keys.for_checks(), work=reading,
                                    work_schema=reading_schema)
        written = rest(checked.df).mapInArrow(functools.partial(rows_to_file, directory=directory,
                                                                attempt=task_attempt, access=access),
                                              spark_schema(WRITTEN)).collect()
    try:
        entries = keep_reported(directory, written, access)
    finally:
        checked.release()
    reported = entries
    if checked.bad_images and work is not None:
        drop_images(directory, [e["name"] for e in entries], checked.bad_images, access)
        reported = None
    keep_schema(directory, access)
    check_ops_fit(None, ops, checked.sizes)
    return checked, reported


def _options_after(parent, ops) -> dict:
    """The input's options, its tile as the output rows hold it (a packed downsample shrinks it)."""
    from hecore.layouts import Layout
    from hecore.ops.spec import recorded_tile

    options = dict(parent.options)
    if options.get("tile"):
        options["tile"] = list(recorded_tile([o.spec for o in ops], parent.preset, options["tile"],
                                             Layout.parse(parent.layout).packed))
    return options


def run(args, chain) -> int:
    """``hepix process`` with image ops (``chain``: :func:`hecore.ops.spec.parse_chain` of ``--op``)."""
    from pyspark.sql import functions as F

    from hecore.layouts import Layout
    from schemas.manifest import MAX_OPS

    if len(chain.ops) > MAX_OPS:                    # before any session: no run records such a chain
        raise HepixError(f"--op: {len(chain.ops)} ops, more than the {MAX_OPS} a run records (every reader "
                         f"refuses a longer chain); give at most {MAX_OPS}")
    with open_run(args, "process") as run:
        parent = run.parent
        ops = planned_ops(run, list(chain.ops))
        check_recordable_ops(parent, [o.spec for o in ops])        # a run its readers accept, before any work
        print(f"hepix process {run.run_id}: {args.input} -> {args.out}; ops {' | '.join(o.spec for o in ops)}; "
              f"key {run.fingerprint[:16]} ({run.keys.scheme.public_keys} only)")
        with Progress(run.spark, "process", enabled=not args.quiet) as progress:
            expect = run.expectation(fixed_format=not Layout.parse(parent.layout).packed)
            t0 = time.perf_counter()
            progress.stage("checking and processing the input rows")
            checked, reported = process_in_one_pass(run, expect, ops)
            run.timings["process_seconds"] = time.perf_counter() - t0
            run.write_rejects(checked.rejects)
            if reported is not None and reported:
                # the files as the workers reported them (each checked against what the driver sees), and the
                # images they hold: every good image, no other (no second read of the table)
                described = [{k: e[k] for k in ("name", "rows", "bytes", "xxh3_xor")} for e in reported]
                images, ct_bytes = len(checked.good_ids), sum(e["ct_bytes"] for e in reported)
            else:
                # the files, their rows and checksums, and the images they hold, in one read of the small
                # columns; the ciphertext bytes in a read of every ``ct`` value (images were taken out of the
                # files, or Spark wrote them)
                described, images = describe_files(run.spark, run.storage, run.out.table("ciphertexts"),
                                                   checksums=True, count_distinct="image_id")
                written = run.spark.read.parquet(run.out.table("ciphertexts"))
                ct_bytes = int(written.agg(F.sum(F.length("ct"))).collect()[0][0] or 0)
            files, checksums = run.describe({"ciphertexts": True, "rejects": False}, {"ciphertexts": described})
        counts = Counts(images_in=checked.images, images_encrypted=images,
                        images_rejected=len(checked.bad_images), ciphertexts=checksums["ciphertexts"]["rows"],
                        ciphertext_bytes=ct_bytes, rejects=len(checked.rejects))
        want = rows_out(parent.layout, [o.spec for o in ops], parent.preset, checked.shapes)
        if counts.ciphertexts != want:
            raise HepixError(f"internal error: {checked.rows} ciphertexts in ({checked.bad_image_rows} of them left "
                             f"out with their images), {counts.ciphertexts} out where the chain leaves {want}; "
                             "nothing was committed")
        manifest = run.manifest(ops=list(parent.ops) + [o.spec for o in ops], counts=counts, files=files,
                                checksums=checksums, strategy=run.keys.scheme.processed_strategy(parent.strategy),
                                options=_options_after(parent, ops))
        run.commit(manifest, ["ciphertexts", "rejects"])
    secs = run.timings["process_seconds"]
    print(f"processed {counts.ciphertexts} ciphertexts of {counts.images_encrypted} images in {secs:.1f} s "
          f"({counts.ciphertexts / secs:,.1f} ciphertexts/s); ops now: {' | '.join(manifest.ops)}")
    if checked.rejects:
        print(f"{len(checked.rejects)} ciphertext rows or images failed their checks; {len(checked.bad_images)} "
              f"images were left out and the reasons are listed in {args.out}/rejects/")
    return exit_status(args, len(checked.rejects))
