"""Range-level diff of two trees.

Both range lists are walked together; whenever both sides sit at the start of
ranges with equal IDs, the pair is skipped unread (equal IDs mean equal
records).  Only ranges that can hold a difference are read, so the cost
follows the size of the difference, not of the trees.  A range is read only
once its first key is the smallest pending key on both sides, so a range
that is merely overlapped by a long run on the other side is still skipped
if the two sides realign before it.
"""

from __future__ import annotations

from typing import Iterator

from gravfs.committed.reader import MetaRange, RangeStore
from gravfs.committed.record import Record, decode_value
from gravfs.committed.results import ADDED, CHANGED, REMOVED, Diff, Stats


class _Side:
    """Cursor over a tree: either at the start of an unread range or inside a read one."""

    __slots__ = ("mr", "rs", "stats", "i", "items", "cur")

    def __init__(self, mr: MetaRange, rs: RangeStore, stats: Stats):
        self.mr = mr
        self.rs = rs
        self.stats = stats
        self.i = 0          # current range index
        self.items = None   # iterator over range i once read
        self.cur = None     # current (key, value) inside range i

    @property
    def at_start(self) -> bool:
        return self.items is None and self.i < len(self.mr.ranges)

    @property
    def done(self) -> bool:
        return self.items is None and self.i >= len(self.mr.ranges)

    def peek_key(self) -> bytes | None:
        if self.items is not None:
            return self.cur[0]
        if self.i < len(self.mr.ranges):
            return self.mr.min_keys[self.i]
        return None

    def load(self) -> None:
        self.stats.ranges_read += 1
        self.items = self.rs.range_items(self.mr.ids[self.i], fill_cache=False)
        self.cur = next(self.items, None)
        if self.cur is None:  # empty range (never written by gravfs): skip it
            self.items = None
            self.i += 1

    def take(self) -> tuple[bytes, bytes]:
        """Return the current record and move past it (range must be loaded)."""
        cur = self.cur
        nxt = next(self.items, None)
        if nxt is None:
            self.items = None
            self.i += 1
        self.cur = nxt
        return cur

    def skip_range(self) -> None:
        self.i += 1


def _record(kv: tuple[bytes, bytes]) -> Record:
    ident, data = decode_value(kv[1])
    return Record(kv[0], ident, data)


def diff_trees(rs: RangeStore, left: MetaRange, right: MetaRange, stats: Stats) -> Iterator[Diff]:
    """Differences from ``left`` to ``right`` in key order (see module docstring)."""
    L = _Side(left, rs, stats)
    R = _Side(right, rs, stats)
    lids, rids = left.ids, right.ids
    while True:
        if L.at_start and R.at_start and lids[L.i] == rids[R.i]:
            L.skip_range()
            R.skip_range()
            continue
        lk = L.peek_key()
        rk = R.peek_key()
        if lk is None and rk is None:
            return
        if rk is None or (lk is not None and lk < rk):
            if L.items is None:
                L.load()
                continue
            yield Diff(lk, REMOVED, _record(L.take()), None)
        elif lk is None or rk < lk:
            if R.items is None:
                R.load()
                continue
            yield Diff(rk, ADDED, None, _record(R.take()))
        else:
            if L.items is None or R.items is None:
                # Load, then compare again with the real first keys.
                if L.items is None:
                    L.load()
                if R.items is None:
                    R.load()
                continue
            lkv, rkv = L.take(), R.take()
            if lkv[1] != rkv[1]:
                lrec, rrec = _record(lkv), _record(rkv)
                if lrec.identity != rrec.identity:
                    yield Diff(lkv[0], CHANGED, lrec, rrec)
