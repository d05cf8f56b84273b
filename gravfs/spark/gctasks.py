"""What garbage collection's Spark tasks do on the executors (gravfs.spark.gc drives them).

Each task opens the store from its URL (gravfs.spark.taskstore) and uses
gravfs's own readers: metarange and range SSTs through a task-local tier,
entries decoded as the catalog decodes them, sparse manifests read and
verified by the data plane.

The mark cache: a range is immutable, so "range R holds these data objects"
is true forever. Tasks that read ranges write what they found as Parquet parts
under ``_gravfs/gc/cache/`` (columns range, address; one row with an empty
address per range, so a range without data objects counts as read). Later
runs take the rows of the ranges they keep from there and read no range twice.
"""

from __future__ import annotations

import io
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, Optional

from gravfs.data import sparse
from gravfs.errors import GravfsError, NotFoundError
from gravfs.fs.entry import ADDRESS_FULL, decode_entry
from gravfs.fs.references import live_addresses
from gravfs.spark.taskstore import task_store
from gravfs.store.base import sweep_lease
from gravfs.version.committed.messages import Entry
from gravfs.version.committed.reader import METARANGES_PREFIX, RANGES_PREFIX, RangeStore
from gravfs.version.committed.record import decode_value
from gravfs.version.retention import GC_PREFIX, run_prefix

log = logging.getLogger(__name__)

CACHE_PREFIX = GC_PREFIX + "cache/"
DELETE_BATCH = 1000
SWEEP_THREADS = 8  # prefixes swept at once by one task

#: Where the sweep lists, split so that each listing task takes a slice.
LIST_PREFIXES = ([f"data/{i:02x}/" for i in range(256)]
                 + [f"sparse/{i:02x}/" for i in range(256)]
                 + [f"{RANGES_PREFIX}{i:x}" for i in range(16)]
                 + [f"{METARANGES_PREFIX}{i:x}" for i in range(16)])

KINDS = (("data/", "data"), ("sparse/", "sparse-manifest"), (RANGES_PREFIX, "range"),
         (METARANGES_PREFIX, "metarange"), (CACHE_PREFIX, "mark-cache"))
WHY = {
    "data": "no kept commit's range and no local staging references it",
    "sparse-manifest": "no kept commit's range and no local staging references it",
    "range": "in no kept commit's tree (nor a compacted staging tree)",
    "metarange": "the tree of no kept commit",
    "mark-cache": "caches only ranges no kept commit has",
}

_ranges: dict[str, RangeStore] = {}


def kind_of(key: str) -> str:
    for prefix, kind in KINDS:
        if key.startswith(prefix):
            return kind
    return "other"


def _range_store(store_url: str) -> RangeStore:
    rs = _ranges.get(store_url)
    if rs is None:
        rs = _ranges[store_url] = RangeStore(task_store(store_url).tier)
    return rs


# --- mark ----------------------------------------------------------------------------


def metarange_ranges(store_url: str, metaranges: Iterable[str]) -> Iterator[tuple[str, str]]:
    """("range", id) for every range of the metaranges, ("missing", metarange id) for
    a metarange no longer stored (an earlier run collected it)."""
    rs = _range_store(store_url)
    for mr in metaranges:
        try:
            m = rs.metarange(mr)
        except NotFoundError:
            yield "missing", mr
            continue
        for rid in m.ids:
            yield "range", rid


def range_rows(store_url: str, range_id: str) -> Optional[list[tuple[str, str]]]:
    """(range, address) rows of one range (the first with an empty address); None
    when the range is not stored."""
    rs = _range_store(store_url)
    data = task_store(store_url).data
    try:
        items = list(rs.range_items(range_id, fill_cache=False))
    except NotFoundError:
        return None
    rows = [(range_id, "")]
    for _key, value in items:
        _ident, raw = decode_value(value)
        e = Entry.FromString(raw)  # the fields needed, without building an EntryInfo
        if not e.address:
            continue
        if e.address_type != ADDRESS_FULL and not sparse.is_sparse(e.address):
            rows.append((range_id, e.address))  # the common case
            continue
        for a in live_addresses(decode_entry(raw), store_url, data):
            rows.append((range_id, a))
    task_store(store_url).tier.discard(RANGES_PREFIX + range_id)  # read once: keep no copy
    return rows


