"""Building the Spark session a job runs in.

Launched by ``hepix …`` (plain Python), the job starts its own session:
``--master`` (default ``local[*]``), then hepix's defaults, then the user's
``--conf FILE`` (spark-defaults format).  Launched by ``spark-submit``, the
session already has the submit's settings; hepix then only fills in
defaults the submit left unset.

The jobs that hold the secret key (``decrypt``, ``encrypt --encryption symmetric``) start theirs with
:func:`secret_session`: on a local master only, unless the operator says the cluster is trusted with
the key (``--trusted-cluster`` or ``HEPIX_TRUSTED_CLUSTER=1``), and always with Spark's authentication,
RPC encryption and I/O encryption on (shuffle and spill files, broadcasts and cached blocks are
encrypted on disk) and ``spark.local.dir`` a private 0700 directory that is removed when the job ends.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from hecore.errors import UntrustedSession
from schemas.tables import BLOB_READER_BATCH_ROWS

from . import forkserver, jvmarchive

log = logging.getLogger(__name__)

#: hepix's defaults; any of them can be overridden with --conf FILE or spark-submit --conf.
DEFAULTS = {
    # Arrow batches into the Python workers: tiles and 100-400 KB ciphertext rows, keep them small.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "64",
    "spark.sql.parquet.columnarReaderBatchSize": str(BLOB_READER_BATCH_ROWS),
    # One Python worker per core that lives for the whole job: cache tables are rebuilt per worker.
    "spark.python.worker.reuse": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.files.maxPartitionBytes": str(64 * 2**20),
}

#: Extra defaults when hepix starts Spark itself in local mode (tests, demo, one machine).
LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",   # hepix prints its own progress
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "8",
    # the Python workers forked with the tasks' code already imported (jobs/runtime/pydaemon.py)
    "spark.python.daemon.module": "jobs.runtime.pydaemon",
    # Spark's expressions evaluated as they are, not compiled to Java first: each new query's generated
    # classes cost Janino and then the JIT more than they save on a few thousand ciphertext rows (measured:
    # -12% machine CPU for a fresh encrypt and process of four 256x256 images; a quarter of the JVM's CPU in
    # the pipeline tests).  Interpretation is Spark's own fallback for every expression; factoryMode is an
    # internal setting of Spark's (its test suites run with it).
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def read_conf_file(path: str | os.PathLike) -> dict[str, str]:
    """``key value`` or ``key=value`` lines, ``#`` comments (the spark-defaults.conf format)."""
    conf = {}
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"hepix: --conf {path}: no such file")
    for n, raw in enumerate(p.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" in line and (" " not in line or line.index("=") < line.index(" ")):
            key, _, value = line.partition("=")
        else:
            key, _, value = line.partition(" ")
        key, value = key.strip(), value.strip()
        if not key.startswith("spark.") or not value:
            raise SystemExit(f"hepix: --conf {path}:{n}: expected 'spark.key value', got {raw!r}")
        conf[key] = value
    return conf


def under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


# --- the owner's jobs: the secret key stays home ------------------------------------------------------

#: The operator's word that the cluster may hold the secret key (also ``--trusted-cluster``).
TRUST_ENV = "HEPIX_TRUSTED_CLUSTER"


def add_trust_argument(p) -> None:
    p.add_argument("--trusted-cluster", action="store_true",
                   help=f"run on a non-local master although this job holds the secret key: say so only for a "
                        f"cluster trusted with it (same as {TRUST_ENV}=1); by default such jobs run on a local "
                        "master only")


def trusted_cluster(args) -> bool:
    return bool(getattr(args, "trusted_cluster", False)) or os.environ.get(TRUST_ENV, "") == "1"


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[N,F]``, ``local[*]`` and ``local-cluster[...]``: this machine only."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def planned_master(master: str | None, conf_file: str | None) -> str:
    """The master the job's session will have, found before the session is built."""
    if under_spark_submit():
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()          # attaches to spark-submit's JVM; starts no application
        return SparkConf().get("spark.master", "") or ""
    user = read_conf_file(conf_file) if conf_file else {}
    return master or user.get("spark.master") or "local[*]"


#: Environment variables Spark prefers to ``spark.local.dir`` (SPARK_EXECUTOR_DIRS first, then
#: SPARK_LOCAL_DIRS): set, they would put a secret session's temporary files outside its private directory.
LOCAL_DIR_OVERRIDES = ("SPARK_EXECUTOR_DIRS", "SPARK_LOCAL_DIRS")


def secret_settings(local_dir: str, master: str) -> dict[str, str]:
    """Spark settings of a job holding the secret key: authentication, RPC and I/O encryption, private dir."""
    settings = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true",
                "spark.io.encryption.enabled": "true", "spark.local.dir": local_dir}
    if not master.startswith(("yarn", "k8s://")):
        # YARN and Kubernetes generate and distribute a secret per application themselves.
        settings["spark.authenticate.secret"] = secrets.token_hex(32)
    return settings


