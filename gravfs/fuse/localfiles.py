"""Where the mount's local copies live: their names, and empty files made ahead.

Every file the mount creates or writes gets a local copy in the daemon's own
directory, so every create allocates an inode there. On ext4 that costs about
20 us, and several hundred for a minute or more after thousands of files in the
same block group were deleted (the allocator steps over every recently deleted
inode): a cache eviction, a job replacing its outputs. A thread keeps a few
empty files made ahead, so a create on the event loop takes one (no system
call) and the allocation runs on another core. When the thread cannot keep up
or cannot create files (a full disk, a read-only directory), copies are
created where needed as before, and that request reports the error.

The thread makes each batch in the other of two subdirectories than the last: a
close moves its copy out of the directory it was made in (into pending uploads),
and a rename waits for the create that holds that directory: with one directory a
close's move took 40-113 µs, with two 18-65 (docs/benchmarks-mount.md, twenty-fifth
round).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
from typing import Optional

from gravfs.cleanup import unlink_quiet
from gravfs.store import modes

log = logging.getLogger(__name__)

SPARES = 64  # empty files kept ready
REFILL_BELOW = 32  # the thread wakes when fewer are left
RETRY_AFTER = 5.0  # seconds the thread waits after failing to create one
AHEAD_DIRS = ("ahead0", "ahead1")  # subdirectories the batches take turns in
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_NAMES = itertools.count()
_PID = os.getpid()  # (os.getpid() is a system call each time)


def _note_pid() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_note_pid)  # a forked child names its files apart


class LocalFiles:
    """A daemon's private directory of local copies (see the module doc)."""

    def __init__(self, directory: str, spares: int = SPARES, refill_below: int = REFILL_BELOW):
        self.directory = directory
        self.spares = spares
        self.refill_below = refill_below
        self._ready: collections.deque[tuple[str, int]] = collections.deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def new_path(self, directory: Optional[str] = None) -> str:
        """A name no other file of this daemon's directory (or ``directory``, one of its
        batches') has."""
        return os.path.join(directory or self.directory, "%x-%x" % (_PID, next(_NAMES)))

    def create(self) -> tuple[str, int]:
        """A new empty file opened read-write: (path, fd). A spare if one is ready."""
        try:
            spare = self._ready.popleft()
        except IndexError:
            spare = None
        if self._thread is not None and len(self._ready) < self.refill_below:
            self._wake.set()
        if spare is not None:
            return spare
        return self.create_here()

    def create_here(self) -> tuple[str, int]:
        """A new empty file made now (never a spare, whose name may be gone with its
        batch's directory); the daemon's directory is made again if it was removed."""
        path = self.new_path()
        try:
            return path, os.open(path, _FLAGS, 0o600)
        except FileNotFoundError:
            # made again with its parent (the workspace's files/), not when the workspace
            # itself is gone: its staging went with it, nothing here can be kept
            if not self.directory or not os.path.isdir(
                    os.path.dirname(os.path.dirname(self.directory))):
                raise
            log.warning("the mount's directory of local copies %s was removed; making it "
                        "again", self.directory)
            modes.make_dir(self.directory)
            self._drop_spares()  # their names went with it
            return path, os.open(path, _FLAGS, 0o600)

    def _drop_spares(self) -> None:
        while True:
            try:
                _path, fd = self._ready.popleft()
            except IndexError:
                return
            os.close(fd)

    def start(self) -> None:
        """Keep spares from now on (the daemon; handlers work without)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="gravfs-spares", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop making spares and remove those not taken."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        while self._ready:
            path, fd = self._ready.popleft()
            os.close(fd)
            unlink_quiet(path)
        for sub in AHEAD_DIRS:  # empty unless a copy made there is still open
            try:
                os.rmdir(os.path.join(self.directory, sub))
            except OSError:
                pass

    def _fill(self) -> None:
        failing = False
        turn = 0
        while not self._stop.is_set():
            self._wake.clear()  # before filling: a wake-up meanwhile means another pass
            # the spares left are the last batch's: this batch goes to the other directory
            directory = os.path.join(self.directory, AHEAD_DIRS[turn])
            turn ^= 1
            try:
                if len(self._ready) < self.spares:
                    _make_dir(directory)
                while len(self._ready) < self.spares and not self._stop.is_set():
                    path = self.new_path(directory)
                    self._ready.append((path, os.open(path, _FLAGS, 0o600)))
            except OSError as exc:
                if not failing:
                    log.warning("cannot make empty files ahead in %s (%s); creates make their "
                                "own until it works again", self.directory, exc)
                failing = True
                self._stop.wait(RETRY_AFTER)
                continue
            if failing:
                log.info("making empty files ahead in %s again", self.directory)
                failing = False
            self._wake.wait()


def _make_dir(path: str) -> None:
    """A batch's directory (its parent, the daemon's, must exist: else the error is the
    create's)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
