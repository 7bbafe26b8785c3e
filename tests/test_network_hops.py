"""Every WebHDFS request hepix sends -- the first and each redirect -- is checked before it connects (tasks/hops.py).

A fake WebHDFS name node on loopback (http.server in a thread) lists a key directory and a table, and answers
``OPEN`` and ``CREATE`` with a 307 to a location the test chooses: by default itself as a data node under
the name ``localhost``, or a host the policy must refuse.  Nothing leaves loopback: a Python audit hook
blocks (and records) every ``socket.connect`` and name lookup of a host that is not loopback while a test of
this file runs, so "refused before connecting" is checked, not assumed.  The refused hosts are names that
cannot resolve (``.invalid``) and addresses reserved for documentation (198.51.100.0/24, 203.0.113.0/24,
2001:db8::/32), besides Hypothesis's own.
"""
from __future__ import annotations

import getpass
import ipaddress
import json
import logging
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.provisional import domains

from hecore.errors import HepixError, KeyDirectoryError
from jobs.runtime import remote
from tasks.hops import HOSTS_ENV, HopPolicy, HopRefused, SecretHopRefused, parse_hosts

pytestmark = pytest.mark.seconds(20)

KEYS = "/owner/keys"
KEY_FILES = {"hepix-keys.json": b'{"format": 1}', "context.bin": b"context", "public.key": b"public",
             "secret.key": b"the owner's secret"}


# --- nothing leaves loopback --------------------------------------------------------------------------

class OffLoopback(Exception):
    """What the audit hook raises for a connection or a name lookup off loopback (not an OSError: no
    client mistakes it for a network failure and retries elsewhere)."""


_attempts: list | None = None         # armed: where this file's tests tried to go off loopback


