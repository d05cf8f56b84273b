"""A function mapped over many items on a thread pool: results in order, a bounded
number of items in flight.

``Executor.map`` submits every item at once, a future each: a million items held
1.7 GB (measured, with their results) before the first result was taken, and the
work done ahead of its consumer was lost to an interrupt (a local import left 27k
unpublished temporary objects in the store after Ctrl-C).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(pool: Executor, fn: Callable[[T], R], items: Iterable[T],
                ahead: int) -> Iterator[R]:
    """``fn`` of each item, in the items' order, with at most ``ahead`` submitted and
    not yet taken; what is still queued when the consumer stops is cancelled."""
    pending: deque = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
