"""A trio lock whose free acquire is no schedule point.

``trio.Lock.acquire`` always passes through the scheduler, even when the lock
is free: one pass of the run loop (an epoll_wait and the task switch), about
10-15 µs on a small VM. A file create, write and close takes such a lock five
times, for handlers that otherwise wait on nothing. The mount's handlers are
not fairness-sensitive here: each one ends by awaiting the kernel's next
request, so taking a free lock at once starves nobody.

A namespace lock is also what a reader checks: its ``stamp`` tells whether a holder
came or went while the reader waited on a worker (see
``GravfsOperations._settled_read``).
"""

from __future__ import annotations

from typing import Optional

import trio


class QuickLock:
    """``async with`` takes a free lock at once and waits (fairly, as trio.Lock
    does) only when it is held."""

    __slots__ = ("_lock", "_releases")

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self._releases = 0

    async def __aenter__(self) -> None:
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def __aexit__(self, *exc) -> None:
        self._releases += 1
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def stamp(self) -> Optional[int]:
        """None while held, else how many times it was released: equal stamps before
        and after a wait say that no holder came or went meanwhile."""
        return None if self._lock.locked() else self._releases

    def held_here(self) -> bool:
        """Whether the running task holds it (taking it again would wait forever)."""
        return self._lock.statistics().owner is trio.lowlevel.current_task()
