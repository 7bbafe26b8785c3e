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

Every request, the first and each redirect the name node answers with, is checked before it connects
(:mod:`tasks.hops`): to the WebHDFS address's host, loopback, or a host listed in
``$HEPIX_WEBHDFS_HOSTS``, and for the secret key over https (or loopback) at every hop.  Of the names the
name node lists, only the files a key directory holds (:func:`key_file_names`) are copied, each under its
own name in the temporary directory; a listed name that is not a file name stops the job.
"""
from __future__ import annotations

import contextlib
import getpass
import logging
import os
import shutil
import tempfile
from urllib.parse import urlparse

from hecore.errors import HepixError, KeyDirectoryError
from tasks.hops import HopPolicy, allowed_hosts, checked_session, is_loopback

WEBHDFS_ENV = "HEPIX_WEBHDFS"
DEFAULT_HTTP_PORT = 9870

log = logging.getLogger(__name__)


def is_hdfs(path: str | os.PathLike) -> bool:
    return str(path).startswith("hdfs://")


def client(uri: str, *, secret: bool = False):
    """A WebHDFS client for the name node of ``uri`` and the path inside it.  Its session checks every
    request, the first and each redirect, before it connects (:mod:`tasks.hops`): the WebHDFS address's
    host, loopback and ``$HEPIX_WEBHDFS_HOSTS`` only; with ``secret`` (the secret key's transfer), each
    hop https or loopback too."""
    from hdfs import InsecureClient

    parsed = urlparse(uri)
    url = os.environ.get(WEBHDFS_ENV) or f"http://{parsed.hostname or 'localhost'}:{DEFAULT_HTTP_PORT}"
    session = checked_session(HopPolicy(url, allowed_hosts(), secret=secret))
    return InsecureClient(url, user=hdfs_user(), session=session), parsed.path or "/"


def hdfs_user() -> str:
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def list_names(uri: str) -> list[str]:
    from hdfs.util import HdfsError

    c, path = client(uri)
    try:
        return c.list(path)
    except HdfsError as e:
        raise HepixError(f"cannot list {uri} over WebHDFS ({c.url}): {str(e).splitlines()[0]}") from None


def key_file_names() -> frozenset[str]:
    """The names of the files a key directory of any scheme holds (:mod:`hecore.seal.keys`,
    :mod:`hecore.tfhe.keys`): all that :func:`remote_keys` copies."""
    from hecore.schemes import SECRET_FILES
    from hecore.seal import keys as seal_keys
    from hecore.tfhe import keys as tfhe_keys

    return frozenset({seal_keys.MANIFEST, *seal_keys.PUBLIC_FILES, tfhe_keys.SERVER, tfhe_keys.PUBLIC,
                      *SECRET_FILES})


def _file_name(name) -> bool:
    """Whether a listed name is one file name (names no other path)."""
    return (isinstance(name, str) and name not in ("", ".", "..")
            and not any(c in name for c in ("/", "\\", "\0")))


def check_secret_transfer(c, path: str, uri: str) -> None:
    """Refuse to fetch ``path`` (the secret key) unless the channel is private and HDFS guards the file."""
    urls = [urlparse(u) for u in str(c.url).split(";") if u]
    if not urls or any(url.scheme != "https" and not is_loopback(url.hostname) for url in urls):
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
    for name in names:
        if not _file_name(name):
            raise KeyDirectoryError(
                f"{uri}: WebHDFS listed {name!r}, which is not a file name, in the key directory; hepix copies "
                f"key files by their own names only -- check that {WEBHDFS_ENV} is your name node's address")
    known = key_file_names()
    for name in sorted(set(names) - known):
        log.warning("%s: not copying %r, which is not a file of a hepix key directory", uri, name)
    c, path = client(uri)
    local = tempfile.mkdtemp(prefix="hepix-keys-")           # 0700
    try:
        for name in sorted(set(names) & known):
            if name in SECRET_FILES and not secret:
                continue                                   # the processing side never copies it
            src_client = c
            if name in SECRET_FILES:
                src_client, _ = client(uri, secret=True)   # every hop https or loopback
                check_secret_transfer(src_client, f"{path.rstrip('/')}/{name}", f"{uri}/{name}")
            target = os.path.join(local, name)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if name in SECRET_FILES else 0o644)
            with os.fdopen(fd, "wb") as out, src_client.read(f"{path.rstrip('/')}/{name}") as src:
                shutil.copyfileobj(src, out)
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)


def file_access(path: str, http_address: str | None = None):
    """How the Python workers reach ``path`` (:class:`tasks.filesystem.FileAccess`): locally, or for
    ``hdfs://`` over the name node's WebHDFS endpoint -- ``$HEPIX_WEBHDFS``, else ``http_address`` (the
    driver's Hadoop configuration's ``dfs.namenode.http-address``, a wildcard host replaced by the URI's),
    else port 9870 of the URI's host -- as :func:`hdfs_user`, with this process's ``$HEPIX_WEBHDFS_HOSTS``
    (the other hosts its redirects may name; :mod:`tasks.hops`).  Another scheme is a clear error: the
    workers cannot reach it."""
    from tasks.filesystem import FileAccess

    if is_hdfs(path):
        host = urlparse(str(path)).hostname or "localhost"
        endpoint = os.environ.get(WEBHDFS_ENV)
        if not endpoint and http_address:
            at_host, _, port = http_address.rpartition(":")
            endpoint = f"http://{host if at_host in ('', '0.0.0.0') else at_host}:{port}"
        return FileAccess(webhdfs=endpoint or f"http://{host}:{DEFAULT_HTTP_PORT}", user=hdfs_user(),
                          hosts=allowed_hosts())
    if "://" in str(path) and not str(path).startswith("file:"):
        raise HepixError(f"{path}: hepix's workers read and write local paths, file:// (a mount every worker "
                         "shares) and hdfs://; copy the data to one of those")
    return FileAccess()
