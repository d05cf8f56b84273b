"""Sealed staging tokens as a change set a commit's worker processes read themselves.

A commit reads whole tokens.  Handing a million staged changes to the worker
processes of a parallel apply would cost more in pickling than the workers
save, so the commit passes SlicedChanges (gravfs.version.committed.sources):
the keys alone, read without their values, and a recipe with which each
worker opens this LMDB environment read-only and reads its own slice.  Sealed
tokens never change until the commit that took them has landed, so every
reader sees the same changes.

Values stay encoded (the lakeFS value staging keeps): a change is ``(key,
identity, None, encoded value)``, or ``(key, None, None)`` for a deletion; a
commit reads them straight as the stitcher's override entries ``(key,
identity or None, encoded value or None, 1[, record ID])``.  A provisional put is a
deletion here: a commit never takes it (it stays staged, see
StagingArea.carry_provisional).  Tokens are read by the cursor in chunks
converted by comprehensions; a token holding paths longer than
MAX_PLAIN_PATH is read through iter_token from the first chunk that holds
one (those keys sort apart from their paths).
"""

from __future__ import annotations

from bisect import bisect_right
from functools import partial
from itertools import chain, islice
from operator import itemgetter
from typing import Callable, Iterator, Optional

from gravfs.version.committed.record import decode_identity
from gravfs.version.committed.sources import RemoteChanges, SlicedChanges, as_overrides
from gravfs.version.staging import view
from gravfs.version.staging.area import (LONG_HEAD, PROVISIONAL, PUT, PUT_ID, TOMBSTONE,
                                         StagingArea, staged_value)

CHUNK = 16384  # entries per chunk once a token turns out to be long
_FIRST_CHUNK = 64
_first = itemgetter(0)
_PUT = PUT[0]
_PUT_ID = PUT_ID[0]
_ID32 = 64  # the zigzag varint of 32: an encoded value's identity is 32 bytes
# a put with its record ID: marker, record ID at [1:33], lakeFS value from 33


def staged_changes(area: StagingArea, tokens: list[str]) -> SlicedChanges:
    """The changes of ``tokens`` (newest first wins) as SlicedChanges."""
    tokens = tuple(tokens)
    return SlicedChanges(partial(read_keys, area, tokens), partial(read_chunks, area, tokens),
                         partial(read_chunks, area, tokens, overrides=True),
                         RemoteChanges(read_path, (area.path, tokens, True)))


def read_keys(area: StagingArea, tokens: tuple[str, ...]) -> list[bytes]:
    """The tokens' changed keys in order, read without their values where the layout
    allows."""
    with area.read_txn() as txn:
        return _keys(area, txn, tokens)


def read_chunks(area: StagingArea, tokens: tuple[str, ...], after: Optional[bytes],
                overrides: bool = False) -> Iterator[list[tuple]]:
    """Lists of the tokens' changes with key > ``after`` (all for None), in key
    order: change tuples, or override entries if ``overrides``."""
    with area.read_txn() as txn:
        yield from _chunks(area, txn, tokens, after, overrides)


def read_path(path: str, tokens: tuple[str, ...], overrides: bool,
              after: Optional[bytes]) -> Iterator[list[tuple]]:
    """read_chunks in another process: opens the database at ``path`` read-only."""
    area = StagingArea(path, readonly=True)
    try:
        yield from read_chunks(area, tokens, after, overrides)
    finally:
        area.close()


def _chunks(area: StagingArea, txn, tokens: tuple[str, ...], after: Optional[bytes],
            overrides: bool = False) -> Iterator[list[tuple]]:
    if not tokens:
        return
    if len(tokens) == 1:
        yield from _token_chunks(area, txn, tokens[0], after,
                                 _as_overrides if overrides else _as_changes)
        return
    layers = [view.RawTokenLayer(area, txn, t) for t in tokens]
    items = view.merged(layers, after or b"")
    while True:
        chunk = list(islice(items, CHUNK))
        if not chunk:
            return
        if after is not None and chunk[0][0] <= after:
            chunk = [c for c in chunk if c[0] > after]
        yield as_overrides(chunk) if overrides else chunk


