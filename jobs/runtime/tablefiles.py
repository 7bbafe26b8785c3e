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


def write_rejects(spark, rows: list[dict], path: str) -> None:
    """The rejects rows the driver holds as the table ``path`` (replacing what is there): one Parquet file,
    written here with pyarrow through the file systems the Python workers use -- a table of a few rows
    is not worth a Spark job --, or by Spark's writer on a path those cannot reach."""
    import pyarrow as pa

    storage = Storage(spark)
    records = [{n: r.get(n) for n in REJECTS.names} for r in rows]
    try:
        fs, where = storage.access(path).open(path)
    except HepixError:
        driver_frame(spark, REJECTS, records) \
            .coalesce(1).write.options(**PARQUET_OPTIONS["rejects"]).mode("overwrite").parquet(path)
        return
    table = pa.Table.from_pylist(records, schema=REJECTS)
    storage.delete(path)
    fs.create_dir(where, recursive=True)
    replace_file(table, fs, f"{where}/{REJECTS_FILE}", compression=PARQUET_OPTIONS["rejects"]["compression"])


def describe_table(spark, storage: Storage, directory: str, *, checksums: bool) -> list[dict]:
    """The data files of a freshly written table: name, rows, bytes (and the XOR of the row checksums)."""
    from pyspark.sql import functions as F

    present = storage.list_files(directory)
    if not present:
        return []
    entries = {name: {"name": name, "rows": 0, "bytes": size} for name, size in sorted(present.items())}
    if checksums:
        entries = {n: {**e, "xxh3_xor": 0} for n, e in entries.items()}
    df = spark.read.parquet(directory)
    aggs = [F.count("*").alias("n")]
    if checksums:
        aggs.append(F.bit_xor(F.coalesce("ct_xxh3", F.lit(0).cast("long"))).alias("x"))
    for r in df.groupBy(F.input_file_name().alias("f")).agg(*aggs).collect():
        e = entries[r["f"].rsplit("/", 1)[-1]]
        e["rows"] = int(r["n"])
        if checksums:
            e["xxh3_xor"] = int(r["x"])
    return list(entries.values())


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
