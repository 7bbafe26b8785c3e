"""spark-submit/: the submit scripts, the packaging script and conf/spark-hepix.conf.

The fast tests check the scripts' syntax, usage, refusals and the command
lines they build (HEPIX_DRY_RUN=1), and build the source zip.  The slow one
runs ``spark-submit/local.sh encrypt`` for real.  The full virtualenv packing
of package.sh takes a minute and downloads wheels, so it is not run here.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.seconds(35)

REPO = Path(__file__).resolve().parent.parent
SUBMIT = REPO / "spark-submit"
SCRIPTS = sorted(SUBMIT.glob("*.sh"))
SUBMIT_SCRIPTS = ["local.sh", "standalone.sh", "yarn.sh", "k8s.sh"]
VENV = Path(sys.prefix)

#: what each cluster script needs in its environment to get past its own checks
CLUSTER_ENV = {
    "standalone.sh": {"SPARK_MASTER_URL": "spark://master.invalid:7077"},
    "yarn.sh": {"HADOOP_CONF_DIR": "hadoop-conf"},
    "k8s.sh": {"K8S_API": "https://api.invalid:6443", "HEPIX_IMAGE": "registry.invalid/spark-py:4",
               "HEPIX_ARTIFACTS": "s3a://bucket/hepix/"},
}


def run(args, env=None, timeout=120, **kwargs):
    """Run a command with this test's virtualenv as HEPIX_VENV and no inherited Spark gateway."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYSPARK_GATEWAY", "HEPIX_")) and k not in ("SPARK_HOME", "SPARK_SUBMIT")}
    full["HEPIX_VENV"] = str(VENV)
    full.update(env or {})
    return subprocess.run([str(a) for a in args], env=full, capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def dry_run(script, *args, env=None):
    """The spark-submit command line ``script`` would run, as a list of words (env assignments first)."""
    r = run([SUBMIT / script, *args], env={"HEPIX_DRY_RUN": "1", **(env or {})})
    assert r.returncode == 0, r.stderr
    return shlex.split(r.stdout)


def conf_values(words):
    """The values of every ``--conf key=value`` in a command line, as a dict."""
    return dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--conf")


def option(words, name):
    return words[words.index(name) + 1]


# --- syntax and usage ------------------------------------------------------------------

def test_the_scripts_are_there():
    assert {p.name for p in SCRIPTS} >= {"local.sh", "standalone.sh", "yarn.sh", "k8s.sh", "package.sh",
                                          "common.sh"}
    assert (SUBMIT / "hepix_main.py").is_file() and (SUBMIT / "cron.example").is_file()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_accepts_every_script(script):
    r = run(["bash", "-n", script])
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("script", SUBMIT_SCRIPTS)
def test_a_submit_script_without_arguments_prints_its_usage_and_fails(script):
    r = run([SUBMIT / script])
    assert r.returncode == 2
    assert f"usage: spark-submit/{script} COMMAND" in r.stderr


@pytest.mark.parametrize("script", SUBMIT_SCRIPTS)
def test_a_submit_script_with_help_prints_its_usage_and_succeeds(script):
    r = run([SUBMIT / script, "--help"])
    assert r.returncode == 0
    assert f"usage: spark-submit/{script} COMMAND" in r.stdout


def test_package_help():
    r = run([SUBMIT / "package.sh", "--help"])
    assert r.returncode == 0
    assert "usage: spark-submit/package.sh" in r.stdout and "--src-only" in r.stdout


def test_package_rejects_an_unknown_option():
    r = run([SUBMIT / "package.sh", "--fast"])
    assert r.returncode != 0
    assert "unknown argument '--fast'" in r.stderr


# --- the source zip ------------------------------------------------------------------------

def test_package_src_only_builds_a_zip_of_the_four_packages(tmp_path):
    r = run([SUBMIT / "package.sh", "--src-only", "--dist", tmp_path])
    assert r.returncode == 0, r.stderr
    zip_path = tmp_path / "hepix-src.zip"
    with zipfile.ZipFile(zip_path) as z:
        names = z.namelist()
    assert {"hecore/__init__.py", "jobs/cli.py", "schemas/tables.py", "jobs/resources/log4j2.properties"} <= set(names)
    assert {n.split("/", 1)[0] for n in names} == {"hecore", "jobs", "schemas", "tasks"}
    assert not [n for n in names if n.startswith(("tests/", ".venv/")) or "__pycache__" in n or n.endswith(".pyc")]
    assert (tmp_path / "hepix_main.py").read_text() == (SUBMIT / "hepix_main.py").read_text()
    assert not (tmp_path / "hepix-env.tar.gz").exists()

    first = zip_path.read_bytes()
    assert run([SUBMIT / "package.sh", "--src-only", "--dist", tmp_path]).returncode == 0
    assert zip_path.read_bytes() == first, "the same sources should give the same zip"


def test_the_src_zip_is_importable_on_its_own(tmp_path):
    """What an executor does with --py-files: import hepix from the zip, not from the checkout."""
    assert run([SUBMIT / "package.sh", "--src-only", "--dist", tmp_path]).returncode == 0
    code = "import hecore, jobs.cli, schemas.tables, tasks.encrypt; print(hecore.__file__); print(jobs.cli.__file__)"
    r = run([sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path / "hepix-src.zip")}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert all("hepix-src.zip" in line for line in r.stdout.splitlines())


# --- the command lines ---------------------------------------------------------------------

def test_local_runs_the_venv_spark_submit_on_local_cores_with_the_properties_file():
    words = dry_run("local.sh", "encrypt", "--keys", "K", "--input", "I", "--out", "O", env={"HEPIX_CORES": "3"})
    assert f"PYSPARK_PYTHON={VENV}/bin/python" in words
    submit = next(w for w in words if w.endswith("/spark-submit"))
    assert submit.startswith(str(VENV)) and "pyspark" in submit
    assert option(words, "--master") == "local[3]"
    assert option(words, "--driver-memory") == "4g"
    assert option(words, "--properties-file") == str(REPO / "conf" / "spark-hepix.conf")
    assert conf_values(words)["spark.ui.enabled"] == "false"
    main = str(SUBMIT / "hepix_main.py")
    assert words[words.index(main):] == [main, "encrypt", "--keys", "K", "--input", "I", "--out", "O"]


def test_hepix_verbose_flags_may_come_before_the_command(fake_dist):
    words = dry_run("local.sh", "-vv", "encrypt", "--keys", "K")
    main = str(SUBMIT / "hepix_main.py")
    assert words[words.index(main):] == [main, "-vv", "encrypt", "--keys", "K"]
    assert option(words, "--name") == "hepix-encrypt"
    assert run([SUBMIT / "local.sh", "-v"]).returncode == 2
    env = {**CLUSTER_ENV["yarn.sh"], "HEPIX_DIST": str(fake_dist), "HEPIX_DRY_RUN": "1"}
    r = run([SUBMIT / "yarn.sh", "--verbose", "decrypt", "--keys", "K"], env=env)
    assert r.returncode == 1 and "'decrypt' handles the secret key" in r.stderr


def test_local_refuses_a_bad_core_count():
    r = run([SUBMIT / "local.sh", "encrypt"], env={"HEPIX_CORES": "all"})
    assert r.returncode == 1 and "HEPIX_CORES" in r.stderr


@pytest.fixture
def fake_dist(tmp_path):
    for name in ("hepix-env.tar.gz", "hepix-src.zip"):
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_yarn_ships_the_env_and_the_zip_and_points_python_at_the_env(fake_dist):
    env = {**CLUSTER_ENV["yarn.sh"], "HEPIX_DIST": str(fake_dist), "HEPIX_SPARK_OPTS": "--num-executors 7"}
    words = dry_run("yarn.sh", "process", "--keys", "PUB", "--op", "brightness:3", env=env)
    assert option(words, "--master") == "yarn"
    assert option(words, "--deploy-mode") == "client"
    assert option(words, "--archives") == f"{fake_dist}/hepix-env.tar.gz#env"
    assert option(words, "--py-files") == f"{fake_dist}/hepix-src.zip"
    assert option(words, "--num-executors") == "7"
    confs = conf_values(words)
    assert confs["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] == "./env/bin/python"
    assert confs["spark.executorEnv.PYSPARK_PYTHON"] == "./env/bin/python"
    assert confs["spark.sql.execution.arrow.maxRecordsPerBatch"] == "64"
    assert "PYSPARK_PYTHON=./env/bin/python" in words
    assert f"PYSPARK_DRIVER_PYTHON={VENV}/bin/python" in words
    assert "--properties-file" not in words     # the cluster's spark-defaults.conf must still apply

    cluster = dry_run("yarn.sh", "encrypt", env={**env, "HEPIX_DEPLOY_MODE": "cluster"})
    assert option(cluster, "--deploy-mode") == "cluster"
    assert not [w for w in cluster if w.startswith("PYSPARK_DRIVER_PYTHON=")]


@pytest.mark.parametrize("script", ["standalone.sh", "yarn.sh"])
def test_an_environment_already_on_the_cluster_is_shipped_by_its_url(fake_dist, script):
    (fake_dist / "hepix-env.tar.gz").unlink()           # not needed here any more
    url = "hdfs://nn.invalid:8020/apps/hepix/hepix-env.tar.gz"
    env = {**CLUSTER_ENV[script], "HEPIX_DIST": str(fake_dist), "HEPIX_ENV_ARCHIVE": url}
    words = dry_run(script, "encrypt", "--keys", "PUB", env=env)
    assert option(words, "--archives") == f"{url}#env"
    assert option(words, "--py-files") == f"{fake_dist}/hepix-src.zip"
    for bad in ("/local/hepix-env.tar.gz", "hdfs:///a b.tar.gz", "hdfs:///env.tar.gz#other"):
        r = run([SUBMIT / script, "encrypt"], env={**env, "HEPIX_ENV_ARCHIVE": bad})
        assert r.returncode == 1 and "HEPIX_ENV_ARCHIVE must be the URL" in r.stderr and bad in r.stderr, r.stderr


@pytest.mark.parametrize("script", ["standalone.sh", "yarn.sh", "k8s.sh"])
def test_an_environment_unpacked_on_every_node_is_not_shipped(fake_dist, script):
    (fake_dist / "hepix-env.tar.gz").unlink()           # not needed with a node environment
    env = {**CLUSTER_ENV[script], "HEPIX_DIST": str(fake_dist), "HEPIX_NODE_ENV": "/opt/hepix/envs/hepix-env-0123/"}
    words = dry_run(script, "encrypt", "--keys", "PUB", env=env)
    assert "--archives" not in words
    confs = conf_values(words)
    assert confs["spark.pyspark.python"] == "/opt/hepix/envs/hepix-env-0123/bin/python"
    assert confs["spark.executorEnv.PYSPARK_PYTHON"] == "/opt/hepix/envs/hepix-env-0123/bin/python"
    if script != "k8s.sh":
        assert "PYSPARK_PYTHON=/opt/hepix/envs/hepix-env-0123/bin/python" in words
        assert confs["spark.pyspark.driver.python"] == f"{VENV}/bin/python"   # the driver keeps this venv
    for bad in ("relative/env", "/opt/a b", "/opt/env#x"):
        r = run([SUBMIT / script, "encrypt"], env={**env, "HEPIX_NODE_ENV": bad})
        assert r.returncode == 1 and "HEPIX_NODE_ENV must be the absolute path" in r.stderr and bad in r.stderr, \
            r.stderr
    if script != "k8s.sh":
        both = {**env, "HEPIX_ENV_ARCHIVE": "hdfs://nn.invalid:8020/env.tar.gz"}
        r = run([SUBMIT / script, "encrypt"], env=both)
        assert r.returncode == 1 and "not both" in r.stderr, r.stderr


def _env_archive(tmp_path: Path) -> Path:
    """A packed environment as package.sh's, with a bin/python that runs this test's interpreter."""
    import tarfile

    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (src / "bin" / "python").chmod(0o777)                   # group- and world-writable in the archive
    (src / "lib.txt").write_text("x")
    archive = tmp_path / "hepix-env.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for p in sorted(src.rglob("*")):
            t.add(p, arcname=str(p.relative_to(src)), recursive=False)
    return archive


def test_install_env_unpacks_once_safely_and_refuses_unsafe_roots(tmp_path):
    archive = _env_archive(tmp_path)
    root = tmp_path / "envs"
    install = [SUBMIT / "install-env.sh", "--root", root, "--no-check", archive]
    r = run(install)
    assert r.returncode == 0, r.stderr
    target = Path(r.stdout.strip())
    assert r.stdout.count("\n") == 1 and target.parent == root and target.name.startswith("hepix-env-")
    assert "unpacking" in r.stderr
    assert (target / "bin" / "python").stat().st_mode & 0o7777 == 0o755     # the archive's modes not kept
    assert not [p for p in target.rglob("*") if p.stat().st_mode & 0o022]
    again = run(install)
    assert again.returncode == 0 and Path(again.stdout.strip()) == target and "installed already" in again.stderr
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == [target.name]

    (target / "lib.txt").chmod(0o666)                       # someone may now change what the workers run
    r = run(install)
    assert r.returncode == 1 and "may be written by group or others" in r.stderr, r.stderr
    (target / "lib.txt").chmod(0o644)

    open_root = tmp_path / "open"
    open_root.mkdir(mode=0o777)
    open_root.chmod(0o777)
    r = run([SUBMIT / "install-env.sh", "--root", open_root, "--no-check", archive])
    assert r.returncode == 1 and "group or others" in r.stderr and not list(open_root.iterdir()), r.stderr
    for bad in ("relative", f"{tmp_path}/a b"):
        r = run([SUBMIT / "install-env.sh", "--root", bad, "--no-check", archive])
        assert r.returncode == 1 and "--root must" in r.stderr, r.stderr
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    r = run([SUBMIT / "install-env.sh", "--root", root, "--no-check", tmp_path / "junk.tar.gz"])
    assert r.returncode == 1 and "does not unpack" in r.stderr
    assert not [p for p in root.iterdir() if p.name.startswith(".hepix-env-") and p.is_dir()]   # no half env


def test_yarn_refuses_an_unknown_deploy_mode(fake_dist):
    env = {**CLUSTER_ENV["yarn.sh"], "HEPIX_DIST": str(fake_dist), "HEPIX_DEPLOY_MODE": "both"}
    r = run([SUBMIT / "yarn.sh", "encrypt"], env=env)
    assert r.returncode == 1 and "HEPIX_DEPLOY_MODE" in r.stderr


def test_standalone_runs_the_driver_here_and_the_workers_in_the_env(fake_dist):
    env = {**CLUSTER_ENV["standalone.sh"], "HEPIX_DIST": str(fake_dist)}
    words = dry_run("standalone.sh", "encrypt", "--keys", "PUB", env=env)
    assert option(words, "--master") == "spark://master.invalid:7077"
    assert option(words, "--deploy-mode") == "client"
    assert option(words, "--archives") == f"{fake_dist}/hepix-env.tar.gz#env"
    assert "PYSPARK_PYTHON=./env/bin/python" in words


def test_k8s_takes_everything_from_the_artifacts_uri():
    words = dry_run("k8s.sh", "encrypt", "--keys", "/keys", env=CLUSTER_ENV["k8s.sh"])
    assert option(words, "--master") == "k8s://https://api.invalid:6443"
    assert option(words, "--deploy-mode") == "cluster"
    assert option(words, "--archives") == "s3a://bucket/hepix/hepix-env.tar.gz#env"
    assert option(words, "--py-files") == "s3a://bucket/hepix/hepix-src.zip"
    assert "s3a://bucket/hepix/hepix_main.py" in words
    confs = conf_values(words)
    assert confs["spark.kubernetes.container.image"] == "registry.invalid/spark-py:4"
    assert confs["spark.kubernetes.driverEnv.PYSPARK_PYTHON"] == "./env/bin/python"
    assert confs["spark.executorEnv.PYSPARK_PYTHON"] == "./env/bin/python"
    assert confs["spark.kubernetes.namespace"] == "default"


@pytest.mark.parametrize("script", ["standalone.sh", "yarn.sh", "k8s.sh"])
def test_a_cluster_script_refuses_what_needs_its_settings(script):
    r = run([SUBMIT / script, "encrypt"])
    assert r.returncode == 1
    assert f"{script}: set " in r.stderr


@pytest.mark.parametrize("script", ["standalone.sh", "yarn.sh", "k8s.sh"])
@pytest.mark.parametrize("job", ["decrypt", "keygen", "export-public"])
def test_a_cluster_script_refuses_the_jobs_that_handle_the_secret_key(script, job, fake_dist):
    env = {**CLUSTER_ENV[script], "HEPIX_DIST": str(fake_dist), "HEPIX_DRY_RUN": "1"}
    r = run([SUBMIT / script, job, "--keys", "K"], env=env)
    assert r.returncode == 1
    assert "data owner's machine" in r.stderr and "local.sh" in r.stderr
    trusted = run([SUBMIT / script, job, "--keys", "K"], env={**env, "HEPIX_TRUSTED_CLUSTER": "1"})
    assert trusted.returncode == 0, trusted.stderr


def test_a_cluster_script_needs_the_packaged_archives(tmp_path):
    env = {**CLUSTER_ENV["yarn.sh"], "HEPIX_DIST": str(tmp_path)}
    r = run([SUBMIT / "yarn.sh", "encrypt"], env=env)
    assert r.returncode == 1
    assert "hepix-env.tar.gz is missing: run spark-submit/package.sh first" in r.stderr


# --- conf/ and the entry file -----------------------------------------------------------

def test_the_properties_file_mirrors_the_session_defaults():
    from jobs.runtime.session import DEFAULTS, read_conf_file

    assert read_conf_file(REPO / "conf" / "spark-hepix.conf") == DEFAULTS


def test_the_cluster_scripts_pass_every_property_of_the_file(fake_dist):
    from jobs.runtime.session import DEFAULTS

    words = dry_run("yarn.sh", "encrypt", env={**CLUSTER_ENV["yarn.sh"], "HEPIX_DIST": str(fake_dist)})
    confs = conf_values(words)
    assert {k: confs.get(k) for k in DEFAULTS} == DEFAULTS


def test_hepix_main_forwards_the_arguments_and_the_exit_status(tmp_path):
    main = SUBMIT / "hepix_main.py"
    usage = run([sys.executable, main])
    assert usage.returncode == 2 and "usage: hepix" in usage.stderr
    ok = run([sys.executable, main, "keygen", "--out", tmp_path / "k", "--preset", "addonly-2048"])
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "k" / "secret.key").is_file()
    again = run([sys.executable, main, "keygen", "--out", tmp_path / "k", "--preset", "addonly-2048"])
    assert again.returncode == 2 and "not empty" in again.stderr


# --- spark-submit for real ---------------------------------------------------------------

def make_png(path: Path, seed: int, size=(12, 10)) -> None:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)
    Image.fromarray(pixels, "RGB").save(path)


