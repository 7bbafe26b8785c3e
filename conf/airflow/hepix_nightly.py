"""hepix_nightly: an Airflow DAG that encrypts tonight's new images, processes them on the cluster, verifies
and decrypts them, one run per night (docs/operations.md#scheduling).

    encrypt (owner, public keys) -> process (cluster, SparkSubmitOperator, public keys)
        -> verify (owner) -> decrypt (owner, secret key)

Every path derives from the run's logical date ``ds``, each night's tables in ``night=YYYY-MM-DD``
directories that DuckDB and Spark SQL read as one partitioned table::

    ROOT/ct/night=DS/                encrypt's output: what the cluster is handed
    ROOT/processed/night=DS/         process's output
    OWNER_ROOT/owner/night=DS/       encrypt's owner map (which id is which file)
    OWNER_ROOT/dec/night=DS/         decrypt's metrics (and rejects), which name the owner's files

ROOT is what the cluster reads and writes; OWNER_ROOT stays on the owner's machine.
``encrypt --skip-encrypted OWNER_ROOT/owner`` takes only the images no earlier night's owner map holds; a night
with nothing new is an empty complete run, which every later step goes through without a special case.

Retries and re-runs are safe: hepix writes ``_manifest.json`` last, so a failed job commits nothing and a
night's directory holds a complete run or none.  Each step first looks there: a complete run made from
its input (its manifest names the input's run as parent) means the step is done and it does nothing; else
the job runs (encrypt resumes after its last committed batch).  ``max_active_runs=1``: nights never
overlap, so a backfill (``airflow dags backfill``, or catchup) runs them in date order.

Configured by the environment of the Airflow scheduler and workers (read when the DAG is parsed):

    HEPIX_NIGHTLY_ROOT         ROOT above (required; a path the owner's machine and the cluster both see)
    HEPIX_NIGHTLY_OWNER_ROOT   OWNER_ROOT above, a local directory never handed to the cluster (default
                               ROOT.owner beside ROOT)
    HEPIX_NIGHTLY_IMAGES       the growing image directory (required)
    HEPIX_NIGHTLY_PUBLIC_KEYS  the public key directory (`hepix export-public`): encrypt and process read
                               only it; the default of the run parameter ``public_keys``
    HEPIX_NIGHTLY_KEYS         the owner's key directory with the secret key, read by decrypt only
    HEPIX_NIGHTLY_OPS          process's op chain, space-separated (default brightness:20)
    HEPIX_NIGHTLY_ENCRYPT_ARGS more encrypt options, space-separated (e.g. --tile 8x8)
    HEPIX_NIGHTLY_OWNER_MASTER the Spark master of the owner's jobs (default local[2])
    HEPIX_HOME                 the hepix checkout (default: the one this file is in)
    HEPIX_VENV                 its virtualenv (default HEPIX_HOME/.venv): the hepix CLI and the Python of
                               the Spark jobs; its bin/ must be on the workers' PATH for spark-submit
    HEPIX_NIGHTLY_HEPIX        the hepix CLI (default HEPIX_VENV/bin/hepix)
    HEPIX_NIGHTLY_SPARK_CONN   the Spark connection of process (default hepix_spark, e.g.
                               AIRFLOW_CONN_HEPIX_SPARK='{"conn_type": "spark", "host": "yarn"}')
    HEPIX_NIGHTLY_PY_FILES, HEPIX_NIGHTLY_ARCHIVES
                               for a cluster: spark-submit/package.sh's dist/hepix-src.zip and
                               dist/hepix-env.tar.gz#env
    HEPIX_NIGHTLY_START, HEPIX_NIGHTLY_SCHEDULE, HEPIX_NIGHTLY_CATCHUP, HEPIX_NIGHTLY_RETRIES,
    HEPIX_NIGHTLY_RETRY_DELAY  first night (2026-01-01), cron schedule (30 1 * * *), catchup (0),
                               retries (2) and seconds between them (600)

The key directory of encrypt and process is the run parameter ``public_keys`` (trigger with
``{"public_keys": DIR}`` to use another public key set): the DAG never reads a secret key except in
decrypt, on the owner's side.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow import DAG
from airflow.exceptions import AirflowConfigException
from airflow.models.param import Param
from airflow.operators.bash import BashOperator
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"


def setting(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise AirflowConfigException(f"{name} is not set: the hepix_nightly DAG needs it in the scheduler's and "
                                     "workers' environment (see conf/airflow/hepix_nightly.py)")
    return value


HOME = Path(setting("HEPIX_HOME", str(Path(__file__).resolve().parents[2])))
VENV = Path(setting("HEPIX_VENV", str(HOME / ".venv")))
HEPIX = setting("HEPIX_NIGHTLY_HEPIX", str(VENV / "bin" / "hepix"))
ROOT = setting("HEPIX_NIGHTLY_ROOT").rstrip("/")
OWNER_ROOT = setting("HEPIX_NIGHTLY_OWNER_ROOT", ROOT + ".owner").rstrip("/")
IMAGES = setting("HEPIX_NIGHTLY_IMAGES")
OWNER_MASTER = setting("HEPIX_NIGHTLY_OWNER_MASTER", "local[2]")

CT = ROOT + "/ct/night={{ ds }}"
OWNER = OWNER_ROOT + "/owner/night={{ ds }}"
PROCESSED = ROOT + "/processed/night={{ ds }}"
DEC = OWNER_ROOT + "/dec/night={{ ds }}"


def manifest(directory: str) -> dict | None:
    """The manifest of a complete run in ``directory``, or None (no manifest, another status, unreadable)."""
    try:
        doc = json.loads((Path(directory) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("status") == "complete" else None


def done(out: str, parent: str | None) -> bool:
    """``out`` holds a complete run, made from the complete run in ``parent`` when one is named."""
    made = manifest(out)
    if made is None:
        return False
    if parent is None:
        return True
    source = manifest(parent)
    return source is not None and (made.get("parent") or {}).get("run_id") == source.get("run_id")


class Once:
    """A step that does nothing when its output already holds a complete run of its input (a retry after the
    commit, a re-run night); the job otherwise.  ``done_out`` and ``done_parent`` are templated."""

    def execute(self, context, **kwargs):      # kwargs: what Airflow's operator metaclass passes along
        if done(self.done_out, self.done_parent or None):
            log.info("%s holds a complete run%s already: nothing to do", self.done_out,
                     f" of {self.done_parent}" if self.done_parent else "")
            return None
        return super().execute(context, **kwargs)


class OnceBash(Once, BashOperator):
    template_fields = (*BashOperator.template_fields, "done_out", "done_parent")

    def __init__(self, *, done_out: str, done_parent: str = "", **kwargs):
        super().__init__(**kwargs)
        self.done_out, self.done_parent = done_out, done_parent


class OnceSparkSubmit(Once, SparkSubmitOperator):
    template_fields = (*SparkSubmitOperator.template_fields, "done_out", "done_parent")

    def __init__(self, *, done_out: str, done_parent: str = "", **kwargs):
        super().__init__(**kwargs)
        self.done_out, self.done_parent = done_out, done_parent


def hepix(*args: str) -> str:
    """A hepix command line for a BashOperator (Jinja templates in ``args`` are left for Airflow)."""
    return " ".join([shlex.quote(HEPIX), *args])


def q(path: str) -> str:
    return shlex.quote(path)


with DAG(
    dag_id="hepix_nightly",
    description="encrypt tonight's new images, process them on the cluster, verify, decrypt",
    schedule=setting("HEPIX_NIGHTLY_SCHEDULE", "30 1 * * *"),
    start_date=datetime.fromisoformat(setting("HEPIX_NIGHTLY_START", "2026-01-01")).replace(tzinfo=timezone.utc),
    catchup=setting("HEPIX_NIGHTLY_CATCHUP", "0") == "1",
    max_active_runs=1,
    default_args={"retries": int(setting("HEPIX_NIGHTLY_RETRIES", "2")),
                  "retry_delay": timedelta(seconds=float(setting("HEPIX_NIGHTLY_RETRY_DELAY", "600")))},
    params={"public_keys": Param(setting("HEPIX_NIGHTLY_PUBLIC_KEYS", ""), type="string", minLength=1,
                                 description="public key directory of encrypt and process (no secret key)")},
    render_template_as_native_obj=False,
    tags=["hepix"],
) as dag:
    encrypt = OnceBash(
        task_id="encrypt",
        done_out=CT,
        env={"HEPIX_PUBLIC_KEYS": "{{ params.public_keys }}"},     # a parameter reaches the shell quoted
        append_env=True,
        bash_command=f"mkdir -p -m 0700 {q(OWNER_ROOT)} {q(OWNER_ROOT + '/owner')} && " + hepix(
            "encrypt", "--keys", '"$HEPIX_PUBLIC_KEYS"', "--input", q(IMAGES), "--out", q(CT),
            "--owner", q(OWNER), "--skip-encrypted", q(OWNER_ROOT + "/owner"), "--master", q(OWNER_MASTER), "--quiet",
            *shlex.split(setting("HEPIX_NIGHTLY_ENCRYPT_ARGS", ""))),
    )
    ops = [a for op in shlex.split(setting("HEPIX_NIGHTLY_OPS", "brightness:20")) for a in ("--op", op)]
    python = str(VENV / "bin" / "python")
    process = OnceSparkSubmit(
        task_id="process",
        done_out=PROCESSED,
        done_parent=CT,
        conn_id=setting("HEPIX_NIGHTLY_SPARK_CONN", "hepix_spark"),
        application=str(HOME / "spark-submit" / "hepix_main.py"),
        application_args=["process", "--keys", "{{ params.public_keys }}", "--input", CT, "--out", PROCESSED,
                          *ops, "--quiet"],
        properties_file=str(HOME / "conf" / "spark-hepix.conf"),
        py_files=os.environ.get("HEPIX_NIGHTLY_PY_FILES") or None,
        archives=os.environ.get("HEPIX_NIGHTLY_ARCHIVES") or None,
        name="hepix-process-{{ ds }}",
        env_vars={"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python},
        conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )
    verify = BashOperator(
        task_id="verify",
        bash_command=hepix("verify", q(PROCESSED), "--master", q(OWNER_MASTER), "--quiet"),
    )
    decrypt = OnceBash(
        task_id="decrypt",
        done_out=DEC,
        done_parent=PROCESSED,
        bash_command=hepix("decrypt", "--keys", q(setting("HEPIX_NIGHTLY_KEYS")), "--input", q(PROCESSED),
                           "--out", q(DEC), "--owner", q(OWNER), "--images", q(IMAGES),
                           "--master", q(OWNER_MASTER), "--quiet"),
    )
    encrypt >> process >> verify >> decrypt


if __name__ == "__main__":
    # `python hepix_nightly.py YYYY-MM-DD`: one night in this process (Airflow's dag.test), as the tests run it
    import sys

    # dag.test replaces an earlier run of the same date; deleting it needs the user table of its notes known
    from airflow.providers.fab.auth_manager.models import User  # noqa: F401

    night = datetime.fromisoformat(sys.argv[1]).replace(tzinfo=timezone.utc) if len(sys.argv) > 1 else None
    run = dag.test(execution_date=night)
    sys.exit(0 if run.state == "success" else 1)
