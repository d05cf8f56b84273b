"""A byte-budgeted cache of decoded data blocks shared by all readers.

Each reader keeps its decoded blocks in its own dict (offset -> DataBlock), so a
hit is one dict lookup with no lock. This cache only does the accounting and
eviction, CLOCK style: a hit sets ``block.ref``; when over budget the oldest
block is evicted unless its ref bit is set, in which case the bit is cleared
and it goes to the back of the ring. Thread safety is GIL-level: admission and
eviction take a lock; readers never see a half-built block because a block is
published in the dict only once fully decoded.
"""

from __future__ import annotations

import threading
from collections import deque

from .block import DataBlock

DEFAULT_CAPACITY_BYTES = 512 << 20


class BlockCache:
    """CLOCK cache over readers' block dicts; ``capacity_bytes`` counts decoded
    block bytes plus an estimate of Python per-entry overhead."""

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY_BYTES):
        self.capacity_bytes = int(capacity_bytes)
        self.used_bytes = 0
        self._ring: deque[tuple[dict, int, DataBlock]] = deque()
        self._dead = 0
        self._lock = threading.Lock()

    def admit(self, owner: dict, offset: int, block: DataBlock) -> None:
        """Publish ``block`` in ``owner`` and account for it, evicting as needed."""
        with self._lock:
            owner[offset] = block
            self._ring.append((owner, offset, block))
            self.used_bytes += block.charge
            if self.used_bytes > self.capacity_bytes:
                self._evict()

    def _evict(self) -> None:
        ring = self._ring
        while self.used_bytes > self.capacity_bytes and ring:
            owner, offset, block = ring.popleft()
            if block.charge == 0:  # released with its reader
                self._dead -= 1
                continue
            if block.ref:
                block.ref = False
                ring.append((owner, offset, block))
                continue
            if owner.get(offset) is block:
                owner.pop(offset, None)
            self.used_bytes -= block.charge
            block.charge = 0

    def release(self, owner: dict) -> None:
        """Forget every block of a closing reader."""
        with self._lock:
            for block in list(owner.values()):
                if block.charge:
                    self.used_bytes -= block.charge
                    block.charge = 0
                    self._dead += 1
            owner.clear()
            if self._dead > 1024 and self._dead * 2 > len(self._ring):
                self._ring = deque(e for e in self._ring if e[2].charge)
                self._dead = 0

    def set_capacity(self, capacity_bytes: int) -> None:
        with self._lock:
            self.capacity_bytes = int(capacity_bytes)
            self._evict()


DEFAULT_CACHE = BlockCache()