def _loopback(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _audit(event: str, args: tuple) -> None:
    if _attempts is None or not event.startswith("socket."):
        return
    if event in ("socket.connect", "socket.sendto"):
        address = args[-1]
        if not isinstance(address, tuple) or not address:     # AF_UNIX and the like: not the network
            return
        host = address[0]
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
        host = args[0]
    else:
        return
    if not _loopback(host):
        _attempts.append((event, host))
        raise OffLoopback(f"{event} {host!r}: off loopback, blocked by the test")


_hooked: list = []


@pytest.fixture(autouse=True)
def off_loopback(monkeypatch):
    """The list of attempts to reach a host off loopback (blocked) during the test; the policy's variables
    cleared.  The audit hook (which cannot be removed) is added by the first test that runs, so a process
    that only collects this file does not carry it."""
    global _attempts
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked.append(True)
    monkeypatch.delenv(HOSTS_ENV, raising=False)
    monkeypatch.setenv("HADOOP_USER_NAME", getpass.getuser())
    _attempts = []
    try:
        yield _attempts
    finally:
        _attempts = None


def test_the_guard_blocks_and_records_what_would_leave_loopback(off_loopback):
    """The tests' "nothing connected" means something: a lookup or a connect off loopback is caught."""
    import socket

    with pytest.raises(OffLoopback):
        socket.getaddrinfo("x.invalid", 80)
    with socket.socket() as s, pytest.raises(OffLoopback):
        s.connect(("203.0.113.1", 9))
    assert off_loopback == [("socket.getaddrinfo", "x.invalid"), ("socket.connect", "203.0.113.1")]
    off_loopback.clear()
    socket.getaddrinfo("localhost", 80)
    assert off_loopback == []


# --- a WebHDFS name node on loopback ------------------------------------------------------------------

class NameNode:
    """A WebHDFS name node (and, under the name ``localhost``, its data node) on 127.0.0.1.

    ``files`` maps HDFS paths to bytes; ``listing`` replaces a directory's listed names; ``redirects`` maps
    an op, or ``(op, path)``, to the ``Location`` of a 307 (``OPEN``, ``CREATE`` and ``APPEND`` go to
    ``data_host`` by default, as a name node sends them to a data node); ``seen`` records ``(method, op,
    path, data node?)`` of every request it got."""

    def __init__(self, files: dict[str, bytes] | None = None):
        self.files = dict(files or {})
        self.listing: dict[str, list[str]] = {}
        self.redirects: dict = {}
        self.data_host = "localhost"
        self.seen: list[tuple[str, str, str, bool]] = []
        node = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                node.answer(self)

            do_PUT = do_POST = do_DELETE = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def data_requests(self, path: str | None = None) -> list:
        """The requests it got as a data node (of ``path``)."""
        return [s for s in self.seen if s[3] and path in (None, s[2])]

    @staticmethod
    def send(h, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        h.send_response(code)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def status(self, path: str, name: str = "") -> dict | None:
        base = {"pathSuffix": name, "owner": getpass.getuser(), "group": "hepix", "modificationTime": 0,
                "accessTime": 0, "blockSize": 1 << 27, "replication": 1}
        if path in self.files:
            secret = path.rsplit("/", 1)[-1] in ("secret.key", "client.key")
            return {**base, "type": "FILE", "length": len(self.files[path]), "permission": "600" if secret else "644"}
        if path == "/" or any(f.startswith(path.rstrip("/") + "/") for f in self.files):
            return {**base, "type": "DIRECTORY", "length": 0, "permission": "755"}
        return None

    def answer(self, h) -> None:
        u = urlsplit(h.path)
        q = dict(parse_qsl(u.query))
        op, data_node = q.get("op", "").upper(), q.get("datanode") == "true"
        path = unquote(u.path.removeprefix("/webhdfs/v1")) or "/"
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        self.seen.append((h.command, op, path, data_node))
        missing = json.dumps({"RemoteException": {"exception": "FileNotFoundException",
                                                  "message": f"File does not exist: {path}"}}).encode()
        if data_node:
            if op == "OPEN":
                if path not in self.files:
                    return self.send(h, 404, missing)
                start = int(q.get("offset", 0))
                end = start + int(q["length"]) if "length" in q else None
                return self.send(h, 200, self.files[path][start:end])
            if op == "CREATE":
                self.files[path] = body
                return self.send(h, 201)
            if op == "APPEND":
                self.files[path] = self.files.get(path, b"") + body
                return self.send(h, 200)
            return self.send(h, 400)
        location = self.redirects.get((op, path)) or self.redirects.get(op)
        if location is None and op in ("OPEN", "CREATE", "APPEND"):
            location = f"http://{self.data_host}:{self.port}{u.path}?{u.query}&datanode=true"
        if location is not None:
            return self.send(h, 307, headers={"Location": location})
        if op == "GETFILESTATUS":
            status = self.status(path)
            return self.send(h, 200, json.dumps({"FileStatus": status}).encode()) if status else \
                self.send(h, 404, missing)
        if op == "LISTSTATUS":
            prefix = path.rstrip("/") + "/"
            names = self.listing.get(path) or sorted({f[len(prefix):].split("/", 1)[0]
                                                     for f in self.files if f.startswith(prefix)})
            statuses = [self.status(prefix + n, n) or {"pathSuffix": n, "type": "FILE", "length": 0,
                                                       "owner": getpass.getuser(), "permission": "644"}
                        for n in names]
            return self.send(h, 200, json.dumps({"FileStatuses": {"FileStatus": statuses}}).encode())
        if op in ("MKDIRS", "DELETE"):
            return self.send(h, 200, b'{"boolean": true}')
        if op == "RENAME":
            self.files[q["destination"]] = self.files.pop(path)
            return self.send(h, 200, b'{"boolean": true}')
        return self.send(h, 400)


@pytest.fixture
def namenode(monkeypatch):
    nn = NameNode({f"{KEYS}/{name}": data for name, data in KEY_FILES.items()})
    monkeypatch.setenv("HEPIX_WEBHDFS", nn.url)
    yield nn
    nn.close()


def keys_uri(nn: NameNode) -> str:
    return f"hdfs://127.0.0.1:{nn.port}{KEYS}"


def location(host: str, path: str = f"{KEYS}/secret.key", scheme: str = "http", port: int = 1022) -> str:
    return f"{scheme}://{host}:{port}/webhdfs/v1{path}?op=OPEN&namenoderpcaddress=nn:8020&offset=0"


# --- the owner's key directory (the hdfs package) -----------------------------------------------------

def test_an_honest_name_node_and_its_loopback_data_node_serve_the_owners_keys(namenode, off_loopback):
    with remote.remote_keys(keys_uri(namenode), secret=True) as local:
        assert {p.name: p.read_bytes() for p in Path(local).iterdir()} == KEY_FILES
    assert ("GET", "OPEN", f"{KEYS}/secret.key", True) in namenode.seen     # it did go through the data node
    assert off_loopback == []


@pytest.mark.parametrize("listed", [False, True])
def test_the_secret_key_redirected_to_plain_http_off_loopback_is_refused_before_connecting(
        namenode, off_loopback, monkeypatch, listed):
    """The name node is loopback (so the endpoint check passes); its answer to ``OPEN secret.key`` names a
    plain-http data node elsewhere -- refused even when the operator lists that host."""
    if listed:
        monkeypatch.setenv(HOSTS_ENV, "203.0.113.7")
    namenode.redirects[("OPEN", f"{KEYS}/secret.key")] = location("203.0.113.7")
    with pytest.raises(HopRefused) as e:
        with remote.remote_keys(keys_uri(namenode), secret=True):
            pass
    message = str(e.value)
    assert "\n" not in message and "203.0.113.7" in message
    if listed:
        assert isinstance(e.value, SecretHopRefused) and isinstance(e.value, KeyDirectoryError)
        assert "https" in message
    else:
        assert HOSTS_ENV in message
    assert off_loopback == [] and namenode.data_requests(f"{KEYS}/secret.key") == []


def test_the_secret_key_redirected_to_an_https_host_not_listed_is_refused(namenode, off_loopback):
    namenode.redirects[("OPEN", f"{KEYS}/secret.key")] = location("dn7.cluster.invalid", scheme="https", port=9865)
    with pytest.raises(HopRefused, match=rf"host 'dn7\.cluster\.invalid'.*{HOSTS_ENV}"):
        with remote.remote_keys(keys_uri(namenode), secret=True):
            pass
    assert off_loopback == []


def test_decrypt_with_an_hdfs_key_directory_stops_in_one_line_naming_the_host_and_the_variable(
        namenode, off_loopback, tmp_path, capsys):
    from jobs.cli import main

    namenode.redirects[("OPEN", f"{KEYS}/secret.key")] = location("dn.x.invalid")
    code = main(["decrypt", "--keys", keys_uri(namenode), "--input", str(tmp_path / "run"),
                 "--out", str(tmp_path / "dec")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "HopRefused" in err and "'dn.x.invalid'" in err and HOSTS_ENV in err
    assert off_loopback == [] and not (tmp_path / "dec").exists()


@pytest.mark.parametrize("name", ["hepix-keys.json", "public.key"])
def test_a_public_key_file_redirected_to_a_host_not_allowed_is_refused(namenode, off_loopback, name):
    namenode.redirects[("OPEN", f"{KEYS}/{name}")] = location("198.51.100.20", f"{KEYS}/{name}", port=9864)
    with pytest.raises(HopRefused, match=r"host '198\.51\.100\.20'"):
        with remote.remote_keys(keys_uri(namenode)):         # the processing side's copy: no secret
            pass
    assert off_loopback == []


@pytest.mark.parametrize("op", ["LISTSTATUS", "GETFILESTATUS"])
def test_any_answer_of_the_name_node_redirected_off_the_allowed_hosts_is_refused(namenode, off_loopback, op):
    """Not only OPEN: requests follows a 307 to any request, and the same session checks it."""
    namenode.redirects[op] = f"http://x.invalid:9870/webhdfs/v1{KEYS}?op={op}"
    with pytest.raises(HopRefused, match=r"host 'x\.invalid'"):
        with remote.remote_keys(keys_uri(namenode), secret=True):
            pass
    assert off_loopback == []


@pytest.fixture
def hosts_file(monkeypatch):
    """Names under ``.hops.test`` resolve to 127.0.0.1 (as a cluster's data nodes resolve in its DNS)."""
    import socket

    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        return real("127.0.0.1" if str(name).endswith(".hops.test") else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("listed,data_host", [("dn1.hops.test", "dn1.hops.test"),
                                              ("nn.example.org, *.hops.test", "dn7.rack2.hops.test")])
def test_a_data_node_the_operator_lists_is_followed_and_one_not_listed_is_not(
        namenode, off_loopback, hosts_file, monkeypatch, listed, data_host):
    """A real cluster's data nodes are other hosts than its name node: listed in the variable, a redirect
    to one is followed -- for the workers' tables and the keys alike."""
    namenode.data_host = data_host
    namenode.files["/run/part.parquet"] = table_bytes()
    uri = f"hdfs://127.0.0.1:{namenode.port}/run/part.parquet"
    with pytest.raises(HopRefused, match=re.escape(repr(data_host))):
        with remote.remote_keys(keys_uri(namenode)):
            pass
    monkeypatch.setenv(HOSTS_ENV, listed)
    with remote.remote_keys(keys_uri(namenode)) as local:
        assert (Path(local) / "public.key").read_bytes() == KEY_FILES["public.key"]
    fs, path = remote.file_access(uri).open(uri)
    with fs.open_input_file(path) as f:
        assert pq.read_table(f).num_rows == 2
    with pytest.raises(SecretHopRefused):            # listed, but plain http: not for the secret key
        with remote.remote_keys(keys_uri(namenode), secret=True):
            pass
    assert off_loopback == []


@pytest.mark.parametrize("name", ["../evil", "../../evil", "a/b", "..", "{tmp}/abs-evil", "x\\..\\evil"])
def test_a_listed_name_that_is_a_path_writes_nothing_outside_the_temporary_directory(
        namenode, off_loopback, tmp_path, monkeypatch, name):
    work = tmp_path / "tmp" / "deep"
    work.mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(work))
    name = name.format(tmp=tmp_path)              # an absolute path: inside the test's own directory
    namenode.listing[KEYS] = ["hepix-keys.json", name, "public.key"]
    namenode.files["/owner/evil"] = namenode.files["/evil"] = b"planted"
    with pytest.raises(KeyDirectoryError, match="not a file name") as e:
        with remote.remote_keys(keys_uri(namenode)):
            pass
    assert repr(name) in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deep", "tmp"]      # nothing written, nothing left


def test_a_listed_name_hepix_does_not_know_is_not_copied(namenode, tmp_path, monkeypatch, caplog):
    work = tmp_path / "tmp"
    work.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(work))
    for extra in ("notes.txt", "secret.key.bak", ".hepix-keys.json.tmp"):
        namenode.files[f"{KEYS}/{extra}"] = b"not a key"
    with caplog.at_level(logging.WARNING, logger="jobs.runtime.remote"):
        with remote.remote_keys(keys_uri(namenode)) as local:
                copied = sorted(p.name for p in Path(local).iterdir())
    assert copied == ["context.bin", "hepix-keys.json", "public.key"]
    assert [s for s in namenode.seen if s[1] == "OPEN" and "not a key" in s[2]] == []
    warned = caplog.text
    assert all(repr(n) in warned for n in ("notes.txt", "secret.key.bak", ".hepix-keys.json.tmp"))


# --- the workers' tables (fsspec's WebHDFS behind pyarrow) --------------------------------------------

def table_bytes() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"image_id": ["a", "b"], "ct": [b"x" * 10, b"y" * 20]}), sink)
    return sink.getvalue().to_pybytes()


