"""A byte-budgeted cache of decoded data blocks shared by all readers.

Each reader keeps its decoded blocks in its own :class:`BlockTable` (offset ->
DataBlock, and for tables with unique keys a key -> value map over the loaded
blocks), so a hit is a dict lookup with no lock. This cache only does the
accounting and eviction, CLOCK style (gravfs.lru with a second chance): a
lookup through the block dict sets ``block.ref``; when over budget the oldest
block is evicted unless its ref bit is set, in which case the bit is cleared
and it goes to the back of the line.
(Hits served by the key map do not set the bit, so under memory pressure those
blocks age out first-in first-out.)

Thread safety is GIL-level: admission and eviction take a lock; a block is
published only once fully decoded. Tables are immutable, so a key-map entry
that outlives its block for a moment is still correct data.

``release`` is called by a reader state's finalizer, which the garbage
collector may run at any allocation, including one inside this cache's own
locked sections on the same thread: it therefore never waits for the lock.
A release that finds the lock taken is queued and done by the next admission
(or by the next release that gets the lock).
"""

from __future__ import annotations

import threading
from collections import deque

from gravfs import sysmem
from gravfs.lru import LRU

from .block import DataBlock


def default_capacity(limit: int | None) -> int:
    """A quarter of the memory the process may use, within [128 MiB, 16 GiB].

    A warm entry costs about 300 bytes here (decoded key and value, list
    slots, key-map entry), so 512 MiB holds only ~2M entries and a bigger
    tree decodes a block on nearly every random lookup; a quarter of 24 GiB
    holds a whole 10M-entry tree. ``limit`` is physical memory or a smaller
    cgroup limit (gravfs.sysmem): a container's cache fits its container.
    """
    if limit is None:
        return 512 << 20
    return max(128 << 20, min(16 << 30, limit // 4))


DEFAULT_CAPACITY_BYTES = default_capacity(sysmem.memory_limit())
KEY_MAP_ENTRY_CHARGE = 72  # bytes per entry of a reader's key -> value dict


class BlockTable:
    """One reader's decoded blocks, by file offset, and optionally its key map."""

    __slots__ = ("blocks", "kv", "__weakref__")

    def __init__(self, key_map: bool):
        self.blocks: dict[int, DataBlock] = {}
        self.kv: dict[bytes, bytes] | None = {} if key_map else None

    def _drop(self, offset: int, block: DataBlock) -> None:
        if self.blocks.get(offset) is block:
            self.blocks.pop(offset, None)
        kv = self.kv
        if kv is not None and block.clean:
            pop = kv.pop
            for k in block.keys:
                pop(k, None)


def _charge(entry: tuple[BlockTable, int, DataBlock]) -> int:
    return entry[2].charge


def _referenced(block: DataBlock, _entry: object) -> bool:
    """CLOCK's second chance: a block read since the last pass stays (its bit cleared)."""
    if block.ref:
        block.ref = False
        return True
    return False


class BlockCache:
    """CLOCK cache over readers' block tables; ``capacity_bytes`` counts decoded
    block bytes plus an estimate of Python per-entry overhead."""

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY_BYTES):
        self.capacity_bytes = int(capacity_bytes)
        # block -> (its table, its offset, itself), oldest first; weight: charges
        self._blocks: LRU[DataBlock, tuple[BlockTable, int, DataBlock]] = LRU(weigh=_charge)
        self._lock = threading.Lock()
        self._released: deque[BlockTable] = deque()  # releases that found the lock taken

    @property
    def used_bytes(self) -> int:
        return self._blocks.weight

    def admit(self, table: BlockTable, offset: int, block: DataBlock) -> None:
        """Publish ``block`` in ``table`` and account for it, evicting as needed."""
        with self._lock:
            if self._released:
                self._drain()
            table.blocks[offset] = block
            if table.kv is not None and block.clean:
                table.kv.update(zip(block.keys, block.values))
                block.charge += KEY_MAP_ENTRY_CHARGE * len(block.keys)
            blocks = self._blocks
            blocks.put(block, (table, offset, block))
            if blocks.weight > self.capacity_bytes:
                self._evict()

    def _evict(self) -> None:
        for block, (table, offset, _) in self._blocks.evict(
                max_weight=self.capacity_bytes, second_chance=_referenced):
            table._drop(offset, block)
            block.charge = 0

    def release(self, table: BlockTable) -> None:
        """Forget every block of a closing reader (now, or at the next admission
        if the lock is taken: see the module's docstring)."""
        self._released.append(table)
        if self._lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._lock.release()

    def _drain(self) -> None:
        """Do the queued releases (under the lock)."""
        released = self._released
        pop = self._blocks.pop
        while released:
            table = released.popleft()
            for block in list(table.blocks.values()):
                if block.charge:
                    pop(block)
                    block.charge = 0
            table.blocks.clear()
            if table.kv is not None:
                table.kv.clear()

    def set_capacity(self, capacity_bytes: int) -> None:
        with self._lock:
            self._drain()
            self.capacity_bytes = int(capacity_bytes)
            self._evict()

    def clear(self) -> None:
        """Evict everything (mainly for tests and benchmarks of cold reads)."""
        with self._lock:
            self._drain()
            for block, (table, offset, _) in self._blocks.items():
                table._drop(offset, block)
                block.charge = 0
            self._blocks.clear()


DEFAULT_CACHE = BlockCache()
