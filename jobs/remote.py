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
"""
from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import tempfile
from urllib.parse import urlparse

from hecore.errors import HepixError

WEBHDFS_ENV = "HEPIX_WEBHDFS"
DEFAULT_HTTP_PORT = 9870


def is_hdfs(path: str | os.PathLike) -> bool:
    return str(path).startswith("hdfs://")


def client(uri: str):
    """A WebHDFS client for the name node of ``uri`` and the path inside it."""
    from hdfs import InsecureClient

    parsed = urlparse(uri)
    url = os.environ.get(WEBHDFS_ENV) or f"http://{parsed.hostname or 'localhost'}:{DEFAULT_HTTP_PORT}"
    user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    return InsecureClient(url, user=user), parsed.path or "/"


def list_names(uri: str) -> list[str]:
    from hdfs.util import HdfsError

    c, path = client(uri)
    try:
        return c.list(path)
    except HdfsError as e:
        raise HepixError(f"cannot list {uri} over WebHDFS ({c.url}): {str(e).splitlines()[0]}") from None


def read_text(uri: str) -> str:
    c, path = client(uri)
    with c.read(path, encoding="utf-8") as f:
        return f.read()


@contextlib.contextmanager
def remote_keys(keys: str | os.PathLike, *, secret: bool = False):
    """``keys`` as a local directory: itself when local; an ``hdfs://`` one copied to a private
    temporary directory (without ``secret.key`` unless ``secret``), deleted afterwards."""
    from hecore.keys import SECRET

    if not is_hdfs(keys):
        yield keys
        return
    uri = str(keys).rstrip("/")
    names = list_names(uri)
    c, path = client(uri)
    local = tempfile.mkdtemp(prefix="hepix-keys-")           # 0700
    try:
        for name in names:
            if name == SECRET and not secret:
                continue                                   # the processing side never copies it
            target = os.path.join(local, name)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if name == SECRET else 0o644)
            with os.fdopen(fd, "wb") as out, c.read(f"{path.rstrip('/')}/{name}") as src:
                shutil.copyfileobj(src, out)
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)
