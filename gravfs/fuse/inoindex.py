"""Inode number -> inode, in fixed-size lists rather than one dict.

A traversal makes the kernel know millions of inodes. A dict spends about 40 bytes
a number (hash, key and value words, an index slot, and the room its load factor
keeps free); a list slot spends 8. Numbers come from a counter and are never
reused, so the live ones cluster: the index keeps one list per span of SPAN
numbers and drops a list when its last inode goes. The few survivors of a span
that has emptied (an open file, a directory the kernel keeps) move to a dict, so
numbers held for long do not each keep a whole list alive. Numbers outside the
counter's range (hard-link groups' derived numbers) live in that dict too.
"""

from __future__ import annotations

from typing import Generic, Iterator, Optional, TypeVar

T = TypeVar("T")

SPAN_BITS = 8
SPAN = 1 << SPAN_BITS  # numbers a list holds: 2 KiB a list
_MASK = SPAN - 1
THIN = SPAN // 32  # a span down to this many inodes hands them to the dict


class InoIndex(Generic[T]):
    """A mapping of inode numbers to objects (None is not a value)."""

    __slots__ = ("_spans", "_counts", "_sparse", "_len", "_top", "_dense_below")

    def __init__(self, dense_below: int) -> None:
        self._spans: dict[int, list] = {}
        self._counts: dict[int, int] = {}  # span -> values it holds
        self._sparse: dict[int, T] = {}
        self._len = 0
        self._top = -1  # the newest span: the counter still fills it, never thinned
        self._dense_below = dense_below  # numbers from here on always go to the dict

    def __len__(self) -> int:
        return self._len

    def get(self, ino: int) -> Optional[T]:
        span = self._spans.get(ino >> SPAN_BITS)
        if span is not None:
            value = span[ino & _MASK]
            if value is not None:
                return value
        return self._sparse.get(ino) if self._sparse else None

    def __contains__(self, ino: int) -> bool:
        return self.get(ino) is not None

    def __setitem__(self, ino: int, value: T) -> None:
        sparse = self._sparse
        if ino >= self._dense_below or ino in sparse:
            if ino not in sparse:
                self._len += 1
            sparse[ino] = value
            return
        s = ino >> SPAN_BITS
        span = self._spans.get(s)
        if span is None:
            span = self._spans[s] = [None] * SPAN
            self._counts[s] = 0
            if s > self._top:
                self._top = s
        j = ino & _MASK
        if span[j] is None:
            self._counts[s] += 1
            self._len += 1
        span[j] = value

    def pop(self, ino: int, default: Optional[T] = None) -> Optional[T]:
        s = ino >> SPAN_BITS
        span = self._spans.get(s)
        if span is not None:
            j = ino & _MASK
            value = span[j]
            if value is not None:
                span[j] = None
                self._len -= 1
                left = self._counts[s] - 1
                self._counts[s] = left
                if left <= THIN and s != self._top:
                    self._thin(s, span)
                return value
        if ino in self._sparse:
            self._len -= 1
            return self._sparse.pop(ino)
        return default

    def _thin(self, s: int, span: list) -> None:
        base = s << SPAN_BITS
        for j, value in enumerate(span):
            if value is not None:
                self._sparse[base + j] = value
        del self._spans[s], self._counts[s]

    def values(self) -> Iterator[T]:
        for span in list(self._spans.values()):
            yield from (v for v in span if v is not None)
        yield from list(self._sparse.values())

    def compact(self) -> None:
        """Give back what emptied dicts keep (a dict does not shrink when emptied)."""
        self._spans = dict(self._spans)
        self._counts = dict(self._counts)
        self._sparse = dict(self._sparse)

    def spans(self) -> int:
        """Lists held (tests check that emptied spans go)."""
        return len(self._spans)
