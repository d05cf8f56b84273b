"""Local file reads that never wait for the disk, for the mount's event-loop thread.

A read the kernel can answer from its caches costs microseconds; sending it to a
worker thread and back costs a hundred or more on a small machine, so the reader
first tries it here and goes to a worker only when the disk would be needed.
Both the path walk (``openat2`` with ``RESOLVE_CACHED``, Linux 5.12+) and the read
(``preadv2`` with ``RWF_NOWAIT``, Linux 4.14+) fail at once instead of waiting;
where the kernel (or a container's seccomp filter) lacks either, every call
answers None and the caller takes its blocking path.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os

log = logging.getLogger(__name__)

_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
# syscall(2) takes longs: passed as such, not as ctypes' default C int
_SYS_OPENAT2 = ctypes.c_long(437)  # one number on every Linux architecture (the unified table)
_AT_FDCWD = ctypes.c_long(-100)
_RESOLVE_CACHED = 0x20


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_HOW = _OpenHow(os.O_RDONLY | os.O_CLOEXEC, 0, _RESOLVE_CACHED)
_HOW_SIZE = ctypes.c_size_t(ctypes.sizeof(_OpenHow))


def _syscall():
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_call = _syscall() if os.uname().sysname == "Linux" else None


def open_cached(path: str) -> int | None:
    """A read-only descriptor of ``path`` if its walk needs no disk read, else None
    (not cached, not there, or no ``openat2``: the caller opens it on a worker)."""
    global _call
    if _call is None:
        return None
    fd = _call(_SYS_OPENAT2, _AT_FDCWD, os.fsencode(path), ctypes.byref(_HOW), _HOW_SIZE)
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
        _call = None  # no openat2 here (old kernel, seccomp): stop asking
        log.debug("openat2 with RESOLVE_CACHED unavailable (%s): small reads use workers",
                  os.strerror(err))
    return None


def pread_cached(fd: int, length: int, offset: int) -> bytearray | None:
    """``length`` bytes at ``offset`` if the page cache holds them all, else None (a
    miss starts the kernel's read-ahead and returns at once; a short read is a miss
    too: a short reply would read as the end of the file)."""
    if not _NOWAIT:
        return None
    buf = bytearray(length)
    try:
        n = os.preadv(fd, (buf,), offset, _NOWAIT)
    except OSError:  # EAGAIN; EOPNOTSUPP, EINVAL: the blocking read says what is wrong
        return None
    return buf if n == length else None
