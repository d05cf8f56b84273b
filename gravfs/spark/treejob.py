"""From an RDD of records to a commit: the part every Spark import shares.

``write_tree`` range-partitions (key, encoded value) records by key, sorts
them, has each task write its partition's ranges (gravfs.spark.ranges) and
stitches them on the driver into one tree: the tree a single writer would
make of the same records. ``land_tree`` makes that tree the content of
BRANCH:PREFIX (what the branch held under PREFIX and the tree lacks is
removed, as ``gravfs import`` does; nothing outside PREFIX changes) and moves
the head by compare-and-swap; a head that moved meanwhile is rebased onto
unless it changed a path the import writes or removes differently. Until the swap nothing is
visible: a killed job leaves only unreferenced objects.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from gravfs.errors import ConflictError, PreconditionFailedError
from gravfs.fs.importer import replaced_keys
from gravfs.fs.paths import show
from gravfs.spark.progress import counter
from gravfs.spark.ranges import (FileDirs, PartitionRanges, file_dirs_of, splice_tree,
                                 stitch_partitions, tree_records, write_partition)
from gravfs.spark.runtime import job_failed, landed
from gravfs.spark.taskstore import task_store
from gravfs.version.collisions import describe, file_ancestors
from gravfs.version.committed.manager import EMPTY_METARANGE_ID
from gravfs.version.committed.reader import MetaRange
from gravfs.version.committed.record import decode_identity
from gravfs.version.committed.results import Stats
from gravfs.version.committed.writer import TreeWriter, WriteContext
from gravfs.version.committer import CAS_RETRIES, NothingToCommitError
from gravfs.version.refs.commits import Commit
from gravfs.version.repository import default_author

log = logging.getLogger(__name__)

PRESORTED = "presorted"  # write_tree's bounds for records partitioned and sorted already


def even_bounds(keys: list[bytes], partitions: int) -> Optional[list[bytes]]:
    """write_tree's bounds from sorted split keys a source listed (directories,
    common prefixes): ``partitions`` runs of about as many of them each; None when
    there are too few keys to split (write_tree then samples the records)."""
    if partitions <= 1:
        return []
    if len(keys) < 2:
        return None
    step = len(keys) / partitions
    return sorted({keys[int(step * i)] for i in range(1, partitions)} - {keys[0]})


def write_ranges(store_url: str, index: int, items, rows=None) -> Iterator[PartitionRanges]:
    """Write one sorted partition's ranges (runs on an executor); ``rows`` counts them."""
    ts = task_store(store_url)
    part = write_partition(ts.tree_writer(Stats()), index, items)
    if rows is not None:
        rows.add(part.records)
    yield part


@dataclass
class WrittenTree:
    tree: Optional[MetaRange]  # None when there were no records
    records: int
    partitions: int
    rewritten: int             # ranges the driver rewrote at the seams
    file_dirs: FileDirs        # keys that are both a file and a directory


def write_tree(repo, records, partitions: int, what: str, bounds: Optional[list] = None
               ) -> WrittenTree:
    """Write the records (an RDD of unique keys) as one tree in the repository's store.

    ``bounds``: sorted keys splitting the key space into len(bounds)+1 partitions
    (from a cheap sample of the source); then the records are computed once and
    shuffled straight into sorted partitions. PRESORTED: the records' partitions
    are sorted and in key order already (nothing is shuffled). Without them Spark's sortByKey
    samples the records first (persist them: they are computed twice).
    A failed job is a SparkJobError naming ``what``.
    """
    store_url = repo.store.url
    rows = counter(records.context, "written")
    t0 = time.monotonic()
    try:
        if bounds is None:
            ordered = records.sortByKey(numPartitions=partitions)
        elif bounds == PRESORTED:
            ordered = records
        else:
            split = list(bounds)
            ordered = records.repartitionAndSortWithinPartitions(
                len(split) + 1, partitionFunc=lambda k: bisect.bisect_right(split, k))
        parts = (ordered
                 .mapPartitionsWithIndex(lambda i, it: write_ranges(store_url, i, it, rows))
                 .collect())
    except Exception as exc:  # a task failed after its retries (py4j/pyspark errors)
        raise job_failed(exc, what) from exc
    parts.sort(key=lambda p: p.index)
    count = sum(p.records for p in parts)
    t1 = time.monotonic()
    log.info("executors wrote %d records as %d speculative ranges in %d partitions (%.1fs)",
             count, sum(len(p.ranges) for p in parts), len(parts), t1 - t0)
    if not count:
        return WrittenTree(None, 0, len(parts), 0, FileDirs())
    stats = Stats()
    ctx = _write_context(repo)
    # no "known" ranges: a seam range equal to a task's is written again (put-if-absent)
    # so its metarange record carries the SST size, as a single writer's does
    writer = TreeWriter(ctx, repo.settings.ranges.policy(), stats)
    tree = stitch_partitions(writer, repo.committed.ranges, parts)
    log.info("stitched %d ranges (%d rewritten at the seams) in %.1fs", len(tree.ranges),
             stats.ranges_written, time.monotonic() - t1)
    return WrittenTree(tree, count, len(parts), stats.ranges_written,
                       file_dirs_of(repo.committed.ranges, tree, parts))