# --- one session for the jobs of one process ------------------------------------------------------------

#: ``1``: a plain session (a job that holds no secret) is kept when its job ends, and the next plain job of
#: this process with the same master and settings runs in it -- its Python workers, their imports and the
#: JVM's warm code included.  For a process that runs many jobs one after the other (the tests, a
#: notebook); the jobs that hold a secret never share a session (:func:`secret_session`).
KEEP_ENV = "HEPIX_KEEP_SESSION"

#: The kept session and what it was built with: ``(settings, session)``.
_kept: tuple[tuple, object] | None = None


def _keeping(master: str | None, conf_file: str | None) -> bool:
    """Whether a session of ``master`` is kept: with :data:`KEEP_ENV`, for a plain ``local[N]`` master and
    hepix's own settings (a ``local-cluster`` has executor JVMs of its own, which a test may kill; a
    settings file may ask for anything, failure injection included)."""
    return (os.environ.get(KEEP_ENV, "") == "1" and not under_spark_submit() and conf_file is None
            and re.fullmatch(r"local\[[0-9]+\]", master or "") is not None)


def release_kept_session() -> None:
    """Stop the session kept for the next job, if there is one."""
    global _kept
    if _kept is not None:
        _, spark = _kept
        _kept = None
        if _alive(spark):
            spark.stop()


def _alive(spark) -> bool:
    """Whether ``spark`` can still run a job (whoever held it may have stopped it)."""
    jsc = spark.sparkContext._jsc
    return jsc is not None and not jsc.sc().isStopped()


def _keep(settings: tuple, spark) -> None:
    """Keep ``spark`` for the next plain job, with nothing of this job's left cached in it."""
    global _kept
    spark.catalog.clearCache()
    for rdd in spark.sparkContext._jsc.getPersistentRDDs().values():
        rdd.unpersist(False)
    _kept = (settings, spark)


@contextlib.contextmanager
def plain_session(app: str, master: str | None, conf_file: str | None):
    """A Spark session for a job that holds no secret key, stopped when the block ends (or kept for the
    next such job of this process, with :data:`KEEP_ENV`)."""
    global _kept
    settings = _session_settings(master, conf_file)
    if _kept is not None and _kept[0] == settings and _keeping(master, conf_file) and _alive(_kept[1]):
        spark = _kept[1]
    else:
        spark = build_session(app, master, conf_file)
        # what the build itself set in the environment (the local master's Python, PySpark's own
        # variables) is part of this session: the next job finds it there
        settings = _session_settings(master, conf_file)
    try:
        yield spark
    finally:
        _kept = None
        if _keeping(master, conf_file):
            _keep(settings, spark)
        else:
            spark.stop()


def _session_settings(master: str | None, conf_file: str | None) -> tuple:
    """What decides whether a kept session can serve a job: the master, the user's settings file, and the
    environment its JVM and Python workers were started with."""
    user = read_conf_file(conf_file) if conf_file else {}
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith(("SPARK_", "PYSPARK_", "HEPIX_", "JAVA_")) and k != KEEP_ENV)
    return master, tuple(sorted(user.items())), tuple(env)


@contextlib.contextmanager
def secret_session(app: str, master: str | None, conf_file: str | None, *, trusted: bool):
    """A Spark session for a job that holds the secret key (see the module doc); stopped, and its private
    local directory removed, when the block ends."""
    planned = planned_master(master, conf_file)
    if not is_local_master(planned) and not trusted:
        raise UntrustedSession(
            f"`hepix {app}` holds the secret key and would ship it to the executors of {planned}; it runs on a "
            f"local master only (--master local[N], spark-submit/local.sh), unless this cluster is trusted with "
            f"the secret key: then say so with --trusted-cluster or {TRUST_ENV}=1")
    for variable in LOCAL_DIR_OVERRIDES:
        if is_local_master(planned) and os.environ.get(variable):
            raise UntrustedSession(f"{variable}={os.environ[variable][:200]} would override the private local "
                                   f"directory `hepix {app}` keeps its temporary files in; unset it")
    release_kept_session()                  # never share a session with a job that held no secret
    local_dir = tempfile.mkdtemp(prefix=f"hepix-{app}-")          # 0700, this user's
    spark = None
    try:
        spark = build_session(app, master, conf_file, extra=secret_settings(local_dir, planned))
        actual = spark.sparkContext.master
        conf = spark.sparkContext.getConf()
        if not is_local_master(actual) and not trusted:
            raise UntrustedSession(f"`hepix {app}` got the master {actual}, not a local one; refusing to go on "
                                   f"with the secret key (--trusted-cluster or {TRUST_ENV}=1 if it is trusted)")
        for key in ("spark.authenticate", "spark.network.crypto.enabled", "spark.io.encryption.enabled"):
            if conf.get(key, "false") != "true":
                raise UntrustedSession(f"Spark did not take {key}=true (an existing session?); `hepix {app}` "
                                       "runs only with authentication and encryption on")
        log.info("secret-holding session: master %s, private local dir %s", actual, local_dir)
        yield spark
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(local_dir, ignore_errors=True)


