"""Spark's JVM started from a class-data archive: the classes a hepix job loads, parsed once.

A JVM that starts Spark loads and verifies about 12,000 classes from Spark's jars before the first
job runs, most of a core for several seconds.  The JDK can instead map them from an archive written
by an earlier JVM on the same jars (application class-data sharing, ``-XX:SharedArchiveFile``).
Measured on a 2-core machine: a ``hepix process`` of four ciphertexts in a fresh JVM took 26 CPU
seconds without the archive and 19 with it (``hepix bench``-style A/B, same machine, same load).

:func:`build` writes the archive once per Java and Spark installation (``make setup`` runs it):
it starts Spark with ``-XX:ArchiveClassesAtExit``, runs hepix's jobs on a generated image, and
waits for the JVM to write the archive as it exits.  :func:`java_options` is what
``jobs.runtime.session`` adds to the driver JVM's options when hepix starts Spark itself; it is
empty when there is no archive for this installation.  A JVM whose classpath or build differs
from the archive's ignores it and starts as it would without (``-Xshare:auto``, the default).

The archive is code the JVM maps: one that is not this user's, or that others may write, is
ignored with a warning.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

#: Where ``make setup`` keeps what it builds (the same variable as tools/setup.sh).
CACHE_ENV = "HEPIX_CACHE"
#: Set by :func:`build` for the JVM it starts: where that JVM writes the archive as it exits.
_dump_to: Path | None = None
_warned: set[Path] = set()


def _java() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.is_file():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def archive_path() -> Path | None:
    """The archive for this Java and this pyspark's jars (which need not exist yet), or None without Java."""
    java = _java()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    st = java.stat()
    names = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    key = hashlib.sha256("\n".join([str(java), str(st.st_size), str(st.st_mtime_ns), pyspark.__version__,
                                    str(jars), *names]).encode()).hexdigest()[:20]
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "hepix")
    return cache / "spark-cds" / f"{key}.jsa"


def usable(path: Path) -> bool:
    """Whether ``path`` is an archive this user may let the JVM map: a file of this user's that no one
    else can write."""
    try:
        st = path.stat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        if path not in _warned:
            _warned.add(path)
            log.warning("ignoring the class-data archive %s: it must be a file of this user's that no one else "
                        "can write (remove it; `make setup` writes a new one)", path)
        return False
    return True


def java_options() -> str:
    """JVM options that start Spark from the archive (or write it, during :func:`build`); '' without one."""
    if _dump_to is not None:
        return f"-XX:ArchiveClassesAtExit={_dump_to} -Xlog:cds=off -Xlog:cds+dynamic=off"
    path = archive_path()
    if path is None or not usable(path):
        return ""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"


def _warm_up(work: Path) -> None:
    """hepix's jobs, one after the other in one JVM, on a generated 16x16 image: the classes they load."""
    import numpy as np
    from PIL import Image

    from jobs.cli import main

    images = work / "images"
    images.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(images / "a.png")
    spark = ["--master", "local[2]", "--quiet"]
    steps = [
        ["keygen", "--out", str(work / "keys"), "--preset", "addonly-2048"],
        ["export-public", "--keys", str(work / "keys"), "--out", str(work / "pub")],
        ["encrypt", "--keys", str(work / "pub"), "--input", str(images), "--out", str(work / "enc"), *spark],
        ["process", "--keys", str(work / "pub"), "--input", str(work / "enc"), "--out", str(work / "proc"),
         "--op", "brightness:1", *spark],
        ["verify", str(work / "proc"), *spark],
        ["decrypt", "--keys", str(work / "keys"), "--input", str(work / "proc"), "--out", str(work / "dec"),
         "--owner", str(work / "enc.owner"), *spark],
    ]
    for args in steps:
        said = io.StringIO()
        with contextlib.redirect_stdout(said):          # the jobs' own lines; shown when one fails
            code = main(args)
        if code != 0:
            raise RuntimeError(f"hepix {' '.join(args)} failed while writing the class-data archive:\n"
                               f"{said.getvalue()[-2000:]}")


def build(*, force: bool = False) -> Path | None:
    """Write the archive for this installation unless it is there already; its path, or None without Java."""
    global _dump_to
    path = archive_path()
    if path is None:
        return None
    if path.exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    from pyspark import SparkContext

    from jobs.runtime import session

    with tempfile.TemporaryDirectory(prefix="hepix-cds-") as work:
        _dump_to = Path(work) / "spark.jsa"
        os.environ[session.KEEP_ENV] = "1"          # one JVM for every job
        try:
            _warm_up(Path(work))
        finally:
            session.release_kept_session()
            gateway = SparkContext._gateway
            if gateway is not None:
                proc = gateway.proc
                gateway.shutdown()
                proc.stdin.close()                  # the JVM exits on end of input, writing the archive
                proc.wait(timeout=300)
        if not _dump_to.is_file() or _dump_to.stat().st_size == 0:
            raise RuntimeError("the JVM wrote no class-data archive")
        staged = path.with_name(f".{path.name}.tmp")
        shutil.move(str(_dump_to), staged)
        staged.chmod(0o644)
        staged.replace(path)
    return path


if __name__ == "__main__":
    # ``python -m`` runs this file as ``__main__``, a module apart from the one the session reads
    from jobs.runtime import jvmarchive

    logging.basicConfig(level=logging.WARNING)
    built = jvmarchive.build(force="--force" in sys.argv[1:])
    print(f"Spark's class-data archive: {built}" if built is not None else "no java: no class-data archive",
          flush=True)
    os._exit(0)
