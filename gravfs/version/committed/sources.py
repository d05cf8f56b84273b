"""Change sets too large to hand around: their keys, and a reader from any key on.

A commit of a million staged entries would spend seconds pickling them to the
worker processes of a parallel apply (parallel.py), more than the apply saves.
So the staging layer passes a ``SlicedChanges``: the sorted keys alone (enough
to plan the slices), a reader for this process, and a picklable recipe with
which each worker reads its own slice from where the changes live (LMDB
allows readers in many processes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain, islice
from operator import itemgetter, lt as _lt
from typing import Callable, Iterable, Iterator, Optional

from gravfs.version.committed.record import encode_value

_key = itemgetter(0)

# reader(after) -> lists of change tuples (Change fields), or of override entries,
# with key > after, in key order
ChunkReader = Callable[[Optional[bytes]], Iterator[list]]


def overrides_of(changes: list) -> list[tuple]:
    """Change tuples (strictly ascending keys) -> the stitcher's override entries
    (key, identity or None, encoded value or None, 1), converted in bulk.

    A put may carry its already-encoded value (Change.value, as staging keeps
    it), which saves a decode/encode round trip per record.
    """
    _check_order(list(map(_key, changes)), None)
    return as_overrides(changes)


def as_overrides(changes: list) -> list[tuple]:
    """overrides_of without the order check, for a caller that checks later."""
    return [(ch[0], None, None, 1) if ch[1] is None
            else (ch[0], ch[1], ch[3], 1) if len(ch) > 3 and ch[3] is not None
            else (ch[0], ch[1], encode_value(ch[1], ch[2]), 1) for ch in changes]


def _check_order(keys: list[bytes], last: Optional[bytes]) -> None:
    if (last is not None and keys and keys[0] <= last) or not all(
            map(_lt, keys, islice(keys, 1, None))):
        bad = next(k for p, k in zip([last] + keys, keys) if p is not None and k <= p)
        raise ValueError(f"changes not in strictly ascending key order at {bad!r}")


def chained(chunks: Iterable[list]) -> Iterator[tuple]:
    """Chunks of override entries as one stream, checking that keys ascend
    strictly within and across chunks (a reader's fault must not reach a tree)."""
    def checked() -> Iterator[list]:
        last = None
        for chunk in chunks:
            if chunk:
                keys = list(map(_key, chunk))
                _check_order(keys, last)
                last = keys[-1]
                yield chunk
    return chain.from_iterable(checked())


@dataclass(frozen=True)
class RemoteChanges:
    """What a worker process needs to read a change set itself: ``fn(*args, after)``
    yields its chunks of override entries like SlicedChanges.read_overrides (fn a
    module-level function)."""

    fn: Callable
    args: tuple

    def overrides(self, after: Optional[bytes]) -> Iterator[tuple]:
        return chained(self.fn(*self.args, after))


@dataclass
class SlicedChanges:
    """A sorted change set given by its keys and readers rather than as a list.

    Iterating it yields every change (in this process); ``len`` counts them.
    ``load_keys`` reads the sorted keys, once, when first needed (a caller that
    only iterates never reads them). ``read`` gives chunks of change tuples,
    ``read_overrides`` the same changes as override entries (a source that
    stores values encoded builds those directly: a million-record commit
    saves a pass of tuples).
    """

    load_keys: Callable[[], list[bytes]]
    read: ChunkReader
    read_overrides: ChunkReader
    remote: RemoteChanges

    @cached_property
    def keys(self) -> list[bytes]:
        return self.load_keys()

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[tuple]:
        return chain.from_iterable(self.read(None))

    def overrides(self, after: Optional[bytes]) -> Iterator[tuple]:
        """Override entries of the changes with key > after (all for None)."""
        return chained(self.read_overrides(after))
