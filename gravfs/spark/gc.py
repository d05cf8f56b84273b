"""Garbage collection on Spark: mark what the retention rules keep, report, sweep.

A run (``gc``), with T0 the mark's start by the store's clock (the last-modified
of the run's status object) and the cutoff T0 minus the minimum age:

1. Select (driver, gravfs.version.retention): this host's staging is read, then
   the kept commits, walking each branch's first-parent chain, bounded memory;
   their distinct metaranges, plus the compacted metaranges of that staging.
2. Mark (executors): metaranges -> distinct range ids; ranges the mark cache
   (gctasks) does not cover yet are read once and cached; the live set is the
   cached rows of the kept ranges, the kept ranges and metaranges themselves,
   and what this host's staging and pending uploads reference.
3. Report (executors): ``data/``, ``sparse/``, ranges and metaranges are
   listed in parallel, split by prefix; unreferenced objects older than the
   cutoff are written as Parquet under ``_gravfs/gc/<run>/report/`` (address,
   size, kind, why) with ``summary.json``, before anything is deleted.
4. Sweep (executors, not with dry_run): the fence ``_gravfs/gc/sweeping`` is
   taken (one sweep at a time, gravfs.spark.gcfence), refs are checked again (a ref that now reaches an object the
   report condemns stops the sweep), then each task lists its prefixes afresh
   and deletes, in batches of 1,000, the reported objects still older than
   the cutoff, within the lease of that listing (store.base: writers that
   reuse an old object refresh it and, during a sweep, look again after the
   lease).

The run's state is ``_gravfs/gc/<run>/status.json``: marking, marked (report
written), sweeping, done, or failed. ``sweep_only`` sweeps the report of an
earlier run whose mark finished. A killed run leaves its state; running gc
again marks afresh (reading only ranges no earlier run cached) and finishes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, Optional

from gravfs.errors import GravfsError, NotFoundError
from gravfs.fs.entry import decode_entry
from gravfs.fs.references import live_addresses
from gravfs.spark import gctasks
from gravfs.spark.runtime import job_failed
from gravfs.spark.gcfence import FenceHeldError, SweepFence
from gravfs.store.base import REFRESH_AGE
from gravfs.version.committed.reader import METARANGES_PREFIX, RANGES_PREFIX
from gravfs.version.committed.record import decode_value
from gravfs.version.retention import (SWEPT_STATES, kept_key, load_rules, read_commit,
                                      name_last_sweep, read_kept, read_status, run_prefix,
                                      select_commits, status_key)
from gravfs.version.staging.area import PROVISIONAL, PUTS, staged_value

log = logging.getLogger(__name__)

DEFAULT_MIN_AGE = 86400.0


class GcRefusedError(GravfsError):
    """A run that must not go on (no rules, an unfinished mark to sweep, refs that
    changed under the run)."""

    exit_code = 5


@dataclass
class GcResult:
    run_id: str
    state: str
    dry_run: bool
    min_age_s: float
    mark_started_ns: int = 0
    kept_commits: int = 0
    commits_read: int = 0
    metaranges: int = 0
    metaranges_missing: int = 0
    ranges: int = 0
    ranges_read: int = 0
    staged_addresses: int = 0
    live_objects: int = 0
    live_bytes: int = 0
    expired_objects: int = 0
    expired_bytes: int = 0
    expired_by_kind: dict = field(default_factory=dict)
    young_objects: int = 0  # unreferenced but younger than the cutoff: kept
    young_bytes: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0
    refreshed_objects: int = 0  # reported, then refreshed by a writer: kept
    report_parts: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def parse_duration(text: str) -> float:
    """``30s``, ``15m``, ``24h``, ``7d`` or plain seconds -> seconds (>= 0)."""
    raw = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    mult = 1
    if raw and raw[-1] in units:
        mult = units[raw[-1]]
        raw = raw[:-1]
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value * mult):  # (also "nan", "inf", "1e400h")
        raise GravfsError(f"--min-age: {text!r} is not a duration (e.g. 0, 90s, 30m, 24h, 7d)")
    if value < 0:
        raise GravfsError(f"--min-age: {text!r} is negative")
    return value * mult


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)


class _Run:
    """The store records of one run."""

    def __init__(self, store, run_id: str):
        self.store, self.id = store, run_id
        self.status: dict = {}

    def save(self, **changes) -> None:
        self.status.update(changes)
        self.store.put(status_key(self.id), json.dumps(self.status, sort_keys=True).encode())


def gc(spark, repo, *, dry_run: bool = False, min_age: float = DEFAULT_MIN_AGE,
       report_dir: Optional[str] = None, sweep_only: Optional[str] = None,
       state_dir: Optional[str] = None,
       on_report: Optional[Callable[[GcResult], None]] = None) -> GcResult:
    """Run garbage collection on ``repo`` (a Repository, or a store URL opened with
    ``state_dir``): mark, report, and unless ``dry_run`` sweep. ``min_age``:
    seconds; nothing younger is deleted. ``sweep_only``: sweep the report of that
    earlier run instead. ``on_report(result)`` runs once the report is written,
    before anything is deleted (an exception from it stops the run there).
    See the module doc."""
    if isinstance(repo, str):
        from gravfs.fs.repository import Repository
        with Repository.open(repo, state_dir) as r:
            return gc(spark, r, dry_run=dry_run, min_age=min_age, report_dir=report_dir,
                      sweep_only=sweep_only, on_report=on_report)
    if min_age < 0:
        raise GravfsError("the minimum age cannot be negative")
    if sweep_only:
        return _sweep_only(spark, repo, sweep_only, report_dir)
    rules = load_rules(repo.store)
    if rules is None:
        raise GcRefusedError("no retention rules: set them first with 'gravfs gc rules set "
                             "--default-days N'")
    with _writers_held_off(repo, None if dry_run else min_age):
        return _run(spark, repo, rules, dry_run, min_age, report_dir, on_report)


def _run(spark, repo, rules, dry_run: bool, min_age: float, report_dir: Optional[str],
         on_report: Optional[Callable[[GcResult], None]]) -> GcResult:
    run = _Run(repo.store, new_run_id())
    res = GcResult(run.id, "marking", dry_run, min_age)
    run.save(run=run.id, state="marking", dry_run=dry_run, min_age_s=min_age,
             rules=json.loads(rules.to_json()))
    t0 = repo.store.stat(status_key(run.id)).mtime  # the store's clock
    res.mark_started_ns = int(t0 * 1e9)
    cutoff = t0 - min_age
    run.save(mark_started_ns=res.mark_started_ns, cutoff_s=cutoff)
    log.info("gc run %s: mark started, cutoff %.0f (min age %.0fs)", run.id, cutoff, min_age)
    try:
        kept = _mark_and_report(spark, repo, run, res, rules, cutoff)
        res.state = "marked"
        run.save(state="marked", summary=res.to_json())
        _write_summary(repo.store, run.id, res)
    except BaseException as exc:  # a failed mark: nothing may be swept from it
        res.state = "failed"
        run.save(state="failed", error=str(exc)[:500])
        if isinstance(exc, GravfsError) or not _is_spark_error(exc):
            raise
        raise job_failed(exc, "garbage collection") from exc
    # from here on a failure leaves the run marked (or sweeping): --sweep-only finishes it
    if report_dir:
        _copy_report(repo.store, run.id, res, report_dir)
    if on_report is not None:
        on_report(res)
    if not dry_run:
        try:
            _sweep(spark, repo, run, res, cutoff, kept)
        except BaseException as exc:
            if isinstance(exc, GravfsError) or not _is_spark_error(exc):
                raise
            raise job_failed(exc, "garbage collection sweep") from exc
    return res


@contextmanager
def _writers_held_off(repo, min_age: Optional[float]) -> Iterator[None]:
    """Writers refresh a stored object they reuse only when it is over REFRESH_AGE old
    (store.base), so a run that deletes younger ones (``min_age`` under it; None: one
    that deletes nothing) is safe only while nothing writes to the store: refused while
    a mount of it runs on this host, a mount starting meanwhile is refused, and the
    user is warned of the rest."""
    if min_age is None or min_age >= REFRESH_AGE:
        yield
        return
    with repo.data.writers_held_off() as held:
        if not held:
            raise GcRefusedError(
                f"a mount of {repo.store.url} runs on this host: with --min-age "
                f"{min_age:g}s (under {REFRESH_AGE / 3600:g} h) garbage collection could "
                "delete an object the mount stores again meanwhile (a file written back "
                "with content stored before); unmount it first, or use --min-age 1h or more")
        log.warning("--min-age %gs (under %g h): nothing may write to this store until the "
                    "run ends, on this host or another (a mount of it here is refused "
                    "meanwhile)", min_age, REFRESH_AGE / 3600)
        yield


def _is_spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("py4j", "pyspark"))


# --- mark and report ---------------------------------------------------------------------


def _mark_and_report(spark, repo, run: _Run, res: GcResult, rules, cutoff: float) -> set[str]:
    """Select, mark, list and write the report; returns the kept commits (trees whole)."""
    par = spark.sparkContext.defaultParallelism
    clock = time.monotonic()
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    # a few shuffle partitions a core: the live set and listings are streams of names
    spark.conf.set("spark.sql.shuffle.partitions", str(max(8, 4 * par)))
    try:
        return _mark_and_report_in(spark, repo, run, res, rules, cutoff, clock)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)


def _mark_and_report_in(spark, repo, run: _Run, res: GcResult, rules, cutoff: float,
                        clock: float) -> set[str]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    url = repo.store.url
    par = sc.defaultParallelism

    # staging before refs: a commit landing between the two reads moves entries from
    # one into the other, and read the other way round the mark would see neither
    staged, compacted = _staging_known(repo)
    res.staged_addresses = len(staged)
    sel = select_commits(repo.store, rules, res.mark_started_ns)
    res.kept_commits, res.commits_read = len(sel.kept), sel.commits_read
    metaranges = sorted(sel.metaranges | compacted)
    res.metaranges = len(metaranges)
    res.seconds["select"] = round(time.monotonic() - clock, 3)

    clock = time.monotonic()
    found = (sc.parallelize(metaranges, max(1, min(len(metaranges), 4 * par)))
             .mapPartitions(lambda it: gctasks.metarange_ranges(url, it))
             .distinct().collect())
    missing_mr = {x for kind, x in found if kind == "missing"}
    res.metaranges_missing = len(missing_mr)
    if missing_mr:
        log.warning("%d kept metarange(s) are no longer stored (collected by an earlier run)",
                    len(missing_mr))
    kept_ranges = frozenset(x for kind, x in found if kind == "range")
    del found
    res.ranges = len(kept_ranges)
    kept_b = sc.broadcast(kept_ranges)

    # the mark cache: parts of earlier runs, then the ranges none covers, read once
    old_parts = [i.key for i in repo.store.list_info(gctasks.CACHE_PREFIX)]
    facts = (sc.parallelize(old_parts, max(1, min(len(old_parts), 4 * par)))
             .mapPartitions(lambda it: gctasks.cache_facts(url, it, kept_b.value))
             .collect()) if old_parts else []
    covered = {x for kind, x in facts if kind == "covered"}
    live_parts = {x for kind, x in facts if kind == "part"}
    del facts
    to_read = sorted(kept_ranges - covered)
    res.ranges_read = len(to_read)
    if to_read:
        nparts = max(1, min(4 * par, (len(to_read) + 7) // 8))
        run_id = run.id
        out = (sc.parallelize(to_read, nparts)
               .mapPartitionsWithIndex(lambda i, it: gctasks.read_ranges(url, run_id, i, it))
               .collect())
        live_parts.update(k for k, _n, _rows, _missing in out if k)
    res.seconds["mark"] = round(time.monotonic() - clock, 3)

    # the live set, as address rows: Arrow batches from the cache parts (never Python rows)
    clock = time.monotonic()
    parts = sorted(live_parts)
    addresses = (_names_df(spark, parts, "key")
                 .mapInArrow(lambda it: gctasks.cache_address_batches(url, it, kept_b.value),
                             "address: string"))
    extra = (list(staged) + [METARANGES_PREFIX + m for m in metaranges if m not in missing_mr]
             + [RANGES_PREFIX + r for r in kept_ranges])
    live = addresses
    if extra:
        live = live.unionByName(_names_df(spark, extra, "address", 1))
    live = live.distinct()

    prefixes = gctasks.LIST_PREFIXES
    listed = (_names_df(spark, prefixes, "prefix", min(len(prefixes), 4 * par))
              .mapInArrow(lambda it: gctasks.list_batches(url, it), gctasks.LISTING_DDL))
    cache_listing = [(i.key, i.size, i.mtime, "mark-cache")
                     for i in repo.store.list_info(gctasks.CACHE_PREFIX)
                     if i.key not in live_parts]
    if cache_listing:
        listed = listed.unionByName(spark.createDataFrame(cache_listing, gctasks.LISTING_DDL))
    # one join, kept for the counts and the report
    listed = classify(listed, live).persist(StorageLevel.MEMORY_AND_DISK)
    is_live = F.col("live").isNotNull()
    young_c = ~is_live & (F.col("mtime") >= cutoff)
    counts = listed.agg(F.sum(is_live.cast("long")), F.sum(F.when(is_live, F.col("size"))),
                        F.sum(young_c.cast("long")), F.sum(F.when(young_c, F.col("size")))
                        ).collect()[0]
    res.live_objects, res.live_bytes = int(counts[0] or 0), int(counts[1] or 0)
    res.young_objects, res.young_bytes = int(counts[2] or 0), int(counts[3] or 0)
    dead = listed.where(~is_live)
    # report parts hold whole listing prefixes: a sweep task lists each prefix once
    addr = F.col("address")
    slice_ = (F.when(addr.startswith("data/"), F.substring(addr, 1, 8))
              .when(addr.startswith("sparse/"), F.substring(addr, 1, 10))
              .when(addr.startswith(RANGES_PREFIX), F.substring(addr, 1, len(RANGES_PREFIX) + 1))
              .when(addr.startswith(METARANGES_PREFIX),
                    F.substring(addr, 1, len(METARANGES_PREFIX) + 1))
              .otherwise(F.lit("other")))
    expired = dead.where(F.col("mtime") < cutoff).withColumn("slice", slice_)
    nreport = max(1, min(64, 2 * par))
    run_id = run.id
    written = (expired.repartition(nreport, "slice").select("address", "size", "kind")
               .mapInArrow(lambda it: gctasks.write_report_batches(url, run_id, it),
                           "key: string, stats: string")
               .collect())
    for key, stats_json in written:
        res.report_parts.append(key)
        for kind, (n, b) in json.loads(stats_json).items():
            k = res.expired_by_kind.setdefault(kind, [0, 0])
            k[0] += n
            k[1] += b
            res.expired_objects += n
            res.expired_bytes += b
    res.report_parts.sort()
    listed.unpersist()
    kept_b.unpersist()
    res.seconds["report"] = round(time.monotonic() - clock, 3)
    kept = {c for c, m in sel.kept.items() if m not in missing_mr}
    repo.store.put(kept_key(run.id), json.dumps(sorted(kept)).encode())
    log.info("gc run %s: %d kept commits, %d ranges (%d read), %d live objects, %d expired "
             "(%d bytes), %d unreferenced but young", run.id, res.kept_commits, res.ranges,
             res.ranges_read, res.live_objects, res.expired_objects, res.expired_bytes,
             res.young_objects)
    return kept


def classify(listed, live):
    """The listing with a ``live`` column (true, or null for a dead object). A
    sort-merge join, which spills: Spark sizes a mapInArrow output by its input (a
    few hundred part names), so left to itself it broadcasts a live set of tens of
    millions of addresses and the driver runs out of memory (seen at 10M entries)."""
    from pyspark.sql import functions as F
    return listed.join(live.withColumn("live", F.lit(True)).hint("merge"), "address", "left")


def _names_df(spark, names: list[str], column: str, partitions: int = 0):
    """A one-column string DataFrame of ``names`` built from an Arrow table (no
    Python rows), in ``partitions`` partitions (default: a few a core)."""
    import pyarrow as pa
    n = partitions or max(1, min(len(names), 4 * spark.sparkContext.defaultParallelism))
    df = spark.createDataFrame(pa.table({column: pa.array(names, pa.string())}))
    return df.repartition(max(1, n)) if len(names) > 1 else df


def _staging_known(repo) -> tuple[set[str], set[str]]:
    """What this host's staging references: addresses of staged entries (every token:
    branches, sealed, imports) and pending uploads, and compacted metaranges."""
    addresses: set[str] = set(repo.data.pending_addresses())
    compacted: set[str] = set()
    st = repo.staging
    with st.read_txn() as txn:
        for _key, raw in txn.cursor(db=st.entries_db):
            if raw[:1] not in PUTS and raw[:1] != PROVISIONAL:
                continue
            try:
                e = decode_entry(decode_value(staged_value(raw))[1])
            except GravfsError:
                continue
            addresses.update(live_addresses(e, repo.store.url, repo.data))
        for _name, raw in txn.cursor(db=st.branches_db):
            state = json.loads(raw)
            mr = (state.get("compacted") or {}).get("metarange")
            if mr:
                compacted.add(mr)
            pending = (state.get("pending") or {}).get("commit")
            if pending:  # a commit not finished yet: its tree is live
                try:
                    compacted.add(read_commit(repo.store, pending).metarange)
                except NotFoundError:
                    pass
    return addresses, compacted


def _write_summary(store, run_id: str, res: GcResult) -> None:
    store.put(run_prefix(run_id) + "summary.json",
              json.dumps(res.to_json(), indent=1, sort_keys=True).encode())


def _copy_report(store, run_id: str, res: GcResult, report_dir: str) -> None:
    """The report's Parquet parts and summary, copied into a local directory."""
    dest = os.path.join(report_dir, run_id)
    os.makedirs(dest, exist_ok=True)
    for key in res.report_parts:
        store.download(key, os.path.join(dest, key.rsplit("/", 1)[-1]))
    with open(os.path.join(dest, "summary.json"), "w") as f:
        json.dump(res.to_json(), f, indent=1, sort_keys=True)


