"""CommittedManager: the committed-metadata API used by the repository layer.

Trees are identified by metarange ID.  Reads go metarange index -> one range
-> seek-GE through the local tier; writes go through TreeWriter; apply and
merge stitch new trees out of existing ranges (copied by ID, unread) and
rewritten ones; diff skips ranges with equal IDs.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from bisect import bisect_left, bisect_right
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Iterable, Iterator, Optional

from gravfs.version.committed import parallel, recordids
from gravfs.version.committed.breaks import BreakPolicy
from gravfs.version.committed.diff import diff_trees, diff_under
from gravfs.version.committed.merge import DEST_BIT, SOURCE_BIT, STRATEGIES, join_changes
from gravfs.version.committed.reader import MetaRange, RangeInfo, RangeStore
from gravfs.version.committed.record import EMPTY_ID, Record, decode_record, encode_value, put_varint

_new_record = tuple.__new__
# Go-varint encodings of the lengths that take exactly two bytes (64..8191); None for
# the others, including the negative indexes a value shorter than 35 bytes gives.
_LEN2 = [put_varint(n) if 64 <= n < 8192 else None for n in range(8192)] + [None] * 64
from gravfs.version.committed.results import ApplyResult, Diff, MergeResult, Stats
from gravfs.version.committed.sources import SlicedChanges, overrides_of
from gravfs.version.committed.stitch import _View, stitch
from gravfs.version.committed.writer import TreeWriter, WriteContext, remove_stale_temps
from gravfs.errors import ConflictError, NotFoundError
from gravfs.keyrange import outermost
from gravfs.quoting import quote

log = logging.getLogger(__name__)

EMPTY_METARANGE_ID = EMPTY_ID
# a change set this large is spread over worker processes whatever it touches (a bulk
# load onto an empty or distant tree): about 0.6 s of one core's work, twice what
# starting the workers costs
PARALLEL_MIN_RECORDS = 100_000
# values_at scans a range instead of looking up its keys one by one when they are
# at least 1/DENSE_LOOKUPS of its records (measured: 10k, 50k and 1M changes on a
# 1M-entry tree; below it most keys are in blocks of their own, read either way)
DENSE_LOOKUPS = 32


class DiffIterator:
    """Iterator of Diff in key order; ``stats.ranges_read`` counts ranges read so far."""

    def __init__(self, gen: Iterator[Diff], stats: Stats):
        self._gen = gen
        self.stats = stats

    def __iter__(self) -> "DiffIterator":
        return self

    def __next__(self) -> Diff:
        return next(self._gen)


class CommittedManager:
    """Read, write, apply, diff and merge committed trees on one object store.

    ``store`` is an ObjectStore; ``tier`` a LocalTier over the same store;
    ``policy`` decides range boundaries (fixed per repository).  Safe to share
    by threads for reading; writes use a small thread pool for SST uploads.
    ``max_carry`` bounds how many untouched ranges a change may drag into a
    rewrite before a boundary is forced (None: never force, so tree IDs are
    always a function of content alone; see stitch.py).  ``block_cache_bytes``
    gives this manager its own decoded-block cache of that size instead of
    the SST module's shared one (random lookups over trees larger than the
    cache decode a block per miss).  ``show_key`` prints a key in messages
    (conflicts); the catalog passes its own, which escapes foreign names.
    """

    def __init__(self, store, tier, policy: BreakPolicy, compression: str = "snappy",
                 block_size: int = 4096, tmp_dir: str | None = None, upload_threads: int = 2,
                 max_open_ranges: int | None = None, max_carry: int | None = 8,
                 block_cache_bytes: int | None = None,
                 show_key: Callable[[bytes], str] = quote,
                 workers: int | None = None, parallel_min_ranges: int = 64,
                 parallel_min_records: int = PARALLEL_MIN_RECORDS,
                 record_ids_bytes: int = recordids.DEFAULT_BYTES):
        self.store = store
        self.show_key = show_key
        self.tier = tier
        self.policy = policy
        self.max_carry = max_carry
        cache = None
        if block_cache_bytes is not None:
            from gravfs.sstable import BlockCache
            cache = BlockCache(block_cache_bytes)
        self.ranges = RangeStore(tier, max_open_ranges=max_open_ranges, block_cache=cache)
        self._own_tmp = tmp_dir is None
        self._tmp_dir = tmp_dir or tempfile.mkdtemp(prefix="gravfs-committed-")
        os.makedirs(self._tmp_dir, exist_ok=True)
        if self._own_tmp:  # also cleaned if the manager is dropped without close()
            self._tmp_cleanup = weakref.finalize(self, shutil.rmtree, self._tmp_dir, True)
        else:  # a shared directory (the workspace's): drop what killed writers left
            remove_stale_temps(self._tmp_dir)
        self._executor = ThreadPoolExecutor(upload_threads, thread_name_prefix="gravfs-sst") \
            if upload_threads > 0 else None
        self._ctx = WriteContext(store, self._tmp_dir, self._executor, compression, block_size,
                                 max_inflight=max(2, 2 * upload_threads))
        tier_dir = getattr(tier, "cache_dir", None)
        self.record_ids = None
        if record_ids_bytes > 0 and isinstance(tier_dir, str):
            # beside the tier's directory (a workspace's cache): kept as long as it is
            self.record_ids = recordids.RecordIDs(
                os.path.join(os.path.dirname(tier_dir), "record-ids"), record_ids_bytes)
        self.ranges.record_ids = self.record_ids
        self._ctx.record_ids = self.record_ids
        self._ctx.tier = tier if hasattr(tier, "add_written") else None
        self.workers = parallel.default_workers() if workers is None else workers
        self.parallel_min_ranges = parallel_min_ranges
        self.parallel_min_records = parallel_min_records
        self.slices: int | None = None  # key slices per parallel operation (None: 2 per worker)
        # merge: whether two different values of a key are the same change (merge.py; the
        # file layer sets it; a module-level function, as worker processes get it pickled)
        self.same_change: Optional[Callable[[bytes, bytes], bool]] = None
        self._spec = self._worker_spec(compression, block_size)
        self._pool = None

    def _worker_spec(self, compression: str, block_size: int) -> parallel.WorkerSpec | None:
        """How worker processes open this manager's store and tier (None: they cannot:
        a store without a URL, or a tier without a directory)."""
        url = getattr(self.store, "url", None)
        tier_dir = getattr(self.tier, "cache_dir", None)
        budget = getattr(self.tier, "budget_bytes", None)
        if not isinstance(url, str) or not tier_dir or not budget:
            return None
        rids = self.record_ids
        return parallel.WorkerSpec(url, tier_dir, budget, self._tmp_dir,
                                   tuple(sorted(self.policy.to_dict().items())),
                                   compression, block_size, self.max_carry,
                                   rids.root if rids else None, rids.max_bytes if rids else 0)

    def _parallel(self, weights: list[int]) -> bool:
        """Worth spreading over worker processes: enough ranges to rewrite or records
        to write (range_weights), and cores."""
        return (self.workers > 1 and self._spec is not None
                and (parallel.touched(weights) >= self.parallel_min_ranges
                     or sum(weights) >= self.parallel_min_records))

    def worker_cpu_seconds(self) -> float:
        """CPU time this manager's worker processes have used so far (for benchmarks)."""
        return self._pool.cpu_seconds() if self._pool is not None else 0.0

    def _slice_count(self) -> int:
        return self.slices or self.workers * parallel.SLICES_PER_WORKER

    def _workers(self):
        if self._pool is None:  # one process fewer than workers: this thread is one
            self._pool = parallel.make_pool(self.workers - 1)
        return self._pool

    def start_workers(self) -> None:
        """Start the worker processes now: for a caller about to apply a change set it
        expects to be large, so they start while it reads the changes."""
        if self.workers > 1 and self._spec is not None:
            self._workers().start()

    def _run_slices(self, fn, calls: list[tuple], here: Callable[[tuple], object]) -> list:
        """fn(spec, *args) for every args in calls, in order: on the worker processes
        and, as ``here(args)``, in this thread."""
        return self._workers().run([(fn, (self._spec, *args)) for args in calls],
                                   lambda fn, args: here(args[1:]))

    def _stitch_slices(self, view_ids: list[tuple[int, str]], feed: tuple[Callable, Callable],
                       weights: list[int], first: MetaRange, known: set[str],
                       stats: Stats, keys: list[bytes] | None = None) -> list[RangeInfo]:
        """The ranges of the target, stitched slice by slice on the workers (parallel.py).

        ``feed``: (the override entries with key > k in this process, what a worker
        is sent for its slice (lo, hi]: those with key > lo, or where to read them);
        ``keys``: the changed keys, to cut inside long stretches of new ones.
        """
        here, there = feed
        slices = parallel.cut(first, weights, self._slice_count(), keys)

        def run_here(state, stop):
            return parallel.run_slice(self.ranges, self._ctx, self.policy, self.max_carry,
                                       view_ids, here(None if state is None else state[0]),
                                       state, stop)

        def slice_here(args):  # reading through this manager, and ``here`` for changes
            lo, hi = args[-2:]
            return run_here(None if lo is None else (lo, ()), parallel.past(hi))

        runs = self._run_slices(parallel.stitch_task, [(view_ids, there(lo), lo, hi)
                                                       for lo, hi in slices], slice_here)
        resumed: list[parallel.SliceRun] = []

        def resume(state, stop):
            run = run_here(state, stop)
            resumed.append(run)  # for the stats
            return run

        out = parallel.join_runs(runs, resume)
        if self._ctx.tier is not None:  # the workers' new ranges are local and verified
            for run in runs:
                self._ctx.tier.adopt_linked(run.linked)
        for run in runs + resumed:
            parallel.add_stats(stats, run.stats)
        stats.ranges_reused = sum(1 for r in out if r.id in known)
        log.debug("stitched %d ranges in %d slices (%d resumed in this process)", len(out),
                  len(slices), len(resumed))
        return out

    def close(self) -> None:
        self.ranges.close()  # open readers hold a descriptor each: not until GC
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._own_tmp:
            self._tmp_cleanup()

    def __enter__(self) -> "CommittedManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _writer(self, stats: Stats, known: set[str] | None = None) -> TreeWriter:
        return TreeWriter(self._ctx, self.policy, stats, known)

    # --- reading -----------------------------------------------------------

    def metarange(self, metarange_id: str) -> MetaRange:
        """Parsed metarange (ranges, ids, min/max keys); NotFoundError if missing."""
        return self.ranges.metarange(metarange_id)

    def exists(self, metarange_id: str) -> bool:
        if metarange_id == EMPTY_ID:
            return True
        try:
            self.ranges.metarange(metarange_id)
        except NotFoundError:
            return False
        return True

    def iter_ranges(self, metarange_id: str) -> list[RangeInfo]:
        """RangeInfo(id, min_key, max_key, count, estimated_size) of every range, in key order."""
        return list(self.ranges.metarange(metarange_id).ranges)

    def get(self, metarange_id: str, key: bytes) -> Record | None:
        """The record at ``key``, or None (metarange index -> one range -> point lookup).

        Warm lookups are answered from the range's cached key -> value map
        without touching its file (see MetaRange.kv_maps); the rest go
        through an open reader.  The record decoding is inlined for the
        common lengths (see record.decode_record).
        """
        value = self.get_value(metarange_id, key)
        if value is None:
            return None
        # A 32-byte identity (SHA-256: gravfs's and lakeFS's) and 64..8191 bytes of data.
        try:
            if value[0] == 64 and value[33:35] == _LEN2[len(value) - 35]:
                return _new_record(Record, (key, value[1:33], value[35:]))
        except IndexError:
            pass
        return decode_record(key, value)  # long fields, or corrupt (raises CorruptDataError)

    def get_value(self, metarange_id: str, key: bytes) -> bytes | None:
        """The encoded value (lakeFS encoding) at ``key``, or None: get() without decoding."""
        rs = self.ranges
        mr = rs._metaranges.get(metarange_id)
        if mr is None:
            mr = rs.metarange(metarange_id)
        i = bisect_left(mr.max_keys, key)
        try:
            value = mr.kv_maps[i].get(key)
        except IndexError:  # past the last range
            return None
        return value if value is not None else rs.lookup_in(mr, i, key)

    def values_at(self, metarange_id: str, keys: list[bytes]) -> list[Optional[bytes]]:
        """get_value() of each of the sorted ``keys``: a range that holds many of them
        is read once, in order, from the first (its blocks left out of the cache),
        one that holds few by point lookups; so comparing a million staged changes
        with a head costs a pass over the ranges they touch, not a million lookups."""
        mr = self.ranges.metarange(metarange_id)
        out: list[Optional[bytes]] = []
        j, n = 0, len(keys)
        while j < n:
            i = bisect_left(mr.max_keys, keys[j])
            if i == len(mr.ids):
                out += [None] * (n - j)
                break
            end = bisect_right(keys, mr.max_keys[i], j)
            if (end - j) * DENSE_LOOKUPS < mr.ranges[i].count:
                out += [self.get_value(metarange_id, k) for k in keys[j:end]]
            else:
                scan = self.ranges.open_range(mr.ids[i]).reader.seek(keys[j], fill_cache=False)
                at, value = next(scan, (None, None))
                for k in keys[j:end]:
                    while at is not None and at < k:
                        at, value = next(scan, (None, None))
                    out.append(value if at == k else None)
            j = end
        return out

    def iter(self, metarange_id: str, start: bytes = b"") -> Iterator[Record]:
        """Records with key >= start in key order, reading ranges lazily.

        A scan leaves the block cache alone: a listing or a walk over the lake
        would evict the blocks point lookups reuse, and its decoded entries,
        spread between the mount's inodes, would keep memory CPython cannot give
        back when those inodes go (an arena is freed only when nothing in it lives)."""
        mr = self.ranges.metarange(metarange_id)
        i = mr.locate(start)
        rs = self.ranges
        first = True
        for rid in mr.ids[i:]:
            o = rs.open_range(rid)
            for k, v in o.reader.seek(start if first else b"", fill_cache=False):
                yield decode_record(k, v)
            first = False

    def range_records(self, range_id: str, start: bytes = b"") -> Iterator[Record]:
        """Records of one range (for GC, export and inspection)."""
        return self.ranges.range_records(range_id, start)


    # --- writing -----------------------------------------------------------

    def write_metarange(self, records: Iterable, stats: Stats | None = None) -> str:
        """Write a tree from (key, identity, data) records in strictly ascending key order."""
        return self.write_tree(records, stats).metarange_id

    def write_tree(self, records: Iterable, stats: Stats | None = None) -> ApplyResult:
        """write_metarange returning the stats too."""
        stats = stats if stats is not None else Stats()
        w = self._writer(stats)
        try:
            w.add_records(records)
        except BaseException:
            w.abort()
            raise
        mr = w.finish()
        if mr.id != EMPTY_ID:
            self.ranges.remember_metarange(mr)
        return ApplyResult(mr.id, stats)

    def apply(self, base_metarange_id: str, changes: Iterable | SlicedChanges) -> ApplyResult:
        """Apply sorted changes (puts: (key, identity, data[, encoded value]);
        deletes: (key, None, None)), given as an iterable or as SlicedChanges.

        Untouched ranges are copied by ID unread; only ranges a change falls
        into (plus, rarely, neighbours until the old boundaries line up
        again) are read and rewritten.  A change set that changes nothing
        returns the base ID and writes nothing.  Enough work (ranges to
        rewrite, or records to add) is spread over worker processes.
        """
        stats = Stats()
        base = self.ranges.metarange(base_metarange_id)
        w = self._writer(stats, set(base.ids))
        sliced = changes if isinstance(changes, SlicedChanges) else None
        overrides = None
        if sliced is None:
            overrides = _change_overrides(changes)
        many = len(changes) if isinstance(changes, (list, SlicedChanges)) else 0
        if self.workers > 1 and self._spec is not None and (
                len(base.ranges) >= self.parallel_min_ranges or many >= self.parallel_min_records):
            if sliced is None:
                overrides = list(overrides)
            keys = sliced.keys if sliced is not None else [e[0] for e in overrides]
            weights = parallel.range_weights(base, keys)
            if self._parallel(weights):
                if sliced is not None:
                    feed = (sliced.overrides, lambda lo: sliced.remote)
                else:
                    within = partial(parallel.after, overrides)
                    feed = (within, within)
                w.adopt_ranges(self._stitch_slices([(1, base.id)], feed, weights, base,
                                                   w.known, stats, keys))
                sliced = overrides = None
        if sliced is not None:
            overrides = sliced.overrides(None)
        if overrides is not None:
            view = _View(1, base, self.ranges, stats)
            try:
                stitch(w, [view], overrides, self.max_carry)
            except BaseException:
                w.abort()
                raise
        mr = w.finish(base)
        if mr.id != EMPTY_ID:
            self.ranges.remember_metarange(mr)
        return ApplyResult(mr.id, stats)

    # --- comparing -----------------------------------------------------------

    def diff(self, left_id: str, right_id: str, under: Optional[list[bytes]] = None
             ) -> DiffIterator:
        """Differences from left to right, in key order (added/removed/changed); with
        ``under``, only at and under those keys (one walk each, in key order)."""
        stats = Stats()
        if left_id == right_id:
            return DiffIterator(iter(()), stats)
        left = self.ranges.metarange(left_id)
        right = self.ranges.metarange(right_id)
        if under is None:
            return DiffIterator(diff_trees(self.ranges, left, right, stats), stats)
        return DiffIterator((d for k in outermost(under)
                             for d in diff_under(self.ranges, left, right, stats, k)), stats)

    def merge(self, base_id: str, source_id: str, dest_id: str,
              strategy: str = "fail") -> MergeResult:
        """Three-way merge of source into dest over their common base (merge.py).

        Raises ConflictError listing the conflicting keys with strategy
        "fail"; "source-wins"/"dest-wins" resolve them and list them in the
        result's ``conflicts``.
        """
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown merge strategy {strategy!r} (use one of {', '.join(STRATEGIES)})")
        stats = Stats()
        if source_id == base_id or source_id == dest_id:
            return MergeResult(dest_id, stats)
        if dest_id == base_id:
            return MergeResult(source_id, stats)
        base = self.ranges.metarange(base_id)
        source = self.ranges.metarange(source_id)
        dest = self.ranges.metarange(dest_id)
        conflicts: list[bytes] = []
        w = self._writer(stats, set(dest.ids) | set(source.ids))
        if self.workers > 1 and self._spec is not None:
            weights = _changed_weights(base, source, dest)
            if self._parallel(weights):
                return self._merge_parallel(base, source, dest, strategy, weights, w, stats)

        def stop_writing() -> None:
            raise _Abort

        overrides = _Overrides(join_changes(self.ranges, base, source, dest, strategy, stats,
                                            conflicts, stop_writing, same=self.same_change))
        views = [_View(DEST_BIT, dest, self.ranges, stats),
                 _View(SOURCE_BIT, source, self.ranges, stats)]
        try:
            stitch(w, views, overrides, self.max_carry)
        except _Abort:
            # A conflict under "fail": stop building and only collect every conflicting key.
            w.abort()
            conflicts = []
            for _ in join_changes(self.ranges, base, source, dest, strategy, stats, conflicts,
                                  same=self.same_change):
                pass
        except BaseException:
            w.abort()
            raise
        if conflicts and strategy == "fail":
            raise self._conflict_error(conflicts)
        mr = w.finish(dest)
        if mr.id != EMPTY_ID:
            self.ranges.remember_metarange(mr)
        return MergeResult(mr.id, stats, conflicts=conflicts, changes=overrides.count,
                           from_source=overrides.sides[DEST_BIT],
                           from_dest=overrides.sides[SOURCE_BIT])


    def _merge_parallel(self, base: MetaRange, source: MetaRange, dest: MetaRange,
                        strategy: str, weights: list[int], w: TreeWriter,
                        stats: Stats) -> MergeResult:
        """merge() with the joins and the stitching done slice by slice on the workers."""
        slices = parallel.cut(dest, weights, self._slice_count())
        joined = self._run_slices(parallel.join_task, [
            (base.id, source.id, dest.id, strategy, lo, hi, self.same_change)
            for lo, hi in slices],
            lambda args: parallel.join_slice(self.ranges, *args))
        overrides: list[tuple] = []
        conflicts: list[bytes] = []
        for ovr, conf, st in joined:
            overrides += ovr
            conflicts += conf
            parallel.add_stats(stats, st)
        if conflicts and strategy == "fail":
            raise self._conflict_error(conflicts)
        views = [_View(DEST_BIT, dest, self.ranges, stats),
                 _View(SOURCE_BIT, source, self.ranges, stats)]
        weights = parallel.range_weights(dest, [e[0] for e in overrides])
        if self._parallel(weights):
            within = partial(parallel.after, overrides)
            w.adopt_ranges(self._stitch_slices([(DEST_BIT, dest.id), (SOURCE_BIT, source.id)],
                                               (within, within), weights, dest, w.known, stats))
        else:
            try:
                stitch(w, views, iter(overrides), self.max_carry)
            except BaseException:
                w.abort()
                raise
        mr = w.finish(dest)
        if mr.id != EMPTY_ID:
            self.ranges.remember_metarange(mr)
        return MergeResult(mr.id, stats, conflicts=conflicts, changes=len(overrides),
                           from_source=[e[0] for e in overrides
                                        if e[3] == DEST_BIT and e[1] is not None],
                           from_dest=[e[0] for e in overrides
                                      if e[3] == SOURCE_BIT and e[1] is not None])

    def _conflict_error(self, conflicts: list[bytes]) -> ConflictError:
        shown = ", ".join(self.show_key(k) for k in conflicts[:10])  # quoted: one line
        more = f" and {len(conflicts) - 10} more" if len(conflicts) > 10 else ""
        return ConflictError(f"merge conflict on {len(conflicts)} path(s): {shown}{more}",
                             conflicts)


