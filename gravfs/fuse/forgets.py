"""Big FORGET batches applied to the inode table between requests.

When the kernel drops its dentries (memory pressure, or ``drop_caches``) after a
traversal, it sends FORGET for up to a million inodes in batches of up to ~55k, and
ahead of other requests (the kernel interleaves up to 16 forget batches per request).
Applied on arrival, at ~1.15 µs an inode, they held every other request of the mount:
after a ``find`` over 1M entries, a statfs waited up to 0.3-1 s (docs/benchmarks-mount.md,
forty-first round). A FORGET needs no reply and a late one changes nothing the kernel
sees (the inode's record lives a little longer; a lookup meanwhile adds to its count,
which the late FORGET then lowers to what the kernel holds), so the handler notes a
big batch and ``Forgets.run`` applies it in slices between requests.
"""

from __future__ import annotations

import collections
import itertools
import logging
from typing import Callable, Iterator

import trio
import trio.testing

from gravfs.fuse.inodes import InodeTable

log = logging.getLogger(__name__)

# Inodes applied at a time: about 1.2 ms of the loop's time, the most a request that
# arrives meanwhile waits for them. A batch no larger is applied on arrival: most are
# (after a find over 1M entries, 4,383 batches, median 133 inodes, largest 52,655), and
# applying small ones late made the watcher's invalidation of a busy directory take
# 10-25 s, not 5 (test_launch's sigterm-while-invalidating test, 5 runs each): once its
# thread waits a little longer for the GIL, the lookups that contend with it for the
# directory run freely, which keeps the loop busy and the thread waiting (for the
# forced switch, 5 ms)
SLICE = 1024
# A slice waits until no task has run for this long (the loop sleeps in epoll_wait,
# which rounds it up to 1 ms, in which threads that wait for the GIL get it too) ...
IDLE_S = 50e-6
# ... or this long, under a stream of requests that keeps the loop busy: then a slice
# takes a tenth of the loop's time, and the backlog still falls at ~90k inodes a second,
# more than a traversal makes the kernel forget
BUSY_WAIT_S = 0.01


class Forgets:
    """The FORGET batches not yet applied to ``table`` (in the order they came)."""

    __slots__ = ("table", "pending", "_batches", "_added")

    def __init__(self, table: InodeTable) -> None:
        self.table = table
        self.pending = 0  # (inode, count) pairs noted and not yet applied
        self._batches: collections.deque[Iterator[tuple[int, int]]] = collections.deque()
        self._added = trio.Event()

    def add(self, pairs: list[tuple[int, int]]) -> None:
        """Take a FORGET batch: applied now if small, else noted (the list is kept:
        pyfuse3 makes a new one per request). Either way the table shrinks later."""
        if len(pairs) <= SLICE:
            self.table.forget_many(pairs)
        else:
            self._batches.append(iter(pairs))
            self.pending += len(pairs)
        self._added.set()

    def apply(self, limit: int = -1) -> None:
        """Apply up to ``limit`` noted pairs (all with -1)."""
        batches, forget_many = self._batches, self.table.forget_many
        left = self.pending if limit < 0 else min(limit, self.pending)
        self.pending -= left
        while left:
            head = batches[0]
            part = list(itertools.islice(head, left))
            if len(part) < left or not part:
                batches.popleft()
            forget_many(part)
            left -= len(part)

    def settle(self) -> bool:
        """Apply what is noted and give back the table's memory; True when it shrank
        to a quarter of its peak (InodeTable.shrink)."""
        self.apply()
        return self.table.shrink()

    async def run(self, shrunk: Callable[[], None]) -> None:
        """Apply noted batches a SLICE at a time when the loop is idle (or has been busy
        for BUSY_WAIT_S); once FORGETs stop coming, call ``shrunk`` if the table fell
        to a quarter of its peak. (Shrinking then, not at each fall while the kernel
        forgets a million, copies the table's indexes once, when they are smallest,
        and drops the caches and runs the collector's full pass once: at 250k inodes
        left, those held the loop for 165-215 ms.)"""
        while True:
            await self._added.wait()
            self._added = trio.Event()
            while self.pending:
                await _idle_or_busy_long()
                self.apply(SLICE)
            await _idle_or_busy_long()
            if not self._added.is_set() and self.settle():
                shrunk()


async def _idle_or_busy_long() -> None:
    with trio.move_on_after(BUSY_WAIT_S):
        await trio.testing.wait_all_tasks_blocked(IDLE_S)
