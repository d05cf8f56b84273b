"""Turning exceptions into errno values, so no handler ever lets one escape.

pyfuse3 tears the mount down when a handler raises anything but FUSEError,
so every request handler is wrapped by :func:`guarded`: gravfs errors map to
the errno a shell user expects, OSErrors keep theirs, anything else is logged
with its traceback and answered with EIO.
"""

from __future__ import annotations

import errno
import functools
import logging

import time

import pyfuse3

from gravfs.errors import (AlreadyExistsError, AmbiguousRefError, BadNameError, ConflictError,
                           CorruptDataError, GravfsError, NotFoundError,
                           PreconditionFailedError, ReadOnlyError, StoreUnavailableError,
                           TreeGoneError)
from gravfs.fuse import opstats
from gravfs.fuse.spin import noter

log = logging.getLogger(__name__)

_BY_CLASS: list[tuple[type, int]] = [
    (TreeGoneError, errno.EIO),  # (a NotFoundError, but no answer about the path)
    (NotFoundError, errno.ENOENT),
    (AlreadyExistsError, errno.EEXIST),
    (AmbiguousRefError, errno.ENOENT),
    (BadNameError, errno.EINVAL),
    (ReadOnlyError, errno.EROFS),
    (ConflictError, errno.EBUSY),
    (PreconditionFailedError, errno.EBUSY),
    (StoreUnavailableError, errno.EIO),
    (CorruptDataError, errno.EIO),
]


def errno_of(exc: BaseException) -> int:
    """The errno a failed request answers with."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc.errno
    if isinstance(exc, GravfsError):
        own = getattr(exc, "errno", None)
        if isinstance(own, int) and own > 0:  # e.g. PathTypeError carries its errno
            return own
        for cls, code in _BY_CLASS:
            if isinstance(exc, cls):
                if code == errno.EINVAL and "longer than" in str(exc):
                    return errno.ENAMETOOLONG
                return code
        text = str(exc)
        if "not a directory" in text:
            return errno.ENOTDIR
        if "not empty" in text:
            return errno.ENOTEMPTY
        return errno.EIO
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        return errno.ENFILE  # the daemon's table is full, not the caller's: "in system"
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return errno.EIO


_said_full_at = float("-inf")
FULL_EVERY = 60.0  # seconds between two warnings of a full descriptor table


def _table_full(handler: str) -> None:
    """Say (once a minute) why opens fail: only the daemon's log can."""
    global _said_full_at
    now = time.monotonic()
    if now - _said_full_at < FULL_EVERY:
        return
    _said_full_at = now
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.warning("%s: this daemon's open-file limit (%s) is reached: files opened through "
                "the mount fail with ENFILE until others close; raise its hard limit "
                "(LimitNOFILE= in its systemd unit, or ulimit -Hn before gravfs mount; "
                "hard limit now %s)", handler, soft, hard)


def fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


def guarded(fn):
    """Wrap an async request handler: only FUSEError ever leaves it (and the request
    keeps the event loop polling, see gravfs.fuse.spin)."""
    note = noter(fn.__name__)

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        note()
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (GravfsError, OSError) as exc:
            code = errno_of(exc)
            if code == errno.EBADF and isinstance(exc, OSError):  # our own fd misuse: a bug
                log.exception("%s: internal error (answered EBADF)", fn.__name__)
            elif code == errno.ENFILE:
                _table_full(fn.__name__)
            else:
                level = logging.ERROR if code == errno.EIO else logging.DEBUG
                log.log(level, "%s: %s -> %s", fn.__name__, exc, errno.errorcode.get(code, code))
            raise pyfuse3.FUSEError(code) from None
        except Exception:
            log.exception("%s: unexpected error (answered EIO)", fn.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return _timed(wrapper, fn.__name__)


def _timed(wrapper, name: str):
    """The handler counted and timed (only with GRAVFS_OPSTATS set, see opstats)."""
    if not opstats.enabled():
        return wrapper

    @functools.wraps(wrapper)
    async def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return await wrapper(*args, **kwargs)
        finally:
            opstats.record(name, time.perf_counter() - t)

    return timed


def quiet(fn):
    """Wrap a handler that must not raise at all (forget, release, releasedir)."""
    note = noter(fn.__name__)

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        note()
        try:
            return await fn(*args, **kwargs)
        except Exception:
            log.exception("%s failed", fn.__name__)

    return _timed(wrapper, fn.__name__)
