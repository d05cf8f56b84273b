"""Reading committed trees: metarange indexes and range SSTs through the local tier.

Everything read here is immutable and content-addressed, so the caches below
(open range readers, parsed metaranges) never need invalidation; they are only
bounded.  A cached copy is opened as it is: the SST reader checks each block's
checksum when it first reads it, which is what a full pass would check.  A copy
that fails (damaged, or torn by a crash: copies are not synced) is dropped and
fetched again with every block verified, and the reader carries on with it.
Why not verify every copy in full before use: a cold point lookup would read
and check a whole range (about 200 KiB) to use one 4 KiB block of it.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from bisect import bisect_left
from typing import Iterator, NamedTuple

from gravfs import sstable as _sstable
from gravfs.version.committed import metarecords
from gravfs.version.committed.messages import RangeData
from gravfs.version.committed.record import EMPTY_ID, Record, decode_record, decode_value
from gravfs.errors import CorruptDataError, NotFoundError, TreeGoneError
from gravfs.lru import LRU
from gravfs.waits import may_wait

log = logging.getLogger(__name__)

RANGES_PREFIX = "_gravfs/ranges/"
METARANGES_PREFIX = "_gravfs/metaranges/"


def range_key(range_id: str) -> str:
    return RANGES_PREFIX + range_id


def metarange_key(metarange_id: str) -> str:
    return METARANGES_PREFIX + metarange_id


class RangeInfo(NamedTuple):
    """One entry of a metarange: a range SST and the key span it covers."""

    id: str
    min_key: bytes
    max_key: bytes
    count: int
    estimated_size: int


_NO_MAP: dict = {}  # stands for "this range's key map is not known yet"; never written to


class MetaRange:
    """Parsed metarange: parallel lists for bisecting by key.

    ``kv_maps[i]`` is the key -> value map of range i's cached blocks once a
    lookup has gone through it (see RangeStore): the warm lookup path is then
    one bisect and two dict probes.  A map outliving its range's cache entry
    is at worst emptied, never wrong (ranges are immutable).
    """

    __slots__ = ("id", "ranges", "ids", "min_keys", "max_keys", "kv_maps")

    def __init__(self, metarange_id: str, ranges: list[RangeInfo]):
        self.id = metarange_id
        self.ranges = ranges
        self.ids = [r.id for r in ranges]
        self.min_keys = [r.min_key for r in ranges]
        self.max_keys = [r.max_key for r in ranges]
        self.kv_maps = [_NO_MAP] * len(ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    @property
    def count(self) -> int:
        """Number of records in the tree."""
        return sum(r.count for r in self.ranges)

    def locate(self, key: bytes) -> int:
        """Index of the first range whose max key >= key (len(self) if none)."""
        return bisect_left(self.max_keys, key)


EMPTY_METARANGE = MetaRange(EMPTY_ID, [])


class OpenSST:
    """An open reader, closed when unreferenced.

    Iterators keep a reference, so evicting an entry from the cache never
    closes a file that is still being read.  The tier handle is released as
    soon as the reader has mapped the file: a mapping stays valid even if the
    tier later evicts the file, so open readers pin nothing and cost one
    descriptor each.
    """

    __slots__ = ("reader", "size")

    def __init__(self, reader, size: int):
        self.reader = reader
        self.size = size

    def __del__(self) -> None:
        try:
            self.reader.close()
        except Exception:  # interpreter shutdown or double close: nothing to do
            pass


_fd_limit_raised = False


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (once per process); returns the soft limit.

    Every open range reader holds a descriptor (its mmap), and a tree has a
    range per few hundred KiB of metadata: the usual soft limit of 1024 is
    far below what a 10M-entry tree wants open, while the hard limit rarely is.
    """
    global _fd_limit_raised
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 1024
    if not _fd_limit_raised:
        _fd_limit_raised = True
        if hard != soft and (hard == resource.RLIM_INFINITY or hard > soft):
            target = hard
            if target == resource.RLIM_INFINITY:
                target = 1 << 20  # "unlimited" soft limits upset select()-style code; be generous
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                log.debug("raised the open-file soft limit from %d to %d", soft, target)
                soft = target
            except (OSError, ValueError) as e:
                log.debug("could not raise the open-file soft limit from %d to %s: %s", soft, hard, e)
    return soft


