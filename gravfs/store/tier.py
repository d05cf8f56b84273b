"""Local disk tier for immutable objects (ranges, metaranges, data objects).

Immutable, content-addressed objects never change under their key, so a copy on
local disk is valid forever and needs no invalidation: only a byte budget.
Refs are mutable and must never come through here.

- Single flight: concurrent acquires of one key download it once; the others wait.
- Downloads go to a temp file in ``cache_dir/tmp`` (flock'ed while in progress,
  so a second process sharing the directory can tell live temps from leftovers)
  and are renamed into ``cache_dir/objects/<key>``: a cached file is complete.
- Pinning: a TierHandle pins its file; LRU eviction skips pinned files and the
  tier may run over budget while everything is pinned. An evicted file that
  someone still has mmapped stays readable (unlinking a mapped file is fine on
  Linux); only new acquires fetch it again.
- ``verify(path)`` runs once per cached file per process (after download, or on
  first use of a file adopted from a previous run). A CorruptDataError drops the
  file and fetches it again once; a second failure propagates.
- A verified file of ``SUMS_MIN`` bytes or more whose verifier returned chunk sums
  keeps them in ``cache_dir/sums``, through the tier's ``sums`` (a ChunkSums: the data
  plane's gravfs.data.chunksums, given by gravfs.data.objects; without one every file
  is verified in full). A later process that reads it only through ``TierHandle.read``
  may ask for ``chunk_checked`` handles: each chunk is checked as it is first read,
  instead of a full verification before the first byte. A chunk that fails drops
  the file (CorruptDataError); the caller acquires it again, which fetches it.
- A ``self_checked`` acquire (SST readers, which check each block's checksum as they
  first read it) gets the copy unverified; a reader that refuses it calls
  ``discard(key, corrupt=...)`` and acquires again with a full ``verify``.
- ``load_sums``/``keep_sums`` also serve readers that verify an object without a
  copy here (the mount's in-place and ranged reads); such sums files have no
  cached file to be evicted with and stay (4 bytes per MiB of object).
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import threading
import uuid
from array import array
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Protocol

from gravfs.cleanup import unlink_quiet
from gravfs.errors import CorruptDataError, GravfsError
from gravfs.faults import crash_point
from gravfs.lru import LRU
from gravfs.store.modes import PRIVATE_FILE, make_dir, private_dir
from gravfs.store.base import ObjectStore, check_key
from gravfs.waits import may_wait

log = logging.getLogger(__name__)

GiB = 1 << 30
_REFS_PREFIX = "_gravfs/refs/"
_PART = ".part"
SUMS_MIN = 16 << 20

# Raises CorruptDataError; may return the file's chunk sums (computed in its own
# pass) for the tier to keep through its ChunkSums.
Verify = Callable[[str], "array | None"]


class CheckedReads(Protocol):
    """Reads of one file, each piece checked against its recorded sum on first read."""

    def pread(self, fd: int, offset: int, length: int) -> bytes:
        """Like os.pread; raises CorruptDataError (with the offset) for a piece that
        does not match its sum."""
        ...


class ChunkSums(Protocol):
    """Sums files of verified objects, so a later process checks a file chunk by chunk
    as it reads it instead of hashing it whole first (gravfs.data.chunksums)."""

    def load(self, path: str, size: int) -> CheckedReads | None:
        """The checks of an intact sums file for ``size`` bytes (None: none usable)."""
        ...

    def save(self, path: str, sums: array, size: int, tmp_dir: str) -> None:
        """Write a sums file atomically; raises OSError."""
        ...


@dataclass
class TierStats:
    """Counters; ``fetches`` is the number of objects read from the store."""

    fetches: int = 0
    hits: int = 0
    evictions: int = 0
    bytes_fetched: int = 0
    verify_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class _Entry:
    __slots__ = ("key", "path", "size", "pins", "verified", "dropped", "checks")

    def __init__(self, key: str, path: str, size: int, verified: bool):
        self.key = key
        self.path = path
        self.size = size
        self.pins = 0
        self.verified = verified
        self.dropped = False  # no longer in the index (evicted or corrupt)
        self.checks: CheckedReads | None = None  # reads check chunks, no full verify


def _size(entry: _Entry) -> int:
    return entry.size


class TierHandle:
    """A pinned cached file. Release it (or use ``with``) when done.

    The mmap returned by ``mmap()`` stays valid after release, even if the file
    is later evicted; the handle only controls eviction of the file on disk.
    """

    def __init__(self, tier: LocalTier, entry: _Entry, fd: int):
        self._tier = tier
        self._entry = entry
        self._fd = fd
        self._mmap: mmap.mmap | bytes | None = None
        self._lock = threading.Lock()
        self.key = entry.key
        self.path = entry.path
        self.size = entry.size

    @property
    def released(self) -> bool:
        return self._fd < 0

    def mmap(self) -> mmap.mmap | bytes:
        """Read-only mapping of the whole file, created once per handle (b"" for an empty file)."""
        if self._entry.checks is not None and not self._entry.verified:
            raise GravfsError(f"tier handle for {self.key} checks chunks on read; it has no mapping")
        with self._lock:
            if self._mmap is None:
                if self._fd < 0:
                    raise GravfsError(f"tier handle for {self.key} used after release")
                self._mmap = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ) if self.size else b""
            return self._mmap

    def read(self, offset: int = 0, length: int | None = None, fd: int = -1) -> bytes:
        """Bytes at ``offset``; ``fd``: the caller's own descriptor of ``path`` (no lock)."""
        if length is None:
            length = self.size - offset
        entry = self._entry
        if fd < 0:
            with self._lock:
                if self._fd < 0:
                    raise GravfsError(f"tier handle for {self.key} used after release")
                if entry.verified or entry.checks is None:
                    return os.pread(self._fd, length, offset)
                fd = os.dup(self._fd)
            try:
                return self._tier._checked_read(entry, fd, offset, length)
            finally:
                os.close(fd)
        if entry.verified or entry.checks is None:
            return os.pread(fd, length, offset)
        return self._tier._checked_read(entry, fd, offset, length)

    def will_need(self, offset: int = 0, length: int = 0) -> None:
        """Ask the kernel to read ``[offset, offset + length)`` (0: to the end) into the
        page cache, without waiting for it: a caller about to read many files' parts
        has the disk read them at once."""
        with self._lock:
            if self._fd < 0:
                raise GravfsError(f"tier handle for {self.key} used after release")
            os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_WILLNEED)

    def release(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            os.close(self._fd)  # an existing mmap holds its own reference
            self._fd = -1
        self._tier._unpin(self._entry)

    def __enter__(self) -> TierHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            try:
                self.release()
            except Exception:
                pass


class LocalTier:
    """Byte-budgeted LRU disk cache of immutable store objects under ``cache_dir``."""

    def __init__(self, store: ObjectStore, cache_dir: str, budget_bytes: int = 10 * GiB, *,
                 fsync: bool = True, prefetch_workers: int = 4, sums: ChunkSums | None = None):
        self.store = store
        self.sums = sums  # None: no chunk sums kept or used
        self.cache_dir = os.path.abspath(cache_dir)
        self.budget_bytes = budget_bytes
        self.stats = TierStats()
        self._objects = os.path.join(self.cache_dir, "objects")
        self._tmp = os.path.join(self.cache_dir, "tmp")
        self._sums = os.path.join(self.cache_dir, "sums")
        self._fsync = fsync
        self._prefetch_workers = prefetch_workers
        self._executor: ThreadPoolExecutor | None = None
        # Reentrant: a TierHandle released by the garbage collector may unpin
        # while this thread already holds the lock.
        self._lock = threading.RLock()
        self._entries: LRU[str, _Entry] = LRU(weigh=_size)  # weight: bytes cached
        self._inflight: dict[str, Future] = {}
        # copies of objects whose files may be private: the owner's only (modes)
        for d in (self.cache_dir, self._objects, self._tmp, self._sums):
            private_dir(d)
        self._clean_tmp()
        self._adopt()
        with self._lock:
            self._evict_locked()

    # --- public API ----------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        return self._entries.weight

    def cached(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    def cached_path(self, key: str) -> str | None:
        """The file of a copy the tier holds, verified or not, counted as a use: for a
        reader that checks all it reads itself. Unpinned: it may vanish (evicted)."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.path

    def acquire(self, key: str, verify: Verify | None = None, *,
                chunk_checked: bool = False, durable: bool = True,
                self_checked: bool = False) -> TierHandle:
        """A pinned local copy of ``key``, fetched from the store if needed.

        ``chunk_checked``: the caller reads only through ``TierHandle.read``, so a
        file with chunk sums may be served with each chunk checked on first read.
        ``self_checked`` (no ``verify``): the caller checks every byte it uses (SST
        block checksums) and, when a check fails, calls ``discard(key, corrupt=...)``
        and acquires again with a full ``verify``; the copy is served unverified.
        ``durable=False``: a fetched copy is not synced to disk, unless it may be
        served chunk-checked after a crash (``chunk_checked`` and ``SUMS_MIN`` bytes
        or more: it may have chunk sums then) or nothing checks it (no ``verify``,
        not ``self_checked``). A copy adopted after a crash is unverified, so a torn
        one is found by its full check and fetched again.
        """
        if self_checked and verify is not None:
            raise ValueError("a self-checked acquire takes no verify")
        check_key(key)
        if key.startswith(_REFS_PREFIX):
            raise GravfsError(f"{key} is a ref (mutable) and cannot go through the immutable-object tier")
        while True:
            with self._lock:
                entry = self._entries.peek(key)
                if entry is not None and (entry.verified or verify is None or (
                        chunk_checked and entry.checks is not None)):
                    handle = self._pin_locked(entry)
                    if handle is not None:
                        self.stats.hits += 1
                        return handle
                fut = self._inflight.get(key)
                leader = fut is None
                may_wait(key)  # a fetch, or waiting for another thread's (gravfs.waits)
                if leader:
                    fut = Future()
                    self._inflight[key] = fut
            if not leader:
                fut.result()  # the leader's failure is ours too
                continue
            try:
                if durable or (verify is None and not self_checked):
                    sync_from: int | None = 0
                else:
                    sync_from = SUMS_MIN if chunk_checked else None
                handle = self._materialize(key, verify, chunk_checked, sync_from)
            except BaseException as exc:
                with self._lock:
                    del self._inflight[key]
                fut.set_exception(exc)
                raise
            with self._lock:
                del self._inflight[key]
            fut.set_result(None)
            return handle

    def prefetch(self, key: str) -> Future:
        """Fetch ``key`` in the background (no-op if cached); the future resolves when it is local."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._prefetch_workers, thread_name_prefix="gravfs-prefetch")
            executor = self._executor

        def run() -> None:
            self.acquire(key).release()

        return executor.submit(run)

    def add_written(self, key: str, src_path: str) -> tuple[str, int, int] | None:
        """Keep a file this process wrote and stored as ``key`` as a verified copy.

        Why: a range a commit has just written is what the next commit or merge
        reads; fetching it back (a copy, a sync and a verify of every block)
        cost a merge as much as the merge itself. The file is hard-linked, not
        copied. Returns (key, inode, mtime) for :meth:`adopt_linked` in another
        process of this tier, or None when nothing was linked (another file
        system, or a copy already cached: that one keeps its own state).
        """
        check_key(key)
        with self._lock:
            if key in self._entries:
                return None
        final = self._path(key)
        try:
            try:
                os.link(src_path, final)
            except FileNotFoundError:  # the first of its subdirectory
                make_dir(os.path.dirname(final))
                os.link(src_path, final)
            st = os.stat(final)
            if st.st_mode & 0o007:  # a temp file made under a loose umask: others out
                os.chmod(final, st.st_mode & 0o7770)
        except OSError as e:
            log.debug("tier: %s not linked from %s (%s)", key, src_path, e)
            return None
        with self._lock:
            if key not in self._entries:
                self._put_locked(_Entry(key, final, st.st_size, verified=True))
                self._evict_locked()
        return key, st.st_ino, st.st_mtime_ns

    def adopt_linked(self, linked: list[tuple[str, int, int]]) -> int:
        """Index copies another process of this tier made with :meth:`add_written`
        (a worker's ranges), as verified: each only while its path still holds the
        very file that process linked (same inode and modification time). Returns how many."""
        adopted = 0
        for key, ino, mtime in linked:
            final = self._path(key)
            try:
                st = os.stat(final)
            except FileNotFoundError:
                continue
            if st.st_ino != ino or st.st_mtime_ns != mtime:
                continue
            with self._lock:
                if key not in self._entries:
                    self._put_locked(_Entry(key, final, st.st_size, verified=True))
                    adopted += 1
        if adopted:
            with self._lock:
                self._evict_locked()
        return adopted

    def discard(self, key: str, *, corrupt: str | None = None) -> None:
        """Forget a cached copy; holders keep their open file. ``corrupt``: why a
        reader refused the copy (counted and logged as a failed verification)."""
        with self._lock:
            entry = self._entries.peek(key)
            if entry is not None:
                self._drop_locked(entry)
            if corrupt is not None:
                self.stats.verify_failures += 1
        if corrupt is not None:
            log.warning("cached %s: %s; dropped", key, corrupt)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # --- internals -----------------------------------------------------------

    def _path(self, key: str) -> str:
        return os.path.join(self._objects, *key.split("/"))

    def _sums_path(self, key: str) -> str:
        return os.path.join(self._sums, *key.split("/"))

    def load_sums(self, key: str, size: int) -> CheckedReads | None:
        """Chunk sums recorded for ``key`` by an earlier full verification (None: none usable).

        Sums describe content, not a copy: they also check reads of the object
        from elsewhere (the mount reads a local-directory store's files in place).
        """
        if size < SUMS_MIN or self.sums is None:
            return None
        return self.sums.load(self._sums_path(key), size)

    def keep_sums(self, key: str, size: int, sums: array) -> None:
        """After a full verification: keep its chunk sums for later processes (best effort)."""
        if size < SUMS_MIN or self.sums is None:
            return
        try:
            self.sums.save(self._sums_path(key), sums, size, self._tmp)
        except OSError as exc:
            log.warning("tier: could not record chunk sums of %s: %s", key, exc)

    def _load_sums(self, entry: _Entry) -> bool:
        """Serve ``entry`` chunk-checked from its sums file, if it has an intact one."""
        if entry.checks is None:
            entry.checks = self.load_sums(entry.key, entry.size)
            if entry.checks is not None:
                log.debug("tier: %s served with chunk checks", entry.key)
        return entry.checks is not None

    def _checked_read(self, entry: _Entry, fd: int, offset: int, length: int) -> bytes:
        try:
            return entry.checks.pread(fd, offset, length)
        except CorruptDataError as m:
            with self._lock:
                self.stats.verify_failures += 1
                self._drop_locked(entry)
            log.warning("cached %s: %s; dropped", entry.key, m)
            raise CorruptDataError("cached copy does not match its chunk sum",
                                   path=entry.path, offset=m.offset) from None

    def _pin_locked(self, entry: _Entry) -> TierHandle | None:
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # removed behind our back (another process evicted it)
            self._drop_locked(entry)
            return None
        entry.pins += 1
        self._entries.touch(entry.key)
        return TierHandle(self, entry, fd)

    def _unpin(self, entry: _Entry) -> None:
        with self._lock:
            entry.pins -= 1
            if entry.pins == 0 and self._entries.weight > self.budget_bytes:
                self._evict_locked()

    def _materialize(self, key: str, verify: Verify | None, chunk_checked: bool = False,
                     sync_from: int | None = 0) -> TierHandle:
        """Leader path: make ``key`` present (and verified) locally, return it pinned.
        A fetched copy of ``sync_from`` bytes or more is synced (None: none is)."""
        for attempt in (1, 2):
            with self._lock:
                entry = self._entries.peek(key)
                if entry is not None:
                    entry.pins += 1  # keeps eviction away while we verify
            if entry is None:
                entry = self._found(key)  # returned pinned
            cached = entry is not None
            if entry is None:
                entry = self._fetch(key, sync_from)  # returned pinned
            try:
                if verify is not None and not entry.verified and not (
                        chunk_checked and cached and self._load_sums(entry)):
                    try:
                        sums = verify(entry.path)
                    except CorruptDataError as e:
                        with self._lock:
                            self.stats.verify_failures += 1
                            self._drop_locked(entry)
                        if attempt == 2:  # a fresh copy failed too: the store's is bad
                            raise CorruptDataError(
                                f"{key} in the store is damaged ({e.reason}); "
                                f"a copy fetched again failed too") from e
                        log.warning("cached %s failed verification (%s); fetching it again", key, e)
                        continue
                    entry.verified = True
                    if sums is not None:
                        self.keep_sums(key, entry.size, sums)
                with self._lock:
                    handle = self._pin_locked(entry)
                    if handle is not None and cached:
                        self.stats.hits += 1
                if handle is not None:
                    return handle
            finally:
                self._unpin(entry)
        raise GravfsError(f"could not keep a local copy of {key} in {self.cache_dir}")

    def _found(self, key: str) -> _Entry | None:
        """A copy of ``key`` that another process of this tier left since this one
        indexed the directory (a command's commit keeps what it uploaded: see
        DataObjects._keep_written), taken in unverified and pinned, as ``_adopt``
        takes a previous run's: checked on use like those. None when there is none."""
        path = self._path(key)
        try:
            size = os.stat(path).st_size
        except OSError:
            return None
        with self._lock:
            entry = self._entries.peek(key)
            if entry is None:
                entry = _Entry(key, path, size, verified=False)
                self._put_locked(entry)
            entry.pins += 1
            self._evict_locked()
        log.debug("tier: took in %s, cached by another process", key)
        return entry

    def _fetch(self, key: str, sync_from: int | None = 0) -> _Entry:
        final = self._path(key)
        tmp = os.path.join(self._tmp, f"{os.getpid()}-{uuid.uuid4().hex}{_PART}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # marks the temp as live
            self.store.download(key, tmp)
            size = os.fstat(fd).st_size
            if self._fsync and sync_from is not None and size >= sync_from:
                os.fsync(fd)
            crash_point("tier:fetched", key)
            try:
                os.rename(tmp, final)
            except FileNotFoundError:  # the first of its subdirectory (not asked every time)
                make_dir(os.path.dirname(final))
                os.rename(tmp, final)
        except BaseException:
            unlink_quiet(tmp)
            raise
        finally:
            os.close(fd)
        entry = _Entry(key, final, size, verified=False)
        with self._lock:
            self._put_locked(entry)
            self.stats.fetches += 1
            self.stats.bytes_fetched += size
            entry.pins += 1  # the caller's pin: not evictable before it is used
            self._evict_locked()
        return entry

    def _put_locked(self, entry: _Entry) -> None:
        old = self._entries.pop(entry.key)
        if old is not None:
            old.dropped = True
        self._entries.put(entry.key, entry)

    def _drop_locked(self, entry: _Entry) -> None:
        if entry.dropped:
            return
        if self._entries.peek(entry.key) is entry:
            self._entries.pop(entry.key)
        self._remove_files(entry)

    def _remove_files(self, entry: _Entry) -> None:
        """An entry out of the index: its cached copy and its sums go."""
        entry.dropped = True
        for path in (entry.path, self._sums_path(entry.key)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _evict_locked(self) -> None:
        """Least recently used files go until the tier fits its budget; pinned ones
        and those being fetched stay (the tier may run over budget meanwhile)."""
        inflight = self._inflight
        for _key, entry in self._entries.evict(
                max_weight=self.budget_bytes,
                skip=lambda key, e: e.pins > 0 or key in inflight):
            self._remove_files(entry)
            self.stats.evictions += 1

    def _clean_tmp(self) -> None:
        """Remove temp files of dead downloads; live ones are flock'ed by their writer."""
        for name in os.listdir(self._tmp):
            path = os.path.join(self._tmp, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a download in progress elsewhere
            finally:
                os.close(fd)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _adopt(self) -> None:
        """Account files cached by a previous run, oldest first in LRU order."""
        found: list[tuple[int, str, str, int]] = []
        for dirpath, _dirs, files in os.walk(self._objects):
            for name in files:
                path = os.path.join(dirpath, name)
                key = os.path.relpath(path, self._objects).replace(os.sep, "/")
                try:
                    check_key(key)
                    st = os.stat(path)
                except (GravfsError, OSError):
                    continue
                found.append((st.st_mtime_ns, key, path, st.st_size))
        found.sort()
        with self._lock:
            for _mtime, key, path, size in found:
                self._entries.put(key, _Entry(key, path, size, verified=False))
        if found:
            log.debug("tier %s: adopted %d cached files (%d bytes)", self.cache_dir, len(found),
                      self._entries.weight)
