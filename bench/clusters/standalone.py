"""A Spark standalone cluster on this machine's loopback, and the archives and command lines to submit to it.

:class:`StandaloneCluster` starts a master and one-core workers from pyspark's own distribution
(``bin/spark-class``), each in a process group of its own (dying with its parent), with private conf,
log, work and scratch directories, and stops them all.  :func:`cluster_dist` gives the archives of
``spark-submit/package.sh`` (the packed environment built once per dependency set and cached, the
source zip built fresh from this checkout); :func:`node_env` unpacks that environment once on this
machine -- the one node of a loopback cluster -- with ``spark-submit/install-env.sh``, as an operator
does on every node, for every later application and cluster; :func:`standalone_command` the
``spark-submit/standalone.sh`` command line and environment of a job (``HEPIX_NODE_ENV`` set when the
cluster has a node environment, else the archive shipped with the application).

The standalone-cluster tests start their cluster with it (``tests/sparkcluster.py``), and ``hepix bench
--suite cluster`` its own (through :func:`bench.checkout.launcher`).  It runs this checkout's
``spark-submit/`` scripts, which are not installed with the package: from a checkout only.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from bench.clusters.options import conf_args, event_log_settings

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
SUBMIT = REPO / "spark-submit"
GIB = 2**30


# --- the cluster ---------------------------------------------------------------------------------

def spark_home() -> Path:
    """pyspark's own distribution: ``bin/spark-class`` and the jars of the Spark it ships."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise RuntimeError(f"{home} has no bin/spark-class and jars/: reinstall pyspark (make setup)")
    return home


