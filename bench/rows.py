"""The records the benchmarks write, and the one function that writes them as a Parquet file.

Each suite measures into its own dataclass (``PixelMeasurement``, ``DftMeasurement``, ...,
next to its measurement code); :class:`BenchRow` is the record of the ``bench`` table that the
default suite and ``hepix report`` share.  :func:`write_rows` turns any of them, with the run's
columns (:func:`run_columns`), into ``<folder>/<run_id>.parquet`` of a given schema, refusing a
column the schema lacks instead of dropping it.
"""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.runtime import runinfo


@dataclass
class BenchRow:
    """One measured configuration of the ``bench`` table (``bench.schemas.BENCH``: its columns but the
    run's, which :func:`run_columns` adds).  Null: not applicable."""

    experiment: str
    layout: str | None = None
    implementation: str | None = None
    library: str | None = None
    scheme: str | None = None
    preset: str | None = None
    n: int | None = None
    qi_sizes: list | None = None
    scale_bits: int | None = None
    strategy: str | None = None
    strategy_options: str | None = None
    encryption: str | None = None
    serialization: str | None = None
    security: str | None = None
    image: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    channels: int | None = None
    pixels: int | None = None
    pixels_measured: int | None = None
    extrapolated: bool | None = None
    ops: str | None = None
    repeats: int | None = None
    setup_seconds: float | None = None
    encode_seconds: float | None = None
    encrypt_seconds: float | None = None
    serialize_seconds: float | None = None
    op_seconds: float | None = None
    decrypt_seconds: float | None = None
    seconds: float | None = None
    pixels_per_second: float | None = None
    ciphertexts: int | None = None
    bytes: int | None = None
    bytes_per_second: float | None = None
    memcpy_bytes_per_second: float | None = None
    speedup_vs_fresh: float | None = None
    driver_peak_rss_encrypt: int | None = None
    driver_peak_rss_op: int | None = None
    driver_peak_rss_decrypt: int | None = None
    workers_peak_rss_encrypt: int | None = None
    workers_peak_rss_op: int | None = None
    workers_peak_rss_decrypt: int | None = None
    reference: str | None = None
    mse: float | None = None
    psnr: float | None = None
    ssim: float | None = None
    max_abs_err: float | None = None
    exact_fraction: float | None = None
    load_1m: float | None = None
    extra: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def run_columns(run_id: str, started: dt.datetime | None = None) -> dict[str, Any]:
    """The columns every row of one run shares: id, start, machine, cores, version, commit."""
    return {"run_id": run_id, "started": started or runinfo.now(), "machine": runinfo.machine(),
            "cores": runinfo.cores(), "hepix_version": runinfo.version("hepix"), "git_commit": runinfo.git_commit()}


def as_record(row: Any) -> dict[str, Any]:
    """A row as a dict: a dataclass's fields, or a mapping as it is."""
    if is_dataclass(row) and not isinstance(row, type):
        return asdict(row)
    if isinstance(row, Mapping):
        return dict(row)
    raise TypeError(f"a bench row is a dataclass or a mapping, not {type(row).__name__}")


def write_rows(rows: Iterable[Any], schema: pa.Schema, folder: Path, run_id: str,
               common: Mapping[str, Any] | None = None) -> Path:
    """Write ``rows`` (dataclasses or mappings), each completed with ``common``, as
    ``folder/<run_id>.parquet`` of ``schema`` (zstd), through a temporary file renamed at the end so
    a reader never sees half a file.  A column that ``schema`` lacks is an error, not silently
    dropped; a column it has and the rows lack is null."""
    records = [{**(common or {}), **as_record(r)} for r in rows]
    names = set(schema.names)
    for r in records:
        unknown = set(r) - names
        if unknown:
            raise ValueError(f"bench row has columns the {folder.name} schema lacks: {sorted(unknown)}; "
                             "add them to bench/schemas.py")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{run_id}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist(records, schema=schema), tmp, compression="zstd")
    path = folder / f"{run_id}.parquet"
    os.replace(tmp, path)
    return path
