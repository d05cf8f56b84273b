#!/usr/bin/env python3
"""Spark import benchmark (issue 11, first part): a local tree, Spark vs one process.

    scripts/bench_spark.py [--dirs 200] [--files 100] [--size 200] [--masters local[1],local[2]]
                           [--partitions N] [--tmp DIR] [--keep] [--no-json]

Builds a tree of DIRS date partitions x FILES tiny files (SIZE random bytes each,
like an event table's part files), then imports it into fresh repositories on a
local store (default range parameters, one break-policy seed) with

  single    the single-process ``gravfs import`` (gravfs.fs.importer.import_tree),
  spark     ``gravfs.spark.import_tree`` on each master (session start-up excluded,
            shown apart),

and checks that every import gives the same metarange ID. Prints a table
(files/s, wall and the driver's CPU time, driver peak RSS) and writes
bench/results/spark-<timestamp>.json. Times are wall clock on a shared
2-core machine: read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gravfs.fs.importer import import_tree as single_import  # noqa: E402
from gravfs.fs.repository import Repository  # noqa: E402
from gravfs.version.config import RepoSettings  # noqa: E402


def make_tree(root: str, dirs: int, files: int, size: int) -> int:
    rnd = random.Random(1)
    for d in range(dirs):
        sub = os.path.join(root, "events", f"date=2026-{1 + d // 28:02d}-{1 + d % 28:02d}")
        os.makedirs(sub)
        for f in range(files):
            with open(os.path.join(sub, f"part-{f:05d}.json"), "wb") as fh:
                fh.write(rnd.randbytes(size))
    return dirs * files


def run_single(tmp: str, src: str, settings) -> dict:
    store, state = os.path.join(tmp, "single-store"), os.path.join(tmp, "single-state")
    with Repository.init(store, state, settings=settings) as repo:
        c0 = time.process_time()
        t0 = time.monotonic()
        res = single_import(repo, src, "main", progress=False)
        wall = time.monotonic() - t0
        cpu = time.process_time() - c0
        return {"name": "single", "files": res.files, "seconds": wall, "cpu": cpu,
                "metarange": res.commit.metarange}


def run_spark(tmp: str, src: str, master: str, partitions, settings) -> dict:
    from gravfs.spark import import_tree, start_session

    name = f"spark {master}"
    store = os.path.join(tmp, f"store-{master}")
    state = os.path.join(tmp, f"state-{master}")
    t0 = time.monotonic()
    spark = start_session(master, [("spark.ui.enabled", "false"), ("spark.driver.memory", "2g")])
    start = time.monotonic() - t0
    try:
        with Repository.init(store, state, settings=settings) as repo:
            c0 = time.process_time()
            t0 = time.monotonic()
            res = import_tree(spark, repo, src, "main", partitions=partitions)
            wall = time.monotonic() - t0
            cpu = time.process_time() - c0
    finally:
        spark.stop()
    return {"name": name, "files": res.files, "seconds": wall, "cpu": cpu, "startup": start,
            "partitions": res.partitions, "ranges": res.ranges,
            "ranges_rewritten": res.ranges_rewritten, "metarange": res.commit.metarange}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--tmp")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-spark-", dir=args.tmp)
    try:
        src = os.path.join(tmp, "src")
        n = make_tree(src, args.dirs, args.files, args.size)
        settings = RepoSettings.new()  # one break-policy seed for all: comparable tree IDs
        rows = [run_single(tmp, src, settings)]
        for m in args.masters.split(","):
            rows.append(run_spark(tmp, src, m, args.partitions, settings))
        same = len({r["metarange"] for r in rows}) == 1
        print(f"tree: {n} files ({args.dirs} dirs x {args.files}, {args.size} B each); "
              f"same metarange ID for every import: {same}")
        print(f"{'import':<16} {'files/s':>9} {'wall s':>8} {'driver cpu s':>13} {'startup s':>10}"
              f" {'ranges':>7} {'rewritten':>9}")
        for r in rows:
            print(f"{r['name']:<16} {r['files'] / r['seconds']:>9,.0f} {r['seconds']:>8.1f} "
                  f"{r['cpu']:>13.1f} {r.get('startup', 0):>10.1f} {r.get('ranges', ''):>7} "
                  f"{r.get('ranges_rewritten', ''):>9}")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"driver process peak RSS: {peak:.0f} MiB (Spark's JVM and workers not included)")
        if not args.no_json:
            out = os.path.join(ROOT, "bench", "results",
                               f"spark-{time.strftime('%Y%m%d-%H%M%S')}.json")
            with open(out, "w") as f:
                json.dump({"args": vars(args), "files": n, "same_metarange": same,
                           "driver_peak_rss_mib": peak, "rows": rows}, f, indent=1)
            print(f"wrote {out}")
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