def java_available() -> bool:
    """A JRE for the master and workers: ``$JAVA_HOME/bin/java`` or ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    return bool(home and os.access(os.path.join(home, "bin", "java"), os.X_OK)) or shutil.which("java") is not None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the daemon binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 10.0):
    """A Spark web UI's JSON (loopback only)."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def _die_with_parent(cmd: list[str]) -> list[str]:
    """``cmd`` under ``setpriv --pdeathsig KILL`` (util-linux) where there is one: the kernel kills
    the daemon when the process that started it dies, so a test process killed outright leaves no
    master or worker behind.  Without ``setpriv``, :meth:`StandaloneCluster.stop` is all there is."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *cmd] if setpriv else cmd


#: hepix settings a submitted job keeps: where the owner's key records are (hecore.keyring), which vouch for the
#: public keys an encrypt on the cluster uses, as they do for one run here.
KEPT = ("HEPIX_KEYRING",)


def clean_env() -> dict[str, str]:
    """This process's environment without Spark's, PySpark's or hepix's own settings (but :data:`KEPT`)."""
    return {k: v for k, v in os.environ.items()
            if k in KEPT or (not k.startswith(("PYSPARK_", "SPARK_", "HEPIX_")) and k != "PYTHONPATH")}


def memory_available() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def scratch_parent(fallback: Path, need: int) -> Path:
    """Where a cluster's scratch goes: ``/dev/shm`` (tmpfs) when it and the memory have room for
    ``need`` bytes and 6 GiB to spare, else ``fallback``.  Every application unpacks the 1 GB
    packed environment three times (driver and two executors) and deletes it again; on a disk
    shared with other jobs that costs minutes, in memory seconds."""
    shm = Path("/dev/shm")
    try:
        free = shutil.disk_usage(shm).free if shm.is_dir() and os.access(shm, os.W_OK) else 0
    except OSError:
        free = 0
    if free >= need + 6 * GIB and memory_available() >= need + 6 * GIB:
        return shm
    return fallback


@dataclass
class Daemon:
    """One master or worker JVM: its process (leader of its own process group) and web UI port."""

    name: str
    proc: subprocess.Popen
    webui: int
    log: Path
    work: Path | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the group (the daemon stops its executors), then SIGKILL to whatever is left."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        self.signal_group(signal.SIGKILL)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not exit after SIGKILL", self.name, self.proc.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each, on
    127.0.0.1, started from pyspark's distribution.  ``node_env``: the packed environment already
    unpacked on the node (:func:`node_env`), which its applications then use (``HEPIX_NODE_ENV``)
    instead of unpacking the archive each.

    ``root`` holds the conf and log directories; ``scratch`` (default ``root/scratch``; see
    :func:`scratch_parent`) the workers' work and local directories and the drivers' local
    directory.  Use as a context manager, or :meth:`start` and, in a ``finally``, :meth:`stop`:
    every daemon is stopped with its process group and the scratch directory removed.
    """

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    scratch: Path | None = None
    timeout: float = 300.0
    java_options: str = ""          # for the master's and the workers' JVMs (SPARK_DAEMON_JAVA_OPTS)
    node_env: Path | None = None    # the packed environment unpacked on the node (:func:`node_env`), or None
    master: Daemon | None = None
    worker_daemons: list[Daemon] = field(default_factory=list)
    master_port: int = 0
    start_seconds: float = 0.0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def master_json_url(self) -> str:
        return f"http://127.0.0.1:{self.master.webui}/json/"

    def _launch(self, name: str, args: list[str], extra_env: dict[str, str] | None = None,
                work: Path | None = None) -> Daemon:
        conf, logs = self.root / "conf", self.root / "logs"
        conf.mkdir(parents=True, exist_ok=True)   # empty: no spark-defaults.conf or spark-env.sh of anyone's
        logs.mkdir(parents=True, exist_ok=True)
        env = {**clean_env(), "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf),
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(logs), **(extra_env or {})}
        if self.java_options:
            env["SPARK_DAEMON_JAVA_OPTS"] = self.java_options
        webui = free_port()
        cmd = [str(spark_home() / "bin" / "spark-class"), *args, "--webui-port", str(webui)]
        path = logs / f"{name}.log"
        with open(path, "ab") as out:
            # A process group of its own: stopping a daemon then reaches the executors and Python
            # workers it starts.
            proc = subprocess.Popen(_die_with_parent(cmd), env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True)
        log.info("started %s (pid %d, web UI on %d)", name, proc.pid, webui)
        return Daemon(name, proc, webui, path, work)

    def start(self, wait: bool = True) -> StandaloneCluster:
        """Launch the master and the workers; with ``wait``, until the master lists every worker
        ALIVE (else call :meth:`wait_for_workers` later: the daemons come up meanwhile)."""
        t0 = time.perf_counter()
        self.root.mkdir(parents=True, exist_ok=True)
        if self.scratch is None:
            self.scratch = self.root / "scratch"
        for d in ("driver", "executors"):
            (self.scratch / d).mkdir(parents=True, exist_ok=True)
        self.master_port = free_port()
        self.master = self._launch("master", ["org.apache.spark.deploy.master.Master",
                                               "--host", "127.0.0.1", "--port", str(self.master_port)])
        for _ in range(self.workers):
            self.add_worker(wait=False)
        if wait:
            self.wait_for_workers(self.workers)
        self.start_seconds = time.perf_counter() - t0
        return self

    def add_worker(self, wait: bool = True) -> Daemon:
        """Start one more worker; with ``wait``, until the master lists every live worker ALIVE."""
        i = len(self.worker_daemons)
        work, local = self.scratch / f"worker-{i}" / "work", self.scratch / f"worker-{i}" / "local"
        work.mkdir(parents=True, exist_ok=True)
        local.mkdir(parents=True, exist_ok=True)
        daemon = self._launch(f"worker-{i}", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(self.cores),
            "--memory", self.memory, "--work-dir", str(work), self.master_url],
            {"SPARK_LOCAL_DIRS": str(local)}, work)
        self.worker_daemons.append(daemon)
        if wait:
            self.wait_for_workers(len(self.live_workers()))
        return daemon

    def remove_worker(self, daemon: Daemon) -> None:
        """Stop one worker (its executors with it) and wait until the master no longer lists it ALIVE."""
        daemon.stop()
        deadline = time.monotonic() + self.timeout
        while len(self.alive_worker_ids()) > len(self.live_workers()) and time.monotonic() < deadline:
            time.sleep(0.5)

    def live_workers(self) -> list[Daemon]:
        return [d for d in self.worker_daemons if d.alive()]

    def master_state(self) -> dict:
        return get_json(self.master_json_url)

    def alive_worker_ids(self) -> list[str]:
        """The master's ALIVE workers, by the master's worker ids."""
        return [w["id"] for w in self.master_state().get("workers", []) if w.get("state") == "ALIVE"]

    def wait_for_workers(self, n: int) -> None:
        """Until the master's JSON lists ``n`` ALIVE workers; fails with the daemons' logs when the
        master exits or ``timeout`` passes."""
        deadline = time.monotonic() + self.timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.master.alive():
                raise RuntimeError(f"the Spark master exited ({self.master.proc.returncode}):\n"
                                   f"{self.master.log_tail()}")
            try:
                alive = self.alive_worker_ids()
                if len(alive) >= n:
                    return
                last = f"{len(alive)} of {n} workers ALIVE"
            except (OSError, ValueError) as e:          # the web UI is not up yet
                last = f"{self.master_json_url}: {e}"
            time.sleep(0.5)
        raise RuntimeError(f"the standalone cluster was not ready after {self.timeout:.0f} s ({last}):\n"
                           + "\n".join(f"--- {d.name}\n{d.log_tail()}" for d in [self.master, *self.worker_daemons]))

    def worker_executors(self, daemon: Daemon) -> list[dict]:
        """The executors a worker runs now, from its web UI's JSON (each with ``appid`` and ``id``)."""
        return get_json(f"http://127.0.0.1:{daemon.webui}/json/").get("executors", [])

    def kill_worker(self, daemon: Daemon) -> None:
        """SIGKILL the worker's whole process group: the Worker JVM, its executor JVMs and their
        Python workers die at once, as when the machine under them is lost."""
        daemon.signal_group(signal.SIGKILL)
        daemon.proc.wait(timeout=60)

    def clear_finished_apps(self) -> None:
        """Remove the work directories (each holds an unpacked environment) of applications the
        master no longer runs."""
        try:
            running = {a["id"] for a in self.master_state().get("activeapps", [])}
        except (OSError, ValueError):
            return
        for d in self.worker_daemons:
            for app in d.work.glob("app-*") if d.work else ():
                if app.name not in running:
                    shutil.rmtree(app, ignore_errors=True)

    def stop(self) -> None:
        for d in reversed(self.worker_daemons):
            d.stop()
        if self.master is not None:
            self.master.stop()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


