"""`hepix bench --suite spark`: what Spark costs on top of hecore, and how it scales to 2 cores.

The baseline runs the encrypt job's own task functions (decode, tile,
encrypt, build the Arrow rows) in this one process on the same images, and
writes the same Parquet table with pyarrow: the job minus Spark.  Then the
encrypt job runs on ``local[1]`` and ``local[2]``.  Session start-up is
reported apart; the compared times are decode + cache build + encrypt + write.
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hecore.keys import keygen, read_public
from hecore.params import preset
from jobs import runinfo
from jobs.tasks.decode import DecodeOptions, decode_partition
from jobs.tasks.encrypt import EncryptPayload, encrypt_partition
from jobs.tasks.rows import RowMeta
from schemas.bench import BENCH_SPARK
from schemas.tables import CIPHERTEXTS

SAMPLES = ("camera", "coins", "moon", "astronaut", "coffee", "chelsea")


@dataclass
class _Local:
    """Stands in for a Spark broadcast in the one-process baseline."""

    value: object


def write_sample_images(folder: Path, count: int) -> list[Path]:
    import skimage.data
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        name = SAMPLES[i % len(SAMPLES)]
        p = folder / f"{i:03d}-{name}.png"
        Image.fromarray(getattr(skimage.data, name)()).save(p)
        paths.append(p)
    return paths


def hecore_alone(paths: list[Path], keys: Path, out: Path, resize: int, tile: int, strategy: str) -> dict:
    """The encrypt job's task functions in this process, same images, same table; returns seconds and counts."""
    material = read_public(keys, eval_keys=False)
    t0 = time.perf_counter()
    files = pa.RecordBatch.from_pydict({
        "path": [p.resolve().as_uri() for p in paths],
        "content": [p.read_bytes() for p in paths],
    })
    tiles = list(decode_partition(iter([files]), DecodeOptions(tile, tile, resize, (), 2**26)))
    payload = EncryptPayload(public=material, strategy=strategy, strategy_state=None, allow_leaky=False)
    meta = RowMeta(run_id="bench", layout="pixel", preset=material.params.name,
                       key_fingerprint=material.fingerprint())
    rows = 0
    with pq.ParquetWriter(out, CIPHERTEXTS, compression="none") as writer:
        for rb in encrypt_partition(iter(tiles), token="bench", broadcast=_Local(payload), meta=meta):
            writer.write_batch(rb)
            rows += rb.num_rows
    return {"seconds": time.perf_counter() - t0, "ciphertexts": rows}


def spark_run(paths_dir: Path, keys: Path, out: Path, resize: int, tile: int, strategy: str, cores: int) -> dict:
    from jobs.cli import main

    t0 = time.perf_counter()
    code = main(["encrypt", "--layout", "pixel", "--keys", str(keys), "--input", str(paths_dir), "--out", str(out),
                 "--resize", str(resize), "--tile", f"{tile}x{tile}", "--strategy", strategy,
                 "--master", f"local[{cores}]", "--quiet"])
    wall = time.perf_counter() - t0
    if code:
        raise RuntimeError(f"the encrypt job failed with exit code {code}")
    m = json.loads((out / "_manifest.json").read_text())
    t = m["timings"]
    work = t["decode_seconds"] + t["cache_build_seconds"] + t["encrypt_seconds"]
    return {"seconds": work, "wall_seconds": wall, "ciphertexts": m["counts"]["ciphertexts"],
            "workers": m["workers"]}


def run_spark_bench(out_dir: Path, *, images: int, resize: int, tile: int, preset_name: str,
                    strategy: str = "fresh") -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="hepix-bench-spark-") as tmp:
        tmp = Path(tmp)
        keygen(preset(preset_name), tmp / "keys")
        paths = write_sample_images(tmp / "images", images)
        base = hecore_alone(paths, tmp / "keys", tmp / "alone.parquet", resize, tile, strategy)
        rows.append({"config": "hecore, one process", "cores": 1, **base})
        for cores in (1, 2):
            r = spark_run(tmp / "images", tmp / "keys", tmp / f"spark{cores}", resize, tile, strategy, cores)
            rows.append({"config": f"spark local[{cores}]", "cores": cores, **r})
    for r in rows:
        r["ciphertexts_per_second"] = r["ciphertexts"] / r["seconds"]
    base_s = rows[0]["seconds"]
    one = rows[1]["seconds"]
    for r in rows:
        r["vs_hecore_alone"] = r["seconds"] / base_s
        r["speedup_vs_local1"] = one / r["seconds"] if r["config"].startswith("spark") else None
    return rows


def report(rows: list[dict], params_name: str, images: int, resize: int) -> str:
    from jobs.console import table

    lines = [table(rows, [("config", "configuration", ""), ("ciphertexts", "cts", "d"), ("seconds", "seconds", ".2f"),
                          ("ciphertexts_per_second", "cts/s", ",.0f"), ("vs_hecore_alone", "x hecore time", ".2f"),
                          ("speedup_vs_local1", "speedup vs local[1]", ".2f"), ("wall_seconds", "wall s", ".1f")])]
    one, two = rows[1], rows[2]
    lines.append(f"\nSpark overhead on one core: {one['seconds'] / rows[0]['seconds'] - 1:+.0%} over hecore alone "
                 f"(goal < +20%); 1 -> 2 cores: x{one['seconds'] / two['seconds']:.2f} (goal >= 1.6); "
                 f"{images} images at {resize}x{resize}, {params_name}; session start-up is in 'wall s' only")
    return "\n".join(lines)


def write_rows(rows: list[dict], out: Path, run_id: str, params_name: str, images: int, resize: int,
               tile: int) -> Path:
    common = {"run_id": run_id, "started": runinfo.now(), "machine": runinfo.machine(),
              "cores_available": runinfo.cores(), "git_commit": runinfo.git_commit(), "preset": params_name,
              "images": images, "size": resize, "tile": tile}
    records = [{**common, **r, "workers": json.dumps(r.get("workers"))} for r in rows]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{run_id}.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=BENCH_SPARK), path, compression="zstd")
    return path