def test_the_workers_write_and_read_through_a_loopback_data_node(namenode, off_loopback):
    access = remote.file_access(f"hdfs://127.0.0.1:{namenode.port}/run")
    fs, base = access.open(f"hdfs://127.0.0.1:{namenode.port}/run/part-00000.parquet")
    with fs.open_output_stream(base) as out:
        out.write(table_bytes())
    assert namenode.files["/run/part-00000.parquet"] == table_bytes()
    with fs.open_input_file(base) as f:
        assert pq.read_table(f).column("image_id").to_pylist() == ["a", "b"]
    assert {s[1] for s in namenode.data_requests()} >= {"CREATE", "APPEND", "OPEN"}
    assert off_loopback == []


@pytest.mark.parametrize("op", ["OPEN", "CREATE"])
def test_the_workers_refuse_a_data_node_off_the_allowed_hosts(namenode, off_loopback, op):
    namenode.files["/run/part-00000.parquet"] = table_bytes()
    namenode.redirects[op] = location("[2001:db8::7]", "/run/part-00000.parquet", port=9864)
    access = remote.file_access(f"hdfs://127.0.0.1:{namenode.port}/run")
    fs, path = access.open(f"hdfs://127.0.0.1:{namenode.port}/run/part-00000.parquet")
    with pytest.raises(HopRefused, match=rf"host '2001:db8::7'.*{HOSTS_ENV}"):
        if op == "OPEN":
            with fs.open_input_file(path) as f:
                f.read_at(8, 0)
        else:
            with fs.open_output_stream(path) as out:
                out.write(b"ciphertexts")
    assert off_loopback == [] and namenode.data_requests() == []