def _parquet_bytes(columns: dict[str, list], schema) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    buf = io.BytesIO()
    pq.write_table(pa.table(columns, schema=schema), buf, compression="zstd")
    return buf.getvalue()


def _read_parquet(store, key: str, columns: Optional[list[str]] = None):
    import pyarrow.parquet as pq
    return pq.read_table(io.BytesIO(store.get(key)), columns=columns)


def cache_schema():
    import pyarrow as pa
    return pa.schema([("range", pa.string()), ("address", pa.string())])


def read_ranges(store_url: str, run_id: str, index: int, range_ids: Iterable[str]
                ) -> Iterator[tuple[str, int, int, list[str]]]:
    """Read ranges and write what they hold as one mark-cache part; yields
    (part key or "", ranges read, rows, missing range ids)."""
    ranges, addresses, missing, n = [], [], [], 0
    for rid in range_ids:
        rows = range_rows(store_url, rid)
        if rows is None:
            missing.append(rid)
            continue
        n += 1
        for r, a in rows:
            ranges.append(r)
            addresses.append(a)
    key = ""
    if n:
        key = f"{CACHE_PREFIX}{run_id}-{index:05d}.parquet"
        task_store(store_url).store.put(key, _parquet_bytes(
            {"range": ranges, "address": addresses}, cache_schema()))
    yield key, n, len(ranges), missing


def cache_facts(store_url: str, keys: Iterable[str], kept) -> Iterator[tuple[str, str]]:
    """What mark-cache parts say about the kept ranges (``kept``: a set of range ids):
    ("covered", range id) for each kept range a part holds and ("part", key) for each
    part holding one. Reads only the range column. A part gone meanwhile says nothing."""
    import pyarrow.compute as pc
    store = task_store(store_url).store
    for key in keys:
        try:
            ranges = _read_parquet(store, key, ["range"]).column("range")
        except NotFoundError:
            continue
        ranges = ranges.filter(pc.is_in(ranges, value_set=_kept_array(kept)))
        if not len(ranges):
            continue
        yield "part", key
        for r in pc.unique(ranges).to_pylist():
            yield "covered", r


def cache_address_batches(store_url: str, batches, kept):
    """mapInArrow: batches of mark-cache part keys -> batches of the addresses (one
    column) the parts hold for kept ranges, as Arrow all the way to the JVM (a live
    set of millions is never a Python row)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    store = task_store(store_url).store
    value_set = None
    for batch in batches:
        for key in batch.column(0).to_pylist():
            try:
                t = _read_parquet(store, key)
            except NotFoundError:  # counted as covering kept ranges: the mark cannot go on
                raise GravfsError(f"mark-cache part {key} was deleted during the mark "
                                  "(by another gc run?); run gravfs spark gc again") from None
            if value_set is None:
                value_set = _kept_array(kept)
            mask = pc.and_(pc.is_in(t.column("range"), value_set=value_set),
                           pc.not_equal(t.column("address"), ""))
            col = t.column("address").filter(mask)
            for chunk in col.chunks:
                if len(chunk):
                    yield pa.RecordBatch.from_arrays([chunk], ["address"])


_kept_cache: list = [None, None]  # [the kept set, its Arrow array]


def _kept_array(kept):
    """The kept range ids as an Arrow array, built once per broadcast set per process.
    The set itself is held (compared by identity): an id() alone could be reused by
    the next run's set once this one is freed."""
    import pyarrow as pa
    if _kept_cache[0] is not kept:
        _kept_cache[:] = [kept, pa.array(sorted(kept), pa.string())]
    return _kept_cache[1]


