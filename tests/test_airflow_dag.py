"""The nightly Airflow DAG (conf/airflow/hepix_nightly.py) run by Airflow's own ``dag.test()`` on local Spark.

Airflow runs in its own virtualenv (tools/setup_airflow.sh, built by ``make setup``): each night is one
subprocess, ``AIRFLOW_PYTHON conf/airflow/hepix_nightly.py YYYY-MM-DD``, on a SQLite database of the module's
own, with hepix's CLI and spark-submit taken from this virtualenv.  The jobs are hepix's: encrypt, process
(SparkSubmitOperator, master ``local[2]`` through ``AIRFLOW_CONN_HEPIX_SPARK``), verify, decrypt.

Two roots over the same three 16x16 images: a clean night, and the same night with a failure injected once
into a task of each job (``HEPIX_TEST_FAULT``) and one retry allowed.  Then, on the second root: the night
re-run, a second night with two new images, and a third whose encrypt fails with no retry.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from jobs.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent
DAG_FILE = REPO_ROOT / "conf" / "airflow" / "hepix_nightly.py"
CACHE = os.environ.get("HEPIX_CACHE") or str(Path.home() / ".cache" / "hepix")

pytestmark = [pytest.mark.seconds(330), pytest.mark.spark, pytest.mark.slow]

NIGHT1, NIGHT2, NIGHT3 = "2026-03-01", "2026-03-02", "2026-03-03"
#: Metrics columns that differ between two runs of the same night by construction: random ids, times, and CKKS's
#: error before rounding (fresh noise each encryption; the rounded pixels are exact, mse 0, in both).
PER_RUN = {"run_id", "image_id", "encrypt_seconds", "process_seconds", "decrypt_seconds", "max_abs_err"}


def airflow_python() -> str:
    found = subprocess.run([str(REPO_ROOT / "tools" / "setup_airflow.sh"), CACHE, "--check"], capture_output=True,
                           text=True)
    if found.returncode != 0:
        pytest.skip(f"the Airflow virtualenv is not built in {CACHE}/airflow: `make setup` builds it with "
                    "tools/setup_airflow.sh, which failed or did not run here (it needs PyPI once)")
    return found.stdout.strip()


def add_images(images: Path, names, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i, name in enumerate(names):
        shape = (16, 16, 3) if i % 2 else (16, 16)
        Image.fromarray(rng.integers(0, 200, size=shape, dtype=np.uint8)).save(images / name)


class Nights:
    """One data root of the DAG, its Airflow home, and a way to run a night."""

    def __init__(self, base: Path, python: str, keys: Path, pub: Path, migrated: Path | None = None):
        self.base, self.python = base, python
        self.root, self.owner_root = base / "root", base / "root.owner"      # the cluster's side, the owner's
        self.images, self.faults = base / "images", base / "faults"
        for d in (self.images, self.faults):
            d.mkdir(parents=True)
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(base / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent), "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW_CONN_HEPIX_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "HEPIX_NIGHTLY_ROOT": str(self.root), "HEPIX_NIGHTLY_IMAGES": str(self.images),
            "HEPIX_NIGHTLY_PUBLIC_KEYS": str(pub), "HEPIX_NIGHTLY_KEYS": str(keys),
            "HEPIX_NIGHTLY_ENCRYPT_ARGS": "--tile 8x8", "HEPIX_NIGHTLY_OWNER_MASTER": "local[2]",
            "HEPIX_NIGHTLY_RETRY_DELAY": "0", "HEPIX_VENV": sys.prefix,
            # hepix's code from this checkout, spark-submit from this virtualenv
            "PYTHONPATH": str(REPO_ROOT), "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        self.env.pop("HEPIX_KEEP_SESSION", None)
        # spark-submit as SparkSubmitOperator finds it on the PATH, failing once when HEPIX_TEST_SUBMIT_ONCE names
        # a directory to create (then it exists, and every later call runs)
        wrapper = base / "bin" / "spark-submit"
        wrapper.parent.mkdir()
        wrapper.write_text('#!/bin/sh\n'
                           'if [ -n "$HEPIX_TEST_SUBMIT_ONCE" ] && mkdir "$HEPIX_TEST_SUBMIT_ONCE" 2>/dev/null; then\n'
                           '  echo "test: spark-submit fails once" >&2; exit 1\nfi\n'
                           f'exec {Path(sys.executable).parent / "spark-submit"} "$@"\n')
        wrapper.chmod(0o755)
        self.env["PATH"] = f"{wrapper.parent}:{self.env['PATH']}"
        self.log = base / "airflow.log"
        # Airflow's database: migrated here, or a copy of one migrated for another root (SQLite: one file)
        self.db = base / "airflow" / "airflow.db"
        if migrated is None:
            subprocess.run([python, "-m", "airflow", "db", "migrate"], env=self.env, check=True, capture_output=True)
        else:
            self.db.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(migrated, self.db)

    def night(self, ds_: str, *, retries: int = 0, fault: bool = False) -> int:
        env = {**self.env, "HEPIX_NIGHTLY_RETRIES": str(retries)}
        if fault:       # a task of encrypt's fails once, and the process job's spark-submit
            env["HEPIX_TEST_FAULT"] = f"raise:{self.faults}"
            env["HEPIX_TEST_SUBMIT_ONCE"] = str(self.faults / "spark-submit.once")
        with open(self.log, "a") as log:
            log.write(f"\n===== night {ds_} retries={retries} fault={fault}\n")
            log.flush()
            return subprocess.run([self.python, str(DAG_FILE), ds_], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=900).returncode

    def path(self, table: str, ds_: str) -> Path:
        side = self.owner_root if table in ("owner", "dec") else self.root
        return side / table / f"night={ds_}"

    def manifest(self, table: str, ds_: str) -> dict:
        return json.loads((self.path(table, ds_) / "_manifest.json").read_text())

    def sources(self, ds_: str) -> set[str]:
        images = self.path("owner", ds_) / "images"
        rows = ds.dataset(images).to_table().column("source").to_pylist() if images.is_dir() else []
        return {Path(s.removeprefix("file:")).name for s in rows}

    def ciphertext_keys(self, table: str, ds_: str) -> list[tuple]:
        """(source, channel, tile_y, tile_x, index) of every row, sorted: ids are random per run."""
        names = {r["image_id"]: Path(r["source"].removeprefix("file:")).name
                 for r in ds.dataset(self.path("owner", ds_) / "images").to_table().to_pylist()}
        rows = ds.dataset(self.path(table, ds_) / "ciphertexts").to_table(
            columns=["image_id", "channel", "tile_y", "tile_x", "index"]).to_pylist()
        return sorted((names[r.pop("image_id")], *r.values()) for r in rows)

    def metrics(self, ds_: str) -> list[tuple]:
        rows = ds.dataset(self.path("dec", ds_) / "metrics").to_table().to_pylist()
        return sorted(tuple((k, Path(v).name if k == "source" else v) for k, v in sorted(r.items())
                            if k not in PER_RUN) for r in rows)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    python = airflow_python()
    base = tmp_path_factory.mktemp("airflow")
    keys, pub = base / "keys", base / "pub"
    assert main(["keygen", "--out", str(keys), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(keys), "--out", str(pub)]) == 0
    clean = Nights(base / "clean", python, keys, pub)
    retried = Nights(base / "retried", python, keys, pub, migrated=clean.db)
    for n in (clean, retried):
        add_images(n.images, ["a.png", "b.png", "c.png"], seed=5)
    codes = {"clean": clean.night(NIGHT1), "retried": retried.night(NIGHT1, retries=1, fault=True)}
    return clean, retried, codes


def test_a_night_runs_end_to_end(runs):
    clean, _, codes = runs
    assert codes["clean"] == 0, clean.log.read_text()[-3000:]
    for table in ("ct", "processed", "dec"):
        assert clean.manifest(table, NIGHT1)["status"] == "complete"
    assert clean.sources(NIGHT1) == {"a.png", "b.png", "c.png"}
    # nothing of the owner's on the cluster's side: no owner map, no decrypted metrics, no file names
    assert sorted(p.name for p in clean.root.iterdir()) == ["ct", "processed"]
    assert not any(b"a.png" in p.read_bytes() for p in clean.root.rglob("*") if p.is_file())
    assert clean.manifest("processed", NIGHT1)["ops"] == ["brightness:20"]
    # two grey images and an RGB one, each channel of 16x16 in four 8x8 tiles, all decrypted exactly
    metrics = ds.dataset(clean.path("dec", NIGHT1) / "metrics").to_table().to_pylist()
    assert {Path(r["source"]).name for r in metrics} == {"a.png", "b.png", "c.png"}
    assert all(r["mse"] == 0 and r["exact_fraction"] == 1 for r in metrics if r["reference"] == "plaintext-processed")
    assert sum(1 for _ in clean.ciphertext_keys("processed", NIGHT1)) == (1 + 3 + 1) * 4


def test_a_night_whose_jobs_failed_once_and_were_retried_holds_the_rows_of_the_clean_run(runs):
    clean, retried, codes = runs
    assert codes["retried"] == 0, retried.log.read_text()[-3000:]
    # the failures happened (an encrypt task, process's spark-submit), and Airflow tried each task again
    assert {p.name for p in retried.faults.iterdir()} == {"encrypt-raise.once", "spark-submit.once"}
    retries = re.findall(r"Marking task as UP_FOR_RETRY\. dag_id=hepix_nightly, task_id=(\w+)", retried.log.read_text())
    assert sorted(retries) == ["encrypt", "process"]
    for table in ("ct", "processed"):
        assert retried.ciphertext_keys(table, NIGHT1) == clean.ciphertext_keys(table, NIGHT1)
    assert retried.metrics(NIGHT1) == clean.metrics(NIGHT1)


def test_a_night_run_again_finds_its_runs_complete_and_changes_nothing(runs):
    _, retried, _ = runs
    before = {t: retried.manifest(t, NIGHT1)["run_id"] for t in ("ct", "processed", "dec")}
    files = sorted(str(p) for side in (retried.root, retried.owner_root) for p in side.rglob("*") if p.is_file())
    assert retried.night(NIGHT1) == 0, retried.log.read_text()[-3000:]
    assert {t: retried.manifest(t, NIGHT1)["run_id"] for t in ("ct", "processed", "dec")} == before
    assert sorted(str(p) for side in (retried.root, retried.owner_root) for p in side.rglob("*") if p.is_file()) \
        == files
    assert "holds a complete run already: nothing to do" in retried.log.read_text()


def test_the_next_night_encrypts_only_the_two_new_images(runs):
    _, retried, _ = runs
    add_images(retried.images, ["d.png", "e.png"], seed=6)
    assert retried.night(NIGHT2) == 0, retried.log.read_text()[-3000:]
    assert retried.sources(NIGHT2) == {"d.png", "e.png"}
    assert retried.manifest("ct", NIGHT2)["counts"]["images_encrypted"] == 2
    metrics = ds.dataset(retried.path("dec", NIGHT2) / "metrics").to_table().column("source").to_pylist()
    assert {Path(s).name for s in metrics} == {"d.png", "e.png"}


def test_a_failing_job_commits_nothing_and_fails_the_night(runs):
    _, retried, _ = runs
    add_images(retried.images, ["f.png"], seed=7)
    shutil.rmtree(retried.faults)
    retried.faults.mkdir()
    assert retried.night(NIGHT3, retries=0, fault=True) != 0
    ct = retried.path("ct", NIGHT3)
    assert not (ct / "_manifest.json").exists()
    assert not list(ct.glob("ciphertexts/*.parquet"))
    assert not retried.path("processed", NIGHT3).exists() and not retried.path("dec", NIGHT3).exists()
    tonight = retried.log.read_text().rsplit("===== night", 1)[-1]
    assert re.search(r"Marking run <DagRun hepix_nightly @ 2026-03-03[^>]*> failed", tonight)
    assert "task_id=process" not in tonight and "task_id=decrypt" not in tonight
