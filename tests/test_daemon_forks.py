"""A process of many sessions: its Python daemons forked from a warm copy of its first (jobs/runtime/forkserver.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from jobs.runtime import forkserver
from jobs.runtime.session import plain_session, secret_session

pytestmark = [pytest.mark.spark, pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")]


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _workers(spark) -> list[tuple]:
    """Per Python worker: its daemon's pid, the daemon's parent and that parent's command line (the JVM, or the
    warm copy), and whether the tasks' code was imported before the function ran."""
    def ancestry(_):        # defined here, so that Spark ships it by value: the workers cannot import this module
        import os
        import sys

        daemon = os.getppid()
        with open(f"/proc/{daemon}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            parent_cmd = f.read().replace(b"\0", b" ").decode()
        yield daemon, parent, parent_cmd, "tasks.encrypt" in sys.modules and "tasks.process" in sys.modules

    return spark.sparkContext.parallelize(range(2), 2).mapPartitions(ancestry).collect()


def test_the_next_sessions_daemons_are_forked_from_a_warm_copy_of_the_first(monkeypatch):
    monkeypatch.setenv("HEPIX_KEEP_SESSION", "1")
    with secret_session("forks-a", "local[2]", None, trusted=False) as spark:
        first = _workers(spark)
    with secret_session("forks-b", "local[2]", None, trusted=False) as spark:
        second = _workers(spark)
    for daemon, parent, parent_cmd, preloaded in second:
        assert preloaded
        # the daemon's parent is the copy (a daemon's command line, not Java's), and not the first session's
        assert "-m jobs.runtime.pydaemon" in parent_cmd and "java" not in parent_cmd.split(" ", 1)[0], parent_cmd
        assert daemon not in {d for d, *_ in first}
    # a daemon of each session: its own process, whose workers' JVM side the stand-in the JVM started keeps
    assert len({d for d, *_ in second}) == 1
    # the copy is this process's descendant (its subreaper) whatever ended since: what bench measures holds it
    copy = second[0][1]
    pid = copy
    while pid not in (0, 1, os.getpid()):
        pid = _ppid(pid)
    assert pid == os.getpid()


def test_a_daemon_whose_environment_differs_imports_for_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("HEPIX_KEEP_SESSION", "1")
    with secret_session("forks-c", "local[2]", None, trusted=False) as spark:
        _workers(spark)                                     # the copy is there (started now or before)
    conf = tmp_path / "odd.conf"
    conf.write_text("spark.executorEnv.HEPIX_SOMETHING_ELSE 1\n")
    with plain_session("forks-d", "local[2]", str(conf)) as spark:
        rows = _workers(spark)
    for _, _, parent_cmd, preloaded in rows:
        assert preloaded                                    # imported by its own daemon, as without a copy
        assert "java" in parent_cmd.split(" ", 1)[0], parent_cmd


def test_the_copy_refuses_another_interpreter_seed_or_environment():
    mine = {"HOME": "/h", "OMP_NUM_THREADS": "1"}
    ok = {**forkserver._identity(), "env": {**mine, "PYTHON_WORKER_FACTORY_SECRET": "s", "SPARK_LOCAL_DIRS": "/x"},
          "cwd": "/", "argv": []}
    assert forkserver._refusal(ok, mine) is None
    assert forkserver._refusal({**ok, "hash": ok["hash"] + 1}, mine) == "another hash"
    assert forkserver._refusal({**ok, "executable": "/usr/bin/python3"}, mine) == "another executable"
    assert forkserver._refusal({**ok, "path": ok["path"][1:]}, mine) == "another path"
    assert forkserver._refusal({**ok, "env": {**mine, "OMP_NUM_THREADS": "2"}}, mine) == \
        "another environment (OMP_NUM_THREADS)"
    assert forkserver._refusal({**ok, "env": {"HOME": "/h"}}, mine) == "another environment (OMP_NUM_THREADS)"
    assert forkserver._refusal([], mine) == "a malformed request"


def test_the_copy_ends_with_the_process_that_asked_for_it(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        from jobs.runtime.session import secret_session
        sys.path.insert(0, sys.argv[1])
        from test_daemon_forks import _workers
        seen = []
        for app in ("one", "two"):
            with secret_session(app, "local[1]", None, trusted=False) as spark:
                seen += _workers(spark)
        copies = {parent for _, parent, cmd, _ in seen
                  if "-m jobs.runtime.pydaemon" in cmd and "java" not in cmd.split()[0]}
        print(json.dumps(sorted(copies)))
    """))
    env = {**os.environ, "HEPIX_KEEP_SESSION": "1"}
    out = subprocess.run([sys.executable, str(script), os.path.dirname(__file__)], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    copies = json.loads(out.strip().splitlines()[-1])
    assert len(copies) == 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{copies[0]}"):
        time.sleep(0.2)
    alive = os.path.exists(f"/proc/{copies[0]}") and "-m jobs.runtime.pydaemon" in _cmdline(copies[0])
    assert not alive, f"the warm copy {copies[0]} outlived its driver"


def test_no_copy_where_the_driver_says_so(monkeypatch):
    monkeypatch.setenv("HEPIX_DAEMON_FORKS", "0")
    assert forkserver.driver_settings() == {}
    monkeypatch.delenv("HEPIX_DAEMON_FORKS")
    settings = forkserver.driver_settings()
    where = settings[f"spark.executorEnv.{forkserver.DIR_ENV}"]
    assert os.path.isdir(where) and os.stat(where).st_mode & 0o077 == 0
    assert settings[f"spark.executorEnv.{forkserver.OWNER_ENV}"] == str(os.getpid())