# --- sweep ------------------------------------------------------------------------------


def check_sweepable(store, run_id: str) -> dict:
    """The status of a run whose report may be swept; one clear error otherwise."""
    status = read_status(store, run_id)
    if status is None:
        raise NotFoundError(f"no garbage collection run {run_id!r} in {store.url}")
    state = status.get("state")
    if state not in ("marked",) + SWEPT_STATES:
        raise GcRefusedError(f"run {run_id} did not finish its mark (state {state}): there is "
                             "nothing it may sweep; run gravfs spark gc again")
    return status


def _sweep_only(spark, repo, run_id: str, report_dir: Optional[str]) -> GcResult:
    status = check_sweepable(repo.store, run_id)
    state = status["state"]
    summary = status.get("summary") or {}
    res = GcResult(**{k: v for k, v in summary.items() if k in GcResult.__dataclass_fields__})
    res.state, res.dry_run = state, False
    run = _Run(repo.store, run_id)
    run.status = status
    kept = set(read_kept(repo.store, run_id))
    if report_dir:
        _copy_report(repo.store, run_id, res, report_dir)
    try:
        with _writers_held_off(repo, float(status.get("min_age_s", 0))):
            _sweep(spark, repo, run, res, float(status["cutoff_s"]), kept)
    except BaseException as exc:
        if isinstance(exc, GravfsError) or not _is_spark_error(exc):
            raise
        raise job_failed(exc, "garbage collection sweep") from exc
    return res