def _default_max_open() -> int:
    """A quarter of the descriptor limit (one descriptor per open reader), within [64, 4096]."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 4096
    return max(64, min(4096, soft // 4))


# The RangeStores of this process that were given no cap of their own share the one
# default (a quarter of the descriptor limit): a process holding several (a Spark
# task's GC, table and index readers; a caller with many repositories open) ran out
# of descriptors (EMFILE) with a quarter each.
_sharing: "weakref.WeakSet[RangeStore]" = weakref.WeakSet()
MIN_SHARE = 8  # open readers a store keeps however many share: a lookup's path and then some


def _mapped(o: OpenSST) -> int:
    """What an open reader counts against ``max_open_bytes``: its mapped file."""
    return o.size


class RangeStore:
    """Opens range and metarange SSTs by ID (gravfs's or lakeFS's) with bounded caches.

    Two caches, both keyed by range ID (content-addressed, so never stale):

    - parsed table states (index, properties, decoded blocks and the key ->
      value map over them; ``max_states``): warm point lookups are served
      from a state without any open file, and reopening a range reuses its
      state instead of parsing the file again;
    - open readers, least recently used closed first, bounded by number
      (``max_open_ranges``, default a quarter of the descriptor limit, which
      is raised to the hard limit when the first RangeStore is made, shared by
      the stores of the process on the default) and by
      mapped bytes (``max_open_bytes``, default half the tier budget: a
      mapped file evicted by the tier still holds its disk space until
      unmapped).  A reader is needed only to decode a block not in the cache.
    """

    def __init__(self, tier, max_open_ranges: int | None = None,
                 max_open_bytes: int | None = None, max_metaranges: int = 256,
                 block_cache=None, max_states: int | None = None):
        raise_fd_limit()
        self.tier = tier
        self.block_cache = block_cache  # None: the SST module's shared default cache
        self._cap = max_open_ranges
        if not max_open_ranges:
            _sharing.add(self)
        # A state costs its index (~150 bytes per 4 KiB block, ~20 KiB per
        # range) plus its cached blocks, which the block cache bounds.
        self.max_states = max_states or max(4 * (max_open_ranges or _default_max_open()), 16384)
        budget = getattr(tier, "budget_bytes", None)
        self.max_open_bytes = max_open_bytes if max_open_bytes is not None else (
            budget // 2 if budget else 4 << 30)
        self.max_metaranges = max_metaranges
        self._ranges: LRU[str, OpenSST] = LRU(weigh=_mapped)  # weight: mapped bytes
        self._states: LRU[str, _sstable.TableState] = LRU()
        self._verified: dict[str, _sstable.TableState] = {}  # parsed while verifying
        self._lock = threading.Lock()
        self._metaranges: dict[str, MetaRange] = {EMPTY_ID: EMPTY_METARANGE}
        self.record_ids = None  # a recordids.RecordIDs the stitcher may take record IDs from

    @property
    def max_open_ranges(self) -> int:
        """Open readers kept: the cap given, or this store's share of the default."""
        if self._cap:
            return self._cap
        return max(MIN_SHARE, _default_max_open() // max(1, len(_sharing)))

    def close(self) -> None:
        """Let go of every open reader and leave the shared budget to the others."""
        _sharing.discard(self)
        self.drop_parsed()

    # --- opening -----------------------------------------------------------

    def _new_reader(self, path: str, key: str, state=None, recover=None):
        if state is not None:
            return _sstable.SSTReader(path, name=key, state=state, recover=recover)
        if self.block_cache is None:
            return _sstable.SSTReader(path, name=key, recover=recover)
        return _sstable.SSTReader(path, name=key, cache=self.block_cache, recover=recover)

    def _verify(self, key: str):
        """Tier verify callback that keeps what it parsed for the reader that follows."""
        def verify(path: str) -> None:
            reader = self._new_reader(path, key)
            try:
                reader.verify(decompress=False)  # checksums: what damage breaks
                self._verified[key] = reader.share_state()
            finally:
                reader.close()
        return verify

    def _refetch(self, key: str, why: CorruptDataError):
        """A fresh copy of ``key``, verified in full (the cached one failed a check)."""
        may_wait(key)
        self.tier.discard(key, corrupt=str(why))
        return self.tier.acquire(key, verify=self._verify(key), durable=False)

    def _recover(self, key: str):
        """A reader's ``recover``: map a fresh copy when a block of the cached one fails."""
        def recover(err: CorruptDataError):
            handle = self._refetch(key, err)
            try:
                self._verified.pop(key, None)
                return _sstable.map_file(handle.path, key)
            finally:
                handle.release()
        return recover

    def _open(self, key: str, state=None) -> OpenSST:
        # served unverified and unsynced: the reader checks each block it reads
        # and recovers from a bad copy (see the module's docstring). A copy the tier
        # holds is opened on any thread; a fetch gives way (gravfs.waits)
        try:
            handle = self.tier.acquire(key, self_checked=True, durable=False)
        except NotFoundError as exc:
            raise TreeGoneError(f"{exc}: a commit's tree, which garbage collection deletes "
                                "once the retention rules expire the commit ('gravfs fsck' "
                                "counts those); otherwise the store is damaged") from None
        try:
            try:
                reader = self._new_reader(handle.path, key, state, self._recover(key))
            except CorruptDataError as e:  # its footer, index or properties
                handle.release()
                handle = self._refetch(key, e)
                reader = self._new_reader(handle.path, key, self._verified.pop(key, None))
            size = getattr(handle, "size", None)
            if size is None:
                size = os.path.getsize(handle.path)
        finally:
            handle.release()
        return OpenSST(reader, size)

    def open_range(self, range_id: str) -> OpenSST:
        """Open reader of range ``range_id`` (cached, least recently used closed first)."""
        ranges = self._ranges
        o = ranges.get(range_id)  # no lock: one evicted meanwhile is still usable
        if o is not None:
            return o
        state = self._states.peek(range_id)
        o = self._open(range_key(range_id), state)
        with self._lock:
            other = ranges.peek(range_id)
            if other is not None:  # another thread opened it meanwhile
                return other
            if state is None:
                self._remember_state(range_id, o.reader.share_state())
            elif not self._states.touch(range_id):
                self._remember_state(range_id, state)
            # the readers evicted close when the last iterator using them lets go
            ranges.evict(self.max_open_ranges, self.max_open_bytes, adding=o.size)
            ranges.put(range_id, o)
        return o

    def ask_tail(self, range_id: str) -> None:
        """Have the kernel read ``range_id``'s tail (footer to index) into the page
        cache without waiting: ``warm`` of many ranges then finds theirs read at once."""
        with self.tier.acquire(range_key(range_id), self_checked=True, durable=False) as handle:
            handle.will_need(max(0, handle.size - _sstable.TAIL_READ))

    def warm(self, range_id: str) -> bool:
        """Open ``range_id`` ahead of its first lookup while the open readers have room
        (False: they are at their bound, and a reader in use outranks a guess)."""
        ranges = self._ranges
        if range_id in ranges:
            return True
        if len(ranges) >= self.max_open_ranges or ranges.weight >= self.max_open_bytes:
            return False
        # the table's tail (footer to index) read into the page cache first, by a call
        # that lets go of the GIL: the open's page faults would wait on the disk holding it
        with self.tier.acquire(range_key(range_id), self_checked=True, durable=False) as handle:
            handle.read(max(0, handle.size - _sstable.TAIL_READ))
        self.open_range(range_id)
        return True

    def _remember_state(self, range_id: str, state) -> None:
        self._states.put(range_id, state)
        # An evicted state's blocks leave the cache once no open reader uses it (finalizer).
        self._states.evict(self.max_states)

    def drop_parsed(self) -> None:
        """Let go of every open reader and parsed state; their cached blocks leave the
        block cache as the last user of each lets go (a reader mid-iteration keeps its
        own). For a process that has just let go of most of what it knew: the indexes
        and blocks parsed meanwhile are small objects spread through memory, and
        CPython returns an arena only when nothing in it lives."""
        with self._lock:
            self._ranges.clear()
            self._states.clear()
            self._verified.clear()

    def state(self, range_id: str):
        """Parsed state of a range if cached (its ``kv`` serves warm lookups), else None."""
        return self._states.peek(range_id)

    def lookup(self, range_id: str, key: bytes) -> bytes | None:
        """Encoded value at ``key`` in range ``range_id``, or None."""
        st = self._states.peek(range_id)
        if st is not None:
            v = st._kv.get(key)
            if v is not None:
                return v
        return self.open_range(range_id).reader.get(key)

    def lookup_in(self, mr: MetaRange, i: int, key: bytes) -> bytes | None:
        """Encoded value at ``key`` in range i of ``mr`` (slow path of a lookup:
        the key was not in ``mr.kv_maps[i]``), which it refreshes."""
        if key < mr.min_keys[i]:
            return None
        o = self.open_range(mr.ids[i])
        value = o.reader.get(key)
        mr.kv_maps[i] = o.reader._kv
        return value

    def metarange(self, metarange_id: str) -> MetaRange:
        """Parsed metarange ``metarange_id`` (cached)."""
        mr = self._metaranges.get(metarange_id)
        if mr is not None:
            return mr
        key = metarange_key(metarange_id)
        may_wait(key)  # parsed whole: thousands of records for a large lake
        o = self._open(key)
        ranges = []
        try:
            for max_key, value in o.reader:
                ident, data = decode_value(value)
                try:
                    rd = RangeData.FromString(data)
                except Exception as e:
                    raise CorruptDataError(f"metarange record {max_key!r} has bad RangeData: {e}",
                                           path=key) from None
                info = RangeInfo(ident.decode("ascii"), bytes(rd.min_key) or bytes(max_key),
                                 bytes(max_key), rd.count, rd.estimated_size)
                ranges.append(info)
                metarecords.remember(info, value)
        finally:
            o.reader.close()
            del o
        mr = MetaRange(metarange_id, ranges)
        if len(self._metaranges) >= self.max_metaranges:
            for k in list(self._metaranges)[1: max(2, self.max_metaranges // 8)]:
                self._metaranges.pop(k, None)
        self._metaranges[metarange_id] = mr
        return mr

    def remember_metarange(self, mr: MetaRange) -> None:
        """Cache a metarange this process has just written (saves a fetch)."""
        self._metaranges[mr.id] = mr

    # --- reading records ---------------------------------------------------

    def range_lists(self, range_id: str) -> tuple[list[bytes], list[bytes]]:
        """(keys, encoded values) of a whole range, for one-off scans (rewrites,
        diffs): read a block at a time, not kept in the block cache."""
        return self.open_range(range_id).reader.items_lists(fill_cache=False)

    def range_pair_lists(self, left_id: str, right_id: str
                         ) -> tuple[tuple[list[bytes], list[bytes]], tuple[list[bytes], list[bytes]]]:
        """range_lists of two ranges without the data blocks both hold byte for byte
        (equal entries, which a diff drops anyway): a range rewritten for a few
        changes is compared by decoding the blocks around them only."""
        left = self.open_range(left_id)
        right = self.open_range(right_id)
        return _sstable.unshared_items(left.reader, right.reader)

    def range_items(self, range_id: str, start: bytes = b"",
                    fill_cache: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Raw (key, encoded value) pairs of a range with key >= start.

        ``fill_cache=False`` for one-off scans (rewrites, diffs) so they do not
        evict the blocks point lookups keep hot.
        """
        o = self.open_range(range_id)
        yield from o.reader.seek(start, fill_cache=fill_cache)

    def first_key_from(self, mr: MetaRange, start: bytes) -> bytes | None:
        """The tree's first key >= start: one seek (the range whose max key is the first
        >= start holds it)."""
        i = mr.locate(start)
        if i == len(mr):
            return None
        for k, _ in self.range_items(mr.ids[i], start, fill_cache=False):
            return k
        return None

    def range_records(self, range_id: str, start: bytes = b"") -> Iterator[Record]:
        """Decoded records of a range with key >= start."""
        o = self.open_range(range_id)
        for k, v in o.reader.seek(start):
            yield decode_record(k, v)
