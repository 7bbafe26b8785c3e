"""What makes a Spark JVM and its Python workers start faster: the class-data archive
(jobs/runtime/jvmarchive.py) and the daemon that forks workers with the tasks' code imported
(jobs/runtime/pydaemon.py)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from jobs.runtime import jvmarchive, pydaemon
from jobs.runtime.session import plain_session

pytestmark = pytest.mark.skipif(jvmarchive._java() is None, reason="no java on PATH and no JAVA_HOME")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(jvmarchive.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_without_an_archive_the_jvm_gets_no_option(cache):
    assert not jvmarchive.archive_path().exists()
    assert jvmarchive.java_options() == ""


def test_the_archive_of_this_java_and_these_jars_is_mapped_when_it_is_there(cache):
    path = jvmarchive.archive_path()
    assert path.parent == cache / "spark-cds"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    path.chmod(0o644)
    assert f"-XX:SharedArchiveFile={path}" in jvmarchive.java_options().split()


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_an_archive_others_can_write_is_ignored_with_a_warning_naming_it(cache, mode, caplog):
    path = jvmarchive.archive_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    path.chmod(mode)
    with caplog.at_level(logging.WARNING, logger=jvmarchive.__name__):
        assert jvmarchive.java_options() == ""
    assert str(path) in caplog.text and "no one else" in caplog.text


def test_a_jvm_given_an_archive_of_another_build_starts_as_without_it_and_says_nothing(tmp_path):
    foreign = tmp_path / "foreign.jsa"
    foreign.write_bytes(os.urandom(4096))
    options = f"-XX:SharedArchiveFile={foreign} -Xlog:cds=off -Xlog:cds+dynamic=off".split()
    done = subprocess.run([str(jvmarchive._java()), *options, "-version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cds" not in done.stderr.lower() and "archive" not in done.stderr.lower(), done.stderr


@pytest.mark.spark
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_local_python_workers_are_forked_with_the_tasks_code_already_imported():
    # defined here, so that Spark ships it by value: the workers cannot import this test module
    def _who_runs_me(batches):
        """In a Python worker: its parent's command line, whether hecore's task code was there before
        this function (which imports none of it) ran, and how many objects the collector leaves alone."""
        import gc

        preloaded = "tasks.encrypt" in sys.modules and "tasks.process" in sys.modules
        pyspark_file = sys.modules["pyspark"].__file__
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"parent": [parent], "preloaded": [preloaded], "pyspark": [pyspark_file],
                                          "frozen": [gc.get_freeze_count()]})

    with plain_session("test", "local[2]", None) as spark:
        rows = spark.range(2, numPartitions=2).mapInArrow(
            _who_runs_me, "parent string, preloaded boolean, pyspark string, frozen long").collect()
    assert len(rows) == 2
    for r in rows:
        assert "-m jobs.runtime.pydaemon" in r["parent"], r["parent"]
        assert r["preloaded"], r
        # what the daemon imported is frozen: the full collection after every task does not walk it
        assert r["frozen"] > 10_000, r
        # pyspark from the installed package, compiled once, not compiled again from Spark's pyspark.zip
        assert ".zip" not in r["pyspark"], r


def test_the_daemon_prefers_the_installed_pyspark_to_its_own_zips_only(tmp_path, monkeypatch):
    site, elsewhere = tmp_path / "site", tmp_path / "spark" / "python" / "lib"
    lib = site / "pyspark" / "python" / "lib"
    for d in (lib, elsewhere):
        d.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    own = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    other = str(elsewhere / "pyspark.zip")
    monkeypatch.setattr(sys, "path", [*own, other, str(site)])
    # py4j is not installed beside pyspark: its zip stays ahead
    assert pydaemon.prefer_installed_pyspark() == own[:1]
    assert sys.path == [own[1], other, str(site), own[0]]
    (site / "py4j").mkdir()
    (site / "py4j" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [*own, other, str(site)])
    assert pydaemon.prefer_installed_pyspark() == own
    assert sys.path == [other, str(site), *own]
    # no installed pyspark: nothing moves
    monkeypatch.setattr(sys, "path", [*own, other])
    assert pydaemon.prefer_installed_pyspark() == [] and sys.path == [*own, other]


def test_the_daemon_forgets_the_installed_pyspark_s_zips_and_jars_and_their_importers(tmp_path, monkeypatch):
    site, elsewhere = tmp_path / "site", tmp_path / "spark" / "jars"
    lib, jars = site / "pyspark" / "python" / "lib", site / "pyspark" / "jars"
    for d in (lib, jars, elsewhere):
        d.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    core, other = str(jars / "spark-core_2.13-4.3.0.jar"), str(elsewhere / "spark-core_2.13-4.3.0.jar")
    zip_ = str(lib / "pyspark.zip")
    monkeypatch.setattr(sys, "path", [zip_, core, other, str(site)])
    assert pydaemon.installed_spark_jars() == [core]          # a jar of another Spark is not the installed one's
    cache = {zip_: object(), core: object(), core + os.sep + "org": object(), other: object(), str(site): object()}
    monkeypatch.setattr(sys, "path_importer_cache", dict(cache))
    pydaemon.forget_installed_archives()
    assert sys.path == [other, str(site)]
    assert set(sys.path_importer_cache) == {other, str(site)}


@pytest.mark.spark
def test_a_local_worker_s_path_holds_no_archive_to_read_again_when_it_adds_the_application_s_files():
    def _archives(batches):
        """In a Python worker: the zips and jars its imports would search, and those its importers hold."""
        entries = [e for e in sys.path if e.endswith((".zip", ".jar")) and os.path.exists(e)]
        held = sorted({k for k, v in sys.path_importer_cache.items() if type(v).__name__ == "zipimporter"})
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"entries": [entries], "held": [held]})

    with plain_session("test", "local[2]", None) as spark:
        rows = spark.range(2, numPartitions=2).mapInArrow(_archives, "entries array<string>, held array<string>") \
            .collect()
    assert len(rows) == 2
    for r in rows:
        assert r["entries"] == [] and r["held"] == [], r
