"""The driver's side of the jobs whose Python workers read, exchange and write everything themselves
(``match:QUERY``, ``infer:MODEL`` and their decryption): Spark runs their tasks and carries their small
reports, never a ciphertext byte of their tables.

* :func:`exchange_directory`, :func:`kept_exchange` and :func:`kept_buckets`: the files the reading tasks send rows through
  (:mod:`tasks.exchange`), checked as the driver checks any file the workers write
  (:func:`tasks.files.keep_reported`) before a combining task is told where its bucket is.
* :func:`task_plan`: a Spark plan of ``n`` tasks, each given its index, for the combining tasks.
* :func:`worker_rows`: a function run by the workers over the input's splits (:class:`tasks.splits.SplitSource`),
  its small rows collected for the driver to go through (:func:`driver_rows`: the same function run by the
  driver itself, on the splits it reads with pyarrow, for an input of one task's worth).
* :func:`write_table`: a small table the driver holds (decrypted distances, predictions) written with
  pyarrow through the workers' file systems, as the rejects table is (:func:`jobs.runtime.tablefiles.write_rejects`).
"""
from __future__ import annotations

import pyarrow as pa

from hecore.errors import HepixError
from schemas.tables import spark_schema


def exchange_directory(run) -> tuple[str, object]:
    """The staged directory the reading tasks of ``run`` write their exchanged files in (created), and how
    the workers reach it (a :class:`tasks.filesystem.FileAccess`).  The commit removes it with the rest
    of the staging area."""
    return run.worker_directory("_exchange")


def kept_buckets(run, ids, parts: dict) -> tuple[list[int], dict[int, set]]:
    """The buckets of ``parts`` (:func:`kept_exchange`) that hold rows of ``ids``, in order, and the ids each
    keeps (:func:`tasks.exchange.bucket_of`, over the run's parallelism as the reading tasks bucketed them)."""
    from tasks.exchange import bucket_of

    keep: dict[int, set] = {}
    for i in ids:
        keep.setdefault(bucket_of(i, max(1, run.sc.defaultParallelism)), set()).add(i)
    return sorted(b for b in keep if b in parts), keep


def kept_exchange(directory: str, reports: list[dict], access) -> dict[int, list]:
    """Where each bucket's rows are (:func:`tasks.exchange.bucket_parts`), from the EXCHANGED reports of the
    successful reading tasks: each file checked present with its reported size under a name the tasks give,
    every other file of ``directory`` (failed or speculative attempts) removed."""
    from tasks.exchange import bucket_parts
    from tasks.files import keep_reported

    keep_reported(directory, [{"file": r["file"], "rows": sum(r["bucket_rows"]), "bytes": r["bytes"],
                               "xxh3_xor": 0, "ct_bytes": 0} for r in reports], access)
    return bucket_parts(reports)


def task_plan(spark, n: int, fn, schema: pa.Schema):
    """A Spark plan of ``n`` tasks running ``fn(ids)`` (``ids``: batches of an ``id`` column holding the
    task's index) and giving rows of the Arrow ``schema``."""
    return spark.range(0, n, 1, max(1, n)).mapInArrow(fn, spark_schema(schema))


def worker_rows(run, splits: list, schema: pa.Schema, fn, out_schema: pa.Schema) -> "Rows":
    """The rows ``fn`` (:meth:`tasks.splits.SplitSource.partition`'s function: the rows of a task's splits in
    ``schema``, and ``problems``) gives over the input's ``splits``, read by the Python workers a few row
    groups per task, all tasks at once: small rows of ``out_schema`` (no ciphertext), collected."""
    source = _source(run, splits, schema)
    if source is None:
        return Rows(out_schema.empty_table())
    return Rows(task_plan(run.spark, source.task_count, lambda ids: source.partition(ids, fn), out_schema).toArrow())


def one_task(splits: list) -> bool:
    """Whether ``splits`` hold no more than one task's rows and bytes (tasks.splits.TASK_ROWS, TASK_BYTES)."""
    from tasks.splits import TASK_BYTES, TASK_ROWS

    return sum(s.rows for s in splits) <= TASK_ROWS and sum(s.nbytes for s in splits) <= TASK_BYTES


def driver_rows(run, splits: list, schema: pa.Schema, fn, out_schema: pa.Schema) -> "Rows":
    """What :func:`worker_rows` gives, for an input of one task's worth (:func:`one_task`): ``fn`` run here, on
    the splits read here with pyarrow as that task would read them -- no Spark job (whose Python worker,
    in a fresh session, would take longer to start than the task to run), nothing through the JVM."""
    source = _source(run, splits, schema)
    if source is None:
        return Rows(out_schema.empty_table())
    ids = pa.record_batch([pa.array(range(source.task_count), type=pa.int64())], names=["id"])
    return Rows(pa.Table.from_batches(list(source.partition(iter([ids]), fn)), schema=out_schema))


def _source(run, splits: list, schema: pa.Schema):
    from tasks.splits import SplitSource, plan_tasks

    if not splits:
        return None
    return SplitSource(splits, run.storage.access(run.args.input), schema,
                       plan_tasks(splits, run.sc.defaultParallelism))


class Rows:
    """Small rows the workers sent, streamed as a DataFrame's are (``toLocalIterator``, rows with ``asDict``)."""

    class Row(dict):
        def asDict(self) -> dict:
            return dict(self)

    def __init__(self, table: pa.Table):
        self.table = table

    def toLocalIterator(self):
        for batch in self.table.to_batches(max_chunksize=1024):
            yield from (self.Row(r) for r in batch.to_pylist())


def write_table(run, table: str, schema: pa.Schema, rows: list[dict], compression: str) -> list[dict] | None:
    """``rows`` as the staged table ``table`` of ``run``: one Parquet file written here with pyarrow through
    the file systems the Python workers use (Spark's writer on a path those cannot reach).  Its entries as
    the manifest records them when written here (nothing to read back), else None."""
    from tasks.files import replace_file

    from .frames import driver_frame

    path, name = run.out.table(table), f"part-00000-{table.replace('_', '-')}.parquet"
    records = [{n: r.get(n) for n in schema.names} for r in rows]
    try:
        fs, where = run.storage.access(path).open(path)
    except HepixError:
        driver_frame(run.spark, schema, records).coalesce(1).write.option("compression", compression) \
            .mode("overwrite").parquet(path)
        return None
    run.storage.delete(path)
    fs.create_dir(where, recursive=True)
    replace_file(pa.Table.from_pylist(records, schema=schema), fs, f"{where}/{name}", compression=compression)
    present = run.storage.list_files(path)
    if list(present) != [name]:
        return None
    return [{"name": name, "rows": len(records), "bytes": present[name]}]
