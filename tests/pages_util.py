"""The kernel's caches in tests: whether a file's pages can leave the page cache, making
them leave, and whether a path opens from the dentry cache alone."""

from __future__ import annotations

import ctypes
import mmap
import os
import time


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
    """The file's pages out of the page cache (written back first). The kernel skips
    pages it holds a reference to for a moment (an LRU batch), so this asks again until
    mincore(2) finds none resident."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(200):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not resident_pages(fd):
                return
            time.sleep(0.005)
        raise AssertionError(f"the kernel kept {resident_pages(fd)} page(s) of {path} cached")
    finally:
        os.close(fd)


def answers_after_drops(path: str, probe, times: int = 200) -> list:
    """probe()'s answers, each right after the file's pages were dropped, up to the first
    miss (None). A read that must not wait (RWF_NOWAIT) misses then, but its miss starts
    the kernel's read-ahead, which a fast disk can finish before the kernel looks again,
    and then the read gets the bytes (20 probes in a row did so once in about 30 runs of
    a 10 kB file): a caller asserts a miss among the answers, not in each, and that
    every answer given is right."""
    answers = []
    for _ in range(times):
        drop_pages(path)
        answers.append(probe())
        if answers[-1] is None:
            break
    return answers


def resident_pages(fd: int) -> int:
    """Pages of the file in the page cache, by mincore(2) of a mapping (which reads none)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap for mincore")
    try:
        vec = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        if libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(b & 1 for b in vec.raw)
    finally:
        libc.munmap(addr, size)


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
