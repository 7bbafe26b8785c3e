"""Spark's Python daemons forked from a warm copy of the first, for a process that runs many sessions.

Each Spark session on a local master starts a Python daemon of its own (:mod:`jobs.runtime.pydaemon`), and
the daemon spends 1-2 s of a core importing what the tasks run before it forks a worker: NumPy, pyarrow,
pandas, Pyfhel, numba's kernels, scikit-image's SSIM, :mod:`hecore`, :mod:`tasks`.  A process that runs many
jobs -- the tests, a notebook, both with ``HEPIX_KEEP_SESSION=1`` -- builds a new session for every job that
holds a secret and for every change of settings, so it paid that import once per job.  Measured with py-spy
over the whole test run: 279 daemons, 440 s of a core, four fifths of it imports.

Here the first daemon of such a process, once it has imported everything and before it serves its session,
forks a copy of itself that serves the next sessions (:func:`start_beside`).  The next daemon Spark starts
asks that copy (:func:`handed_over`) over a Unix socket in a directory only this user can enter, created by
the driver (:func:`driver_settings`) and passed to the daemons in the sessions' executor environment: it
sends its standard input, output and error (the pipes to the JVM), its environment and working directory;
the copy forks a daemon that takes them over -- the modules imported, the environment, directory and
arguments the JVM gave -- and runs Spark's daemon loop; the process the JVM started stays as its stand-in
(a signal to it is passed on, and it ends when the daemon ends), so the JVM sees what it always saw.

What the copy forks from holds no data and no key: it has imported modules and answered requests, nothing
else -- workers are forked by the daemons, and they alone receive the tasks and the broadcast keys.  There is
one copy per interpreter, module path, hash seed and environment (but for the two values Spark draws per
session: the workers' secret and the local directories), its socket named by their digest: a session whose
settings add to the executors' environment gets a copy of its own, and a copy forks only for requests from
this user (the directory is 0700; the socket's peer is checked) that match what it was started with.  Where
none answers, the daemon imports everything itself, as before.  A copy ends with the driver (or its
directory), or after :data:`IDLE_SECONDS` without a request; the driver is made the subreaper of what it
starts, so the daemons stay in its process tree (which ``hepix bench`` measures) when the first daemon's
session ends.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback

#: ``0`` on the driver: no copy; every session's daemon imports for itself.
SWITCH_ENV = "HEPIX_DAEMON_FORKS"
#: The executor environment variables that name the directory of the sockets and the driver's process id.
DIR_ENV = "HEPIX_DAEMON_FORKS_DIR"
OWNER_ENV = "HEPIX_DAEMON_FORKS_OWNER"
#: What Spark draws afresh for each session's daemon: not compared, and not kept by the copy.
PER_SESSION = ("PYTHON_WORKER_FACTORY_SECRET", "SPARK_LOCAL_DIRS")
#: The copy ends after this long without a request.
IDLE_SECONDS = 120
MAX_REQUEST = 1 << 20
_HASH_PROBE = "hepix daemon forks"

_driver_dir: str | None = None
_driver_pid: int | None = None


# --- the driver ------------------------------------------------------------------------------------------

def driver_settings() -> dict[str, str]:
    """The executor environment that lets this process's local sessions fork their daemons from a warm copy:
    a private directory (made once per process, removed at exit) and this process's id; nothing where
    :data:`SWITCH_ENV` is ``0``."""
    global _driver_dir, _driver_pid
    if os.environ.get(SWITCH_ENV, "") == "0":
        return {}
    if _driver_pid != os.getpid() or _driver_dir is None or not os.path.isdir(_driver_dir):
        _driver_dir, _driver_pid = tempfile.mkdtemp(prefix="hepix-daemons-"), os.getpid()     # 0700
        atexit.register(_remove_dir, _driver_dir, _driver_pid)
        _become_subreaper()
    return {f"spark.executorEnv.{DIR_ENV}": _driver_dir, f"spark.executorEnv.{OWNER_ENV}": str(_driver_pid)}


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _become_subreaper() -> None:
    """Linux: what this process starts and is orphaned below it (a daemon whose first daemon ended) becomes
    this process's child rather than init's."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)        # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


# --- a daemon the JVM started ----------------------------------------------------------------------------

def _identity() -> dict:
    return {"executable": sys.executable, "path": list(sys.path), "hash": hash(_HASH_PROBE)}


def _socket_path(where: str) -> str:
    """The socket of the copy for a daemon like this one: one copy per interpreter, module path, hash seed and
    environment (a session whose settings add to the executors' environment has a copy of its own)."""
    env = sorted((k, v) for k, v in os.environ.items() if k not in PER_SESSION)
    key = hashlib.sha256(json.dumps([_identity(), env]).encode()).hexdigest()[:20]
    return os.path.join(where, f"{key}.sock")


