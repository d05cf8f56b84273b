"""The difference of two refs as a DataFrame, reading only the ranges that differ.

A range ID names its records (keys and identities), so a range present in
both trees covers the same keys with the same entries on both sides and no
other range of either side overlaps it: the driver drops every range whose
ID both metaranges hold, unread, as ``gravfs diff`` skips equal ranges. The
remaining ranges are cut into *segments*: runs of ranges of either side whose
key spans overlap. No key of one segment can appear in another, so each
segment is diffed on its own, in a task, by the version layer's own range diff
(gravfs.version.committed.diff.diff_trees) over the segment's two sub-trees.
The ranges read are exactly those ``gravfs diff`` reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Optional

from gravfs.fs.paths import show
from gravfs.spark.tables import (MTIME, ROW_COLUMNS, entry_row, open_repo, spark_schema,
                                 task_ranges, tree_of)
from gravfs.version.committed.diff import diff_trees
from gravfs.version.committed.reader import MetaRange, RangeInfo
from gravfs.version.committed.record import encode_value
from gravfs.version.committed.results import Diff, Stats

log = logging.getLogger(__name__)

# an entry's columns on one side of a difference (null when absent there): those of
# entries() but path and key; change: added | removed | changed
SIDE_COLUMNS = ROW_COLUMNS[2:]
DIFF_COLUMNS = [("path", "string"), ("key", "binary"), ("change", "string"),
                ("left", SIDE_COLUMNS), ("right", SIDE_COLUMNS)]


@dataclass
class Segment:
    """Ranges of each side whose key spans overlap nothing outside the segment."""

    left: list[RangeInfo] = field(default_factory=list)
    right: list[RangeInfo] = field(default_factory=list)

    @property
    def ranges(self) -> int:
        return len(self.left) + len(self.right)


def plan_segments(left: MetaRange, right: MetaRange) -> list[Segment]:
    """The segments of the ranges that differ, in key order (see the module doc)."""
    common = set(left.ids) & set(right.ids)
    items = [(r.min_key, 0, r) for r in left.ranges if r.id not in common]
    items += [(r.min_key, 1, r) for r in right.ranges if r.id not in common]
    items.sort(key=lambda t: t[0])  # stable: each side keeps its own order
    segments: list[Segment] = []
    top: Optional[bytes] = None
    for lo, side, info in items:
        if top is None or lo > top:
            segments.append(Segment())
            top = info.max_key
        (segments[-1].left if side == 0 else segments[-1].right).append(info)
        top = max(top, info.max_key)
    return segments


def segment_diffs(store_url: str, seg: Segment) -> Iterator[Diff]:
    """The differences inside one segment, in key order (runs on an executor)."""
    yield from diff_trees(task_ranges(store_url), MetaRange("", seg.left),
                          MetaRange("", seg.right), Stats())


@dataclass
class DiffPlan:
    """What a diff of two refs reads: the commits and the segments of differing ranges."""

    left_commit: str
    right_commit: str
    segments: list[Segment]
    ranges_left: int   # ranges of each tree
    ranges_right: int

    @property
    def ranges_read(self) -> int:
        return sum(s.ranges for s in self.segments)


def plan(repo, a: str, b: str) -> DiffPlan:
    """The DiffPlan from ref a to ref b (the driver reads the two metaranges only)."""
    ca, left = tree_of(repo, a)
    cb, right = tree_of(repo, b)
    segs = plan_segments(left, right) if left.id != right.id else []
    p = DiffPlan(ca, cb, segs, len(left), len(right))
    log.info("diff %s..%s: %d of %d+%d ranges differ, in %d segments", ca[:12], cb[:12],
             p.ranges_read, len(left), len(right), len(segs))
    return p


def _side(rec) -> Optional[tuple]:
    if rec is None:
        return None
    return entry_row(rec.key, encode_value(rec.identity, rec.data), None)[2:]


def diff_row(d: Diff) -> tuple:
    """The row of one difference (DIFF_COLUMNS, in order)."""
    left, right = _side(d.left), _side(d.right)
    kind = (right or left)[0]
    return (show(d.key, directory=kind == "dir"), d.key, d.kind, left, right)


def partitions_for(segments: list[Segment], parallelism: int) -> int:
    """Tasks for diffing segments: a few per core, never more than segments."""
    return max(1, min(len(segments), 4 * parallelism))


def diff(spark, store, a: str, b: str, state_dir: Optional[str] = None):
    """A DataFrame of the differences from ref ``a`` to ref ``b`` (columns: DIFF_COLUMNS),
    in key order; only ranges that differ are read, by the tasks.

    ``store``: a Repository or a store URL (opened with ``state_dir``).
    """
    repo, own = open_repo(store, state_dir)
    try:
        p = plan(repo, a, b)
        url = repo.store.url
    finally:
        if own:
            repo.close()
    return plan_frame(spark, url, p)


def plan_frame(spark, store_url: str, p: DiffPlan):
    """The DataFrame of a DiffPlan's differences (left and right carry an mtime too)."""
    from pyspark.sql import functions as F
    schema = spark_schema(DIFF_COLUMNS)
    if not p.segments:
        df = spark.createDataFrame([], schema)
    else:
        n = partitions_for(p.segments, spark.sparkContext.defaultParallelism)
        rdd = spark.sparkContext.parallelize(p.segments, n).flatMap(
            lambda seg: (diff_row(d) for d in segment_diffs(store_url, seg)))
        df = spark.createDataFrame(rdd, schema, verifySchema=False)
    for side in ("left", "right"):
        df = df.withColumn(side, F.col(side).withField(
            "mtime", F.expr(MTIME.format(f"{side}.mtime_ns"))))
    return df
