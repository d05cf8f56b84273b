"""File contents as content-addressed objects: ``data/<aa>/<sha256>``.

Writing streams the bytes through SHA-256 (never holding a file in memory)
and uploads only content the store lacks, so identical files on any branch
share one object. Reads go through the local tier and are verified against
the name, so a corrupted cached copy is refetched rather than served.

Write-back (the mount): ``put_pending`` moves a closed local file into the
workspace's ``pending/<aa>/<sha256>`` and returns its address at once; a
small uploader pool stores it in the background and only then removes the
pending file, so at every moment an address is either pending here or in
the store. Reads look in pending first. On a remote store the uploaded file
stays in the local tier as a verified copy (``_keep_written``): what was just
written is what the next job reads, and it costs no download then. Any process
of the workspace may drain pending uploads (``flush_pending``: a commit drains
those it references), concurrently with others: uploads are idempotent
(content-addressed), and one object is uploaded by one process at a time (the
others wait for it).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import queue
import shutil
import stat
import tempfile
import threading
import time
from array import array
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import BinaryIO, Iterator, NamedTuple, Optional

from gravfs import hashing
from gravfs.cleanup import unlink_quiet
from gravfs.data import chunksums, sparse
from gravfs.data.checkedread import ChangedWhileRead, CheckedReader
from gravfs.data.contentpass import content_pass, copying_pass
from gravfs.data.external import reader_for
from gravfs.data.handles import BytesHandle, Handle, PendingHandle
from gravfs.data.nowait import open_cached, pread_cached
from gravfs.data.readahead import ReadAhead
from gravfs.errors import CorruptDataError, GravfsError
from gravfs.faults import crash_point
from gravfs.store.modes import make_dir, private_dir
from gravfs.threadmap import ordered_map

log = logging.getLogger(__name__)

CHUNK = 1 << 20
PREFIX = "data/"
# With the tier's disk full, objects up to this size are read into memory
# (verified) instead of failing: a full disk must not stop reads.
UNCACHED_MAX = 64 << 20
# An uploaded file stays in the local tier if it takes at most this share of the
# tier's budget: one big file must not push out everything the tier holds.
KEEP_WRITTEN_SHARE = 8
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def address_of(digest_hex: str) -> str:
    return f"{PREFIX}{digest_hex[:2]}/{digest_hex}"


def digest_of(address: str) -> str:
    return address.rsplit("/", 1)[-1]


def _read_whole(path: str, size: int, nowait: bool = False) -> Optional[bytes]:
    """The first ``size`` bytes of a local file; None if it is gone or, ``nowait``, if
    the kernel's caches cannot answer at once."""
    if nowait:
        fd = open_cached(path)
        if fd is None:
            return None
        try:
            buf = pread_cached(fd, size, 0)
        finally:
            os.close(fd)
        return None if buf is None else bytes(buf)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # not open(): no tty probe
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.pread(fd, size, 0)
    except IsADirectoryError:  # not an object: missing, as the store would say
        return None
    finally:
        os.close(fd)


def hash_file(path: str, fd: int = -1, sums: Optional[array] = None,
              size_hint: Optional[int] = None) -> tuple[str, int]:
    """(hex digest, size) of a local file, streamed; ``fd``: read that open descriptor.
    ``sums``: also append each chunk's CRC32C (the tier's chunk sums), in the same pass.
    ``size_hint``: the size a stat just gave; a file that small is read in one call of
    its size (not a chunk's buffer, and no second call to find the end)."""
    if fd < 0:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return hash_file(path, fd, sums, size_hint)
        finally:
            os.close(fd)
    if size_hint is not None and size_hint < chunksums.CHUNK:
        buf = os.pread(fd, size_hint + 1, 0)
        if len(buf) <= size_hint:  # a short read of a regular file: its end
            if sums is not None and buf:
                sums.append(chunksums.crc(buf))
            return hashing.hexdigest(buf), len(buf)
    h = hashing.hasher()
    size = 0
    while True:
        buf = os.pread(fd, chunksums.CHUNK, size)
        if not buf:
            break
        h.update(buf)
        if sums is not None:
            sums.append(chunksums.crc(buf))
        size += len(buf)
    return h.hexdigest(), size


