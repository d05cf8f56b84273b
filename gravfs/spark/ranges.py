"""Writing one tree from key-ordered partitions, each written by its own task.

The break policy is content-defined but stateful: whether a range ends after
a key depends on the bytes accumulated since the previous break. A task does
not know where the previous partition's last range ended, so it writes its
ranges *speculatively*, as if a break preceded its first key
(``write_partition``). The driver (``stitch_partitions``) replays the true
break sequence across the seams: entering a partition with records still
pending, it feeds that partition's records to its own writer until the writer
breaks exactly where one of the speculative ranges ended. From there both
sequences start from an empty range at the same key, so they coincide, and
the remaining speculative ranges are taken by ID without being read (the
writer's "break realigns", see stitch.py). With the lakeFS rule and
min_size 0 the first hash break of a partition always realigns; with a
minimum size it may take a few ranges, or a whole partition whose pending
bytes then carry into the next one.

The result is exactly the tree a single writer would produce from the same
records, whatever the partitioning: same ranges, same metarange ID.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from gravfs.version.committed.reader import MetaRange, RangeInfo, RangeStore
from gravfs.version.committed.writer import TreeWriter

_CHUNK = 4096


@dataclass
class PartitionRanges:
    """What a task wrote: its speculative ranges, in key order.

    ``tail_open``: the last range ended because the partition did, not at a
    policy break (its records must be carried into the next partition).
    """

    index: int
    ranges: list[RangeInfo]
    tail_open: bool
    records: int


def write_partition(writer: TreeWriter, index: int,
                    items: Iterable[tuple[bytes, bytes]]) -> PartitionRanges:
    """Write (key, encoded value) pairs in strictly ascending key order as ranges."""
    it = iter(items)
    count = 0
    last = None
    while True:
        chunk = []
        for kv in it:
            chunk.append(kv)
            if len(chunk) >= _CHUNK:
                break
        if not chunk:
            break
        keys = [kv[0] for kv in chunk]
        values = [kv[1] for kv in chunk]
        for k in keys:
            if last is not None and k <= last:
                raise ValueError(f"partition {index}: keys not in ascending order at {k!r}")
            last = k
        count += len(keys)
        pos = 0
        while pos < len(keys):
            pos, _ = writer.take(keys, values, pos, len(keys))
    tail_open = not writer.empty
    writer.flush()
    # finish() with the writer's own ranges as "base" waits for the uploads (and puts
    # the SST sizes into writer.out) without writing a metarange no one would read
    writer.finish(MetaRange("", list(writer.out)))
    return PartitionRanges(index, list(writer.out), tail_open, count)


def stitch_partitions(writer: TreeWriter, ranges: RangeStore,
                      parts: Iterable[PartitionRanges]) -> MetaRange:
    """Join partitions (in key order) into one tree with the true break sequence."""
    for part in parts:
        rs = part.ranges
        if not rs:
            continue
        i = 0
        if not writer.empty:
            synced = False
            while i < len(rs):
                _feed(writer, ranges, rs[i])
                i += 1
                # a break at the end of a speculative range that itself ended at a break
                if writer.empty and (i < len(rs) or not part.tail_open):
                    synced = True
                    break
            if not synced:
                continue
        end = len(rs) - 1 if part.tail_open else len(rs)
        if end > i:
            writer.copy_ranges(rs[i:end])
            i = end
        if i < len(rs):  # the open tail: its records carry into the next partition
            _feed(writer, ranges, rs[i])
    return writer.finish()


def _feed(writer: TreeWriter, ranges: RangeStore, info: RangeInfo) -> None:
    pairs = list(ranges.range_items(info.id, fill_cache=False))
    keys = [kv[0] for kv in pairs]
    values = [kv[1] for kv in pairs]
    pos = 0
    while pos < len(keys):
        pos, _ = writer.take(keys, values, pos, len(keys))


def tree_records(ranges: RangeStore, mr: MetaRange) -> Iterator[tuple[bytes, bytes]]:
    """(key, encoded value) of every record of a tree, in key order."""
    for info in mr.ranges:
        yield from ranges.range_items(info.id, fill_cache=False)
