#!/usr/bin/env python3
"""Repository benchmarks (issue 3): commit throughput, small commits on big branches,
merge, and listing through tombstones before/after compaction (lakeFS issue 2092).

Prints a table and writes bench/results/repo-<timestamp>.json. Each figure is the
median of --repeat runs. Baseline measured in the same run: RocksDB (rocksdict)
ingesting the same keys with a WriteBatch, the floor for "put N keys somewhere";
and the one-process floor of gravfs's own format (the records' lakeFS record IDs
plus writing them into an SST), which a single-process commit cannot go below.

    scripts/bench_repo.py [--quick] [--s3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gravfs.fs.entry import EntryInfo, encode_entry, entry_identity  # noqa: E402
from gravfs.version.committed import METARANGES_PREFIX, RANGES_PREFIX  # noqa: E402
from gravfs.version.committed.record import decode_identity, encode_value, value_record_id  # noqa: E402
from gravfs.sstable.writer import write_sst  # noqa: E402
from gravfs.version.refs.commits import Commit  # noqa: E402
from gravfs.fs.repository import Repository  # noqa: E402
from gravfs.version.compaction import compact  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "results")


DAY_FILES = 20000  # files per day partition of the default shape
MAX_DAYS = 100000  # day=%05d: more days would break the keys' order


def key(i: int, day_files: int = DAY_FILES) -> bytes:
    """Data-lake style path; increasing with i (``day_files`` files per day partition)."""
    return b"tables/events/day=%05d/part-%08d.parquet" % (i // day_files, i)


def value_for(i: int, addr: str) -> bytes:
    data = encode_entry(EntryInfo(address=addr, size=1000 + i % 977, mtime_ns=1_700_000_000_000_000_000 + i))
    return encode_value(entry_identity(data), data)


def stage_raw(repo: Repository, branch: str, keys, values) -> None:
    """Stage pre-encoded values straight into LMDB (what a bulk writer does)."""
    base = repo.head(branch)
    batch = 50_000
    for s in range(0, len(keys), batch):
        repo.staging.put_many(branch, list(zip(keys[s:s + batch], values[s:s + batch])), base)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def timed_cpu(fn, repo=None):
    """(wall, CPU of this process and of the repository's worker processes, result)."""
    workers = (lambda: repo.committed.worker_cpu_seconds()) if repo is not None and hasattr(
        repo.committed, "worker_cpu_seconds") else (lambda: 0.0)
    t, c, w = time.perf_counter(), time.process_time(), workers()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c + workers() - w, out


def tree_objects(store) -> set[str]:
    """The store's range and metarange keys (what a commit, merge or apply writes)."""
    return set(store.list(RANGES_PREFIX)) | set(store.list(METARANGES_PREFIX))


def fresh_repo(root: str, url: str | None = None) -> Repository:
    store = url or os.path.join(root, "store")
    return Repository.init(store, os.path.join(root, "state"))


def build_branch(repo: Repository, n: int, addr: str, day_files: int = DAY_FILES) -> str:
    """A committed n-entry main branch, written directly as a tree (setup, not measured)."""
    if -(-n // day_files) > MAX_DAYS:
        raise ValueError(f"{n:,} entries at {day_files:,} a day need more than {MAX_DAYS:,} days")

    def records():
        for i in range(n):
            data = encode_entry(EntryInfo(address=addr, size=1000 + i % 977,
                                          mtime_ns=1_700_000_000_000_000_000 + i))
            yield key(i, day_files), entry_identity(data), data
    mr = repo.committed.write_metarange(records())
    head = repo.commits.get(repo.head("main"))
    c = repo.commits.put(Commit(mr, (head.id,), f"{n} entries", "bench", time.time_ns(), 1, {}))
    _, version = repo.heads.branch("main")
    repo.heads.move_branch("main", version, c.id)
    repo.forget_head("main")
    return c.id


def commit_bulk_run(n: int, keys: list[bytes], tmp: str) -> tuple[float, float, float]:
    """(wall, CPU incl. worker processes) of committing n freshly staged entries, and
    the wall time of staging them (which hashes their record IDs: see staging.area)."""
    root = tempfile.mkdtemp(dir=tmp)
    repo = fresh_repo(root)
    addr, _ = repo.data.put_bytes(b"x")
    values = [value_for(i, addr) for i in range(n)]
    stage_s, _ = timed(lambda: stage_raw(repo, "main", keys, values))
    del values
    dt, cpu, _ = timed_cpu(lambda: repo.commit("main", "bulk"), repo)
    repo.close()
    shutil.rmtree(root, ignore_errors=True)
    return dt, cpu, stage_s


def bench_commit_bulk(n: int, repeat: int, tmp: str) -> tuple[dict, dict, dict]:
    """commit_bulk, rocksdb_ingest and commit_floor of n entries: each run once per
    round, ``repeat`` rounds (the machine's speed drifts: interleaved, a slow spell
    hits all three), medians."""
    keys = sorted(key(i) for i in range(n))
    times, cpus, stages, ingests, floors = [], [], [], [], []
    for _ in range(repeat):
        dt, cpu, stage_s = commit_bulk_run(n, keys, tmp)
        times.append(dt)
        cpus.append(cpu)
        stages.append(stage_s)
        ingests.append(bench_rocksdb_ingest(n, tmp))
        floors.append(bench_commit_floor(n, tmp))
    med = statistics.median(times)
    cpu = statistics.median(cpus)
    bulk = {"entries": n, "seconds": med, "entries_per_s": n / med, "runs": times,
            "cpu_seconds": cpu, "entries_per_cpu_s": n / cpu, "runs_cpu": cpus,
            "stage_seconds": statistics.median(stages), "runs_stage": stages}
    return bulk, _median_run(ingests), _median_run(floors)


def _median_run(runs: list[dict]) -> dict:
    """The run with the median time, with every run's rate under "runs"."""
    pick = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {**pick, "runs": [r["entries_per_s"] for r in runs]}


def bench_commit_floor(n: int, tmp: str) -> dict:
    """What one process cannot avoid when it stages and commits n new records in
    gravfs's format (the same keys and values as commit_bulk): their lakeFS
    valueRecordIDs (three SHA-256 each, which range IDs are built from; staging
    hashes them, so commit_bulk's commit does not) and writing them into SSTs
    through rocksdict. No staging read, no range breaks, no upload."""
    from itertools import starmap
    keys = [key(i) for i in range(n)]
    values = [value_for(i, "data/00/" + "0" * 64) for i in range(n)]
    idents = [decode_identity(v) for v in values]
    t = time.perf_counter()
    ids = list(starmap(value_record_id, zip(keys, idents)))
    ids_s = time.perf_counter() - t
    path = os.path.join(tmp, "floor.sst")
    t = time.perf_counter()
    write_sst(path, zip(keys, values), sync=False)
    sst_s = time.perf_counter() - t
    os.unlink(path)
    assert len(ids) == n
    return {"entries": n, "record_ids_seconds": ids_s, "sst_write_seconds": sst_s,
            "seconds": ids_s + sst_s, "entries_per_s": n / (ids_s + sst_s)}


def bench_rocksdb_ingest(n: int, tmp: str) -> dict:
    from rocksdict import Options, Rdict, WriteBatch
    path = tempfile.mkdtemp(dir=tmp)
    db = Rdict(path, Options(raw_mode=True))
    keys = [key(i) for i in range(n)]
    value = value_for(0, "data/00/" + "0" * 64)
    t, c = time.perf_counter(), time.process_time()
    wb = WriteBatch(raw_mode=True)
    for k in keys:
        wb.put(k, value)
    db.write(wb)
    db.flush()
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    db.close()
    Rdict.destroy(path)
    return {"entries": n, "seconds": dt, "entries_per_s": n / dt, "cpu_seconds": cpu,
            "entries_per_cpu_s": n / cpu}


def bench_one_change(n: int, repeat: int, tmp: str, url: str | None, label: str) -> dict:
    root = tempfile.mkdtemp(dir=tmp)
    repo = fresh_repo(root, url)
    addr, _ = repo.data.put_bytes(b"x")
    t0 = time.perf_counter()
    build_branch(repo, n, addr)
    setup = time.perf_counter() - t0
    times, stats = [], []
    real_apply = repo.committed.apply

    def apply(*a, **kw):  # capture the I/O counts of the commit's apply
        res = real_apply(*a, **kw)
        stats.append(res.stats.as_dict())
        return res

    repo.committed.apply = apply
    for r in range(repeat):
        k = key((r * 7919 * 13) % n)
        repo.staging.put_many("main", [(k, value_for(n + r, addr))], repo.head("main"))
        dt, c = timed(lambda: repo.commit("main", f"one change {r}"))
        times.append(dt)
    repo.close()
    shutil.rmtree(root, ignore_errors=True)
    return {"entries": n, "store": label, "seconds": statistics.median(times), "runs": times,
            "setup_seconds": setup, "io": stats}


def bench_merge(n: int, changes: int, repeat: int, tmp: str) -> dict:
    """Merge b into main (a merged already); also into main-1p, the same head, by one
    process (workers=1): same tree, and the single-process figure beside it. Each merge
    stores its ranges (the first one's are deleted before the second)."""
    times, cpus, single, single_cpus, written, single_written = [], [], [], [], [], []
    for r in range(repeat):
        root = tempfile.mkdtemp(dir=tmp)
        repo = fresh_repo(root)
        addr, _ = repo.data.put_bytes(b"x")
        build_branch(repo, n, addr)
        repo.create_branch("a")
        repo.create_branch("b")
        step = n // changes
        stage_raw(repo, "a", [key(i * step) for i in range(changes)],
                  [value_for(i + n, addr) for i in range(changes)])
        stage_raw(repo, "b", [key(i * step + 1) for i in range(changes)],
                  [value_for(i + 2 * n, addr) for i in range(changes)])
        repo.commit("a", "a")
        repo.commit("b", "b")
        repo.merge("a", "main")
        repo.create_branch("main-1p", "main")
        stored = tree_objects(repo.store)
        dt, cpu, c = timed_cpu(lambda: repo.merge("b", "main"), repo)
        wrote = tree_objects(repo.store) - stored
        times.append(dt)
        cpus.append(cpu)
        written.append(len(wrote))
        parallel_workers = getattr(repo.committed, "workers", 1)
        if parallel_workers > 1:
            # the one-process merge makes the same tree: with the first merge's ranges
            # still stored it would find them there and be timed without the writes
            # (main's head is not read again: only the two commits' metarange IDs are)
            repo.store.delete_many(sorted(wrote))
            before = tree_objects(repo.store)
            repo.committed.workers = 1
            dt1, cpu1, c1 = timed_cpu(lambda: repo.merge("b", "main-1p"), repo)
            repo.committed.workers = parallel_workers
            if repo.commits.get(c1.id).metarange != repo.commits.get(c.id).metarange:
                raise SystemExit("merge on worker processes and in one process gave different trees")
            single.append(dt1)
            single_cpus.append(cpu1)
            single_written.append(len(tree_objects(repo.store) - before))
        repo.close()
        shutil.rmtree(root, ignore_errors=True)
    out = {"base_entries": n, "changes_per_branch": changes, "seconds": statistics.median(times),
           "runs": times, "cpu_seconds": statistics.median(cpus), "runs_cpu": cpus,
           "workers": parallel_workers, "objects_written": statistics.median(written)}
    if single:
        out.update(single_process_seconds=statistics.median(single),
                   single_process_cpu_seconds=statistics.median(single_cpus),
                   single_process_runs=single,
                   single_process_objects_written=statistics.median(single_written))
    return out


def bench_tombstones(n_deleted: int, repeat: int, tmp: str) -> dict:
    root = tempfile.mkdtemp(dir=tmp)
    repo = fresh_repo(root)
    addr, _ = repo.data.put_bytes(b"x")
    total = n_deleted + 1000
    keys = [b"t/%08d" % i for i in range(total)]
    stage_raw(repo, "main", keys, [value_for(i, addr) for i in range(total)])
    repo.commit("main", "base")
    stage_raw(repo, "main", keys[:n_deleted], [None] * n_deleted)

    def listing():
        return repo.list_dir("main", "t", limit=100)

    before = [timed(listing)[0] for _ in range(repeat)]
    assert len(listing()) == 100
    dt_compact, _ = timed(lambda: compact(repo, "main"))
    after = [timed(listing)[0] for _ in range(repeat)]
    repo.close()
    shutil.rmtree(root, ignore_errors=True)
    b, a = statistics.median(before), statistics.median(after)
    return {"tombstones": n_deleted, "list_before_s": b, "list_after_s": a, "speedup": b / a,
            "compaction_s": dt_compact}


def bench_status(n: int, counts: list[int], repeat: int, tmp: str) -> list[dict]:
    """status of m staged changes spread evenly over an n-entry branch (each run in a
    repository opened afresh: a CLI command's cold caches), against what bounds it
    from outside: RocksDB's multi-get of the same m keys from the same n
    entries (one lookup each), and the commit of those changes (which reads the
    same ranges and writes them)."""
    from rocksdict import Options, Rdict, WriteBatch
    root = tempfile.mkdtemp(dir=tmp)
    repo = fresh_repo(root)
    store, state = os.path.join(root, "store"), os.path.join(root, "state")
    addr, _ = repo.data.put_bytes(b"x")
    build_branch(repo, n, addr)
    path = tempfile.mkdtemp(dir=tmp)
    db = Rdict(path, Options(raw_mode=True))
    for s in range(0, n, 100_000):  # a write batch per 100k keys
        wb = WriteBatch(raw_mode=True)
        for i in range(s, min(n, s + 100_000)):
            wb.put(key(i), value_for(i, addr))
        db.write(wb)
    db.flush()
    out = []
    for m in counts:
        picked = range(0, n, n // m)[:m]
        keys = [key(i) for i in picked]
        stage_raw(repo, "main", keys, [value_for(i + 1, addr) for i in picked])
        repo.close()  # each status in a repository opened afresh, as each CLI command is
        runs, under, rows = [], [], 0
        for _ in range(repeat):
            repo = Repository.open(store, state)
            dt, listed = timed(lambda: repo.status("main"))
            runs.append(dt)
            rows = len(listed)
            repo.close()
            repo = Repository.open(store, state)  # status -- PARTITION (a 50th of the tree)
            under.append(timed(lambda: repo.status("main", [key(n // 2).rsplit(b"/", 1)[0]]))[0])
            repo.close()
        repo = Repository.open(store, state)
        gets = [timed(lambda: db[keys])[0] for _ in range(repeat)]
        commit_s, _ = timed(lambda: repo.commit("main", f"{m} changes"))
        out.append({"entries": n, "changes": m, "rows": rows, "seconds": statistics.median(runs),
                    "runs": runs,
                    "under_partition_seconds": statistics.median(under), "runs_under": under,
                    "rocksdb_multi_get_seconds": statistics.median(gets),
                    "runs_rocksdb": gets, "commit_seconds": commit_s})
    db.close()
    Rdict.destroy(path)
    repo.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke run)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--s3", action="store_true", help="also run the one-change commit on SeaweedFS")
    ap.add_argument("--tmp", default=None, help="directory to work in (a temporary directory "
                    "is made inside it and removed at the end; DIR itself is left alone)")
    ap.add_argument("--only", default="commit_bulk,one_change,merge,tombstones,status",
                    help="comma-separated sections to run")
    ap.add_argument("--merge-repeat", type=int, help="runs of the merge (default --repeat)")
    args = ap.parse_args()
    for flag, n in (("--repeat", args.repeat), ("--merge-repeat", args.merge_repeat)):
        if n is not None and n < 1:
            ap.error(f"{flag}: at least 1 run (got {n})")
    only = set(args.only.split(","))
    tmp = tempfile.mkdtemp(prefix="gravfs-bench-", dir=args.tmp)
    big = [100_000, 1_000_000] if not args.quick else [10_000, 50_000]
    trees = [1_000_000, 10_000_000] if not args.quick else [50_000, 200_000]
    res: dict = {"machine": {"cpus": os.cpu_count()}, "quick": args.quick}

    res["commit_bulk"], res["rocksdb_ingest"], res["one_change"] = [], [], []
    if "commit_bulk" in only:
        res["commit_floor"] = []
        for n in big:
            bulk, ingest, floor = bench_commit_bulk(n, args.repeat, tmp)
            res["commit_bulk"].append(bulk)
            res["rocksdb_ingest"].append(ingest)
            res["commit_floor"].append(floor)
        print("commit_bulk", res["commit_bulk"], flush=True)
    if "one_change" in only:
        res["one_change"] = [bench_one_change(n, args.repeat, tmp, None, "local") for n in trees]
        print("one_change", res["one_change"], flush=True)
    if args.s3 and "one_change" in only:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from tests.s3server import SeaweedServer, find_weed
        srv = SeaweedServer(os.path.join(tmp, "weed"), find_weed())
        srv.start()
        try:
            os.environ.update(AWS_ACCESS_KEY_ID=srv.access_key, AWS_SECRET_ACCESS_KEY=srv.secret_key,
                              GRAVFS_S3_ENDPOINT=srv.endpoint_url)
            res["one_change"] += [bench_one_change(trees[0], args.repeat, tmp,
                                                   f"s3://{srv.bucket}/bench-{time.time_ns()}", "seaweedfs")]
        finally:
            srv.stop()
    if "merge" in only:
        res["merge"] = bench_merge(trees[0], 1000 if not args.quick else 100,
                                   args.merge_repeat or args.repeat, tmp)
    if "tombstones" in only:
        res["tombstones"] = bench_tombstones(100_000 if not args.quick else 10_000, args.repeat, tmp)
    if "status" in only:
        res["status"] = bench_status(trees[0], [10_000, trees[0]] if not args.quick else
                                     [1_000, trees[0]], args.repeat, tmp)

    print(f"\n{'benchmark':<44}{'figure':>16}{'baseline / goal':>30}")
    for b, r in zip(res["commit_bulk"], res["rocksdb_ingest"]):
        print(f"{'commit ' + format(b['entries'], ',') + ' staged entries':<44}"
              f"{b['entries_per_s']:>12,.0f} e/s{'RocksDB ingest ' + format(r['entries_per_s'], ',.0f') + ' e/s':>30}"
              f"   ratio {b['entries_per_s'] / r['entries_per_s']:.2f}; per CPU second "
              f"{b['entries_per_cpu_s']:,.0f} vs {r['entries_per_cpu_s']:,.0f} e/s; "
              f"staging them took {b['stage_seconds']:.2f} s")
    for f, r in zip(res.get("commit_floor", []), res["rocksdb_ingest"]):
        print(f"{'  one-process floor, ' + format(f['entries'], ',') + ' records':<44}"
              f"{f['entries_per_s']:>12,.0f} e/s{'RocksDB ingest ' + format(r['entries_per_s'], ',.0f') + ' e/s':>30}"
              f"   ratio {f['entries_per_s'] / r['entries_per_s']:.2f} (record IDs "
              f"{f['record_ids_seconds']:.2f} s + SST write {f['sst_write_seconds']:.2f} s)")
    for o in res["one_change"]:
        print(f"{'commit 1 change in ' + format(o['entries'], ',') + ' (' + o['store'] + ')':<44}"
              f"{o['seconds'] * 1000:>13.1f} ms{'ranges r/w ' + str(o['io'][0]['ranges_read']) + '/' + str(o['io'][0]['ranges_written']) + ', metaranges w ' + str(o['io'][0]['metaranges_written']):>30}")
    m = res.get("merge")
    if m:
        single = (f"1 process {m['single_process_seconds'] * 1000:,.0f} ms "
                  f"(CPU {m['single_process_cpu_seconds'] * 1000:,.0f})") if "single_process_seconds" in m else ""
        print(f"{'merge ' + str(m['changes_per_branch']) + '+' + str(m['changes_per_branch']) + ' changes on ' + format(m['base_entries'], ','):<44}"
              f"{m['seconds'] * 1000:>13.1f} ms   {single:>30}   CPU {m['cpu_seconds'] * 1000:,.0f} ms, "
              f"{m['workers']} workers, {m['objects_written']:,.0f} ranges and metaranges written"
              + (f" (1 process {m['single_process_objects_written']:,.0f})"
                 if "single_process_objects_written" in m else ""))
    t = res.get("tombstones")
    if t:
        print(f"{'list 100 after ' + format(t['tombstones'], ',') + ' tombstones':<44}"
              f"{t['list_before_s'] * 1000:>13.1f} ms{'after compaction ' + format(t['list_after_s'] * 1000, '.2f') + ' ms':>30}")
    for st in res.get("status", []):
        print(f"{'status of ' + format(st['changes'], ',') + ' changes on ' + format(st['entries'], ','):<44}"
              f"{st['seconds'] * 1000:>13.1f} ms"
              f"{'RocksDB multi-get ' + format(st['rocksdb_multi_get_seconds'] * 1000, ',.1f') + ' ms':>30}"
              f"   ratio {st['seconds'] / st['rocksdb_multi_get_seconds']:.2f}x the time; "
              f"their commit {st['commit_seconds'] * 1000:,.0f} ms; "
              f"status -- one partition {st['under_partition_seconds'] * 1000:,.1f} ms")
    os.makedirs(RESULTS, exist_ok=True)
    out = os.path.join(RESULTS, f"repo-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"\nwrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
