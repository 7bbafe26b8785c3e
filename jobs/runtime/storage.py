"""Files through Hadoop's FileSystem (local paths, file://, hdfs://), and all-or-nothing output.

A job writes its tables under ``OUT/_staging/<run_id>/``, then :meth:`Output.commit`
removes the old manifest, swaps each table into place and writes
``OUT/_manifest.json`` last.  A directory with a complete manifest therefore
holds one whole run; one without is not taken for complete by any job.

Reading a run: :func:`read_manifest` validates the manifest (schemas.manifest) and turns a bad one
into a one-line :class:`~hecore.errors.ManifestError` naming the file and the field;
:func:`listed_paths` gives the files a table's manifest lists, each checked to lie inside the table's
directory: a job reads exactly those, never whatever else sits there.
"""
from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass

from hecore.errors import ManifestError
from schemas.manifest import FILE_NAME, MAX_BYTES, ManifestInvalid, RunManifest

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"


class Storage:
    """A thin wrapper over ``org.apache.hadoop.fs.FileSystem`` through the session's JVM."""

    def __init__(self, spark):
        # The class looked up once: py4j resolves ``jvm.org.apache.hadoop.fs.Path`` one name at a time, and
        # each of ``org``, ``org.apache``, ... is a class lookup that fails only after searching every jar.
        self._Path = spark._jvm.org.apache.hadoop.fs.Path
        self._conf = spark._jsc.hadoopConfiguration()

    def _path(self, p: str):
        return self._Path(p)

    def _fs(self, p: str):
        return self._path(p).getFileSystem(self._conf)

    def access(self, p: str):
        """How the Python workers reach ``p`` (:func:`jobs.runtime.remote.file_access`, with this session's
        Hadoop configuration's name node HTTP address)."""
        from .remote import file_access

        return file_access(p, self._conf.get("dfs.namenode.http-address"))

    def size(self, p: str) -> int:
        return int(self._fs(p).getFileStatus(self._path(p)).getLen())

    def exists(self, p: str) -> bool:
        return bool(self._fs(p).exists(self._path(p)))

    def delete(self, p: str) -> None:
        self._fs(p).delete(self._path(p), True)

    def mkdirs(self, p: str) -> None:
        self._fs(p).mkdirs(self._path(p))

    def rename(self, src: str, dst: str) -> None:
        if not self._fs(src).rename(self._path(src), self._path(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def file_size(self, p: str) -> int | None:
        """The size of the file ``p``, or None when there is no file there (nothing, or a directory)."""
        try:
            status = self._fs(p).getFileStatus(self._path(p))
        except Exception:  # noqa: BLE001 -- py4j's FileNotFoundException
            return None
        return int(status.getLen()) if status.isFile() else None

    def is_file(self, p: str) -> bool:
        return bool(self._fs(p).getFileStatus(self._path(p)).isFile())

    def names(self, directory: str) -> list[str]:
        """Every name directly in ``directory`` (files and directories, hidden ones too)."""
        return [s.getPath().getName() for s in self._fs(directory).listStatus(self._path(directory))]

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

    def input_files(self, pattern: str, recursive: bool) -> list["InputFile"]:
        """Every regular file of ``pattern`` (a file, a directory, a glob), the way encrypt takes them:
        a directory's files, its subdirectories' too with ``recursive``.  Names Spark's file sources skip
        (``_x``, ``.x``, and anything under such a directory) are listed with ``hidden`` set, so that they
        can be reported instead of vanishing.  A pattern that matches nothing is a clear error."""
        from hecore.errors import HepixError

        fs = self._fs(pattern)
        statuses = fs.globStatus(self._path(pattern))
        if not statuses:
            raise HepixError(f"cannot read images from {pattern}: Path does not exist (no file or directory matches)")
        found: list[InputFile] = []

        def walk(status, top: bool, hidden: bool) -> None:
            name = status.getPath().getName()
            hidden = hidden or (not top and (name.startswith("_") or name.startswith(".")))
            if status.isDirectory():
                if top or recursive:
                    for child in fs.listStatus(status.getPath()):
                        walk(child, False, hidden)
            elif status.isFile():
                found.append(InputFile(str(status.getPath().toString()), int(status.getLen()), hidden))

        for status in statuses:
            walk(status, True, False)
        return sorted(found, key=lambda f: f.path)

    def read_bytes(self, p: str, limit: int) -> bytes:
        """The bytes of ``p``, at most ``limit`` of them (a longer file is an :class:`OSError`): one call
        through the JVM, whatever the file holds (a file of newlines costs no call per line)."""
        stream = self._fs(p).open(self._path(p))
        try:
            data = bytes(stream.readNBytes(limit + 1))
        finally:
            stream.close()
        if len(data) > limit:
            raise OSError(f"{p} holds more than {limit} bytes")
        return data

    def read_at(self, p: str, offset: int, length: int) -> bytes:
        """``length`` bytes of ``p`` from ``offset`` (fewer at the end of the file)."""
        stream = self._fs(p).open(self._path(p))
        try:
            stream.seek(offset)
            return bytes(stream.readNBytes(length))
        except Exception as e:  # noqa: BLE001 -- py4j's errors: a short file, a vanished one
            raise OSError(f"cannot read {length} bytes at {offset} of {p}: {str(e).splitlines()[0][:120]}") from None
        finally:
            stream.close()

    def is_symlink(self, p: str) -> bool:
        """Whether ``p`` is a symbolic link (a local file is asked directly; Hadoop's listing follows links)."""
        import os

        from .owner import local_path

        local = local_path(p) if "://" not in p or p.startswith("file:") else None
        if local is not None:
            return os.path.islink(local)
        try:
            return bool(self._fs(p).getFileLinkStatus(self._path(p)).isSymlink())
        except Exception:  # noqa: BLE001 -- file systems without links refuse the call
            return False

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


@dataclass(frozen=True)
class InputFile:
    path: str           # as Spark's binaryFile source spells it (file:/..., hdfs://...)
    size: int
    hidden: bool        # a name Spark's file sources skip


def inside(directory: str, name: str) -> str:
    """``directory/name`` for a plain file ``name`` of a manifest, checked to stay inside ``directory``
    (a strict name pattern, then the normalised path); a :class:`ManifestError` otherwise."""
    if not isinstance(name, str) or not FILE_NAME.fullmatch(name):
        raise ManifestError(f"{directory}: the manifest names the file {str(name)[:80]!r}, which is not a plain file "
                            "name; hepix reads only the files of a table's own directory")
    path = join(directory, name)
    base = directory.rstrip("/")
    scheme, sep, rest = path.partition("://")
    normal = (scheme + sep + posixpath.normpath(rest)) if sep else posixpath.normpath(path)
    bscheme, bsep, brest = base.partition("://")
    bnormal = (bscheme + bsep + posixpath.normpath(brest)) if bsep else posixpath.normpath(base)
    if posixpath.dirname(normal) != bnormal:
        raise ManifestError(f"{directory}: the manifest names {name!r}, which resolves outside the directory")
    return path


def listed_paths(manifest: RunManifest, directory: str, table: str) -> list[str]:
    """The files of ``table`` the manifest of the run in ``directory`` lists, each inside ``table``'s directory."""
    entries = manifest.files.get(table)
    if entries is None:
        raise ManifestError(f"{join(directory, MANIFEST)}: field 'files.{table}' is missing: the run lists no "
                            f"{table} table (written by another job, or before hepix listed its files)")
    return [inside(join(directory, table), e["name"]) for e in entries]


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
    """The validated manifest of ``directory``, None when it has none, or a one-line :class:`ManifestError`."""
    path = join(directory.rstrip("/"), MANIFEST)
    if not storage.exists(path):
        return None
    if storage.size(path) > MAX_BYTES:
        raise ManifestError(f"{path}: {storage.size(path)} bytes is more than a hepix manifest holds")
    try:
        data = storage.read_bytes(path, MAX_BYTES)
    except OSError as e:
        raise ManifestError(f"{path}: {e}") from None
    return parse_manifest(data, path)


def parse_manifest(data: bytes | str, path: str) -> RunManifest:
    """The manifest in ``data`` (read from ``path``), or a one-line :class:`ManifestError` naming the field."""
    try:
        return RunManifest.from_json(data)
    except ManifestInvalid as e:
        raise ManifestError(f"{path}: {e}") from None
