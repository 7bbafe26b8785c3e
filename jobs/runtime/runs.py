"""The one preamble and commit of the jobs that read a run and write another.

``process`` (and matching and inference) and ``decrypt`` all start the same way -- keys, fingerprint, run
id, session, staged output, the input's complete manifest, the same key -- and end the same way: a
manifest that records what was done, written after the tables are in place.  :func:`open_run` does the
first, :meth:`Run.manifest` and :meth:`Run.commit` the second; a job's ``run()`` keeps only what it does.

The input came from the cluster, so the preamble trusts none of it: the manifest is validated
(schemas.manifest), the job reads exactly the files it lists (:meth:`Run.input_table`, each inside the
table's directory), and every row is checked before use (:meth:`Run.checked_input`, jobs/runtime/inputcheck.py):
a bad row is a rejects row and its image is left out.  The owner's jobs (``secret=True``) run in a
:func:`jobs.runtime.session.secret_session`.
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from hecore.errors import HepixError, KeyDirectoryError
from hecore.schemes import SECRET_FILES
from hecore.seal.keys import check_fingerprint
from schemas.manifest import RunManifest
from tasks.worker import ListAccumulator

from . import runinfo
from .frames import driver_frame
from .session import spark_info
from .storage import Output, Storage, listed_paths, read_manifest

log = logging.getLogger(__name__)


def add_spark_arguments(p) -> None:
    p.add_argument("--master", help="Spark master URL (default local[*]; ignored under spark-submit)")
    p.add_argument("--conf", metavar="FILE", help="Spark settings in spark-defaults.conf format")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def add_reject_arguments(p) -> None:
    p.add_argument("--fail-on-rejects", action="store_true",
                   help="exit 1 when any input row or image was rejected (the job still finishes and writes "
                        "what was good, and the rejects table)")


def rejects_place(args) -> str:
    """Where a job's message says its rejects are: ``--out``'s ``rejects/``, or what a caller that lists them
    itself (``hepix verify --owner``, whose directory is temporary) set in ``args.rejects_shown``."""
    return getattr(args, "rejects_shown", None) or f"{args.out}/rejects/"


def table_place(args, table: str) -> str:
    """``"; NAME in OUT/NAME/"`` for a job's closing line, or nothing when ``--out`` is a caller's temporary
    directory (``args.rejects_shown`` set: ``hepix verify --owner`` removes it)."""
    return "" if getattr(args, "rejects_shown", None) else f"; {table} in {args.out}/{table}/"


def exit_status(args, rejected: int) -> int:
    """0, or 1 when rows or images were rejected and ``--fail-on-rejects`` asks for it."""
    return 1 if rejected and getattr(args, "fail_on_rejects", False) else 0


def worker_report(rebuilds, tasks) -> dict:
    """What the accumulators say about the Python workers of one stage."""
    pids = sorted({pid for pid in tasks.value})
    return {
        "cache_rebuilds": len(rebuilds.value),
        "rebuild_pids": sorted({pid for pid, _ in rebuilds.value}),
        "python_workers": len(pids),
        "tasks": len(tasks.value),
    }


def table_function(fn, **kwargs):
    """``fn`` with ``kwargs`` bound, as a plain ``pa.Table -> pa.Table`` function for ``applyInArrow``.

    PySpark 4.3 infers the kind of a grouped Arrow UDF from its type hints; a
    ``functools.partial`` has none, and the inference then fails with an
    UnboundLocalError inside PySpark.
    """
    import pyarrow as pa

    def apply(table: pa.Table) -> pa.Table:
        return fn(table, **kwargs)

    apply.__annotations__ = {"table": pa.Table, "return": pa.Table}
    return apply


def cogroup_function(fn, **kwargs):
    """``fn`` with ``kwargs`` bound, as a plain ``(pa.Table, pa.Table) -> pa.Table`` function for a cogroup's
    ``applyInArrow`` (type hints, as :func:`table_function`)."""
    import pyarrow as pa

    def apply(left: pa.Table, right: pa.Table) -> pa.Table:
        return fn(left, right, **kwargs)

    apply.__annotations__ = {"left": pa.Table, "right": pa.Table, "return": pa.Table}
    return apply


def complete_run(storage: Storage, directory: str, jobs: tuple[str, ...]) -> RunManifest:
    """The manifest of a complete run of one of ``jobs`` in ``directory``, or a clear error."""
    manifest = read_manifest(storage, directory)
    if manifest is None:
        raise HepixError(
            f"{directory} holds no complete hepix run (no _manifest.json): it was never written, or its "
            "job did not finish; rerun the job that makes it"
        )
    if manifest.status != "complete" or manifest.job not in jobs:
        raise HepixError(f"{directory} holds a {manifest.status} '{manifest.job}' run; expected the output of "
                         f"{' or '.join(jobs)}")
    return manifest


def ciphertext_bytes(keys) -> int:
    """The largest ciphertext the keys' parameters make (what a row of an input may hold, besides labels)."""
    return int(keys.checker().max_bytes)


