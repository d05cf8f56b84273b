"""Three-way merge of committed trees.

The changes of each side relative to the base come from range-level diffs
(equal ranges are never read), so the cost follows the size of the changes.
They are joined by key: a key changed on one side only takes that side's
value; a key changed on both sides to the same outcome is already right on
both; one changed on both sides to values a ``same`` rule calls equivalent
(the file layer's: the same file but for its times) keeps dest's; anything
else is a conflict, reported (strategy "fail") or resolved ("source-wins",
"dest-wins").

The result is stitched (stitch.py) from two views, dest corrected by the
source-side changes and source corrected by the dest-side changes, so whole
ranges are taken by ID from whichever side has them unchanged: a range equal
in base and source yields dest's side unread, one equal in base and dest
yields source's.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

from gravfs.version.committed.diff import diff_trees
from gravfs.version.committed.reader import MetaRange, RangeStore
from gravfs.version.committed.record import encode_value
from gravfs.version.committed.results import Diff, Stats
from gravfs.version.strategies import MERGE_STRATEGIES as STRATEGIES  # noqa: F401 (exported)


DEST_BIT = 1      # view 0: dest
SOURCE_BIT = 2    # view 1: source


def _outcome(d: Diff):
    """(identity, encoded value) a diff leads to, or (None, None) for a removal."""
    r = d.right
    if r is None:
        return None, None
    return r.identity, encode_value(r.identity, r.data)


def join_changes(rs: RangeStore, base: MetaRange, source: MetaRange, dest: MetaRange,
                 strategy: str, stats: Stats, conflicts: list[bytes],
                 on_conflict=None, start: bytes | None = None,
                 end: bytes | None = None,
                 same: Optional[Callable[[bytes, bytes], bool]] = None) -> Iterator[tuple]:
    """Override entries (key, identity, value, mask) for the stitcher, in key order.

    ``mask`` flags the views the target differs from at that key.  Conflicting
    keys are appended to ``conflicts``; with strategy "fail" they yield
    nothing and ``on_conflict`` is called once, at the first one.  ``start`` /
    ``end``: only keys in (start, end] (a slice, see parallel.py). ``same(source
    data, dest data)``: whether two different values are the same change (module doc).
    """
    shared = _RecentRanges(rs)  # both diffs read base's differing ranges: decode them once
    sdiff = diff_trees(shared, base, source, stats, start, end)
    ddiff = diff_trees(shared, base, dest, stats, start, end)
    s = next(sdiff, None)
    d = next(ddiff, None)
    while s is not None or d is not None:
        if d is None or (s is not None and s.key < d.key):
            ident, value = _outcome(s)
            yield (s.key, ident, value, DEST_BIT)
            s = next(sdiff, None)
        elif s is None or d.key < s.key:
            ident, value = _outcome(d)
            yield (d.key, ident, value, SOURCE_BIT)
            d = next(ddiff, None)
        else:
            sr, dr = s.right, d.right
            equal = (sr is None and dr is None) or (
                sr is not None and dr is not None and sr.identity == dr.identity)
            if (not equal and same is not None and sr is not None and dr is not None
                    and same(sr.data, dr.data)):
                ident, value = _outcome(d)
                yield (d.key, ident, value, SOURCE_BIT)  # dest's, in both views
            elif not equal:
                conflicts.append(s.key)
                if strategy == "source-wins":
                    ident, value = _outcome(s)
                    yield (s.key, ident, value, DEST_BIT)
                elif strategy == "dest-wins":
                    ident, value = _outcome(d)
                    yield (d.key, ident, value, SOURCE_BIT)
                elif on_conflict is not None and len(conflicts) == 1:
                    on_conflict()
            s = next(sdiff, None)
            d = next(ddiff, None)


class _RecentRanges:
    """range_lists of a RangeStore, keeping the last few ranges decoded.

    The two diffs of a merge walk the base side by side, so a base range both
    must read is asked for twice within a few ranges.
    """

    SIZE = 6

    def __init__(self, rs: RangeStore):
        self._rs = rs
        self._recent: dict[str, tuple[list[bytes], list[bytes]]] = {}

    def range_pair_lists(self, left_id: str, right_id: str):
        return self._rs.range_pair_lists(left_id, right_id)

    def range_lists(self, range_id: str) -> tuple[list[bytes], list[bytes]]:
        got = self._recent.get(range_id)
        if got is None:
            got = self._rs.range_lists(range_id)
            if len(self._recent) >= self.SIZE:
                del self._recent[next(iter(self._recent))]
            self._recent[range_id] = got
        return got
