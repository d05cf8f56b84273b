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
from typing import Callable, Iterable, Iterator, Optional

from gravfs.errors import GravfsError
from gravfs.fs.paths import show
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
    file_dirs: Optional["FileDirs"] = None


MAX_SHOWN = 10  # keys named per kind of finding


class FileDirs:
    """Keys that are both a file and a directory (``a/b`` beside ``a/b/c``), which an
    object store allows and a filesystem cannot show: found in one pass over sorted
    keys with a stack of the files whose ``name/`` block may still come (each one a
    prefix of the next, so it stays as short as a key). ``pending``: the stack at the
    end, for the driver to look those up in the keys that follow."""

    def __init__(self) -> None:
        self.count = 0
        self.shown: list[bytes] = []
        self.pending: list[bytes] = []

    def feed(self, keys: list[bytes]) -> None:
        stack = self.pending
        for k in keys:
            while stack:
                s = stack[-1]
                if k.startswith(s):
                    c = k[len(s):len(s) + 1]
                    if c < b"/":
                        break  # s/... may still come
                    if c == b"/":
                        self.found(s)
                stack.pop()
            if not k.endswith(b"/"):
                stack.append(k)

    def found(self, key: bytes) -> None:
        self.count += 1
        if len(self.shown) < MAX_SHOWN:
            self.shown.append(key)

    def merge(self, other: "FileDirs") -> None:
        self.count += other.count
        self.shown = (self.shown + other.shown)[:MAX_SHOWN]


def write_partition(writer: TreeWriter, index: int,
                    items: Iterable[tuple[bytes, bytes]]) -> PartitionRanges:
    """Write (key, encoded value) pairs in strictly ascending key order as ranges."""
    it = iter(items)
    count = 0
    last = None
    file_dirs = FileDirs()
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
                if k == last:  # a source's own fault (see gravfs.spark.manifest)
                    raise GravfsError(f"the source lists {show(k)} more than once")
                raise ValueError(f"partition {index}: keys not in ascending order at {k!r}")
            last = k
        count += len(keys)
        file_dirs.feed(keys)
        pos = 0
        while pos < len(keys):
            pos, _ = writer.take(keys, values, pos, len(keys))
    tail_open = not writer.empty
    writer.flush()
    # finish() with the writer's own ranges as "base" waits for the uploads (and puts
    # the SST sizes into writer.out) without writing a metarange no one would read
    writer.finish(MetaRange("", list(writer.out)))
    return PartitionRanges(index, list(writer.out), tail_open, count, file_dirs)


def stitch_partitions(writer: TreeWriter, ranges: RangeStore,
                      parts: Iterable[PartitionRanges]) -> MetaRange:
    """Join partitions (in key order) into one tree with the true break sequence.
    A partition's ranges all end at a break but its open tail, whose records carry
    into the next partition."""
    for part in parts:
        last = len(part.ranges) - 1
        _append(writer, ranges, [(r, None, i < last or not part.tail_open)
                                 for i, r in enumerate(part.ranges)])
    return writer.finish()


def splice_tree(writer: TreeWriter, ranges: RangeStore, head: MetaRange, tree: MetaRange,
                prefix: bytes) -> MetaRange:
    """``head`` with what it holds at ``prefix`` and under ``prefix/`` replaced by
    ``tree`` (whose keys are all under ``prefix/``): the tree a single writer would
    make of those records. Only the head's ranges holding a replaced key next to
    kept ones are read, plus the few ranges after each seam that it takes for the
    breaks to line up again; the rest of the head and of the tree is copied by ID
    (an import into one table of a big branch costs its seams, not the branch)."""
    lo, hi = prefix + b"/", prefix + b"0"  # keys under prefix/ are exactly [lo, hi)
    last = len(head.ranges) - 1
    before: list = []
    after: list = []
    for i, r in enumerate(head.ranges):
        at_break = i < last  # a tree's last range ends where its records do
        if r.min_key >= hi:
            after.append((r, None, at_break))
            continue
        if r.max_key >= hi:
            after.append((r, lambda k: k >= hi, at_break))
        if r.min_key < lo:
            holds_prefix = r.min_key <= prefix <= r.max_key
            if holds_prefix or r.max_key >= lo:
                before.append((r, lambda k: k < lo and k != prefix, False))
            else:
                before.append((r, None, at_break))
    n = len(tree.ranges)
    _append(writer, ranges, before + [(r, None, j < n - 1) for j, r in enumerate(tree.ranges)]
            + after)
    return writer.finish()


def _append(writer: TreeWriter, ranges: RangeStore, items: list) -> None:
    """Append (range, key filter or None, ends at a policy break) items in key order:
    a whole range that ends at a break is taken by ID whenever the writer sits at a
    break (it was cut from one, as the writer sits now, so both agree from there);
    any other is read and fed, and the writer breaks by the policy."""
    for r, keep, at_break in items:
        if keep is None and at_break and writer.empty:
            writer.copy_range(r)
        else:
            _feed(writer, ranges, r, keep)


def _feed(writer: TreeWriter, ranges: RangeStore, info: RangeInfo,
          keep: Optional[Callable[[bytes], bool]] = None) -> None:
    pairs = ranges.range_items(info.id, fill_cache=False)
    if keep is not None:
        pairs = (kv for kv in pairs if keep(kv[0]))
    pairs = list(pairs)
    keys = [kv[0] for kv in pairs]
    values = [kv[1] for kv in pairs]
    pos = 0
    while pos < len(keys):
        pos, _ = writer.take(keys, values, pos, len(keys))


def file_dirs_of(ranges: RangeStore, tree: MetaRange, parts: list[PartitionRanges]
                 ) -> FileDirs:
    """The keys of a stitched tree that are both a file and a directory: those each
    task found, and those whose ``name/`` keys a later partition holds."""
    out = FileDirs()
    for p in parts:
        if p.file_dirs is None:
            continue
        out.merge(p.file_dirs)
        for s in p.file_dirs.pending:
            if _holds_under(ranges, tree, s + b"/"):
                out.found(s)
    return out


def _holds_under(ranges: RangeStore, tree: MetaRange, prefix: bytes) -> bool:
    i = tree.locate(prefix)
    if i == len(tree.ranges):
        return False
    for k, _ in ranges.range_items(tree.ranges[i].id, prefix, fill_cache=False):
        return k.startswith(prefix)
    return False


def tree_records(ranges: RangeStore, mr: MetaRange) -> Iterator[tuple[bytes, bytes]]:
    """(key, encoded value) of every record of a tree, in key order."""
    for info in mr.ranges:
        yield from ranges.range_items(info.id, fill_cache=False)
