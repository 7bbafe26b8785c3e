"""The file systems the Python workers read and write a run's Parquet files on, with pyarrow.

Every job's ciphertexts go between the storage and the Python workers without passing through the JVM:
the workers open their input split and write their output file themselves, on whatever deployment runs
them.  :class:`FileAccess` says how a task reaches a run's paths; the driver builds it once
(:func:`jobs.runtime.remote.file_access`) and ships it inside the task's closure, so a worker needs no
Hadoop configuration of its own:

* local paths and ``file://`` -- pyarrow's ``LocalFileSystem`` (on a cluster: a mount the driver and
  every worker share, which the driver checks after every write);
* ``hdfs://`` -- fsspec's WebHDFS client behind pyarrow's ``PyFileSystem``.  pyarrow's own
  ``HadoopFileSystem`` needs libhdfs and a Hadoop installation on every worker (a JNI client inside each
  Python worker); WebHDFS needs only HTTP to the name node and data nodes, the same endpoint hepix's key
  directories already use, and reads ranges (a row group) without fetching the whole file.  Its session
  checks every request -- to the name node, and to the data node each answer redirects to -- before it
  connects (:mod:`tasks.hops`): the endpoint's host, loopback and the hosts of :attr:`FileAccess.hosts`
  (the driver's ``$HEPIX_WEBHDFS_HOSTS``) only.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass(frozen=True)
class FileAccess:
    """How a task reaches paths: locally (``webhdfs`` None), or an HDFS name node's WebHDFS endpoint
    (``http(s)://host:port``) as ``user``, its redirects followed only to the endpoint's host, loopback
    and ``hosts`` (:func:`tasks.hops.parse_hosts` entries: the data nodes)."""

    webhdfs: str | None = None
    user: str | None = None
    hosts: tuple[str, ...] = ()

    def open(self, uri: str):
        """``(pyarrow file system, path inside it)`` for ``uri`` (a local path, ``file:`` or ``hdfs://``)."""
        import pyarrow.fs as pafs

        if uri.startswith("hdfs://"):
            if self.webhdfs is None:
                raise ValueError(f"{uri}: no WebHDFS endpoint was given for hdfs:// paths")
            return _webhdfs(self.webhdfs, self.user, tuple(self.hosts)), urlparse(uri).path or "/"
        if "://" in uri and not uri.startswith("file:"):
            raise ValueError(f"{uri}: the workers read and write local, file:// and hdfs:// paths only")
        return pafs.LocalFileSystem(), local_path(uri)


def local_path(uri: str) -> str:
    """The local path of a plain path or a ``file:`` URI (``file:///x``, ``file:/x``)."""
    import os

    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif uri.startswith("file:"):
        uri = uri[len("file:"):]
    return os.path.abspath(uri)


@functools.lru_cache(maxsize=4)
def _webhdfs(endpoint: str, user: str | None, hosts: tuple[str, ...] = ()):
    """One pyarrow file system per endpoint, user and allowed hosts in a worker process (its HTTP session
    is reused).  fsspec's client sends every request through its ``session``, the ``Location`` of an
    ``OPEN``/``CREATE``/``APPEND`` answer included: that session checks each one (:mod:`tasks.hops`)."""
    import pyarrow.fs as pafs
    from fsspec.implementations.webhdfs import WebHDFS

    from .hops import HopPolicy, checked_session

    u, https = urlparse(endpoint), endpoint.startswith("https://")
    fs = WebHDFS(u.hostname, port=u.port or (443 if https else 80), user=user, use_https=https,
                 skip_instance_cache=True)
    checked_session(HopPolicy(endpoint, hosts), fs.session)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))
