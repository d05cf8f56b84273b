"""A function mapped over many items on a thread pool: results in order, a bounded
number of items in flight.

``Executor.map`` submits every item at once, a future each: a million items held
1.7 GB (measured, with their results) before the first result was taken, and the
work done ahead of its consumer was lost to an interrupt (a local import left 27k
unpublished temporary objects in the store after Ctrl-C).

Once a call raises, no further call starts: the consumer gets that error anyway,
and against a store that stopped answering each call waits out its whole timeout
(a commit's uploads of pending objects took two 60 s timeouts to fail, not one,
as the workers freed by the first wave started the next).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _NotStarted(Exception):
    """A call skipped because an earlier-started one raised."""


def ordered_map(pool: Executor, fn: Callable[[T], R], items: Iterable[T],
                ahead: int) -> Iterator[R]:
    """``fn`` of each item, in the items' order, with at most ``ahead`` submitted and
    not yet taken; what is still queued when the consumer stops, or when a call
    raises, is not run. The consumer meets a failed call's own error before any
    skipped one: a pool starts calls in order, so every skipped call comes after."""
    raised = False

    def call(item: T) -> R:
        nonlocal raised
        if raised:
            raise _NotStarted
        try:
            return fn(item)
        except BaseException:
            raised = True
            raise

    pending: deque = deque()
    try:
        for item in items:
            pending.append(pool.submit(call, item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
