#!/usr/bin/env python3
"""Benchmark of gravfs's metadata DataFrames and incremental export on Spark (local[2]).

Sections (each runnable alone with --sections):

- entries: a commit of N entries (default 10M) written to Parquet by
  ``gravfs.spark.tables.write_entries`` (one task per range): entries/s.
- incremental: a commit of M files (default 1M) and a change of 1% of them,
  exported with ``--since`` (``run_export``): ranges read against the ranges of
  the two trees (goal: at most 2%), and the time against copying only the
  changed bytes (the changed objects copied file by file, one process, no
  Spark). Two shapes of change: *clustered* (1% of the files in one run of
  keys: partitions rewritten, the common case of a data lake) and *uniform*
  (1% of the files picked at random: every range changes, the worst case).
  The export of the base commit is not materialized (DEST gets only its
  _SUCCESS): the incremental export does its own work only (copies into an
  empty tree, deletions of nothing).

Trees are written directly (setup, not measured), as scripts/bench_repo.py's
build_branch does; the repositories use the default range settings. Prints a
table per section; JSON goes to bench/results/spark-export-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gravfs.fs.entry import EntryInfo, encode_entry, entry_identity  # noqa: E402
from gravfs.fs.repository import Repository  # noqa: E402
from gravfs.version.refs.commits import Commit  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                       "results")
CONF = [("spark.ui.enabled", "false"), ("spark.driver.memory", "2g"),
        ("spark.sql.shuffle.partitions", "4")]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def key(i: int) -> bytes:
    return b"events/part=%05d/file-%08d.parquet" % (i // 1000, i)


def build(repo: Repository, n: int, addr: str, parent: str | None = None) -> str:
    """Commit n file entries (all naming ``addr``) as main's head; its id."""
    variants = []
    for v in range(997):  # distinct sizes and mtimes, encoded once
        data = encode_entry(EntryInfo(address=addr, size=1000 + v,
                                      mtime_ns=1_700_000_000_000_000_000 + v * 1_000_000))
        variants.append((entry_identity(data), data))

    def records():
        for i in range(n):
            ident, data = variants[i % 997]
            yield key(i), ident, data
    mr = repo.committed.write_metarange(records())
    return _commit(repo, mr, f"{n} entries")


def _commit(repo: Repository, mr: str, message: str) -> str:
    head = repo.commits.get(repo.head("main", fresh=True))
    c = repo.commits.put(Commit(mr, (head.id,), message, "bench", time.time_ns(),
                                head.generation + 1, {}))
    _, version = repo.heads.branch("main")
    repo.heads.move_branch("main", version, c.id)
    repo.forget_head("main")
    return c.id


def changed_commit(repo: Repository, base: str, picks: list[int], size: int,
                   rnd: random.Random) -> tuple[str, list[tuple[bytes, str]]]:
    """A commit on top of ``base`` whose files ``picks`` have new contents of ``size``
    bytes (stored as data objects); returns it and (key, address) of each change."""
    changes, out = [], []
    for i in sorted(picks):
        addr, n = repo.data.put_bytes(rnd.randbytes(size))
        e = EntryInfo(address=addr, size=n, mtime_ns=1_800_000_000_000_000_000 + i)
        data = encode_entry(e)
        changes.append((key(i), entry_identity(data), data))
        out.append((key(i), addr))
    base_mr = repo.commits.get(base).metarange
    mr = repo.committed.apply(base_mr, changes).metarange_id
    head = repo.commits.get(base)
    c = repo.commits.put(Commit(mr, (base,), f"{len(picks)} changed", "bench", time.time_ns(),
                                head.generation + 1, {}))
    return c.id, out


def start(master: str):
    from gravfs.spark.runtime import start_session
    return start_session(master, CONF)


