"""Reading immutable data objects by ranges (the mount): in place, ranged, cached, read ahead.

A small object (one chunk) is read whole, once, into the chunk cache: from a
file on this disk, a local-directory store's own or the local tier's copy,
hashed as it is read; else from its pending file (written here, not uploaded
yet) or a tier copy fetched for it. Its later reads, a new handle's too, are
cache hits (on the event loop, as is a first read whose file the kernel's caches
hold: gravfs.data.nowait).

A big object already in the tier is read from it (one verified by an earlier
process is checked chunk by chunk as it is read); one written here and not
uploaded yet, from its pending file (its hash was made as it was written). A big
object of a local-directory store is read in place from the store's file
(``inplace``): one descriptor per handle with the kernel's read-ahead, no second
copy in the tier. A big object that is not local is read in fixed-size chunks
with ``store.get_range``, so the first byte of a 10 GiB file does not wait for
the whole file: chunks live in a bounded in-memory LRU, concurrent readers of
one chunk share a single fetch, and a sequential reader gets the next chunks
fetched ahead in the background.

Chunks cannot be verified one by one against the name (objects are named by
the hash of the whole content), so the reader feeds chunks in order into a
running hash as they arrive; when the last chunk has been seen and the digest
does not match the name, the object is marked corrupt: its chunks are dropped,
the error is logged, and further reads fail with CorruptDataError (EIO). A
digest that matches leaves the object's chunk sums in the tier (as a full
verification there does), and from then on every fetched chunk is checked
against them before it is cached or served, at CRC32C cost instead of SHA-256.

All methods block; the mount calls them from worker threads.
"""

from __future__ import annotations

import logging
import os
import threading
from array import array
from concurrent.futures import Future
from typing import Callable, Optional

from gravfs import hashing, threadwork
from gravfs.data import chunksums, sparse
from gravfs.data.inplace import InPlaceObject, InPlaceReads, open_sequential
from gravfs.data.external import Source, reader_for
from gravfs.data.fetchqueue import FetchQueue
from gravfs.data.objects import DataObjects, digest_of
from gravfs.errors import CorruptDataError, NotFoundError
from gravfs.lru import LRU

log = logging.getLogger(__name__)

MiB = 1 << 20
CHUNK = 4 * MiB
CACHE_BYTES = 256 * MiB
MAX_AHEAD = 8  # chunks
NOWAIT_MAX = 64 << 10  # small objects read and hashed on the event loop when cached
# bytes one load_ahead call loads at most (two of the biggest objects it loads): 32
# readers of a directory each, with a batch loaded ahead of them, fill the cache
# (256 MiB) and no more
LOAD_AHEAD_BYTES = 8 * MiB
MAX_MANIFESTS = 1024  # sparse files' manifests kept (verified)
Fetch = Callable[[int, int], bytes]  # (offset, length) -> checked bytes of a source


class _Verifier:
    """Running hash (and chunk sums) of an object's chunks, fed strictly in order."""

    __slots__ = ("hasher", "sums", "next", "last", "lock", "pending", "ok", "filed")

    def __init__(self, last: int, sums: bool):
        self.hasher = hashing.hasher()
        self.sums = array("I") if sums else None
        self.next = 0
        self.last = last
        self.lock = threading.Lock()  # one thread hashes at a time (in order), not the cache lock
        self.pending = False  # a chunk was filed since the holder of the lock last looked
        self.ok = False  # the complete hash matched the name
        self.filed = threading.Event()  # the verdict is acted on: sums kept, or object refused


