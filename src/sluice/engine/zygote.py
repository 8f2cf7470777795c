"""One preloaded Python process that forks the Python processes Spark starts on the driver.

Spark starts Python processes of its own beside a worker: a streaming reader's planner per
Python source of each query (long-lived: one per connector), and a daemon for each kind of
driver-side step of a data source (lookup, create, plan a read, plan a write, commit a streaming
write) and for the task workers, each forking workers. Every one was a fresh interpreter that
imported pyspark, pyarrow, numpy, pandas and sluice itself: 40-60 MB of private memory each,
about a second of CPU to start, 16 of them for 10 connectors (bench/README.md, issue 29).

The zygote imports all of that once and freezes it (`gc.freeze`), then forks a child for each
such start: the children share those pages with it, copy-on-write. Spark still believes it
starts a process: the launcher it runs (`sluice.engine.session.spark_python`) becomes a small
client (`CLIENT`, a bare `python -S -E`) that hands the zygote its command line, environment,
working folder and standard streams (the file descriptors themselves, over a Unix socket), then
stays as the process Spark knows: it passes on the signals Spark sends (a stop is a SIGTERM) and
exits with the child's exit status. The child talks to the JVM directly on those streams and on
the sockets its environment names, exactly as a process Spark started would.

Only `python -m pyspark…`/`-m sluice…` starts go to the zygote; anything else, or any failure
to reach it, and the client `exec`s the interpreter as before. The zygote ends within a second of
the process that started it (it watches its parent's pid: `PR_SET_PDEATHSIG` would tie it to the
starting *thread*, and a worker builds Spark on its boot thread, which ends); its children end
when the JVM closes their streams, as Spark's own processes do.

Wire format (client → zygote): the three descriptors 0, 1, 2 with an 8-byte length, then that
many bytes: NUL-separated fields `cwd`, the number of arguments, the arguments, then `KEY=VALUE`
environment entries. Zygote → client: the child's pid (8 bytes, -1: refused, start it yourself),
later its exit status (8 bytes).
"""

from __future__ import annotations

import contextlib
import gc
import os
import runpy
import select
import signal
import socket
import struct
import sys
import threading
import warnings

#: The environment variable that names the zygote's socket (inherited by the JVM, read by the
#: launcher).
ENV = "SLUICE_ZYGOTE"
#: Module prefixes the zygote starts; anything else is started by the launcher as before.
MODULES = ("pyspark.", "sluice.")
_WORD = struct.Struct("!q")
#: how often the zygote checks that the process that started it is still there
PARENT_CHECK_S = 1.0

#: The launcher's client (run with `python -S -E CLIENT REAL_PYTHON ARGS…`): only the standard
#: library's builtin modules, so it starts in a few milliseconds and holds ~4 MB.
CLIENT = r"""
import os, signal, socket, struct, sys
real, args = sys.argv[1], sys.argv[2:]
def start_here():
    os.execv(real, [real, *args])
def exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("zygote closed")
        data += chunk
    return data
path = os.environ.get("SLUICE_ZYGOTE")
if not path or len(args) < 2 or args[0] != "-m" or not args[1].startswith(("pyspark.", "sluice.")):
    start_here()
try:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    fields = [os.getcwd(), str(len(args)), *args]
    fields += ["%s=%s" % kv for kv in os.environ.items()]
    body = "\0".join(fields).encode("utf-8", "surrogateescape")
    socket.send_fds(sock, [struct.pack("!q", len(body))], [0, 1, 2])
    sock.sendall(body)
    pid = struct.unpack("!q", exact(sock, 8))[0]
except OSError:
    start_here()
if pid < 0:
    start_here()
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except OSError:
        pass
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, forward)
while True:
    try:
        status = struct.unpack("!q", exact(sock, 8))[0]
        break
    except InterruptedError:
        continue
    except OSError:
        status = 1
        break
os._exit(status)
"""


def _exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("client closed")
        data += chunk
    return data


def _request(conn: socket.socket) -> tuple[str, list[str], dict[str, str], list[int]]:
    head, fds, _flags, _addr = socket.recv_fds(conn, _WORD.size, 3)
    if len(head) < _WORD.size:
        head += _exact(conn, _WORD.size - len(head))
    body = _exact(conn, _WORD.unpack(head)[0]).decode("utf-8", "surrogateescape")
    fields = body.split("\0")
    cwd, count = fields[0], int(fields[1])
    argv = fields[2 : 2 + count]
    env = dict(f.split("=", 1) for f in fields[2 + count :] if "=" in f)
    return cwd, argv, env, fds


def _run_child(cwd: str, argv: list[str], env: dict[str, str], fds: list[int]) -> None:
    """In the forked child: become the process the client was asked to be; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        # what a fresh interpreter starts with: SIGPIPE and SIGXFSZ ignored (CPython ignores them
        # at start, so that a write to a closed socket raises BrokenPipeError); with SIGPIPE's
        # default a worker whose broker connection was reset died mid-task ("crashed")
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = [p for p in extra if p not in sys.path]
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]
        # the zygote's objects stay frozen here too: no collection touches (and copies) them
        with warnings.catch_warnings():
            # runpy warns that the module was imported before: by the zygote, on purpose
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class _Server:
    """The zygote's loop: accept a start, fork it, report its exit to its client."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(64)
        self.children: dict[int, socket.socket] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def serve(self, parent: int) -> None:
        while os.getppid() == parent:  # re-parented: the worker is gone, and so is its zygote
            ready, _, _ = select.select([self.listener, self.wake_r], [], [], PARENT_CHECK_S)
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
                self._reap()
            if self.listener in ready:
                self._accept()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10)
            cwd, argv, env, fds = _request(conn)
            if len(argv) < 2 or argv[0] != "-m" or not argv[1].startswith(MODULES):
                conn.sendall(_WORD.pack(-1))
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self.listener.close()
                os.close(self.wake_r)
                os.close(self.wake_w)
                for other in self.children.values():
                    other.close()
                conn.close()
                _run_child(cwd, argv, env, fds)
            self.children[pid] = conn
            conn.sendall(_WORD.pack(pid))
        except OSError:
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(_WORD.pack(code if code >= 0 else 128 - code))
            conn.close()


def preload() -> None:
    """Import what every process the zygote forks needs (see `sluice.engine.worker_daemon`)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: no pool thread to fork
    from sluice.engine import worker_daemon

    worker_daemon.preload(
        (
            *worker_daemon.PRELOAD,
            "pyspark.daemon",
            "pyspark.sql.streaming.python_streaming_source_runner",
            "pyspark.sql.worker.python_streaming_sink_runner",
            "pyspark.sql.worker.create_data_source",
            "pyspark.sql.worker.lookup_data_sources",
        )
    )
    gc.collect()
    gc.freeze()


def main(path: str, parent: int) -> None:
    preload()
    assert threading.active_count() == 1, "the zygote must not fork with threads running"
    server = _Server(path)

    def stop(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the worker, which stops it
    server.serve(parent)
    with contextlib.suppress(OSError):
        os.unlink(path)


def own_socket() -> str:
    """The socket path of this process's zygote."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"sluice-zygote-{os.getpid()}.sock")


def start() -> str:
    """Start this process's zygote (it ends when this process does) and name its socket in
    `ENV`, so that the JVM started next, and the launcher it runs, find it. Returns the socket
    path. Until the zygote has imported everything and listens, processes start the usual way."""
    import subprocess

    path = own_socket()
    subprocess.Popen(
        [sys.executable, "-m", "sluice.engine.zygote", path, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )
    os.environ[ENV] = path
    return path


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