def listing_schema():
    import pyarrow as pa
    return pa.schema([("address", pa.string()), ("size", pa.int64()), ("mtime", pa.float64()),
                      ("kind", pa.string())])


LISTING_DDL = "address: string, size: long, mtime: double, kind: string"


def list_batches(store_url: str, batches):
    """mapInArrow: batches of prefixes -> batches of (address, size, mtime, kind) of
    everything under them, one batch a prefix."""
    import pyarrow as pa
    store = task_store(store_url).store
    schema = listing_schema()
    for batch in batches:
        for prefix in batch.column(0).to_pylist():
            keys, sizes, mtimes = [], [], []
            for info in store.list_info(prefix):
                keys.append(info.key)
                sizes.append(info.size)
                mtimes.append(info.mtime)
            if keys:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(keys, pa.string()), pa.array(sizes, pa.int64()),
                     pa.array(mtimes, pa.float64()),
                     pa.array([kind_of(k) for k in keys], pa.string())], schema=schema)


# --- report and sweep --------------------------------------------------------------------


def report_schema():
    import pyarrow as pa
    return pa.schema([("address", pa.string()), ("size", pa.int64()), ("kind", pa.string()),
                      ("why", pa.string())])


def report_key(run_id: str, index: int) -> str:
    return f"{run_prefix(run_id)}report/part-{index:05d}.parquet"