class ReadState:
    """Per open handle: where the last read ended, and how far ahead to fetch."""

    __slots__ = ("next_offset", "ahead", "ahead_to", "bytes_read", "tier_handle", "in_place", "fd",
                 "lock", "extents", "source_checked", "ranged")

    def __init__(self):
        self.next_offset = 0
        self.ahead = 0
        self.ahead_to = 0  # chunks below this index were already asked for ahead
        self.ranged = False  # the object is read by ranges through the chunk cache
        self.bytes_read = 0
        self.tier_handle = None
        self.in_place: InPlaceObject | None = None
        self.fd = -1  # our own descriptor of the local file: preads without a lock
        self.lock = threading.Lock()  # the kernel may send reads of one handle in parallel
        self.extents: dict[str, "ReadState"] = {}  # a sparse file's: one per extent read
        self.source_checked = False  # by reference: the source was asked since the open

    def count(self, n: int) -> int:
        """Bytes read through this handle so far, after ``n`` more."""
        with self.lock:
            self.bytes_read += n
            return self.bytes_read

    def extent(self, address: str) -> "ReadState":
        with self.lock:
            st = self.extents.get(address)
            if st is None:
                st = self.extents[address] = ReadState()
            return st

    def close(self) -> None:
        with self.lock:
            extents, self.extents = self.extents, {}
        for st in extents.values():
            st.close()
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self.tier_handle is not None:
                self.tier_handle.release()
                self.tier_handle = None
            self.in_place = None
            self.source_checked = False
            self.ranged = False


