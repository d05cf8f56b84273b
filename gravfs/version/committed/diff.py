"""Range-level diff of two trees.

Both range lists are walked together; whenever both sides sit at the start of
ranges with equal IDs, the pair is skipped unread (equal IDs mean equal
records).  Only ranges that can hold a difference are read, so the cost
follows the size of the difference, not of the trees.  A range is read only
once its first key is the smallest pending key on both sides, so a range
that is merely overlapped by a long run on the other side is still skipped
if the two sides realign before it.  Two ranges that start at the same key are
read together, without the data blocks they share byte for byte (a range
rewritten for a few changes keeps most of its blocks), so inside a range too
the cost follows the changes.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterator

from gravfs.version.committed.reader import MetaRange, RangeStore
from gravfs.version.committed.record import decode_record
from gravfs.version.committed.results import ADDED, CHANGED, REMOVED, Diff, Stats


class _Side:
    """Cursor over a tree: at the start of an unread range, or inside a read one."""

    __slots__ = ("mr", "rs", "stats", "i", "keys", "values", "pos")

    def __init__(self, mr: MetaRange, rs: RangeStore, stats: Stats):
        self.mr = mr
        self.rs = rs
        self.stats = stats
        self.i = 0          # current range index
        self.keys = None    # records of range i once read
        self.values = None
        self.pos = 0

    @property
    def at_start(self) -> bool:
        return self.keys is None and self.i < len(self.mr.ranges)

    def peek_key(self) -> bytes | None:
        if self.keys is not None:
            return self.keys[self.pos]
        if self.i < len(self.mr.ranges):
            return self.mr.min_keys[self.i]
        return None

    def load(self, start: bytes | None = None) -> None:
        """Read range i, positioned after ``start`` (a range wholly <= start is passed)."""
        self.stats.ranges_read += 1
        self.place(*self.rs.range_lists(self.mr.ids[self.i]), start)

    def place(self, keys: list[bytes], values: list[bytes], start: bytes | None) -> None:
        """Make (keys, values), read from range i, the current records."""
        pos = 0
        if keys and start is not None and keys[0] <= start:
            pos = bisect_right(keys, start)
        if pos >= len(keys):  # empty range (never written by gravfs), or all <= start
            self.i += 1
            return
        self.keys = keys
        self.values = values
        self.pos = pos

    def take(self) -> tuple[bytes, bytes]:
        """Return the current record and move past it (range must be loaded)."""
        p = self.pos
        kv = self.keys[p], self.values[p]
        self.skip_to(p + 1)
        return kv

    def skip_to(self, pos: int) -> None:
        if pos >= len(self.keys):
            self.keys = self.values = None
            self.pos = 0
            self.i += 1
        else:
            self.pos = pos

    def skip_range(self) -> None:
        self.i += 1


def _load_pair(L: _Side, R: _Side, start: bytes | None) -> None:
    """Read both sides' current ranges, which start at the same key, leaving out
    the blocks they share byte for byte (equal records: no difference there)."""
    L.stats.ranges_read += 1
    R.stats.ranges_read += 1
    (lk, lv), (rk, rv) = L.rs.range_pair_lists(L.mr.ids[L.i], R.mr.ids[R.i])
    L.place(lk, lv, start)
    R.place(rk, rv, start)


def _equal_run(L: _Side, R: _Side) -> int:
    """Length of the run of identical (key, value) pairs at both cursors.

    Galloping (slices of 8, 16, 32, ... compared in C) then bisection inside
    the first unequal slice: O(run) element compares and O(log run) slices,
    so a range with many differences costs O(range) in all, not O(range) per
    difference.
    """
    lk, rk, lv, rv = L.keys, R.keys, L.values, R.values
    i, j = L.pos, R.pos
    limit = min(len(lk) - i, len(rk) - j)
    if limit <= 0 or lk[i] != rk[j] or lv[i] != rv[j]:
        return 0
    lo, step = 1, 8
    while True:
        hi = min(limit, lo + step)
        if lo >= hi:
            return lo
        if lk[i + lo:i + hi] != rk[j + lo:j + hi] or lv[i + lo:i + hi] != rv[j + lo:j + hi]:
            break
        lo = hi
        step *= 2
    # The first mismatch is in [lo, hi).
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if lk[i + lo:i + mid] == rk[j + lo:j + mid] and lv[i + lo:i + mid] == rv[j + lo:j + mid]:
            lo = mid
        else:
            hi = mid
    if lk[i + lo] == rk[j + lo] and lv[i + lo] == rv[j + lo]:
        lo += 1
    return lo


def diff_trees(rs: RangeStore, left: MetaRange, right: MetaRange, stats: Stats,
               start: bytes | None = None, end: bytes | None = None) -> Iterator[Diff]:
    """Differences from ``left`` to ``right`` in key order (see module docstring),
    only for keys > ``start`` and <= ``end`` when given (a slice for parallel.py)."""
    L = _Side(left, rs, stats)
    R = _Side(right, rs, stats)
    if start is not None:
        L.i = bisect_right(left.max_keys, start)
        R.i = bisect_right(right.max_keys, start)
    lids, rids = left.ids, right.ids
    while True:
        if L.at_start and R.at_start and lids[L.i] == rids[R.i]:
            L.skip_range()
            R.skip_range()
            continue
        lk = L.peek_key()
        rk = R.peek_key()
        if end is not None:
            if lk is not None and lk > end:
                lk = None
            if rk is not None and rk > end:
                rk = None
        if lk is None and rk is None:
            return
        if rk is None or (lk is not None and lk < rk):
            if L.keys is None:
                L.load(start)
                continue
            yield Diff(lk, REMOVED, decode_record(*L.take()), None)
        elif lk is None or rk < lk:
            if R.keys is None:
                R.load(start)
                continue
            yield Diff(rk, ADDED, None, decode_record(*R.take()))
        else:
            if L.keys is None or R.keys is None:
                # Load, then compare again with the real first keys.
                if L.keys is None and R.keys is None:
                    _load_pair(L, R, start)
                    continue
                if L.keys is None:
                    L.load(start)
                if R.keys is None:
                    R.load(start)
                continue
            n = _equal_run(L, R)
            if n:
                L.skip_to(L.pos + n)
                R.skip_to(R.pos + n)
                continue
            lkv, rkv = L.take(), R.take()
            lrec, rrec = decode_record(*lkv), decode_record(*rkv)
            if lrec.identity != rrec.identity:
                yield Diff(lkv[0], CHANGED, lrec, rrec)


def diff_under(rs: RangeStore, left: MetaRange, right: MetaRange, stats: Stats,
               key: bytes) -> Iterator[Diff]:
    """The differences at ``key`` and under it (``key/...``): the walk starts at the
    range holding ``key`` and ends past ``key/``'s keys, so it costs the change under
    ``key``, not the tree's."""
    inside = key + b"/"
    past = key + b"0"  # the first key after every key/... ('0' follows '/')
    for d in diff_trees(rs, left, right, stats, start=key[:-1], end=past):
        if d.key == key or d.key.startswith(inside):
            yield d

