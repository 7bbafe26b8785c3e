"""Writing and describing a run's tables: the rejects table, and what the manifest records of each
table (its files, their row counts and bytes, the XOR of their row checksums)."""
from __future__ import annotations

from hecore.errors import HepixError
from schemas.tables import PARQUET_OPTIONS, REJECTS
from tasks.checksums import ALGORITHM
from tasks.files import replace_file

from .frames import driver_frame
from .storage import Storage

#: The one file of a rejects table.
REJECTS_FILE = "part-00000-rejects.parquet"


def write_rejects(spark, rows: list[dict], path: str) -> list[dict] | None:
    """The rejects rows the driver holds as the table ``path`` (replacing what is there): one Parquet file,
    written here with pyarrow through the file systems the Python workers use -- a table of a few rows
    is not worth a Spark job --, or by Spark's writer on a path those cannot reach.

    Returns the table's entries as :func:`describe_table` gives them when the file was written here (its
    rows are the ones just written, so nothing needs reading back), None when Spark's writer wrote it."""
    import pyarrow as pa

    storage = Storage(spark)
    records = [{n: r.get(n) for n in REJECTS.names} for r in rows]
    try:
        fs, where = storage.access(path).open(path)
    except HepixError:
        driver_frame(spark, REJECTS, records) \
            .coalesce(1).write.options(**PARQUET_OPTIONS["rejects"]).mode("overwrite").parquet(path)
        return None
    table = pa.Table.from_pylist(records, schema=REJECTS)
    storage.delete(path)
    fs.create_dir(where, recursive=True)
    replace_file(table, fs, f"{where}/{REJECTS_FILE}", compression=PARQUET_OPTIONS["rejects"]["compression"])
    present = storage.list_files(path)
    if list(present) != [REJECTS_FILE]:
        return None
    return [{"name": REJECTS_FILE, "rows": len(records), "bytes": present[REJECTS_FILE]}]


def describe_table(spark, storage: Storage, directory: str, *, checksums: bool) -> list[dict]:
    """The data files of a freshly written table: name, rows, bytes (and the XOR of the row checksums)."""
    return describe_files(spark, storage, directory, checksums=checksums)[0]


def describe_files(spark, storage: Storage, directory: str, *, checksums: bool,
                   count_distinct: str | None = None) -> tuple[list[dict], int]:
    """:func:`describe_table`, and (with ``count_distinct``) how many distinct values that column holds in
    the whole table, counted in the same pass (else 0)."""
    from pyspark.sql import functions as F

    present = storage.list_files(directory)
    if not present:
        return [], 0
    entries = {name: {"name": name, "rows": 0, "bytes": size} for name, size in sorted(present.items())}
    if checksums:
        entries = {n: {**e, "xxh3_xor": 0} for n, e in entries.items()}
    df = spark.read.parquet(directory)
    aggs = [F.count("*").alias("n")]
    if checksums:
        aggs.append(F.bit_xor(F.coalesce("ct_xxh3", F.lit(0).cast("long"))).alias("x"))
    if count_distinct:
        aggs.append(F.collect_set(count_distinct).alias("d"))
    distinct: set = set()
    for r in df.groupBy(F.input_file_name().alias("f")).agg(*aggs).collect():
        e = entries[r["f"].rsplit("/", 1)[-1]]
        e["rows"] = int(r["n"])
        if checksums:
            e["xxh3_xor"] = int(r["x"])
        if count_distinct:
            distinct.update(r["d"])
    return list(entries.values()), len(distinct)


def table_checksums(files: dict) -> dict:
    """Per table: rows, and for ciphertext tables the XOR over all files' checksum XORs."""
    out = {}
    for table, entries in files.items():
        out[table] = {"rows": sum(e["rows"] for e in entries)}
        if any("xxh3_xor" in e for e in entries) or table == "ciphertexts":
            x = 0
            for e in entries:
                x ^= e.get("xxh3_xor", 0)
            out[table].update(algorithm=ALGORITHM, xxh3_xor=x)
    return out