@pytest.mark.spark
@pytest.mark.slow
def test_local_sh_encrypts_through_spark_submit(tmp_path):
    hepix = VENV / "bin" / "hepix"
    if not hepix.exists():
        pytest.skip(f"{hepix} not found: run the tests from the project's virtualenv (make test)")
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.skip("no java on PATH and no JAVA_HOME: spark-submit needs a JRE")
    keys = tmp_path / "keys"
    r = run([hepix, "keygen", "--out", keys, "--preset", "addonly-2048"])
    assert r.returncode == 0, r.stderr
    images = tmp_path / "images"
    images.mkdir()
    make_png(images / "a.png", 1)
    make_png(images / "b.png", 2, size=(9, 14))
    out = tmp_path / "ct"

    r = run([SUBMIT / "local.sh", "encrypt", "--layout", "pixel", "--keys", keys, "--input", images, "--out", out,
             "--resize", "8", "--quiet"], env={"HEPIX_CORES": "2"}, timeout=600)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["job"] == "encrypt"
    assert manifest["counts"]["images_in"] == 2
    assert manifest["counts"]["images_encrypted"] == 2
    assert manifest["counts"]["images_rejected"] == 0
    assert manifest["spark"]["master"].startswith("local")
    assert "encrypted 2 of 2 images" in r.stdout

    # An error hepix reports comes back through spark-submit as exit status 2.
    r = run([SUBMIT / "local.sh", "encrypt", "--keys", tmp_path / "no-keys", "--input", images,
             "--out", tmp_path / "ct2", "--quiet"], env={"HEPIX_CORES": "1"}, timeout=600)
    assert r.returncode == 2, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    # spark-submit merges the Python driver's stderr into its own stdout.
    assert "hepix encrypt: KeyDirectoryError" in r.stdout + r.stderr
