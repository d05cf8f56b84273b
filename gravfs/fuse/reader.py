"""Reading immutable data objects for the mount: ranged, cached, read ahead.

Small objects, and any object already in the local tier, are read from the
tier (whole, hash-verified copies on local disk; a big one verified by an earlier
process is checked chunk by chunk as it is read). A large object that is not
local is read in fixed-size chunks with ``store.get_range``, so the first byte
of a 10 GiB file does not wait for the whole file: chunks live in a bounded
in-memory LRU, concurrent readers of one chunk share a single fetch, and a
sequential reader gets the next chunks fetched ahead in the background.

Chunks cannot be verified one by one (objects are named by the hash of the
whole content), so the reader feeds chunks in order into a running hash as
they arrive; when the last chunk has been seen and the digest does not match
the name, the object is marked corrupt: its chunks are dropped, the error is
logged, and further reads fail with CorruptDataError (EIO).

All methods block; the FUSE layer calls them from worker threads.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from gravfs import hashing
from gravfs.dataobjects import digest_of
from gravfs.errors import CorruptDataError

log = logging.getLogger(__name__)

MiB = 1 << 20
CHUNK = 4 * MiB
CACHE_BYTES = 256 * MiB
MAX_AHEAD = 8  # chunks


class _Verifier:
    """Running hash of an object's chunks, fed strictly in order."""

    __slots__ = ("hasher", "next", "last", "lock")

    def __init__(self, last: int):
        self.hasher = hashing.hasher()
        self.next = 0
        self.last = last
        self.lock = threading.Lock()  # one thread hashes at a time (in order), not the cache lock


class ReadState:
    """Per open handle: where the last read ended, and how far ahead to fetch."""

    __slots__ = ("next_offset", "ahead", "tier_handle", "fd", "lock")

    def __init__(self):
        self.next_offset = 0
        self.ahead = 0
        self.tier_handle = None
        self.fd = -1  # our own descriptor of the pinned local file: preads without a lock
        self.lock = threading.Lock()  # the kernel may send reads of one handle in parallel

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self.tier_handle is not None:
                self.tier_handle.release()
                self.tier_handle = None


