"""Waiting for files to change: how an idle micro-batch learns at once that data arrived.

A streaming query asks its source for the latest position once per trigger. Between two records
of a trickle that costs a record up to a whole trigger interval on each hop. A source whose data
lives in files (a file source's input, a topic of the embedded log, whose commits ring a
"doorbell" file) instead names those files, and the runtime waits on them inside the query's
`latestOffset` when nothing is new: the first write ends the wait.

`watch.arm()` starts noticing changes (and forgets earlier ones); `watch.wait(timeout_s)` then
returns True as soon as one of the paths was written, renamed, created or had its times changed
(`os.utime`) since `arm()`, False when `timeout_s` passed first. Arm before looking for data,
wait after finding none: a write in between is not missed. On Linux it uses inotify (no cost
while nothing happens); elsewhere, or when inotify is unavailable, it compares `os.stat` every
20 ms. A path that does not exist yet is watched through its folder. Spurious wake-ups are
allowed: the caller always checks for itself what changed.

Not thread-safe; one watch per reader. It holds a file descriptor: `close()` it (a watch that is
pickled arrives closed and re-opens on first use).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "IDLE_PAUSE_S",
    "IDLE_WAIT_S",
    "MAX_IDLE_WAIT_S",
    "FileWatch",
    "idle_wait",
    "ring",
    "wait_for_new",
]

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_IGNORED = 0x8000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_FILE_EVENTS = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF
_DIR_EVENTS = _IN_CREATE | _IN_MOVED_TO | _IN_MOVED_FROM | _IN_DELETE
_EVENT = struct.Struct("iIII")
#: how often the portable fallback compares the files' stat
POLL_S = 0.02
#: How long a reader that found nothing new waits for a change before it answers "nothing new"
#: to Spark. Spark cannot stop a query in the middle of that call, so this also bounds how long
#: stopping an idle query takes; one call per second per idle query costs next to nothing.
IDLE_WAIT_S = 1.0
#: The longest such wait: a query is stopped within it.
MAX_IDLE_WAIT_S = 5.0
#: How long a reader with nothing to wake it (no files to watch: a broker bus, a polled client)
#: pauses after a look that found nothing new: an idle query then looks about twice a second
#: whatever its trigger interval (the worker's default is short, for the readers that do wake).
IDLE_PAUSE_S = 0.4

_libc: ctypes.CDLL | None = None


def _inotify() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class FileWatch:
    """Waits until one of a fixed set of files changes (see the module docstring)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = tuple(sorted({os.path.abspath(p) for p in paths}))
        self._fd: int | None = None
        #: watch descriptor -> (path watched, names inside it that matter; None: the path itself)
        self._watches: dict[int, tuple[str, frozenset[str] | None]] = {}
        self._stale = True  # the watches must be (re)made: a file appeared, moved or went
        self._stats: dict[str, tuple[int, int, int] | None] | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"paths": self.paths}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["paths"])  # type: ignore[misc, arg-type]

    def arm(self) -> None:
        """From now on, `wait` returns at the first change (earlier ones are forgotten)."""
        if not self.paths:
            return
        if self._arm():
            self._drain()
            if self._stale:  # a file appeared, moved or went: watch what the paths name now
                self._rewatch()
        else:
            self._stats = {p: _stat(p) for p in self.paths}

    def wait(self, timeout_s: float) -> bool:
        """Block until a watched file changed since `arm()`, or `timeout_s` passed."""
        if not self.paths:
            time.sleep(max(0.0, timeout_s))
            return False
        if self._fd is not None or (self._stats is None and self._arm()):
            return self._wait_inotify(timeout_s)
        return self._wait_polling(timeout_s)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._watches.clear()
        self._stale = True

    # -- inotify ----------------------------------------------------------------------------------
    def _arm(self) -> bool:
        """(Re)make the inotify watches if needed; False if inotify is not available."""
        if self._fd is None:
            lib = _inotify()
            fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if lib is not None else -1
            if fd < 0:
                return False
            self._fd = fd
            self._stale = True
        if self._stale:
            self._rewatch()
        return True

    def _rewatch(self) -> None:
        lib = _inotify()
        assert lib is not None and self._fd is not None
        self._watches.clear()
        by_dir: dict[str, set[str]] = {}
        for path in self.paths:
            wd = lib.inotify_add_watch(self._fd, os.fsencode(path), _FILE_EVENTS)
            if wd >= 0:
                self._watches[wd] = (path, None)
            # also its folder, for the file being created, replaced or renamed away
            folder, name = os.path.split(path)
            by_dir.setdefault(folder, set()).add(name)
        for folder, names in by_dir.items():
            wd = lib.inotify_add_watch(self._fd, os.fsencode(folder), _DIR_EVENTS)
            if wd >= 0:
                known = self._watches.get(wd)
                merged = names | (known[1] or set() if known else set())
                self._watches[wd] = (folder, frozenset(merged))
        self._stale = False

    def _drain(self) -> bool:
        """Read the pending events; True if one of them concerns a watched file."""
        assert self._fd is not None
        hit = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return hit
            except OSError:
                self.close()
                return True
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                watched = self._watches.get(wd)
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED):
                    self._stale = True
                if watched is None:
                    continue
                _path, names = watched
                if names is None:
                    hit = True
                elif os.fsdecode(name) in names:
                    hit = True
                    self._stale = True  # the file under that name is another one now

    def _wait_inotify(self, timeout_s: float) -> bool:
        assert self._fd is not None
        if self._drain():
            return True
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready and self._drain():
                return True
            if self._fd is None:  # inotify failed: poll from now on
                self._stats = None
                return self._wait_polling(max(0.0, deadline - time.monotonic()))
            if self._stale:
                self._rewatch()

    # -- the portable fallback ---------------------------------------------------------------------
    def _wait_polling(self, timeout_s: float) -> bool:
        if self._stats is None:  # never armed: from now on
            self._stats = {p: _stat(p) for p in self.paths}
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            now = {p: _stat(p) for p in self.paths}
            if now != self._stats:
                self._stats = now
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))


