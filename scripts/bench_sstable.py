#!/usr/bin/env python3
"""Micro-benchmark of the SSTable layer: ``scripts/bench_sstable.py [N] [RANGES]``.

Writes N records (lakeFS-like keys and ~80-byte values) with write_sst, split
over RANGES files, then measures random point lookups through SSTReader
(first pass = cold blocks, then warm) against rocksdict's Rdict.get on a DB
holding the same files, and full scans.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import json
import tempfile
import time
from bisect import bisect_left

import rocksdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
RESULTS = os.path.join(ROOT, "bench", "results")

from gravfs.sstable.cache import BlockCache  # noqa: E402
from gravfs.sstable.reader import SSTReader  # noqa: E402
from gravfs.sstable.writer import write_sst  # noqa: E402


class _Timer:
    """Wall and CPU time of a block: on a busy machine CPU time is the steadier figure."""

    def __enter__(self) -> "_Timer":
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c

    def rate(self, n: int) -> str:
        return f"{n / self.wall:>12,.0f}/s wall {n / max(self.cpu, 1e-9):>12,.0f}/s cpu"

    def per_s(self, n: int) -> float:
        return n / self.wall


def main(n: int = 1_000_000, ranges: int = 100, lookups: int = 300_000) -> dict:
    res: dict = {"n": n, "ranges": ranges, "lookups": lookups, "per_s": {}}
    rates = res["per_s"]
    rnd = random.Random(0)
    keys = [b"data/table=%04d/part-%09d.parquet" % (i // 5000, i) for i in range(n)]
    values = [b"\x40" + rnd.randbytes(32) + b"\x5e" + b"x" * 46 for _ in range(n)]
    tmp = tempfile.mkdtemp(prefix="gravfs-sst-bench-")
    try:
        per = -(-n // ranges)
        paths, last_keys = [], []
        with _Timer() as t:
            for r in range(ranges):
                lo, hi = r * per, min(n, (r + 1) * per)
                if lo >= hi:
                    break
                path = os.path.join(tmp, f"r{r:05d}.sst")
                write_sst(path, zip(keys[lo:hi], values[lo:hi]), {"type": b"ranges"}, sync=False)
                paths.append(path)
                last_keys.append(keys[hi - 1])
        size = sum(os.path.getsize(p) for p in paths)
        print(f"write_sst {n:,} records in {len(paths)} files ({size / 2**20:.0f} MiB):")
        print(f"  write_sst                          {t.rate(n)}")
        rates["write_sst"] = t.per_s(n)

        cache = BlockCache(1 << 30)
        readers = [SSTReader(p, cache=cache) for p in paths]
        probe = [keys[rnd.randrange(n)] for _ in range(lookups)]
        absent = [k + b"~" for k in probe[: lookups // 3]]
        last = len(readers) - 1

        def lookups_timed(qs: list[bytes]) -> _Timer:
            with _Timer() as t:
                for k in qs:
                    readers[min(bisect_left(last_keys, k), last)].get(k)
            return t

        t = lookups_timed(probe)
        print(f"  SSTReader get, first pass (cold)   {t.rate(lookups)}")
        rates["get_cold"] = t.per_s(lookups)
        for rd in readers:  # make every block warm
            for _ in rd:
                pass
        t = lookups_timed(probe)
        print(f"  SSTReader get, warm                {t.rate(lookups)}")
        rates["get_warm"] = t.per_s(lookups)
        t = lookups_timed(absent)
        print(f"  SSTReader get absent key, warm     {t.rate(len(absent))}")
        rates["get_absent_warm"] = t.per_s(len(absent))
        with _Timer() as t:
            count = sum(1 for rd in readers for _ in rd)
        print(f"  SSTReader full scan, warm          {t.rate(count)}")
        rates["scan_warm"] = t.per_s(count)
        for rd in readers:
            rd.close()
        readers = [SSTReader(p, cache=cache) for p in paths]
        with _Timer() as t:
            count = sum(1 for rd in readers for _ in rd.seek(b"", fill_cache=False))
        print(f"  SSTReader full scan, cold          {t.rate(count)}")
        rates["scan_cold"] = t.per_s(count)
        for rd in readers:
            rd.close()

        db = rocksdict.Rdict(os.path.join(tmp, "db"), rocksdict.Options(raw_mode=True))
        db.ingest_external_file(paths)
        for label in ("first pass", "warm      "):
            with _Timer() as t:
                for k in probe:
                    db.get(k)
            print(f"  Rdict.get {label}               {t.rate(lookups)}")
            rates["rdict_get_" + label.strip().replace(" ", "_")] = t.per_s(lookups)
        db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'figure':<28}{'gravfs/s':>14}{'RocksDB/s':>14}{'ratio':>8}")
    for ours, theirs in (("get_cold", "rdict_get_first_pass"), ("get_warm", "rdict_get_warm")):
        ratio = rates[ours] / rates[theirs]
        res[ours + "_vs_rocksdb"] = ratio
        print(f"{ours:<28}{rates[ours]:>14,.0f}{rates[theirs]:>14,.0f}{ratio:>7.2f}x")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"sstable-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"results: {os.path.relpath(path, ROOT)}")
    return res


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: at least 1")
    return n


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=_count, nargs="?", help="records written (default %(default)s)",
                    default=main.__defaults__[0])
    ap.add_argument("ranges", type=_count, nargs="?", help="files they are split over (default %(default)s)",
                    default=main.__defaults__[1])
    a = ap.parse_args()
    main(a.n, a.ranges)
