"""The pass over a file's bytes that names its content, and one that follows a writer.

A file's address is the SHA-256 of its bytes, and a file holding a hole's worth of
all-zero grid chunks is stored sparse (gravfs.data.sparse): both come from one pass
over the file in grid chunks (``ContentPass``). ``DataObjects.put_path`` makes that
pass when a file is stored. A big file's close used to make it too, reading the whole
local copy back while the writer waited in close(2) (SHA-256 runs at ~1.3 GB/s here:
0.8 s a GiB). ``FollowingPass`` makes the same pass on a thread while the file is
written in order, reading back each whole grid chunk once it is written (from the page
cache), so the close has only the last chunk left. Anything but an append at the end
of what was written makes it give up (``abandon``); the close then reads the file as
before, so the address never depends on which pass ran.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Optional

from gravfs import hashing
from gravfs.data import sparse
from gravfs.data.readahead import ReadAhead

log = logging.getLogger(__name__)

IDLE_EXIT = 2.0  # seconds without new chunks before the thread ends (a later write restarts it)


class ContentPass:
    """SHA-256 and zero-chunk runs of bytes fed in order, one grid chunk at a time (the
    last may be short)."""

    __slots__ = ("_h", "size", "_run", "found")

    def __init__(self) -> None:
        self._h = hashing.hasher()
        self.size = 0
        self._run = 0  # bytes of all-zero grid chunks in a row, up to here
        self.found = False  # a run of at least sparse.MIN_HOLE bytes was seen

    def feed(self, chunk: bytes) -> None:
        self._h.update(chunk)
        self.size += len(chunk)
        self._run = self._run + len(chunk) if sparse.is_zero(chunk) else 0
        self.found = self.found or self._run >= sparse.MIN_HOLE

    def copy(self) -> "ContentPass":
        other = ContentPass.__new__(ContentPass)
        other._h = self._h.copy()
        other.size, other._run, other.found = self.size, self._run, self.found
        return other

    def result(self) -> tuple[str, int, bool]:
        """(hex digest, size, whether a hole's worth of zero grid chunks is there)."""
        return self._h.hexdigest(), self.size, self.found

    def read_rest(self, fd: int, end: Optional[int] = None) -> bool:
        """Feed the file's bytes from here to ``end`` (None: its end). False when the file
        ends before ``end``."""
        # (a pass to ``end`` follows a writer: what it reads was just written, cached)
        ahead = ReadAhead(fd) if end is None else None
        while end is None or self.size < end:
            want = sparse.GRID if end is None else min(sparse.GRID, end - self.size)
            buf = os.pread(fd, want, self.size)
            if not buf:
                return end is None
            if len(buf) < want and end is not None:
                return False
            if ahead is not None and len(buf) == sparse.GRID:
                ahead.past(self.size + len(buf))
            self.feed(buf)
        return True


def content_pass(fd: int) -> tuple[str, int, bool]:
    """(hex digest, size, zero run found) of an open file, in one pass."""
    p = ContentPass()
    p.read_rest(fd)
    return p.result()


def copying_pass(fd: int, out: int, out_path: str | None = None) -> tuple[str, int, bool]:
    """content_pass of ``fd`` that also writes the bytes it names to ``out`` (all-zero
    grid chunks left as holes): the copy holds exactly what the digest names, however
    another process writes to ``fd`` meanwhile. A write error names ``out_path`` (a
    full disk's error names no file, and one read as the source's sent users to the
    wrong disk)."""
    p = ContentPass()
    ahead = ReadAhead(fd)
    while True:
        buf = os.pread(fd, sparse.GRID, p.size)
        if not buf:
            break
        if len(buf) == sparse.GRID:  # more may follow
            ahead.past(p.size + len(buf))
        if not sparse.is_zero(buf):
            try:
                pwrite_all(out, buf, p.size)
            except OSError as e:
                raise OSError(e.errno, e.strerror, out_path) from e
        p.feed(buf)
    os.ftruncate(out, p.size)
    return p.result()


def pwrite_all(fd: int, data: bytes, pos: int) -> None:
    """os.pwrite until all of ``data`` is written at ``pos``."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        pos += n
        view = view[n:]


class FollowingPass:
    """A ContentPass over a file written in order, on a thread, a grid chunk behind the
    writer. The writer calls ``advance`` after each in-order write (under the lock that
    orders its writes), ``finish`` at a close (same lock), ``abandon`` when it writes out
    of order, truncates or drops the file. Reads through its own duplicate descriptor."""

    def __init__(self, fd: int, name: str = ""):
        self._fd = os.dup(fd)
        self._name = name
        self._pass = ContentPass()
        self._written = 0  # bytes written in order: the thread hashes whole chunks of them
        self._valid = True
        self._held = False  # finish is using the pass: the thread waits
        self._working = False  # the thread is reading or hashing (outside the lock)
        self._thread: Optional[threading.Thread] = None
        self._cond = threading.Condition()

    def advance(self, written: int) -> None:
        """The file now holds ``written`` bytes written in order from its start."""
        with self._cond:
            if not self._valid:
                return
            ready = self._ready()
            self._written = written
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="gravfs-content-pass")
                self._thread.start()
            elif self._ready() != ready:  # a whole chunk more: wake the thread (not per write)
                self._cond.notify_all()

    def _ready(self) -> int:
        """Where the thread may hash up to (whole grid chunks written), under the lock."""
        return self._written - self._written % sparse.GRID

    def _run(self) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    while self._valid and (self._held or self._pass.size >= self._ready()):
                        if not cond.wait(IDLE_EXIT) and not self._held:
                            if self._pass.size >= self._ready():
                                self._thread = None  # the next advance starts another
                                return
                    if not self._valid:
                        return
                    upto = self._ready()
                    self._working = True
                try:
                    ok = self._pass.read_rest(self._fd, upto)  # (the GIL is let go in both)
                except Exception as exc:  # the pass may be half fed: the close hashes whole
                    log.debug("content pass of %s stopped: %s", self._name, exc)
                    ok = False
                with cond:
                    self._working = False
                    if not ok:
                        self._valid = False
                    cond.notify_all()
        finally:
            with cond:
                self._working = False
                if self._thread is threading.current_thread():
                    self._thread = None
                self._close_if_done()
                cond.notify_all()

    def finish(self, size: int) -> Optional[tuple[str, int, bool]]:
        """The pass over the file's first ``size`` bytes, all written in order (the
        caller holds the writes' lock): what the thread has not done is done here. None
        when the pass was abandoned. The pass goes on from its last whole chunk."""
        cond = self._cond
        with cond:
            self._held = True
            while self._working:
                cond.wait()
            if not self._valid or size != self._written or self._pass.size > size:
                self._held = False
                self._close_if_done()
                cond.notify_all()
                return None
            tail = self._pass.copy()
        try:
            ok = tail.read_rest(self._fd, size)
        except Exception as exc:
            log.debug("content pass of %s not finished: %s", self._name, exc)
            ok = False
        with cond:
            self._held = False
            ok = ok and self._valid
            self._close_if_done()
            cond.notify_all()
        return tail.result() if ok else None

    def abandon(self) -> None:
        """Stop for good (its descriptor is closed now, or by the thread as it ends)."""
        with self._cond:
            self._valid = False
            self._close_if_done()
            self._cond.notify_all()

    def _close_if_done(self) -> None:
        """Close the descriptor once abandoned and nothing reads through it (under the
        lock): never while a read is under way, whose descriptor could be another file's
        by then."""
        if not self._valid and self._thread is None and not self._held and self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
