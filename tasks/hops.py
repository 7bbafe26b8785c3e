"""Where hepix's WebHDFS clients may connect: each request -- the first and every redirect -- checked before it is sent.

A WebHDFS name node answers a read or a write with a redirect to a data node, and hepix's clients follow
it: the ``hdfs`` package (the driver's key directories, :mod:`jobs.runtime.remote`) lets requests follow
it, fsspec's ``WebHDFS`` (the tables the Python workers and the driver read and write,
:mod:`tasks.filesystem`) asks with ``redirect=False`` and then requests the ``Location`` itself.  Both send
every request through a session from :func:`checked_session`, whose transport adapter checks the URL
against a :class:`HopPolicy` before it opens a connection (before even a name lookup).  The name node is
a machine of the cluster, which hepix does not trust: no value it sends chooses where the owner's
readers connect.

A request may go to:

* the WebHDFS endpoint's own host (``$HEPIX_WEBHDFS``, or the address the driver derived from the
  ``hdfs://`` URI or its Hadoop configuration);
* loopback (``localhost``, 127.0.0.0/8, ``::1``): the bytes stay on the machine;
* the hosts the operator lists in ``$HEPIX_WEBHDFS_HOSTS`` (:data:`HOSTS_ENV`), comma-separated: host
  names (``dn1.example.org``), addresses (``10.0.0.5``, ``fd00::5``), networks (``10.0.0.0/24``) and
  domains (``*.dn.example.org``: any name under it).  A real cluster's data nodes are other hosts than
  its name node: list them.

Nothing else.  Unset, the variable allows nothing more: the endpoint and loopback, all that a
one-machine HDFS (the tests' MiniDFSCluster) uses.  Host names are compared as written, never resolved.
A request for the owner's secret key (a file named as in :data:`hecore.schemes.SECRET_FILES`, or any
request of a session made with ``secret=True``) must besides be ``https://`` at every hop, or go to
loopback.  A refused request is a one-line :class:`HopRefused` naming the host and what to set.
"""
from __future__ import annotations

import functools
import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from hecore.errors import HepixError, KeyDirectoryError

#: The operator's list of the other hosts WebHDFS may send hepix to (a cluster's data nodes).
HOSTS_ENV = "HEPIX_WEBHDFS_HOSTS"

_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_FORMS = "host names, addresses, networks such as 10.0.0.0/24, or *.domain"


class HopRefused(HepixError):
    """A WebHDFS request (the first or a redirect) to a host, or by a scheme, the policy does not allow."""


class SecretHopRefused(HopRefused, KeyDirectoryError):
    """A hop of a secret key's transfer that is not private (plain http off loopback)."""


def _host(host: str | None) -> str:
    """``host`` as written, in lower case and without IPv6 brackets."""
    return (host or "").strip().lower().removeprefix("[").removesuffix("]")


def _name(host: str) -> str:
    """A host name as the policy compares names: without the trailing dot of an absolute name (an
    address keeps it: ``127.0.0.1.`` is no address)."""
    return host[:-1] if host.endswith(".") and _address(host[:-1]) is None else host


def _address(host: str):
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _hostname(name: str) -> bool:
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is written as this machine: ``localhost`` or a loopback address (never resolved)."""
    host = _host(host)
    if host == "localhost":
        return True
    ip = _address(host)
    return bool(ip and ip.is_loopback)


def parse_hosts(value: str | None) -> tuple[str, ...]:
    """The entries of a :data:`HOSTS_ENV` value, checked and normalised; a malformed one is a
    :class:`~hecore.errors.HepixError` naming it."""
    entries = []
    for raw in (value or "").split(","):
        entry = _name(_host(raw))
        if not entry:
            continue
        if _address(entry) is not None:
            entries.append(str(_address(entry)))
            continue
        if "/" in entry:
            try:
                entries.append(str(ipaddress.ip_network(entry, strict=False)))
                continue
            except ValueError:
                pass
        elif entry.startswith("*.") and _hostname(entry[2:]):
            entries.append(entry)
            continue
        elif _hostname(entry):
            entries.append(entry)
            continue
        raise HepixError(f"{HOSTS_ENV}: {raw.strip()!r} is not a host name, an address, a network or a *.domain; "
                         f"list the hosts WebHDFS may redirect to, comma-separated ({_FORMS})")
    return tuple(dict.fromkeys(entries))


def allowed_hosts() -> tuple[str, ...]:
    """This process's :data:`HOSTS_ENV`, parsed (:func:`parse_hosts`)."""
    return parse_hosts(os.environ.get(HOSTS_ENV))


