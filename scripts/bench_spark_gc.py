#!/usr/bin/env python3
"""Benchmark of garbage collection on Spark (gravfs spark gc), local[2].

Mark: a repository of ENTRIES entries (a local store) with COMMITS commits of
CHANGES changed entries each (files of one directory), one a day (dated with the commit objects), so a
rule of N days keeps N+1 commits. Dry runs (mark and report, nothing deleted):
  - 100-day rule, cold mark cache;
  - COMMITS-day rule, cold mark cache (every commit kept);
  - the same again, nothing changed (the mark cache answers: ranges read 0).
The cost follows the distinct ranges (initial ranges + about CHANGES ranges a
commit), not commits x entries. The entries name data objects that are not
stored (the mark never reads data objects).

Sweep: DEAD unreferenced objects put on SeaweedFS (weed mini, started here),
then a run with --min-age 0 deletes them: objects deleted per second.

Driver peak memory: the Python driver's max RSS and the driver JVM's (VmHWM; in
local mode the executors' JVM side too); the repository is built in a child process.
Prints a table; writes bench/results/spark-gc-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from gravfs.data.objects import address_of  # noqa: E402
from gravfs.fs.entry import EntryInfo, entry_record  # noqa: E402
from gravfs.version.committed.results import Change  # noqa: E402
from gravfs.version.refs.commits import Commit  # noqa: E402
from gravfs.version.repository import VersionRepository  # noqa: E402
from gravfs.version.retention import DAY_NS, RetentionRules, save_rules  # noqa: E402

DAY = 86400


def _key(i: int) -> bytes:
    return f"part={i // 100000:04d}/dir{(i // 1000) % 100:02d}/file-{i:09d}.parquet".encode()


def _record(i: int, version: int):
    digest = hashlib.sha256(f"{i}:{version}".encode()).hexdigest()
    return entry_record(_key(i), EntryInfo(address=address_of(digest), size=1000 + i % 5000,
                                           mtime_ns=1_700_000_000_000_000_000 + i))


def build(store: str, state: str, entries: int, commits: int, changes: int) -> dict:
    """The dated history (see the module doc); returns build figures."""
    import random
    rng = random.Random(42)
    t0 = time.monotonic()
    repo = VersionRepository.init(store, state)
    now = time.time_ns()
    res = repo.committed.write_tree(_record(i, 0) for i in range(entries))
    mr = res.metarange_id
    head = repo.commits.get(repo.head("main", fresh=True))
    built = {"initial_tree_s": round(time.monotonic() - t0, 1),
             "initial_ranges": len(repo.committed.iter_ranges(mr))}
    version = {}
    for n in range(commits):
        if n:
            # a small change: a few files of one directory
            start = rng.randrange(max(1, entries - 10 * changes))
            picked = sorted(set(start + 7 * k for k in range(changes) if start + 7 * k < entries))
            chg = []
            for i in picked:
                version[i] = version.get(i, 0) + 1
                r = _record(i, version[i])
                chg.append(Change(r.key, r.identity, r.data))
            mr = repo.committed.apply(mr, chg).metarange_id
        head = repo.commits.put(Commit(mr, (head.id,), f"commit {n}", "bench",
                                       now - (commits - n) * DAY_NS + DAY_NS // 2,
                                       head.generation + 1, {}))
    _, version_token = repo.heads.branch("main")
    repo.heads.move_branch("main", version_token, head.id)
    built["seconds"] = round(time.monotonic() - t0, 1)
    built["final_ranges"] = len(repo.committed.iter_ranges(mr))
    repo.close()
    return built


def jvm_peak_rss(spark) -> int:
    try:
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except Exception:
        pass
    return 0


def mark_runs(spark, store: str, state: str, commits: int) -> list[dict]:
    from gravfs.spark.gc import gc
    from gravfs.store import open_store
    s = open_store(store)
    out = []
    for label, days, cold in (("mark, 100 commits (cold)", 100, True),
                              (f"mark, {commits} commits (cold)", commits, True),
                              (f"mark, {commits} commits, unchanged (warm)", commits, False)):
        save_rules(s, RetentionRules(days))
        if cold:
            s.delete_many([i.key for i in s.list_info("_gravfs/gc/cache/")])
        t = time.monotonic()
        r = gc(spark, store, state_dir=state, dry_run=True, min_age=0)
        out.append({"run": label, "seconds": round(time.monotonic() - t, 1),
                    "kept_commits": r.kept_commits, "metaranges": r.metaranges,
                    "ranges": r.ranges, "ranges_read": r.ranges_read,
                    "phases": r.seconds})
        print(f"  {label}: {out[-1]}", flush=True)
    return out


FLOOR_OBJECTS = 100_000


def delete_floor(store, n: int, threads: int) -> dict:
    """The server's own delete rate: ``n`` other objects put, then deleted with
    DeleteObjects of 1,000 keys from 2 x SWEEP_THREADS threads (as two sweep tasks
    send them), with no listing and no report: what a sweep cannot beat here."""
    from gravfs.spark.gctasks import DELETE_BATCH, SWEEP_THREADS
    keys = [address_of(hashlib.sha256(f"floor {i}".encode()).hexdigest()) for i in range(n)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: store.put(k, b"x"), keys, chunksize=256))
    batches = [keys[i:i + DELETE_BATCH] for i in range(0, n, DELETE_BATCH)]
    t = time.monotonic()
    with ThreadPoolExecutor(2 * SWEEP_THREADS) as pool:
        list(pool.map(store.delete_many, batches))
    secs = time.monotonic() - t
    left = sum(1 for _ in store.list("data/"))
    return {"objects": n, "seconds": round(secs, 2), "deleted_per_s": round(n / secs),
            "left": left}


def sweep_run(spark, server, dead: int, threads: int) -> dict:
    from gravfs.spark.gc import gc
    from gravfs.version.repository import VersionRepository as VR
    url = f"s3://{server.bucket}/gc-bench-{int(time.time())}"
    state = tempfile.mkdtemp(prefix="gravfs-gc-bench-state-")
    repo = VR.init(url, state)
    save_rules(repo.store, RetentionRules(0))
    store = repo.store
    t = time.monotonic()

    def put(i: int) -> None:
        store.put(address_of(hashlib.sha256(f"dead {i}".encode()).hexdigest()), b"x")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(dead), chunksize=256))
    put_s = time.monotonic() - t
    repo.close()
    # the store's last-modified has whole seconds: objects put in the second the run
    # starts would count as young (kept); let that second pass
    time.sleep(1.5)
    t = time.monotonic()
    r = gc(spark, url, state_dir=state, min_age=0)
    total = time.monotonic() - t
    sweep_s = r.seconds.get("sweep", total)
    floor = delete_floor(store, min(dead, FLOOR_OBJECTS), threads)
    shutil.rmtree(state, ignore_errors=True)
    return {"floor": floor, "dead_objects": dead, "put_seconds": round(put_s, 1),
            "deleted": r.deleted_objects, "sweep_seconds": sweep_s,
            "expired": r.expired_objects, "young": r.young_objects,
            "deleted_per_s": round(r.deleted_objects / sweep_s) if sweep_s else None,
            "run_seconds": round(total, 1), "phases": r.seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=10_000_000)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=10, help="entries changed per commit")
    ap.add_argument("--dead", type=int, default=1_000_000, help="objects the sweep deletes")
    ap.add_argument("--threads", type=int, default=32, help="threads putting dead objects")
    ap.add_argument("--skip-mark", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="gravfs-gc-bench-")
    results: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "params": vars(a),
                     "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()}}
    server = None
    try:
        if not a.skip_sweep:  # before Spark starts: its workers inherit the S3 environment
            from s3server import SeaweedServer, find_weed
            from fuse_util import s3_env
            server = SeaweedServer(os.path.join(base, "weed"), find_weed())
            server.start()
            os.environ.update(s3_env(server))
        from gravfs.spark.runtime import start_session
        spark = start_session("local[2]", [("spark.ui.enabled", "false"),
                                           ("spark.driver.memory", "2g")])
        try:
            if not a.skip_mark:
                store, state = os.path.join(base, "store"), os.path.join(base, "state")
                print(f"building {a.entries} entries, {a.commits} commits ...", flush=True)
                # in a child process: the driver's peak memory is then the collector's
                import multiprocessing
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    results["build"] = pool.apply(build, (store, state, a.entries, a.commits,
                                                          a.changes))
                print(f"  {results['build']}", flush=True)
                results["mark"] = mark_runs(spark, store, state, a.commits)
            if not a.skip_sweep:
                print(f"sweep of {a.dead} dead objects on SeaweedFS ...", flush=True)
                results["sweep"] = sweep_run(spark, server, a.dead, a.threads)
                print(f"  {results['sweep']}", flush=True)
            results["driver_peak_rss"] = {
                "python": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "jvm": jvm_peak_rss(spark)}
        finally:
            spark.stop()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"spark-gc-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print(table(results))
    print(f"wrote {path}")
    return 0


def table(r: dict) -> str:
    lines = ["| run | seconds | kept commits | ranges | ranges read |", "|---|---|---|---|---|"]
    for m in r.get("mark", []):
        lines.append(f"| {m['run']} | {m['seconds']} | {m['kept_commits']} | {m['ranges']} | "
                     f"{m['ranges_read']} |")
    s = r.get("sweep")
    if s:
        f = s["floor"]
        lines.append(f"| floor: DeleteObjects of {f['objects']} objects, no listing | "
                     f"{f['seconds']} | | {f['deleted_per_s']}/s | |")
        lines.append(f"| sweep of {s['dead_objects']} dead objects (SeaweedFS) | "
                     f"{s['sweep_seconds']} | deleted {s['deleted']} | "
                     f"{s['deleted_per_s']}/s | |")
    p = r.get("driver_peak_rss", {})
    if p:
        lines.append(f"| driver peak RSS: Python {p['python'] >> 20} MiB, JVM "
                     f"{p['jvm'] >> 20} MiB | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
