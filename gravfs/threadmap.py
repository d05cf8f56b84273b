"""Calls on a thread pool with results taken in order and a bounded number in
flight: pushed one by one (``InOrder``, the range writer hands each range over as
it closes it) or drawn from an iterable (``ordered_map``).

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
from concurrent.futures import Executor, Future
from typing import Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _NotStarted(Exception):
    """A call skipped because an earlier-started one raised. The consumer never
    meets it before that call's own error: a pool starts calls in the order they
    were submitted, and results are taken in that order too."""


class InOrder(Generic[R]):
    """Calls pushed onto ``pool``, their results taken oldest first, at most
    ``ahead`` pushed and not yet taken."""

    def __init__(self, pool: Executor, ahead: int):
        self._pool = pool
        self._ahead = max(1, ahead)  # (0 would wait for a call never pushed)
        self._pending: deque[Future] = deque()
        self._raised = False

    def _call(self, fn: Callable[..., R], args: tuple) -> R:
        if self._raised:
            raise _NotStarted
        try:
            return fn(*args)
        except BaseException:
            self._raised = True
            raise

    def push(self, fn: Callable[..., R], *args) -> list[R]:
        """Start ``fn(*args)``; returns the results taken to stay within the bound
        (usually none or one), raising a taken call's error."""
        pending = self._pending
        taken = []
        while len(pending) >= self._ahead:
            taken.append(pending.popleft().result())
        pending.append(self._pool.submit(self._call, fn, args))
        return taken

    def drain(self) -> Iterator[R]:
        """The results not yet taken, in order."""
        pending = self._pending
        while pending:
            yield pending.popleft().result()

    def cancel(self, wait: bool = False) -> None:
        """Start nothing more; with ``wait``, also wait for the calls already
        running (their errors ignored: the caller is handling an earlier one)."""
        self._raised = True
        pending, self._pending = self._pending, deque()
        for f in pending:
            f.cancel()
        if wait:
            for f in pending:
                try:
                    f.result()
                except Exception:
                    pass


def ordered_map(pool: Executor, fn: Callable[[T], R], items: Iterable[T],
                ahead: int) -> Iterator[R]:
    """``fn`` of each item, in the items' order, with at most ``ahead`` submitted and
    not yet taken; what is still queued when the consumer stops, or when a call
    raises, is not run."""
    calls: InOrder[R] = InOrder(pool, ahead)
    try:
        for item in items:
            yield from calls.push(fn, item)
        yield from calls.drain()
    finally:
        calls.cancel()
