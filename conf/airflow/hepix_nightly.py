"""hepix_nightly: an Airflow DAG that encrypts tonight's new images, processes them on the cluster, verifies
and decrypts them, one run per night (docs/operations.md#scheduling).  Airflow 3 (the task SDK,
``airflow.sdk``); Airflow 2.10 still parses and runs it.

    encrypt (owner, public keys) -> process (cluster, SparkSubmitOperator, public keys)
        -> verify (owner) -> decrypt (owner, secret key; --expect-ops the night's chain, every image
           spot-checked against the owner map's secret samples)

Every path derives from the run's logical date ``ds``, checked to be a date ``YYYY-MM-DD`` first, each night's
tables in ``night=YYYY-MM-DD`` directories that DuckDB and Spark SQL read as one partitioned table::

    ROOT/ct/night=DS/                encrypt's output: what the cluster is handed
    ROOT/processed/night=DS/         process's output
    OWNER_ROOT/owner/night=DS/       encrypt's owner map (which id is which file): the owner's record of the night
    OWNER_ROOT/dec/night=DS/         decrypt's metrics (and rejects), which name the owner's files

ROOT is what the cluster reads and writes; OWNER_ROOT stays on the owner's machine.
``encrypt --skip-encrypted OWNER_ROOT/owner`` takes only the images no earlier night's owner map holds; a night
with nothing new is an empty complete run, which every later step goes through without a special case.

The schedule is a ``CronDataIntervalTimetable``: the run that starts after 01:30 on 2026-11-28 covers the
interval ending then, and its ``ds`` is 2026-11-27, the night it encrypts (on Airflow 2 and 3 alike; a bare
cron string is a ``CronTriggerTimetable`` on Airflow 3, whose ``ds`` would be the day the run starts).

Retries and re-runs are safe: hepix writes ``_manifest.json`` and the owner map last, so a failed job commits
nothing.  Before its job, each step asks whether the night is done, and only the owner's records decide
(conf/airflow/hepix_nightly_steps.py): encrypt is done when the night's owner map says complete; process when,
besides, ROOT/processed holds a complete run made from that encrypt run; decrypt when OWNER_ROOT/dec holds a
complete run made from the processed run.  A manifest the cluster wrote can make a step run again, never skip
it; a malformed one is a one-line warning.  encrypt resumes after its last committed batch, and starts afresh
(``--overwrite``) where the owner has no record of the night.  ``max_active_runs=1`` runs the nights one after
the other, in date order (a backfill on Airflow 3 with ``airflow backfill create ... --max-active-runs 1``: its
runs are not counted in the DAG's); whatever runs at once, one night's encrypt at a time holds OWNER_ROOT's lock.

The jobs run without a shell: hepix's CLI as a list of arguments (each option as ``--option=VALUE``), and
``spark-submit`` through SparkSubmitOperator, whose arguments are a list too.  No setting or run parameter is
rendered by Jinja.  A night's directories in ROOT must be plain directories inside it (not links the cluster
planted), and the run parameter ``public_keys`` a directory without a secret key.

Configured by the environment of the Airflow scheduler, DAG processor and workers (read when the DAG is parsed):

    HEPIX_NIGHTLY_ROOT         ROOT above (required; an absolute path or URL the owner's machine and the cluster
                               both see)
    HEPIX_NIGHTLY_OWNER_ROOT   OWNER_ROOT above, an absolute local directory never handed to the cluster, not
                               inside ROOT (default ROOT.owner beside ROOT)
    HEPIX_NIGHTLY_IMAGES       the growing image directory (required; absolute)
    HEPIX_NIGHTLY_PUBLIC_KEYS  the public key directory (`hepix export-public --for-op` the night's chain, or
                               `hepix keygen --op ... --public-out`: only the evaluation keys the chain needs):
                               encrypt and process read only it; the default of the run parameter
                               ``public_keys``
    HEPIX_NIGHTLY_KEYS         the owner's key directory with the secret key, read by decrypt only
    HEPIX_NIGHTLY_OPS          the night's op chain, split like shell words (default brightness:20): encrypt
                               declares it (--for-op), process runs it, decrypt expects it
    HEPIX_NIGHTLY_ENCRYPT_ARGS more encrypt options, split like shell words (e.g. --tile 8x8; never run by a
                               shell; the options the DAG sets itself are refused)
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

``python hepix_nightly.py YYYY-MM-DD`` runs one night in this process (Airflow's ``dag.test``) and prints, last,
a JSON line of the run's state and each task's state and tries.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

try:                                    # Airflow 3: the task SDK
    from airflow.sdk import DAG, BaseOperator, CronDataIntervalTimetable, Param
    from airflow.sdk.exceptions import AirflowConfigException, AirflowFailException
except ImportError:                     # Airflow 2.10
    from airflow import DAG
    from airflow.exceptions import AirflowConfigException, AirflowFailException
    from airflow.models.baseoperator import BaseOperator
    from airflow.models.param import Param
    from airflow.timetables.interval import CronDataIntervalTimetable
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

HOME = Path(os.environ.get("HEPIX_HOME") or Path(__file__).resolve().parents[2])


def _load_steps():
    """conf/airflow/hepix_nightly_steps.py of HEPIX_HOME, loaded from its file (Airflow's Python has no hepix
    packages on its path, and this file may be a copy in another DAG folder)."""
    name, path = "hepix_nightly_steps", HOME / "conf" / "airflow" / "hepix_nightly_steps.py"
    if not path.is_file():
        raise AirflowConfigException(f"HEPIX_HOME {str(HOME)!r} is not a hepix checkout (no "
                                     "conf/airflow/hepix_nightly_steps.py): set it to one")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


steps = _load_steps()


def setting(name: str, default: str) -> str:
    return os.environ.get(name, default)


try:
    CONFIG = steps.Config.from_env(os.environ, HOME)
except steps.Refused as e:
    raise AirflowConfigException(f"hepix_nightly: {e}") from None
try:
    START = datetime.fromisoformat(setting("HEPIX_NIGHTLY_START", "2026-01-01")).replace(tzinfo=timezone.utc)
except ValueError:
    raise AirflowConfigException("hepix_nightly: HEPIX_NIGHTLY_START is not a date YYYY-MM-DD") from None


def night(context) -> "steps.Paths":
    """The run's night (its logical date), checked to be a date, and its directories (those in ROOT checked to be
    plain directories inside it)."""
    ds = context.get("ds")
    if ds is None:
        raise AirflowFailException("hepix_nightly: this run has no logical date, so no night: trigger it with one "
                                   "(airflow dags trigger --logical-date YYYY-MM-DD...)")
    try:
        p = CONFIG.paths(ds)
        CONFIG.check_cluster_dirs(p)
    except steps.Refused as e:
        raise AirflowFailException(f"hepix_nightly: {e}") from None
    return p


def public_keys(context) -> str:
    try:
        return steps.public_key_dir(context["params"].get("public_keys"))
    except steps.Refused as e:
        raise AirflowFailException(f"hepix_nightly: {e}") from None


class HepixStep(BaseOperator):
    """A hepix job on the owner's machine (encrypt, verify or decrypt), run as a list of arguments without a
    shell, unless the owner's records say that the night has it done already."""

    template_fields = ()                # nothing here goes through Jinja

    def __init__(self, *, step: str, **kwargs):
        super().__init__(**kwargs)
        if step not in ("encrypt", "verify", "decrypt"):
            raise ValueError(f"unknown hepix step {step!r}")
        self.step = step
        self._command = None

    def execute(self, context):
        p = night(context)
        if self.step == "encrypt":
            keys = public_keys(context)
            steps.private_dirs(CONFIG.owner_root, CONFIG.owner_maps())
            with steps.exclusive(CONFIG.owner_root, self.log):
                if CONFIG.encrypt_done(p, self.log):
                    self.log.info("night %s: the owner map %s holds a complete encrypt run: nothing to do", p.night,
                                  p.owner)
                    return None
                fresh = not os.path.lexists(os.path.join(steps.local_path(p.owner), steps.OWNER_JSON))
                return self._run_command(p, CONFIG.encrypt_command(p, keys, fresh=fresh))
        if self.step == "verify":
            return self._run_command(p, CONFIG.verify_command(p))
        if CONFIG.decrypt_done(p, self.log):
            self.log.info("night %s: %s holds a complete decrypt of %s already: nothing to do", p.night, p.dec,
                          p.processed)
            return None
        kept = CONFIG.set_aside_decrypt(p, self.log)       # decrypt writes a new or empty directory only
        if kept is not None:
            self.log.info("night %s: the earlier decrypt in %s is not of %s: kept as %s", p.night, p.dec,
                          p.processed, kept)
        return self._run_command(p, CONFIG.decrypt_command(p))

    def _run_command(self, p, argv: list[str]) -> None:
        self._command = steps.Command(argv)
        code = self._command.run(self.log)
        if code != 0:
            raise RuntimeError(f"hepix {self.step} of night {p.night} failed (exit status {code})")
        return None

    def on_kill(self):
        if self._command is not None:
            self._command.kill()