class DataReader:
    def __init__(self, repo, chunk_size: int = CHUNK, cache_bytes: int = CACHE_BYTES,
                 workers: int = 8):
        self.repo = repo
        self.chunk = chunk_size
        self.cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[tuple[str, int], Future] = {}
        self._verifiers: dict[str, _Verifier] = {}
        self._corrupt: set[str] = set()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gravfs-readahead")
        self.stats = {"chunk_fetches": 0, "chunk_hits": 0, "tier_reads": 0, "bytes_fetched": 0}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- public -------------------------------------------------------------------

    def read(self, state: ReadState, address: str, size: int, offset: int, length: int) -> bytes:
        if offset >= size or length <= 0:
            return b""
        length = min(length, size - offset)
        if address in self._corrupt:
            raise CorruptDataError(f"data object {address} does not match its hash")
        for attempt in (1, 2):
            with state.lock:
                if state.tier_handle is None and (size <= self.chunk or self.repo.tier.cached(address)):
                    state.tier_handle = self.repo.data.acquire(address, chunk_checked=True)
                    if size > self.chunk:
                        state.fd = _open_sequential(state.tier_handle.path)
                handle, fd = state.tier_handle, state.fd
            if handle is None:
                return self._ranged(state, address, size, offset, length)
            self.stats["tier_reads"] += 1
            try:
                # own descriptor: the kernel's parallel reads of one file reach the disk in parallel
                return handle.read(offset, length, fd=fd)
            except CorruptDataError:
                if attempt == 2:
                    raise
                state.close()  # the tier dropped its damaged copy; the next acquire fetches it
        raise AssertionError("unreachable")

    # -- chunks ---------------------------------------------------------------------

    def _ranged(self, state: ReadState, address: str, size: int, offset: int, length: int) -> bytes:
        first, last = offset // self.chunk, (offset + length - 1) // self.chunk
        nchunks = (size + self.chunk - 1) // self.chunk
        sequential = offset == state.next_offset or (
            state.next_offset and abs(offset - state.next_offset) <= self.chunk)
        state.ahead = min(MAX_AHEAD, max(1, state.ahead * 2)) if sequential else 0
        state.next_offset = offset + length
        for i in range(last + 1, min(nchunks, last + 1 + state.ahead)):
            self._start(address, size, i)
        parts = []
        for i in range(first, last + 1):
            data = self._get(address, size, i)
            lo = offset - i * self.chunk if i == first else 0
            hi = offset + length - i * self.chunk if i == last else len(data)
            parts.append(data[lo:hi])
        return b"".join(parts)

    def _get(self, address: str, size: int, idx: int) -> bytes:
        key = (address, idx)
        with self._lock:
            data = self._chunks.get(key)
            if data is not None:
                self._chunks.move_to_end(key)
                self.stats["chunk_hits"] += 1
                return data
        data = self._start(address, size, idx).result()
        if address in self._corrupt:
            raise CorruptDataError(f"data object {address} does not match its hash")
        return data

    def _start(self, address: str, size: int, idx: int) -> Future:
        """The (possibly shared) fetch of one chunk; already cached -> a done future."""
        key = (address, idx)
        with self._lock:
            data = self._chunks.get(key)
            if data is not None:
                f = Future()
                f.set_result(data)
                return f
            f = self._inflight.get(key)
            if f is not None:
                return f
            f = Future()
            self._inflight[key] = f
        try:
            self._pool.submit(self._fetch, address, size, idx, f)
        except RuntimeError:  # pool shut down: fetch inline
            self._fetch(address, size, idx, f)
        return f

    def _fetch(self, address: str, size: int, idx: int, f: Future) -> None:
        key = (address, idx)
        try:
            off = idx * self.chunk
            want = min(self.chunk, size - off)
            data = self.repo.store.get_range(address, off, want)
            if len(data) != want:
                raise CorruptDataError(f"data object {address}: got {len(data)} bytes at "
                                       f"offset {off}, expected {want}")
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
            f.set_exception(exc)
            return
        with self._lock:
            self._inflight.pop(key, None)
            self._chunks[key] = data
            self._bytes += len(data)
            self.stats["chunk_fetches"] += 1
            self.stats["bytes_fetched"] += len(data)
            while self._bytes > self.cache_bytes and self._chunks:
                _, old = self._chunks.popitem(last=False)
                self._bytes -= len(old)
            v = self._verifiers.get(address)
            if v is None and idx == 0:
                if len(self._verifiers) > 4096:  # abandoned partial reads
                    self._verifiers.clear()
                v = self._verifiers[address] = _Verifier((size - 1) // self.chunk)
        if v is not None:  # before the result: the last chunk's reader sees a mismatch
            self._feed(address, size, v, idx, data)
        f.set_result(data)

    def _feed(self, address: str, size: int, v: _Verifier, idx: int, data: bytes) -> None:
        """Advance the object's running hash over every in-order chunk now cached.

        Hashing runs under the verifier's own lock, so fetches and cache hits of
        other chunks go on meanwhile (hashlib releases the GIL on large buffers).
        A fetcher takes that lock after filing its chunk, so no chunk is skipped.
        """
        with v.lock:
            while True:
                if v.next > v.last:
                    return  # done (by another fetcher)
                if v.next == idx:
                    chunk = data
                else:
                    with self._lock:
                        chunk = self._chunks.get((address, v.next))
                if chunk is None:
                    return
                v.hasher.update(chunk)
                v.next += 1
                if v.next > v.last:
                    break
            ok = v.hasher.hexdigest() == digest_of(address)
        with self._lock:
            if self._verifiers.get(address) is v:
                del self._verifiers[address]
            if not ok:
                log.error("data object %s does not match its hash; refusing further reads",
                          address)
                self._corrupt.add(address)
                for k in [k for k in self._chunks if k[0] == address]:
                    self._bytes -= len(self._chunks.pop(k))
                return
        log.debug("verified %s (%d bytes) from ranged reads", address, size)


def _open_sequential(path: str) -> int:
    """A descriptor of a pinned local file read front to back (-1: use the handle)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1  # e.g. a pending upload renamed away: its handle keeps its own descriptor
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except OSError:
        pass
    return fd
