"""``gravfs spark index``: build or extend the provenance index (gravfs.provenance).

A run indexes the commits of the store the index does not hold yet and the
ranges of theirs it does not hold yet; nothing else is read, so keeping the
index current costs the size of the change (plus listing the commit ids).
Executors read each new commit's metarange (-> ranges_in_commits rows) and
each new range (-> contents_in_ranges and paths_in_ranges rows) from the
store with gravfs's own SST reader; Spark range-partitions and sorts the
rows by each table's key; each task writes its sorted partition as Parquet
files plus sidecars (gravfs.provenance.layout) straight into the store under
``_gravfs/index/<table>/<run>/``. The driver writes the small tables (commits,
ranges) and adds the run to the manifest by compare-and-swap: until then
the run is invisible, and a killed run leaves only unlisted files.

``full=True`` rebuilds from nothing into one run and then deletes the old
runs' files. After MAX_RUNS incremental runs the next run is a full one, so
a query never opens more than MAX_RUNS files per table.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

from gravfs.errors import CorruptDataError, GravfsError, PreconditionFailedError
from gravfs.provenance import manifest as manifests
from gravfs.provenance.layout import (COMMITS, CONTENTS, FILE_ROWS, PATHS, RANGES,
                                      RANGES_IN_COMMITS, SCHEMAS, SORT, FileInfo, key_column,
                                      sort_table, upload_file, write_sorted)
from gravfs.provenance.reader import REBUILD_HINT, IndexReader
from gravfs.spark.runtime import job_failed
from gravfs.spark.taskstore import task_store
from gravfs.version.committed.reader import RangeStore
from gravfs.version.retention import collected_commits, last_sweep

log = logging.getLogger(__name__)

MAX_RUNS = 16
MIN_PARTITION_ROWS = 1 << 16  # below this a table is written by fewer tasks than cores

_range_stores: dict[str, RangeStore] = {}


@dataclass
class IndexResult:
    run: Optional[str]  # None: the index was up to date
    full: bool
    commits: int        # commits indexed by this run
    ranges: int         # ranges read by this run
    rows: dict          # table -> rows written
    files: int
    bytes: int
    commits_total: int  # commits the index covers now
    expired: int = 0    # commits left out: the last garbage collection expired them


# --- executors ---------------------------------------------------------------------------

def _ranges(store_url: str) -> RangeStore:
    rs = _range_stores.get(store_url)
    if rs is None:
        rs = _range_stores[store_url] = RangeStore(task_store(store_url).tier)
    return rs


def metarange_rows(store_url: str):
    """mapInArrow: (commit_id, metarange) -> ranges_in_commits rows (range_id, commit_id)."""
    def run(batches):
        rs = _ranges(store_url)
        for b in batches:
            rids, cids = [], []
            for cid, mr in zip(b.column("commit_id").to_pylist(), b.column("metarange").to_pylist()):
                for info in rs.metarange(mr).ranges:
                    rids.append(bytes.fromhex(info.id))
                    cids.append(cid)
            yield pa.RecordBatch.from_arrays([pa.array(rids, pa.binary()),
                                              pa.array(cids, pa.binary())],
                                             names=["range_id", "commit_id"])
    return run


def range_rows(store_url: str):
    """mapInArrow: range_id -> one row per record (path, range_id, identity, address or
    null when the entry has no content: directories, symlinks)."""
    def run(batches):
        from gravfs.version.committed.messages import Entry
        from gravfs.version.committed.record import decode_value
        parse = Entry.FromString  # only the address: 6x cheaper than fs.entry.decode_entry
        rs = _ranges(store_url)
        for b in batches:
            for rid in b.column("range_id").to_pylist():
                paths, idents, addrs = [], [], []
                for key, value in rs.range_items(rid.hex(), fill_cache=False):
                    ident, data = decode_value(value)
                    paths.append(key)
                    idents.append(ident)
                    try:
                        addr = parse(data).address
                    except Exception as exc:  # protobuf's DecodeError
                        raise CorruptDataError(f"range {rid.hex()}: entry {key!r} does not "
                                               f"parse: {exc}") from None
                    addrs.append(addr.encode("utf-8", "surrogateescape") if addr else None)
                n = len(paths)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(paths, pa.binary()), pa.array([rid] * n, pa.binary()),
                     pa.array(idents, pa.binary()), pa.array(addrs, pa.binary())],
                    names=["path", "range_id", "identity", "address"])
    return run


def write_partition_files(store_url: str, table: str, run_id: str):
    """mapInArrow: a sorted partition -> its Parquet files in the store; one row per file."""
    def run(batches):
        from pyspark import TaskContext
        ts = task_store(store_url)
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        tmp = tempfile.mkdtemp(prefix="index-", dir=ts.scratch)
        for w in write_sorted(table, batches, tmp, f"part-{part:05d}-a{attempt}"):
            info = upload_file(ts.store, table, run_id, w)
            os.unlink(w.path)
            yield pa.RecordBatch.from_pylist([info.to_json()], schema=_file_schema())
        os.rmdir(tmp)
    return run


def _file_schema() -> pa.Schema:
    return pa.schema([("key", pa.string()), ("sidecar", pa.string()), ("rows", pa.int64()),
                      ("bytes", pa.int64()), ("min", pa.string()), ("max", pa.string())])


_FILE_DDL = "key string, sidecar string, rows long, bytes long, min string, max string"
_RIC_DDL = "range_id binary, commit_id binary"
_ENTRY_DDL = "path binary, range_id binary, identity binary, address binary"


# --- driver ------------------------------------------------------------------------------

def _indexed(repo, current: manifests.Manifest) -> tuple[set[str], set[bytes]]:
    """(commit ids, range ids) the index holds."""
    reader = IndexReader(repo.store, repo.tier, current)
    commits = {c.hex() for c in reader.read_all(COMMITS, ["id"]).column("id").to_pylist()}
    ranges = set(reader.read_all(RANGES, ["range_id"]).column("range_id").to_pylist())
    return commits, ranges


def _write_table(spark, df, table: str, run_id: str, store_url: str, rows: int,
                 what: str) -> list[FileInfo]:
    par = spark.sparkContext.defaultParallelism
    parts = max(math.ceil(rows / FILE_ROWS), min(par, math.ceil(rows / MIN_PARTITION_ROWS)), 1)
    key = key_column(table)
    # one partition needs no sampled range bounds (a job of its own)
    df = df.coalesce(1) if parts == 1 else df.repartitionByRange(parts, key)
    out = (df.sortWithinPartitions(*SORT[table])
           .mapInArrow(write_partition_files(store_url, table, run_id), _FILE_DDL))
    try:
        got = out.collect()
    except Exception as exc:
        raise job_failed(exc, what) from exc
    files = [FileInfo(r["key"], r["sidecar"], r["rows"], r["bytes"], r["min"], r["max"])
             for r in got]
    return sorted(files, key=lambda f: f.min)


def _write_local(repo, table: str, data, run_id: str) -> list[FileInfo]:
    """Write a small table from the driver."""
    tmp = tempfile.mkdtemp(prefix="index-", dir=repo.workspace.tmp)
    try:
        return [upload_file(repo.store, table, run_id, w)
                for w in write_sorted(table, sort_table(table, data).to_batches(), tmp, "driver")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _commits_table(commits) -> pa.Table:
    return pa.table({
        "id": pa.array([bytes.fromhex(c.id) for c in commits], pa.binary()),
        "parents": pa.array([[bytes.fromhex(p) for p in c.parents] for c in commits],
                            pa.list_(pa.binary())),
        "time_ns": pa.array([c.time_ns for c in commits], pa.int64()),
        "generation": pa.array([c.generation for c in commits], pa.int64()),
        "author": pa.array([c.author for c in commits], pa.string()),
        "message": pa.array([c.message for c in commits], pa.string()),
        "metadata": pa.array([json.dumps(c.metadata, sort_keys=True) for c in commits],
                             pa.string()),
        "metarange": pa.array([bytes.fromhex(c.metarange) for c in commits], pa.binary()),
    }, schema=SCHEMAS[COMMITS])


def _delete_files(store, runs) -> None:
    for r in runs:
        for files in r.files.values():
            for f in files:
                for key in (f.key, f.sidecar):
                    try:
                        store.delete(key)
                    except Exception as exc:  # best effort: an unlisted file is only space
                        log.warning("could not delete old index file %s: %s", key, exc)


@dataclass
class IndexPlan:
    """What a run will index, worked out on the driver before Spark starts."""

    current: manifests.Manifest
    full: bool
    commits: list          # the new commits (gravfs.version.refs.commits.Commit)
    indexed_ranges: set
    total: int             # commits the index will cover
    expired: int = 0       # commits left out (see plan_index)


def plan_index(repo, full: bool = False) -> IndexPlan:
    """Read the manifest and list the commits the index lacks (no Spark needed)."""
    try:
        current = manifests.load(repo.store)
    except CorruptDataError as exc:
        if not full:
            raise CorruptDataError(f"the provenance index manifest is damaged ({exc}): "
                                   f"{REBUILD_HINT}") from None
        current = manifests.Manifest([], repo.store.read_versioned(manifests.MANIFEST)[1])
    if current is None:
        current = manifests.Manifest()
    if not full and len(current.runs) >= MAX_RUNS:
        log.info("the index has %d runs: this run rebuilds it in full", len(current.runs))
        full = True
    indexed_commits, indexed_ranges = (set(), set()) if full else _indexed(repo, current)
    t0 = time.monotonic()
    new_ids = sorted(set(repo.commits.all_ids()) - indexed_commits)
    with ThreadPoolExecutor(16) as pool:
        commits = list(pool.map(repo.commits.get, new_ids))
    # commits the last garbage collection expired have lost their trees unless another
    # commit kept them (reading one failed the whole run, every run): left out
    swept = last_sweep(repo.store)
    gone = collected_commits(repo.store, swept, commits)
    kept = [c for c in commits if c.id not in gone]
    expired = len(commits) - len(kept)
    if expired:
        log.info("leaving out %d commit(s) garbage collection run %s expired", expired,
                 swept.run_id)
    log.info("%d commit(s) to index (%.1fs to list them)", len(kept), time.monotonic() - t0)
    return IndexPlan(current, full, kept, indexed_ranges, len(indexed_commits) + len(kept),
                     expired)


def build_index(spark, repo, full: bool = False, plan: Optional[IndexPlan] = None
                ) -> IndexResult:
    """Index what the index lacks (everything with ``full``); see the module doc.
    ``plan``: from plan_index (the CLI plans before it starts Spark)."""
    plan = plan or plan_index(repo, full)
    current, full, commits, indexed_ranges = (plan.current, plan.full, plan.commits,
                                              plan.indexed_ranges)
    if not commits:
        return IndexResult(None, full, 0, 0, {}, 0, 0, plan.total, plan.expired)
    store_url = repo.store.url
    t0 = time.monotonic()
    run_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    sc = spark.sparkContext
    par = sc.defaultParallelism
    commit_df = spark.createDataFrame([(bytes.fromhex(c.id), c.metarange) for c in commits],
                                      "commit_id binary, metarange string")
    ric = (commit_df.repartition(min(len(commits), par * 4))
           .mapInArrow(metarange_rows(store_url), _RIC_DDL).persist())
    written: dict[str, list[FileInfo]] = {}
    rows: dict[str, int] = {}
    entries = None
    try:
        try:
            ric_rows = ric.count()
            range_ids = [r[0] for r in ric.select("range_id").distinct().collect()]
        except Exception as exc:
            raise job_failed(exc, "reading the new commits' metaranges") from exc
        new_ranges = sorted(set(bytes(r) for r in range_ids) - indexed_ranges)
        log.info("%d new commit(s) hold %d range(s), %d not indexed yet", len(commits),
                 len(range_ids), len(new_ranges))
        if new_ranges:
            range_df = spark.createDataFrame([(r,) for r in new_ranges], "range_id binary")
            entries = (range_df.repartition(min(len(new_ranges), par * 4))
                       .mapInArrow(range_rows(store_url), _ENTRY_DDL).persist())
            try:
                entry_rows, content_rows = entries.selectExpr("count(*)", "count(address)").first()
            except Exception as exc:
                raise job_failed(exc, "reading the new ranges") from exc
            contents = entries.where("address is not null").select("address", "range_id", "path")
            paths = entries.select("path", "range_id", "identity")
            written[CONTENTS] = _write_table(spark, contents, CONTENTS, run_id, store_url,
                                             content_rows, "writing contents_in_ranges")
            written[PATHS] = _write_table(spark, paths, PATHS, run_id, store_url, entry_rows,
                                          "writing paths_in_ranges")
            rows[CONTENTS], rows[PATHS] = content_rows, entry_rows
        written[RANGES_IN_COMMITS] = _write_table(spark, ric, RANGES_IN_COMMITS, run_id,
                                                  store_url, ric_rows,
                                                  "writing ranges_in_commits")
        rows[RANGES_IN_COMMITS] = ric_rows
    finally:
        ric.unpersist()
        if entries is not None:
            entries.unpersist()
    written[COMMITS] = _write_local(repo, COMMITS, _commits_table(commits), run_id)
    rows[COMMITS] = len(commits)
    if new_ranges:
        written[RANGES] = _write_local(repo, RANGES, pa.table(
            {"range_id": pa.array(new_ranges, pa.binary())}), run_id)
        rows[RANGES] = len(new_ranges)
    run = manifests.Run(run_id, time.time_ns(), len(commits), len(new_ranges),
                        {t: fs for t, fs in written.items() if fs})
    old = current.runs
    updated = manifests.Manifest([run] if full else old + [run], current.version)
    try:
        manifests.save(repo.store, updated)
    except PreconditionFailedError:
        _delete_files(repo.store, [run])
        raise GravfsError("another index run changed the index meanwhile; this run added "
                          "nothing: run 'gravfs spark index' again") from None
    if full and old:
        _delete_files(repo.store, old)
    files = [f for fs in written.values() for f in fs]
    log.info("index run %s: %d commit(s), %d range(s), %d file(s) in %.1fs", run_id,
             len(commits), len(new_ranges), len(files), time.monotonic() - t0)
    return IndexResult(run_id, full, len(commits), len(new_ranges), rows, len(files),
                       sum(f.bytes for f in files), plan.total, plan.expired)

