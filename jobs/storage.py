"""Files through Hadoop's FileSystem (local paths, file://, hdfs://), and all-or-nothing output.

A job writes its tables under ``OUT/_staging/<run_id>/``, then :meth:`Output.commit`
removes the old manifest, swaps each table into place and writes
``OUT/_manifest.json`` last.  A directory with a complete manifest therefore
holds one whole run; one without is not taken for complete by any job.
"""
from __future__ import annotations

import logging

from schemas.manifest import RunManifest

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"


class Storage:
    """A thin wrapper over ``org.apache.hadoop.fs.FileSystem`` through the session's JVM."""

    def __init__(self, spark):
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()

    def _path(self, p: str):
        return self._jvm.org.apache.hadoop.fs.Path(p)

    def _fs(self, p: str):
        return self._path(p).getFileSystem(self._conf)

    def qualify(self, p: str) -> str:
        path = self._path(p)
        return str(self._fs(p).makeQualified(path).toString())

    def exists(self, p: str) -> bool:
        return bool(self._fs(p).exists(self._path(p)))

    def delete(self, p: str) -> None:
        self._fs(p).delete(self._path(p), True)

    def mkdirs(self, p: str) -> None:
        self._fs(p).mkdirs(self._path(p))

    def rename(self, src: str, dst: str) -> None:
        if not self._fs(src).rename(self._path(src), self._path(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def list_files(self, directory: str) -> dict[str, int]:
        """Data files directly in ``directory`` -> their sizes (hidden ``_x`` and ``.x`` left out)."""
        fs = self._fs(directory)
        if not fs.exists(self._path(directory)):
            return {}
        found = {}
        for status in fs.listStatus(self._path(directory)):
            name = status.getPath().getName()
            if status.isFile() and not (name.startswith("_") or name.startswith(".")):
                found[name] = int(status.getLen())
        return found

    def empty_files(self, pattern: str, recursive: bool) -> list[str]:
        """Zero-length files the way Spark's file sources see ``pattern`` (hidden _x and .x left out).

        Spark's binaryFile source drops empty files without a word; hepix lists
        them so that they are reported as rejects instead of vanishing.
        """
        fs = self._fs(pattern)
        found: list[str] = []

        def visible(status) -> bool:
            name = status.getPath().getName()
            return not (name.startswith("_") or name.startswith("."))

        def walk(status, top: bool) -> None:
            if not visible(status) and not top:
                return
            if status.isDirectory():
                if top or recursive:
                    for child in fs.listStatus(status.getPath()):
                        walk(child, False)
            elif status.getLen() == 0:
                found.append(str(status.getPath().toString()))

        for status in fs.globStatus(self._path(pattern)) or []:
            walk(status, True)
        return sorted(found)

    def read_text(self, p: str) -> str:
        fs = self._fs(p)
        stream = fs.open(self._path(p))
        try:
            reader = self._jvm.java.io.BufferedReader(self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            lines = []
            while True:
                line = reader.readLine()
                if line is None:
                    break
                lines.append(line)
            return "\n".join(lines) + "\n"
        finally:
            stream.close()

    def write_text(self, p: str, text: str) -> None:
        """Write via a temporary file and a rename, so readers never see half a file."""
        tmp = p + "._tmp"
        fs = self._fs(p)
        out = fs.create(self._path(tmp), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        if fs.exists(self._path(p)):
            fs.delete(self._path(p), False)
        self.rename(tmp, p)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


class Output:
    """The staged output of one run in directory ``out``."""

    def __init__(self, storage: Storage, out: str, run_id: str):
        self.storage = storage
        self.out = out.rstrip("/")
        self.run_id = run_id
        self.staging = join(self.out, "_staging", run_id)

    def table(self, name: str) -> str:
        """Where to write table ``name`` before the commit."""
        return join(self.staging, name)

    def commit(self, manifest: RunManifest, tables: list[str]) -> None:
        st = self.storage
        st.mkdirs(self.out)
        if st.exists(join(self.out, MANIFEST)):
            st.delete(join(self.out, MANIFEST))       # from here on the directory is not "complete"
        trash = join(self.out, "_trash", self.run_id)
        for name in tables:
            final = join(self.out, name)
            if st.exists(final):
                st.mkdirs(trash)
                st.rename(final, join(trash, name))
            st.rename(self.table(name), final)
        st.write_text(join(self.out, MANIFEST), manifest.to_json())
        for leftover in (trash, self.staging):
            if st.exists(leftover):
                st.delete(leftover)
        for parent in ("_trash", "_staging"):
            p = join(self.out, parent)
            if st.exists(p) and not st._fs(p).listStatus(st._path(p)):
                st.delete(p)
        log.info("committed %s to %s", self.run_id, self.out)

    def abort(self) -> None:
        st = self.storage
        if st.exists(self.staging):
            st.delete(self.staging)
        parent = join(self.out, "_staging")
        if st.exists(parent) and not st._fs(parent).listStatus(st._path(parent)):
            st.delete(parent)


def read_manifest(storage: Storage, directory: str) -> RunManifest | None:
    path = join(directory.rstrip("/"), MANIFEST)
    if not storage.exists(path):
        return None
    return RunManifest.from_json(storage.read_text(path))
