#!/usr/bin/env python3
"""Committed-store benchmarks (issue #2): lookups, apply, diff and the range break policy.

    scripts/bench_committed.py [--quick] [--repeat N] [--sizes 1M,10M] [--policy-entries 1M]
                               [--lookups N] [--only lookups,apply,diff,policy]
                               [--tmp DIR] [--keep] [--no-json]

Measures gravfs.version.committed.CommittedManager on a LocalStore + LocalTier in a temp
dir (removed afterwards unless --keep) and prints one table per section:

  lookups  random point lookups (get) on 1M- and 10M-entry trees, one thread:
           cold (empty tier: fetch + verify + decode at first touch), cold
           blocks (tier filled, fresh readers), warm (4 GiB block cache), warm
           with the default cache (a quarter of RAM), warm with 256 open readers; against
           rocksdict Rdict.get (and batched multi-get) on the same range SST
           files ingested into RocksDB in the same run.
  apply    1, 100 and 10,000 changes (1,000 with --quick), clustered (a new
           hour partition) and uniformly random rewrites: time, ranges read,
           tier fetches, ranges/metaranges written, bytes written.  "cold" runs
           on an empty tier, "warm" with the touched ranges already local.
  diff     trees differing in k = 1, 100, 10,000 entries: time, ranges read.
  scattered  N/1000 changes spread uniformly (10k on 10M: a privacy deletion), applied
           cold with 1, 2, 4, ... worker processes (parallel.py): time, CPU of the
           driver and the workers, and a check that every count gives the same tree.
  policy   break-policy study on a 1M tree: hourly partition appends, 1% random
           rewrites, a merge of two branches adding 90%-overlapping files,
           single-file changes (also in 10x/100x bigger simulated trees); range
           reuse, bytes written per commit, range size p50/p99, apply time.

Keys look like a data lake (``tables/events/date=2026-11-01/hour=13/part-00042-
<uuid>.parquet``, 93-98 bytes, one Spark job uuid per hour partition); values
are gravfs file entries, byte-identical to encode_entry/entry_identity output
(checked on a sample at start-up), encoded with encode_value.

Times are wall clock and process CPU (the steadier figure on a shared machine),
medians of --repeat runs (default 5; 3 with --quick).  The full mode (1M and
10M entries) takes about 25 minutes on 2 cores; --quick (50k and 200k entries,
policy study on 50k) is a smoke test of about 1.5 minutes (idle machine) whose
policy figures mean little.  Results go to bench/results/committed-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from multiprocessing import get_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # bench_repo's tree_objects

import rocksdict  # noqa: E402

from gravfs.fs.entry import EntryInfo, encode_entry, entry_identity  # noqa: E402
from gravfs.version.committed import (  # noqa: E402
    BreakPolicy, CommittedManager, RangeInfo, SizeAwareBreakPolicy, Stats, range_key)
from gravfs.version.config import RangeParams  # noqa: E402
from gravfs.errors import NotFoundError  # noqa: E402
from gravfs.store.local import LocalStore  # noqa: E402
from gravfs.store.tier import LocalTier  # noqa: E402
from bench_repo import tree_objects  # noqa: E402

try:  # the built-in SHA-256 has less per-call overhead than OpenSSL's for short inputs
    from _sha256 import sha256 as _sha
except ImportError:  # pragma: no cover
    _sha = hashlib.sha256

RESULTS = os.path.join(ROOT, "bench", "results")
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# --------------------------------------------------------------------------
# Data set: keys and gravfs entries, generated deterministically from an index
# --------------------------------------------------------------------------

TABLES = (b"clicks", b"events", b"impressions", b"sessions")
FILES_PER_HOUR = 250          # files per hour partition in the base trees
EPOCH_DAY = datetime.date(2024, 1, 1).toordinal()
EPOCH_S = 1_704_067_200       # 2024-01-01T00:00:00Z
FILE_MODE = 0o100644

_pack_ident = struct.Struct(">qqIIIIB").pack
_IDENT_PREFIX = b"gravfs-entry-v1"
_IDENT_ADDR_LEN = struct.pack(">I", 72)   # len("data/aa/" + 64 hex)
_IDENT_TAIL = struct.pack(">I", 0) * 5     # symlink, e_tag, content_type, metadata, xattrs


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 1 << 14:
        return bytes((n & 127 | 128, n >> 7))
    if n < 1 << 21:
        return bytes((n & 127 | 128, n >> 7 & 127 | 128, n >> 14))
    if n < 1 << 28:
        return bytes((n & 127 | 128, n >> 7 & 127 | 128, n >> 14 & 127 | 128, n >> 21))
    if n < 1 << 35:
        return bytes((n & 127 | 128, n >> 7 & 127 | 128, n >> 14 & 127 | 128,
                      n >> 21 & 127 | 128, n >> 28))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_MODE_FIELDS = b"\x30\x01\xa0\x01" + _uvarint(FILE_MODE)   # address_type=RELATIVE, mode


def entry_value(seed: bytes, base_s: int) -> tuple[bytes, bytes]:
    """(identity, data) of a regular-file entry, equal to entry_identity/encode_entry.

    A hand-rolled encoder because building 10M EntryInfo objects and protobuf
    messages would take longer than writing the tree; ``check_encoder`` proves
    it byte-identical on a sample.
    """
    d = _sha(seed).digest()
    x = int.from_bytes(d[:9], "little")
    h = d.hex().encode()
    address = b"data/%s/%s" % (h[:2], h)
    size = 1 + x % 300_000_000
    ns = (x >> 32) % 1_000_000_000
    sec = base_s + (x >> 64) % 60
    ts = b"\x08" + _uvarint(sec) + (b"\x10" + _uvarint(ns) if ns else b"")
    data = b"\x0a\x48" + address + b"\x12" + bytes((len(ts),)) + ts + b"\x18" + _uvarint(size) \
        + _MODE_FIELDS
    ident = _sha(_IDENT_PREFIX + _pack_ident(size, sec * 1_000_000_000 + ns, FILE_MODE, 0, 0, 1, 0)
                 + _IDENT_ADDR_LEN + address + _IDENT_TAIL).digest()
    return ident, data


def check_encoder(n: int = 500) -> None:
    for i in range(n):
        seed = b"check" + i.to_bytes(8, "little")
        ident, data = entry_value(seed, EPOCH_S + i * 3600)
        d = _sha(seed).digest()
        x = int.from_bytes(d[:9], "little")
        info = EntryInfo(address=f"data/{d[:1].hex()}/{d.hex()}", size=1 + x % 300_000_000,
                         mtime_ns=(EPOCH_S + i * 3600 + (x >> 64) % 60) * 1_000_000_000
                         + (x >> 32) % 1_000_000_000, mode=FILE_MODE)
        if encode_entry(info) != data or entry_identity(info) != ident:
            raise SystemExit("bench entry encoder disagrees with gravfs encode_entry/entry_identity")


class Dataset:
    """N files in hour partitions of a few tables; everything derives from indexes.

    Base file i lives in table i // per_table, hour partition h = j // 250 of
    that table (j = i % per_table), part number j % 250.  New partitions are
    hours >= hours_per_table.  ``ver`` selects a different entry for the same
    path (a rewrite).
    """

    def __init__(self, n: int):
        self.n = n
        self.per_table = -(-n // len(TABLES))
        self.hours = -(-self.per_table // FILES_PER_HOUR)
        self._prefixes: dict[tuple[int, int], bytes] = {}

    def partition(self, t: int, h: int) -> tuple[bytes, bytes]:
        """(``tables/<t>/date=YYYY-MM-DD/hour=HH/part-``, the partition's Spark job uuid)."""
        p = self._prefixes.get((t, h))
        if p is None:
            day = datetime.date.fromordinal(EPOCH_DAY + h // 24).isoformat().encode()
            u = _sha(b"job%d/%d" % (t, h)).hexdigest().encode()
            job = b"%s-%s-4%s-a%s-%s" % (u[:8], u[8:12], u[13:16], u[17:20], u[20:32])
            p = (b"tables/%s/date=%s/hour=%02d/part-" % (TABLES[t], day, h % 24), job)
            if len(self._prefixes) > 200_000:
                self._prefixes.clear()
            self._prefixes[(t, h)] = p
        return p

    def file_key(self, t: int, h: int, part: int) -> bytes:
        pre, job = self.partition(t, h)
        return b"%s%05d-%s.parquet" % (pre, part, job)

    def file_record(self, t: int, h: int, part: int, ver: int = 0) -> tuple[bytes, bytes, bytes]:
        key = self.file_key(t, h, part)
        ident, data = entry_value(key + b"#%d" % ver, EPOCH_S + h * 3600 + ver * 86400)
        return key, ident, data

    def locate(self, i: int) -> tuple[int, int, int]:
        t, j = divmod(i, self.per_table)
        h, part = divmod(j, FILES_PER_HOUR)
        return t, h, part

    def key(self, i: int) -> bytes:
        return self.file_key(*self.locate(i))

    def record(self, i: int, ver: int = 0) -> tuple[bytes, bytes, bytes]:
        return self.file_record(*self.locate(i), ver)

    def chunk(self, lo: int, hi: int) -> tuple[list, list, list]:
        """Base records lo..hi-1 as (keys, identities, datas) lists."""
        ks, ids, ds = [], [], []
        rec = self.record
        for i in range(lo, min(hi, self.n)):
            k, ident, d = rec(i)
            ks.append(k)
            ids.append(ident)
            ds.append(d)
        return ks, ids, ds


_worker_ds: Dataset | None = None


def _worker_chunk(args: tuple[int, int, int]) -> tuple[list, list, list]:
    global _worker_ds
    n, lo, hi = args
    if _worker_ds is None or _worker_ds.n != n:
        _worker_ds = Dataset(n)
    return _worker_ds.chunk(lo, hi)


def base_records(ds: Dataset, workers: int = 2, step: int = 20_000):
    """Yield the base records in key order, generated by worker processes ahead of the writer."""
    jobs = [(ds.n, lo, lo + step) for lo in range(0, ds.n, step)]
    if workers <= 0:
        for job in jobs:
            ks, ids, dd = _worker_chunk(job)
            yield from zip(ks, ids, dd)
        return
    with get_context("fork").Pool(workers) as pool:
        for ks, ids, dd in pool.imap(_worker_chunk, jobs, chunksize=1):
            yield from zip(ks, ids, dd)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return 0.0
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def fmt_n(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % (div // 10 or 1) == 0:
            v = n / div
            return f"{v:g}{unit}"
    return str(n)


def fmt_count(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:.1f}"


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if b >= div:
            return f"{b / div:.1f} {unit}"
    return f"{b:.0f} B"


def fmt_ms(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.1f} ms" if s < 10 else f"{s:.1f} s"


def fmt_rate(r: float | None) -> str:
    return "-" if r is None else f"{r / 1000:,.0f}k/s"


def table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [f"\n## {title}\n", "| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in cells[1:]:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(lines)


class Env:
    """One object store with a tier; managers are made on demand."""

    def __init__(self, root: str, policy: BreakPolicy):
        self.root = root
        self.policy = policy
        self.store = LocalStore(os.path.join(root, "store"))
        self._tiers = 0

    def tier(self, name: str | None = None) -> LocalTier:
        self._tiers += 1
        d = os.path.join(self.root, "tiers", name or f"t{self._tiers}")
        return LocalTier(self.store, d, budget_bytes=64 * GiB)

    def manager(self, tier: LocalTier | None = None, **kw) -> CommittedManager:
        return CommittedManager(self.store, tier or self.tier(), self.policy,
                                tmp_dir=os.path.join(self.root, "tmp"), **kw)

    def drop_tier(self, tier: LocalTier) -> None:
        tier.close()
        shutil.rmtree(tier.cache_dir, ignore_errors=True)

    def range_path(self, rid: str) -> str:
        return os.path.join(self.store.root, *range_key(rid).split("/"))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Trees
# --------------------------------------------------------------------------


def build_tree(env: Env, ds: Dataset, records=None) -> tuple[str, dict]:
    """Write the base tree of ``ds`` once; returns (metarange id, build figures)."""
    tier = env.tier("build")
    m = env.manager(tier)
    t0, c0 = time.perf_counter(), time.process_time()
    res = m.write_tree(records if records is not None else base_records(ds))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    mr = m.metarange(res.metarange_id)
    m.close()
    env.drop_tier(tier)
    sizes = [r.estimated_size for r in mr.ranges]
    mpath = os.path.join(env.store.root, "_gravfs", "metaranges", res.metarange_id)
    info = {"entries": ds.n, "seconds": wall, "writer_cpu_seconds": cpu, "ranges": len(mr.ranges),
            "bytes": sum(sizes), "metarange_bytes": os.path.getsize(mpath),
            "range_bytes_p50": pct(sizes, 0.5), "range_bytes_p99": pct(sizes, 0.99),
            "range_entries_p50": pct([r.count for r in mr.ranges], 0.5)}
    return res.metarange_id, info


# --------------------------------------------------------------------------
# 1. Point lookups
# --------------------------------------------------------------------------


class Clock:
    """Wall and process CPU time of a block (on a shared machine CPU time is the steadier figure)."""

    def __enter__(self) -> "Clock":
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def _lookup_pass(get, tree_id: str, keys: list[bytes]) -> Clock:
    gc.disable()
    try:
        with Clock() as c:
            for k in keys:
                get(tree_id, k)
        return c
    finally:
        gc.enable()


def _rdict_pass(db, keys: list[bytes]) -> Clock:
    get = db.get
    gc.disable()
    try:
        with Clock() as c:
            for k in keys:
                get(k)
        return c
    finally:
        gc.enable()


def _rates(n: int, clocks: list[Clock]) -> tuple[float, float]:
    """Median (wall, CPU) rates of several passes of n operations."""
    return median([n / c.wall for c in clocks]), median([n / max(c.cpu, 1e-9) for c in clocks])


def bench_lookups(env: Env, ds: Dataset, tree_id: str, n_lookups: int, repeat: int,
                  rng: random.Random, cache_bytes: int) -> dict:
    keys = [ds.key(rng.randrange(ds.n)) for _ in range(n_lookups)]
    out: dict = {"lookups_per_pass": n_lookups, "block_cache_bytes": cache_bytes}

    # Cold: empty tier, so each range is fetched from the store and verified at first touch.
    n_cold = min(n_lookups, COLD_LOOKUPS)
    out["cold_lookups"] = n_cold
    tier = env.tier("lookups")
    m = env.manager(tier, block_cache_bytes=cache_bytes)
    t = time.perf_counter()
    m.get(tree_id, keys[0])
    out["first_lookup_ms"] = (time.perf_counter() - t) * 1000
    out["cold_per_s"], out["cold_cpu_per_s"] = _rates(n_cold - 1, [_lookup_pass(m.get, tree_id, keys[1:n_cold])])
    out["cold_tier_fetches"] = tier.stats.fetches
    m.close()

    # Cold blocks: files local and verified, fresh readers and block cache.
    m = env.manager(tier, block_cache_bytes=cache_bytes)
    out["cold_blocks_per_s"], out["cold_blocks_cpu_per_s"] = _rates(
        n_lookups, [_lookup_pass(m.get, tree_id, keys)])
    warm = [_lookup_pass(m.get, tree_id, keys) for _ in range(repeat)]
    out["warm_per_s"], out["warm_cpu_per_s"] = _rates(n_lookups, warm)
    out["warm_runs"] = [n_lookups / c.wall for c in warm]
    missing = sum(1 for k in keys if m.get(tree_id, k) is None)
    if missing:
        raise SystemExit(f"lookup bench: {missing} keys not found in the tree")
    m.close()
    del m
    gc.collect()

    # With 256 open readers: RangeStore's bound under the common descriptor limit of 1024.
    m = env.manager(tier, block_cache_bytes=cache_bytes, max_open_ranges=256)
    few = keys[:COLD_LOOKUPS]
    _lookup_pass(m.get, tree_id, few)
    out["warm_256_readers_per_s"], out["warm_256_readers_cpu_per_s"] = _rates(
        len(few), [_lookup_pass(m.get, tree_id, few) for _ in range(2)])
    m.close()
    del m
    gc.collect()

    # Same, with the SST module's default shared cache (what a repository gets).
    from gravfs.sstable import DEFAULT_CACHE
    DEFAULT_CACHE.clear()
    m = env.manager(tier)
    _lookup_pass(m.get, tree_id, keys)
    out["warm_default_cache_per_s"], out["warm_default_cache_cpu_per_s"] = _rates(
        n_lookups, [_lookup_pass(m.get, tree_id, keys) for _ in range(max(2, repeat // 2))])
    out["default_cache_bytes"] = DEFAULT_CACHE.capacity_bytes
    ranges = [env.range_path(rid) for rid in m.metarange(tree_id).ids]
    m.close()
    del m
    DEFAULT_CACHE.clear()
    gc.collect()
    env.drop_tier(tier)

    # Baseline: RocksDB holding the very same range SST files.
    dbdir = os.path.join(env.root, "rocksdb")
    opts = rocksdict.Options(raw_mode=True)
    bbo = rocksdict.BlockBasedOptions()
    bbo.set_block_cache(rocksdict.Cache(cache_bytes))
    opts.set_block_based_table_factory(bbo)
    db = rocksdict.Rdict(dbdir, opts)
    t = time.perf_counter()
    db.ingest_external_file(ranges)
    out["rocksdb_ingest_seconds"] = time.perf_counter() - t
    if db.get(keys[0]) is None:
        raise SystemExit("lookup bench: RocksDB does not find the keys")
    db.close()
    db = rocksdict.Rdict(dbdir, opts)   # reopened: empty block cache, files in the page cache
    out["rocksdb_cold_per_s"], out["rocksdb_cold_cpu_per_s"] = _rates(n_lookups, [_rdict_pass(db, keys)])
    rw = [_rdict_pass(db, keys) for _ in range(repeat)]
    out["rocksdb_warm_per_s"], out["rocksdb_warm_cpu_per_s"] = _rates(n_lookups, rw)
    out["rocksdb_warm_runs"] = [n_lookups / c.wall for c in rw]
    # RocksDB's own speed without one Python call per key: multi-get in batches of 1000.
    batches = [keys[i:i + 1000] for i in range(0, n_lookups, 1000)]

    def multiget() -> Clock:
        get = db.get
        with Clock() as c:
            for batch in batches:
                get(batch)
        return c

    out["rocksdb_multiget_per_s"], out["rocksdb_multiget_cpu_per_s"] = _rates(
        n_lookups, [multiget() for _ in range(repeat)])
    db.close()
    del db
    shutil.rmtree(dbdir, ignore_errors=True)
    out["warm_ratio"] = out["warm_per_s"] / out["rocksdb_warm_per_s"]
    out["warm_cpu_ratio"] = out["warm_cpu_per_s"] / out["rocksdb_warm_cpu_per_s"]
    out["cold_ratio"] = out["cold_blocks_per_s"] / out["rocksdb_cold_per_s"]
    return out


# --------------------------------------------------------------------------
# 2. apply and 3. diff
# --------------------------------------------------------------------------

EVENTS = TABLES.index(b"events")
COLD_LOOKUPS = 20_000     # keys in the cold pass (first touch of ranges and blocks)


def clustered_changes(ds: Dataset, k: int, slot: int) -> list[tuple]:
    """A new hour partition of k files; slot picks the table (in turn) and the hour."""
    h = ds.hours + slot
    return [ds.file_record(slot % len(TABLES), h, p) for p in range(k)]


def uniform_changes(ds: Dataset, k: int, rng: random.Random, ver: int) -> list[tuple]:
    """k existing files, chosen uniformly, rewritten (new entry, same path)."""
    return [ds.record(i, ver) for i in sorted(rng.sample(range(ds.n), k))]


def prewarm(env: Env, tier: LocalTier, m: CommittedManager, base_id: str, changes) -> None:
    """Fetch into ``tier`` every range a change falls in, and its successor, as the range
    store does (self-checked: each block is checked when a reader first reads it)."""
    mr = m.metarange(base_id)
    want = set()
    for ch in changes:
        i = min(mr.locate(ch[0]), len(mr.ids) - 1)
        want.update(mr.ids[i:i + 2])
    for rid in want:
        tier.acquire(range_key(rid), self_checked=True, durable=False).release()


def run_apply(env: Env, base_id: str, changes: list, warm_tier: LocalTier | None) -> dict:
    tier = warm_tier or env.tier()
    m = env.manager(tier)
    m.metarange(base_id)      # the base tree's index is in memory in any live workspace
    if warm_tier is not None:
        prewarm(env, tier, m, base_id, changes)
    f0, b0 = tier.stats.fetches, tier.stats.bytes_fetched
    gc.collect()
    with Clock() as c:
        res = m.apply(base_id, changes)
    out = {"seconds": c.wall, "cpu_seconds": c.cpu, "tier_fetches": tier.stats.fetches - f0,
           "bytes_fetched": tier.stats.bytes_fetched - b0, "metarange_id": res.metarange_id,
           **res.stats.as_dict()}
    m.close()
    if warm_tier is None:
        env.drop_tier(tier)
    return out


APPLY_FIELDS = ("seconds", "cpu_seconds", "ranges_read", "tier_fetches", "ranges_written", "ranges_reused",
                "metaranges_written", "bytes_written", "records_written")


STUDY_FIELDS = tuple(f for f in APPLY_FIELDS if f != "tier_fetches")


def summarize(runs: list[dict], fields=APPLY_FIELDS) -> dict:
    return {f: median([r.get(f, 0) for r in runs]) for f in fields} | {"runs": len(runs)}


def bench_apply(env: Env, ds: Dataset, base_id: str, ks: list[int], repeat: int,
                heavy_repeat: int, rng: random.Random) -> tuple[list[dict], dict]:
    """apply figures, and for diff the trees obtained (kind, k) -> [metarange ids]."""
    rows, trees = [], {}
    warm_tier = env.tier("apply-warm")
    slot = 0
    ver = 100
    for kind in ("clustered", "uniform"):
        for k in ks:
            # Warm runs only where few ranges are touched: a change set spread over
            # most ranges costs about the same either way (and takes long).
            spread = kind == "uniform" and k > 1
            heavy = kind == "uniform" and k >= 1_000
            reps = (1 if ds.n >= 5_000_000 else heavy_repeat) if heavy else \
                (max(heavy_repeat + 1, repeat - 2) if spread else repeat)
            for mode in ("cold",) if spread else ("cold", "warm"):
                runs = []
                for _ in range(reps):
                    if kind == "clustered":
                        slot += 1
                        changes = clustered_changes(ds, k, slot)
                    else:
                        ver += 1
                        changes = uniform_changes(ds, k, rng, ver)
                    r = run_apply(env, base_id, changes, warm_tier if mode == "warm" else None)
                    runs.append(r)
                    trees.setdefault((kind, k), []).append(r["metarange_id"])
                row = {"entries": ds.n, "kind": kind, "changes": k, "tier": mode,
                       **summarize(runs)}
                rows.append(row)
                log(f"apply N={fmt_n(ds.n)} {kind} k={k} {mode}: {fmt_ms(row['seconds'])} "
                    f"read={row['ranges_read']} written={row['ranges_written']}+"
                    f"{row['metaranges_written']} {fmt_bytes(row['bytes_written'])}")
    env.drop_tier(warm_tier)
    return rows, trees


def bench_diff(env: Env, ds: Dataset, base_id: str, trees: dict, repeat: int,
               heavy_repeat: int) -> list[dict]:
    rows = []
    tier = env.tier("diff")
    for (kind, k), ids in sorted(trees.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        other = ids[0]
        if kind == "uniform" and k >= 1_000:   # reads nearly every range of both trees
            reps = 1 if ds.n >= 5_000_000 else heavy_repeat
        else:
            reps = max(heavy_repeat + 1, repeat - 2) if kind == "uniform" and k > 1 else repeat
        runs = []
        for _ in range(reps):
            m = env.manager(tier)
            m.metarange(base_id)
            m.metarange(other)
            f0 = tier.stats.fetches
            gc.collect()
            with Clock() as c:
                it = m.diff(base_id, other)
                n = sum(1 for _ in it)
            runs.append({"seconds": c.wall, "cpu_seconds": c.cpu, "ranges_read": it.stats.ranges_read,
                         "tier_fetches": tier.stats.fetches - f0, "diffs": n})
            m.close()
        if runs[0]["diffs"] != k:
            raise SystemExit(f"diff found {runs[0]['diffs']} differences, expected {k}")
        row = {"entries": ds.n, "kind": kind, "changes": k,
               **summarize(runs, ("seconds", "cpu_seconds", "ranges_read", "diffs")),
               "first_run_tier_fetches": runs[0]["tier_fetches"]}
        rows.append(row)
        log(f"diff N={fmt_n(ds.n)} {kind} k={k}: {fmt_ms(row['seconds'])} read={row['ranges_read']}")
    env.drop_tier(tier)
    return rows


# --------------------------------------------------------------------------
# 3b. Scattered changes: apply on 1..W worker processes (issue 15)
# --------------------------------------------------------------------------


def worker_counts(cpus: int) -> list[int]:
    """1 (the single-process path), 2, 4, ... up to the cores there are."""
    out, w = [1], 2
    while w <= max(2, cpus):
        out.append(w)
        w *= 2
    return out


def disk_floor(env: Env, files: int, total: int) -> float | None:
    """Seconds this disk takes to write and sync ``files`` files of ``total`` bytes in
    all (the new range files an apply must write, with nothing else done)."""
    if not files or not total:
        return None
    d = os.path.join(env.root, "floor")
    os.makedirs(d, exist_ok=True)
    buf = os.urandom(total // files)
    t0 = time.perf_counter()
    for i in range(files):
        with open(os.path.join(d, str(i)), "wb") as f:
            f.write(buf)
            f.flush()
            os.fsync(f.fileno())
    seconds = time.perf_counter() - t0
    shutil.rmtree(d, ignore_errors=True)
    return seconds


def bench_scattered(env: Env, ds: Dataset, base_id: str, k: int, repeat: int,
                    rng: random.Random, workers: list[int], record_ids: bool = True) -> list[dict]:
    """k uniform rewrites (a privacy deletion's spread) applied cold on each worker count.

    The same change sets are used for every worker count, and every count must
    give the single-process metarange ID.  CPU = this process + its workers.
    ``record_ids``: the base tree's record IDs are in the local cache (it was
    written here); False runs without the cache (a tree written elsewhere).
    """
    # a cache that holds the base's IDs and what every run writes (10M entries: 320 MB
    # each), so each worker count starts with the base's IDs cached, as the first did
    kw = {"record_ids_bytes": 32 * GiB} if record_ids else {"record_ids_bytes": 0}
    sets = [uniform_changes(ds, k, rng, 900 + r) for r in range(repeat)]
    stored = tree_objects(env.store)
    want: dict[int, str] = {}
    rows = []
    floor = None
    for w in workers:
        runs = []
        for r, changes in enumerate(sets):
            tier = env.tier()
            try:
                m = env.manager(tier, workers=w, **kw)
            except TypeError:          # a gravfs before issue 15: one process only
                if w > 1:
                    break
                m = env.manager(tier)
            m.metarange(base_id)
            wc0 = getattr(m, "worker_cpu_seconds", lambda: 0.0)()
            gc.collect()
            with Clock() as c:
                res = m.apply(base_id, changes)
            wcpu = getattr(m, "worker_cpu_seconds", lambda: 0.0)() - wc0
            m.close()
            env.drop_tier(tier)
            # what this run stored goes: the next worker count applies the same changes
            # and would find every range stored, its time without the writes
            env.store.delete_many(sorted(tree_objects(env.store) - stored))
            if want.setdefault(r, res.metarange_id) != res.metarange_id:
                raise SystemExit(f"scattered apply on {w} workers gave {res.metarange_id}, "
                                 f"one process gave {want[r]}")
            runs.append({"seconds": c.wall, "cpu_seconds": c.cpu + wcpu, "driver_cpu_seconds": c.cpu,
                         "worker_cpu_seconds": wcpu, **res.stats.as_dict()})
        if not runs:
            continue
        if floor is None:  # the files the first worker count wrote (each count writes them)
            floor = disk_floor(env, int(median([x["ranges_written"] for x in runs])),
                               int(median([x["bytes_written"] for x in runs])))
        row = {"entries": ds.n, "changes": k, "workers": w, "record_id_cache": record_ids,
               "disk_floor_seconds": floor,
               **summarize(runs, ("seconds", "cpu_seconds", "driver_cpu_seconds", "worker_cpu_seconds",
                                  "ranges_read", "ranges_written", "ranges_patched", "ranges_reused",
                                  "bytes_written")),
               "runs_seconds": [x["seconds"] for x in runs],
               "runs_cpu_seconds": [x["cpu_seconds"] for x in runs],
               "metarange_ids": [want[r] for r in range(len(runs))]}
        rows.append(row)
        log(f"scattered N={fmt_n(ds.n)} k={k:,} workers={w}: {fmt_ms(row['seconds'])} "
            f"(CPU {fmt_ms(row['cpu_seconds'])}) read={row['ranges_read']} written={row['ranges_written']}")
    return rows


# --------------------------------------------------------------------------
# 4. Break-policy study
# --------------------------------------------------------------------------

APPEND_FILES = 300      # files per appended hour partition
MERGE_POOL = 0.055      # new files seen by either branch, per base file (55k on 1M: 45k on
                        # both branches, 5k on each only, so 50k per branch)


def _size(n: int) -> str:
    return f"{n // MiB}M" if n >= MiB and n % MiB == 0 else f"{n // KiB}K"


def policy_name(p: BreakPolicy) -> str:
    if isinstance(p, SizeAwareBreakPolicy):
        return f"size-aware {_size(p.min_size)}+{_size(p.target_size)}/{_size(p.max_size)}"
    if p == BreakPolicy.lakefs_defaults(p.seed):
        return "lakeFS 0/20M/50000"
    return f"{_size(p.min_size)}/{_size(p.max_size)}/{p.raggedness}"


def default_policy() -> BreakPolicy:
    """The repository default of gravfs.version.config (break seed 0, as in every tree here)."""
    rp = RangeParams()
    if hasattr(rp, "policy"):
        return rp.policy()
    return BreakPolicy(rp.min_size, rp.max_size, rp.raggedness, rp.seed)


def study_policies() -> list[tuple[str, BreakPolicy]]:
    """lakeFS's rule at its and smaller sizes, and size-aware policies of about the same means."""
    policies = [
        BreakPolicy.lakefs_defaults(),
        BreakPolicy(512 * KiB, 4 * MiB, 4096),
        BreakPolicy(256 * KiB, 2 * MiB, 2048),
        BreakPolicy(128 * KiB, 1 * MiB, 1024),
        SizeAwareBreakPolicy(512 * KiB, 4 * MiB, 1 * MiB),
        SizeAwareBreakPolicy(256 * KiB, 2 * MiB, 512 * KiB),
        SizeAwareBreakPolicy(128 * KiB, 1 * MiB, 256 * KiB),
    ]
    default = default_policy()
    if default not in policies:
        policies.insert(1, default)
    return [(policy_name(p) + (" (default)" if p == default else ""), p) for p in policies]


def _reuse(stats: dict) -> float:
    total = stats["ranges_reused"] + stats["ranges_written"]
    return stats["ranges_reused"] / total if total else 1.0


def _timed_apply(m: CommittedManager, base: str, changes) -> dict:
    gc.collect()
    with Clock() as c:
        res = m.apply(base, changes)
    return {"seconds": c.wall, "cpu_seconds": c.cpu, "metarange_id": res.metarange_id,
            **res.stats.as_dict()}


SCALES = (10, 100)   # tree sizes of the scaled single-change test, as multiples of the study's


def _stand_in(table: bytes, j: int, count: int, size: int) -> "RangeInfo":
    """A range that is never read: realistic keys and stats, an ID nobody stored."""
    pre = b"tables/%s/date=2024-01-01/hour=00/part-%09d-" % (table, j)
    job = _sha(pre).hexdigest()[:36].encode()
    return RangeInfo(_sha(b"stand-in" + pre).hexdigest(), pre + b"0-" + job + b".parquet",
                     pre + b"9-" + job + b".parquet", count, size)


def scaled_single(m: CommittedManager, mr, factor: int, repeat: int) -> dict:
    """Cost of a one-file change when the tree has ``factor`` times as many ranges.

    The tree is one real range of median size (taken from ``mr``) among stand-ins
    placed before and after it in key order; apply copies the stand-ins by ID without
    reading them, exactly as it copies untouched ranges of a real tree.
    """
    # Not the tree's last range: it ends where the input ended, not at a break.
    ranges = sorted(mr.ranges[:-1] or mr.ranges, key=lambda r: r.count)
    real = ranges[len(ranges) // 2]
    n = len(mr.ranges) * factor
    count = sum(r.count for r in mr.ranges) // len(mr.ranges)
    size = sum(r.estimated_size for r in mr.ranges) // len(mr.ranges)
    stats = Stats()
    w = m._writer(stats)      # no public API writes a metarange from RangeInfos
    for j in range(n // 2):
        w.copy_range(_stand_in(b"archive", j, count, size))
    w.copy_range(real)
    for j in range(n - n // 2 - 1):
        w.copy_range(_stand_in(b"zeta", j, count, size))
    tree = w.finish().id
    m.metarange(tree)
    keys = [rec.key for rec in m.range_records(real.id)]
    rng = random.Random(factor)
    runs = []
    for rep in range(repeat):
        key = keys[rng.randrange(len(keys))]
        ident, data = entry_value(key + b"#scaled%d" % rep, EPOCH_S)
        try:
            runs.append(_timed_apply(m, tree, [(key, ident, data)]))
        except NotFoundError:
            # The rewritten range ended elsewhere and apply went on into a stand-in.
            log(f"scaled single-change test: boundary moved after {key!r}; run skipped")
    if not runs:
        return {"factor": factor, "ranges": n, "skipped": True}
    return {"factor": factor, "ranges": n, "range_entries": real.count,
            "range_bytes": real.estimated_size, **summarize(runs, STUDY_FIELDS)}


def merge_branches(ds: Dataset) -> tuple[list, list]:
    """Records added by branch A and by branch B: 90% the same files (same entries)."""
    a, b = [], []
    per_table = max(1, round(ds.n * MERGE_POOL / (len(TABLES) * FILES_PER_HOUR)))
    for t in range(len(TABLES)):
        for hh in range(per_table):
            for p in range(FILES_PER_HOUR):
                rec = ds.file_record(t, ds.hours + 8000 + hh, p)
                c = rec[1][0] % 11
                if c != 1:
                    a.append(rec)
                if c != 0:
                    b.append(rec)
    return a, b


def study_one(env: Env, ds: Dataset, base_id: str, build: dict, repeat: int,
              rng: random.Random) -> dict:
    out = {"build": build}
    tier = env.tier("study")
    m = env.manager(tier)
    mr = m.metarange(base_id)

    # (1) hourly partitions appended, one commit each, chained: every commit adds the
    #     next hour of each table (75 files each, 300 in all).
    head = base_id
    commits = []
    per = APPEND_FILES // len(TABLES)
    for c in range(20):
        changes = [ds.file_record(t, ds.hours + 5000 + c, p)
                   for t in range(len(TABLES)) for p in range(per)]
        r = _timed_apply(m, head, changes)
        head = r["metarange_id"]
        r["reuse"] = _reuse(r)
        commits.append(r)
    out["append"] = {"commits": len(commits),
                     "seconds_p50": median([r["seconds"] for r in commits]),
                     "cpu_seconds_p50": median([r["cpu_seconds"] for r in commits]),
                     "bytes_written_p50": median([r["bytes_written"] for r in commits]),
                     "bytes_written_mean": statistics.fmean([r["bytes_written"] for r in commits]),
                     "bytes_written_total": sum(r["bytes_written"] for r in commits),
                     "ranges_written_p50": median([r["ranges_written"] for r in commits]),
                     "ranges_read_p50": median([r["ranges_read"] for r in commits]),
                     "reuse_p50": median([r["reuse"] for r in commits]),
                     "reuse_min": min(r["reuse"] for r in commits)}

    # (2) 1% of the files rewritten in one commit.
    runs = []
    for rep in range(1):    # rewrites nearly every range: one run says it all
        r = _timed_apply(m, base_id, uniform_changes(ds, ds.n // 100, rng, 300 + rep))
        r["reuse"] = _reuse(r)
        runs.append(r)
    out["rewrite_1pct"] = summarize(runs, STUDY_FIELDS + ("reuse",))

    # (3) two branches add 50k files each, 90% of them the same; merge one into the other.
    add_a, add_b = merge_branches(ds)
    ra = _timed_apply(m, base_id, add_a)
    rb = _timed_apply(m, base_id, add_b)
    gc.collect()
    with Clock() as c:
        res = m.merge(base_id, ra["metarange_id"], rb["metarange_id"])
    dt = c.wall
    st = res.stats.as_dict()
    merged = m.metarange(res.metarange_id)
    out["merge"] = {"files_per_branch": (len(add_a), len(add_b)), "seconds": dt, "cpu_seconds": c.cpu,
                    "branch_commit_seconds": (ra["seconds"] + rb["seconds"]) / 2,
                    "branch_commit_bytes": (ra["bytes_written"] + rb["bytes_written"]) / 2,
                    "reuse": _reuse(st), "changes": res.changes,
                    "ranges_in_result": len(merged.ranges),
                    "result_ranges_shared_with_a_or_b": sum(
                        1 for rid in merged.ids
                        if rid in set(m.metarange(ra["metarange_id"]).ids)
                        | set(m.metarange(rb["metarange_id"]).ids)), **st}

    # (4) one file rewritten (touched ranges already in the tier).  A random file lies in
    #     a range with probability proportional to its size, so means are quoted too.
    runs = []
    for rep in range(3 * repeat):
        changes = uniform_changes(ds, 1, rng, 400 + rep)
        prewarm(env, tier, m, base_id, changes)
        runs.append(_timed_apply(m, base_id, changes))
    out["single"] = summarize(runs, STUDY_FIELDS)
    out["single"].update({f + "_mean": statistics.fmean(r[f] for r in runs)
                          for f in ("seconds", "cpu_seconds", "bytes_written")})
    out["ranges"] = len(mr.ranges)

    # (5) the same one-file change in bigger trees: a metarange of 10x and 100x as many
    #     ranges, all stand-ins never read except the real median-sized range changed.
    out["scaled"] = [scaled_single(m, mr, factor, repeat) for factor in SCALES]
    m.close()
    env.drop_tier(tier)
    return out


def bench_policies(root: str, n: int, repeat: int, rng_seed: int,
                   main: tuple[str, BreakPolicy, Env, str, dict] | None) -> list[dict]:
    ds = Dataset(n)
    records = None
    rows = []
    for name, policy in study_policies():
        if main is not None and main[1] == policy:
            env, base_id, build = main[2], main[3], main[4]
        else:
            if records is None:
                records = list(base_records(ds))
            env = Env(os.path.join(root, "policy-" + str(len(rows))), policy)
            base_id, build = build_tree(env, ds, records)
        t = time.perf_counter()
        res = study_one(env, ds, base_id, build, repeat, random.Random(rng_seed))
        res.update(name=name, policy=policy.to_dict(), study_seconds=time.perf_counter() - t)
        rows.append(res)
        a, w, g = res["append"], res["rewrite_1pct"], res["merge"]
        log(f"policy {name}: {build['ranges']} ranges p50 {fmt_bytes(build['range_bytes_p50'])}, "
            f"append {fmt_bytes(a['bytes_written_p50'])}/commit reuse {a['reuse_p50']:.3f}, "
            f"1% {fmt_bytes(w['bytes_written'])} reuse {w['reuse']:.3f}, merge reuse {g['reuse']:.3f}, "
            f"single {fmt_ms(res['single']['seconds'])}")
        if main is None or env is not main[2]:
            shutil.rmtree(env.root, ignore_errors=True)
    return rows


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def report(res: dict) -> str:
    out = []
    rows = [[fmt_n(b["entries"]), fmt_ms(b["seconds"]), f"{b['entries'] / b['seconds'] / 1000:,.0f}k/s",
             b["ranges"], fmt_bytes(b["bytes"]), fmt_bytes(b["range_bytes_p50"]),
             fmt_bytes(b["range_bytes_p99"]), fmt_bytes(b["metarange_bytes"])]
            for b in res.get("build", [])]
    if rows:
        out.append(table(f"Trees written with write_metarange (policy {res['tree_policy']}, gravfs.version.config defaults)",
                         ["entries", "write_metarange", "rate", "ranges", "SST bytes", "range p50",
                          "range p99", "metarange"], rows))
    rows = []

    def both(r: dict, name: str) -> str:
        return f"{fmt_rate(r[name + '_per_s'])} / {fmt_rate(r[name + '_cpu_per_s'])}"

    for r in res.get("lookups", []):
        rows.append([fmt_n(r["entries"]), f"{r['first_lookup_ms']:.1f} ms", both(r, "cold"),
                     both(r, "cold_blocks"), both(r, "warm"), both(r, "warm_default_cache"),
                     both(r, "warm_256_readers"),
                     both(r, "rocksdb_cold"), both(r, "rocksdb_warm"), both(r, "rocksdb_multiget"),
                     f"{r['cold_ratio']:.2f}", f"{r['warm_ratio']:.2f} / {r['warm_cpu_ratio']:.2f}"])
    if rows:
        n = res["lookups"][0]["lookups_per_pass"]
        nc = res["lookups"][0]["cold_lookups"]
        out.append(table(f"Random point lookups, one thread, wall / CPU rates ({n:,} keys per pass, "
                         f"{nc:,} in the cold pass; goal >= 300k/s warm; ratio = gravfs / RocksDB)",
                         ["entries", "1st lookup", "cold (empty tier)", "cold blocks", "warm",
                          f"warm, default cache ({fmt_bytes(res['lookups'][0]['default_cache_bytes'])})",
                          "warm, 256 readers", "RocksDB cold", "RocksDB warm",
                          "RocksDB multi-get", "ratio cold", "ratio warm"], rows))
    base = {(r["kind"], r["changes"], r["tier"], r["entries"]): r for r in res.get("apply", [])}
    sizes = sorted({r["entries"] for r in res.get("apply", [])})
    rows = []
    for r in res.get("apply", []):
        ref = base.get((r["kind"], r["changes"], r["tier"], sizes[0]))
        ratio = f"{r['cpu_seconds'] / ref['cpu_seconds']:.2f}" if ref and r["entries"] != sizes[0] else ""
        rows.append([fmt_n(r["entries"]), r["kind"], f"{r['changes']:,}", r["tier"],
                     fmt_ms(r["seconds"]), fmt_ms(r["cpu_seconds"]), ratio, fmt_count(r["ranges_read"]),
                     fmt_count(r["tier_fetches"]), fmt_count(r["ranges_written"]),
                     fmt_count(r["metaranges_written"]), fmt_bytes(r["bytes_written"]),
                     fmt_count(r["ranges_reused"]), r["runs"]])
    if rows:
        out.append(table("apply (medians; ratio = CPU time / same case at the smallest N)",
                         ["entries", "changes", "k", "tier", "time", "CPU", "ratio", "ranges read",
                          "fetches", "ranges written", "metaranges", "bytes written", "reused",
                          "runs"], rows))
    rows = []
    for r in res.get("scattered", []):
        one = next((x for x in res["scattered"] if x["entries"] == r["entries"]
                    and x["changes"] == r["changes"] and x["workers"] == 1
                    and x.get("record_id_cache", True) == r.get("record_id_cache", True)), None)
        speed = f"{one['seconds'] / r['seconds']:.2f}x" if one else ""
        rows.append([fmt_n(r["entries"]), f"{r['changes']:,}", r["workers"],
                     "yes" if r.get("record_id_cache", True) else "no", fmt_ms(r["seconds"]), speed,
                     fmt_ms(r["cpu_seconds"]), fmt_ms(r["driver_cpu_seconds"]), fmt_ms(r["worker_cpu_seconds"]),
                     fmt_count(r["ranges_read"]), fmt_count(r["ranges_written"]),
                     fmt_count(r.get("ranges_patched", 0)),
                     fmt_count(r["ranges_reused"]), fmt_bytes(r["bytes_written"]),
                     fmt_ms(r.get("disk_floor_seconds")), r["runs"]])
    if rows:
        out.append(table("Scattered changes applied cold, by worker processes (medians; CPU = driver + "
                         "workers; same metarange ID on every worker count; goal 10k on 10M < 20 s)",
                         ["entries", "changes", "workers", "record IDs cached", "time", "speed-up", "CPU",
                          "driver CPU",
                          "worker CPU", "ranges read", "ranges written", "of them patched", "reused",
                          "bytes written", "disk floor (write + sync those files)", "runs"], rows))
    dbase = {(r["kind"], r["changes"], r["entries"]): r for r in res.get("diff", [])}
    rows = []
    for r in res.get("diff", []):
        ref = dbase.get((r["kind"], r["changes"], sizes[0] if sizes else 0))
        ratio = f"{r['cpu_seconds'] / ref['cpu_seconds']:.2f}" if ref and r["entries"] != ref["entries"] else ""
        rows.append([fmt_n(r["entries"]), r["kind"], f"{r['changes']:,}", fmt_ms(r["seconds"]),
                     fmt_ms(r["cpu_seconds"]), ratio,
                     fmt_count(r["ranges_read"]), r["first_run_tier_fetches"], r["runs"]])
    if rows:
        out.append(table("diff base..changed (medians; tier filled after the first run; ratio = CPU / smallest N)",
                         ["entries", "changes", "k", "time", "CPU", "ratio", "ranges read",
                          "1st-run fetches", "runs"], rows))
    pol = res.get("policy", [])
    if pol:
        lk = pol[0]
        rows = []
        for p in pol:
            b, a, w, g, s = p["build"], p["append"], p["rewrite_1pct"], p["merge"], p["single"]
            rows.append([p["name"], b["ranges"], fmt_bytes(b["range_bytes_p50"]),
                         fmt_bytes(b["range_bytes_p99"]), fmt_bytes(b["metarange_bytes"]),
                         fmt_bytes(a["bytes_written_p50"]),
                         f"{a['bytes_written_p50'] / lk['append']['bytes_written_p50']:.3f}",
                         f"{a['reuse_p50']:.3f}", f"{fmt_ms(a['seconds_p50'])} / {fmt_ms(a['cpu_seconds_p50'])}",
                         fmt_bytes(w["bytes_written"]), f"{w['reuse']:.3f}",
                         f"{fmt_ms(w['seconds'])} / {fmt_ms(w['cpu_seconds'])}",
                         f"{g['reuse']:.3f}", fmt_bytes(g["bytes_written"]),
                         f"{fmt_ms(g['seconds'])} / {fmt_ms(g['cpu_seconds'])}",
                         f"{fmt_ms(s['seconds'])} / {fmt_ms(s['cpu_seconds'])}",
                         fmt_bytes(s["bytes_written_mean"])])
        out.append(table(
            f"Break policies on a {fmt_n(pol[0]['build']['entries'])}-entry tree "
            "(append = one 300-file hour partition per commit, 20 commits; 1% = random rewrites; "
            f"merge = 2 x {fmt_n(int(pol[0]['merge']['files_per_branch'][0]))} new files, 90% shared; "
            "single = one rewritten file; ratio vs lakeFS; times wall / CPU, medians)",
            ["policy", "ranges", "range p50", "range p99", "metarange", "append B/commit", "ratio",
             "append reuse", "append time", "1% bytes", "1% reuse", "1% time", "merge reuse",
             "merge bytes", "merge time", "single time", "single bytes (mean)"], rows))
        rows = []
        for p in pol:
            s = p["single"]
            row = [p["name"], f"{fmt_ms(s['seconds'])} / {fmt_ms(s['cpu_seconds'])}",
                   fmt_bytes(s["bytes_written_mean"])]
            for sc in p.get("scaled", []):
                if sc.get("skipped"):
                    row += [sc["ranges"], "-", "-"]
                else:
                    row += [sc["ranges"], f"{fmt_ms(sc['seconds'])} / {fmt_ms(sc['cpu_seconds'])}",
                            fmt_bytes(sc["bytes_written"])]
            rows.append(row)
        n0 = pol[0]["build"]["entries"]
        head = ["policy", f"{fmt_n(n0)}: time", "bytes (mean)"]
        for f in SCALES:
            head += [f"~{fmt_n(n0 * f)}: ranges", "time", "bytes"]
        out.append(table(
            "One rewritten file as the tree grows (wall / CPU medians; bigger trees simulated by a "
            "metarange of stand-in ranges around one real median-sized range)", head, rows))
    return "\n".join(out)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_n(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small trees, about two minutes")
    ap.add_argument("--repeat", type=int, help="runs per figure (median quoted; default 5, quick 3)")
    ap.add_argument("--sizes", help="tree sizes, e.g. 1M,10M (default 1M,10M; quick 50k,200k)")
    ap.add_argument("--policy-entries", help="base tree of the policy study (default 1M; quick 50k)")
    ap.add_argument("--lookups", type=int, help="keys per lookup pass (default 200k; quick 30k)")
    ap.add_argument("--only", default="lookups,apply,diff,scattered,policy",
                    help="comma-separated sections to run")
    ap.add_argument("--workers", help="worker counts of the scattered section, e.g. 1,2 "
                    "(default 1, 2, 4, ... up to the cores)")
    ap.add_argument("--no-record-ids", action="store_true",
                    help="scattered section without the record-ID cache (a tree written elsewhere)")
    ap.add_argument("--scattered-changes", type=int,
                    help="changes in the scattered section (default N/1000: 10k on 10M)")
    ap.add_argument("--tmp", help="directory for the temp stores (default: system temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--no-json", action="store_true", help="do not write bench/results/*.json")
    args = ap.parse_args(argv)
    quick = args.quick
    repeat = args.repeat or (3 if quick else 5)
    sizes = [parse_n(s) for s in (args.sizes or ("50k,200k" if quick else "1M,10M")).split(",")]
    policy_n = parse_n(args.policy_entries or ("50k" if quick else "1M"))
    n_lookups = args.lookups or (30_000 if quick else 200_000)
    sections = set(args.only.split(","))
    unknown = sections - {"lookups", "apply", "diff", "scattered", "policy"}
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}")
    if args.repeat is not None and args.repeat < 1:
        ap.error(f"--repeat: at least 1 run (got {args.repeat})")
    try:
        counts = [int(x) for x in args.workers.split(",")] if args.workers else \
            worker_counts(os.cpu_count() or 1)
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        ap.error(f"--workers: worker counts of at least 1, e.g. 1,2 (got {args.workers!r})")
    heavy_repeat = 1 if quick else 2     # for change sets that rewrite nearly every range
    ks = [1, 100, 1_000] if quick else [1, 100, 10_000]
    cache_bytes = 4 * GiB

    check_encoder()
    policy = default_policy()
    started = time.time()
    res: dict = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "mode": "quick" if quick else "full", "repeat": repeat,
                 "tree_policy": policy_name(policy),
                 "tree_policy_dict": policy.to_dict(),
                 "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                             "platform": platform.platform(), "loadavg_start": os.getloadavg()},
                 "build": [], "lookups": [], "apply": [], "diff": [], "scattered": []}
    root = tempfile.mkdtemp(prefix="gravfs-bench-committed-", dir=args.tmp)
    log(f"temp dir {root}")
    main_for_policy = None
    try:
        for n in sizes:
            rng = random.Random(n)
            ds = Dataset(n)
            env = Env(os.path.join(root, f"n{n}"), policy)
            if sections & {"lookups", "apply", "diff", "scattered"} or n == policy_n:
                log(f"writing the {fmt_n(n)}-entry tree")
                tree, build = build_tree(env, ds)
                res["build"].append(build)
                log(f"  {build['ranges']} ranges, {fmt_bytes(build['bytes'])} in {fmt_ms(build['seconds'])}")
            if "lookups" in sections:
                r = bench_lookups(env, ds, tree, n_lookups, repeat, rng, cache_bytes)
                r["entries"] = n
                res["lookups"].append(r)
                log(f"lookups N={fmt_n(n)}: warm {fmt_rate(r['warm_per_s'])} "
                    f"(RocksDB {fmt_rate(r['rocksdb_warm_per_s'])}), cold {fmt_rate(r['cold_per_s'])}")
            trees = {}
            if sections & {"apply", "diff"}:
                rows, trees = bench_apply(env, ds, tree, ks, repeat, heavy_repeat, rng)
                res["apply"] += rows
            if "diff" in sections:
                res["diff"] += bench_diff(env, ds, tree, trees, repeat, heavy_repeat)
            if "scattered" in sections:
                res["scattered"] += bench_scattered(env, ds, tree, args.scattered_changes or max(100, n // 1000),
                                                    repeat, random.Random(n + 15), counts,
                                                    record_ids=not args.no_record_ids)
            if n == policy_n and "policy" in sections:
                main_for_policy = ("main", policy, env, tree, build)
            else:
                shutil.rmtree(env.root, ignore_errors=True)
        if "policy" in sections:
            log(f"policy study on {fmt_n(policy_n)} entries")
            res["policy"] = bench_policies(root, policy_n, repeat, 7, main_for_policy)
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    res["seconds"] = time.time() - started
    res["machine"]["loadavg_end"] = os.getloadavg()
    print(report(res))
    print(f"\ntotal {res['seconds'] / 60:.1f} min")
    if not args.no_json:
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, f"committed-{time.strftime('%Y%m%d-%H%M%S')}.json")
        with open(path, "w") as f:
            json.dump(res, f, indent=1, default=str)
        print(f"results: {os.path.relpath(path, ROOT)}")
    return res


if __name__ == "__main__":
    main()
