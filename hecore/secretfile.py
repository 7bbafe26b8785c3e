"""Owner-only files: how every secret key is written and read (``secret.key``, TFHE's ``client.key``).

One discipline for every secret the data owner keeps on disk:

* :func:`make_private_directory` creates a key directory with mode 0700 (exactly, whatever the umask);
* :func:`write_private` creates a file with its final mode from the start (0600 for a secret: there is
  no moment where it is readable by others), refusing to follow a symbolic link or to replace a file;
* :func:`read_owner_only` opens with ``O_NOFOLLOW`` and checks the open descriptor (``fstat``): a
  regular file, no permission for group or others, owned by this user.  The file that was checked is
  the file that is read, whatever happens to the path in between.

Errors name the file and the way out (``chmod 600``, replace the link, use your own directory).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import KeyDirectoryError, SecretKeyMissing

__all__ = ["make_private_directory", "read_owner_only", "write_private"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def make_private_directory(path: str | os.PathLike) -> Path:
    """``path`` created (with its parents) and set to mode 0700: only its owner may list or enter it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)           # mkdir's mode is narrowed by the umask, and an existing directory kept its own
    return path


def write_private(path: str | os.PathLike, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data`` with ``mode`` from the start (no window where it is readable by
    others).  Refuses an existing file or a symbolic link at ``path`` (``O_EXCL | O_NOFOLLOW``); a
    failed write leaves no file behind."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    os.chmod(path, mode)            # the umask may have narrowed it; make it exactly ``mode``


def read_owner_only(path: str | os.PathLike, *, what: str, missing: str) -> bytes:
    """The bytes of a secret file, read only if it is safe to trust: refuses a missing file
    (:class:`~hecore.errors.SecretKeyMissing` with the message ``missing``), a symbolic link, anything
    but a regular file, a file that group or others may read, and one owned by another user
    (:class:`~hecore.errors.KeyDirectoryError`).  ``what`` names the secret in the messages
    (``"the secret key"``, ``"the client key"``).

    The checks and the read use one file descriptor (opened with ``O_NOFOLLOW``, then ``fstat``).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        raise SecretKeyMissing(missing) from None
    except OSError as e:
        if path.is_symlink():
            raise KeyDirectoryError(
                f"{path} is a symbolic link: {what} must be a regular file in the key directory "
                f"(replace the link with the file itself, mode 0600)"
            ) from None
        raise KeyDirectoryError(f"{path} cannot be opened: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyDirectoryError(f"{path} is not a regular file; {what} must be one (mode 0600)")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise KeyDirectoryError(
                f"{path} has mode {mode:04o}: {what} is readable by other users; "
                f"run `chmod 600 {path}` (and check who may have read it)"
            )
        if st.st_uid != os.geteuid():
            raise KeyDirectoryError(
                f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}): another user "
                f"controls {what}; use a key directory of your own (`chown` it if it is yours)"
            )
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