def _token_chunks(area: StagingArea, txn, token: str, after: Optional[bytes],
                  convert: Callable[[list, int], list]) -> Iterator[list[tuple]]:
    tok = bytes.fromhex(token)
    n = len(tok)
    cur = txn.cursor(db=area.entries_db)
    if not cur.set_range(tok + (after or b"")[:LONG_HEAD]):
        return
    last = after  # the last key yielded: what follows must be greater
    for pairs in _prefixed(iter(cur), tok, _first):
        if max(map(len, map(_first, pairs))) - n > LONG_HEAD:
            # long paths from here on: iter_token puts them in path order
            rest = ((path, raw) for path, raw in area.iter_token(txn, token, last or b"")
                    if last is None or path > last)
            while True:
                chunk = convert(list(islice(rest, CHUNK)), 0)
                if not chunk:
                    return
                yield chunk
        chunk = convert(pairs, n)
        if last is not None and chunk[0][0] <= last:
            chunk = [c for c in chunk if c[0] > last]
        if chunk:
            last = chunk[-1][0]
            yield chunk


def _prefixed(items: Iterator, prefix: bytes, key: Callable) -> Iterator[list]:
    """Lists of the cursor's ``items`` from its position while ``key(item)`` starts
    with ``prefix``: small at first (a small token reads no more than it holds),
    growing; the last cut by bisection, so the per-item work stays in C."""
    n = len(prefix)
    size = _FIRST_CHUNK
    while True:
        chunk = list(islice(items, size))
        size = min(size * 4, CHUNK)
        if not chunk:
            return
        if key(chunk[-1])[:n] == prefix:
            yield chunk
            continue
        chunk = chunk[:bisect_right(chunk, prefix, key=lambda item: key(item)[:n])]
        if chunk:
            yield chunk
        return


def _as_changes(pairs: list[tuple[bytes, bytes]], n: int) -> list[tuple]:
    """(stored key, stored value) -> changes; ``n``: bytes of token before the path.

    The first tests are a put of a 32-byte identity (nearly every entry), with its
    record ID and without, tested on ints so that no byte string is sliced to
    classify it."""
    return [(k[n:], raw[34:66], None, raw[33:])
            if len(raw) >= 66 and raw[0] == _PUT_ID and raw[33] == _ID32
            else (k[n:], raw[2:34], None, raw[1:])
            if len(raw) >= 34 and raw[0] == _PUT and raw[1] == _ID32
            else (k[n:], None, None) if raw == TOMBSTONE or raw[:1] == PROVISIONAL
            else (k[n:], decode_identity(staged_value(raw)), None, staged_value(raw))
            for k, raw in pairs]


def _as_overrides(pairs: list[tuple[bytes, bytes]], n: int) -> list[tuple]:
    """_as_changes as override entries (sources.as_overrides), in one pass, each with
    a fifth field: the record ID a put was stored with, else None."""
    return [(k[n:], raw[34:66], raw[33:], 1, raw[1:33])
            if len(raw) >= 66 and raw[0] == _PUT_ID and raw[33] == _ID32
            else (k[n:], raw[2:34], raw[1:], 1, None)
            if len(raw) >= 34 and raw[0] == _PUT and raw[1] == _ID32
            else (k[n:], None, None, 1, None) if raw == TOMBSTONE or raw[:1] == PROVISIONAL
            else (k[n:], decode_identity(staged_value(raw)), staged_value(raw), 1,
                  raw[1:33] if raw[0] == _PUT_ID else None)
            for k, raw in pairs]


def _keys(area: StagingArea, txn, tokens: tuple[str, ...]) -> list[bytes]:
    if len(tokens) != 1:
        return [c[0] for c in chain.from_iterable(_chunks(area, txn, tokens, None))]
    tok = bytes.fromhex(tokens[0])
    n = len(tok)
    cur = txn.cursor(db=area.entries_db)
    if not cur.set_range(tok):
        return []
    keys: list[bytes] = []
    for chunk in _prefixed(cur.iternext(keys=True, values=False), tok, _same):
        if max(map(len, chunk)) - n > LONG_HEAD:
            return [c[0] for c in chain.from_iterable(
                _token_chunks(area, txn, tokens[0], None, _as_changes))]
        keys += [k[n:] for k in chunk]
    return keys


def _same(k: bytes) -> bytes:
    return k