def test_the_workers_use_the_drivers_list_of_hosts(namenode, off_loopback, monkeypatch):
    """The driver reads the variable and ships it in the task's FileAccess: a worker's environment (the
    cluster's) does not widen it."""
    monkeypatch.setenv(HOSTS_ENV, "*.dn.example.org,10.1.0.0/16")
    access = remote.file_access("hdfs://nn.example.org:8020/run")
    assert access.hosts == ("*.dn.example.org", "10.1.0.0/16")
    monkeypatch.setenv(HOSTS_ENV, "bad host")
    with pytest.raises(HepixError, match=f"{HOSTS_ENV}: 'bad host' is not a host name"):
        remote.file_access("hdfs://nn.example.org:8020/run")

    from tasks.filesystem import FileAccess

    monkeypatch.setenv(HOSTS_ENV, "203.0.113.9")        # the worker's own environment
    namenode.files["/run/part.parquet"] = table_bytes()
    namenode.redirects["OPEN"] = location("203.0.113.9", "/run/part.parquet", port=9864)
    fs, path = FileAccess(webhdfs=namenode.url, user=getpass.getuser()).open("hdfs://nn:8020/run/part.parquet")
    with pytest.raises(HopRefused, match=r"host '203\.0\.113\.9'"):
        with fs.open_input_file(path) as f:
            f.read_at(8, 0)
    assert off_loopback == []