class HepixProcess(SparkSubmitOperator):
    """``spark-submit spark-submit/hepix_main.py process ...`` for the night, unless the owner's records and
    ROOT/processed say it is done; the arguments are set here from the checked night, never by Jinja."""

    template_fields = ()

    def execute(self, context, **kwargs):      # kwargs: what Airflow's operator metaclass passes along
        p = night(context)
        if CONFIG.process_done(p, self.log):
            self.log.info("night %s: %s holds a complete run of %s already: nothing to do", p.night, p.processed,
                          p.ct)
            return None
        self.application_args = CONFIG.process_args(p, public_keys(context))
        self.name = f"hepix-process-{p.night}"
        return super().execute(context, **kwargs)


with DAG(
    dag_id="hepix_nightly",
    description="encrypt tonight's new images, process them on the cluster, verify, decrypt",
    schedule=CronDataIntervalTimetable(setting("HEPIX_NIGHTLY_SCHEDULE", "30 1 * * *"), timezone="UTC"),
    start_date=START,
    catchup=setting("HEPIX_NIGHTLY_CATCHUP", "0") == "1",
    max_active_runs=1,
    default_args={"retries": int(setting("HEPIX_NIGHTLY_RETRIES", "2")),
                  "retry_delay": timedelta(seconds=float(setting("HEPIX_NIGHTLY_RETRY_DELAY", "600")))},
    params={"public_keys": Param(setting("HEPIX_NIGHTLY_PUBLIC_KEYS", ""), type="string", minLength=1,
                                 description="public key directory of encrypt and process (no secret key)")},
    tags=["hepix"],
) as dag:
    encrypt = HepixStep(task_id="encrypt", step="encrypt")
    python = str(Path(setting("HEPIX_VENV", str(HOME / ".venv"))) / "bin" / "python")
    process = HepixProcess(
        task_id="process",
        conn_id=setting("HEPIX_NIGHTLY_SPARK_CONN", "hepix_spark"),
        application=str(HOME / "spark-submit" / "hepix_main.py"),
        properties_file=str(HOME / "conf" / "spark-hepix.conf"),
        py_files=os.environ.get("HEPIX_NIGHTLY_PY_FILES") or None,
        archives=os.environ.get("HEPIX_NIGHTLY_ARCHIVES") or None,
        name="hepix-process",
        env_vars={"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python},
        conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )
    verify = HepixStep(task_id="verify", step="verify")
    decrypt = HepixStep(task_id="decrypt", step="decrypt")
    encrypt >> process >> verify >> decrypt


if __name__ == "__main__":
    # `python hepix_nightly.py YYYY-MM-DD`: one night in this process (Airflow's dag.test), as the tests run it
    import inspect
    import json

    try:
        ds = steps.night_name(sys.argv[1]) if len(sys.argv) > 1 else None
    except steps.Refused as e:
        sys.exit(f"hepix_nightly: {e}")
    logical = datetime.fromisoformat(ds).replace(tzinfo=timezone.utc) if ds else None
    if "logical_date" in inspect.signature(dag.test).parameters:       # Airflow 3
        run = dag.test(**({"logical_date": logical} if logical else {}))
    else:                                                               # Airflow 2.10
        # dag.test replaces an earlier run of the same date; deleting it needs the user table of its notes known
        from airflow.providers.fab.auth_manager.models import User  # noqa: F401

        run = dag.test(execution_date=logical)
    state = (lambda s: None if s is None else str(getattr(s, "value", s)))
    print(json.dumps({"dag_id": dag.dag_id, "night": ds, "state": state(run.state),
                      "tasks": {ti.task_id: {"state": state(ti.state), "tries": ti.try_number}
                                for ti in run.get_task_instances()}}), flush=True)
    sys.exit(0 if state(run.state) == "success" else 1)
