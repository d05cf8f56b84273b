"""The kernel's caches in tests: whether a file's pages can leave the page cache, making
them leave, and whether a path opens from the dentry cache alone."""

from __future__ import annotations

import os


def fs_type(path: str) -> str:
    """The type of the filesystem holding path (the longest mount point above it)."""
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fstype = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, fstype
    return kind


def pages_droppable(path: str) -> bool:
    """False on tmpfs and ramfs, whose pages are the storage itself."""
    return fs_type(path) not in ("tmpfs", "ramfs")


def drop_pages(path: str) -> None:
    """The file's pages out of the page cache (written back first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


NO_CACHED_OPENS = "this kernel has no openat2 with RESOLVE_CACHED (Linux 5.12+)"


def cached_opens_work(directory: str) -> bool:
    """Whether this kernel opens a file from the dentry cache alone (openat2 with
    RESOLVE_CACHED, Linux 5.12+; a seccomp filter may refuse it): the event loop's
    reads of cached files need it (gravfs.data.nowait)."""
    from gravfs.data import nowait

    probe = os.path.join(directory, ".cached-open-probe")
    with open(probe, "wb") as f:
        f.write(b"x")
    try:
        os.stat(probe)
        fd = nowait.open_cached(probe)
    finally:
        os.unlink(probe)
    if fd is None:
        return False
    os.close(fd)
    return True