# --- any redirect off the allowed hosts is refused before a byte moves --------------------------------

def _is_allowed(host: str) -> bool:
    return _loopback(host.strip("[]")) or host == "127.0.0.1"


def _url_host(host) -> str:
    host = str(host)
    return f"[{host}]" if ":" in host else host


OFF_HOSTS = st.one_of(
    st.ip_addresses().map(str),
    domains(),
    st.sampled_from(["127.0.0.1.x.invalid", "localhost.invalid", "x-localhost.invalid", "0.0.0.0", "::",
                     "::ffff:127.0.0.1", "127.1", "2130706433", "0x7f000001", "127.0.0.1.", "nn.invalid",
                     "LOCALHOST.invalid", "xn--nxasmq6b.invalid"]),
).filter(lambda h: not _is_allowed(h))


@settings(database=None, deadline=None, derandomize=True, max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=OFF_HOSTS, scheme=st.sampled_from(["http", "https"]), port=st.integers(1, 65535),
       userinfo=st.sampled_from(["", "127.0.0.1@", "localhost:9870@"]),
       client=st.sampled_from(["keys", "secret", "workers"]))
def test_any_redirect_to_a_host_off_the_allowed_list_is_refused_before_a_byte_moves(
        namenode, off_loopback, host, scheme, port, userinfo, client):
    netloc = f"{userinfo}{_url_host(host)}:{port}"
    target = f"{scheme}://{netloc}/webhdfs/v1/x?op=OPEN"
    namenode.redirects.clear()
    namenode.redirects[("OPEN", f"{KEYS}/secret.key") if client == "secret" else "OPEN"] = target
    namenode.seen.clear()
    off_loopback.clear()
    with pytest.raises(HopRefused) as e:
        if client == "workers":
            namenode.files["/run/part.parquet"] = table_bytes()
            fs, path = remote.file_access(f"hdfs://127.0.0.1:{namenode.port}/run").open(
                f"hdfs://127.0.0.1:{namenode.port}/run/part.parquet")
            with fs.open_input_file(path) as f:
                f.read_at(8, 0)
        else:
            with remote.remote_keys(keys_uri(namenode), secret=client == "secret"):
                pass
    assert "\n" not in str(e.value)
    assert off_loopback == [], (target, off_loopback)
    first = {"workers": "/run/part.parquet", "keys": f"{KEYS}/context.bin", "secret": f"{KEYS}/secret.key"}[client]
    assert namenode.data_requests(first) == []