def land_tree(repo, branch: str, base: Commit, tree: MetaRange, message: str,
              metadata: dict, prefix: bytes = b"") -> Commit:
    """Make ``tree`` (keys under ``prefix``) the content of branch:prefix on the head of
    ``branch`` (expected at ``base``) and move the head by compare-and-swap; see the
    module doc. Raises NothingToCommitError when the head already holds the tree."""
    for attempt in range(CAS_RETRIES):
        head_id, version = repo.heads.branch(branch)
        head = repo.commits.get(head_id)
        if head.id != base.id:
            _check_rebase(repo, base, head, tree, prefix)
        if head.id == base.id and (not prefix or head.metarange == EMPTY_METARANGE_ID):
            mr = tree.id  # the whole branch is replaced: no record needs reading
        elif head.id == base.id:
            mr = _spliced(repo, head.metarange, tree, prefix)
        else:
            changes = _replacing(repo, base.metarange, tree, prefix)
            mr = repo.committed.apply(head.metarange, changes).metarange_id
        if mr == head.metarange:
            raise NothingToCommitError(f"nothing to commit on branch {branch!r}: the imported "
                                       "tree is already there")
        c = repo.commits.put(Commit(mr, (head.id,), message, default_author(), time.time_ns(),
                                    head.generation + 1, dict(metadata)))
        try:
            repo.heads.move_branch(branch, version, c.id)
        except PreconditionFailedError:
            log.info("head of %s moved meanwhile; retrying (%d)", branch, attempt + 1)
            continue
        landed()
        log.info("committed %s on %s", c.id[:12], branch)
        repo.forget_head(branch)
        return c
    raise PreconditionFailedError(f"branch {branch!r} kept moving; gave up after {CAS_RETRIES} "
                                  "attempts (nothing was committed)")


def _spliced(repo, head_mr: str, tree: MetaRange, prefix: bytes) -> str:
    """The head's tree with branch:prefix replaced by ``tree``, read at the seams only."""
    t0 = time.monotonic()
    stats = Stats()
    writer = TreeWriter(_write_context(repo), repo.settings.ranges.policy(), stats)
    head = repo.committed.ranges.metarange(head_mr)
    try:
        mr = splice_tree(writer, repo.committed.ranges, head, tree, prefix)
    except BaseException:
        writer.abort()
        raise
    if mr.id != EMPTY_METARANGE_ID:
        repo.committed.ranges.remember_metarange(mr)
    log.info("spliced the tree into %s of the head: %d ranges, %d rewritten (%.1fs)",
             show(prefix), len(mr.ranges), stats.ranges_written, time.monotonic() - t0)
    return mr.id


def _write_context(repo) -> WriteContext:
    return WriteContext(repo.store, repo.workspace.sub("sst-tmp"), None,
                        compression=repo.settings.compression)


def _check_rebase(repo, base: Commit, head: Commit, tree: MetaRange, prefix: bytes) -> None:
    """Raise ConflictError when the head moved since the job started and changed a
    path the import writes differently or removes (as a commit's rebase does); costs
    the size of that change, not of the tree."""
    conflicts, joined = [], {}
    scope = prefix + b"/" if prefix else b""
    above = set(file_ancestors(prefix))
    for d in repo.committed.diff(base.metarange, head.metarange):
        rec = repo.committed.get(tree.id, d.key)
        if rec is not None:
            if d.right is None or d.right[1] != rec[1]:
                conflicts.append(d.key)
        elif (d.left is not None and d.right is not None
              and (d.key == prefix or d.key.startswith(scope))):
            conflicts.append(d.key)  # the import removes what they changed
        elif d.right is not None and (d.key in above or d.key == prefix
                                      or d.key.startswith(scope)):
            pair = _file_meets_tree(repo, tree, d.key, scope)  # theirs, kept beside the tree
            if pair is not None:
                joined.setdefault(*pair)
    if conflicts:
        names = ", ".join(show(k) for k in conflicts[:10])
        more = f" and {len(conflicts) - 10} more" if len(conflicts) > 10 else ""
        raise ConflictError(f"branch head moved to {head.id[:12]} and changed the same paths: "
                            f"{names}{more}; nothing was committed", conflicts)
    if joined:
        found = sorted(joined)
        raise ConflictError(f"branch head moved to {head.id[:12]}, and with its changes the "
                            "import would make a path both a file and a directory: "
                            f"{describe(found, joined, show)}; nothing was committed", found)
    log.info("head moved to %s meanwhile; applying the tree onto it", head.id[:12])


def _file_meets_tree(repo, tree: MetaRange, key: bytes,
                     scope: bytes) -> Optional[tuple[bytes, bytes]]:
    """For a key the moved head added at, above or under the import's prefix, the
    collision it makes with the tree as (file, key under it): a tree key under it when
    it is a file, or a file of the tree above it."""
    if not key.endswith(b"/"):
        for rec in repo.committed.iter(tree.id, key + b"/"):
            if rec.key.startswith(key + b"/"):
                return key, rec.key  # (the tree is all under scope: above it, any key)
            break
    for p in file_ancestors(key):
        if p.startswith(scope) and repo.committed.get(tree.id, p) is not None:
            return p, key
    return None


def _replacing(repo, base_mr: str, tree: MetaRange, prefix: bytes) -> Iterator[tuple]:
    """Committer changes, in key order, that make branch:prefix hold the tree: its
    records as puts (values kept encoded), and deletions of the keys ``base_mr`` holds
    under the prefix that the tree lacks."""
    old = replaced_keys(repo.committed, base_mr, prefix)
    nxt = next(old, None)
    for k, v in tree_records(repo.committed.ranges, tree):
        while nxt is not None and nxt < k:
            yield nxt, None, None
            nxt = next(old, None)
        if nxt == k:
            nxt = next(old, None)
        yield k, decode_identity(v), None, v
    while nxt is not None:
        yield nxt, None, None
        nxt = next(old, None)
