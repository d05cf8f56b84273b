"""Busy-polling between requests: the event loop stays awake for a short window
after each request instead of going to sleep in epoll_wait.

A request that finds the loop asleep pays for waking an idle CPU (on a virtual
machine, a halted vCPU) and for the caches that emptied meanwhile. A program
that stats, creates or lists one file after another leaves only tens of
microseconds between requests, so with a window of 100 µs the loop never sleeps
while it runs: on the benchmark host first-pass stats of branch paths went from
0.72-0.77x to 0.92-0.98x of the pyfuse3 floor (docs/benchmarks-mount.md, thirteenth
round). The price is CPU: while requests come closer together than the window,
the event loop's thread keeps one core busy; once they stop, it sleeps again
within the window (``-o spin_us=0``: never polls; the default is MountOptions').
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import trio

from gravfs import threadwork

# Requests that move file content keep no poll going: a stream of them is paced by
# the data (the kernel keeps several in flight, so the loop seldom sleeps), and on a
# small machine a polling core is one that the reader, the kernel's I/O and the
# threads that fetch and check the bytes do not get (a cold 1 GiB read: 846 MB/s
# without polling, 741 with).
DATA_REQUESTS = frozenset({"read", "write"})


class Activity:
    """Requests seen (every handler wrapper calls ``note``), and the poller that
    keeps the loop awake while they come (``run``, a task of the daemon's nursery)."""

    __slots__ = ("count", "_asleep", "polling")

    def __init__(self) -> None:
        self.count = 0
        self._asleep: Optional[trio.Event] = None
        self.polling = False

    def note(self) -> None:
        """A request arrived (on the event loop's thread)."""
        self.count += 1
        asleep = self._asleep
        if asleep is not None:
            self._asleep = None
            asleep.set()

    async def run(self, window_s: float) -> None:
        """Yield to the scheduler (which then polls its file descriptors without
        blocking) until ``window_s`` passes with no new request, or while work runs
        on threads (gravfs.threadwork: they would wait for the GIL); then sleep
        until the next request."""
        checkpoint = trio.lowlevel.checkpoint
        clock = time.monotonic
        idle = threadwork.idle
        while True:
            self.polling = True
            seen = self.count
            until = clock() + window_s
            while True:
                await checkpoint()
                if not idle():  # even while requests come: those threads need the GIL
                    break
                if self.count != seen:
                    seen = self.count
                    until = clock() + window_s
                elif clock() >= until:
                    break
            self.polling = False
            self._asleep = asleep = trio.Event()
            await asleep.wait()


ACTIVITY = Activity()


def noter(handler: str) -> Callable[[], None]:
    """What a request to ``handler`` calls on arrival: ACTIVITY.note, or nothing for
    DATA_REQUESTS."""
    return _nothing if handler in DATA_REQUESTS else ACTIVITY.note


def _nothing() -> None:
    pass
