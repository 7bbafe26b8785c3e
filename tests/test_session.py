"""Spark settings files (`--conf FILE`) and the Spark bench's plumbing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.schemas import BENCH_SPARK
from jobs.cli import main
from jobs.runtime.session import read_conf_file

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_conf_file_reads_spark_defaults_format(tmp_path):
    f = tmp_path / "spark.conf"
    f.write_text("# comment\n\nspark.executor.memory 2g\nspark.sql.shuffle.partitions=16\n"
                 "spark.driver.extraJavaOptions   -Da=1 -Db=2   # trailing comment\n")
    assert read_conf_file(f) == {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "16",
                                 "spark.driver.extraJavaOptions": "-Da=1 -Db=2"}


def test_conf_file_line_that_is_not_a_spark_setting_is_an_error_naming_the_line(tmp_path):
    f = tmp_path / "spark.conf"
    f.write_text("spark.ok 1\nexecutor.memory 2g\n")
    with pytest.raises(SystemExit, match=r"spark.conf:2: expected 'spark.key value'"):
        read_conf_file(f)


def test_missing_conf_file_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        read_conf_file(tmp_path / "absent.conf")


@pytest.mark.spark
@pytest.mark.slow
def test_spark_bench_writes_three_configurations_against_hecore_alone(tmp_path, capsys):
    assert main(["bench", "--suite", "spark", "--images", "2", "--sizes", "8", "--tile", "8",
                 "--preset", "addonly-2048", "--out", str(tmp_path)]) == 0
    files = list((tmp_path / "bench_spark").glob("*.parquet"))
    assert len(files) == 1
    t = pq.read_table(files[0])
    assert t.schema.equals(BENCH_SPARK, check_metadata=False)
    rows = {r["config"]: r for r in t.to_pylist()}
    assert set(rows) == {"hecore, one process", "spark local[1]", "spark local[2]"}
    assert len({r["ciphertexts"] for r in rows.values()}) == 1          # the same work in all three
    assert rows["hecore, one process"]["vs_hecore_alone"] == pytest.approx(1.0)
    assert rows["spark local[1]"]["speedup_vs_local1"] == pytest.approx(1.0)
    assert "Spark overhead on one core" in capsys.readouterr().out


def test_a_local_session_evaluates_expressions_without_generated_code():
    """hepix's local sessions interpret Spark's expressions (no Janino compilation per query); the answers are
    Spark's all the same."""
    from pyspark.sql import functions as F

    from jobs.runtime.session import build_session

    spark = build_session("probe", "local[1]")
    try:
        df = spark.range(0, 100, numPartitions=2).groupBy((F.col("id") % 3).alias("k")).agg(F.sum("id").alias("s"))
        assert sorted(map(tuple, df.collect())) == [(0, 1683), (1, 1617), (2, 1650)]
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "WholeStageCodegen" not in plan and "*(" not in plan, plan
        assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    finally:
        spark.stop()


@pytest.mark.parametrize("master", ["local[2]", "local-cluster[2,1,1024]"])
def test_executor_jvms_of_a_local_cluster_start_as_the_driver_does(master, monkeypatch):
    """local-cluster's executor JVMs run on this machine from the driver's jars: they get the driver's options
    (C1 only, the class-data archive); a local[N] master has no executor JVM to give options to."""
    from pyspark.sql import SparkSession

    from jobs.runtime import session

    seen: dict[str, str] = {}

    class Builder:
        def appName(self, name):
            return self

        def master(self, name):
            return self

        def config(self, key, value):
            seen[key] = value
            return self

        def getOrCreate(self):
            raise RuntimeError("no session in this test")

    monkeypatch.setattr(SparkSession, "builder", Builder())
    with pytest.raises(RuntimeError, match="no session in this test"):
        session.build_session("t", master)
    assert "-XX:TieredStopAtLevel=1" in seen["spark.driver.extraJavaOptions"]
    if master.startswith("local-cluster"):
        assert seen["spark.executor.extraJavaOptions"] == seen["spark.driver.extraJavaOptions"]
    else:
        assert "spark.executor.extraJavaOptions" not in seen


def probe(code: str) -> dict:
    """Run ``code`` in a new Python process without a kept session: the JSON of its last output line."""
    env = {k: v for k, v in os.environ.items() if k != "HEPIX_KEEP_SESSION"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


#: Run in a new Python process, whose driver JVM the secret session starts: the session's secret, whether
#: authentication is on, the JVM's command line as every local user reads it, and a job's result.
SECRET_PROBE = """
import json, sys
from pyspark import SparkContext
from jobs.runtime.session import secret_session
with secret_session("probe", "local[1]", None, trusted=False) as spark:
    conf = spark.sparkContext.getConf()
    with open(f"/proc/{SparkContext._gateway.proc.pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\\0", b" ").decode()
    rows = spark.range(0, 1000, numPartitions=2).selectExpr("id % 3 AS k").groupBy("k").count().collect()
    print(json.dumps({"secret": conf.get("spark.authenticate.secret", ""), "auth": conf.get("spark.authenticate"),
                      "cmdline": cmdline, "counts": sorted(r["count"] for r in rows)}))
"""


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads a process's command line from /proc")
def test_a_secret_session_keeps_its_authentication_secret_off_the_jvm_command_line():
    seen = probe(SECRET_PROBE)
    assert seen["auth"] == "true" and len(seen["secret"]) >= 32
    assert seen["counts"] == [333, 333, 334]                # a job with a shuffle ran under authentication
    assert seen["secret"] not in seen["cmdline"] and "spark.authenticate.secret" not in seen["cmdline"]
    # the JVM was started with the session's other settings, as before
    assert "spark.authenticate=true" in seen["cmdline"] and "spark.io.encryption.enabled=true" in seen["cmdline"]


#: Run in a new Python process: a secret session starts the driver JVM, then a plain session on a local-cluster
#: master (which, unlike local[N], makes no authentication secret of its own) runs a job in the same JVM.
AFTER_SECRET_PROBE = """
import json
from jobs.runtime.session import plain_session, secret_session
with secret_session("first", "local[1]", None, trusted=False) as spark:
    spark.range(3).count()
with plain_session("next", "local-cluster[1,1,1024]", None) as spark:
    conf = spark.sparkContext.getConf()
    print(json.dumps({"auth": conf.get("spark.authenticate", "false"), "dir": conf.get("spark.local.dir", ""),
                      "count": spark.range(0, 10, numPartitions=2).count()}))
"""


@pytest.mark.spark
def test_a_plain_session_after_a_secret_one_in_the_same_jvm_inherits_none_of_its_settings():
    seen = probe(AFTER_SECRET_PROBE)
    assert seen == {"auth": "false", "dir": "", "count": 10}