def same_key(manifest: RunManifest, fingerprint: str, directory: str) -> None:
    check_fingerprint(manifest.key_fingerprint or "", fingerprint, what=f"the ciphertexts in {directory}")


def check_recordable_ops(parent: RunManifest, specs: list[str], what: str = "--op") -> None:
    """Refuse, before any work, ops whose recorded chain -- the input's ops, then ``specs`` -- the output's
    readers would refuse (schemas.manifest.check_recorded_ops: more than MAX_OPS ops, a spec longer than
    a manifest records): a run ``process`` commits is one ``decrypt`` accepts."""
    from schemas.manifest import MAX_OPS, ManifestInvalid, check_recorded_ops

    ops = list(parent.ops) + list(specs)
    if len(ops) > MAX_OPS:
        raise HepixError(f"{what}: the input's {len(parent.ops)} ops and these {len(specs)} make a chain of "
                         f"{len(ops)}, more than the {MAX_OPS} a run records (every reader refuses a longer one); "
                         f"give at most {max(0, MAX_OPS - len(parent.ops))} ops here, or start from an input with "
                         "fewer ops applied")
    try:
        check_recorded_ops(ops, parent.preset)
    except ManifestInvalid as e:
        raise HepixError(f"{what}: the output could not record this chain, its readers would refuse it ({e}); "
                         "give ops a run can record") from None


def refuse_secret_key_directory(keys: str) -> None:
    """The processing side never opens a key directory that holds a secret key -- SEAL's ``secret.key`` or
    TFHE's ``client.key`` -- (it only looks)."""
    from .remote import is_hdfs, list_names

    names = set(list_names(keys)) if is_hdfs(keys) else {n for n in SECRET_FILES if (Path(keys) / n).exists()}
    held = [n for n in SECRET_FILES if n in names]
    if held:
        raise KeyDirectoryError(
            f"{keys} holds a secret key ({held[0]}); processing runs where the data owner's secret must "
            f"not be, so it refuses this directory without opening the file. Give it the public part: "
            f"`hepix export-public --keys {keys} --out PUBLIC_DIR`, then --keys PUBLIC_DIR"
        )


class _Look:
    """How the driver looks at one listed file: its size (None: no file there), whether it is a symbolic
    link, and ``read_at(offset, length)``."""

    def __init__(self, size, is_symlink, read_at):
        self.size, self.is_symlink, self.read_at = size, is_symlink, read_at


def _local_file(p: str) -> _Look | None:
    """A local (or ``file:``) path looked at with system calls; None for other schemes."""
    import os
    import stat

    from schemas.footers import local_reader
    from tasks.filesystem import local_path

    if "://" in p and not p.startswith("file:"):
        return None
    path = local_path(p)

    def size() -> int | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return int(st.st_size) if stat.S_ISREG(st.st_mode) else None

    return _Look(size, lambda: os.path.islink(path), local_reader(path))