def ring(bell: str | os.PathLike[str]) -> None:
    """Wake whoever watches `bell` (a doorbell file): change its times, creating it (0600) if
    it is missing. Best effort: a bell that cannot ring only makes readers find the data at
    their next look."""
    try:
        os.utime(bell)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.close(os.open(bell, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass


def idle_wait(trigger_interval_ms: int) -> float:
    """How long a query with this trigger interval waits for new data inside one trigger.

    At least the interval (up to `MAX_IDLE_WAIT_S`): an idle query then keeps waiting from one
    trigger to the next, and a record that arrives starts a micro-batch at once; under a steady
    flow micro-batches still start at most once per interval. Longer intervals (a lake sink's
    roll interval) wait `MAX_IDLE_WAIT_S` per trigger: they batch on purpose."""
    return min(max(trigger_interval_ms / 1000, IDLE_WAIT_S), MAX_IDLE_WAIT_S)


def wait_for_new(
    watch: FileWatch | None,
    start: Any,
    latest: Callable[[], Any],
    timeout_s: float = IDLE_WAIT_S,
    unchanged: Callable[[Any], bool] | None = None,
) -> Any:
    """`latest()` once it has something new, asked again at each change of `watch`'s files for
    up to `timeout_s`; `start` itself if nothing new came (Spark then plans no micro-batch).

    `unchanged(end)` says whether an answer of `latest()` holds nothing new (default: it equals
    `start`). Without a watch, `latest()` is asked once and answered as it is, after a pause of
    `IDLE_PAUSE_S` (at most `timeout_s`) when it holds nothing new."""
    same = unchanged or (lambda end: end == start)
    if watch is None:
        end = latest()
        if same(end):
            time.sleep(min(IDLE_PAUSE_S, timeout_s))
        return end
    deadline = time.monotonic() + timeout_s
    while True:
        watch.arm()
        end = latest()
        if not same(end):
            return end
        left = deadline - time.monotonic()
        if left <= 0 or not watch.wait(left):
            return start
