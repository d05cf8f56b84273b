"""Reading committed trees: metarange indexes and range SSTs through the local tier.

Everything read here is immutable and content-addressed, so the caches below
(open range readers, parsed metaranges) never need invalidation; they are only
bounded.  Every file is acquired from the tier with a verify callback that
checks all SST block checksums once per process, so a corrupt cached copy is
refetched instead of served.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
from typing import Iterator, NamedTuple

from gravfs import sstable as _sstable
from gravfs.committed.messages import RangeData
from gravfs.committed.record import EMPTY_ID, Record, decode_record, decode_value
from gravfs.errors import CorruptDataError

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


class MetaRange:
    """Parsed metarange: parallel lists for bisecting by key."""

    __slots__ = ("id", "ranges", "ids", "min_keys", "max_keys")

    def __init__(self, metarange_id: str, ranges: list[RangeInfo]):
        self.id = metarange_id
        self.ranges = ranges
        self.ids = [r.id for r in ranges]
        self.min_keys = [r.min_key for r in ranges]
        self.max_keys = [r.max_key for r in ranges]

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


def verify_sst(path: str) -> None:
    """Tier verify callback: full checksum pass over an SST file."""
    reader = _sstable.SSTReader(path)
    try:
        reader.verify()
    finally:
        reader.close()


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


class RangeStore:
    """Opens range and metarange SSTs by ID (gravfs's or lakeFS's) with bounded caches.

    Open readers are bounded by number (``max_open_ranges``, default from the
    descriptor limit) and by mapped bytes (``max_open_bytes``, default half
    the tier budget: a mapped file evicted by the tier still holds its disk
    space until unmapped).  Decoded blocks live in the SST block cache, so
    the count bound mostly saves re-parsing index blocks.
    """

    def __init__(self, tier, max_open_ranges: int | None = None,
                 max_open_bytes: int | None = None, max_metaranges: int = 256,
                 block_cache=None):
        self.tier = tier
        self.block_cache = block_cache  # None: the SST module's shared default cache
        self.max_open_ranges = max_open_ranges or _default_max_open()
        budget = getattr(tier, "budget_bytes", None)
        self.max_open_bytes = max_open_bytes if max_open_bytes is not None else (
            budget // 2 if budget else 4 << 30)
        self.max_metaranges = max_metaranges
        self._ranges: dict[str, OpenSST] = {}
        self._open_bytes = 0
        self._metaranges: dict[str, MetaRange] = {EMPTY_ID: EMPTY_METARANGE}

    # --- opening -----------------------------------------------------------

    def _open(self, key: str) -> OpenSST:
        handle = self.tier.acquire(key, verify=verify_sst)
        try:
            if self.block_cache is None:
                reader = _sstable.SSTReader(handle.path, name=key)
            else:
                reader = _sstable.SSTReader(handle.path, name=key, cache=self.block_cache)
            size = getattr(handle, "size", None)
            if size is None:
                size = os.path.getsize(handle.path)
        finally:
            handle.release()
        return OpenSST(reader, size)

    def open_range(self, range_id: str) -> OpenSST:
        """Cached open reader of range ``range_id``."""
        o = self._ranges.get(range_id)
        if o is None:
            o = self._open(range_key(range_id))
            ranges = self._ranges
            # FIFO eviction: cheap, and readers still in use stay alive by reference.
            while ranges and (len(ranges) >= self.max_open_ranges
                              or self._open_bytes + o.size > self.max_open_bytes):
                try:
                    old = ranges.pop(next(iter(ranges)))
                except (KeyError, StopIteration, RuntimeError):  # raced with another thread
                    break
                self._open_bytes -= old.size
            ranges[range_id] = o
            self._open_bytes += o.size
        return o

    def metarange(self, metarange_id: str) -> MetaRange:
        """Parsed metarange ``metarange_id`` (cached)."""
        mr = self._metaranges.get(metarange_id)
        if mr is not None:
            return mr
        key = metarange_key(metarange_id)
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
                ranges.append(RangeInfo(ident.decode("ascii"), bytes(rd.min_key) or bytes(max_key),
                                        bytes(max_key), rd.count, rd.estimated_size))
        finally:
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

    def range_items(self, range_id: str, start: bytes = b"",
                    fill_cache: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Raw (key, encoded value) pairs of a range with key >= start.

        ``fill_cache=False`` for one-off scans (rewrites, diffs) so they do not
        evict the blocks point lookups keep hot.
        """
        o = self.open_range(range_id)
        yield from o.reader.seek(start, fill_cache=fill_cache)

    def range_records(self, range_id: str, start: bytes = b"") -> Iterator[Record]:
        """Decoded records of a range with key >= start."""
        o = self.open_range(range_id)
        for k, v in o.reader.seek(start):
            yield decode_record(k, v)