class DataReader:
    """Ranged reads of the data objects of one DataObjects (see the module doc)."""

    def __init__(self, data: DataObjects, chunk_size: int = CHUNK, cache_bytes: int = CACHE_BYTES,
                 workers: int = 8):
        self.data = data
        self.external = reader_for(data.store)  # by-reference entries' sources
        self.chunk = chunk_size
        self.cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self._chunks: LRU[tuple[str, int], bytes] = LRU(weigh=len)
        self._inflight: dict[tuple[str, int], Future] = {}
        self._verifiers: dict[str, _Verifier] = {}
        self._corrupt: set[str] = set()
        self._recorded: dict[str, chunksums.ChunkChecks | None] = {}  # sums found in the tier
        self._manifests: LRU[str, sparse.Manifest] = LRU()  # verified, by address
        self._in_place = InPlaceReads(data, self._refuse, self._corrupt, self._recorded_sums)
        self._pool = FetchQueue(workers, "gravfs-readahead")  # reads before read-ahead
        # chunks a fetch may land ahead of the running hash before it helps hash: half
        # the cache, so those it has not reached are not the ones evicted
        self._lag_max = max(1, cache_bytes // chunk_size // 2)
        self._loading: set[str] = set()  # small objects load_ahead queued or is reading
        self.stats = {"chunk_fetches": 0, "chunk_hits": 0, "tier_reads": 0, "bytes_fetched": 0,
                      "in_place_reads": 0, "small_reads": 0, "loaded_ahead": 0}

    def close(self) -> None:
        self._pool.close()
        self._in_place.close()

    @property
    def cached_bytes(self) -> int:
        """Bytes of chunks held (at most ``cache_bytes``)."""
        return self._chunks.weight

    # -- public -------------------------------------------------------------------

    def read(self, state: ReadState, address: str, size: int, offset: int, length: int
             ) -> bytes | memoryview:
        if offset >= size or length <= 0:
            return b""
        length = min(length, size - offset)
        if address in self._corrupt:
            raise CorruptDataError(f"data object {address} does not match its hash")
        try:
            if sparse.is_sparse(address):
                return self._read_sparse(state, address, size, offset, length)
            return self._read(state, address, size, offset, length)
        except NotFoundError as exc:
            raise data_missing(address, exc) from None

    def read_external(self, state: ReadState, src: Source, offset: int, length: int
                      ) -> bytes | memoryview:
        """A by-reference entry's bytes from its source (gravfs.data.external), through the
        chunk cache and read-ahead under the source's URL and version: every chunk
        fetched is checked against the entry's size and e_tag before it is cached, so
        the cache holds only that version's bytes; there is no hash to run. A handle's
        first read served from the cache asks the source (a HEAD or a stat) all the
        same, so each open sees a changed or vanished source."""
        if offset >= src.size or length <= 0:
            return b""
        length = min(length, src.size - offset)
        if not state.source_checked:
            with self._lock:
                cached = self._chunks.peek((src.key, offset // self.chunk)) is not None
            if cached:  # else the fetch below asks the source
                self.external.check(src)
            state.source_checked = True

        def fetch(off: int, n: int) -> bytes:
            return self.external.read(src, off, n)

        return self._ranged(state, src.key, src.size, offset, length, fetch)

    def _read_sparse(self, state: ReadState, address: str, size: int, offset: int,
                     length: int) -> bytes:
        """Holes as zeros; each extent read as the data object it is (its own state)."""
        m = self._manifest(address)
        if m.size != size:
            raise CorruptDataError(f"sparse manifest {address} says {m.size} bytes, the entry "
                                   f"{size}")
        parts = []
        for off, n, ext in m.pieces(offset, length):
            if ext is None:
                parts.append(bytes(n))
            else:
                e_off, e_len, addr = ext
                parts.append(self.read(state.extent(addr), addr, e_len, off - e_off, n))
        return b"".join(parts)

    def _manifest(self, address: str) -> sparse.Manifest:
        with self._lock:
            m = self._manifests.get(address)
            if m is not None:
                return m
        m = self.data.manifest(address)  # verified against its name
        with self._lock:
            self._manifests.put(address, m)
            self._manifests.evict(max_items=MAX_MANIFESTS)
        return m

    def _read(self, state: ReadState, address: str, size: int, offset: int, length: int
              ) -> bytes | memoryview:
        if size <= self.chunk:
            data = self._whole_small(address, size)
            state.ranged = True  # its next reads are cache hits (read_cached)
            self.stats["small_reads"] += 1
            return self._cut([data], 0, offset, length)
        for attempt in (1, 2):
            with state.lock:
                if state.tier_handle is None and state.in_place is None:
                    if self.data.cached(address):
                        state.tier_handle = self.data.acquire(address, chunk_checked=True)
                        state.fd = _open_sequential(state.tier_handle.path)
                    elif (pending := self.data.pending_handle(address)) is not None:
                        state.tier_handle = pending  # written here, not uploaded yet
                    else:
                        path = self.data.local_path(address)
                        if path is not None:
                            state.fd, state.in_place = self._in_place.open(address, size, path)
                handle, fd, obj = state.tier_handle, state.fd, state.in_place
            if obj is not None:
                self.stats["in_place_reads"] += 1
                return self._in_place.read(obj, address, fd, offset, length, state.count)
            if handle is None:
                state.ranged = True
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

    # -- small objects: read whole, kept in the chunk cache ---------------------------

    def load_ahead(self, objects: list[tuple[str, int]]) -> int:
        """Read small objects whole into the chunk cache on the read-ahead workers, for
        a reader about to open them (a directory's files read in name order: cp -r,
        tar, a loop over a listing). Each of its reads is then answered on the event
        loop (``read_cached``) instead of taking a worker thread's trip, which costs
        more than a small file's read (~130 µs on 2 vCPUs, a cold 4 KiB object from a
        local disk ~100 µs), and a bigger file's read or GET is under way while the
        reader is on the one before; several are read at once.
        Objects cached or being loaded, empty (what is not an object: a directory),
        sparse, refused or bigger than a chunk (not read whole) are left out, and at most
        ``LOAD_AHEAD_BYTES`` are loaded a call: returns how many of the objects, from
        the first, it has seen to (queued or left out); the caller asks again from
        there."""
        budget = LOAD_AHEAD_BYTES
        for i, (address, size) in enumerate(objects):
            if not 0 < size <= self.chunk or sparse.is_sparse(address):
                continue
            with self._lock:
                if (address in self._loading or address in self._corrupt
                        or (address, 0) in self._chunks):
                    continue
                if size > budget:
                    return i
                self._loading.add(address)
            try:
                self._pool.submit(("whole", address), lambda a=address, n=size: self._load(a, n),
                                  demand=False)
            except RuntimeError:  # closed: the mount is ending
                with self._lock:
                    self._loading.discard(address)
                return i
            budget -= size
        return len(objects)

    def _load(self, address: str, size: int) -> None:
        """load_ahead's job: a failure is left to the read that needs the object (it
        tries again and reports it; a damaged object is refused here already)."""
        loaded = False
        try:
            self._whole_small(address, size)
            loaded = True
        except Exception as exc:
            log.debug("loading %s ahead of its reader failed: %s", address, exc)
        finally:
            with self._lock:  # (workers count at once)
                self._loading.discard(address)
                self.stats["loaded_ahead"] += loaded

    def _whole_small(self, address: str, size: int, nowait: bool = False) -> bytes | None:
        """A small object's bytes, checked, from the chunk cache or else read whole
        (``_load_small``) and kept there, so later handles are answered on the event
        loop (read_cached). ``nowait``: only from the cache or a local file the
        kernel's caches hold (None otherwise)."""
        key = (address, 0)
        with self._lock:  # (never a ranged read's unverified chunk: those are big objects')
            data = self._chunks.get(key)
        if data is not None:
            return data
        if nowait:
            data = self._read_small(address, size, nowait=True)
            if data is None:
                return None
        else:
            data = self._load_small(address, size)
        with self._lock:
            self._chunks.put(key, data)
            self._chunks.evict(max_weight=self.cache_bytes)
        return data

    def _load_small(self, address: str, size: int) -> bytes:
        """A small object read whole from a file on this disk and hashed (the local
        store's, or the tier's copy), else from the tier's fetch of it or its pending
        file (checked by the tier and by the close that hashed it). A tier copy of a
        local store's object would cost a copy, a second open and a hash for nothing a
        later process needs. Blocks."""
        data = self._read_small(address, size)
        if data is None:
            with self.data.acquire(address, chunk_checked=True) as h:
                data = h.read(0, size)
        return data

    def _read_small(self, address: str, size: int, nowait: bool = False) -> bytes | None:
        try:
            return self.data.read_small(address, size, nowait)
        except CorruptDataError:
            self._refuse(address, "the store's file hashes to another digest")
            raise

    # -- chunks ---------------------------------------------------------------------

    def read_cached(self, state: ReadState, address: str, size: int, offset: int,
                    length: int) -> bytes | memoryview | None:
        """The bytes, if this object is read by ranges and every chunk they need is
        cached already, or read in place and in the page cache; else None (use
        ``read``). Never waits on I/O or a running hash, so the mount answers the
        common read of a sequential reader (read ahead filled the cache) on its event
        loop, without a worker-thread trip."""
        if offset >= size or length <= 0:
            return None
        length = min(length, size - offset)
        if state.in_place is not None:  # bytes the page cache holds (inplace.read_nowait)
            if address in self._corrupt:
                return None
            data = self._in_place.read_nowait(state.in_place, address, state.fd, offset, length,
                                              state.count)
            if data is not None:
                self.stats["in_place_reads"] += 1
            return data
        if not state.ranged and size > self.chunk:
            return None
        if not state.ranged and size <= NOWAIT_MAX and address not in self._corrupt:
            data = self._whole_small(address, size, nowait=True)  # a new handle's first read
            if data is not None:
                state.ranged = True
                return self._cut([data], 0, offset, length)
        first, last = offset // self.chunk, (offset + length - 1) // self.chunk
        with self._lock:
            v = self._verifiers.get(address)
            if v is not None and last == v.last or address in self._corrupt:
                return None  # the last chunk waits for the running hash (_settle)
            chunks = [self._chunks.get((address, i)) for i in range(first, last + 1)]
        if None in chunks:
            return None
        self.stats["chunk_hits"] += len(chunks)
        self._read_ahead(state, address, size, offset, length, None)
        return self._cut(chunks, first, offset, length)

    def _ranged(self, state: ReadState, address: str, size: int, offset: int, length: int,
                fetch: Optional[Fetch] = None) -> bytes | memoryview:
        """``fetch``: how a chunk is read and checked (default: the data object's range,
        verified by the running hash); ``address`` then only names the cached chunks."""
        first, last = offset // self.chunk, (offset + length - 1) // self.chunk
        self._read_ahead(state, address, size, offset, length, fetch)
        sequential = state.ahead > 0  # it read the chunks before this one
        chunks = [self._get(address, size, i, fetch, sequential) for i in range(first, last + 1)]
        return self._cut(chunks, first, offset, length)

    def _read_ahead(self, state: ReadState, address: str, size: int, offset: int, length: int,
                    fetch: Optional[Fetch]) -> None:
        """Follow the handle's reads; ask for the next chunks of a sequential reader."""
        last = (offset + length - 1) // self.chunk
        nchunks = (size + self.chunk - 1) // self.chunk
        sequential = offset == state.next_offset or (
            state.next_offset and abs(offset - state.next_offset) <= self.chunk)
        state.ahead = min(MAX_AHEAD, max(1, state.ahead * 2)) if sequential else 0
        state.next_offset = offset + length
        # Ask only for chunks not asked for yet: a kernel read is 128 KiB, a chunk
        # 4 MiB, and asking again for 8 chunks per read was most of a cached read's cost.
        end = min(nchunks, last + 1 + state.ahead)
        for i in range(max(last + 1, state.ahead_to if sequential else 0), end):
            self._start(address, size, i, fetch, need=False)
        state.ahead_to = end

    def _cut(self, chunks: list[bytes], first: int, offset: int, length: int) -> bytes | memoryview:
        """bytes [offset, offset + length) of consecutive chunks, the first one ``first``:
        within one chunk a view of it, not a copy (pyfuse3 replies from any buffer, and
        a cold read moves every byte through here)."""
        base = first * self.chunk
        if len(chunks) == 1:
            return memoryview(chunks[0])[offset - base:offset - base + length]
        lo = offset - base
        hi = offset + length - (first + len(chunks) - 1) * self.chunk
        return b"".join([chunks[0][lo:]] + chunks[1:-1] + [chunks[-1][:hi]])

    def _get(self, address: str, size: int, idx: int, fetch: Optional[Fetch] = None,
             sequential: bool = False) -> bytes:
        key = (address, idx)
        with self._lock:
            data = self._chunks.get(key)
            v = self._verifiers.get(address)
        if data is not None:
            self.stats["chunk_hits"] += 1
        else:
            data = self._start(address, size, idx, fetch).result()
        if v is not None and idx == v.last:
            self._settle(address, size, v, refetch=sequential)
        if address in self._corrupt:
            raise CorruptDataError(f"data object {address} does not match its hash")
        return data

    def _settle(self, address: str, size: int, v: _Verifier, refetch: bool = False) -> None:
        """Before the last chunk is served, finish the running hash over the chunks that
        are cached or being fetched. A fetcher files its chunk in the cache before it
        feeds the hash, so a sequential reader could otherwise take an earlier chunk
        and then the last one from the cache before the hash had seen them, and end a
        whole read of a damaged object without an error. ``refetch`` (a sequential
        reader, which read every chunk): chunks the cache evicted before the hash
        reached them (a small cache under read-ahead) are fetched again, or the whole
        read would end unverified. A reader that skipped chunks (a footer first)
        fetches nothing new and leaves the hash open, as before."""
        while v.next <= v.last and address not in self._corrupt:
            n = v.next
            with self._lock:
                chunk = self._chunks.peek((address, n))
                pending = self._inflight.get((address, n)) if chunk is None else None
            if chunk is None:
                if pending is None and refetch:
                    pending = self._start(address, size, n)
                if pending is None:
                    return
                try:
                    chunk = pending.result()
                except Exception:
                    return  # that fetch's own reader sees its error
            self._feed(address, size, v, n, chunk, wait=True)
        if v.next > v.last:  # hashed to the end, maybe by another thread still filing it
            v.filed.wait()

    def _start(self, address: str, size: int, idx: int, fetch: Optional[Fetch] = None,
               need: bool = True) -> Optional[Future]:
        """The (possibly shared) fetch of one chunk; already cached -> a done future
        (None unless ``need``: read-ahead only makes sure the fetch is under way)."""
        key = (address, idx)
        with self._lock:
            data = self._chunks.peek(key)
            if data is not None:
                if not need:
                    return None
                f = Future()
                f.set_result(data)
                return f
            f = self._inflight.get(key)
            if f is not None:
                if need:  # a read waits for it now: before any read-ahead still queued
                    self._pool.promote(key)
                return f
            f = self._inflight[key] = Future()
        try:
            self._pool.submit(key, lambda: self._fetch(address, size, idx, f, fetch), need)
        except RuntimeError:  # pool shut down: fetch inline
            self._fetch(address, size, idx, f, fetch)
        return f

    def _recorded_sums(self, address: str, size: int) -> chunksums.ChunkChecks | None:
        """The sums an earlier full verification left in the tier (looked up once)."""
        with self._lock:
            if address in self._recorded:
                return self._recorded[address]
        checks = self.data.load_sums(address, size)
        if checks is not None and self.chunk % checks.chunk:
            checks = None  # cannot check our chunks by its sums
        with self._lock:
            if len(self._recorded) > 4096:
                self._recorded.clear()
            return self._recorded.setdefault(address, checks)

    @threadwork.marked  # a read may wait for it: the event loop does not busy-poll meanwhile
    def _fetch(self, address: str, size: int, idx: int, f: Future,
               fetch: Optional[Fetch] = None) -> None:
        key = (address, idx)
        try:
            off = idx * self.chunk
            want = min(self.chunk, size - off)
            data = (self.data.get_range(address, off, want) if fetch is None
                    else fetch(off, want))
            if len(data) != want:
                raise CorruptDataError(f"data object {address}: got {len(data)} bytes at "
                                       f"offset {off}, expected {want}")
            checks = self._recorded_sums(address, size) if fetch is None else None
            if checks is not None:
                try:
                    checks.check(off, data)
                except chunksums.ChunkMismatch as m:
                    self._refuse(address, f"chunk {m.index} does not match its sum")
                    raise CorruptDataError(f"data object {address} does not match its hash",
                                           offset=m.offset) from None
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
            f.set_exception(exc)
            return
        with self._lock:
            self._inflight.pop(key, None)
            self._chunks.put(key, data)
            self.stats["chunk_fetches"] += 1
            self.stats["bytes_fetched"] += len(data)
            self._chunks.evict(max_weight=self.cache_bytes)
            v = self._verifiers.get(address)
            if v is None and idx == 0 and checks is None and fetch is None:
                if len(self._verifiers) > 4096:  # abandoned partial reads
                    self._verifiers.clear()
                v = self._verifiers[address] = _Verifier((size - 1) // self.chunk,
                                                         sums=self.chunk % chunksums.CHUNK == 0)
        if v is not None and idx != v.last:
            f.set_result(data)  # its readers need not wait for the hash to reach it
            # Far ahead of the running hash (a CPU too busy to hash as fast as chunks
            # arrive), this fetcher hashes too before it fetches more: else the cache
            # evicts chunks the hash has not reached, the hash stalls, and the last
            # read refetches them one by one (a cold 1 GiB read fetched 1.4-1.6x its
            # size and spent its last 128 MiB in 2.9 s of 5.4 s so).
            self._feed(address, size, v, idx, data, wait=idx - v.next > self._lag_max)
            return
        if v is not None:  # before the result: the last chunk's reader sees a mismatch
            self._feed(address, size, v, idx, data, wait=True)
        f.set_result(data)

    def _feed(self, address: str, size: int, v: _Verifier, idx: int, data: bytes,
              wait: bool = False) -> None:
        """Advance the object's running hash over every in-order chunk now cached.

        Hashing runs under the verifier's own lock, so fetches and cache hits of
        other chunks go on meanwhile (hashlib releases the GIL on large buffers).
        A fetcher files its chunk, flags ``pending`` and leaves the hashing to the
        thread holding the lock, which looks again before it lets go: no chunk is
        skipped, and no fetcher waits behind another's hashing instead of fetching
        (``wait``: the reader of the last chunk, which must see the outcome, or a
        fetch far ahead of the hash, which helps it instead of fetching more).
        """
        v.pending = True
        while v.pending:
            if not v.lock.acquire(blocking=wait):
                return  # the holder sees pending and goes on
            try:
                v.pending = False
                finished = self._hash_in_order(address, v, idx, data)
            finally:
                v.lock.release()
            if finished:
                self._verified(address, size, v)
                return
            wait = False

    def _hash_in_order(self, address: str, v: _Verifier, idx: int, data: bytes) -> bool:
        """Hash the cached chunks from ``v.next`` on (under ``v.lock``); True when this
        call hashed the last one."""
        while True:
            if v.next > v.last:
                return False  # done (by another fetcher)
            if v.next == idx:
                chunk = data
            else:
                with self._lock:
                    chunk = self._chunks.peek((address, v.next))
            if chunk is None:
                return False
            v.hasher.update(chunk)
            if v.sums is not None:
                v.sums.extend(chunksums.crc(chunk[i:i + chunksums.CHUNK])
                              for i in range(0, len(chunk), chunksums.CHUNK))
            v.next += 1
            if v.next > v.last:
                v.ok = v.hasher.hexdigest() == digest_of(address)
                return True

    def _verified(self, address: str, size: int, v: _Verifier) -> None:
        """The running hash is complete: keep its sums, or refuse the object. Readers
        of the last chunk wait for this (``v.filed``): one that found the hash done
        by another thread must not serve the chunk before a mismatch is filed. The
        verifier leaves the object only then: a reader that finds none (a cached
        read of the last chunk goes on at once) must find the verdict acted on."""
        try:
            if not v.ok:
                self._refuse(address, "its ranges hash to another digest")
                return
            if v.sums is not None:
                self.data.keep_sums(address, size, v.sums)
                with self._lock:  # chunks fetched again later (cache evictions) are checked, not rehashed
                    self._recorded[address] = chunksums.ChunkChecks(v.sums, chunksums.CHUNK, size)
            log.debug("verified %s (%d bytes) from ranged reads", address, size)
        finally:
            with self._lock:
                if self._verifiers.get(address) is v:
                    del self._verifiers[address]
            v.filed.set()

    def _refuse(self, address: str, why: str) -> None:
        """A corrupt object: log it once, drop its cached chunks, fail every later read."""
        with self._lock:
            if address in self._corrupt:
                return
            self._corrupt.add(address)
            for k in [k for k in self._chunks if k[0] == address]:
                self._chunks.pop(k)
        log.error("data object %s does not match its hash (%s); refusing further reads",
                  address, why)


def data_missing(address: str, exc: NotFoundError) -> CorruptDataError:
    """A committed or staged file whose data object is gone: lost data (EIO), not a
    missing name (ENOENT, which would tell the reader the file does not exist)."""
    return CorruptDataError(f"data object {address} is missing ({exc})")


def _open_sequential(path: str) -> int:
    """A descriptor of a pinned local file read front to back (-1: use the handle)."""
    try:
        return open_sequential(path)
    except OSError:
        return -1  # e.g. a pending upload renamed away: its handle keeps its own descriptor
