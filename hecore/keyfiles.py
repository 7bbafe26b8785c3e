"""Reading a key directory's public files and small JSON documents with bounds, whoever wrote them.

A public key directory is a copy that travels, so its files are read as untrusted input: a regular file
only (a FIFO would block the job, a device never end), at most the bytes its kind of key can have, and a
manifest at most :data:`MAX_MANIFEST_BYTES` that parses as one JSON object.  Errors are
:class:`~hecore.errors.KeyDirectoryError` s naming the file and what to do.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import KeyDirectoryError

#: The largest ``hepix-keys.json`` (a few hundred bytes in practice).
MAX_MANIFEST_BYTES = 1 << 20

#: The manifest every key directory holds, whatever its scheme.
MANIFEST = "hepix-keys.json"


def read_bounded(path: str | os.PathLike, max_bytes: int, *, what: str) -> bytes:
    """The bytes of the regular file ``path`` (a symbolic link to one is followed), refused when it is
    something else or larger than ``max_bytes``; the size checked and the bytes read on one descriptor."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise KeyDirectoryError(f"{path.parent} has no {path.name}; the key directory is incomplete") from None
    except OSError as e:
        raise KeyDirectoryError(f"{path} cannot be opened: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyDirectoryError(f"{path} is not a regular file; {what} must be one")
        if st.st_size > max_bytes:
            raise KeyDirectoryError(f"{path} holds {st.st_size:,} bytes, more than {what} can ({max_bytes:,}): it "
                                    "is not the file hepix wrote; restore the key directory from the owner's copy")
        # the size just checked in one read (a server key of hundreds of megabytes copied once, not in
        # chunks joined), then whatever it grew by
        chunks, left, want = [], max_bytes + 1, st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, want))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            want = 1 << 24
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > max_bytes:
            raise KeyDirectoryError(f"{path} grew past {max_bytes:,} bytes while it was read; {what} is not "
                                    "the file hepix wrote")
        return data
    finally:
        os.close(fd)


def sha256_bounded(path: str | os.PathLike, max_bytes: int, *, what: str) -> str:
    """The sha256 of a file :func:`read_bounded` would accept, hashed as it is read (not held)."""
    import hashlib

    path = Path(path)
    h = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise KeyDirectoryError(f"{path} cannot be opened: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            raise KeyDirectoryError(f"{path} is not a regular file of at most {max_bytes:,} bytes, as {what} is")
        read = 0
        while chunk := f.read(1 << 24):
            read += len(chunk)
            if read > max_bytes:
                raise KeyDirectoryError(f"{path} grew past {max_bytes:,} bytes while it was read")
            h.update(chunk)
    return h.hexdigest()


def parse_json_object(data: bytes, *, max_bytes: int = MAX_MANIFEST_BYTES) -> dict:
    """The JSON object ``data`` holds, or a ValueError in one line: too large, not UTF-8 JSON, nested past
    what the parser allows, or not an object."""
    if len(data) > max_bytes:
        raise ValueError(f"{len(data):,} bytes is more than such a document holds ({max_bytes:,})")
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("it nests deeper than any hepix document") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"it is not UTF-8 JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(doc, dict):
        raise ValueError("it is not a JSON object")
    return doc


def read_manifest(path: str | os.PathLike) -> dict:
    """A key directory's ``hepix-keys.json``, bounded and parsed (a KeyDirectoryError when it is malformed)."""
    data = read_bounded(path, MAX_MANIFEST_BYTES, what="a key directory's manifest")
    try:
        return parse_json_object(data)
    except ValueError as e:
        raise KeyDirectoryError(f"{path} is malformed: {e}") from None