@functools.cache
def _secret_files() -> frozenset[str]:
    from hecore.schemes import SECRET_FILES

    return frozenset(SECRET_FILES)


@dataclass(frozen=True)
class HopPolicy:
    """Where requests of one WebHDFS client may go: ``endpoint`` (its address, or several separated by
    ``;`` as the ``hdfs`` package takes them), loopback, ``hosts`` (:func:`parse_hosts`'s entries); with
    ``secret`` every hop must also be https or loopback."""

    endpoint: str
    hosts: tuple[str, ...] = ()
    secret: bool = False

    @functools.cached_property
    def endpoint_hosts(self) -> frozenset[str]:
        return frozenset(_name(_host(urlsplit(u.strip()).hostname)) for u in self.endpoint.split(";") if u.strip())

    def allows(self, host: str | None) -> bool:
        """Whether a request may go to ``host`` (a URL's host, as written)."""
        host = _host(host)
        if not host:
            return False
        if is_loopback(host):
            return True
        host = _name(host)
        if host in self.endpoint_hosts:
            return True
        ip = _address(host)
        for entry in self.hosts:
            if entry.startswith("*."):
                if ip is None and host.endswith(entry[1:]):
                    return True
            elif "/" in entry:
                if ip is not None and ip in ipaddress.ip_network(entry):
                    return True
            elif (str(ip) if ip is not None else host) == entry:
                return True
        return False

    def check(self, url: str) -> None:
        """Raise :class:`HopRefused` unless a request to ``url`` may be sent (before anything connects)."""
        from urllib3.util import parse_url

        try:
            parsed = urlsplit(url)
            scheme, host, port, path = parsed.scheme.lower(), _host(parsed.hostname), parsed.port, parsed.path
            other = _host(parse_url(url).host)     # how urllib3 reads it
        except ValueError:                         # urllib3's LocationParseError is one too
            raise HopRefused(f"refused a WebHDFS request to {url[:100]!r}: not an http(s) URL hepix can check; "
                             "the name node redirected hepix somewhere no WebHDFS address is") from None
        where = f"{scheme}://{host}" + (f":{port}" if port else "")
        if scheme not in ("http", "https"):
            raise HopRefused(f"refused a WebHDFS request to {where}: hepix's WebHDFS clients go to http:// and "
                             "https:// addresses only")
        if other != host:
            raise HopRefused(f"refused a WebHDFS request to host {host!r} or {other!r} ({scheme}://...): its "
                             "URL names one host or the other depending on the parser; a WebHDFS address names one")
        if not self.allows(host):
            raise HopRefused(
                f"refused a WebHDFS request to host {host!r} ({where}): it is neither the WebHDFS endpoint's "
                f"host ({', '.join(sorted(self.endpoint_hosts))}), loopback, nor listed in {HOSTS_ENV}; if it is "
                f"one of your cluster's data nodes, add it to {HOSTS_ENV} (comma-separated {_FORMS})")
        secret = self.secret or unquote(path).rstrip("/").rsplit("/", 1)[-1] in _secret_files()
        if secret and scheme != "https" and not is_loopback(host):
            raise SecretHopRefused(
                f"refused to fetch the secret key from {where}: every hop of its transfer, the name node's "
                "redirects included, must be https:// or loopback, and this one is plain http to another host; "
                "serve WebHDFS over https on the name node and the data nodes (dfs.http.policy HTTPS_ONLY), or "
                "copy the key directory to the owner's machine")


@functools.cache
def _adapter_class():
    from requests.adapters import HTTPAdapter

    class CheckedAdapter(HTTPAdapter):
        """requests' adapter, checking every request's URL against ``policy`` before it connects."""

        def __init__(self, policy: HopPolicy):
            super().__init__()
            self.policy = policy

        def send(self, request, *args, **kwargs):
            self.policy.check(request.url)
            return super().send(request, *args, **kwargs)

    return CheckedAdapter


def checked_session(policy: HopPolicy, session=None):
    """``session`` (a new ``requests.Session`` when None) with every URL prefix served by a transport
    adapter that checks each request against ``policy`` before sending it -- the first request and every
    redirect, whether requests follows it or the client requests the ``Location`` itself."""
    import requests

    session = session if session is not None else requests.Session()
    for prefix in list(session.adapters):
        session.adapters.pop(prefix).close()
    adapter = _adapter_class()(policy)
    for prefix in ("https://", "http://", ""):      # "": any other scheme reaches the check, and is refused
        session.mount(prefix, adapter)
    session.hop_policy = policy
    return session