def _stored_file(storage: Storage, p: str) -> _Look:
    """A path of another scheme (``hdfs://``) looked at through the session's Hadoop file system."""
    return _Look(lambda: storage.file_size(p), lambda: storage.is_symlink(p),
                 lambda at, n: storage.read_at(p, at, n))


# --- the preamble ----------------------------------------------------------------------------------

@dataclass
class Run:
    """One job's run: its session, staged output, keys and input run (``parent``)."""

    job: str
    args: object
    run_id: str
    started: object             # datetime (UTC)
    spark: object
    storage: Storage
    out: Output
    keys: object                # hecore.schemes.KeySet: public keys, or with the owner's secret (secret=True)
    fingerprint: str
    parent: RunManifest | None
    timings: dict = field(default_factory=dict)
    rebuilds: object = None     # accumulators of worker events: cache rebuilds and tasks
    tasks: object = None
    owner: object = None        # the owner map (jobs.runtime.owner.OwnerMap) of an owner's job, when given
    described: dict = field(default_factory=dict)   # staged table -> its files' entries, where this run has them
    broadcasts: dict = field(default_factory=dict, repr=False)     # id(value) -> (value, broadcast, token)

    @property
    def sc(self):
        return self.spark.sparkContext

    def broadcast(self, value) -> tuple[object, str]:
        """``value`` as a Spark broadcast, and the token the workers cache what they build from it under.
        The same object is broadcast once: what the workers build from it (a key set's SEAL context) is then
        one object per worker, whichever of the job's functions asks for it (the row checks, the work)."""
        known = self.broadcasts.get(id(value))
        if known is not None and known[0] is value:
            return known[1], known[2]
        bc = self.sc.broadcast(value)
        token = f"{self.run_id}/{bc._jbroadcast.id()}"
        self.broadcasts[id(value)] = (value, bc, token)
        return bc, token

    def workers(self) -> dict:
        return worker_report(self.rebuilds, self.tasks)

    def manifest(self, **fields) -> RunManifest:
        """The manifest of this run: what every run records, the input's description (layout, strategy,
        parameters, ops, options) unless ``fields`` says otherwise, and ``fields``."""
        a, p = self.args, self.parent
        base = dict(job=self.job, run_id=self.run_id, status="complete", created=self.started.isoformat(),
                    finished=runinfo.now().isoformat(), input=a.input, output=a.out,
                    key_fingerprint=self.fingerprint, timings=self.timings, versions=runinfo.versions(),
                    spark=spark_info(self.spark))
        if p is not None:
            base.update(layout=p.layout, strategy=p.strategy, security=p.security, preset=p.preset,
                        params=p.params, ops=list(p.ops), options=dict(p.options),
                        parent={"job": p.job, "run_id": p.run_id, "output": p.output})
        if self.rebuilds is not None:
            base["workers"] = self.workers()
        base.update(fields)
        return RunManifest(**base)

    def commit(self, manifest: RunManifest, tables: list[str]) -> None:
        self.out.commit(manifest, tables)

    def input_table(self, table: str = "ciphertexts", schema=None, max_rows: int | None = None,
                    with_splits: bool = False, frame: bool = True):
        """The rows of exactly the files the input's manifest lists for ``table`` (each inside its directory),
        read with the table's schema, and rejects rows for the listed files that cannot be read.

        Each file is read once, and only after its footer passed :class:`schemas.footers.FooterChecker`
        (sizes and offsets inside the file, at most the rows the manifest lists for it, at most that many
        of the largest rows the parameters allow, the table's columns): a missing file, a symbolic link, a
        file listed again, a footer that lies, and files past ``max_rows`` rows in all (what the owner
        made, when the caller knows) are rejects rows, and the job goes on with the rest.  Files listed
        with no rows past the first are not opened (one rejects row counts them): the files opened are
        bounded by the rows listed, and those by what the owner made.  With
        ``with_splits``, also the checked files' splits (:class:`tasks.splits.Split`), for the Python
        workers to read themselves; without ``frame`` no Spark DataFrame is made (``df`` is None: the
        workers read the splits, nothing reads the files through Spark).  Local files are looked at with
        the operating system's calls, not through the JVM's file system: a few system calls a file."""
        from schemas.footers import FooterChecker, FooterLimits, footer_bytes
        from schemas.tables import TABLES, spark_schema
        from tasks.splits import splits_of

        from .inputcheck import reject_row

        arrow_schema = schema if schema is not None else TABLES[table]
        paths = listed_paths(self.parent, self.args.input, table)
        listed_rows = [e["rows"] for e in self.parent.files[table]]
        largest = ciphertext_bytes(self.keys)
        found, rejects, seen, splits = [], [], set(), []
        budget = max_rows
        skipped = []            # files listed with no rows past the first: never opened
        empty_listed = 0

        def refuse(name: str, reason: str, detail: str) -> None:
            rejects.append(reject_row(self.run_id, self.job, name, reason, detail))

        with FooterChecker(arrow_schema) as footers:
            for p, rows in zip(paths, listed_rows):
                name = p.rsplit("/", 1)[-1]
                if name in seen:
                    refuse(name, "duplicate-file", f"{name} is listed again in the input's manifest; it is read once")
                    continue
                seen.add(name)
                if rows == 0:
                    empty_listed += 1
                    if empty_listed > 1:        # a table has at most one file of no rows (its schema)
                        skipped.append(name)
                        continue
                look = _local_file(p) or _stored_file(self.storage, p)
                size = look.size()      # asked per listed file: what else lies there costs nothing
                if size is None:
                    refuse(name, "missing-file", f"{p} is listed in the input's manifest but not there; its rows "
                                                 "are missing")
                    continue
                if look.is_symlink():
                    refuse(name, "unreadable-file", f"{name} is a symbolic link; hepix reads only the run's own files")
                    continue
                if budget is not None and rows > budget:
                    refuse(name, "unreadable-file", f"{name}: the manifest lists {rows} rows, more than the {budget} "
                                                    "left of what the owner made")
                    continue
                footer = footer_bytes(size, look.read_at)
                problem = (("unreadable-file", footer) if isinstance(footer, str) else
                           footers.footer_problem(size, footer, FooterLimits.for_table(table, rows, largest)))
                if problem is not None:
                    refuse(name, problem[0], f"{name}: {problem[1]}")
                    continue
                if budget is not None:
                    budget -= rows
                found.append(p)
                splits += splits_of(p, size, footer)
        if skipped:
            refuse(skipped[0], "unreadable-file",
                   f"{len(skipped)} more files are listed with no rows ({skipped[0]} first); a table has at most one "
                   "such file, so they were not opened: the files a job opens are bounded by the rows listed")
        df = None
        if frame:
            schema = spark_schema(arrow_schema)
            reader = self.spark.read.schema(schema).option("ignoreCorruptFiles", "true")
            df = (reader.parquet(*found) if found else driver_frame(self.spark, arrow_schema)).select(*schema.names)
        return (df, rejects, splits) if with_splits else (df, rejects)

    def expectation(self, **overrides):
        """What every input row must say: this job's key and parameters, the input run's layout, ops, tile."""
        from tasks.rowchecks import RowExpect

        return RowExpect.from_manifest(self.parent, **{"fingerprint": self.fingerprint,
                                                       "preset": self.keys.params.name, **overrides})

    def checked_input(self, stage: str, expect=None, keys=None, owner=None, work=None, work_schema=None, *,
                      broadcast: tuple | None = None, collect: bool = False, states: tuple = ()):
        """The input's ciphertext rows after every check (jobs/runtime/inputcheck.py): the images with a bad row are
        left out whole, and each bad row or image becomes a rejects row of ``stage``.  With ``work`` (a partition
        function giving ``work_schema`` rows), the work's output for the good images, done in the checking
        pass (:func:`jobs.runtime.inputcheck.inspect_rows`; the caller releases it), the Python workers reading
        the input's splits themselves (no ciphertext byte passes through the JVM), and the images judged
        from the tasks' own summaries; ``collect``: the work's rows are small, collected as a pyarrow table.

        ``broadcast``: ``(broadcast, token)`` of ``keys`` as the work's state is built from them
        (:meth:`broadcast`), so that the checks and the work share one SEAL context per worker and the work
        takes the ciphertexts the checks loaded.  Before the footers are checked, the Python workers are
        started and their states built (jobs/runtime/warmup.py): the checker's, and ``states`` --
        ``(token, broadcast, build)`` of what the work builds."""
        from schemas.tables import CIPHERTEXTS
        from tasks.rowchecks import checker_builder
        from tasks.splits import SplitSource, plan_tasks

        from .inputcheck import inspect_rows
        from .warmup import warm_up

        expect = expect or self.expectation()
        check = f"{self.run_id}/check"
        warm = None
        if work is not None:
            if broadcast is None:
                broadcast = self.broadcast(keys)
            warm = warm_up(self.spark, [(f"{broadcast[1]}/{check}", broadcast[0], checker_builder(expect)),
                                        *states], rebuilds=self.rebuilds)
        try:
            rows = sum(i.ciphertexts for i in owner.images().values()) if owner is not None else None
            started = time.perf_counter()
            df, missing, splits = self.input_table(max_rows=rows, with_splits=True, frame=work is None)
            log.debug("%s: %d files' footers checked in %.2f s", stage, len({s.path for s in splits}),
                      time.perf_counter() - started)
            source = (SplitSource(splits, self.storage.access(self.args.input), CIPHERTEXTS,
                                  plan_tasks(splits, self.sc.defaultParallelism)) if work is not None else None)
            checked = inspect_rows(self.spark, df, expect, run_id=self.run_id, stage=stage, keys=keys, owner=owner,
                                   token=check, work=work, work_schema=work_schema, source=source,
                                   broadcast=broadcast, collect=collect)
            log.debug("%s: the rows checked and the images judged at %.2f s", stage, time.perf_counter() - started)
        finally:
            if warm is not None:
                warm.wait()
        checked.rejects[:0] = missing
        return checked

    def worker_directory(self, table: str) -> tuple[str, object]:
        """The staged directory of ``table`` (created) that the Python workers write their files in, and how
        they reach it (a :class:`tasks.filesystem.FileAccess`)."""
        directory = self.out.table(table)
        access = self.storage.access(directory)
        fs, base = access.open(directory)
        fs.create_dir(base, recursive=True)
        return directory, access

    def write(self, df, table: str, schema_name: str | None = None) -> None:
        """Write ``df`` as the staged table ``table`` with that table's Parquet settings."""
        from schemas.tables import PARQUET_OPTIONS

        df.write.options(**PARQUET_OPTIONS[schema_name or table]).mode("overwrite").parquet(self.out.table(table))

    def write_rejects(self, rows: list[dict]) -> None:
        """``rows`` as the staged rejects table (:func:`tablefiles.write_rejects`); the entries of a file
        written by the driver are kept for :meth:`describe`, which then reads nothing back."""
        from .tablefiles import write_rejects

        entries = write_rejects(self.spark, rows, self.out.table("rejects"))
        if entries is not None:
            self.described["rejects"] = entries

    def write_rows(self, table: str, rows: list[dict], schema) -> None:
        """``rows`` the driver holds (a few per image: metrics) as the staged table ``table`` of ``schema``, one
        Parquet file written with pyarrow through the workers' file systems (a Spark job is not worth it),
        or by Spark's writer on a path those cannot reach; its entry kept for :meth:`describe`."""
        import pyarrow as pa

        from schemas.tables import PARQUET_OPTIONS
        from tasks.files import replace_file

        from .frames import driver_frame

        path = self.out.table(table)
        records = [{n: r.get(n) for n in schema.names} for r in rows]
        try:
            fs, where = self.storage.access(path).open(path)
        except HepixError:
            self.write(driver_frame(self.spark, schema, records).coalesce(1), table)
            return
        name = f"part-00000-{table}.parquet"
        self.storage.delete(path)
        fs.create_dir(where, recursive=True)
        replace_file(pa.Table.from_pylist(records, schema=schema), fs, f"{where}/{name}",
                     compression=PARQUET_OPTIONS.get(table, {}).get("compression", "zstd"))
        present = self.storage.list_files(path)
        if list(present) == [name]:
            self.described[table] = [{"name": name, "rows": len(records), "bytes": present[name]}]

    def describe(self, tables: dict[str, bool], known: dict[str, list[dict]] | None = None) -> tuple[dict, dict]:
        """The manifest's ``files`` and ``checksums`` of the staged tables (``{table: with row checksums}``);
        the entries of tables this run has already (:meth:`write_rejects`, or ``known`` from the job) are
        not read again."""
        from .tablefiles import describe_table, table_checksums

        known = {**self.described, **(known or {})}
        files = {name: known[name] if name in known
                 else describe_table(self.spark, self.storage, self.out.table(name), checksums=with_sums)
                 for name, with_sums in tables.items()}
        return files, table_checksums(files)


