"""Spark's JVM started from a class-data archive: the classes a hepix job loads, parsed once.

A JVM that starts Spark loads and verifies about 12,000 classes from Spark's jars before the first
job runs, most of a core for several seconds.  The JDK can instead map them from an archive written
by an earlier JVM on the same jars (application class-data sharing, ``-XX:SharedArchiveFile``).
Measured on a 2-core machine: a ``hepix process`` of four ciphertexts in a fresh JVM took 26-27 CPU
seconds without the archive and 19-22 with it (runs alternating between the two, same load).

``python -m jobs.classarchive`` writes the archive once per Java and Spark installation (``make setup``
runs it): it starts Spark with ``-XX:ArchiveClassesAtExit`` (:func:`dumping_to`), runs hepix's jobs on a
generated image, and waits for the JVM to write the archive as it exits.  :func:`java_options` is what
``jobs.runtime.session`` adds to the driver JVM's options when hepix starts Spark itself; it is
empty when there is no archive for this installation.  The archive is named after the Java, the jars'
directory and each jar's size and modification time, which the JVM checks before it maps one: a new
virtualenv writes its jars anew and gets an archive of its own (a JVM whose classpath or build differs
from the archive's ignores it and starts as it would without, ``-Xshare:auto``, the default: silently
slower).

The archive is code the JVM maps: one that is not this user's, or that others may write, is
ignored with a warning.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
from pathlib import Path

log = logging.getLogger(__name__)

#: Where ``make setup`` keeps what it builds (the same variable as tools/setup.sh).
CACHE_ENV = "HEPIX_CACHE"
#: Set by :func:`dumping_to` for the JVM started inside it: where that JVM writes the archive as it exits.
_dump_to: Path | None = None
_warned: set[Path] = set()
#: The JVM says nothing of the archive: not when it writes one, not when it ignores one of another build.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


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
    # each jar's size and modification time, which the JVM compares with the archive's before it maps it: a
    # new virtualenv (a clean clone's, a reinstalled pyspark) writes its jars anew and needs an archive of its own
    entries = []
    for jar in sorted(jars.glob("*.jar")) if jars.is_dir() else []:
        try:
            js = jar.stat()
        except OSError:
            continue
        entries.append(f"{jar.name} {js.st_size} {js.st_mtime_ns}")
    key = hashlib.sha256("\n".join([str(java), str(st.st_size), str(st.st_mtime_ns), pyspark.__version__,
                                    str(jars), *entries]).encode()).hexdigest()[:20]
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
    """JVM options that start Spark from the archive (or write it, inside :func:`dumping_to`); '' without one."""
    if _dump_to is not None:
        return f"-XX:ArchiveClassesAtExit={_dump_to} {_QUIET}"
    path = archive_path()
    if path is None or not usable(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


@contextlib.contextmanager
def dumping_to(path: Path):
    """While the block runs, the JVMs hepix starts write the archive to ``path`` as they exit."""
    global _dump_to
    _dump_to = path
    try:
        yield
    finally:
        _dump_to = None
