"""The nightly Airflow DAG (conf/airflow/hepix_nightly.py) run by Airflow's own ``dag.test()`` on local Spark.

Airflow runs in its own virtualenv (tools/setup_airflow.sh, built by ``make setup``: Airflow 3): each night is
one subprocess, ``AIRFLOW_PYTHON conf/airflow/hepix_nightly.py YYYY-MM-DD``, on a SQLite database of the
module's own, with hepix's CLI and spark-submit taken from this virtualenv; its last line is the run's state and
each task's state and tries, as Airflow's API gives them.  The jobs are hepix's: encrypt, process
(SparkSubmitOperator, master ``local[2]`` through ``AIRFLOW_CONN_HEPIX_SPARK``), verify, decrypt.

Two roots over the same three 16x16 images: a clean night, and the same night with a failure injected once
into a task of each job (``HEPIX_TEST_FAULT``) and one retry allowed; the second root's directories, its keys
and images have spaces in their paths.  Then, on the second root: the night re-run, a second night with two new
images (with "complete" manifests planted in its directories beforehand, and an extra encrypt option naming a
file whose path holds a shell command), and a third whose encrypt fails with no retry.  Besides: the DAG imports
without a warning, its schedule gives a run the night it covers, and a night that is not a date is refused.
tests/test_airflow_hostile.py checks the DAG's steps without Airflow.
"""
from __future__ import annotations

import json
import os
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
TASKS = ("encrypt", "process", "verify", "decrypt")
#: Metrics columns that differ between two runs of the same night by construction: random ids, times, and CKKS's
#: error before rounding (fresh noise each encryption; the rounded pixels are exact, mse 0, in both).
PER_RUN = {"run_id", "image_id", "encrypt_seconds", "process_seconds", "decrypt_seconds", "max_abs_err",
           "ciphertext_bytes"}        # fresh ciphertexts stored compressed differ by a few bytes per encryption


def airflow_python() -> str:
    """The Airflow virtualenv's Python: ``HEPIX_AIRFLOW_PYTHON`` when set (to run this file on another Airflow,
    such as a 2.10 virtualenv built by hand: docs/operations.md#the-nightly-dag-apache-airflow), else setup's."""
    given = os.environ.get("HEPIX_AIRFLOW_PYTHON")
    if given:
        return given
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


class Run:
    """A night's run: the exit status of ``hepix_nightly.py DS`` and the states it printed last (Airflow's)."""

    def __init__(self, code: int, output: str):
        self.code, self.output = code, output
        lines = [line for line in output.splitlines() if line.startswith('{"dag_id": "hepix_nightly"')]
        self.summary = json.loads(lines[-1]) if lines else {"state": None, "tasks": {}}
        self.state = self.summary["state"]

    def tasks(self, key: str = "state") -> dict:
        return {t: (self.summary["tasks"].get(t) or {}).get(key) for t in TASKS}

    def __repr__(self):
        return f"exit {self.code}, {self.summary}; the run's output ends:\n{self.output[-3000:]}"


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

    def start(self, ds_: str, *, retries: int = 0, fault: bool = False, **settings: str):
        """Start the night ``ds_`` (``settings``: more of the DAG's environment); :meth:`wait` for it."""
        env = {**self.env, "HEPIX_NIGHTLY_RETRIES": str(retries), **settings}
        if fault:       # a task of encrypt's fails once, and the process job's spark-submit
            env["HEPIX_TEST_FAULT"] = f"raise:{self.faults}"
            env["HEPIX_TEST_SUBMIT_ONCE"] = str(self.faults / "spark-submit.once")
        with open(self.log, "a") as log:
            log.write(f"\n===== night {ds_} retries={retries} fault={fault}\n")
            offset = log.tell()
            log.flush()
            return subprocess.Popen([self.python, str(DAG_FILE), ds_], env=env, stdout=log, stderr=subprocess.STDOUT), \
                offset

    def wait(self, started) -> Run:
        proc, offset = started
        try:
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
        with open(self.log, errors="replace") as log:
            log.seek(offset)
            return Run(code, log.read())

    def night(self, ds_: str, **kw) -> Run:
        return self.wait(self.start(ds_, **kw))

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
    keys, pub = base / "owner keys", base / "public keys"
    # the cluster's copy holds the evaluation keys of the nights' chain alone
    assert main(["keygen", "--out", str(keys), "--preset", "addonly-2048", "--op", "brightness:20",
                 "--public-out", str(pub)]) == 0
    clean = Nights(base / "clean", python, keys, pub)
    retried = Nights(base / "retried night", python, keys, pub, migrated=clean.db)     # paths with spaces
    for n in (clean, retried):
        add_images(n.images, ["a.png", "b.png", "c.png"], seed=5)
    # the two roots' nights at once: each is mostly one process waiting for the next (Airflow's, hepix's, Spark's)
    started = {"clean": clean.start(NIGHT1), "retried": retried.start(NIGHT1, retries=1, fault=True)}
    nights = {"clean": clean.wait(started["clean"]), "retried": retried.wait(started["retried"])}
    return clean, retried, nights


