"""Merged, seekable views over layers of sorted records.

A branch reads as: staging token, then sealed tokens newest first, then the
compacted or committed metarange. Each layer is a sorted stream that can be
reopened at any key, so a directory listing can jump past a whole
subdirectory instead of scanning it.

Stream items are ``(key, identity, data)``; ``identity is None`` is a tombstone.
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, Iterator, Optional, Protocol

from gravfs.version.committed.record import decode_identity, decode_value
from gravfs.version.staging.area import PROVISIONAL, TOMBSTONE, StagingArea, staged_value

Item = tuple[bytes, Optional[bytes], bytes]


class Layer(Protocol):
    def open(self, start: bytes) -> Iterator[Item]: ...


def decode_staged(raw: bytes) -> tuple[Optional[bytes], bytes]:
    """Stored LMDB value -> (identity or None for a tombstone, data)."""
    if raw == TOMBSTONE:
        return None, b""
    return decode_value(staged_value(raw))


class TokenLayer:
    """One staging token, read inside a caller-held LMDB read transaction."""

    def __init__(self, area: StagingArea, txn, token: str):
        self.area, self.txn, self.token = area, txn, token

    def open(self, start: bytes) -> Iterator[Item]:
        for key, raw in self.area.iter_token(self.txn, self.token, start):
            ident, data = decode_staged(raw)
            yield key, ident, data


class RawTokenLayer:
    """One staging token as changes for apply: ``(key, identity, None, encoded)``.

    Staging stores values already encoded, so a commit passes them through
    without decoding the data. A provisional put is a deletion here: a commit
    never takes it (it stays staged, see StagingArea.carry_provisional). A
    commit reads whole tokens through feed.py; this layer merges several.
    """

    def __init__(self, area: StagingArea, txn, token: str):
        self.area, self.txn, self.token = area, txn, token

    def open(self, start: bytes):
        for key, raw in self.area.iter_token(self.txn, self.token, start):
            if raw == TOMBSTONE or raw[:1] == PROVISIONAL:
                yield key, None, None
            else:
                enc = staged_value(raw)
                yield key, decode_identity(enc), None, enc


class CommittedLayer:
    """A metarange, through any object with ``iter(metarange_id, start)``."""

    def __init__(self, committed, metarange_id: str):
        self.committed, self.metarange_id = committed, metarange_id

    def open(self, start: bytes) -> Iterator[Item]:
        return self.committed.iter(self.metarange_id, start)  # Records: (key, ident, data)


class FuncLayer:
    """Adapter for ad-hoc sorted sources (tests, models)."""

    def __init__(self, fn: Callable[[bytes], Iterable[Item]]):
        self.fn = fn

    def open(self, start: bytes) -> Iterator[Item]:
        return iter(self.fn(start))


def merged(layers: list[Layer], start: bytes = b"") -> Iterator[Item]:
    """Union of the layers in key order; on equal keys the earliest layer wins.

    Tombstones are yielded (callers decide whether to hide them), so a commit can
    turn them into deletions.
    """
    if len(layers) == 1:
        yield from layers[0].open(start)
        return
    its = [layer.open(start) for layer in layers]
    heap = []
    for i, it in enumerate(its):
        first = next(it, None)
        if first is not None:
            heap.append((first[0], i, first))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        if len(heap) == 1:  # one layer left (often: staging holds nothing further on)
            yield heap[0][2]
            yield from its[heap[0][1]]
            return
        key, i, item = pop(heap)
        nxt = next(its[i], None)
        if nxt is not None:
            push(heap, (nxt[0], i, nxt))
        while heap and heap[0][0] == key:
            _, j, _shadowed = pop(heap)
            nxt = next(its[j], None)
            if nxt is not None:
                push(heap, (nxt[0], j, nxt))
        yield item


def live(layers: list[Layer], start: bytes = b"") -> Iterator[Item]:
    """merged() without tombstones: what a reader of the branch sees."""
    for item in merged(layers, start):
        if item[1] is not None:
            yield item


def after_subtree(prefix: bytes) -> bytes:
    """Smallest key greater than every key under ``prefix`` (which ends with '/')."""
    return prefix[:-1] + b"0"  # '0' is the byte after '/'


def list_dir(layers: list[Layer], prefix: bytes, start_after: Optional[bytes] = None
             ) -> Iterator[tuple[bytes, Optional[Item], Optional[Item]]]:
    """Children of directory ``prefix`` (b"" or ending with '/'), in key order.

    Yields ``(name, item, None)`` for files and ``(name, None, first)`` for
    subdirectories (implied by any live key below them, or by an explicit ``name/``
    marker), ``first`` being the first live item under ``name/``: the marker, when the
    directory has one, is that item (its reader needs no lookup of its own).
    Order and ``start_after`` use each child's listing key: ``name`` for a
    file, ``name/`` for a directory. Each subdirectory costs one seek, not a
    scan of its contents.
    """
    if start_after is None:
        start = prefix
    elif start_after.endswith(b"/"):
        start = after_subtree(prefix + start_after)
    else:
        start = prefix + start_after + b"\x00"
    plen = len(prefix)
    while True:
        for key, ident, data in merged(layers, start):
            if not key.startswith(prefix):
                return
            if ident is None:
                continue
            rest = key[plen:]
            if not rest:
                continue  # the directory's own marker
            if rest[0] != 47:  # (most names: no leading "/")
                slash = rest.find(b"/")
            else:  # leading slashes (keys other writers made: "/x", "a//b") belong to the name
                lead = len(rest) - len(rest.lstrip(b"/"))
                slash = rest.find(b"/", lead) if lead < len(rest) else -1
            if slash < 0:
                yield rest, (key, ident, data), None
                continue
            name = rest[:slash]
            yield name, None, (key, ident, data)
            start = after_subtree(prefix + name + b"/")
            break
        else:
            return


def listing_key(name: bytes, item: Optional[Item]) -> bytes:
    """The continuation key of a list_dir child (see list_dir)."""
    return name if item is not None else name + b"/"


def first_live_under(layers: list[Layer], prefix: bytes) -> Optional[Item]:
    """First live item whose key starts with prefix (a directory exists iff one does)."""
    for item in merged(layers, prefix):
        if not item[0].startswith(prefix):
            return None
        if item[1] is not None:
            return item
    return None