# --- the policy itself ------------------------------------------------------------------------------

@pytest.mark.parametrize("url,allowed", [
    ("http://nn.example.org:9864/webhdfs/v1/x", True),              # the endpoint's host, another port
    ("http://NN.Example.org.:9864/x", True),
    ("http://127.0.0.1:9864/x", True), ("http://localhost:1/x", True), ("http://[::1]:1/x", True),
    ("http://dn1.example.org:9864/x", True),                         # listed
    ("http://a.b.dn.example.org:9864/x", True),                      # *.dn.example.org
    ("http://dn.example.org:9864/x", False),                         # the domain itself is not under it
    ("http://evil-dn.example.org:9864/x", False),
    ("http://10.1.200.3:9864/x", True), ("http://10.2.0.1:9864/x", False),
    ("http://[fd00::5]:9864/x", True), ("http://[fd00::6]:9864/x", False),
    ("http://nn.example.org.invalid/x", False), ("http://example.org/x", False),
    ("http://0.0.0.0:9864/x", False), ("file:///etc/passwd", False), ("ftp://nn.example.org/x", False),
    ("http://nn.example.org\\@x.invalid/x", False),
])
def test_the_policy_allows_the_endpoint_loopback_and_the_listed_hosts_only(url, allowed):
    policy = HopPolicy("http://nn.example.org:9870", parse_hosts("dn1.example.org, *.dn.example.org, "
                                                                 "10.1.0.0/16, fd00::5"))
    if allowed:
        policy.check(url)
    else:
        with pytest.raises(HopRefused):
            policy.check(url)


@pytest.mark.parametrize("url,refused", [
    ("https://nn.example.org:9871/webhdfs/v1/k/secret.key?op=OPEN", False),
    ("http://127.0.0.1:9864/webhdfs/v1/k/secret.key?op=OPEN", False),
    ("http://nn.example.org:9870/webhdfs/v1/k/secret.key?op=OPEN", True),
    ("http://nn.example.org:9870/webhdfs/v1/k/client.key?op=GETFILESTATUS", True),
    ("http://nn.example.org:9870/webhdfs/v1/k/secret%2Ekey?op=OPEN", True),
    ("http://nn.example.org:9870/webhdfs/v1/k/public.key?op=OPEN", False),
])
def test_a_secret_key_goes_over_https_or_loopback_at_every_hop(url, refused):
    policy = HopPolicy("http://nn.example.org:9870")
    if refused:
        with pytest.raises(SecretHopRefused, match="https"):
            policy.check(url)
    else:
        policy.check(url)
    with pytest.raises(SecretHopRefused):          # a secret session: whatever the path names
        HopPolicy("http://nn.example.org:9870", secret=True).check("http://nn.example.org:9864/data?x=1")


@pytest.mark.parametrize("value", ["*", "a b", "host:80", "http://dn1", "10.0.0.0/33", "*.", "-x.org", "a..b"])
def test_a_malformed_entry_of_the_hosts_variable_is_one_line_naming_it(value):
    with pytest.raises(HepixError, match=re.escape(f"{HOSTS_ENV}: {value!r} is not")) as e:
        parse_hosts(f"dn1.example.org,{value}")
    assert "\n" not in str(e.value)
