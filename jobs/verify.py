"""`hepix verify DST`: check a run's tables against its manifest, and report bad rows.

What is checked, from the manifest's file list (``files``) and checksums:

* every listed file exists with its recorded size (a truncated or replaced file is reported
  by name), and no unlisted file sits in a table directory (Spark readers would take it in);
* every ciphertext row's ``ct`` bytes still hash to its ``ct_xxh3`` (corrupted or truncated
  bytes are reported by row: image, channel, tile, index);
* per file, the row count and the XOR of the row checksums match the manifest;
* every row is one the run could have written (tasks/rowchecks.py): its key fingerprint, layout,
  parameters, ops and geometry are the run's, its image id has hepix's form, and SEAL accepts its
  ciphertext (checked against the parameters alone: verify needs no key);
* no (image, channel, tile, index) key appears twice, and every image has all its ciphertexts.

The same row checks run before ``process``, ``decrypt`` and ``audit`` do any work: they leave out the
images with bad rows and list those rows in their own rejects table.
Problems are printed (the first few) and, with ``--rejects DIR``, written as a rejects table;
the exit status is 1 when anything is wrong, 0 when the table is whole.

With ``--owner`` (and the owner's ``--keys``), verify then runs the owner's spot checks alone: ``hepix decrypt
--spots-only`` into a temporary directory (removed after), which decrypts only the ciphertexts holding values
the checks compare.  A run whose every image passes can be accepted before a full decrypt; the exit status
is 1 when an image fails, is rejected, or has nothing to check.  A match or an inference run is checked by its
ringers, which compare whole results: the run is decrypted into the temporary directory, and the exit status
is 1 unless every ringer agrees, at least one was compared, and nothing was rejected (``--images``: the
originals, where a match's query is read when it is no ringer).  What the checks rejected is listed in verify's
output.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile

from hecore.errors import HepixError
from hecore.schemes import scheme_for_preset
from schemas.footers import FooterChecker, FooterLimits, footer_bytes
from schemas.stages import CHECKED
from schemas.tables import TABLES, spark_schema
from tasks.rowchecks import KEY, RowExpect, check_partition
from tasks.splits import SplitSource, plan_tasks, splits_of

from .runtime import runinfo
from .runtime.inputcheck import first_rejects, image_problems, image_summaries, split_plan
from .runtime.runs import add_spark_arguments
from .runtime.session import plain_session
from .runtime.storage import Storage, inside, join, read_manifest
from .runtime.tablefiles import write_rejects

log = logging.getLogger(__name__)

#: Keys found more than once that verify lists one by one (the first ones; the rest are not listed).
MAX_DUPLICATES_SHOWN = 1000


# --- the command ----------------------------------------------------------------------------------

def add_arguments(p) -> None:
    p.add_argument("dst", metavar="DST", help="output directory of encrypt or process (local, file:// or hdfs://)")
    p.add_argument("--rejects", metavar="DIR", help="also write the problems found as a rejects table here")
    p.add_argument("--show", type=int, default=20, help="problems to print (default %(default)s)")
    p.add_argument("--owner", metavar="DIR", help="the owner map encrypt wrote: also run the owner's spot checks, "
                   "decrypting only the ciphertexts they read (needs --keys; `hepix decrypt --spots-only`); of a "
                   "match or an inference run, its ringers, decrypting its results in a temporary directory")
    p.add_argument("--keys", help="with --owner: the owner's key directory, with the secret key")
    p.add_argument("--images", metavar="DIR", help="with --owner, of a match run: the originals as given to encrypt, "
                   "where the query's is read to check the ringers' distances when the query is not a ringer itself")
    add_spark_arguments(p)


def problem(run_id: str, source: str, reason: str, detail: str, **key) -> dict:
    return {"run_id": run_id, "source": source, "stage": "verify", "reason": reason, "detail": detail,
            "bytes": key.pop("bytes", None), **{k: key.get(k) for k in KEY}}


def table_schema(job: str, table: str):
    """The schema of ``table`` as ``job`` writes it (None for a table hepix does not describe): a match's
    ``process`` writes its distances encrypted, ``decrypt`` in the clear."""
    return TABLES.get("encrypted_distances" if (job, table) == ("process", "distances") else table)


def verify_table(spark, storage: Storage, directory: str, table: str, entries: list[dict],
                 run_id: str, expect: RowExpect | None = None, job: str = "") -> tuple[list[dict], dict]:
    """Problems in one table of a run (written by ``job``), and what was checked."""
    from pyspark.sql import functions as F

    path = join(directory, table)
    present = storage.list_files(path)
    problems, good, splits = [], [], []
    listed = {e["name"]: e for e in entries}
    schema = table_schema(job, table)
    footers = FooterChecker(schema)
    # a table of ciphertext rows (the images', a match's encrypted distances): rows up to the preset's largest
    largest = (scheme_for_preset(expect.preset).keyless_checker(expect.preset).max_bytes
               if expect is not None and schema is not None and "ct" in schema.names else 0)
    for name, e in sorted(listed.items()):
        size = present.get(name)
        if size is None:
            problems.append(problem(run_id, join(path, name), "missing-file",
                                    f"{name} is listed in the manifest ({e['rows']} rows) but not in {path}"))
            continue
        where = join(path, name)
        if size != e["bytes"]:
            problems.append(problem(run_id, where, "file-size-mismatch",
                                    f"{name} has {size} bytes, the manifest says {e['bytes']} (truncated or "
                                    "replaced); what can still be read of it is checked row by row", bytes=size))
        footer = footer_bytes(size, lambda at, n, where=where: storage.read_at(where, at, n))
        why = (("unreadable-file", footer) if isinstance(footer, str) else
               footers.footer_problem(size, footer, FooterLimits.for_table(table, e["rows"], largest)))
        if why is not None:               # never handed to a reader: its footer would size what it reads
            problems.append(problem(run_id, where, why[0], f"{name}: {why[1]}", bytes=size))
        else:
            good.append(name)
            splits += splits_of(where, size, footer)
    footers.close()
    for name in sorted(set(present) - set(listed)):
        problems.append(problem(run_id, join(path, name), "unlisted-file",
                                f"{name} is in {path} but not in the manifest (left by a failed run, or added "
                                "later); readers of the directory would take its rows in", bytes=present[name]))
    summary = {"table": table, "files": len(listed), "files_ok": len(good), "rows": 0}
    if not good:
        return problems, summary
    if table != "ciphertexts":        # a table without ciphertext rows to check: row counts per file only
        # A file Parquet cannot read (cut short, overwritten) is skipped, not fatal: its rows then count 0.
        reader = spark.read.option("ignoreCorruptFiles", "true")
        if schema is not None:              # no schema inference from a footer that may be the broken one
            reader = reader.schema(spark_schema(schema))
        df = reader.parquet(*[inside(path, n) for n in good])
        counts = {r["f"].rsplit("/", 1)[-1]: r["n"] for r in
                  df.groupBy(F.input_file_name().alias("f")).agg(F.count("*").alias("n")).collect()}
        for name in good:
            if counts.get(name, 0) != listed[name]["rows"]:
                problems.append(problem(run_id, join(path, name), "row-count-mismatch",
                                        f"{name} has {counts.get(name, 0)} rows, the manifest says "
                                        f"{listed[name]['rows']}"))
        summary["rows"] = sum(counts.values())
        return problems, summary
    bc = spark.sparkContext.broadcast(None)
    token = f"verify/{bc._jbroadcast.id()}"
    # the Python workers read the ciphertexts (a file that cannot be read counts fewer rows, reported below)
    source = SplitSource(splits, storage.access(path), TABLES[table],
                         plan_tasks(splits, spark.sparkContext.defaultParallelism))
    checked = split_plan(spark, source, lambda it: check_partition(source.rows(it, []), expect=expect, token=token,
                                                                    broadcast=bc), spark_schema(CHECKED)).persist()
    try:
        images = image_summaries(checked)
        problems += first_rejects(checked, images, run_id=run_id, stage="verify")[0]
        per_file = {r["f"].rsplit("/", 1)[-1]: r for r in checked.groupBy(F.col("file").alias("f")).agg(
            F.count("*").alias("n"), F.bit_xor(F.coalesce("stored", F.lit(0).cast("long"))).alias("x")).collect()}
        for name in good:
            got = per_file.get(name)
            n, x = (got["n"], got["x"]) if got else (0, 0)
            if n != listed[name]["rows"]:
                why = " (unreadable: truncated or corrupted)" if n == 0 else ""
                problems.append(problem(run_id, join(path, name), "unreadable-file" if n == 0 else "row-count-mismatch",
                                        f"{name} has {n} readable rows{why}, the manifest says {listed[name]['rows']}"))
            elif x != listed[name].get("xxh3_xor", x):
                problems.append(problem(run_id, join(path, name), "checksum-sum-mismatch",
                                        f"{name}: the XOR of its row checksums is {x}, the manifest says "
                                        f"{listed[name]['xxh3_xor']} (rows replaced)"))
        summary["rows"] = sum(r["n"] for r in per_file.values())
        for r in checked.groupBy(*KEY).agg(F.count("*").alias("n"), F.first("file").alias("file")) \
                .where(F.col("n") > 1).limit(MAX_DUPLICATES_SHOWN).collect():
            problems.append(problem(run_id, (r["file"] or "").rsplit("/", 1)[-1], "duplicate-row",
                                    f"image {r['image_id']}: channel {r['channel']}, tile ({r['tile_y']}, "
                                    f"{r['tile_x']}), index {r['index']} appears {r['n']} times",
                                    **{k: r[k] for k in KEY}))
        bad_ids = {p["image_id"] for p in problems if p.get("image_id")}
        for s in images:
            if s.image_id is None or s.image_id in bad_ids or s.keys != s.rows:
                continue                 # already reported row by row
            found = image_problems(s)
            if found is not None:
                problems.append(problem(run_id, (s.file or "").rsplit("/", 1)[-1], found[0],
                                        f"image {s.image_id}: {found[1]}", image_id=s.image_id))
        summary["images"] = len(images)
    finally:
        checked.unpersist()
    return problems, summary


def owner_checks(args, kind: str) -> int:
    """The owner's checks of ``args.dst`` (a run holding ``kind``: ``jobs.cli.input_kind``), in a temporary
    directory removed afterwards: 0 when they accept the run, else 1.

    An image run: ``hepix decrypt --spots-only`` with the owner's map and keys, which decrypts only the
    ciphertexts holding values the spot checks compare.  A match or an inference run: its ringers compare whole
    results (an image's distances, a batch's head outputs), so the run is decrypted as ``hepix decrypt`` does
    it (``--images``: the query's original, when it is no ringer), and accepted when nothing was rejected and at
    least one ringer was compared.  What either rejected is printed (:func:`show_rejects`) before the directory
    goes."""
    from .cli import IMAGES, absolute_paths, build_parser, decrypt

    spots = kind == IMAGES
    if spots and getattr(args, "images", None):
        raise HepixError(f"--images: {args.dst} holds images, whose spot checks compare with the samples the owner "
                         "map keeps; the originals are read for a match run's query: drop --images")
    where = tempfile.mkdtemp(prefix="hepix-verify-")
    out = os.path.join(where, "spots" if spots else "ringers")
    try:
        argv = ["decrypt", "--keys", args.keys, "--input", args.dst, "--out", out, "--owner", args.owner]
        argv += ["--spots-only"] if spots else []
        argv += [a for flag, value in (("--master", args.master), ("--conf", args.conf),
                                       ("--images", getattr(args, "images", None))) if value
                 for a in (flag, value)] + (["--quiet"] if args.quiet else [])
        checks = build_parser().parse_args(argv)
        absolute_paths(checks)
        checks.rejects_shown = "the list below (verify's directory is temporary)"
        checks.fail_on_rejects = not spots          # ringers: a batch or an image rejected, whatever the reason: 1
        status = decrypt(checks)
        show_rejects(out, args.show)
        if spots:
            return status
        compared = getattr(checks, "ringers_compared", 0)
        accepted = status == 0 and compared > 0
        print("verdict: " + (f"every one of the {compared} ringers agrees with the owner's copies" if accepted else
                             "not accepted: " + ("no ringer was compared (encrypt with --ringers P keeps some)"
                                                 if status == 0 else "a ringer disagrees or a result was rejected")
                             + "; decrypt in full only what you trust, or run the job again"))
        return 0 if accepted else 1
    finally:
        shutil.rmtree(where, ignore_errors=True)


def show_rejects(out: str, most: int) -> None:
    """Print the first ``most`` rows of the rejects table a decrypt in verify's temporary directory wrote at
    ``out`` (the image or batch, the reason and its detail), before the directory is removed."""
    import pyarrow.dataset as ds

    path = os.path.join(out, "rejects")
    if not os.path.isdir(path):
        return
    rows = ds.dataset(path, format="parquet").to_table().to_pylist()
    for r in rows[:most]:
        print(f"  rejected: {r.get('source') or r.get('image_id') or '-'}: {r.get('reason')}: "
              f"{str(r.get('detail') or '')[:300]}")
    if len(rows) > most:
        print(f"  ... and {len(rows) - most} more (--show N prints more)")


def run(args) -> int:
    from .runtime import places

    if bool(args.owner) != bool(args.keys):
        raise HepixError("--owner and --keys go together: the spot checks decrypt with the owner's secret key and "
                         "compare with the samples in the owner map")
    run_id = runinfo.new_run_id()
    if args.rejects:          # a new or empty directory outside the run, the keys and the owner map
        places.check_new_out(args.rejects, "--rejects")
        places.check_location(args.rejects, "--rejects", places.guarded(input=args.dst))
    with plain_session("verify", args.master, args.conf) as spark:
        storage = Storage(spark)
        if args.rejects:
            places.check_new_out(args.rejects, "--rejects", exists=storage.exists, entries=storage.names,
                                 is_file=storage.is_file)
        manifest = read_manifest(storage, args.dst)
        if manifest is None:
            raise HepixError(f"{args.dst} has no _manifest.json: not the output of a hepix run, or its first "
                             "batch never finished; nothing to verify against")
        if not manifest.files:
            raise HepixError(f"the manifest of {args.dst} ({manifest.job}, {manifest.run_id}) lists no files: it "
                             "was written before hepix recorded checksums; rerun the job to get one")
        problems, summaries = [], []
        expect = RowExpect.from_manifest(manifest)
        for table, entries in sorted(manifest.files.items()):
            found, summary = verify_table(spark, storage, args.dst, table, entries, run_id, expect,
                                          job=manifest.job)
            problems += found
            summaries.append(summary)
            want = manifest.checksums.get(table, {}).get("rows")
            if want is not None and summary["rows"] != want and summary["files_ok"] == summary["files"]:
                problems.append(problem(run_id, join(args.dst, table), "row-count-mismatch",
                                        f"{table} has {summary['rows']} rows, the manifest says {want}"))
        if manifest.status != "complete":
            problems.append(problem(run_id, args.dst, "incomplete-run",
                                    f"the run is {manifest.status}: only the batches listed are checked; rerun "
                                    f"`hepix {manifest.job}` with the same arguments to finish it"))
        if args.rejects:
            write_rejects(spark, problems, args.rejects)
    for s in summaries:
        print(f"{s['table']}: {s['files_ok']} of {s['files']} files as listed, {s['rows']} rows"
              + (f", {s['images']} images" if "images" in s else ""))
    for p in problems[: args.show]:
        print(f"  {p['reason']}: {p['detail']}")
    if len(problems) > args.show:
        print(f"  ... and {len(problems) - args.show} more" + (f" (all in {args.rejects})" if args.rejects else ""))
    verdict = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"hepix verify {args.dst}: {manifest.job} run {manifest.run_id}, {manifest.status}: {verdict}")
    if args.owner:
        from .cli import IMAGES, input_kind

        kind = input_kind(manifest)
        print("the owner's spot checks (decrypting only the ciphertexts they read):" if kind == IMAGES else
              f"the owner's ringers (the run's {kind} decrypted in a temporary directory, removed after):")
        return max(owner_checks(args, kind), 0 if not problems else 1)
    return 0 if not problems else 1


