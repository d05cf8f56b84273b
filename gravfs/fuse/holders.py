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


def mount_users(mountpoint: str, limit: int = 5) -> list[str]:
    """Up to ``limit`` processes using the mount (``comm (pid N, what)``): a working
    directory, root or open descriptor in it, read from /proc without touching the
    mount. For an unmount the kernel refuses as busy: whom to stop. Another user's
    processes are seen by root only."""
    inside = os.fsencode(mountpoint.rstrip("/") or "/")
    prefix = inside + b"/"
    me = os.getpid()
    found = []
    for entry in os.scandir(b"/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        base = b"/proc/" + entry.name
        what = None
        for link, said in ((b"/cwd", "working directory"), (b"/root", "root directory")):
            try:
                target = os.readlink(base + link)
            except OSError:
                continue
            if target == inside or target.startswith(prefix):
                what = said
                break
        if what is None:
            try:
                fds = os.listdir(base + b"/fd")
            except OSError:
                fds = []
            for fd in fds:
                try:
                    target = os.readlink(base + b"/fd/" + fd)
                except OSError:
                    continue
                if target == inside or target.startswith(prefix):
                    what = "an open file"
                    break
        if what is None:
            continue
        try:
            with open(base + b"/comm", "rb") as f:
                comm = f.read().strip().decode(errors="replace")
        except OSError:
            comm = "?"
        found.append(f"{comm} (pid {int(entry.name)}, {what})")
        if len(found) >= limit:
            break
    return found
