"""``hepix bench --suite spark``: what Spark costs on top of hecore, and how it scales to 2 cores.

The baseline runs the encrypt job's own task functions (decode, tile,
encrypt, build the Arrow rows) in this one process on the same images, and
writes the same Parquet table with pyarrow: the job minus Spark.  Then the
encrypt job runs on ``local[1]`` and ``local[2]``.  Session start-up is
reported apart; the compared times are decode + cache build + encrypt + write.
Writes ``OUT/bench_spark/<run_id>.parquet`` (``bench.schemas.BENCH_SPARK``).
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.datasets import SAMPLES, sample
from bench.rows import write_rows
from bench.schemas import BENCH_SPARK
from hecore.layouts import Layout
from hecore.schemes import open_keys
from hecore.seal.keys import keygen
from hecore.seal.params import DEFAULT_PRESET, preset
from jobs.runtime import runinfo
from schemas.tables import CIPHERTEXTS
from tasks.decode import DecodeOptions, decode_partition
from tasks.encrypt import EncryptPayload, encrypt_partition
from tasks.rows import RowMeta

#: The options of ``hepix bench`` this suite reads (besides --out and --quick).
OPTIONS = frozenset({"images", "sizes", "tile", "preset"})
DEFAULT_IMAGES = 12
DEFAULT_SIZE = 32
DEFAULT_TILE = 32


@dataclass
class SparkRow:
    """One configuration: hecore alone, or the encrypt job on local[N] (see ``bench.schemas.BENCH_SPARK``)."""

    config: str                       # hecore, one process | spark local[N]
    cores: int
    seconds: float                    # decode + cache build + encrypt + write
    ciphertexts: int
    wall_seconds: float | None = None  # Spark session start-up included
    workers: str | None = None        # JSON: cache rebuilds, python workers, tasks
    ciphertexts_per_second: float = 0.0
    vs_hecore_alone: float = 0.0
    speedup_vs_local1: float | None = None


@dataclass
class _Local:
    """Stands in for a Spark broadcast in the one-process baseline."""

    value: object


def write_sample_images(folder: Path, count: int) -> list[Path]:
    """``count`` of scikit-image's sample images as PNG files in ``folder`` (cycling through them)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        name = SAMPLES[i % len(SAMPLES)]
        p = folder / f"{i:03d}-{name}.png"
        Image.fromarray(sample(name)).save(p)
        paths.append(p)
    return paths


def hecore_alone(paths: list[Path], keys: Path, out: Path, resize: int, tile: int, strategy: str) -> SparkRow:
    """The encrypt job's task functions in this process, same images, same table."""
    key_set = open_keys(keys, eval_keys=False)
    t0 = time.perf_counter()
    files = pa.RecordBatch.from_pydict({
        "path": [p.resolve().as_uri() for p in paths],
        "content": [p.read_bytes() for p in paths],
    })
    tiles = list(decode_partition(iter([files]), DecodeOptions(tile, tile, resize, (), 2**26)))
    payload = EncryptPayload(keys=key_set.for_encryption(use_secret=False), layout=Layout.PIXEL, strategy=strategy,
                             strategy_state=None, allow_leaky=False)
    meta = RowMeta(run_id="bench", layout="pixel", preset=key_set.params.name, key_fingerprint=key_set.fingerprint)
    rows = 0
    with pq.ParquetWriter(out, CIPHERTEXTS, compression="none") as writer:
        for rb in encrypt_partition(iter(tiles), token="bench", broadcast=_Local(payload), meta=meta):
            writer.write_batch(rb)
            rows += rb.num_rows
    return SparkRow(config="hecore, one process", cores=1, seconds=time.perf_counter() - t0, ciphertexts=rows)


def spark_run(paths_dir: Path, keys: Path, out: Path, resize: int, tile: int, strategy: str, cores: int) -> SparkRow:
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
    return SparkRow(config=f"spark local[{cores}]", cores=cores, seconds=work, ciphertexts=m["counts"]["ciphertexts"],
                    wall_seconds=wall, workers=json.dumps(m["workers"]))


def run_spark_bench(*, images: int, resize: int, tile: int, preset_name: str,
                    strategy: str = "fresh") -> list[SparkRow]:
    """hecore alone, then the encrypt job on local[1] and local[2], on the same sample images."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="hepix-bench-spark-") as tmp:
        tmp = Path(tmp)
        keygen(preset(preset_name), tmp / "keys")
        paths = write_sample_images(tmp / "images", images)
        rows.append(hecore_alone(paths, tmp / "keys", tmp / "alone.parquet", resize, tile, strategy))
        for cores in (1, 2):
            rows.append(spark_run(tmp / "images", tmp / "keys", tmp / f"spark{cores}", resize, tile, strategy, cores))
    base_s, one = rows[0].seconds, rows[1].seconds
    for r in rows:
        r.ciphertexts_per_second = r.ciphertexts / r.seconds
        r.vs_hecore_alone = r.seconds / base_s
        r.speedup_vs_local1 = one / r.seconds if r.config.startswith("spark") else None
    return rows


def report(measured: list[SparkRow], params_name: str, images: int, resize: int) -> str:
    from jobs.runtime.console import table

    rows = [vars(r) for r in measured]
    lines = [table(rows, [("config", "configuration", ""), ("ciphertexts", "cts", "d"), ("seconds", "seconds", ".2f"),
                          ("ciphertexts_per_second", "cts/s", ",.0f"), ("vs_hecore_alone", "x hecore time", ".2f"),
                          ("speedup_vs_local1", "speedup vs local[1]", ".2f"), ("wall_seconds", "wall s", ".1f")])]
    one, two = rows[1], rows[2]
    lines.append(f"\nSpark overhead on one core: {one['seconds'] / rows[0]['seconds'] - 1:+.0%} over hecore alone "
                 f"(goal < +20%); 1 -> 2 cores: x{one['seconds'] / two['seconds']:.2f} (goal >= 1.6); "
                 f"{images} images at {resize}x{resize}, {params_name}; session start-up is in 'wall s' only")
    return "\n".join(lines)


def run(args) -> int:
    """``hepix bench --suite spark``: measure, write ``OUT/bench_spark/<run_id>.parquet``, print."""
    size = args.sizes[-1] if args.sizes else DEFAULT_SIZE
    tile = min(args.tile or DEFAULT_TILE, size)
    images = args.images if args.images is not None else DEFAULT_IMAGES
    preset_name = args.preset or DEFAULT_PRESET
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: Spark overhead and scaling, {images} images at {size}x{size}, "
          f"{preset_name}, strategy fresh")
    rows = run_spark_bench(images=images, resize=size, tile=tile, preset_name=preset_name)
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(),
              "cores_available": runinfo.cores(), "git_commit": runinfo.git_commit(), "preset": preset_name,
              "images": images, "size": size, "tile": tile}
    path = write_rows(rows, BENCH_SPARK, Path(args.out) / "bench_spark", run_id, common)
    print(report(rows, preset_name, images, size))
    print(f"\nwrote {path}")
    return 0