def build_session(app: str, master: str | None = None, conf_file: str | None = None,
                  extra: dict[str, str] | None = None):
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    release_kept_session()              # a kept session would be returned as it is, whatever this one asks
    user = read_conf_file(conf_file) if conf_file else {}
    builder = SparkSession.builder.appName(f"hepix-{app}")
    if under_spark_submit():
        existing = SparkConf()
        settings = {k: v for k, v in DEFAULTS.items() if not existing.contains(k)}
        settings.update(user)
        if master:
            log.warning("--master %s ignored: spark-submit chose the master", master)
    else:
        master = master or user.pop("spark.master", None) or "local[*]"
        builder = builder.master(master)
        settings = dict(DEFAULTS)
        if master.startswith("local"):
            settings.update(LOCAL_DEFAULTS)
            if os.environ.get(KEEP_ENV, "") == "1" and re.fullmatch(r"local\[(?:[0-9]+|\*)\]", master):
                # a process of many sessions: their Python daemons forked from a warm copy of its first
                settings.update(forkserver.driver_settings())
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        log4j = Path(__file__).resolve().parents[1] / "resources" / "log4j2.properties"
        java_opts = f"-Dlog4j2.configurationFile={log4j.as_uri()} -Dlog4j.configurationFile={log4j.as_uri()}"
        if master.startswith("local"):
            # In local mode the driver JVM is also the executor, and it only moves ciphertext bytes
            # between the Python workers and Parquet; C2 compilation of Spark's code then costs
            # more CPU in a job of seconds or minutes than it ever saves (measured: ~5 s of a core
            # in a 15 s encrypt on 2 cores).  C1 alone is enough.
            java_opts += " -XX:TieredStopAtLevel=1"
        archive = jvmarchive.java_options()     # Spark's classes mapped from an archive, not parsed again
        if archive:
            java_opts += f" {archive}"
        settings["spark.driver.extraJavaOptions"] = java_opts
        if master.startswith("local-cluster["):
            # its executor JVMs run on this machine from the same jars, for as short a time: the same options
            # (measured: 25 -> 8 CPU s for the two executors of a small encrypt on local-cluster[2,1,1024])
            settings["spark.executor.extraJavaOptions"] = java_opts
        settings.update(user)
    settings.update(extra or {})
    if not under_spark_submit():
        _launch_without_secrets(app, master, settings)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("HEPIX_SPARK_LOG_LEVEL", "ERROR"))
    if spark.sparkContext.master.startswith("local") and not under_spark_submit():
        # Hadoop's local file system writes a CRC side file for every file: CPU spent on every
        # ciphertext byte, for files Parquet already checks.  In local mode the tasks share this
        # JVM's cached file system object, so turning it off here covers the writers too.
        jvm = spark.sparkContext._jvm
        local_fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
        local_fs.setWriteChecksum(False)
    return spark


#: Settings the driver JVM is never started with: what pyspark starts it with is its command line
#: (``spark-submit --conf KEY=VALUE``), which ``ps`` shows every user of the machine.
OFF_THE_COMMAND_LINE = ("spark.authenticate.secret",)


def _launch_without_secrets(app: str, master: str, settings: dict[str, str]) -> None:
    """Start this process's driver JVM, when it has none yet and ``settings`` hold a secret, with every other
    setting: the session then sets the secret in the running JVM (over pyspark's gateway), where only this
    process reads it.  The Spark authentication secret of a job that holds the owner's key would otherwise
    let any local user talk to its driver and block manager, which hold the key's broadcast."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is not None or not any(k in settings for k in OFF_THE_COMMAND_LINE):
        return
    conf = SparkConf(loadDefaults=False)
    conf.setAll([(k, v) for k, v in settings.items() if k not in OFF_THE_COMMAND_LINE])
    conf.setMaster(master).setAppName(f"hepix-{app}")
    SparkContext._ensure_initialized(conf=conf)
    # spark-submit made each of them a system property of the JVM, which every later SparkConf of this process
    # loads as a default: a later session would start with this one's authentication on and no secret (which a
    # local-cluster master refuses) and its private directory, removed.  This session sets them itself.
    system = SparkContext._jvm.java.lang.System
    for key in settings:
        system.clearProperty(key)


def spark_info(spark) -> dict:
    sc = spark.sparkContext
    return {"master": sc.master, "app_id": sc.applicationId, "version": spark.version,
            "default_parallelism": sc.defaultParallelism}
