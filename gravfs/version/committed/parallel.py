"""apply and merge on several cores: the stitcher run on key slices in worker processes.

A change set spread over a whole tree rewrites nearly every range, and each
range costs the same Python work (decode, hash, encode) wherever it lies; so
does every record of a bulk load.  The key space is cut into slices of about
equal work at range boundaries of the first view, or at changed keys inside a
long stretch of new ones (a load onto an empty or distant tree).  Each slice
is stitched by a worker process, or by the driver, which takes slices too,
running the very same ``stitch`` as the single-process path, from the state
it would be in if a range had ended at the slice's first key, up to a few
breaks past the slice's last key.  Every break a run reaches is recorded with
its break state (stitch.break_state: the last key and which views are
mid-range).  A change set given as SlicedChanges (sources.py) is not sent to
the workers: each reads its own slice from where the changes live.

The driver then joins the runs: the first slice's run is the true one from the
start of the tree; where it stopped, its state is looked up among the next
slices' recorded states, and from the matching one on that slice's ranges are
the true ones too (the stitcher is deterministic from a break state).  When no
later run went through that state (a slice whose speculative first break did
not line up with the true sequence), the driver stitches on in its own process
from that state until it reaches a state some later run recorded.  So the
result is the single-process result, range for range, whatever the slicing:
same range IDs, same metarange ID.  Ranges a run wrote before it lined up are
uploaded but left out of the tree (content-addressed; GC removes them).

Workers open the store from its URL and share the manager's tier directory
(the tier is safe for several processes), so they read and verify ranges
exactly as the manager does (workers.py: plain worker processes, not forked
from a caller that may be a threaded daemon).
"""

from __future__ import annotations

import gc
import logging
import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Callable, Iterable

from gravfs.version.committed.breaks import BreakPolicy, policy_from_dict
from gravfs.version.committed.reader import MetaRange, RangeInfo, RangeStore
from gravfs.version.committed.recordids import RecordIDs
from gravfs.version.committed.results import Stats
from gravfs.version.committed.sources import RemoteChanges
from gravfs.version.committed.stitch import BreakState, _View, stitch
from gravfs.version.committed.workers import WorkerPool
from gravfs.version.committed.writer import TreeWriter, WriteContext

log = logging.getLogger(__name__)