def write_report_batches(store_url: str, run_id: str, batches):
    """mapInArrow: one partition's (address, size, kind) batches -> one report part
    (named by the partition) and one row (key, stats as JSON {kind: [n, bytes]})."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import TaskContext
    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not tables:
        return
    t = pa.concat_tables(tables)
    why = pa.array([WHY.get(k, "unreferenced") for k in t.column("kind").to_pylist()],
                   pa.string())
    t = pa.table({"address": t.column("address"), "size": t.column("size"),
                  "kind": t.column("kind"), "why": why}, schema=report_schema())
    stats = {}
    for row in t.group_by("kind").aggregate([("size", "count"), ("size", "sum")]).to_pylist():
        stats[row["kind"]] = [int(row["size_count"]), int(row["size_sum"] or 0)]
    key = report_key(run_id, TaskContext.get().partitionId())
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd")
    task_store(store_url).store.put(key, buf.getvalue())
    yield pa.RecordBatch.from_pydict({"key": [key], "stats": [json.dumps(stats)]})


def report_addresses(store_url: str, keys: Iterable[str]) -> Iterator[tuple[str, int, str]]:
    """(address, size, kind) rows of report parts."""
    store = task_store(store_url).store
    for key in keys:
        t = _read_parquet(store, key)
        yield from zip(t.column("address").to_pylist(), t.column("size").to_pylist(),
                       t.column("kind").to_pylist())


def listing_prefix(key: str) -> str:
    """The LIST_PREFIXES slice (or cache prefix) a key falls in."""
    for prefix in (RANGES_PREFIX, METARANGES_PREFIX):
        if key.startswith(prefix):
            return key[:len(prefix) + 1]
    if key.startswith(CACHE_PREFIX):
        return CACHE_PREFIX
    return key.rsplit("/", 1)[0] + "/"


def sweep_report(store_url: str, keys: Iterable[str], cutoff_s: float,
                 protect: frozenset = frozenset()) -> Iterator[tuple[int, int, int]]:
    """Delete the report's objects that are still older than the cutoff, as a fresh
    listing shows them; yields (deleted, bytes deleted, kept because refreshed).

    Each listing is acted on within the sweep lease (store.base.sweep_lease): a
    writer that refreshed an object after the listing waits out the lease and
    writes the object again if this deleted it (store.claim_existing).
    """
    store = task_store(store_url).store
    by_prefix: dict[str, dict[str, int]] = defaultdict(dict)
    for address, size, _kind in report_addresses(store_url, keys):
        if address not in protect:
            by_prefix[listing_prefix(address)][address] = size
    lease = sweep_lease()
    # data first, trees after (within a task); listings and full delete requests on
    # threads (they mostly wait on the store)
    order = sorted(by_prefix, key=lambda p: (p.startswith(GC_PREFIX),
                                             p.startswith(METARANGES_PREFIX),
                                             p.startswith(RANGES_PREFIX), p))
    groups: dict[tuple, list[str]] = defaultdict(list)
    for p in order:
        groups[(p.startswith(GC_PREFIX), p.startswith(METARANGES_PREFIX),
                p.startswith(RANGES_PREFIX))].append(p)
    totals = [0, 0, 0]
    for _kind, prefixes in sorted(groups.items()):
        got = _sweep_prefixes(store, prefixes, by_prefix, cutoff_s, lease)
        totals = [a + b for a, b in zip(totals, got)]
    if totals[0]:
        log.info("swept %d object(s), %d bytes", totals[0], totals[1])
    yield tuple(totals)


def _sweep_prefixes(store, prefixes: list[str], by_prefix: dict[str, dict[str, int]],
                    cutoff_s: float, lease: float) -> tuple[int, int, int]:
    """Delete the wanted keys under ``prefixes`` that a fresh listing shows older than
    the cutoff; (deleted, bytes, kept because refreshed).

    The prefixes are listed SWEEP_THREADS at a time; their victims, across prefixes,
    go out in full batches of DELETE_BATCH on other threads meanwhile (a batch is
    also sent short once its oldest listing is 0.4 of the lease old). A batch is
    sent only while its oldest listing is younger than 0.8 of the lease; one too
    late goes back to be listed again."""
    deleted = nbytes = refreshed = 0
    todo = {p: by_prefix[p] for p in prefixes if by_prefix[p]}
    with ThreadPoolExecutor(SWEEP_THREADS) as listers, \
            ThreadPoolExecutor(SWEEP_THREADS) as deleters:
        while todo:
            buf: list[tuple[str, str, float]] = []  # (prefix, key, listed at)
            sends = []

            def flush() -> None:
                batch = buf[:DELETE_BATCH]
                del buf[:DELETE_BATCH]
                oldest = min(t for _p, _k, t in batch)
                sends.append((batch, deleters.submit(
                    _delete_within, store, [k for _p, k, _t in batch], oldest, lease)))

            for p, listed_at, fresh in listers.map(
                    lambda p: _fresh_mtimes(store, p, todo[p]), list(todo)):
                for k in sorted(todo[p]):
                    if k not in fresh:
                        continue  # gone already
                    if fresh[k] < cutoff_s:
                        buf.append((p, k, listed_at))
                    else:
                        refreshed += 1
                while len(buf) >= DELETE_BATCH or (
                        buf and time.monotonic() - buf[0][2] > 0.4 * lease):
                    flush()
            while buf:
                flush()
            late: dict[str, dict[str, int]] = defaultdict(dict)
            for batch, fut in sends:
                ok = fut.result()
                for p, k, _t in batch:
                    if ok:
                        deleted += 1
                        nbytes += todo[p][k]
                    else:  # listing too old to act on: list that prefix again
                        late[p][k] = todo[p][k]
            todo = late
    return deleted, nbytes, refreshed


def _fresh_mtimes(store, prefix: str, wanted: dict[str, int]
                  ) -> tuple[str, float, dict[str, float]]:
    """(prefix, when the listing started, {wanted key: last-modified} as listed)."""
    started = time.monotonic()
    return prefix, started, {i.key: i.mtime for i in store.list_info(prefix) if i.key in wanted}


def _delete_within(store, keys: list[str], listed_at: float, lease: float) -> bool:
    """Delete ``keys`` if the listing they come from is still within the lease."""
    if time.monotonic() - listed_at > 0.8 * lease:
        return False
    store.delete_many(keys)
    return True


def check_no_protected(store_url: str, keys: Iterable[str], protect: frozenset
                       ) -> Iterator[str]:
    """Report addresses that are in ``protect`` (referenced anew since the mark)."""
    for address, _size, _kind in report_addresses(store_url, keys):
        if address in protect:
            yield address
