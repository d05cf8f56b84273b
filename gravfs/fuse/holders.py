"""Who still holds an open file: telling a writer's close from a copy's.

The kernel sends FUSE FLUSH on every close(2) of a descriptor, including the
copies a forked child inherited and closes at exec (close-on-exec) or exit, and
FLUSH does not say which process closed. A daemon that stages a file on every
flush would stage a writer's half-written file whenever the writer starts a
subprocess. The process that opened a handle is known (the open request's
pid); while it still has a descriptor of the file, a flush came from a copy.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def holds(pid: int, path: bytes) -> bool:
    """Whether process (or thread) ``pid`` has a descriptor open on ``path``, as the
    kernel names it (/proc/PID/fd links). False when that cannot be read: the
    process is gone, or another user's and we are not root."""
    fd_dir = b"/proc/%d/fd" % pid
    # a name whose kernel dentry was invalidated (the watcher does, when a branch
    # changes) reads as unlinked although the file still has that name
    dropped = path + b" (deleted)"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(fd_dir + b"/" + name) in (path, dropped):
                return True
        except OSError:
            continue  # closed meanwhile
    return False
