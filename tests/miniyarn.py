"""A real YARN for tests: Hadoop's MiniDFSCluster and MiniYARNCluster in one JVM on loopback.

Not a test module.  One name node, one data node, one ResourceManager and one NodeManager, started
by ``tests/java/HepixMiniYarn.java`` (compiled once with ``javac`` into the jar cache of
:mod:`bench.clusters.minidfs`, whose jars it runs on), in a working directory of the test's.  The
NodeManager runs its containers as processes of this machine.  :attr:`MiniYarn.conf_dir` is a
``HADOOP_CONF_DIR`` for spark-submit (``core-site.xml``, ``hdfs-site.xml``, ``yarn-site.xml``).

Beside minidfs's jars the ResourceManager needs a log4j 1 API (pyspark's ``log4j-1.2-api`` bridge
and log4j 2, taken from pyspark's jars) and BouncyCastle (in :data:`minidfs.ARTIFACTS`).
:func:`unavailable` says why a test must skip.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

from bench.clusters import minidfs
from bench.clusters.options import SHORT_JVM_OPTS

SOURCE = Path(__file__).resolve().parent / "java" / "HepixMiniYarn.java"
#: pyspark's jars the ResourceManager loads its log4j 1 API from.
LOG4J_JARS = ("log4j-1.2-api-*.jar", "log4j-api-*.jar", "log4j-core-*.jar")


def unavailable() -> str | None:
    """Why no mini YARN can run here, or None."""
    if not shutil.which("javac"):
        return "no javac on PATH: the YARN integration test compiles its cluster launcher (needs a JDK)"
    return minidfs.unavailable()


def pyspark_jars() -> list[Path]:
    jars = Path(pyspark.__file__).parent / "jars"
    found = [p for pattern in LOG4J_JARS for p in sorted(jars.glob(pattern))[:1]]
    if len(found) != len(LOG4J_JARS):
        raise RuntimeError(f"{jars} lacks one of {LOG4J_JARS}: reinstall pyspark (make setup)")
    return found


def classpath() -> str:
    """The launcher's class path: minidfs's jars, pyspark's log4j and the compiled launcher (compiled
    now, under a lock, when its source changed)."""
    lib = minidfs.jars()
    jars = [f"{lib}/*", *map(str, pyspark_jars())]
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    classes = minidfs.cache_dir() / "miniyarn" / digest
    classes.parent.mkdir(parents=True, exist_ok=True)
    with open(classes.parent / "compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (classes / "HepixMiniYarn.class").is_file():
            tmp = classes.with_name(digest + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            r = subprocess.run(["javac", "-nowarn", "-cp", ":".join(jars), "-d", str(tmp), str(SOURCE)],
                               capture_output=True, text=True, check=False)
            if r.returncode:
                raise RuntimeError(f"javac {SOURCE.name} failed:\n{r.stderr[-3000:]}")
            tmp.rename(classes)
    return ":".join([*jars, str(classes)])


@dataclass(frozen=True)
class Container:
    """A YARN container's process: its JVM's pid and process group (the container's session)."""

    container_id: str
    pid: int
    pgid: int
    command: str


class MiniYarn:
    """HDFS and YARN in one JVM, in ``workdir``; :meth:`stop` ends it and every container it started.

    ``memory_mb`` and ``vcores`` are the NodeManager's resources.  The JVM dies with this process
    (``setpriv --pdeathsig``) where util-linux has ``setpriv``.
    """

    def __init__(self, workdir: Path, memory_mb: int = 5120, vcores: int = 2, timeout: float = 240):
        """Launch the JVM; :meth:`wait` (or any property) waits until both clusters are up."""
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf_dir = self.workdir / "hadoop-conf"
        self.log = self.workdir / "miniyarn.log"
        self.timeout = timeout
        self._details: dict | None = None
        cmd = ["java", "-Xmx768m", SHORT_JVM_OPTS, "-cp", classpath(), "HepixMiniYarn", str(self.conf_dir),
               str(minidfs.free_port()), str(memory_mb), str(vcores)]
        setpriv = shutil.which("setpriv")
        if setpriv:
            cmd = [setpriv, "--pdeathsig", "TERM", "--", *cmd]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdin=subprocess.PIPE, stdout=self.log.open("wb"),
                                     stderr=subprocess.STDOUT)

    def wait(self) -> MiniYarn:
        """Until the launcher has written ``cluster.json``; fails with its log when it exits or times out."""
        details = self.conf_dir / "cluster.json"
        while self._details is None:
            if details.is_file():
                self._details = json.loads(details.read_text())
            elif self.proc.poll() is not None or time.monotonic() > self.started + self.timeout:
                self.stop()
                raise RuntimeError(f"the mini YARN cluster did not start; see {self.log}:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            else:
                time.sleep(0.5)
        return self

    @property
    def details(self) -> dict:
        return self.wait()._details

    @property
    def uri(self) -> str:
        """The HDFS root, ``hdfs://localhost:PORT``."""
        return self.details["hdfs"]

    @property
    def webhdfs(self) -> str:
        return self.details["webhdfs"]

    def client(self):
        """A WebHDFS client, as this machine's user."""
        import getpass

        from hdfs import InsecureClient
        return InsecureClient(self.webhdfs, user=os.environ.get("HADOOP_USER_NAME") or getpass.getuser())

    def containers(self, marker: str = "") -> list[Container]:
        """The live container JVMs this cluster's NodeManager started (their command lines name a
        directory under ``workdir``), those whose command line holds ``marker`` (say
        ``CoarseGrainedExecutorBackend``)."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                words = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            line = " ".join(words)
            if not words or not words[0].endswith("java") or str(self.workdir) not in line or marker not in line:
                continue
            # (its working directory, log directory and tmpdir are named after the container)
            cid = next((part for w in words for part in w.split("/") if part.startswith("container_")), None)
            if cid is None:
                continue
            try:
                found.append(Container(cid, int(proc.name), os.getpgid(int(proc.name)), line))
            except ProcessLookupError:
                continue
        return found

    def children(self, pid: int) -> list[int]:
        """The pids whose parent is ``pid``."""
        kids = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(proc.name))
                except (OSError, ValueError, IndexError):
                    continue
        return kids

    def kill_container(self, container: Container) -> None:
        """SIGKILL the container's process group (its launch script, its JVM and the JVM's Python
        workers), as when the machine under it is lost."""
        try:
            os.killpg(container.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Stop YARN and HDFS (closing the launcher's standard input), then SIGKILL any container the
        NodeManager left behind."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                minidfs.end(self.proc)
        for c in self.containers():
            self.kill_container(c)
