"""``python -m jobs.classarchive [--force]``: write Spark's class-data archive for this installation.

``make setup`` runs it once (tools/setup.sh): hepix's jobs -- keygen, encrypt, process, verify, decrypt --
run on a generated 16x16 image in one JVM that writes the classes it loaded to the archive as it exits;
the archive is then moved into place (:func:`jobs.runtime.jvmarchive.archive_path`), where every driver
JVM hepix starts maps it.  Why and how: :mod:`jobs.runtime.jvmarchive`.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .cli import main
from .runtime import jvmarchive, session


def _warm_up(work: Path) -> None:
    """hepix's jobs, one after the other in one JVM, on a generated 16x16 image: the classes they load."""
    import numpy as np
    from PIL import Image

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
    path = jvmarchive.archive_path()
    if path is None:
        return None
    if path.exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    from pyspark import SparkContext

    with tempfile.TemporaryDirectory(prefix="hepix-cds-") as work:
        dump = Path(work) / "spark.jsa"
        os.environ[session.KEEP_ENV] = "1"          # one JVM for every job
        try:
            with jvmarchive.dumping_to(dump):
                _warm_up(Path(work))
        finally:
            session.release_kept_session()
            gateway = SparkContext._gateway
            if gateway is not None:
                proc = gateway.proc
                gateway.shutdown()
                proc.stdin.close()                  # the JVM exits on end of input, writing the archive
                proc.wait(timeout=300)
        if not dump.is_file() or dump.stat().st_size == 0:
            raise RuntimeError("the JVM wrote no class-data archive")
        staged = path.with_name(f".{path.name}.tmp")
        shutil.move(str(dump), staged)
        staged.chmod(0o644)
        staged.replace(path)
    _prune(path)
    return path


#: Archives kept in the cache besides the one just written (each ~190 MB): the installations used last.
KEEP_OTHERS = 3


def _prune(current: Path) -> None:
    """Remove the archives of older installations beyond the :data:`KEEP_OTHERS` written last (a JVM that
    has one mapped keeps it until it exits; a job of a removed one's installation starts without one)."""
    others = []
    for p in current.parent.glob("*.jsa"):
        if p != current:
            try:
                others.append((p.stat().st_mtime_ns, p))
            except OSError:
                continue
    for _, p in sorted(others, reverse=True)[KEEP_OTHERS:]:
        p.unlink(missing_ok=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    built = build(force="--force" in sys.argv[1:])
    print(f"Spark's class-data archive: {built}" if built is not None else "no java: no class-data archive",
          flush=True)
    os._exit(0)
