"""A growing corpus encrypted night by night: ``encrypt --skip-encrypted`` and the nights queried as one table.

One corpus directory that grows (three images and a broken file, then two more, then nothing), one
encrypt run a night into ``ROOT/ct/night=YYYY-MM-DD`` with its owner map in ``ROOT/owner/night=...``, each
night skipping what the earlier nights' owner maps hold; every night processed and decrypted into
``ROOT/dec/night=...``, and the nights' metrics read as one partitioned table by DuckDB and Spark SQL.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.seconds(70), pytest.mark.spark, pytest.mark.slow]

SPARK = ["--quiet", "--master", "local[2]"]
ENC = ["--tile", "8x8", "--halo", "1", *SPARK]
NIGHTS = ("2026-01-01", "2026-01-02", "2026-01-03")


def add_images(images, names, seed):
    rng = np.random.default_rng(seed)
    for i, name in enumerate(names):
        shape = (16, 16, 3) if i % 2 else (16, 16)
        Image.fromarray(rng.integers(0, 200, size=shape, dtype=np.uint8)).save(images / name)


def night(root, table, ds_):
    return root / table / f"night={ds_}"


def encrypt_night(root, ds_, *extra):
    return main(["encrypt", "--keys", str(root / "pub"), "--input", str(root / "images"),
                 "--out", str(night(root, "ct", ds_)), "--owner", str(night(root, "owner", ds_)),
                 "--skip-encrypted", str(root / "owner"), *ENC, *extra])


def process_and_decrypt(root, ds_):
    assert main(["process", "--keys", str(root / "pub"), "--input", str(night(root, "ct", ds_)),
                 "--out", str(night(root, "bright", ds_)), "--op", "brightness:20", *SPARK]) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(night(root, "bright", ds_)),
                 "--out", str(night(root, "dec", ds_)), "--owner", str(night(root, "owner", ds_)),
                 "--images", str(root / "images"), *SPARK]) == 0


def sources(root, ds_) -> set[str]:
    owner = night(root, "owner", ds_)
    if not (owner / "images").is_dir():
        return set()
    return {r.rsplit("/", 1)[-1] for r in ds.dataset(owner / "images").to_table().column("source").to_pylist()}


def manifest(directory) -> dict:
    return json.loads((directory / "_manifest.json").read_text())


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Three nights over one growing corpus: what each encrypt printed, by night."""
    root = tmp_path_factory.mktemp("nightly")
    images = root / "images"
    images.mkdir()
    add_images(images, ["a.png", "b.png", "c.png"], seed=1)
    (images / "broken.png").write_bytes(b"\x89PNG not really")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    (root / "owner").mkdir()
    printed = {}
    return root, printed


@pytest.fixture(scope="module")
def three_nights(nights):
    import contextlib
    import io

    root, printed = nights
    for ds_, new in zip(NIGHTS, (None, ["d.png", "e.png"], None)):
        if new:
            add_images(root / "images", new, seed=2)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert encrypt_night(root, ds_) == 0
        printed[ds_] = buf.getvalue()
        process_and_decrypt(root, ds_)
    return root, printed


def test_each_night_encrypts_only_the_images_no_earlier_owner_map_holds(three_nights):
    root, _ = three_nights
    assert sources(root, NIGHTS[0]) == {"a.png", "b.png", "c.png"}
    assert sources(root, NIGHTS[1]) == {"d.png", "e.png"}
    assert sources(root, NIGHTS[2]) == set()
    counts = [manifest(night(root, "ct", d))["counts"] for d in NIGHTS]
    assert [c["images_encrypted"] for c in counts] == [3, 2, 0]
    # the broken file is rejected once, on the first night, and not tried again on the later ones
    assert [c["images_rejected"] for c in counts] == [1, 0, 0]