SLICES_PER_WORKER = 2   # a little slack for slices of uneven cost
# A run goes on this many breaks past its slice's end, where the next slice's run,
# started out of step, has usually fallen in step (the driver resumes otherwise).
EXTRA_BREAKS = 2


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to read the same trees and write the same ranges (picklable)."""

    store_url: str
    tier_dir: str
    tier_bytes: int
    tmp_dir: str
    policy: tuple  # BreakPolicy.to_dict() items (hashable: workers key their state by spec)
    compression: str
    block_size: int
    max_carry: int | None
    record_ids_dir: str | None
    record_ids_bytes: int


@dataclass
class SliceRun:
    """What one run wrote: its ranges in key order, the index into them at every
    break state it reached, and the state it stopped at (None: the tree's end)."""

    ranges: list[RangeInfo]
    marks: dict[BreakState, int]
    end: BreakState | None
    stats: dict[str, int]
    # ranges kept in the shared tier by the worker (LocalTier.add_written)
    linked: list[tuple[str, int, int]] = field(default_factory=list)


def default_workers() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def make_pool(processes: int) -> WorkerPool:
    return WorkerPool(processes, preload=(__name__,))


# --- planning -----------------------------------------------------------------


def range_weights(mr: MetaRange, keys: list[bytes]) -> list[int]:
    """Per range of ``mr`` (and one past its end): the work ``keys`` (sorted) bring
    there, the range's records to rewrite plus one per key falling in it (or in
    the gap before it); 0 for ranges none falls in (copied by ID). Bisection
    per touched range, so the cost follows the ranges touched, not the keys."""
    mk = mr.max_keys
    n = len(mk)
    w = [0] * (n + 1)
    a, i, m = 0, 0, len(keys)
    while a < m:
        i = bisect_left(mk, keys[a], i)
        if i == n:
            w[n] = m - a
            break
        b = bisect_right(keys, mk[i], a)
        w[i] = mr.ranges[i].count + b - a
        a = b
    return w


def cut(mr: MetaRange, weights: list[int], slices: int,
        keys: list[bytes] | None = None) -> list[tuple[bytes | None, bytes | None]]:
    """(lo, hi] key slices of about equal weight (range_weights), cut at range ends
    of ``mr``; given the ``keys`` the weights came from, also at keys inside a
    stretch whose new keys alone outweigh half a slice (a bulk load onto an empty
    or distant tree). A cut there starts its slice in a state the true run may
    not pass through: the join (join_runs) lines it up at a later break."""
    total = sum(weights)
    if slices <= 1 or total == 0:
        return [(None, None)]
    bounds: list[bytes] = []
    step = total / slices
    mk = mr.max_keys
    n = len(mk)
    acc = 0
    a = 0  # first key of the current stretch
    for i, w in enumerate(weights):
        if len(bounds) >= slices - 1:
            break
        b = a
        if keys is not None:
            b = len(keys) if i == n else bisect_right(keys, mk[i], a)
        new = b - a
        while w and len(bounds) < slices - 1 and acc + w >= step * (len(bounds) + 1):
            goal = step * (len(bounds) + 1)
            if new * 2 >= step:  # inside the stretch, at the key where the goal falls
                j = a + min(new - 1, max(0, int((goal - acc) * new / w) - 1))
                bound = keys[j]
            elif i < n - 1:
                bound = mk[i]
            else:
                break
            if not bounds or bound > bounds[-1]:
                bounds.append(bound)
            else:
                break
        acc += w
        a = b
    los = [None] + bounds
    his = bounds + [None]
    return list(zip(los, his))


def touched(weights: list[int]) -> int:
    return sum(1 for w in weights if w)


# --- workers ------------------------------------------------------------------

_open: dict[WorkerSpec, tuple] = {}


def _worker(spec: WorkerSpec):
    """(RangeStore, WriteContext, policy) of this worker process for ``spec``."""
    w = _open.get(spec)
    if w is None:
        from concurrent.futures import ThreadPoolExecutor

        from gravfs.store import open_store
        from gravfs.store.tier import LocalTier
        store = open_store(spec.store_url)
        tier = LocalTier(store, spec.tier_dir, spec.tier_bytes)
        ctx = WriteContext(store, spec.tmp_dir, ThreadPoolExecutor(1, thread_name_prefix="gravfs-sst"),
                           spec.compression, spec.block_size, max_inflight=2)
        ctx.tier, ctx.linked = tier, []
        rs = RangeStore(tier)
        if spec.record_ids_dir:
            rs.record_ids = ctx.record_ids = RecordIDs(spec.record_ids_dir, spec.record_ids_bytes)
        w = _open[spec] = (rs, ctx, policy_from_dict(dict(spec.policy)))
    return w


def run_slice(rs: RangeStore, ctx: WriteContext, policy: BreakPolicy, max_carry: int | None,
              view_ids: list[tuple[int, str]], overrides: Iterable[tuple], start: BreakState | None,
              stop: Callable[[BreakState], bool]) -> SliceRun:
    """Stitch from ``start`` (None: the tree's start) until ``stop(state)`` at a break."""
    stats = Stats()
    mrs = [(bit, rs.metarange(mid)) for bit, mid in view_ids]
    known: set[str] = set()
    for _, mr in mrs:
        known.update(mr.ids)
    writer = TreeWriter(ctx, policy, stats, known)
    views = [_View(bit, mr, rs, stats) for bit, mr in mrs]
    marks: dict[BreakState, int] = {}

    def at_break(state: BreakState, n: int) -> bool:
        if state == start:
            marks.setdefault(state, n)
            return False
        marks.setdefault(state, n)
        return stop(state)

    collecting = gc.isenabled()
    gc.disable()  # as in the workers (workers.py): many objects, no cycles
    try:
        end = stitch(writer, views, iter(overrides), max_carry, start=start, at_break=at_break)
        ranges = writer.close_ranges()
    except BaseException:
        writer.abort()
        raise
    finally:
        if collecting:
            gc.enable()
    linked: list[tuple[str, int, int]] = []
    if ctx.linked:
        linked, ctx.linked[:] = list(ctx.linked), []
    return SliceRun(list(ranges), marks, end, stats.as_dict(), linked)


def past(hi: bytes | None, extra: int = EXTRA_BREAKS) -> Callable[[BreakState], bool]:
    """Stop condition of the run of slice (..., hi]: the ``extra`` + 1-th break at or
    past ``hi`` (None: never)."""
    if hi is None:
        return lambda state: False
    seen = 0

    def stop(state: BreakState) -> bool:
        nonlocal seen
        if state[0] is not None and state[0] >= hi:
            seen += 1
            return seen > extra
        return False

    return stop


def stitch_task(spec: WorkerSpec, view_ids: list[tuple[int, str]],
                overrides: list[tuple] | RemoteChanges, lo: bytes | None,
                hi: bytes | None) -> SliceRun:
    """Worker: the run of slice (lo, hi] (``overrides``: every one with key > lo, or
    where to read them: sources.py)."""
    rs, ctx, policy = _worker(spec)
    start = None if lo is None else (lo, ())
    if isinstance(overrides, RemoteChanges):
        overrides = overrides.overrides(lo)
    return run_slice(rs, ctx, policy, spec.max_carry, view_ids, overrides, start, past(hi))


def join_task(spec: WorkerSpec, base_id: str, source_id: str, dest_id: str, strategy: str,
              lo: bytes | None, hi: bytes | None, same=None
              ) -> tuple[list[tuple], list[bytes], dict]:
    """Worker: join_slice through this worker's RangeStore."""
    rs, _, _ = _worker(spec)
    return join_slice(rs, base_id, source_id, dest_id, strategy, lo, hi, same)


def join_slice(rs: RangeStore, base_id: str, source_id: str, dest_id: str, strategy: str,
               lo: bytes | None, hi: bytes | None, same=None
               ) -> tuple[list[tuple], list[bytes], dict]:
    """merge.join_changes over keys in (lo, hi] (overrides, conflicts, stats)."""
    from gravfs.version.committed.merge import join_changes
    stats = Stats()
    conflicts: list[bytes] = []
    out = list(join_changes(rs, rs.metarange(base_id), rs.metarange(source_id),
                            rs.metarange(dest_id), strategy, stats, conflicts, start=lo, end=hi,
                            same=same))
    return out, conflicts, stats.as_dict()


# --- driver -------------------------------------------------------------------


def after(overrides: list[tuple], key: bytes | None) -> list[tuple]:
    """The overrides with key > ``key`` (all for None)."""
    if key is None:
        return overrides
    return overrides[bisect_right(overrides, key, key=_first):]


def _first(e: tuple) -> bytes:
    return e[0]


def join_runs(runs: list[SliceRun],
              resume: Callable[[BreakState, Callable[[BreakState], bool]], SliceRun]) -> list[RangeInfo]:
    """The true sequence of ranges from the slices' runs (see module docstring).

    ``resume(state, stop)`` stitches in the driver from ``state`` until a break
    state for which ``stop`` is true (or the end).
    """
    out = list(runs[0].ranges)
    state = runs[0].end
    c = 1
    while state is not None and c < len(runs):
        hit = None
        for c2 in range(c, len(runs)):
            i = runs[c2].marks.get(state)
            if i is not None:
                hit = (c2, i)
                break
        if hit is None:
            later = {st for r in runs[c:] for st in r.marks}
            log.debug("parallel stitch: resuming in the driver at %r", state[0])
            run = resume(state, later.__contains__)
            out += run.ranges
            state = run.end
            continue
        c2, i = hit
        out += runs[c2].ranges[i:]
        state = runs[c2].end
        c = c2 + 1
    return out


def add_stats(stats: Stats, d: dict[str, int]) -> None:
    for k, v in d.items():
        setattr(stats, k, getattr(stats, k) + v)