# Tests pause the background uploader while this file exists (see tests/fuse/test_writeback.py).
PAUSE_ENV = "GRAVFS_TEST_UPLOAD_PAUSE_FILE"
RETRY_DELAY = 2.0
# Foreground first: background uploads wait while files are being written back
# (they would take the daemon's CPU and GIL), unless the backlog grows past these.
QUIET_BEFORE_UPLOAD = 0.05
BACKLOG_FILES = 20000
BACKLOG_BYTES = 1 << 30
DRAIN_WORKERS = 8  # parallel uploads when a commit drains the pending directory


def _flock_soon(fd: int, op: int, wait: float = 1.0) -> bool:
    """flock ``op`` on ``fd`` within ``wait`` seconds; False if it stays held. The writer
    lock's holders keep it for a mount's life or a collection's run; writer_running
    holds it for an instant, which must not make a mount starting then fail."""
    end = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)


class DataObjects:
    """The data plane's one object: stores, reads and verifies data objects of a store
    through its local tier (and the workspace's pending uploads)."""

    def __init__(self, store, tier, tmp_dir: str, pending_dir: Optional[str] = None):
        self.store, self.tier, self.tmp_dir = store, tier, tmp_dir
        self.external = reader_for(store)  # by-reference entries' sources (gravfs.data.external)
        if tier is not None and tier.sums is None:
            tier.sums = chunksums  # the tier keeps chunk sums of the objects it verifies
        self.pending_dir = pending_dir
        self._queue: Optional[queue.Queue] = None
        self._queued: set[str] = set()
        self._qlock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._failed_at = 0.0
        self._last_put = 0.0  # monotonic time of the last put_pending
        self._backlog_bytes = 0
        self._writer_lock: Optional[int] = None  # see start_uploader

    # -- write-back --------------------------------------------------------------------

    def pending_path(self, address: str) -> str:
        digest = digest_of(address)
        return os.path.join(self.pending_dir, digest[:2], digest)

    @property
    def writes_back(self) -> bool:
        """put_pending only moves the file (an uploader runs): no store access."""
        return self.pending_dir is not None and self._queue is not None

    def put_pending(self, path: str, durable: bool = False,
                    hashed: Optional[tuple[str, int]] = None) -> tuple[str, int]:
        """Move a local file (same filesystem as the workspace) into pending uploads;
        returns (address, size) at once. ``durable``: fsync the file and its directory.
        ``hashed``: its (hex digest, size), when the caller has them.

        Without an uploader running (or a pending directory) this stores synchronously.
        """
        if self.pending_dir is None or self._queue is None:
            return self.put_path(path)
        digest, size = hashed or hash_file(path)
        address = address_of(digest)
        dest = self.pending_path(address)
        if not durable and os.access(dest, os.F_OK):  # (no stat result, no exception)
            # the same content is pending already (it is removed only once uploaded):
            # renaming over it would make ext4 flush the new copy (auto_da_alloc)
            os.unlink(path)
            self._last_put = time.monotonic()
            return address, size
        if durable:
            _fsync_path(path)
        try:
            os.rename(path, dest)
        except FileNotFoundError:
            make_dir(os.path.dirname(dest))  # 0700: pending copies are the owner's only
            os.rename(path, dest)
        if durable:
            _fsync_path(os.path.dirname(dest))
        crash_point("writeback:pending-moved", address)
        self._last_put = time.monotonic()
        self._enqueue(address, size)
        return address, size

    def pending_handle(self, address: str) -> Optional[PendingHandle]:
        """The object's pending file, opened (None once uploaded, or never pending):
        the handle reads it even if its upload ends and removes the name meanwhile."""
        if self.pending_dir is None:
            return None
        path = self.pending_path(address)
        try:
            return PendingHandle(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            return None

    def sync_pending(self, address: str) -> None:
        """fsync a still pending object (an fsync after the close that staged it)."""
        if self.pending_dir is None:
            return
        dest = self.pending_path(address)
        try:
            _fsync_path(dest)
        except FileNotFoundError:
            return  # uploaded already: the store has it
        _fsync_path(os.path.dirname(dest))

    def pending_addresses(self) -> list[str]:
        if self.pending_dir is None:
            return []
        out = []
        try:
            subs = os.listdir(self.pending_dir)
        except FileNotFoundError:
            return []
        for sub in subs:
            try:
                names = os.listdir(os.path.join(self.pending_dir, sub))
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.extend(address_of(n) for n in names if len(n) == 64)
        return out

    def upload_pending(self, address: str) -> bool:
        """Store one pending object and remove its pending file; False when another
        process did it first (the file vanished: removed only after its upload).

        One upload of an object at a time, across processes: an uploader holds a lock
        on the pending file (flock) while it uploads, so a commit's drain that comes to
        an object the daemon's uploader is sending (a big file's may take minutes)
        waits for it and finds the name gone, rather than sending it a second time."""
        path = self.pending_path(address)
        crash_point("writeback:before-upload", address)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    return False  # uploaded meanwhile, and pending anew: its own upload follows
            except FileNotFoundError:
                return False  # uploaded meanwhile
            # the store takes the file as it can (a local directory: a hard link, so
            # removing the pending name frees no blocks) and claims an existing object
            self.store.put_file_if_absent(address, path)
            log.debug("uploaded pending %s", address)
            crash_point("writeback:uploaded", address)
            self._keep_written(address, path, os.fstat(fd).st_size)
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            return True
        finally:
            os.close(fd)  # (the lock goes with it)

    def _keep_written(self, address: str, path: str, size: int) -> None:
        """Link an uploaded pending file into the tier (before its pending name goes):
        on a remote store, reading back what was written would otherwise download
        it again. Not for a local-directory store, whose file this one now is: a tier
        copy is disposable (a damaged one is dropped and fetched again), the store's
        file is not, so the two never share an inode."""
        tier = self.tier
        if tier is None or self.store.local_path(address) is not None:
            return
        if size <= tier.budget_bytes // KEEP_WRITTEN_SHARE:
            try:
                tier.add_written(address, path)
            except Exception as exc:  # only a cached copy missed: the upload stands
                log.warning("uploaded %s but could not keep it in the local tier: %s",
                            address, exc)

    def flush_pending(self, addresses: Optional[list[str]] = None,
                      workers: int = DRAIN_WORKERS) -> int:
        """Upload pending objects (all of the workspace's unless ``addresses``);
        returns how many this call uploaded."""
        if addresses is None:
            addresses = self.pending_addresses()
        if not addresses:
            return 0
        if len(addresses) == 1 or workers <= 1:
            n = sum(1 for a in addresses if self.upload_pending(a))
        else:
            with ThreadPoolExecutor(min(workers, len(addresses)),
                                    thread_name_prefix="gravfs-drain") as pool:
                n = sum(1 for ok in ordered_map(pool, self.upload_pending, addresses, 16 * workers)
                        if ok)
        if n:
            log.info("uploaded %d pending data object(s)", n)
        return n

    def start_uploader(self, workers: int = 4) -> None:
        """Background uploads for put_pending (the daemon); queues what a dead one left."""
        if self.pending_dir is None or self._queue is not None:
            return
        private_dir(self.pending_dir)
        # held (shared) while this process writes back: garbage collection with a
        # minimum age under an hour holds it exclusively (writers_held_off) for its run
        fd = os.open(self._writer_lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not _flock_soon(fd, fcntl.LOCK_SH):
            os.close(fd)
            raise GravfsError(
                "garbage collection with a minimum age under an hour is running on this "
                "host for this store (it could delete what a mount stores meanwhile); "
                "mount when it has ended") from None
        self._writer_lock = fd
        self._queue = queue.Queue()
        threading.Thread(target=self._make_pending_dirs, name="gravfs-pending-dirs",
                         daemon=True).start()
        for i in range(workers):
            t = threading.Thread(target=self._work, name=f"gravfs-upload-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        self.requeue_pending()

    def _writer_lock_path(self) -> str:
        return self.pending_dir.rstrip("/") + ".lock"

    def writer_running(self) -> bool:
        """Whether a process of this workspace (a mount's daemon) runs an uploader: it
        writes to the store at any moment, reusing objects it finds stored. (True also
        while a garbage collection holds writers off.)"""
        with self.writers_held_off(wait=0.0) as held:  # (an instant: see _flock_soon)
            return not held

    @contextmanager
    def writers_held_off(self, wait: float = 1.0) -> Iterator[bool]:
        """Hold off uploaders of this workspace (a mount starting fails) meanwhile;
        yields False, holding nothing, when one runs already."""
        if self.pending_dir is None:
            yield True
            return
        try:
            fd = os.open(self._writer_lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # no workspace directory: no mount of it either
            yield True
            return
        try:
            yield _flock_soon(fd, fcntl.LOCK_EX, wait)
        finally:
            os.close(fd)  # (the lock goes with it)

    def _make_pending_dirs(self) -> None:
        """Make the pending directory's 256 subdirectories ahead of the first closes:
        a close that finds its subdirectory missing makes it on the event loop, and on
        ext4 a new workspace's mkdir there took about 1 ms each (a quarter of a second
        of its first writes). A failure here only leaves that to the closes."""
        try:
            have = set(os.listdir(self.pending_dir))
            for i in range(256):
                sub = "%02x" % i
                if sub not in have:
                    make_dir(os.path.join(self.pending_dir, sub))
        except OSError as exc:
            log.debug("pending subdirectories not made ahead: %s", exc)

    def requeue_pending(self) -> int:
        """Queue every pending object not queued yet (startup, retries after failures)."""
        if self._queue is None:
            return 0
        found = self.pending_addresses()
        for a in found:
            self._enqueue(a)
        return len(found)

    def retry_due(self) -> bool:
        return self._failed_at > 0 and time.monotonic() - self._failed_at >= RETRY_DELAY

    def stop_uploader(self, drain: bool = True) -> None:
        """Stop the pool; with drain, upload what is left first (errors leave it pending)."""
        q = self._queue
        if q is None:
            return
        with self._qlock:
            queued, size = len(self._queued), self._backlog_bytes
        if queued:
            log.info("finishing %d queued upload(s), %.1f MiB, before stopping", queued,
                     size / (1 << 20))
        for _ in self._workers:
            q.put(None)
        for t in self._workers:
            t.join()
        self._workers.clear()
        self._queue = None
        with self._qlock:
            self._queued.clear()
            self._backlog_bytes = 0
        try:
            if drain:
                self.flush_pending()
        except Exception as exc:
            log.warning("pending uploads stay pending (the next mount, or a commit that "
                        "takes them, uploads them): %s", exc)
        finally:
            if self._writer_lock is not None:
                os.close(self._writer_lock)
                self._writer_lock = None

    def _enqueue(self, address: str, size: int = 0) -> None:
        q = self._queue
        if q is None:
            return
        with self._qlock:
            if address in self._queued:
                return
            self._queued.add(address)
            self._backlog_bytes += size
        q.put((address, size))

    def _wait_for_quiet(self) -> None:
        """Let a burst of writes finish before uploading, within the backlog limits."""
        while time.monotonic() - self._last_put < QUIET_BEFORE_UPLOAD:
            with self._qlock:
                if len(self._queued) > BACKLOG_FILES or self._backlog_bytes > BACKLOG_BYTES:
                    return
            time.sleep(QUIET_BEFORE_UPLOAD)

    def _work(self) -> None:
        q = self._queue
        while True:
            item = q.get()
            if item is None:
                return
            address, size = item
            pause = os.environ.get(PAUSE_ENV)
            while pause and os.path.exists(pause):
                time.sleep(0.05)
            self._wait_for_quiet()
            with self._qlock:
                self._queued.discard(address)
                self._backlog_bytes -= size
            try:
                self.upload_pending(address)
            except Exception as exc:  # store outage: stays pending, retried later
                if self._failed_at == 0:
                    log.warning("background upload of %s failed (kept pending, retried): %s",
                                address, exc)
                self._failed_at = time.monotonic()
            else:
                self._failed_at = 0.0

    def put_path(self, path: str, passed: Optional[tuple[str, int, bool]] = None,
                 plan: Optional["StoragePlan"] = None, take: bool = False) -> tuple[str, int]:
        """Store a local file's content; returns (address, size). A file with holes
        (gravfs.data.sparse) is stored as its data extents and a manifest. ``passed``:
        the file's content pass (gravfs.data.contentpass), when a writer made it as it
        wrote; used if it covers the file's size. ``plan``: the file's storage plan, when
        the caller made it (``plan_storage``) and the file has not changed since.
        ``take``: the file is the caller's scratch, which the store may take
        (ObjectStore.take_file: a local store renames it, no copy); the caller removes
        it with unlink_quiet."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if plan is None:
                plan = plan_storage(fd, passed)
            if plan.holes:
                return self._put_sparse(fd, plan.size, plan.holes), plan.size
        finally:
            os.close(fd)
        address, size = address_of(plan.digest), plan.size
        if not self.store.claim_existing(address):  # dedup refreshes an old object (GC)
            (self.store.take_file if take else self.store.upload)(address, path)
            log.debug("uploaded %s (%d bytes)", address, size)
            crash_point("data:uploaded", address)
        return address, size

    def put_snapshot(self, fd: int, name: str = "") -> tuple[str, int]:
        """put_path of a file another process may write meanwhile (an import's source, a
        `gravfs put`). put_path reads a file twice, to name it and to upload it, and
        would publish bytes written in between under the first read's address (see
        gravfs.data.checkedread). On a local store the file is read once, into a
        scratch file on the store's file system named in the same pass, which becomes
        the object; elsewhere the upload's bytes are checked against the name before it
        completes, and when they changed, a private copy (in ``tmp_dir``) is stored
        instead. Either way the object holds what its address names; the caller
        compares the file's stat before and after to tell a torn read."""
        size = os.fstat(fd).st_size
        if size >= sparse.MIN_HOLE and sparse.has_physical_holes(fd, size):
            # each data extent is copied and named in one pass (_put_range): a change
            # leaves a torn manifest, which the caller's stat tells, never a bad object
            found = sparse.holes(fd, size)
            if found:
                return self._put_sparse(fd, size, found), size
        scratch = self.store.scratch_file(PREFIX)
        if scratch is None:
            try:
                return self._put_checked(fd, name)
            except ChangedWhileRead as exc:
                log.info("%s; storing a copy of it instead", exc)
                scratch = tempfile.mkstemp(dir=self.tmp_dir, prefix="snapshot-")
        out, tmp = scratch
        try:
            try:
                passed = copying_pass(fd, out, tmp)
            finally:
                os.close(out)
            return self.put_path(tmp, passed, take=True)
        finally:
            unlink_quiet(tmp)

    def _put_checked(self, fd: int, name: str) -> tuple[str, int]:
        """Name the file, then upload it read again through a CheckedReader."""
        plan = plan_storage(fd)
        if plan.holes:
            return self._put_sparse(fd, plan.size, plan.holes), plan.size
        address = address_of(plan.digest)
        if not self.store.claim_existing(address):
            self.store.upload_stream(address, CheckedReader(fd, plan.size, plan.digest, name),
                                     plan.size)
            log.debug("uploaded %s (%d bytes)", address, plan.size)
            crash_point("data:uploaded", address)
        return address, plan.size

    def _put_sparse(self, fd: int, size: int, found: list[tuple[int, int]]) -> str:
        """Store the data extents of a file with holes and their manifest; its address."""
        extents = tuple((off, n, self._put_range(fd, off, n))
                        for off, n in sparse.data_ranges(size, found))
        m = sparse.Manifest(size, extents)
        address = m.address
        if extents and not self.store.claim_existing(address):
            self.store.put(address, m.encode())
        log.debug("stored %s: %d bytes in %d extent(s), %d in holes", address,
                  sum(e[1] for e in extents), len(extents), sum(h[1] for h in found))
        return address

    def _put_range(self, fd: int, offset: int, length: int) -> str:
        """Store bytes [offset, offset+length) of an open file as a data object."""
        out, tmp = tempfile.mkstemp(dir=self.tmp_dir, prefix="extent-")
        try:
            h = hashing.hasher()
            pos, end = offset, offset + length
            ahead = ReadAhead(fd)
            while pos < end:
                buf = os.pread(fd, min(CHUNK, end - pos), pos)
                if not buf:
                    raise GravfsError(f"file shrank while it was stored ({pos} of {end} bytes)")
                if pos + len(buf) < end:
                    ahead.past(pos + len(buf))
                h.update(buf)
                view = memoryview(buf)
                while view:
                    view = view[os.write(out, view):]
                pos += len(buf)
            os.close(out)
            out = -1
            address = address_of(h.hexdigest())
            if not self.store.claim_existing(address):
                self.store.take_file(address, tmp)
                log.debug("uploaded %s (%d bytes at %d)", address, length, offset)
                crash_point("data:uploaded", address)
            return address
        finally:
            if out >= 0:
                os.close(out)
            unlink_quiet(tmp)

    def manifest(self, address: str) -> sparse.Manifest:
        """The (verified) manifest of a sparse file's address."""
        m = sparse.zeros_manifest(address)
        if m is not None:
            return m
        with self._acquire_object(address) as h:
            return sparse.Manifest.decode(h.read(0, h.size), address)

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        if len(data) >= sparse.MIN_HOLE and _zero_run(data):  # stored as put_path would
            fd, tmp = tempfile.mkstemp(dir=self.tmp_dir, prefix="put-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                return self.put_path(tmp, take=True)
            finally:
                unlink_quiet(tmp)
        address = address_of(hashing.hexdigest(data))
        if not self.store.claim_existing(address):
            self.store.put(address, data)
        return address, len(data)

    def put_stream(self, src: BinaryIO) -> tuple[str, int]:
        """Copy a stream to a scratch file while hashing, then store it."""
        fd, tmp = tempfile.mkstemp(dir=self.tmp_dir, prefix="put-")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
            return self.put_path(tmp, take=True)
        finally:
            unlink_quiet(tmp)

    def acquire(self, address: str, chunk_checked: bool = False) -> Handle:
        """Pinned tier handle of the object (fetched once, hash-verified), or the
        pending file while its upload has not finished.

        ``chunk_checked``: the caller only uses ``read``, so a big object verified
        by an earlier process may be served with its chunks checked as they are read
        (no full hash first; a damaged chunk raises CorruptDataError and drops it).
        A sparse file's address gives a handle over its extents (holes read as zeros).
        """
        if sparse.is_sparse(address):
            return sparse.SparseHandle(self.manifest(address),
                                       lambda a: self._acquire_object(a, chunk_checked))
        return self._acquire_object(address, chunk_checked)

    def _acquire_object(self, address: str, chunk_checked: bool = False) -> Handle:
        """acquire() of one stored object (a data object or a sparse manifest)."""
        pending = self.pending_handle(address)
        if pending is not None:
            return pending
        digest = digest_of(address)  # uploaded (or never pending): the tier fetches it

        def verify(path: str) -> array:
            sums = array("I")
            got, _ = hash_file(path, sums=sums)
            if got != digest:
                raise CorruptDataError(f"content hashes to {got[:16]}..., expected {digest[:16]}...",
                                       path=path)
            return sums  # kept by the tier for big objects: later processes check by chunk

        try:
            # a copy read chunk-checked is synced only where chunk sums may vouch for it
            # after a crash (big ones): a smaller one is checked in full after a crash
            return self.tier.acquire(address, verify=verify, chunk_checked=chunk_checked,
                                     durable=not chunk_checked)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            size = self.store.size(address)
            if size is None or size > UNCACHED_MAX:
                raise
            log.warning("local tier: no space left for %s (%d bytes); reading it uncached",
                        address, size)
            data = self.store.get(address)
            got = hashing.hexdigest(data)
            if got != digest:
                raise CorruptDataError(f"{address}: store content hashes to {got[:16]}...")
            return BytesHandle(data)

    # -- what readers of big objects ask (gravfs.data.reader) ----------------------------

    def cached(self, address: str) -> bool:
        """The local tier holds a copy of the object."""
        return self.tier.cached(address)

    def restore(self, address: str) -> bool:
        """Write a data object gone from the store again from this host's cached copy,
        if the copy hashes to its address; whether it did."""
        path = self.tier.cached_path(address)
        if path is None:
            return False
        try:
            digest, _ = hash_file(path)
            if address_of(digest) != address:
                log.warning("cached copy of %s does not match its address; not restored",
                            address)
                return False
            self.store.upload(address, path)
        except FileNotFoundError:
            return False  # evicted meanwhile
        log.warning("%s was gone from the store: written again from this host's cache",
                    address)
        return True

    def local_path(self, address: str) -> Optional[str]:
        """The object's file when the store is a local directory (read in place)."""
        return self.store.local_path(address)

    def read_small(self, address: str, size: int, nowait: bool = False) -> Optional[bytes]:
        """A small object's ``size`` bytes, checked against its hash, from a file on this
        disk: a local-directory store's own, else the tier's copy (counted as a use).
        None when neither is here (the caller acquires it: a fetch, or its pending
        file) or, ``nowait``, when the kernel's caches cannot answer at once
        (gravfs.data.nowait). A damaged tier copy is dropped (None: fetched again); a
        damaged store file raises CorruptDataError."""
        path = self.store.local_path(address)
        in_tier = path is None
        if in_tier and (path := self.tier.cached_path(address)) is None:
            return None
        data = _read_whole(path, size, nowait)
        if data is None or hashing.hexdigest(data) == digest_of(address):
            return data
        if in_tier:
            self.tier.discard(address, corrupt="its content hashes to another digest")
            return None
        raise CorruptDataError(f"data object {address} does not match its hash", path=path)

    def get_range(self, address: str, offset: int, length: int) -> bytes:
        """Bytes of the stored object, unverified (the caller verifies)."""
        return self.store.get_range(address, offset, length)

    def load_sums(self, address: str, size: int) -> Optional[chunksums.ChunkChecks]:
        """Chunk sums an earlier full verification recorded (None: none usable)."""
        return self.tier.load_sums(address, size)

    def keep_sums(self, address: str, size: int, sums: array) -> None:
        """Record the chunk sums of a fully verified object for later processes."""
        self.tier.keep_sums(address, size, sums)

    def read(self, address: str, offset: int = 0, length: int = -1) -> bytes:
        with self.acquire(address, chunk_checked=True) as h:  # a pending file may vanish: use the handle
            if length < 0:
                length = max(0, h.size - offset)
            return h.read(offset, length)

    def copy_to(self, address: str, out: BinaryIO) -> int:
        n = 0
        with self.acquire(address, chunk_checked=True) as h:
            while True:
                buf = h.read(n, CHUNK)
                if not buf:
                    return n
                out.write(buf)
                n += len(buf)


class StoragePlan(NamedTuple):
    """How a local file is stored: as the data extents between ``holes`` (a sparse
    file), else as one object named by ``digest``."""

    size: int
    holes: list[tuple[int, int]]
    digest: str  # "" when stored sparse


def open_regular(path: str, what: str = "not a regular file"
                 ) -> tuple[BinaryIO, os.stat_result]:
    """(the open file, its stat) of a local file to store: opened without blocking (a
    FIFO found there would hang open(2) until a writer came) and checked to be a
    regular file on the descriptor then read; OSError(EINVAL, ``what``) otherwise."""
    f = open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
        f.close()
        raise OSError(errno.EINVAL, what, path)
    return f, st


def plan_storage(fd: int, passed: Optional[tuple[str, int, bool]] = None) -> StoragePlan:
    """The storage plan of an open local file: physical holes, else one content pass
    (``passed`` when it covers the file's size), whose runs of zeros written out make
    the file sparse too (the same bytes get the same address however they were written)."""
    size = os.fstat(fd).st_size
    if size >= sparse.MIN_HOLE and sparse.has_physical_holes(fd, size):
        found = sparse.holes(fd, size)  # reads only what is allocated
        if found:
            return StoragePlan(size, found, "")
    if passed is None or passed[1] != size:
        passed = content_pass(fd)
    digest, size, zero_run = passed
    found = sparse.holes(fd, size) if zero_run else []
    return StoragePlan(size, found, "" if found else digest)


def _zero_run(data: bytes) -> bool:
    """Bytes in memory hold a hole's worth of zero grid chunks (see gravfs.data.sparse)."""
    run = 0
    for i in range(0, len(data), sparse.GRID):
        part = data[i:i + sparse.GRID]
        run = run + len(part) if sparse.is_zero(part) else 0
        if run >= sparse.MIN_HOLE:
            return True
    return False


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
