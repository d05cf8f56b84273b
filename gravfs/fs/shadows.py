"""Files hidden by a directory of the same name: a tree holding a file at ``a`` and keys
under ``a/`` (another writer's, as an object store allows both; gravfs refuses to make
one). The mount shows the directory, so the file cannot be reached there.

Keys are sorted, so the keys that may still fall under a file ``f`` are those before
``after_subtree(f + b"/")``: the files whose span is open form a stack, the
innermost on top (spans nest or are disjoint). A tree is read range by range and a
range's findings and open files are kept per range ID (a range shared by many commits is
read once); a span that runs past its range's end is carried into the next ranges of
each tree, whose keys are then read again when the span runs past a range's first key
(rare: it takes a file followed across a range end by names such as ``a-1`` or
``a.txt``, which sort between ``a`` and ``a/``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

from gravfs.version.staging.view import after_subtree


@dataclass
class RangeShadows:
    """What one range alone shows: (file, a key under it) pairs, files still open."""
    found: list[tuple[bytes, bytes]] = field(default_factory=list)
    open_files: list[bytes] = field(default_factory=list)


class ShadowScan:
    """Feed a range's keys in order (``add``), then ``done`` for its findings."""

    def __init__(self) -> None:
        self.result = RangeShadows()
        self._named: set[bytes] = set()  # files found (the first key under each is kept)
        self._stack: list[tuple[bytes, bytes, bytes]] = []  # (file, file/, past its span)

    def add(self, key: bytes, is_dir: bool) -> None:
        stack = self._stack
        while stack and key >= stack[-1][2]:
            stack.pop()
        if stack:
            f, under, _ = stack[-1]
            if f not in self._named and key.startswith(under):
                self._named.add(f)
                self.result.found.append((f, key))
        if not is_dir and not key.endswith(b"/"):
            under = key + b"/"
            stack.append((key, under, after_subtree(under)))

    def done(self) -> RangeShadows:
        self.result.open_files = [f for f, _, _ in self._stack]
        return self.result


def carry(open_files: list[bytes], keys: list[bytes]) -> tuple[list[tuple[bytes, bytes]],
                                                                list[bytes]]:
    """Files open from earlier ranges against a later range's sorted keys: (pairs found,
    the files still open past its end)."""
    found = []
    stack = list(open_files)
    for f in open_files:
        under = f + b"/"
        lo = bisect.bisect_left(keys, under)
        hi = bisect.bisect_left(keys, after_subtree(under))
        if lo < hi:
            found.append((f, keys[lo]))
        if hi < len(keys):
            stack.remove(f)
    return found, stack


def tree_shadows(ranges: Iterable[tuple[str, bytes]], summaries: dict[str, RangeShadows],
                 range_keys) -> list[tuple[bytes, bytes]]:
    """The (file, a key under it) pairs of a tree whose ranges, in key order, are
    ``ranges`` ((range ID, its first key), each summarized in ``summaries``), including
    pairs across ranges; ``range_keys(range_id)`` gives a range's sorted keys, read only
    when a span runs past that range's first key (a range's last file usually ends
    before the next range's first key)."""
    found: list[tuple[bytes, bytes]] = []
    named: set[bytes] = set()  # a file open across ranges may be found in several
    open_files: list[bytes] = []
    for rid, first in ranges:
        s = summaries[rid]
        pairs = s.found
        open_files = [f for f in open_files if first < after_subtree(f + b"/")]
        if open_files:
            more, open_files = carry(open_files, range_keys(rid))
            pairs = more + pairs  # (the carried files sort before this range's)
        for f, k in pairs:
            if f not in named:
                named.add(f)
                found.append((f, k))
        open_files += s.open_files
    return found