def test_a_night_runs_end_to_end(runs):
    clean, _, nights = runs
    run = nights["clean"]
    assert run.code == 0 and run.state == "success", run
    assert run.tasks() == dict.fromkeys(TASKS, "success") and run.tasks("tries") == dict.fromkeys(TASKS, 1), run
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
    clean, retried, nights = runs
    run = nights["retried"]
    assert run.code == 0 and run.state == "success", run
    # the failures happened (an encrypt task, process's spark-submit), and Airflow tried each of those tasks again
    assert {p.name for p in retried.faults.iterdir()} == {"encrypt-raise.once", "spark-submit.once"}
    assert run.tasks() == dict.fromkeys(TASKS, "success"), run
    assert run.tasks("tries") == {"encrypt": 2, "process": 2, "verify": 1, "decrypt": 1}, run
    for table in ("ct", "processed"):
        assert retried.ciphertext_keys(table, NIGHT1) == clean.ciphertext_keys(table, NIGHT1)
    assert retried.metrics(NIGHT1) == clean.metrics(NIGHT1)
    assert " " in str(retried.root) and " " in str(retried.images)      # and the night ran on paths with spaces


def test_a_night_run_again_finds_its_runs_complete_and_changes_nothing(runs):
    _, retried, _ = runs
    before = {t: retried.manifest(t, NIGHT1)["run_id"] for t in ("ct", "processed", "dec")}
    files = sorted(str(p) for side in (retried.root, retried.owner_root) for p in side.rglob("*") if p.is_file())
    run = retried.night(NIGHT1)
    assert run.code == 0 and run.tasks() == dict.fromkeys(TASKS, "success"), run
    assert {t: retried.manifest(t, NIGHT1)["run_id"] for t in ("ct", "processed", "dec")} == before
    assert sorted(str(p) for side in (retried.root, retried.owner_root) for p in side.rglob("*") if p.is_file()) \
        == files


def plant(directory: Path, doc: dict) -> None:
    directory.mkdir(parents=True)
    (directory / "_manifest.json").write_text(json.dumps(doc))


def test_the_next_night_encrypts_only_the_two_new_images_whatever_the_cluster_planted_for_it(runs):
    _, retried, _ = runs
    add_images(retried.images, ["d.png", "e.png"], seed=6)
    # Before the night, the cluster's side holds a "complete" encrypt run of it and a processed run of that: only
    # the owner's own records (tonight's owner map, none yet) decide what the night has done.
    planted = "20260302T013000Z-0badc0de"
    plant(retried.path("ct", NIGHT2), {"job": "encrypt", "run_id": planted, "status": "complete", "runs": [planted],
                                       "files": {"ciphertexts": []}})
    plant(retried.path("processed", NIGHT2), {"job": "process", "run_id": "20260302T013100Z-0badc0de",
                                              "status": "complete", "parent": {"job": "encrypt", "run_id": planted}})
    # And an extra encrypt option whose value is a path with spaces and a shell command in it: one argument for
    # hepix (a Spark settings file it reads), never a command line
    pwned = retried.base.parent / "PWNED"             # a path without spaces, which a shell would not split
    conf = retried.base.parent / f"a;touch {pwned};:" / "spark.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("spark.ui.showConsoleProgress false\n")
    run = retried.night(NIGHT2, HEPIX_NIGHTLY_ENCRYPT_ARGS=f"--tile 8x8 --conf '{conf}'")
    assert run.code == 0 and run.tasks() == dict.fromkeys(TASKS, "success"), run
    assert not pwned.exists()
    assert retried.sources(NIGHT2) == {"d.png", "e.png"}
    ct = retried.manifest("ct", NIGHT2)
    assert ct["counts"]["images_encrypted"] == 2 and ct["run_id"] != planted
    assert retried.manifest("processed", NIGHT2)["parent"]["run_id"] == ct["run_id"]
    metrics = ds.dataset(retried.path("dec", NIGHT2) / "metrics").to_table().column("source").to_pylist()
    assert {Path(s).name for s in metrics} == {"d.png", "e.png"}


