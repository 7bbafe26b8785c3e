"""hdfs:// from the Python side: key directories over WebHDFS, with the maintained `hdfs` client.

Spark reads and writes the tables on ``hdfs://`` itself (its bundled Hadoop
client); the driver's Python code needs HDFS for what it reads with plain
file I/O -- the key directory.  A key directory given as ``hdfs://host:port/dir``
is listed and copied over WebHDFS into a private temporary directory (0700,
``secret.key`` 0600) for the life of the job, then deleted.  The WebHDFS
address is ``$HEPIX_WEBHDFS`` (for example ``http://namenode:9870``), by
default port 9870 on the URI's host; the user is ``$HADOOP_USER_NAME`` or the
login name (simple authentication; a Kerberos cluster needs the
``hdfs[kerberos]`` client, not wired here).

``secret.key`` is fetched only for the owner's own jobs (``decrypt``, ``encrypt --encryption
symmetric``), and only when it is safe to: the WebHDFS address is ``https://`` (or a loopback address,
where the bytes never leave the machine), and HDFS says the file is owned by the user hepix reads as
and that group and others have no permission on it.  Otherwise the job stops with a
:class:`~hecore.errors.KeyDirectoryError` saying what to change.
"""
from __future__ import annotations

import contextlib
import getpass
import ipaddress
import os
import shutil
import tempfile
from urllib.parse import urlparse

from hecore.errors import HepixError, KeyDirectoryError

WEBHDFS_ENV = "HEPIX_WEBHDFS"
DEFAULT_HTTP_PORT = 9870


def is_hdfs(path: str | os.PathLike) -> bool:
    return str(path).startswith("hdfs://")


def client(uri: str):
    """A WebHDFS client for the name node of ``uri`` and the path inside it."""
    from hdfs import InsecureClient

    parsed = urlparse(uri)
    url = os.environ.get(WEBHDFS_ENV) or f"http://{parsed.hostname or 'localhost'}:{DEFAULT_HTTP_PORT}"
    return InsecureClient(url, user=hdfs_user()), parsed.path or "/"


def hdfs_user() -> str:
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def list_names(uri: str) -> list[str]:
    from hdfs.util import HdfsError

    c, path = client(uri)
    try:
        return c.list(path)
    except HdfsError as e:
        raise HepixError(f"cannot list {uri} over WebHDFS ({c.url}): {str(e).splitlines()[0]}") from None


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_secret_transfer(c, path: str, uri: str) -> None:
    """Refuse to fetch ``path`` (the secret key) unless the channel is private and HDFS guards the file."""
    url = urlparse(c.url)
    if url.scheme != "https" and not _loopback(url.hostname):
        raise KeyDirectoryError(
            f"{uri}: the secret key would cross the network in clear over {c.url}; set {WEBHDFS_ENV} to the "
            "name node's https:// (swebhdfs) address, or copy the key directory to the owner's machine")
    from hdfs.util import HdfsError

    try:
        status = c.status(path)
    except HdfsError as e:
        raise KeyDirectoryError(f"cannot read the status of {uri} over WebHDFS: {str(e).splitlines()[0]}") from None
    if status.get("type") != "FILE":
        raise KeyDirectoryError(f"{uri} is not a file; the secret key must be one")
    try:
        mode = int(str(status.get("permission", "777")), 8)
    except ValueError:
        mode = 0o777
    if mode & 0o077:
        raise KeyDirectoryError(
            f"{uri} has HDFS permission {mode:03o}: other HDFS users can read the secret key; run "
            f"`hdfs dfs -chmod 600 {urlparse(uri).path}` (and check who may have read it)")
    user = hdfs_user()
    if status.get("owner") != user:
        raise KeyDirectoryError(
            f"{uri} is owned by HDFS user {status.get('owner')!r}, not by {user!r}, the user hepix reads as: "
            "another user controls the secret key")


def read_text(uri: str) -> str:
    c, path = client(uri)
    with c.read(path, encoding="utf-8") as f:
        return f.read()


@contextlib.contextmanager
def remote_keys(keys: str | os.PathLike, *, secret: bool = False):
    """``keys`` as a local directory: itself when local; an ``hdfs://`` one copied to a private
    temporary directory (without ``secret.key`` or TFHE's ``client.key`` unless ``secret``), deleted afterwards."""
    from hecore.schemes import SECRET_FILES

    if not is_hdfs(keys):
        yield keys
        return
    uri = str(keys).rstrip("/")
    names = list_names(uri)
    c, path = client(uri)
    local = tempfile.mkdtemp(prefix="hepix-keys-")           # 0700
    try:
        for name in names:
            if name in SECRET_FILES and not secret:
                continue                                   # the processing side never copies it
            if name in SECRET_FILES:
                check_secret_transfer(c, f"{path.rstrip('/')}/{name}", f"{uri}/{name}")
            target = os.path.join(local, name)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if name in SECRET_FILES else 0o644)
            with os.fdopen(fd, "wb") as out, c.read(f"{path.rstrip('/')}/{name}") as src:
                shutil.copyfileobj(src, out)
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)


def file_access(path: str, http_address: str | None = None):
    """How the Python workers reach ``path`` (:class:`tasks.filesystem.FileAccess`): locally, or for
    ``hdfs://`` over the name node's WebHDFS endpoint -- ``$HEPIX_WEBHDFS``, else ``http_address`` (the
    driver's Hadoop configuration's ``dfs.namenode.http-address``, a wildcard host replaced by the URI's),
    else port 9870 of the URI's host -- as :func:`hdfs_user`.  Another scheme is a clear error: the workers
    cannot reach it."""
    from tasks.filesystem import FileAccess

    if is_hdfs(path):
        host = urlparse(str(path)).hostname or "localhost"
        endpoint = os.environ.get(WEBHDFS_ENV)
        if not endpoint and http_address:
            at_host, _, port = http_address.rpartition(":")
            endpoint = f"http://{host if at_host in ('', '0.0.0.0') else at_host}:{port}"
        return FileAccess(webhdfs=endpoint or f"http://{host}:{DEFAULT_HTTP_PORT}", user=hdfs_user())
    if "://" in str(path) and not str(path).startswith("file:"):
        raise HepixError(f"{path}: hepix's workers read and write local paths, file:// (a mount every worker "
                         "shares) and hdfs://; copy the data to one of those")
    return FileAccess()
