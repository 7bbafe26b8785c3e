"""What a hostile cluster can do to a run it was handed, for the tests (not a test module).

The cluster holds the directory: it can rewrite any row, any file and the manifest, and recompute
every checksum so that the forgery is self-consistent.  These helpers do exactly that: read a run's
ciphertext rows, change them, and write them back as one file with the manifest updated to list
it (sizes, row counts, checksums), as a careful attacker would.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.tasks.checksums import ct_checksums, xor_all

#: Where the coefficients of an uncompressed SEAL 4.1 ciphertext start (see hecore.audit.sealbytes).
COEFFICIENTS_AT = 113


def manifest(run: Path) -> dict:
    return json.loads((Path(run) / "_manifest.json").read_text())


def write_manifest(run: Path, doc: dict) -> None:
    (Path(run) / "_manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def read_rows(run: Path, table: str = "ciphertexts") -> pa.Table:
    """Every row of the files the manifest lists for ``table``."""
    doc = manifest(run)
    parts = [pq.read_table(Path(run) / table / e["name"]) for e in doc["files"][table]]
    return pa.concat_tables(parts) if parts else pq.read_table(next((Path(run) / table).glob("*.parquet")))


def with_checksums(t: pa.Table) -> pa.Table:
    """``t`` with every ``ct_xxh3`` recomputed from its ``ct`` (what a forger does)."""
    i = t.schema.get_field_index("ct_xxh3")
    return t.set_column(i, t.schema.field(i), ct_checksums(t.column("ct")))


def write_rows(run: Path, t: pa.Table, table: str = "ciphertexts", name: str = "part-00000-forged.parquet") -> None:
    """Replace ``table``'s files with one file holding ``t`` (checksums recomputed), listed in the manifest."""
    run = Path(run)
    t = with_checksums(t)
    for p in (run / table).glob("*.parquet"):
        p.unlink()
    path = run / table / name
    pq.write_table(t, path, compression="none")
    doc = manifest(run)
    xor = xor_all(t.column("ct_xxh3").to_numpy())
    doc["files"][table] = [{"name": name, "rows": t.num_rows, "bytes": path.stat().st_size, "xxh3_xor": xor}]
    doc["checksums"][table] = {"algorithm": "xxh3_64", "rows": t.num_rows, "xxh3_xor": xor}
    write_manifest(run, doc)


def set_where(t: pa.Table, mask, column: str, value) -> pa.Table:
    """``t`` with ``column`` set to ``value`` (a scalar, or a function of the old value) where ``mask``."""
    i = t.schema.get_field_index(column)
    old = t.column(column).to_pylist()
    new = [(value(v) if callable(value) else value) if m else v for v, m in zip(old, mask)]
    return t.set_column(i, t.schema.field(i), pa.array(new, type=t.schema.field(i).type))


def image_mask(t: pa.Table, image_id: str) -> list[bool]:
    return [v == image_id for v in t.column("image_id").to_pylist()]


def first_row_mask(t: pa.Table, image_id: str) -> list[bool]:
    ids = t.column("image_id").to_pylist()
    first = ids.index(image_id)
    return [i == first for i in range(len(ids))]


def image_ids(t: pa.Table) -> list[str]:
    return sorted(set(t.column("image_id").to_pylist()))


# --- ciphertext bytes SEAL refuses ---------------------------------------------------------------

def truncated(ct: bytes) -> bytes:
    return ct[: len(ct) // 2]


def coefficient_above_q(ct: bytes) -> bytes:
    """The first coefficient set to 2^64 - 1, above every prime: SEAL's validation refuses it."""
    b = bytearray(ct)
    b[COEFFICIENTS_AT:COEFFICIENTS_AT + 8] = struct.pack("<Q", 2**64 - 1)
    return bytes(b)


def random_bytes(ct: bytes, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, len(ct), dtype=np.uint8).tobytes()


def tree(root: Path) -> set[str]:
    """Every file under ``root`` (relative paths), to see what a job wrote where."""
    root = Path(root)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
