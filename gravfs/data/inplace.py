"""Big data objects of a local-directory store, read where they lie.

The store's file is local already: copying it into the tier would double the disk
it takes, and reading it by ranges through the chunk cache cost the daemon a file
open, a 4 MiB allocation and a copy per range (1 s of CPU in a cold Spark scan of
320 MB on 2 cores). A handle instead keeps one descriptor of the file, with the
kernel's read-ahead, and preads what the kernel asks for. How such reads are
checked is told in ``InPlaceObject``.

All methods block; the reader calls them from worker threads.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from array import array
from collections.abc import Callable

from gravfs import threadwork
from gravfs.data import chunksums
from gravfs.data.nowait import pread_cached
from gravfs.data.objects import DataObjects, digest_of, hash_file
from gravfs.errors import CorruptDataError, NotFoundError

log = logging.getLogger(__name__)
# Read this much of an object (or half of a smaller one) and the pass starts: whoever
# has read 64 MiB most likely reads it all (cp, a scan), and the pass then runs beside
# the reads (it fetches ahead of them, too) instead of after half of them.
VERIFY_AFTER = 64 << 20


def open_sequential(path: str) -> int:
    """A descriptor of a local file that will be read front to back (kernel read-ahead
    doubled); raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except OSError:
        pass
    return fd


class InPlaceObject:
    """One big object read in place, shared by its handles.

    Checked against the chunk sums an earlier full verification recorded, when
    there are any (CRC32C per chunk on first read). Otherwise reads are served at
    once, and once half of the object or ``VERIFY_AFTER`` bytes, whichever is less,
    have been read (by any handles) one background pass hashes the whole file; it
    records the sums for later processes, or marks the object corrupt. Reading a
    few bytes of a 10 GiB file does not start a 10 GiB hash; as on the ranged path,
    such reads go unverified. Reads the page cache can answer at once are served
    on the event loop's thread (``read_nowait``), the others on a worker.
    A whole-file reader learns of damage before it finishes: a handle that has
    read at least half of the object waits for that pass before its read of the
    last byte, so ``cp`` or ``cat`` of a damaged object fails. (Half, not all: the
    kernel's parallel reads can answer the last range before some middle ones.)
    """

    __slots__ = ("path", "size", "checks", "bytes_read", "started", "done")

    def __init__(self, path: str, size: int, checks: chunksums.ChunkChecks | None):
        self.path, self.size, self.checks = path, size, checks
        self.bytes_read = 0  # by every handle, until the verification starts
        self.started = False
        self.done = threading.Event()  # the background verification finished (either way)
        if checks is not None:
            self.done.set()


class InPlaceReads:
    """The in-place objects of one reader, and their background verification."""

    def __init__(self, data: DataObjects, refuse: Callable[[str, str], None], corrupt: set[str],
                 recorded_sums: Callable[[str, int], chunksums.ChunkChecks | None]):
        self.data = data
        self._refuse = refuse  # the reader's: marks the object corrupt for every path
        self._corrupt = corrupt
        self._recorded_sums = recorded_sums
        self._lock = threading.Lock()
        self._objects: dict[str, InPlaceObject] = {}
        self._to_verify: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def open(self, address: str, size: int, path: str) -> tuple[int, InPlaceObject]:
        """A new handle's descriptor of the object's file, and the object's shared state."""
        fd = self._open(address, size, path)
        return fd, self._object(address, size, path)

    def close(self) -> None:
        self._to_verify.put(None)

    def _open(self, address: str, size: int, path: str) -> int:
        try:
            fd = open_sequential(path)
        except FileNotFoundError:
            raise NotFoundError(f"data object {address} not found in {self.data.store.url}") from None
        found = os.fstat(fd).st_size
        if found != size:
            os.close(fd)
            self._refuse(address, f"its file in the store has {found} bytes, expected {size}")
            raise CorruptDataError(f"data object {address} does not match its hash")
        return fd

    def _object(self, address: str, size: int, path: str) -> InPlaceObject:
        with self._lock:
            obj = self._objects.get(address)
            if obj is not None:
                return obj
        obj = InPlaceObject(path, size, self._recorded_sums(address, size))
        with self._lock:
            if len(self._objects) > 4096:  # forget old ones: at worst a verification again
                self._objects = {a: o for a, o in self._objects.items() if not o.done.is_set()}
            obj = self._objects.setdefault(address, obj)
        log.debug("reading %s in place from %s (%s)", address, path,
                  "chunk sums" if obj.checks is not None else "verified in the background")
        return obj

    def read(self, obj: InPlaceObject, address: str, fd: int, offset: int, length: int,
             count: Callable[[int], int]) -> bytes:
        """``count(n)``: the reading handle's bytes read so far, after these ``n``."""
        if obj.checks is not None:
            try:
                return obj.checks.pread(fd, offset, length)
            except chunksums.ChunkMismatch as m:
                self._refuse(address, f"chunk {m.index} does not match its sum")
                raise CorruptDataError(f"data object {address} does not match its hash",
                                       path=obj.path, offset=m.offset) from None
        most = 2 * count(length) >= obj.size
        if not obj.started:
            self._verify_in_background(address, obj, length)
        if most and offset + length >= obj.size:
            obj.done.wait()  # a whole-file reader must not reach EOF on unverified content
            if address in self._corrupt:
                raise CorruptDataError(f"data object {address} does not match its hash")
        return os.pread(fd, length, offset)

    def read_nowait(self, obj: InPlaceObject, address: str, fd: int, offset: int, length: int,
                    count: Callable[[int], int]) -> bytes | bytearray | None:
        """``read`` on the event loop's thread, when it waits for nothing: no chunk sums
        to check, no verification to wait for, and the bytes in the page cache already
        (``RWF_NOWAIT``: a miss starts the kernel's read-ahead and returns at once).
        None: use ``read`` on a worker."""
        if obj.checks is not None or offset + length >= obj.size:
            return None
        buf = pread_cached(fd, length, offset)
        if buf is None:
            return None
        count(length)
        if not obj.started:
            self._verify_in_background(address, obj, length)
        return buf

    def _verify_in_background(self, address: str, obj: InPlaceObject, length: int) -> None:
        """Count a read; the one that passes VERIFY_AFTER (or half) queues the pass."""
        with self._lock:
            if obj.started:
                return
            obj.bytes_read += length
            if obj.bytes_read < min(obj.size // 2, VERIFY_AFTER):
                return
            obj.started = True
            if self._thread is None:  # a daemon thread: a long hash never holds up exit
                self._thread = threading.Thread(target=self._verify_loop, daemon=True,
                                                  name="gravfs-verify")
                self._thread.start()
        self._to_verify.put((address, obj))

    def _verify_loop(self) -> None:
        while True:
            item = self._to_verify.get()
            if item is None:
                return
            self._verify(*item)

    @threadwork.marked  # a read may wait for it: the event loop does not busy-poll meanwhile
    def _verify(self, address: str, obj: InPlaceObject) -> None:
        sums = array("I")
        try:
            digest, size = hash_file(obj.path, sums=sums)
        except OSError as exc:  # its reads will most likely fail too; none waits forever
            log.warning("could not verify %s in place: %s", address, exc)
        else:
            if digest != digest_of(address) or size != obj.size:
                self._refuse(address, f"its file in the store hashes to {digest[:16]}...")
            else:
                self.data.keep_sums(address, size, sums)
                log.debug("verified %s in place (%d bytes)", address, size)
        obj.done.set()
