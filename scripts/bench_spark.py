#!/usr/bin/env python3
"""Spark pipeline benchmarks (issue 11 and the following ones), in sections.

    scripts/bench_spark.py [--only import-tree,manifest,s3] [--quick] [--entries N]
                           [--dirs D --files F] [--objects N] [--masters local[1],local[2]]
                           [--tmp DIR] [--keep] [--no-json]

Sections (all by default, or those ``--only`` names):

  import-tree  a DIRS x FILES tree of tiny files (an event table's part files):
               the single-process ``gravfs import`` against ``gravfs spark import``
               (copy) on each master, and both against the floor of this machine,
               ``cp -r`` of the tree and a sync; the metarange IDs must agree.
  manifest     an ENTRIES-row inventory manifest (Parquet, S3 Inventory's columns)
               imported by reference on each master, against the floor of this
               machine: ``write_metarange`` of the same sorted entries (encoded as
               the import encodes them) in one process, in the same run. Also how
               fast the rows reach Python: pyarrow per file in tasks (what the
               import does) against ``spark.read.parquet``.
  s3           an OBJECTS-object prefix on a SeaweedFS started here, imported by
               reference and by copy on local[2].

Every Spark run is a child process of its own, so the peaks are its own: the
driver's (the child's ru_maxrss), the JVM's (VmHWM of the gateway's java) and
each Python worker's (ru_maxrss collected from the workers after the job).

Adding a section: write ``def section_NAME(b: Bench) -> None`` that measures with
``b.spark_run(...)``/``b.timed(...)`` and records ``b.row(...)``, and add it to
SECTIONS; arguments it needs go into ``main()``'s parser (sections read them from
``b.args``). Output: a table per section and bench/results/spark-<ts>.json. Times
are wall clock on a shared 2-core machine: read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SPARK_CONF = [("spark.ui.enabled", "false"), ("spark.driver.memory", "2g")]


# --- measuring -----------------------------------------------------------------------

class Bench:
    """The run's arguments, scratch directory and results (rows per section)."""

    def __init__(self, args, tmp: str):
        self.args, self.tmp = args, tmp
        self.sections: dict[str, dict] = {}
        self.section = ""

    def row(self, name: str, entries: int, seconds: float, **extra) -> dict:
        r = {"name": name, "entries": entries, "seconds": round(seconds, 3),
             "per_s": round(entries / seconds, 1) if seconds > 0 else None, **extra}
        self.sections.setdefault(self.section, {"rows": []})["rows"].append(r)
        print(f"  {name:<34} {entries:>11,} {seconds:>9.1f}s {r['per_s'] or 0:>11,.0f}/s"
              + "".join(f"  {k}={v}" for k, v in extra.items() if k != "metarange"),
              flush=True)
        return r

    def note(self, key: str, value) -> None:
        self.sections.setdefault(self.section, {"rows": []})[key] = value

    def spark_run(self, job: str, master: str, env: dict | None = None, **params) -> dict:
        """Run ``job`` (a function name in this module) in a child process with a
        SparkSession on ``master`` (and ``env`` added to its environment); returns its
        result dict plus the peaks."""
        spec = json.dumps({"job": job, "master": master, "params": params})
        env = dict(os.environ, **(env or {}),
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", spec],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{job} on {master} failed:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _vm_hwm_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _worker_peaks(sc) -> list[float]:
    """Peak RSS (MiB) of each Python worker process Spark has running."""
    def peak(_):
        import os as _os
        return _os.getpid(), _vm_hwm_mib(_os.getpid())

    n = 8 * sc.defaultParallelism
    got = dict(sc.parallelize(range(n), n).map(peak).collect())
    return sorted(round(v, 1) for v in got.values())


def child(spec: dict) -> None:
    """The child side of Bench.spark_run: start Spark, run the job, print one JSON line."""
    from gravfs.spark import start_session

    t0 = time.monotonic()
    spark = start_session(spec["master"], SPARK_CONF)
    startup = time.monotonic() - t0
    try:
        out = globals()[spec["job"]](spark, **spec["params"])
        sc = spark.sparkContext
        out["startup_s"] = round(startup, 1)
        out["worker_peak_mib"] = _worker_peaks(sc)
        out["jvm_peak_mib"] = round(_vm_hwm_mib(sc._gateway.proc.pid), 1)
    finally:
        spark.stop()
    # VmHWM, not ru_maxrss: Linux carries the parent's peak across fork and exec
    out["driver_peak_mib"] = round(_vm_hwm_mib(os.getpid()), 1)
    print(json.dumps(out))


# --- jobs run in a child ---------------------------------------------------------------

def _timed_import(store, state, run) -> dict:
    """Time one Spark import into ``main`` (run(repo) -> its result) and describe it."""
    from gravfs.fs.repository import Repository

    with Repository.open(store, state) as repo:
        t0 = time.monotonic()
        res = run(repo)
        secs = time.monotonic() - t0
    return {"entries": res.files, "seconds": secs, "metarange": res.commit.metarange,
            "ranges": res.ranges, "partitions": res.partitions}


def job_import_tree(spark, store, state, src, partitions=None):
    from gravfs.spark import import_tree

    return _timed_import(store, state,
                         lambda repo: import_tree(spark, repo, src, "main", partitions=partitions))


def job_import_manifest(spark, store, state, src, partitions=None):
    from gravfs.spark.importer import import_manifest

    return _timed_import(store, state, lambda repo: import_manifest(
        spark, repo, src, "main", partitions=partitions))


def job_import_s3(spark, store, state, url, by_reference):
    from gravfs.spark.importer import import_s3

    return _timed_import(store, state, lambda repo: import_s3(
        spark, repo, url, "main", by_reference=by_reference))


def job_read_manifest(spark, src):
    """Rows of the manifest into Python tuples: pyarrow per file (the import's way)
    against spark.read.parquet."""
    from gravfs.spark.manifest import ManifestSource, read_rows

    units = ManifestSource(src).units()
    sc = spark.sparkContext
    t0 = time.monotonic()
    n1 = (sc.parallelize(units, len(units))
          .mapPartitions(lambda it: (r for u in it for r in read_rows(u[0], u[1], None, u[2])))
          .count())
    t1 = time.monotonic()
    df = spark.read.parquet(src).select("bucket", "key", "size", "last_modified_date", "e_tag")
    n2 = df.rdd.map(tuple).count()
    t2 = time.monotonic()
    return {"pyarrow_rows": n1, "pyarrow_s": t1 - t0, "spark_read_rows": n2,
            "spark_read_s": t2 - t1}


# --- sections ------------------------------------------------------------------------------

def _repo(b: Bench, name: str, settings) -> tuple[str, str]:
    from gravfs.fs.repository import Repository

    store, state = os.path.join(b.tmp, f"{name}-store"), os.path.join(b.tmp, f"{name}-state")
    Repository.init(store, state, settings=settings).close()
    return store, state


def _spark_row(b: Bench, name: str, r: dict, **extra) -> dict:
    return b.row(name, r["entries"], r["seconds"], startup_s=r["startup_s"],
                 driver_mib=r["driver_peak_mib"], jvm_mib=r["jvm_peak_mib"],
                 workers_mib=r["worker_peak_mib"], **extra)


def make_tree(root: str, dirs: int, files: int, size: int) -> int:
    rnd = random.Random(1)
    for d in range(dirs):
        sub = os.path.join(root, "events", f"date=2026-{1 + d // 28:02d}-{1 + d % 28:02d}")
        os.makedirs(sub)
        for f in range(files):
            with open(os.path.join(sub, f"part-{f:05d}.json"), "wb") as fh:
                fh.write(rnd.randbytes(size))
    return dirs * files


def section_import_tree(b: Bench) -> None:
    """Local tree, copy mode: single-process gravfs import vs Spark on each master."""
    from gravfs.fs.importer import import_tree as single_import
    from gravfs.fs.repository import Repository
    from gravfs.version.config import RepoSettings

    a = b.args
    src = os.path.join(b.tmp, "tree")
    t0 = time.monotonic()
    n = make_tree(src, a.dirs, a.files, a.size)
    b.note("tree", {"files": n, "dirs": a.dirs, "bytes_each": a.size,
                    "made_s": round(time.monotonic() - t0, 1)})
    t0 = time.monotonic()  # the floor: the machine's own copy of the tree (cp -r)
    subprocess.run(["cp", "-r", src, os.path.join(b.tmp, "tree-copy")], check=True)
    subprocess.run(["sync"], check=True)
    b.row("native copy (cp -r + sync)", n, time.monotonic() - t0)
    settings = RepoSettings.new()  # one break-policy seed: comparable tree IDs
    store, state = _repo(b, "single", settings)
    with Repository.open(store, state) as repo:
        rss0 = _maxrss_mib()
        t0 = time.monotonic()
        res = single_import(repo, src, "main", progress=False)
        secs = time.monotonic() - t0
    mrs = {res.commit.metarange}
    single = b.row("gravfs import (one process)", res.files, secs,
                   process_peak_mib=round(max(rss0, _maxrss_mib()), 1))
    native = b.sections[b.section]["rows"][0]["per_s"]
    b.note("single_vs_native", round(single["per_s"] / native, 2))
    for m in a.masters.split(","):
        store, state = _repo(b, f"tree-{m}", settings)
        r = b.spark_run("job_import_tree", m, store=store, state=state, src=src,
                        partitions=a.partitions)
        mrs.add(r["metarange"])
        _spark_row(b, f"spark import {m}", r, ranges=r["ranges"])
    b.note("same_metarange", len(mrs) == 1)
    print(f"  same metarange ID for every import: {len(mrs) == 1}")


def write_manifest(dest: str, entries: int, files: int, bucket: str = "lake") -> None:
    """An S3 Inventory-like Parquet manifest: ``files`` files of sorted rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(dest)
    per = -(-entries // files)
    base_ms = 1_760_000_000_000
    for f in range(files):
        lo, hi = f * per, min(entries, (f + 1) * per)
        if lo >= hi:
            break
        w = None
        for c in range(lo, hi, 500_000):
            ids = range(c, min(hi, c + 500_000))
            # 5,000 parts a day, 28 days a month: sorted at any size (the year moves on)
            keys = [f"events/date={2026 + (i // 5000) // 336}-{1 + (i // 5000) // 28 % 12:02d}"
                    f"-{1 + (i // 5000) % 28:02d}/b{i // 5000:05d}/part-{i % 5000:05d}"
                    "-c000.snappy.parquet" for i in ids]
            t = pa.table({"bucket": [bucket] * len(keys), "key": keys,
                          "size": pa.array([1000 + i % 100_000 for i in ids], pa.int64()),
                          "last_modified_date": pa.array([base_ms + i for i in ids],
                                                         pa.timestamp("ms", "UTC")),
                          "e_tag": [f"{i * 2654435761 % (1 << 64):032x}" for i in ids],
                          "storage_class": ["STANDARD"] * len(keys)})
            if w is None:
                w = pq.ParquetWriter(os.path.join(dest, f"part-{f:04d}.parquet"), t.schema)
            w.write_table(t, row_group_size=250_000)
        w.close()


def floor_write(store: str, state: str, src: str) -> tuple[int, float, float]:
    """write_metarange of the manifest's entries, sorted and encoded as the import does,
    in this process: (entries, seconds, peak MiB)."""
    import pyarrow.parquet as pq

    from gravfs.fs.entry import ADDRESS_FULL, KIND_FILE, EntryInfo, encode_entry, entry_identity
    from gravfs.fs.repository import Repository

    def records():
        for name in sorted(os.listdir(src)):  # files hold sorted, consecutive key runs
            f = pq.ParquetFile(os.path.join(src, name))
            for batch in f.iter_batches(65536, columns=["bucket", "key", "size",
                                                         "last_modified_date", "e_tag"]):
                cols = [batch.column(i).to_pylist() for i in range(5)]
                for bucket, key, size, lm, etag in zip(*cols):
                    mt = int(lm.timestamp()) * 1_000_000_000 + lm.microsecond * 1000
                    e = EntryInfo(address=f"s3://{bucket}/{key}", size=size, mtime_ns=mt,
                                  kind=KIND_FILE, e_tag=etag, address_type=ADDRESS_FULL)
                    yield key.encode(), entry_identity(e), encode_entry(e)

    n = 0

    def counted():
        nonlocal n
        for r in records():
            n += 1
            yield r

    with Repository.open(store, state) as repo:
        t0 = time.monotonic()
        repo.committed.write_metarange(counted())
        secs = time.monotonic() - t0
    return n, secs, _vm_hwm_mib(os.getpid())


def section_manifest(b: Bench) -> None:
    """Inventory manifest by reference: Spark on each master vs the one-process floor."""
    from gravfs.version.config import RepoSettings

    a = b.args
    src = os.path.join(b.tmp, "manifest")
    t0 = time.monotonic()
    write_manifest(src, a.entries, a.manifest_files)
    b.note("manifest", {"entries": a.entries, "files": a.manifest_files, "format": "parquet",
                        "made_s": round(time.monotonic() - t0, 1)})
    settings = RepoSettings.new()
    store, state = _repo(b, "floor", settings)
    # the floor runs in a child too, so its peak is its own
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--floor",
                        json.dumps([store, state, src])], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"floor failed:\n{p.stderr[-3000:]}")
    n, secs, peak = json.loads(p.stdout.strip().splitlines()[-1])
    b.row("write_metarange, one process (floor)", n, secs, process_peak_mib=round(peak, 1))
    rates = {}
    for m in a.masters.split(","):
        store, state = _repo(b, f"manifest-{m}", settings)
        r = b.spark_run("job_import_manifest", m, store=store, state=state, src=src,
                        partitions=a.partitions)
        rates[m] = r["entries"] / r["seconds"]
        _spark_row(b, f"spark import --by-reference {m}", r, ranges=r["ranges"])
    if "local[1]" in rates and "local[2]" in rates:
        b.note("scaling_local1_to_local2", round(rates["local[2]"] / rates["local[1]"], 2))
        print(f"  local[1] -> local[2]: {rates['local[2]'] / rates['local[1]']:.2f}x")
    if not a.no_read_compare:
        r = b.spark_run("job_read_manifest", "local[2]", src=src)
        b.row("read rows: pyarrow per file, local[2]", r["pyarrow_rows"], r["pyarrow_s"])
        b.row("read rows: spark.read.parquet, local[2]", r["spark_read_rows"], r["spark_read_s"])


def section_s3(b: Bench) -> None:
    """An S3 prefix on SeaweedFS: by reference and by copy on local[2]."""
    from concurrent.futures import ThreadPoolExecutor

    from gravfs.version.config import RepoSettings
    from tests.s3server import SeaweedServer, find_weed

    a = b.args
    server = SeaweedServer(os.path.join(b.tmp, "seaweedfs"), find_weed())
    server.start()
    try:
        env = {"GRAVFS_S3_ENDPOINT": server.endpoint_url, "AWS_ENDPOINT_URL": server.endpoint_url,
               "AWS_ACCESS_KEY_ID": server.access_key,
               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_DEFAULT_REGION": "us-east-1"}
        c = server.client()
        prefix = "lake/events/"
        rnd = random.Random(1)
        bodies = [rnd.randbytes(a.size) for _ in range(1000)]
        dirs = max(1, a.objects // 1000)

        def put(i):
            key = f"{prefix}date=2026-{1 + (i // 1000) // 28 % 12:02d}-{1 + (i // 1000) % 28:02d}" \
                  f"/b{i // 1000:04d}/part-{i % 1000:05d}.json"
            c.put_object(Bucket=server.bucket, Key=key, Body=bodies[i % 1000])

        t0 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(put, range(a.objects)))
        up = time.monotonic() - t0
        b.note("prefix", {"objects": a.objects, "dirs": dirs, "bytes_each": a.size,
                          "uploaded_s": round(up, 1)})
        # the server's own rate for one request per object, on the same cores
        b.row("PUT of the objects, 16 threads (floor)", a.objects, up)
        settings = RepoSettings.new()
        url = f"s3://{server.bucket}/{prefix}"
        for by_ref in (True, False):
            store, state = _repo(b, f"s3-{by_ref}", settings)
            r = b.spark_run("job_import_s3", "local[2]", store=store, state=state, url=url,
                            by_reference=by_ref, env=env)  # env: the child's environment
            _spark_row(b, f"spark import {'--by-reference' if by_ref else 'copy'} local[2]", r)
    finally:
        server.stop()


SECTIONS: dict[str, Callable[[Bench], None]] = {
    "import-tree": section_import_tree,
    "manifest": section_manifest,
    "s3": section_s3,
}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
        return 0
    if len(sys.argv) > 2 and sys.argv[1] == "--floor":
        print(json.dumps(floor_write(*json.loads(sys.argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help=f"comma-separated sections ({', '.join(SECTIONS)})")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--entries", type=int, default=10_000_000)
    ap.add_argument("--manifest-files", type=int, default=16)
    ap.add_argument("--no-read-compare", action="store_true")
    ap.add_argument("--objects", type=int, default=200_000)
    ap.add_argument("--tmp")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.dirs, args.files, args.entries, args.objects = 20, 100, 200_000, 2_000
    names = args.only.split(",") if args.only else list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)} (known: {', '.join(SECTIONS)})")
    tmp = tempfile.mkdtemp(prefix="bench-spark-", dir=args.tmp)
    b = Bench(args, tmp)
    try:
        for name in names:
            b.section = name
            print(f"[{name}] {SECTIONS[name].__doc__.strip().splitlines()[0]}", flush=True)
            print(f"  {'run':<34} {'entries':>11} {'wall':>10} {'per second':>13}")
            SECTIONS[name](b)
        if not args.no_json:
            out = os.path.join(ROOT, "bench", "results",
                               f"spark-{time.strftime('%Y%m%d-%H%M%S')}.json")
            with open(out, "w") as f:
                json.dump({"args": vars(args), "sections": b.sections,
                           "load_average": os.getloadavg()}, f, indent=1)
            print(f"wrote {out}")
        same = b.sections.get("import-tree", {}).get("same_metarange", True)
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
