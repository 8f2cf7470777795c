"""Children of a test process die with it: a worker, JVM or crash-test child started through
`spawn` gets SIGKILL when the pytest process that started it dies (`kill -9`, a CI timeout),
instead of running on as an orphan that holds ports, cores and files.

Linux's ``PR_SET_PDEATHSIG`` (set in the child between fork and exec) does it. Linux sends that
signal when the *thread* that forked the child ends, not the process, so a child started from a
helper thread (the distributed tests boot workers in parallel) is forked by one long-lived
thread instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)
# one thread that outlives every child it forks (it ends with the process)
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="test-spawner")


def die_with_parent(parent: int) -> None:
    """In the child, before exec: be killed when `parent` (the forking thread) dies."""
    if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the prctl: nobody will signal us
        os._exit(1)


def spawn(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(args, **kwargs)` whose child dies with this process."""
    parent = os.getpid()

    def start() -> subprocess.Popen:
        return subprocess.Popen(args, preexec_fn=lambda: die_with_parent(parent), **kwargs)

    if threading.current_thread() is threading.main_thread():
        return start()
    return _SPAWNER.submit(start).result()