def _changed_weights(base: MetaRange, source: MetaRange, dest: MetaRange) -> list[int]:
    """Per range of dest: records in ranges of dest or source that base does not have
    (where a merge must read and compare), placed by their last key."""
    in_base = set(base.ids)
    w = [0] * (len(dest.ranges) + 1)
    for tree in (dest, source):
        for r in tree.ranges:
            if r.id not in in_base:
                w[bisect_left(dest.max_keys, r.max_key)] += r.count
    return w


class _Abort(Exception):
    """Internal: stop a merge at its first conflict under strategy "fail"."""


class _Overrides:
    """A merge's overrides passed on to the stitcher, counted, with the keys each side's
    records fill (MergeResult.from_source and from_dest)."""

    def __init__(self, it):
        self._it = iter(it)
        self.count = 0
        self.sides: dict[int, list[bytes]] = {DEST_BIT: [], SOURCE_BIT: []}

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self._it)
        self.count += 1
        if item[1] is not None:
            self.sides[item[3]].append(item[0])
        return item


def _change_overrides(changes: Iterable) -> Iterator[tuple]:
    """Change/Record tuples -> stitch override entries, checking the order
    (sources.overrides_of)."""
    if isinstance(changes, list):  # checked and converted in bulk
        return iter(overrides_of(changes))
    return _change_stream(changes)


def _change_stream(changes: Iterable) -> Iterator[tuple]:
    last = None
    for ch in changes:
        key, identity = ch[0], ch[1]
        if last is not None and key <= last:
            raise ValueError(f"changes not in strictly ascending key order at {key!r}")
        last = key
        if identity is None:
            yield (key, None, None, 1)
        elif len(ch) > 3 and ch[3] is not None:
            yield (key, identity, ch[3], 1)
        else:
            yield (key, identity, encode_value(identity, ch[2]), 1)
