"""A real HDFS on loopback, for the tests and ``hepix bench --suite cluster --hdfs``: Hadoop's
MiniDFSCluster, from Maven Central jars.

The jars (hadoop-client-minicluster and friends, at the Hadoop version PySpark bundles) are fetched
once by Maven into ``~/.m2`` and copied to ``$HEPIX_CACHE/minidfs/<version>/lib`` (default
``~/.cache/hepix``); later runs start the cluster straight from there (~15 s).  Needs ``java``, and
``mvn`` for the first fetch; :func:`unavailable` says why it cannot run here (a test skips with that
reason, the benchmark stops with it).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pyspark

from bench.clusters.options import SHORT_JVM_OPTS

#: (groupId, artifactId, version or None for Hadoop's).  jaxb-api and activation: without them WebHDFS
#: answers 500 on Java 17; junit-jupiter-api: Hadoop 3.5's test utilities load its Assertions class;
#: BouncyCastle (Hadoop 3.5's version): the ResourceManager of tests/miniyarn.py builds its proxy's
#: certificate authority with it, and the minicluster jar leaves it out.
ARTIFACTS = [
    ("org.apache.hadoop", "hadoop-client-minicluster", None),
    ("org.apache.hadoop", "hadoop-client-runtime", None),
    ("org.apache.hadoop", "hadoop-client-api", None),
    ("javax.xml.bind", "jaxb-api", "2.2.11"),
    ("javax.activation", "activation", "1.1.1"),
    ("org.junit.jupiter", "junit-jupiter-api", "5.10.2"),
    ("org.bouncycastle", "bcprov-jdk18on", "1.82"),
    ("org.bouncycastle", "bcpkix-jdk18on", "1.82"),
    ("org.bouncycastle", "bcutil-jdk18on", "1.82"),
]


def hadoop_version() -> str:
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise RuntimeError(f"no hadoop-client-api jar in {jars}")


def cache_dir() -> Path:
    base = Path(os.environ.get("HEPIX_CACHE", Path.home() / ".cache" / "hepix"))
    return base / "minidfs" / hadoop_version()


def unavailable() -> str | None:
    """Why no MiniDFSCluster can run here, or None."""
    if not shutil.which("java"):
        return "no java on PATH: a MiniDFSCluster needs a JRE, and Maven once for its jars"
    if not _complete(cache_dir() / "lib", hadoop_version()) and not shutil.which("mvn"):
        return "no mvn on PATH and no cached MiniDFSCluster jars: a MiniDFSCluster needs Maven once to fetch them"
    return None


def _stamp(version: str) -> str:
    """What ``lib/.complete`` holds: the Hadoop version and the artifacts fetched for it."""
    return "\n".join([version, *(f"{g}:{a}:{v or version}" for g, a, v in ARTIFACTS)]) + "\n"


def _complete(lib: Path, version: str) -> bool:
    try:
        return (lib / ".complete").read_text() == _stamp(version)
    except OSError:
        return False


def jars() -> Path:
    """The directory of the cluster's jars, fetched with Maven the first time (and again when
    :data:`ARTIFACTS` changes)."""
    root = cache_dir()
    lib = root / "lib"
    version = hadoop_version()
    if _complete(lib, version):
        return lib
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # one fetch at a time; the others then find it done
        if not _complete(lib, version):
            _fetch(root, version)
    return lib


def _fetch(root: Path, version: str) -> None:
    lib = root / "lib"
    deps = "\n".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v or version}</version></dependency>"
        for g, a, v in ARTIFACTS)
    (root / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>hepix.test</groupId><artifactId>minidfs</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>\n")
    tmp = root / "lib.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"],
                   cwd=root, check=True, timeout=900, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    (tmp / ".complete").write_text(_stamp(version))
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _complete_json(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return True


class MiniDFS:
    """One name node and one data node on free ports, in ``workdir``; stop() ends it."""

    def __init__(self, workdir: Path, timeout: float = 180):
        self.workdir = Path(workdir)
        self.nn_port, self.http_port = free_port(), free_port()
        lib = jars()
        self.log = self.workdir / "minidfs.log"
        details = self.workdir / "nn.json"
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", SHORT_JVM_OPTS, "-cp", f"{lib}/*", "org.apache.hadoop.test.MiniDFSClusterManager",
             "-format", "-nnport", str(self.nn_port), "-httpport", str(self.http_port), "-datanodes", "1",
             "-writeConfig", str(self.workdir / "core-site.xml"), "-writeDetails", str(details)],
            cwd=self.workdir, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        # The manager creates nn.json and then writes it: a file that exists can still be empty or cut
        # short for a moment (seen on a loaded machine), so wait until it parses.
        while not _complete_json(details):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"MiniDFSCluster did not start; see {self.log}:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.5)

    @property
    def uri(self) -> str:
        return f"hdfs://localhost:{self.nn_port}"

    @property
    def webhdfs(self) -> str:
        return f"http://localhost:{self.http_port}"

    def client(self):
        import getpass

        from hdfs import InsecureClient
        return InsecureClient(self.webhdfs, user=os.environ.get("HADOOP_USER_NAME") or getpass.getuser())

    def stop(self) -> None:
        end(self.proc)


def end(proc: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM, and SIGKILL after ``grace`` seconds, unless ``proc`` has exited."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