def bench_entries(tmp: str, n: int, master: str) -> dict:
    from gravfs.spark.tables import write_entries
    import pyarrow.parquet as pq
    root = tempfile.mkdtemp(dir=tmp)
    repo = Repository.init(os.path.join(root, "store"), os.path.join(root, "state"))
    addr, _ = repo.data.put_bytes(b"x")
    log(f"entries: building a {n:,}-entry commit")
    t0 = time.perf_counter()
    cid = build(repo, n, addr)
    setup = time.perf_counter() - t0
    mr = repo.committed.metarange(repo.commits.get(cid).metarange)
    log(f"entries: built in {setup:.0f}s ({len(mr)} ranges); writing Parquet on {master}")
    spark = start(master)
    try:
        out = os.path.join(root, "entries.parquet")
        t0 = time.perf_counter()
        res = write_entries(spark, repo, cid, out)
        secs = time.perf_counter() - t0
    finally:
        spark.stop()
    rows = sum(pq.ParquetFile(os.path.join(out, f)).metadata.num_rows
               for f in os.listdir(out) if f.endswith(".parquet"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    repo.close()
    shutil.rmtree(root, ignore_errors=True)
    assert rows == n, (rows, n)
    return {"entries": n, "ranges": res["ranges"], "seconds": round(secs, 2),
            "entries_per_s": round(n / secs), "parquet_bytes": size,
            "setup_seconds": round(setup, 1), "master": master}


def _copy_changed(repo: Repository, changed: list[tuple[bytes, str]], dest: str) -> float:
    """The floor: the changed objects copied to their paths, one process."""
    t0 = time.perf_counter()
    for k, addr in changed:
        path = os.path.join(dest, os.fsdecode(k))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(repo.store.local_path(addr), path)  # the local store's file
    return time.perf_counter() - t0


def bench_incremental(tmp: str, m: int, pct: float, size: int, master: str) -> dict:
    from gravfs.spark.export import check_export, run_export
    from gravfs.spark.exportdest import SUCCESS
    from gravfs.spark.treediff import plan
    root = tempfile.mkdtemp(dir=tmp)
    repo = Repository.init(os.path.join(root, "store"), os.path.join(root, "state"))
    addr, _ = repo.data.put_bytes(b"x" * 1000)
    log(f"incremental: building a {m:,}-file commit")
    base = build(repo, m, addr)
    k = max(1, int(m * pct / 100))
    rnd = random.Random(7)
    start_at = rnd.randrange(0, m - k)
    shapes = {"clustered": list(range(start_at, start_at + k)),
              "uniform": rnd.sample(range(m), k)}
    out: dict = {"files": m, "changed": k, "changed_bytes": k * size, "master": master,
                 "shapes": {}}
    spark = start(master)
    try:
        for shape, picks in shapes.items():
            log(f"incremental/{shape}: {k:,} files changed ({size} bytes each)")
            new, changed = changed_commit(repo, base, picks, size, rnd)
            p = plan(repo, base, new)
            it = repo.diff(base, new)
            n_diff = sum(1 for _ in it)
            dest = os.path.join(root, f"export-{shape}")
            os.makedirs(dest)
            with open(os.path.join(dest, SUCCESS), "w") as f:  # the base export, finished
                json.dump({"commit": base}, f)
            t0 = time.perf_counter()
            res = run_export(spark, repo, check_export(repo, new, dest, since=base))
            secs = time.perf_counter() - t0
            floor = _copy_changed(repo, changed, os.path.join(root, f"floor-{shape}"))
            total = p.ranges_left + p.ranges_right
            out["shapes"][shape] = {
                "seconds": round(secs, 2), "floor_seconds": round(floor, 2),
                "ranges_read": res["ranges_read"], "ranges_total": total,
                "ranges_read_pct": round(100 * res["ranges_read"] / total, 2),
                "single_process_diff_ranges_read": it.stats.ranges_read,
                "differences": n_diff, "copied": res["copied"],
                "bytes_copied": res["bytes_copied"]}
            log(f"incremental/{shape}: {out['shapes'][shape]}")
    finally:
        spark.stop()
        repo.close()
        shutil.rmtree(root, ignore_errors=True)
    return out


def table(results: dict) -> str:
    lines = []
    if "entries" in results:
        r = results["entries"]
        lines += ["entries -> Parquet (gravfs spark entries, %s)" % r["master"],
                  f"  {'entries':>12} {'ranges':>8} {'seconds':>9} {'entries/s':>11} "
                  f"{'parquet':>10}",
                  f"  {r['entries']:>12,} {r['ranges']:>8,} {r['seconds']:>9.1f} "
                  f"{r['entries_per_s']:>11,} {r['parquet_bytes'] / 2**20:>8.1f}Mi", ""]
    if "incremental" in results:
        r = results["incremental"]
        lines += [f"incremental export (--since), {r['changed']:,} of {r['files']:,} files "
                  f"changed ({r['changed_bytes'] / 2**20:.1f} MiB), {r['master']}",
                  f"  {'shape':<10} {'ranges read':>16} {'%':>7} {'export s':>9} "
                  f"{'floor s':>8} {'x floor':>8}"]
        for shape, s in r["shapes"].items():
            lines.append(f"  {shape:<10} {s['ranges_read']:>7,} of {s['ranges_total']:>6,} "
                         f"{s['ranges_read_pct']:>6.2f}% {s['seconds']:>9.1f} "
                         f"{s['floor_seconds']:>8.2f} "
                         f"{s['seconds'] / max(s['floor_seconds'], 1e-3):>8.1f}")
        lines.append("  floor: the changed objects copied file by file, one process, no Spark")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="entries,incremental")
    ap.add_argument("--entries", type=int, default=10_000_000, help="entries section size")
    ap.add_argument("--files", type=int, default=1_000_000, help="incremental section size")
    ap.add_argument("--change-pct", type=float, default=1.0)
    ap.add_argument("--file-size", type=int, default=4096, help="bytes of a changed file")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true", help="200k entries, 100k files")
    ap.add_argument("--tmp", default=None, help="scratch directory (default: system temp)")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.files = 200_000, 100_000
    sections = set(args.sections.split(","))
    results: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "nproc": os.cpu_count(), "load": os.getloadavg()}
    tmp = tempfile.mkdtemp(prefix="bench-spark-export-", dir=args.tmp)
    try:
        if "entries" in sections:
            results["entries"] = bench_entries(tmp, args.entries, args.master)
        if "incremental" in sections:
            results["incremental"] = bench_incremental(tmp, args.files, args.change_pct,
                                                       args.file_size, args.master)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    print(table(results))
    os.makedirs(RESULTS, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    path = os.path.join(RESULTS, f"spark-export-{time.strftime('%Y%m%d-%H%M%S')}{suffix}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