def _sweep(spark, repo, run: _Run, res: GcResult, cutoff: float, kept: set[str]) -> None:
    sc = spark.sparkContext
    url = repo.store.url
    clock = time.monotonic()
    fence = SweepFence(repo.store, run.id)
    try:
        fence.acquire()  # one sweep at a time (gcfence)
    except FenceHeldError as exc:
        raise GcRefusedError(f"{exc}; this run's mark is kept: 'gravfs spark gc "
                             f"--sweep-only {run.id}' sweeps it later") from None
    try:  # (a store failing here releases the fence too)
        name_last_sweep(repo.store, run.id)  # (before the status: see name_last_sweep)
        run.save(state="sweeping", sweep_started_ns=time.time_ns())
        parts = res.report_parts
        if parts:
            protect = _referenced_anew(repo, kept, res.mark_started_ns)
            slices = max(1, min(len(parts), 4 * sc.defaultParallelism))
            if protect:
                hit = (sc.parallelize(parts, slices)
                       .mapPartitions(lambda it: gctasks.check_no_protected(url, it, protect))
                       .take(1))
                if hit:
                    raise GcRefusedError(
                        f"refs moved since the mark of run {run.id} onto a tree that holds "
                        f"{hit[0]}, which the mark found unreferenced; nothing was deleted: "
                        "run gravfs spark gc again")
            out = (sc.parallelize(parts, len(parts))
                   .mapPartitions(lambda it: gctasks.sweep_report(url, it, cutoff, protect))
                   .collect())
            res.deleted_objects = sum(o[0] for o in out)
            res.deleted_bytes = sum(o[1] for o in out)
            res.refreshed_objects = sum(o[2] for o in out)
        res.state = "done"
        res.seconds["sweep"] = round(time.monotonic() - clock, 3)
        run.save(state="done", summary=res.to_json())
        _write_summary(repo.store, run.id, res)
    finally:
        fence.release()
    log.info("gc run %s: deleted %d object(s), %d bytes", run.id, res.deleted_objects,
             res.deleted_bytes)


def _referenced_anew(repo, kept: set[str], mark_started_ns: int) -> frozenset:
    """The trees (metarange and range keys) refs reach now that the mark did not keep.

    A ref now at a commit older than the mark that the mark did not keep (a branch
    or tag made from an expired commit) stops the sweep: its data was not marked.
    """
    out: set[str] = set()
    refs = [(f"branch {n}", c) for n, c in repo.heads.branches()]
    refs += [(f"tag {n}", c) for n, c in repo.heads.tags()]
    for label, cid in refs:
        if cid in kept:
            continue
        c = read_commit(repo.store, cid)
        if c.time_ns < mark_started_ns:
            raise GcRefusedError(f"{label} now points at commit {cid[:12]}, which the mark "
                                 "did not keep; nothing was deleted: run gravfs spark gc again")
        out.add(METARANGES_PREFIX + c.metarange)
        try:
            out.update(RANGES_PREFIX + r.id for r in repo.committed.iter_ranges(c.metarange))
        except NotFoundError:
            raise GcRefusedError(f"{label}: the tree of commit {cid[:12]} is missing") from None
    return frozenset(out)