def test_a_night_with_nothing_new_is_an_empty_complete_run_that_says_so(three_nights):
    root, printed = three_nights
    assert "nothing new: all 6 images" in printed[NIGHTS[2]]
    m = manifest(night(root, "ct", NIGHTS[2]))
    assert m["status"] == "complete" and m["checksums"]["ciphertexts"]["rows"] == 0
    # downstream jobs need no special case: process and decrypt finished on it, with no rows
    assert manifest(night(root, "dec", NIGHTS[2]))["status"] == "complete"
    assert ds.dataset(night(root, "dec", NIGHTS[2]) / "metrics").to_table().num_rows == 0


def test_a_night_says_how_many_images_the_earlier_owner_maps_held(three_nights):
    _, printed = three_nights
    # night 2: the three images and the broken file of night 1's map; night 3: those and the two of night 2
    assert "skipping 4 images that 1 earlier owner maps hold" in printed[NIGHTS[1]]
    assert "skipping 6 images that 2 earlier owner maps hold" in printed[NIGHTS[2]]


def test_the_nights_metrics_read_as_one_partitioned_table_in_duckdb(three_nights):
    import duckdb

    root, _ = three_nights
    dec = root / "dec"
    # the query of docs/operations.md: every complete night's metrics, with its night as a column
    rows = duckdb.sql(f"""
        SELECT CAST(m.night AS VARCHAR) AS night, count(DISTINCT m.image_id) AS images
        FROM read_parquet('{dec}/night=*/metrics/*.parquet', hive_partitioning = true) m
        WHERE CAST(m.night AS VARCHAR) IN (
            SELECT regexp_extract(filename, 'night=([0-9-]+)', 1)
            FROM read_json_auto('{dec}/night=*/_manifest.json', filename = true) WHERE status = 'complete')
        GROUP BY ALL ORDER BY night""").fetchall()
    assert rows == [(NIGHTS[0], 3), (NIGHTS[1], 2)]
    ct = duckdb.sql(f"""SELECT count(*) FROM read_parquet('{root}/ct/night=*/ciphertexts/*.parquet',
                        hive_partitioning = true)""").fetchall()[0][0]
    # two grey and an RGB image, then a grey and an RGB one: 5 + 4 channels, 16x16 each in four 8x8 tiles
    assert ct == (5 + 4) * 4


def test_the_nights_metrics_read_as_one_partitioned_table_in_spark_sql(three_nights):
    from pyspark.sql import SparkSession

    root, _ = three_nights
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    df = spark.read.option("basePath", str(root / "dec")).parquet(str(root / "dec" / "night=*" / "metrics"))
    df.createOrReplaceTempView("metrics")
    rows = spark.sql("SELECT CAST(night AS STRING) AS night, count(DISTINCT image_id) AS n FROM metrics "
                     "GROUP BY night ORDER BY night").collect()
    assert [(r.night, r.n) for r in rows] == [(NIGHTS[0], 3), (NIGHTS[1], 2)]


def test_a_skip_directory_that_does_not_exist_is_refused_by_name(nights, capsys):
    root, _ = nights
    code = main(["encrypt", "--keys", str(root / "pub"), "--input", str(root / "images"),
                 "--out", str(root / "elsewhere"), "--skip-encrypted", str(root / "no-such-maps"), *ENC])
    assert code != 0
    err = capsys.readouterr().err
    assert f"--skip-encrypted {root / 'no-such-maps'}: not a local directory" in err
    assert not (root / "elsewhere" / "_manifest.json").exists()


def test_one_owner_map_named_alone_is_skipped_and_nothing_else(three_nights):
    root, _ = three_nights
    out = root / "since-night-1"
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(root / "images"), "--out", str(out),
                 "--skip-encrypted", str(night(root, "owner", NIGHTS[0])), *ENC]) == 0
    owner = out.with_name(out.name + ".owner")
    names = {r.rsplit("/", 1)[-1] for r in ds.dataset(owner / "images").to_table().column("source").to_pylist()}
    assert names == {"d.png", "e.png"}
