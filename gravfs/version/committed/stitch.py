"""Building a target tree from existing trees plus sparse overrides (apply, merge).

The target is described by one or more *views*: each view is an existing tree
whose records, corrected by the overrides flagged for it, are exactly the
target.  apply has one view (the base; every change is flagged for it);
merge has two (dest corrected by source's changes, and source corrected by
dest's), so whichever side has whole ranges to offer can supply them.

The stitcher walks the key space once.  Whenever the writer sits at a range
break and some view's next range starts right after the last decided key and
holds no override, that range is appended by ID without being read.
Otherwise records are streamed from one view, merged with its overrides, and
fed to the writer, which breaks by the policy; as soon as it breaks at the
end of a range of some view, copying resumes ("reused ranges keep their
boundaries").  If the writer keeps missing the old boundaries for
``max_carry`` untouched ranges, it is forced to break at the end of one so
the cost of a change stays bounded.

Every break the writer takes is the policy's, decided from an empty writer at
a boundary that is itself the policy's, so (barring such a forced break) the
result has exactly the ranges a from-scratch write of the same records would
have: tree IDs depend on content only, not on the history of edits.  With the
lakeFS rule and min_size 0 any hash break realigns, so forced breaks only
happen when nearly every range ends at max_size (a misconfigured policy).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import islice
from operator import itemgetter
from typing import Iterator

from gravfs.version.committed.rangepatch import patch_range
from gravfs.version.committed.reader import MetaRange, RangeStore
from gravfs.version.committed.recordids import split as split_ids
from gravfs.version.committed.results import Stats
from gravfs.version.committed.writer import TreeWriter

_RUN = 4096  # overrides merged per step
_PULL = 1024  # overrides taken from the source at a time
_key = itemgetter(0)

# Override entries: (key, identity or None for "absent", encoded value or None, mask)
# where bit i of mask means "differs from view i". A source that keeps record IDs
# (staging: feed.py) adds a fifth field to every entry: a put's valueRecordID, which
# the writer then does not hash, or None.


class _Overrides:
    """Sorted override stream with a lookahead buffer shared by all views."""

    def __init__(self, source: Iterator[tuple]):
        self._src = iter(source)
        self.buf: list[tuple] = []
        self.bi = 0

    def _pull(self) -> bool:
        """Append the next entries of the source to the buffer; False at its end."""
        chunk = list(islice(self._src, _PULL))
        if not chunk:
            return False
        self.buf += chunk
        return True

    def drop_upto(self, last: bytes) -> None:
        """Consume the entries with key <= last (found by bisection: the buffer is sorted)."""
        buf, bi = self.buf, self.bi
        while True:
            if bi == len(buf):
                if bi > 1024:
                    buf.clear()
                    bi = 0
                if not self._pull():
                    break
            if buf[-1][0] <= last:
                bi = len(buf)
                continue
            bi = bisect_right(buf, last, bi, key=_key)
            break
        if bi > 4096:
            del buf[:bi]
            bi = 0
        self.bi = bi

    def next_for(self, bit: int, last: bytes | None):
        """First entry flagged for ``bit`` with key > last (or None)."""
        j = self.bi
        buf = self.buf
        while True:
            if j == len(buf):
                if not self._pull():
                    return None
            e = buf[j]
            if e[3] & bit and (last is None or e[0] > last):
                return e
            j += 1

    def run_for(self, bit: int, last: bytes | None, upto: bytes | None, limit: int) -> list:
        """Up to ``limit`` entries flagged for ``bit`` with last < key <= upto (not consumed).

        The buffer is sorted by key, so the span is found by bisection and
        filtered a slice at a time.
        """
        out: list = []
        j = self.bi
        buf = self.buf
        while len(out) < limit:
            if j == len(buf) and not self._pull():
                break
            if last is not None and buf[j][0] <= last:
                j = bisect_right(buf, last, j, key=_key)
                continue
            hi = min(len(buf), j + limit - len(out))
            if upto is not None and buf[hi - 1][0] > upto:
                hi = bisect_right(buf, upto, j, hi, key=_key)
            out += [e for e in buf[j:hi] if e[3] & bit]
            if hi < len(buf) and (upto is not None and buf[hi][0] > upto):
                break
            j = hi
        return out

    def any_put_after(self, bit: int, after: bytes) -> bool:
        """Is there a put flagged for ``bit`` with key > after?"""
        j = self.bi
        buf = self.buf
        while True:
            if j == len(buf):
                if not self._pull():
                    return False
            e = buf[j]
            if e[3] & bit and e[1] is not None and e[0] > after:
                return True
            j += 1


class _View:
    """A tree read lazily, positioned just after the last decided key.

    The range being read is held as two lists (keys, values) and a position,
    so the writer can take whole slices of it at once.
    """

    __slots__ = ("bit", "mr", "rs", "stats", "idx", "loaded", "keys", "values", "pos", "rids")

    def __init__(self, bit: int, mr: MetaRange, rs: RangeStore, stats: Stats):
        self.bit = bit
        self.mr = mr
        self.rs = rs
        self.stats = stats
        self.idx = 0        # first range with max_key > last
        self.loaded = -1    # index of the range held in keys/values
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self.rids: list[bytes] | None = None  # their record IDs, when the cache has them
        self.pos = 0        # next record in keys/values

    def sync(self, last: bytes | None) -> int:
        """Advance ``idx`` past ranges wholly <= last."""
        if last is not None:
            mk = self.mr.max_keys
            n = len(mk)
            i = self.idx
            if i < n and mk[i] <= last:
                i += 1
                if i < n and mk[i] <= last:
                    i = bisect_right(mk, last, i)
            self.idx = i
        return self.idx

    def aligned(self, last: bytes | None) -> bool:
        i = self.sync(last)
        return i < len(self.mr.ranges) and (last is None or self.mr.min_keys[i] > last)

    def current(self, last: bytes | None) -> bool:
        """True if the held range is the one to read next and is positioned after last."""
        return (self.loaded >= 0 and self.loaded == self.sync(last) and self.pos < len(self.keys)
                and (last is None or self.keys[self.pos] > last))

    def _load(self, i: int) -> None:
        if self.loaded != i:
            self.stats.ranges_read += 1
            rid = self.mr.ids[i]
            self.keys, self.values = self.rs.range_lists(rid)
            cache = self.rs.record_ids
            blob = cache.get(rid, len(self.keys)) if cache is not None else None
            self.rids = None if blob is None else split_ids(blob)
            self.loaded = i
        self.pos = 0

    def position(self, last: bytes | None) -> None:
        """Hold the range with the first record > last, positioned on that record."""
        if self.current(last):
            return
        while True:
            i = self.sync(last)
            if i >= len(self.mr.ranges):
                self.loaded = -1
                self.keys, self.values, self.pos, self.rids = [], [], 0, None
                return
            self._load(i)
            if last is not None:
                self.pos = bisect_right(self.keys, last)
            if self.pos < len(self.keys):
                return
            self.idx = i + 1   # (only for an empty or mislabelled range)

    def advanced(self, pos: int) -> None:
        """Records before ``pos`` are consumed; at the end of the range leave the next unread."""
        self.pos = pos
        if pos >= len(self.keys):
            self.idx = self.loaded + 1
            self.loaded = -1
            self.keys, self.values, self.pos, self.rids = [], [], 0, None

    @property
    def exhausted(self) -> bool:
        return self.loaded < 0 and self.idx >= len(self.mr.ranges)


BreakState = tuple  # (last decided key or None, bits of the views reading a range there)


def break_state(views: list[_View], last: bytes | None) -> BreakState:
    """Everything the stitcher's future depends on at a break (the writer empty).

    Views, override stream and writer are otherwise functions of ``last``;
    which views hold a range continuing past ``last`` decides which one is
    streamed next, and so where untouched ranges are counted (``max_carry``).
    Two runs over the same input in the same state produce the same ranges
    from there on: parallel.py resumes and joins runs at such states.
    """
    return (last, tuple(v.bit for v in views if v.current(last)))


def _patched(writer: TreeWriter, views: list[_View], ovr: _Overrides, last: bytes | None) -> bool:
    """Try rangepatch on the first view aligned at a range holding overrides."""
    for v in views:
        if not v.aligned(last):
            continue
        i = v.idx
        mk = v.mr.max_keys
        e = ovr.next_for(v.bit, last)
        if e is None or e[0] > mk[i]:
            continue
        if i == len(mk) - 1 and ovr.any_put_after(v.bit, mk[i]):
            return False  # the tree's last range takes what follows it: stream it
        run = ovr.run_for(v.bit, last, mk[i], _RUN)
        if len(run) >= _RUN or not patch_range(writer, v.rs, v.mr.ranges[i], run):
            return False
        v.stats.ranges_read += 1
        v.idx = i + 1
        return True
    return False


def stitch(writer: TreeWriter, views: list[_View], overrides: Iterator[tuple],
           max_carry: int | None = 8, *, start: BreakState | None = None,
           at_break=None) -> BreakState | None:
    """Feed the target into ``writer`` (see module docstring).

    Without the keywords: the whole target, returning None.  ``start``
    resumes at a break state (break_state) of a run over the same input;
    ``overrides`` may then begin anywhere before it.  ``at_break(state,
    ranges_out)`` is called at every break the stitcher reaches (at ``start``,
    after a run of copied ranges, after a break in streamed records) with
    the writer empty; when it returns True, the
    stitcher stops there and returns that state (the writer stays empty).
    """
    ovr = _Overrides(overrides)
    last: bytes | None = None
    if start is not None:
        last = start[0]
        if last is not None:
            ovr.drop_upto(last)
        for v in views:
            if v.bit in start[1]:
                v.position(last)
    while True:
        if at_break is not None:
            state = break_state(views, last)
            if at_break(state, len(writer.out)):
                return state
        # 1. At a break: append whole ranges by ID while some view offers one.
        if writer.empty:
            progress = True
            while progress:
                progress = False
                for v in views:
                    mr = v.mr
                    mk = mr.max_keys
                    n = len(mk)
                    while v.aligned(last):
                        # Copy, in one step, every range from here up to the first one
                        # holding an override for this view (ranges of a tree are
                        # disjoint and ordered, so each starts after the one before).
                        i = v.idx
                        e = ovr.next_for(v.bit, last)
                        j = n if e is None else bisect_left(mk, e[0], i)
                        if j == n and e is not None and ovr.any_put_after(v.bit, mk[n - 1]):
                            # A tree's last range ends where its input ended, not at a
                            # break: records added after it must be written with it.
                            j = n - 1
                        if j <= i:
                            break
                        writer.copy_ranges(mr.ranges[i:j])
                        last = mk[j - 1]
                        v.idx = j
                        ovr.drop_upto(last)
                        progress = True
                        if at_break is not None:  # a break state too
                            state = break_state(views, last)
                            if at_break(state, len(writer.out)):
                                return state
        # 2. Stream records from one view (one already reading here if any)
        #    until the writer breaks.
        v = views[0]
        for w in views:
            if w.current(last):
                v = w
                break
        else:
            # At a range of some view with a few overrides in it: edit that range's
            # SST instead of streaming it, where its end provably stays (rangepatch).
            if writer.empty and _patched(writer, views, ovr, last):
                last = writer.last_key
                ovr.drop_upto(last)
                continue
        v.position(last)
        bit = v.bit
        carry = 0
        while True:
            if v.loaded < 0 and not v.exhausted:
                v.position(last)
            keys = v.keys
            pos = v.pos
            if pos >= len(keys):
                # The view has no more records: the rest of the target is overrides.
                run = ovr.run_for(bit, last, None, _RUN)
                if not run:
                    writer.flush()
                    return None
                puts = [x for x in run if x[1] is not None]
                broke = False
                last = run[-1][0]
                if puts:
                    n, broke = writer.take([x[0] for x in puts], [x[2] for x in puts], 0,
                                           len(puts), [x[1] for x in puts],
                                           [x[4] for x in puts] if len(puts[0]) > 4 else None)
                    if broke:
                        last = puts[n - 1][0]
            else:
                seg_end = keys[-1]
                run = ovr.run_for(bit, last, seg_end, _RUN)
                if not run:
                    # Untouched records: take them straight from the range.
                    pos, broke = writer.take(keys, v.values, pos, len(keys), None, v.rids)
                    last = keys[pos - 1]
                    if pos >= len(keys):  # the range ended
                        carry += 1
                        if not broke and max_carry is not None and carry > max_carry:
                            writer.flush()   # give up on the old boundaries: stay bounded
                            broke = True
                    v.advanced(pos)
                else:
                    # Merge the range's records with the overrides falling among them.
                    carry = 0
                    if len(run) == _RUN:
                        seg_end = run[-1][0]
                    values = v.values
                    rids = v.rids
                    end = bisect_right(keys, seg_end, pos)
                    mk: list[bytes] = []
                    mv: list[bytes] = []
                    # record IDs as far as known (None: hashed by the writer)
                    carried = len(run[0]) > 4
                    md: list[bytes | None] | None = (
                        None if rids is None and not carried else [])
                    i = pos
                    for e in run:
                        k = e[0]
                        j = bisect_left(keys, k, i, end)
                        if j > i:
                            mk += keys[i:j]
                            mv += values[i:j]
                            if md is not None:
                                md += rids[i:j] if rids is not None else [None] * (j - i)
                        if j < end and keys[j] == k:
                            j += 1
                        if e[1] is not None:
                            mk.append(k)
                            mv.append(e[2])
                            if md is not None:
                                md.append(e[4] if carried else None)
                        i = j
                    if end > i:
                        mk += keys[i:end]
                        mv += values[i:end]
                        if md is not None:
                            md += rids[i:end] if rids is not None else [None] * (end - i)
                    broke = False
                    last = seg_end
                    if mk:
                        n, broke = writer.take(mk, mv, 0, len(mk), None, md)
                        if broke:
                            last = mk[n - 1]
                    v.advanced(bisect_right(keys, last, pos))
            if broke:
                ovr.drop_upto(last)
                break
            ovr.drop_upto(last)