def test_a_failing_job_commits_nothing_and_fails_the_night(runs):
    _, retried, _ = runs
    add_images(retried.images, ["f.png"], seed=7)
    shutil.rmtree(retried.faults)
    retried.faults.mkdir()
    run = retried.night(NIGHT3, retries=0, fault=True)
    assert run.code != 0 and run.state == "failed", run
    assert run.tasks() == {"encrypt": "failed", "process": "upstream_failed", "verify": "upstream_failed",
                           "decrypt": "upstream_failed"}, run
    ct = retried.path("ct", NIGHT3)
    assert not (ct / "_manifest.json").exists()
    assert not list(ct.glob("ciphertexts/*.parquet"))
    assert not retried.path("processed", NIGHT3).exists() and not retried.path("dec", NIGHT3).exists()


#: Run in Airflow's Python: the DAG imported with every warning an error, and its schedule's next run after the
#: one covering 2026-11-26 01:30 to 2026-11-27 01:30, as the scheduler computes it from the serialized DAG.
CHECK = """
import json, runpy, sys, warnings
from datetime import datetime, timezone
warnings.simplefilter("error")
dag = runpy.run_path(sys.argv[1], run_name="hepix_nightly_check")["dag"]
warnings.resetwarnings()
from airflow.timetables.base import DataInterval, TimeRestriction
try:
    from airflow.serialization.serialized_objects import DagSerialization as serialization   # Airflow 3
except ImportError:
    from airflow.serialization.serialized_objects import SerializedDAG as serialization      # Airflow 2
timetable = serialization.deserialize_dag(serialization.serialize_dag(dag)).timetable
utc = timezone.utc
last = DataInterval(datetime(2026, 11, 26, 1, 30, tzinfo=utc), datetime(2026, 11, 27, 1, 30, tzinfo=utc))
info = timetable.next_dagrun_info(last_automated_data_interval=last,
                                  restriction=TimeRestriction(earliest=dag.start_date, latest=None, catchup=True))
print(json.dumps({"timetable": type(timetable).__name__, "run_after": info.run_after.isoformat(),
                  "ds": info.logical_date.strftime("%Y-%m-%d")}))
"""


def test_the_dag_imports_without_a_warning_and_a_scheduled_run_covers_the_night_before(runs, tmp_path):
    clean, _, _ = runs
    env = {**clean.env, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run([clean.python, "-W", "error", "-c", CHECK, str(DAG_FILE)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # the run that starts after 01:30 on 2026-11-28 encrypts the night of the 27th
    assert found == {"timetable": "CronDataIntervalTimetable", "run_after": "2026-11-28T01:30:00+00:00",
                     "ds": "2026-11-27"}


def test_a_night_that_is_not_a_date_is_refused_before_anything_runs(runs):
    clean, _, _ = runs
    before = sorted(clean.base.rglob("*"))
    done = subprocess.run([clean.python, str(DAG_FILE), "2026-03-01/../../x"], env=clean.env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == \
        "hepix_nightly: night '2026-03-01/../../x' is not a date YYYY-MM-DD", done.stderr[-3000:]
    assert sorted(clean.base.rglob("*")) == before
