"""Files and folders only the worker's own user may open: everything under `storePathRootDir`.

The stores hold connector configs (passwords written as literals included), positions, topic
data and push progress; other users of the machine must read none of it. The worker makes the
store root 0700 (`private_dir`, also tightening a root that exists), and the files and folders
sluice itself creates beneath it 0600 and 0700 (`private_file`, `private_dir`), whatever the
process umask. Spark writes its checkpoints there with Hadoop's own modes: the root keeps them
from other users too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: str | os.PathLike[str], *, tighten: bool = False) -> None:
    """Create folder `path` (and its missing parents) with mode 0700. With `tighten`, an existing
    `path` that others may open is made 0700 too (logged); one of another owner is left alone."""
    path = os.fspath(path)
    missing = []
    head = os.path.abspath(path)
    while head and not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            os.mkdir(folder, DIR_MODE)
            os.chmod(folder, DIR_MODE)  # the umask may have taken bits off, never added
    if tighten and not missing:
        st = os.stat(path)
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.chmod(path, DIR_MODE)
            mode = stat.S_IMODE(st.st_mode)
            log.info("%s was open to other users (%o): made it 0700", path, mode)


def private_file(path: str | os.PathLike[str]) -> bool:
    """Create `path` empty with mode 0600 unless it exists; True if this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def open_private(path: str | os.PathLike[str]) -> int:
    """A new file `path` (mode 0600) opened for writing; FileExistsError if it exists."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
