#!/usr/bin/env python3
"""Benchmark of the provenance index (gravfs spark index, gravfs provenance, log -- PATH).

1. A repository of ENTRIES entries and COMMITS commits (branches every 100 commits,
   a merge of a side branch every 50, tags every 250; each commit changes CHANGE
   entries of one directory, or adds them), written with the committed-tree writer.
2. Index build on local[2] (Spark): time, rows/s, index bytes against the
   repository's metadata bytes (ranges + metaranges + commits).
3. Point queries with random keys: provenance (content address) and path history
   (path on main); warm (one reader, page cache warm) and cold (page cache dropped
   with /proc/sys/vm/drop_caches before each query, a new reader each time): p50/p99.
   The same joins in DuckDB over the same Parquet files (no sidecar), and the
   brute-force scan (every commit's tree), timed on a few keys with a time cap.
   The queries run on the repository opened afresh, as the CLI does: the builder's
   handle caches the 1,000 commits' metaranges (millions of Python objects), and
   full garbage-collector passes over them put 200-400 ms into random queries.
4. Scaling: a synthetic contents table of 1M .. SYNTH rows written with the index
   layout; point lookups warm and cold: query time does not grow with the size.
5. --sweep: row-group size against lookup time and file size (how ROW_GROUP_ROWS was
   chosen).

Writes a table to stdout and JSON to bench/results/spark-index-<time>.json.
Usage: scripts/bench_spark_index.py [--entries N] [--commits N] [--synth N] [--sweep]
                                     [--dir DIR [--queries-only]]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from gravfs.fs.entry import EntryInfo, encode_entry  # noqa: E402
from gravfs.fs.repository import Repository  # noqa: E402
from gravfs.provenance import bruteforce, queries  # noqa: E402
from gravfs.provenance import layout  # noqa: E402
from gravfs.provenance import manifest as manifests  # noqa: E402
from gravfs.provenance.reader import IndexReader  # noqa: E402
from gravfs.version.refs.commits import Commit  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_mount import drop_caches  # noqa: E402

_PH = "data/00/" + "0" * 64
_TMPL = encode_entry(EntryInfo(address=_PH, size=4096, mtime_ns=1_700_000_000 * 10**9))
_PRE, _SUF = _TMPL.split(_PH.encode())
FILES_PER_DIR = 1000


def _record(key: bytes, seed: bytes):
    h = hashlib.sha256(seed).hexdigest()
    data = _PRE + f"data/{h[:2]}/{h}".encode() + _SUF
    return key, hashlib.sha256(data).digest(), data


def _key(i: int) -> bytes:
    return f"dir{i // FILES_PER_DIR:05d}/file{i:08d}".encode()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def ms(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_ms": round(pct(xs, 50) * 1e3, 3),
            "p99_ms": round(pct(xs, 99) * 1e3, 3), "mean_ms": round(statistics.fmean(xs) * 1e3, 3)}


# -- 1. the repository ----------------------------------------------------------------------

def make_repo(base: str, entries: int, commits: int, change: int, seed: int = 1):
    rnd = random.Random(seed)
    repo = Repository.init(os.path.join(base, "store"), os.path.join(base, "state"))
    root = repo.commits.get(repo.head("main"))
    t0 = time.monotonic()
    res = repo.committed.write_tree(
        _record(_key(i), i.to_bytes(8, "big")) for i in range(entries))
    t_initial = time.monotonic() - t0
    clock = root.time_ns

    def commit(mr, parents, msg):
        nonlocal clock
        clock += 1_000_000_000
        g = 1 + max(repo.commits.get(p).generation for p in parents)
        return repo.commits.put(Commit(mr, tuple(parents), msg, "bench@host", clock, g, {}))

    head = commit(res.metarange_id, [root.id], "initial")
    version = entries  # content seeds beyond the initial ones: each change is new content
    side = None
    dirs = max(1, entries // FILES_PER_DIR)
    branches = 0
    for n in range(1, commits):
        d = rnd.randrange(dirs)
        lo = d * FILES_PER_DIR + rnd.randrange(max(1, FILES_PER_DIR - change))
        changes = []
        for i in range(lo, min(lo + change, entries)):
            version += 1
            if rnd.random() < 0.3:  # content seen before somewhere: provenance has many holders
                changes.append(_record(_key(i), rnd.randrange(entries).to_bytes(8, "big")))
            else:
                changes.append(_record(_key(i), version.to_bytes(8, "big")))
        if n % 50 == 25:  # work on a side branch, merged at n % 50 == 0
            base_c = side or head
            side = commit(repo.committed.apply(base_c.metarange, changes).metarange_id,
                          [base_c.id], f"side {n}")
            continue
        mr = repo.committed.apply(head.metarange, changes).metarange_id
        if n % 50 == 0 and side is not None:
            head = commit(mr, [head.id, side.id], f"merge side at {n}")
            side = None
        else:
            head = commit(mr, [head.id], f"commit {n}")
        if n % 100 == 0:
            branches += 1
            repo.heads.create_branch(f"b{branches}", head.id)
        if n % 250 == 0:
            repo.heads.create_tag(f"v{n}", head.id)
    _, version_token = repo.heads.branch("main")
    repo.heads.move_branch("main", version_token, head.id)
    secs = time.monotonic() - t0
    return repo, {"entries": entries, "commits": commits, "change": change,
                  "seconds_initial_tree": round(t_initial, 1), "seconds": round(secs, 1)}


def metadata_bytes(store_dir: str) -> int:
    total = 0
    for sub in ("ranges", "metaranges", "commits"):
        for dp, _, fs in os.walk(os.path.join(store_dir, "_gravfs", sub)):
            total += sum(os.path.getsize(os.path.join(dp, f)) for f in fs)
    return total


# -- 2. build ----------------------------------------------------------------------------

def build(repo) -> dict:
    from gravfs.spark.index import build_index
    from gravfs.spark.runtime import start_session
    t0 = time.monotonic()
    spark = start_session("local[2]", [("spark.ui.enabled", "false"),
                                       ("spark.driver.memory", "3g")])
    t_start = time.monotonic() - t0
    try:
        t1 = time.monotonic()
        res = build_index(spark, repo)
        secs = time.monotonic() - t1
    finally:
        spark.stop()
    rows = sum(res.rows.values())
    return {"seconds": round(secs, 1), "jvm_start_seconds": round(t_start, 1),
            "rows": res.rows, "rows_per_s": round(rows / secs), "files": res.files,
            "index_bytes": res.bytes, "ranges_read": res.ranges, "commits": res.commits}


# -- 3. queries --------------------------------------------------------------------------

def sample_keys(reader: IndexReader, n: int, rnd: random.Random):
    addrs = reader.read_all(layout.CONTENTS, ["address"]).column("address").unique().to_pylist()
    paths = reader.read_all(layout.PATHS, ["path"]).column("path").unique().to_pylist()
    return ([a.decode() for a in rnd.sample(addrs, min(n, len(addrs)))],
            rnd.sample(paths, min(n, len(paths))))


def time_queries(repo, addrs, paths, cold: bool) -> dict:
    start = repo.resolve("main").commit.id
    out = {}
    reader = None
    for name, keys in (("provenance", addrs), ("path_history", paths)):
        lat, rows = [], 0
        for k in keys:
            if cold:
                drop_caches()
                repo.commits._cache.clear()
            t = time.perf_counter()
            if cold or reader is None:
                reader = IndexReader(repo.store, repo.tier)
            if name == "provenance":
                rows += len(queries.provenance(reader, repo.commits, repo.heads, k).holders)
            else:
                rows += len(queries.path_history(reader, repo.commits, repo.heads, start,
                                                 k).changes)
            lat.append(time.perf_counter() - t)
        out[name] = {**ms(lat), "rows_per_query": round(rows / max(1, len(keys)), 1)}
    return out


def duckdb_queries(store_dir: str, reader: IndexReader, addrs, paths, cold: bool) -> dict:
    try:
        import duckdb
    except ImportError:
        return {"skipped": "duckdb not installed (pip install 'gravfs[bench]')"}
    files = {t: [os.path.join(store_dir, f.key) for f in reader.files(t)]
             for t in (layout.CONTENTS, layout.PATHS, layout.RANGES_IN_COMMITS)}
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    q = {"provenance": f"""SELECT r.commit_id, c.path FROM read_parquet({files[layout.CONTENTS]!r}) c
             JOIN read_parquet({files[layout.RANGES_IN_COMMITS]!r}) r USING (range_id)
             WHERE c.address = ?""",
         "path_history": f"""SELECT r.commit_id, p.identity FROM read_parquet({files[layout.PATHS]!r}) p
             JOIN read_parquet({files[layout.RANGES_IN_COMMITS]!r}) r USING (range_id)
             WHERE p.path = ?"""}
    out = {}
    for name, keys in (("provenance", [a.encode() for a in addrs]), ("path_history", paths)):
        lat = []
        for k in keys:
            if cold:
                drop_caches()
                con.close()
                con = duckdb.connect()
                con.execute("SET threads TO 2")
            t = time.perf_counter()
            con.execute(q[name], [k]).fetchall()
            lat.append(time.perf_counter() - t)
        out[name] = ms(lat)
    return out


def brute_queries(repo, addrs, paths, cap_s: float) -> dict:
    """The brute-force scan on the first keys until cap_s seconds have passed (each
    query also stops at cap_s; then its time is extrapolated from the commits scanned)."""
    out = {}
    commits = bruteforce.all_commits(repo)
    for name, keys in (("provenance", addrs), ("path_history", paths)):
        lat = []
        spent = time.monotonic()
        for k in keys[:3]:
            t = time.perf_counter()
            if name == "provenance":
                done = 0
                for c in commits:  # bruteforce.provenance, with a time cap
                    for info in repo.committed.iter_ranges(c.metarange):
                        for _key, value in repo.committed.ranges.range_items(info.id,
                                                                             fill_cache=False):
                            pass
                    done += 1
                    if time.perf_counter() - t > cap_s:
                        break
                lat.append((time.perf_counter() - t) * len(commits) / done)
            else:
                bruteforce.path_history(repo, "main", k)
                lat.append(time.perf_counter() - t)
            if time.monotonic() - spent > cap_s:
                break
        out[name] = {**ms(lat), "extrapolated": name == "provenance"}
    return out


# -- 4. scaling ----------------------------------------------------------------------------

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _synth_batch(lo: int, hi: int, stride: int) -> pa.RecordBatch:
    n = np.arange(lo, hi, dtype=np.uint64) * np.uint64(stride)
    digits = ((n[:, None] >> np.arange(60, -4, -4, dtype=np.uint64)) & np.uint64(15)).astype(np.uint8)
    hexd = _HEX[digits]  # (N, 16) ascii
    m = hi - lo
    addr = np.empty((m, 71), dtype=np.uint8)
    addr[:, :5] = np.frombuffer(b"data/", dtype=np.uint8)
    addr[:, 5:7] = hexd[:, :2]
    addr[:, 7] = ord("/")
    addr[:, 8:24] = hexd
    addr[:, 24:] = ord("0")
    rid = np.random.default_rng(lo).integers(0, 256, (m, 32), dtype=np.uint8)
    path = np.empty((m, 24), dtype=np.uint8)
    path[:, :8] = np.frombuffer(b"dir/file", dtype=np.uint8)
    path[:, 8:] = hexd
    def col(a):
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(a.shape[1]), m,
                                                    [None, pa.py_buffer(a.tobytes())]).cast(pa.binary())
    return pa.RecordBatch.from_arrays([col(addr), col(rid), col(path)],
                                      names=["address", "range_id", "path"])


def synth_table(base: str, rows: int, row_group_rows: int) -> tuple[str, list[bytes]]:
    """A store holding an index whose contents table has ``rows`` rows."""
    store_dir = os.path.join(base, f"synth-{rows}-{row_group_rows}")
    from gravfs.store import open_store
    store = open_store(store_dir)
    stride = (1 << 62) // rows
    tmp = os.path.join(base, "synth-tmp")
    os.makedirs(tmp, exist_ok=True)
    chunk = 1 << 20

    def batches():
        for lo in range(0, rows, chunk):
            yield _synth_batch(lo, min(rows, lo + chunk), stride)
    files = []
    for w in layout.write_sorted(layout.CONTENTS, batches(), tmp, "synth",
                                 row_group_rows=row_group_rows):
        files.append(layout.upload_file(store, layout.CONTENTS, "synth", w))
        os.unlink(w.path)
    manifests.save(store, manifests.Manifest([manifests.Run("synth", 0, 0, 0,
                                                            {layout.CONTENTS: files})]))
    rnd = random.Random(rows)
    keys = [bytes(_synth_batch(i, i + 1, stride).column(0)[0].as_py())
            for i in rnd.sample(range(rows), 1000)]
    return store_dir, keys


def synth_queries(base: str, store_dir: str, keys: list[bytes], cold_n: int) -> dict:
    from gravfs.store import open_store
    from gravfs.store.tier import LocalTier
    store = open_store(store_dir)
    tier = LocalTier(store, os.path.join(base, "synth-cache"), 1 << 40)
    out = {}
    reader = IndexReader(store, tier)
    lat = []
    for k in keys:
        t = time.perf_counter()
        assert len(reader.get(layout.CONTENTS, k)) == 1
        lat.append(time.perf_counter() - t)
    out["warm"] = ms(lat)
    lat = []
    for k in keys[:cold_n]:
        drop_caches()
        t = time.perf_counter()
        r = IndexReader(store, tier)
        assert len(r.get(layout.CONTENTS, k)) == 1
        lat.append(time.perf_counter() - t)
    out["cold"] = ms(lat)
    size = sum(f.bytes for f in reader.files(layout.CONTENTS))
    out["files"] = len(reader.files(layout.CONTENTS))
    out["bytes"] = size
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=2_000_000)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--change", type=int, default=100, help="entries changed per commit")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--cold", type=int, default=200, help="cold queries (each drops caches)")
    ap.add_argument("--synth", type=int, nargs="*", default=[1_000_000, 10_000_000, 30_000_000])
    ap.add_argument("--sweep", action="store_true", help="row-group sizes vs lookup time")
    ap.add_argument("--brute-cap", type=float, default=20.0)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--skip-repo", action="store_true", help="only the synthetic sections")
    ap.add_argument("--queries-only", action="store_true",
                    help="query the repository and index an earlier run left in --dir")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="bench-index-", dir="/var/tmp")
    os.makedirs(base, exist_ok=True)
    result = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "load_avg_start": os.getloadavg(), "cpus": os.cpu_count(),
              "row_group_rows": layout.ROW_GROUP_ROWS, "file_rows": layout.FILE_ROWS,
              "cache_dropped": drop_caches()}
    rnd = random.Random(7)
    if args.queries_only and not args.dir:
        ap.error("--queries-only needs the --dir of an earlier run")
    if not args.skip_repo:
        store_dir = os.path.join(base, "repo", "store")
        state_dir = os.path.join(base, "repo", "state")
        built = os.path.join(base, "built.json")
        if args.queries_only:
            with open(built) as f:
                result.update(json.load(f))
        else:
            repo, result["repository"] = make_repo(os.path.join(base, "repo"), args.entries,
                                                   args.commits, args.change)
            print(f"repository: {result['repository']}", flush=True)
            result["build"] = build(repo)
            md = metadata_bytes(store_dir)
            result["build"]["metadata_bytes"] = md
            result["build"]["index_vs_metadata"] = round(result["build"]["index_bytes"] / md, 3)
            print(f"build: {result['build']}", flush=True)
            repo.close()
            with open(built, "w") as f:
                json.dump({k: result[k] for k in ("repository", "build")}, f)
        repo = Repository.open(store_dir, state_dir)  # as a CLI query finds it (see above)
        gc.collect()
        reader = IndexReader(repo.store, repo.tier)
        addrs, paths = sample_keys(reader, args.queries, rnd)
        result["queries_warm"] = time_queries(repo, addrs, paths, cold=False)
        result["queries_cold"] = time_queries(repo, addrs[:args.cold], paths[:args.cold],
                                              cold=True)
        result["duckdb_warm"] = duckdb_queries(store_dir, reader, addrs[:200], paths[:200], False)
        result["duckdb_cold"] = duckdb_queries(store_dir, reader, addrs[:50], paths[:50], True)
        result["brute_force"] = brute_queries(repo, addrs, paths, args.brute_cap)
        print(json.dumps({k: result[k] for k in ("queries_warm", "queries_cold", "duckdb_warm",
                                                 "duckdb_cold", "brute_force")}), flush=True)
        repo.close()
    result["synthetic"] = {}
    for rows in args.synth:
        store_dir, keys = synth_table(base, rows, layout.ROW_GROUP_ROWS)
        result["synthetic"][rows] = synth_queries(base, store_dir, keys, min(args.cold, 100))
        print(f"synthetic {rows}: {result['synthetic'][rows]}", flush=True)
        shutil.rmtree(store_dir, ignore_errors=True)
        shutil.rmtree(os.path.join(base, "synth-cache"), ignore_errors=True)
    if args.sweep:
        result["sweep"] = {}
        for rg in (2048, 8192, 32768, 131072):
            store_dir, keys = synth_table(base, 5_000_000, rg)
            result["sweep"][rg] = synth_queries(base, store_dir, keys[:300], 50)
            print(f"row groups of {rg}: {result['sweep'][rg]}", flush=True)
            shutil.rmtree(store_dir, ignore_errors=True)
            shutil.rmtree(os.path.join(base, "synth-cache"), ignore_errors=True)
    result["load_avg_end"] = os.getloadavg()
    print_table(result)
    out_dir = os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"spark-index-{time.strftime('%Y%m%dT%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(f"\nwritten {path}")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def print_table(r: dict) -> None:
    print("\n| measure | p50 ms | p99 ms | n |\n|---|---|---|---|")
    for label, key in (("index warm", "queries_warm"), ("index cold", "queries_cold"),
                       ("DuckDB warm", "duckdb_warm"), ("DuckDB cold", "duckdb_cold"),
                       ("brute force", "brute_force")):
        for q in ("provenance", "path_history"):
            d = r.get(key, {}).get(q)
            if d:
                print(f"| {label} {q} | {d['p50_ms']} | {d['p99_ms']} | {d['n']} |")
    for rows, d in r.get("synthetic", {}).items():
        print(f"| synthetic {rows:,} rows warm / cold | {d['warm']['p50_ms']} / "
              f"{d['cold']['p50_ms']} | {d['warm']['p99_ms']} / {d['cold']['p99_ms']} | "
              f"{d['warm']['n']} / {d['cold']['n']} |")
    for rg, d in r.get("sweep", {}).items():
        print(f"| row groups of {rg} warm / cold ({d['bytes']:,} bytes) | {d['warm']['p50_ms']} / "
              f"{d['cold']['p50_ms']} | {d['warm']['p99_ms']} / {d['cold']['p99_ms']} | "
              f"{d['warm']['n']} / {d['cold']['n']} |")
    if "build" in r:
        b = r["build"]
        print(f"\nbuild: {b['seconds']} s, {b['rows_per_s']:,} rows/s, index {b['index_bytes']:,} "
              f"bytes = {b['index_vs_metadata']} x metadata ({b['metadata_bytes']:,} bytes)")


if __name__ == "__main__":
    sys.exit(main())
