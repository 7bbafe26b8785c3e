"""The options of the JVMs this package's clusters start and of the applications submitted to them, in one place.

The tests' clusters and applications (``tests/sparkcluster.py``, ``tests/miniyarn.py``, ``tests/test_yarn.py``),
the tests' own ``spark-submit`` runs (``tests/conftest.py`` sets :func:`submit_jvm_opts` as
``SPARK_SUBMIT_OPTS``), :mod:`~bench.clusters.standalone`, :mod:`~bench.clusters.minidfs` and the cluster
suites of ``hepix bench`` take them from here.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: Options for JVMs that live seconds or minutes (the mini HDFS and YARN, the tests' Spark daemons, drivers,
#: application masters and executors): C1 compiles alone (C2's compilations cost more of a core than they save
#: in such a run; it was 40% of the JVMs' CPU in the YARN and Airflow tests), as hepix's own local sessions do.
SHORT_JVM_OPTS = "-XX:TieredStopAtLevel=1"


def codegen_settings() -> dict[str, str]:
    """hepix's local sessions' settings that interpret Spark's expressions (``jobs.runtime.session.LOCAL_DEFAULTS``),
    for other Spark applications."""
    from jobs.runtime.session import LOCAL_DEFAULTS

    return {k: v for k, v in LOCAL_DEFAULTS.items() if k.startswith("spark.sql.codegen.")}


def conf_args(settings: Mapping[str, str]) -> list[str]:
    """``settings`` as spark-submit options: ``--conf KEY=VALUE`` each, in their order."""
    return [word for key, value in settings.items() for word in ("--conf", f"{key}={value}")]


def event_log_settings(folder: Path) -> dict[str, str]:
    """Spark's settings that write an application's event log into ``folder`` (created now) as plain JSON lines,
    neither compressed nor rolled, so that a reader finds one file per finished application."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": folder.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


def cluster_spark_opts() -> tuple[str, ...]:
    """spark-submit options for a short cluster application (YARN, standalone): :data:`SHORT_JVM_OPTS` for its
    driver's, application master's and executors' JVMs, and Spark's expressions interpreted, as in hepix's local
    sessions."""
    jvms = {f"spark.{jvm}JavaOptions": SHORT_JVM_OPTS
            for jvm in ("driver.default", "executor.default", "yarn.am.extra")}
    return tuple(conf_args({**jvms, **codegen_settings()}))


def submit_jvm_opts() -> str:
    """``SPARK_SUBMIT_OPTS`` for a short-lived ``spark-submit`` JVM (a client-mode application's driver): Spark's
    classes mapped from the class-data archive ``make setup`` wrote, as the sessions hepix starts itself do
    (``jobs/runtime/jvmarchive.py``; a JVM on other jars ignores it), :data:`SHORT_JVM_OPTS`, and Spark's
    expressions interpreted (``spark.*`` system properties are Spark settings)."""
    from jobs.runtime import jvmarchive

    codegen = [f"-D{k}={v}" for k, v in codegen_settings().items()]
    return " ".join([jvmarchive.java_options(), SHORT_JVM_OPTS, *codegen]).strip()


def submit_jvm_env() -> dict[str, str]:
    """The environment variable that starts a cluster application's ``spark-submit`` JVM: this process's
    ``SPARK_SUBMIT_OPTS`` where it has one (the tests set it to :func:`submit_jvm_opts` for all they start),
    else :func:`submit_jvm_opts`."""
    opts = os.environ.get("SPARK_SUBMIT_OPTS")
    return {"SPARK_SUBMIT_OPTS": submit_jvm_opts() if opts is None else opts}
