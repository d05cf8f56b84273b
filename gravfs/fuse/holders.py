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
    # a name whose kernel dentry was invalidated (the watcher does, when a branch
    # changes) reads as unlinked although the file still has that name
    # (str: a directory descriptor lists str names, whose links read as str)
    name_now, dropped = os.fsdecode(path), os.fsdecode(path + b" (deleted)")
    try:
        fd_dir = os.open(b"/proc/%d/fd" % pid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:  # links read relative to the open directory: no path walk per descriptor
        for name in os.listdir(fd_dir):
            try:
                if os.readlink(name, dir_fd=fd_dir) in (name_now, dropped):
                    return True
            except OSError:
                continue  # closed meanwhile
        return False
    except OSError:
        return False  # the process ended while its descriptors were listed
    finally:
        os.close(fd_dir)