def handed_over() -> bool:
    """Ask this driver's warm copy to fork the daemon; ``False`` (nothing changed here) where there is none
    or it refuses.  Where it forks one, this process stands in for that daemon until it ends, and exits."""
    where = os.environ.get(DIR_ENV)
    if not where:
        return False
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(30)
        conn.connect(_socket_path(where))
        request = json.dumps({**_identity(), "env": dict(os.environ), "cwd": os.getcwd(),
                              "argv": sys.argv}).encode()
        socket.send_fds(conn, [struct.pack("!Q", len(request))], [0, 1, 2])
        conn.sendall(request)
        reply = _read_line(conn)
    except (OSError, ValueError):
        conn.close()
        return False
    if not reply.startswith(b"ok "):
        conn.close()
        return False
    _stand_in(conn, int(reply[3:]))
    return True                                             # not reached


def _read_line(conn: socket.socket, limit: int = 512) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(limit - len(data))
        if not chunk or len(data) + len(chunk) >= limit:
            raise ValueError("no answer")
        data += chunk
    return data.strip()


def _let_go_of_the_pipes() -> None:
    """Standard input, output and error on /dev/null: the JVM's pipes are a daemon's, and the JVM waits on their
    ends."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _stand_in(conn: socket.socket, pid: int) -> None:
    """The JVM's handle on the daemon ``pid``: SIGTERM passed on, the end when the daemon ends."""
    _let_go_of_the_pipes()

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        finally:
            os._exit(1)

    signal.signal(signal.SIGTERM, forward)
    conn.settimeout(None)
    try:
        while conn.recv(4096):              # the daemon (and its workers) hold the other end until they end
            pass
    except OSError:
        pass
    os._exit(0)


# --- the warm copy ---------------------------------------------------------------------------------------

def start_beside() -> None:
    """In the first daemon, everything imported: fork the copy that serves the driver's next sessions, where
    the driver asked for one and none answers yet."""
    where, owner = os.environ.get(DIR_ENV), os.environ.get(OWNER_ENV, "")
    if not where or not owner.isdigit():
        return
    path = _socket_path(where)
    if _answers(path):
        return
    if os.fork() == 0:
        code = 0
        try:
            _serve(path, int(owner))
        except BaseException:               # noqa: BLE001 -- the copy ends; the daemons import for themselves
            code = 1
        os._exit(code)


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _serve(path: str, owner: int) -> None:
    _let_go_of_the_pipes()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)           # the daemons forked here are reaped by the kernel
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    mine = {k: v for k, v in os.environ.items() if k not in PER_SESSION}
    for k in PER_SESSION:
        os.environ.pop(k, None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if os.path.exists(path):            # a copy that died left its socket: nobody answers on it
            os.unlink(path)
        listener.bind(path)
    except OSError:
        return                              # another copy bound it first
    inode = os.stat(path).st_ino
    listener.listen(16)
    listener.settimeout(1.0)
    from pyspark import daemon  # noqa: F401 -- imported here once, not in every fork

    last = time.monotonic()
    try:
        while _still_wanted(path, inode, owner) and time.monotonic() - last < IDLE_SECONDS:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            last = time.monotonic()
            with conn:
                _answer(conn, listener, mine)
    finally:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass


def _still_wanted(path: str, inode: int, owner: int) -> bool:
    try:
        os.kill(owner, 0)
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _answer(conn: socket.socket, listener: socket.socket, mine: dict) -> None:
    conn.settimeout(30)
    fds: list[int] = []
    try:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        if uid != os.getuid() or len(head) != 8 or len(fds) != 3:
            return
        (size,) = struct.unpack("!Q", head)
        if size > MAX_REQUEST:
            return
        raw = bytearray()
        while len(raw) < size:
            chunk = conn.recv(min(65536, size - len(raw)))
            if not chunk:
                return
            raw += chunk
        request = json.loads(raw)
        why = _refusal(request, mine)
        if why:
            conn.sendall(f"no {why}\n".encode())
            return
        pid = os.fork()
        if pid == 0:                        # the child keeps ``conn`` open: the stand-in's end closes when it ends
            _become_daemon(listener, fds, request)
        conn.sendall(f"ok {pid}\n".encode())
    except (OSError, ValueError, TypeError):
        return
    finally:
        for fd in fds:
            os.close(fd)


def _refusal(request: dict, mine: dict) -> str | None:
    """Why a daemon with ``request``'s interpreter and environment cannot be forked from here, or ``None``."""
    if not isinstance(request, dict) or not isinstance(request.get("env"), dict):
        return "a malformed request"
    for key, value in _identity().items():
        if request.get(key) != value:
            return f"another {key}"
    theirs = {k: v for k, v in request["env"].items() if k not in PER_SESSION}
    differ = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
    return f"another environment ({', '.join(differ[:5])})" if differ else None


def _become_daemon(listener: socket.socket, fds: list[int], request: dict) -> None:
    """In the forked child: take over the requesting process's pipes, environment, directory and arguments,
    and run Spark's daemon loop; never returns."""
    code = 1
    try:
        listener.close()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        fds.clear()
        os.environ.clear()
        os.environ.update(request["env"])
        try:
            os.chdir(request["cwd"])
        except (OSError, TypeError):
            pass
        sys.argv[:] = [str(a) for a in request.get("argv", sys.argv)]
        gc.freeze()
        from pyspark import daemon

        daemon.manager()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:                   # noqa: BLE001 -- reported where the daemon's errors go: the JVM's log
        traceback.print_exc()
    os._exit(code)
