"""A TCP proxy a test can cut and restore: while cut, connections through it are reset and new
ones refused, as if the server behind it were down — without stopping a server other tests
share."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target` (host, port) until `cut()`; `restore()` listens again
    on the same port. `hold_replies()` keeps what the target sends from reaching the clients
    (`held` is set once something is held) until the cut: a request whose answer is on its way
    when the connection is lost."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._replies = threading.Event()  # set: the target's bytes flow to the clients
        self._replies.set()
        self.held = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._server: socket.socket | None = None
        self.port = 0
        self.restore()

    def restore(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self.port = server.getsockname()[1]
        with self._lock:
            self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def hold_replies(self) -> None:
        """From now on, hold what the target sends (until `cut`)."""
        self.held.clear()
        self._replies.clear()

    def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        with self._lock:
            server, self._server = self._server, None
            sockets, self._open = self._open, []
        if server is not None:
            # close() alone does not wake the thread blocked in accept(): the kernel keeps the
            # listening socket until that call returns, and it goes on accepting (and
            # forwarding) new connections. shutdown() makes accept() fail at once.
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv
            s.close()
        self._replies.set()  # a held pump wakes, and its send fails on the closed socket

    def upstream_ports(self) -> list[int]:
        """The local ports of the open connections to the target: how the server lists them
        (its client port), so a test can end them server-side (a server restarting)."""
        with self._lock:
            sockets = list(self._open)
        ports = []
        for s in sockets:
            with contextlib.suppress(OSError):
                if s.getpeername()[:2] == self.target:
                    ports.append(s.getsockname()[1])
        return ports

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            # a connection accepted just before a cut, and joined to its upstream after it, must
            # not outlive the cut (it would forward through the whole outage): the check and
            # the registration are one step under the lock cut() takes
            with self._lock:
                live = self._server is server
                if live:
                    self._open += [client, upstream]
            if not live:
                for s in (client, upstream):
                    s.close()
                return
            for a, b, reply in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(a, b, reply), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, reply: bool) -> None:
        try:
            while data := source.recv(65536):
                if reply and not self._replies.is_set():
                    self.held.set()
                    self._replies.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