@contextlib.contextmanager
def open_run(args, job: str, *, secret: bool = False, inputs: tuple[str, ...] = ("encrypt", "process"),
             eval_keys: bool = True, app: str | None = None):
    """Open a run of ``job`` on ``args.input`` into ``args.out`` with the keys of ``args.keys``.

    Public side (``secret=False``): a key directory holding ``secret.key`` is refused without opening it,
    and only the public material is read.  Owner side (``secret=True``): the secret key is loaded (0600,
    refused otherwise) and the session is a :func:`jobs.runtime.session.secret_session` (a local master unless the
    cluster is trusted; authentication and encryption on; a private local directory, removed at the end).
    Then the staged output, and the input: a complete run of one of ``inputs`` (its manifest validated),
    made with the same key (checked before any work).  The staged output is removed when the body raises;
    the session is stopped in every case.
    """
    from hecore.schemes import open_keys

    from .remote import remote_keys
    from .session import plain_session, secret_session, trusted_cluster

    if not secret:
        refuse_secret_key_directory(args.keys)
    with remote_keys(args.keys, secret=secret) as keys:
        held = open_keys(keys, secret=secret, eval_keys=eval_keys)
    fingerprint = held.fingerprint
    run_id, started = runinfo.new_run_id(), runinfo.now()
    session = (secret_session(app or job, args.master, args.conf, trusted=trusted_cluster(args)) if secret
               else plain_session(app or job, args.master, args.conf))
    with session as spark:
        storage = Storage(spark)
        if secret:                                      # the owner's output: a new or empty directory
            from .places import check_new_out

            check_new_out(args.out, exists=storage.exists, entries=storage.names, is_file=storage.is_file)
        out = Output(storage, args.out, run_id)
        try:
            parent = complete_run(storage, args.input, inputs)
            same_key(parent, fingerprint, args.input)          # before any work
            sc = spark.sparkContext
            yield Run(job=job, args=args, run_id=run_id, started=started, spark=spark, storage=storage, out=out,
                      keys=held, fingerprint=fingerprint, parent=parent,
                      rebuilds=sc.accumulator([], ListAccumulator()), tasks=sc.accumulator([], ListAccumulator()))
        except BaseException:
            out.abort()
            raise
