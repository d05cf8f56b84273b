"""Inodes the kernel forgets in bulk, forgotten in chunks between other requests.

When the kernel reclaims its inodes (memory pressure, ``drop_caches``) it hands them
back in FORGET batches of up to ~55k: 18 batches after a traversal of a 1M-entry
branch. Forgetting one takes the daemon about 4 µs, so a batch done in one go held the
event loop, and every other request, for ~0.2 s, and a request waited up to 2.9 s
while 1M inodes went. A big batch is packed here (16 bytes an inode, less than the tuples it
came in) and forgotten by one background task, CHUNK inodes at a time, the other
requests served between chunks.

Forgetting later than the kernel asked is safe: a forget only lowers an inode's count of
lookups, which lookups raise, and an inode stays while that count is above zero; the
kernel has already dropped its own references, so nothing it sends names the inode
until a new lookup answers with it (and counts once more).
"""

from __future__ import annotations

import logging
from array import array
from collections import deque
from itertools import chain
from typing import Callable, Iterable, Optional

import trio

from gravfs import threadwork

log = logging.getLogger(__name__)

CHUNK = 256  # inodes forgotten between two turns of the other requests (~1 ms)
# A worker thread gets the GIL only when the event loop's thread waits long enough for it
# to wake: a loop that checkpoints between chunks releases the GIL for microseconds at a
# time (trio's epoll_wait(0)) and kept a worker's call waiting until the whole queue was
# done. While thread work runs (gravfs.threadwork), each chunk is followed by this wait.
THREAD_TURN_S = 0.0002


class ForgetQueue:
    """Big forget batches, waiting for the background task that forgets them."""

    def __init__(self, forget: Callable[[Iterable[tuple[int, int]]], None]):
        self._forget = forget  # forgets (inode, lookups) pairs now
        self._queue: deque[array] = deque()  # flat: inode, lookups, inode, lookups...
        self._done = 0  # of the first array: how much of it is forgotten (flat count)
        self._draining = False

    def take(self, batch: list[tuple[int, int]], nursery: Optional[trio.Nursery]) -> None:
        """Forget a batch: now when it is small (or there is no nursery: in-process
        use), else queued for the background task, which is started if not running."""
        if len(batch) <= CHUNK or nursery is None:
            self._forget(batch)
            return
        self._queue.append(array("Q", chain.from_iterable(batch)))
        log.debug("forgetting %d inodes between requests (%d waiting)", len(batch), self.pending)
        if not self._draining:
            self._draining = True
            nursery.start_soon(self._drain)

    @property
    def pending(self) -> int:
        """Inodes queued and not forgotten yet."""
        return (sum(len(a) for a in self._queue) - self._done) // 2

    async def _drain(self) -> None:
        try:
            while self._queue:
                flat = self._queue[0]  # (from where a cancelled drain left it)
                for i in range(self._done, len(flat), 2 * CHUNK):
                    part = flat[i:i + 2 * CHUNK]
                    try:
                        self._forget(zip(part[::2], part[1::2]))
                    except Exception:  # a bug: the other chunks still go
                        log.exception("forgetting %d inodes failed", len(part) // 2)
                    self._done = i + len(part)
                    if threadwork.idle():
                        await trio.lowlevel.checkpoint()
                    else:
                        await trio.sleep(THREAD_TURN_S)
                self._queue.popleft()
                self._done = 0
        finally:
            self._draining = False
