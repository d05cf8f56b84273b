"""Opening a tree's ranges before its first lookups need them.

The first lookup in a range parses the range's footer, properties and index
(~150 µs of Python on a small VM) after reading the table's tail from disk; on a
fresh mount of a big lake nearly every random lookup opens a range (0.77 opens
a stat at 10M entries). RocksDB opens its tables at DB open for the same reason
(``max_open_files=-1``). Here it is done ahead, by a caller with time to spare (the
mount, in the background once it is ready): only ranges the local tier holds
(nothing is fetched: a guess is not worth a GET), only while the open readers have
room, in key order; the tables' tails are asked for all at once first (the disk
reads them in parallel), then each is read with the GIL released
(``RangeStore.warm``).
"""

from __future__ import annotations

from typing import Callable

from gravfs.version.committed.reader import RangeStore
from gravfs.waits import WouldWait, no_waiting


def warm_ranges(ranges: RangeStore, metarange_id: str, limit: int,
                between: Callable[[], bool] = lambda: True) -> tuple[int, int]:
    """Open up to ``limit`` ranges of ``metarange_id``; (opened or open already, not
    in the tier). ``between()`` runs before each and may wait (the mount's waits for
    a pause in its requests); False stops (unmounting). The metarange itself is parsed
    (and fetched) if need be: the tree's first lookup would need it anyway."""
    ids = ranges.metarange(metarange_id).ids[:limit]
    held = []
    for range_id in ids:  # their tails asked for at once: the disk reads them in parallel
        if not between():
            return 0, 0
        try:
            with no_waiting():
                ranges.ask_tail(range_id)
        except WouldWait:
            continue
        held.append(range_id)
    opened = 0
    for range_id in held:
        if not between():
            break
        try:
            with no_waiting():
                if not ranges.warm(range_id):
                    break
        except WouldWait:  # gone from the tier meanwhile
            continue
        opened += 1
    return opened, len(ids) - len(held)