# --- the archives ---------------------------------------------------------------------------------

def cache_dir() -> Path:
    """``$HEPIX_CACHE`` (default ``~/.cache/hepix``), as ``make setup`` and ``package.sh`` use it."""
    return Path(os.environ.get("HEPIX_CACHE") or Path.home() / ".cache" / "hepix")


def env_key(cache: Path, without: tuple[str, ...] = ()) -> str:
    """What the packed environment is made of: the run-time dependencies (``pyproject.toml``'s
    ``[project] dependencies``; the extras never go into it), the Pyfhel wheel ``make setup``
    cached, the packing script and the Python version.  hepix's own code is not in the key:
    executors import it from the source zip, which ``--py-files`` puts ahead of the environment's
    site-packages on their path."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    h = hashlib.sha256()
    h.update(json.dumps([project.get("requires-python"), project.get("dependencies")]).encode())
    h.update((SUBMIT / "package.sh").read_bytes())
    for wheel in sorted((cache / "wheels").glob("pyfhel-*.whl")):
        h.update(wheel.name.encode())
    h.update(sys.version.encode())
    h.update(" ".join(sorted(without)).encode())
    return h.hexdigest()[:20]


def packed_env(cache: Path | None = None, venv: Path | None = None, without: tuple[str, ...] = ()) -> Path:
    """``hepix-env.tar.gz`` exactly as ``spark-submit/package.sh`` builds it (``--without`` each of
    ``without``), built once per :func:`env_key` into ``$HEPIX_CACHE/cluster-env/<key>/`` (minutes;
    under a lock, so that concurrent runs build it once) and reused after that."""
    cache = cache or cache_dir()
    venv = venv or Path(sys.prefix)
    root = cache / "cluster-env"
    root.mkdir(parents=True, exist_ok=True)
    key = env_key(cache, without)
    folder = root / key
    archive = folder / "hepix-env.tar.gz"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.is_file():
            log.warning("packing the cluster environment for this dependency set into %s (minutes, once)", folder)
            t0 = time.perf_counter()
            env = {**clean_env(), "HEPIX_VENV": str(venv), "HEPIX_CACHE": str(cache)}
            leave_out = [a for name in without for a in ("--without", name)]
            r = subprocess.run([str(SUBMIT / "package.sh"), "--dist", str(folder), *leave_out], env=env,
                               capture_output=True, text=True, check=False)
            if r.returncode:
                raise RuntimeError(f"spark-submit/package.sh failed ({r.returncode}):\n{r.stderr[-4000:]}")
            # Only the archive is kept: the packing venv (1 GB) is needed to repack, which a new key does anew.
            shutil.rmtree(folder / ".pack-venv", ignore_errors=True)
            for name in ("hepix-src.zip", "hepix_main.py", ".pack-venv.stamp"):
                (folder / name).unlink(missing_ok=True)
            (folder / "package.log").write_text(f"{r.stderr}\npackage.sh took {time.perf_counter() - t0:.0f} s\n")
    return archive


def cluster_dist(dest: Path, cache: Path | None = None, venv: Path | None = None,
                 without: tuple[str, ...] = ()) -> Path:
    """A ``HEPIX_DIST`` directory for ``spark-submit/standalone.sh``: ``hepix-src.zip`` and
    ``hepix_main.py`` from ``package.sh --src-only`` on this checkout (seconds), and the packed
    environment of :func:`packed_env` (``without`` those dependencies) linked in."""
    dest.mkdir(parents=True, exist_ok=True)
    venv = venv or Path(sys.prefix)
    r = subprocess.run([str(SUBMIT / "package.sh"), "--src-only", "--dist", str(dest)],
                       env={**clean_env(), "HEPIX_VENV": str(venv)}, capture_output=True, text=True, check=False)
    if r.returncode:
        raise RuntimeError(f"spark-submit/package.sh --src-only failed ({r.returncode}):\n{r.stderr[-4000:]}")
    link = dest / "hepix-env.tar.gz"
    link.unlink(missing_ok=True)
    link.symlink_to(packed_env(cache, venv, without))
    return dest


@dataclass
class NodeEnv:
    """What :func:`node_env` did: the environment's directory, whether it unpacked it now (else it was
    there already), and the seconds ``install-env.sh`` took."""

    path: Path
    unpacked: bool
    seconds: float


def node_env(archive: Path, root: Path | None = None) -> NodeEnv:
    """``archive`` (``package.sh``'s packed environment) unpacked once on this machine by
    ``spark-submit/install-env.sh`` into ``root`` (default: ``node/`` beside the cached archive, so that it
    goes with it), as an operator installs it on every node: each later application, cluster and run on
    this machine reuses it.  ``install-env.sh`` is idempotent and safe when several runs race."""
    archive = archive.resolve()
    root = root or archive.parent / "node"
    t0 = time.perf_counter()
    r = subprocess.run([str(SUBMIT / "install-env.sh"), "--root", str(root), str(archive)], env=clean_env(),
                       capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if r.returncode:
        raise RuntimeError(f"spark-submit/install-env.sh failed ({r.returncode}):\n{r.stderr[-4000:]}")
    path = Path(r.stdout.strip().splitlines()[-1])
    unpacked = "unpacking" in r.stderr
    log.log(logging.WARNING if unpacked else logging.INFO, "the packed environment %s in %s (%.1f s)",
            "unpacked" if unpacked else "already installed", path, seconds)
    return NodeEnv(path, unpacked, seconds)


# --- submitting ----------------------------------------------------------------------------------

def standalone_command(cluster: StandaloneCluster, dist: Path, hepix_args: list[str], *, cores: int,
                       venv: Path | None = None, driver_memory: str = "1g", ui_port: int | None = None,
                       event_log: Path | None = None,
                       extra_opts: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """``spark-submit/standalone.sh HEPIX_ARGS...`` for ``cluster``, and its environment.

    The application takes exactly ``cores`` cores and its jobs start once all of them are
    registered; everything binds to 127.0.0.1; the driver's scratch is the cluster's.  With
    ``ui_port`` the driver's web UI (and its REST API) listens there, else it is off; with
    ``event_log`` Spark writes its event log (plain JSON lines) into that directory; ``extra_opts`` are
    more spark-submit options.  With the cluster's ``node_env`` the application runs its Python workers
    from it (``HEPIX_NODE_ENV``), else it ships the packed environment of ``dist`` (``--archives``).
    """
    venv = venv or Path(sys.prefix)
    driver_dir = cluster.scratch / "driver"
    # The archive is copied into a temporary directory before it is unpacked, on the driver and
    # on every executor: keep those copies in the cluster's scratch too.
    settings = {"spark.executor.extraJavaOptions": f"-Djava.io.tmpdir={cluster.scratch / 'executors'}",
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "900s",
                # each worker has its own local directory, so the per-host fetch cache would only add a copy
                "spark.files.useFetchCache": "false"}
    settings.update({"spark.ui.port": str(ui_port)} if ui_port else {"spark.ui.enabled": "false"})
    if event_log is not None:
        settings.update(event_log_settings(event_log))
    opts = ["--driver-java-options", f"-Djava.io.tmpdir={driver_dir}", *conf_args(settings), *extra_opts]
    if any(" " in o for o in opts):
        raise ValueError(f"a path with a space cannot go through HEPIX_SPARK_OPTS: {opts}")
    env = {**clean_env(), "SPARK_MASTER_URL": cluster.master_url, "HEPIX_DIST": str(dist),
           "HEPIX_VENV": str(venv), "HEPIX_DRIVER_MEMORY": driver_memory, "HEPIX_TOTAL_CORES": str(cores),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(driver_dir), "HEPIX_SPARK_OPTS": " ".join(opts)}
    if cluster.node_env is not None:
        env["HEPIX_NODE_ENV"] = str(cluster.node_env)
    return [str(SUBMIT / "standalone.sh"), *hepix_args], env
