#!/usr/bin/env python3
"""Benchmark file access through the gravfs mount against native disk and rclone.

    scripts/bench_mount.py [--quick] [--runs N]
                           [--targets native,pyfuse3-floor,pyfuse3-work-floor,gravfs-local,
                                      gravfs-local-nospin,pyfuse3-work-floor-s3,gravfs-s3,rclone-s3,
                                      s3-get-floor]
                           [--big-mb M] [--creates N] [--list-entries N] [--stats N] [--no-spark]
                           [--only read,write,stat,create,ls,spark,requests,scale] [--slow-once]
                           [--scale 1000000[,10000000][,200000/8]]

Targets (all measured in the same run, taking turns: run 1 of each, then run 2 of
each, so ratios share the machine's state even while its speed drifts):
  native        a plain directory on the local disk (the baseline of every ratio)
  pyfuse3-floor scripts/fuse_floor.py: an in-memory pyfuse3 + trio filesystem whose
                handlers do no work, i.e. the kernel round trip and the framework's
                own cost, which no pyfuse3 daemon (gravfs included) can go below
  pyfuse3-work-floor  the same with ``--work``: a create also writes a local file,
                hashes it and stages it in LMDB at close; the big file is read from
                disk and checked against its SHA-256 before EOF. The least that
                gravfs's promises (a closed file survives kill -9, no unchecked
                content to EOF) cost on this host, with none of gravfs's code; only
                the read and create groups
  pyfuse3-work-floor-s3  the work floor with the big file in the SeaweedFS bucket,
                fetched as gravfs's reader does (ranged GETs of 4 MiB, 8 ahead),
                hashed in order as the chunks arrive; the floor of gravfs-s3's cold
                read; and the Spark dataset there too (each file fetched whole at its
                first read, checked, kept in memory): the floor of its Spark scans
  gravfs-local  gravfs mounted over a local-directory store
  gravfs-local-nospin  the same mounted with ``-o spin_us=0``: an event loop that
                sleeps between requests (gravfs.fuse.spin), for the share of the
                busy-poll; not measured unless named in --targets
  gravfs-s3     gravfs mounted over a SeaweedFS bucket (``weed mini`` on loopback)
  rclone-s3     ``rclone mount`` of the same SeaweedFS bucket (--vfs-cache-mode full)
  s3-get-floor  the big file read straight from the same SeaweedFS with boto3, as many
                ranged GETs at once as gravfs's read-ahead keeps in flight (no FUSE, no
                hashing, no cache): what any client of this server can read at that
                concurrency, the floor of the cold store reads above

Measurements (each the median of --runs repetitions):
  seq read of one big file: cold from the store (fresh workspace / cache, page
  cache dropped), cold from the local tier (page cache dropped, object in the
  workspace's tier), warm (second read, page cache); a big file written in 1 MiB
  writes and closed (MB/s over both, and the close's seconds: gravfs stores a big
  file at its close; not on the plain floor, which keeps a file in one bytes object);
  stat/s on commits/ paths
  (immutable, kernel-cached) and on branch paths; a statfs's wait while two
  clients send getxattr back to back (gravfs answers statfs on a worker thread,
  which needs the GIL the busy event loop holds; the floor on its loop); creating
  small files (files/s), and reading them back whole with the page cache dropped
  (on gravfs once their upload ended, on rclone from its cache): half of them
  shuffled (a loader drawing samples at random: nothing to read ahead), then the
  other half in name order;
  ``ls -l`` of a directory of many entries (made with Repository.stage, not
  through the mount); a Spark (local[2]) scan of a Parquet dataset, once after the
  page cache is dropped (cold) and once more right after (warm).

The requests group profiles a create and a first stat (a branch path not looked up
before) on gravfs-local (and gravfs-local-nospin), the floor and the work floor
(creates only): in a mount of its own after each run's timed groups, with the
daemon's GRAVFS_OPSTATS (fuse_floor.py ``--count`` on the floors), it does --creates
creates and --stats first stats and reports, per operation, the requests of each type
the kernel sent and their handlers' time, and the time outside the handlers (the
kernel, the client, pyfuse3 and trio, the daemon's other tasks and threads): where an
operation's time goes beyond the floor's. The counting's clock reads are in these
figures, not in the timed groups'.

The scale section (``--scale N,...``; alone with ``--only scale``) builds a branch of
N entries and measures ``find``, cold random stats, ``ls -l`` of its largest directory
and the first pass in order over 20k of its files on gravfs, on the floor with a
synthetic tree of the same shape (``--lake``), and on the lake work floor
(``--lake-db``: the branch's own range SSTs read by RocksDB's reader), with the
daemon's memory per inode the kernel knows. Cold stats are the median of three fresh
mounts, and gravfs's are also taken without its range warm-up (``-o warm_ranges=0``),
and both again on mounts left idle for SCALE_SETTLE_S before the caches are dropped.
``N/K`` puts K files in a day directory instead of 20k (``200000/8``: a lake partitioned
into small directories, where each directory's own cost counts; the largest directory
is then the one holding the days).
After ``find`` the kernel is told to forget the inodes it took in, and a request timed
every 5 ms meanwhile shows how long the daemon's forgetting holds the others (on gravfs
until its inode table is empty, on the floors for as long as that took).

Prints a table and writes bench/results/mount-<timestamp>.json, with the host (CPU,
kernel, library versions, a fixed Python loop's time before, after, and at the start
of each floor and gravfs run).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # bench_repo's branches (scale section)
MiB = 1 << 20


# -- helpers ------------------------------------------------------------------------------

def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class _Pair:
    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int):
        self.a, self.b = a, b


def _python_work(n: int) -> int:
    d: dict = {}
    for i in range(n):
        p = _Pair(i, i & 255)
        d[p.b] = d.get(p.b, 0) + p.a
    return len(d)


def host() -> dict:
    """What the figures depend on besides gravfs: the CPU, the kernel, the libraries,
    and how fast this host runs Python bytecode (``python_loop_ms``: a fixed loop of
    calls, objects and dict updates; main adds ``python_loop_ms_after``, taken after
    the runs). The daemon's handlers scale with that figure and the floor's kernel
    round trips do not, so a run on a host where it is slower shows lower ratios to
    the floor for the same code."""
    from importlib.metadata import PackageNotFoundError, version

    info: dict = {}
    try:  # the first processor's lines; a VM's model name may be generic, its model number not
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    cpu = info.get("model name", "")
    if "cpu family" in info:
        cpu += f" (family {info['cpu family']} model {info.get('model', '?')})"
    packages = {}
    for name in ("pyfuse3", "trio", "lmdb", "protobuf", "rocksdict"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {"cpu": cpu.strip(), "kernel": os.uname().release, "python": sys.version.split()[0],
            "packages": packages, "python_loop_ms": python_loop_ms()}


def python_loop_ms() -> float:
    """Median of 5 timings of the fixed loop (see ``host``), in milliseconds."""
    return round(median([timed(lambda: _python_work(200_000)) * 1e3 for _ in range(5)]), 1)


def read_file(path: str, bs: int = MiB) -> int:
    n = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(bs)
        mv = memoryview(buf)
        while True:
            k = os.readv(fd, [mv])
            if not k:
                return n
            n += k
    finally:
        os.close(fd)


def read_MBps(path: str) -> float:
    t = time.perf_counter()
    n = read_file(path)
    return n / MiB / (time.perf_counter() - t)


def write_then_close(path: str, mib: int, out: dict) -> None:
    """Write ``mib`` MiB to a new file in 1 MiB writes (bytes no other run wrote: nothing
    deduplicated), then close it: MB/s over both (``write_MBps``) and the close's seconds
    (``write_close_s``: a mount that stores the file at its close makes its writer wait)."""
    base = os.urandom(MiB - 8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    try:
        for i in range(mib):
            os.write(fd, base + i.to_bytes(8, "little"))
    finally:
        t1 = time.perf_counter()
        os.close(fd)
    t2 = time.perf_counter()
    out["write_MBps"].append(mib / (t2 - t))
    out["write_close_s"].append(t2 - t1)
    os.unlink(path)


SMALL_WRITE = 8192  # a buffered writer's flushes (Python's io.DEFAULT_BUFFER_SIZE)
SMALL_WRITES_MIB = 32


def write_small(path: str, out: dict) -> None:
    """Write 32 MiB to a new file in 8 KiB writes, as a buffered writer (a CSV or log
    writer) flushes, then close it: MB/s (``write_small_MBps``). A mount pays each
    write's requests, not its bytes."""
    data = memoryview(os.urandom(SMALL_WRITES_MIB * MiB))  # no other run's bytes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    try:
        for off in range(0, len(data), SMALL_WRITE):
            os.write(fd, data[off:off + SMALL_WRITE])
    finally:
        os.close(fd)
    out["write_small_MBps"].append(SMALL_WRITES_MIB / (time.perf_counter() - t))
    os.unlink(path)


def read_cold_then_warm(path: str, out: dict, cold_key: str, warm3: bool = True) -> None:
    """Read once after dropping the page cache, then again (warm), and a third time."""
    drop_caches()
    out[cold_key].append(read_MBps(path))
    out["read_warm_MBps"].append(read_MBps(path))
    if warm3:
        out["read_warm3_MBps"].append(read_MBps(path))


def first_byte_ms(path: str) -> float:
    """Time to the first 4 KiB of a file, page cache dropped first."""
    drop_caches()
    t = time.perf_counter()
    with open(path, "rb") as f:
        f.read(4096)
    return (time.perf_counter() - t) * 1000


STREAMS = 3  # readers streaming the big file while first_byte_among_streams_ms reads


def first_byte_among_streams_ms(path: str) -> float:
    """Milliseconds to open a file and read 1 MiB at 7/8 of it while STREAMS readers,
    each with its own descriptor, read it sequentially from 0, 1/4 and 1/2 (each 16 MiB
    in when the read starts; page cache dropped first): how long a new reader waits
    behind the read-ahead of others."""
    import threading

    size = os.path.getsize(path)
    stop = threading.Event()
    going = [threading.Event() for _ in range(STREAMS)]

    def stream(i: int) -> None:
        start = size * i // 4 // MiB * MiB
        with open(path, "rb", buffering=0) as f:
            off = start
            while not stop.is_set() and off < size * 3 // 4:
                os.pread(f.fileno(), MiB, off)
                off += MiB
                if off >= start + 16 * MiB:
                    going[i].set()
        going[i].set()

    drop_caches()
    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(STREAMS)]
    for t in threads:
        t.start()
    try:
        for ev in going:
            ev.wait(120)
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            os.pread(f.fileno(), MiB, size * 7 // 8 // MiB * MiB)
        return (time.perf_counter() - t0) * 1000
    finally:
        stop.set()
        for t in threads:
            t.join(120)


def stat_rate(paths: list[str], min_s: float = 0.0) -> float:
    """stats per second over the paths (repeated until min_s has passed)."""
    n = 0
    t = time.perf_counter()
    while True:
        for p in paths:
            os.stat(p)
        n += len(paths)
        el = time.perf_counter() - t
        if el >= min_s:
            return n / el


BUSY_CLIENT = """
import os, sys, time
mnt, end, n = sys.argv[1], time.time() + float(sys.argv[2]), 0
while time.time() < end:
    try:
        os.getxattr(mnt, "user.gravfs.pid")
    except OSError:  # a floor has no such attribute: still a request to its daemon
        pass
    n += 1
print(n / float(sys.argv[2]))
"""


def busy_statfs(mnt: str, seconds: float = 3.0, clients: int = 2) -> dict:
    """A statfs every 5 ms while ``clients`` processes send getxattr back to back: the
    event loop never waits for the kernel then, and gravfs answers statfs on a worker
    thread, which needs the GIL that the busy loop holds (gravfs.fuse.spin's hand-over).
    The statfs's wait (median, max; ms) and the clients' requests a second."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_CLIENT, mnt, str(seconds + 1.0)],
                              stdout=subprocess.PIPE, text=True) for _ in range(clients)]
    time.sleep(0.5)  # the clients under way
    waits = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        os.statvfs(mnt)
        waits.append(time.perf_counter() - t)
        time.sleep(0.005)
    rate = sum(float(p.communicate()[0] or 0) for p in procs)
    return {"busy_statfs_ms": statistics.median(waits) * 1e3,
            "busy_statfs_max_ms": max(waits) * 1e3, "busy_clients_per_s": rate}


def create_rate(d: str, n: int, size: int = 4096) -> float:
    """Files of distinct content (as a job's outputs are): each one a data object to
    store, none deduplicated against the last."""
    os.makedirs(d, exist_ok=True)
    base = os.urandom(size - 8)
    t = time.perf_counter()
    for i in range(n):
        with open(os.path.join(d, f"c{i:06d}"), "wb") as f:
            f.write(base + i.to_bytes(8, "little"))
    return n / (time.perf_counter() - t)


def read_back_rate(d: str, names: list[str] | None = None) -> float:
    """create_rate's files (or ``names`` of them, in that order) read back whole, page
    cache dropped (after their upload on a gravfs mount): what a job reading the last
    one's output gets."""
    if names is None:
        names = sorted(os.listdir(d))
    drop_caches()
    t = time.perf_counter()
    for n in names:
        with open(os.path.join(d, n), "rb") as f:
            f.read()
    return len(names) / (time.perf_counter() - t)


def read_back(d: str, out: dict) -> None:
    """create_rate's files read back twice over, each file once: the second half of the
    names shuffled (a loader drawing samples at random, nothing to read ahead), then
    the first half in name order. Halves apart, so neither pass finds the other's
    files in the daemon's memory (a drop of the page cache does not empty it)."""
    names = sorted(os.listdir(d))
    half = len(names) // 2
    shuffled = names[half:]
    random.Random(len(names)).shuffle(shuffled)
    out["readback_random_per_s"].append(read_back_rate(d, shuffled))
    out["readback_per_s"].append(read_back_rate(d, names[:half]))


def request_profile(counts: dict[str, list], ops: int, seconds: float) -> dict:
    """An operation's time and, per request type, its calls and handler time per
    operation, from counts {handler: [calls, seconds]} over ``ops`` operations."""
    return {"ops": ops, "op_us": seconds / ops * 1e6,
            "requests": {k: n / ops for k, (n, _) in counts.items()},
            "handler_us": {k: t / ops * 1e6 for k, (_, t) in counts.items()}}


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)


def read_opstats(path: str) -> dict[str, list]:
    """A gravfs daemon's GRAVFS_OPSTATS table as {handler: [calls, seconds]}; its dotted
    rows are timers inside handlers, not requests."""
    counts = {}
    with open(path) as f:
        next(f)  # the header
        for line in f:
            name, calls, total, _ = line.split()
            if "." not in name:
                counts[name] = [int(calls), float(total)]
    return counts


def profile_requests(a, r: int, mount, umount, counts, top: str, ops=("create", "stat_first"),
                     settle=lambda: None) -> dict:
    """The requests group on one target: ``mount(path)`` mounts it counting into path
    and returns the directory to work in, ``umount()`` ends the mount (and its counts),
    ``counts(path)`` reads them; ``settle()``, still mounted, waits for what the work left
    running (gravfs's write-back), so that it does not run into the next target's turn.
    Each operation in a mount of its own; ``r``, the run, names the creates' directory."""
    work = {"create": lambda d: (a.creates, a.creates / create_rate(os.path.join(d, f"profiled{r}"),
                                                                    a.creates)),
            "stat_first": lambda d: (a.stats, a.stats / stat_rate(
                [os.path.join(d, "small", n) for n in small_names(a.stats)]))}
    out = {}
    for op in ops:
        path = os.path.join(top, f"requests-{op}.txt")
        d = mount(path)
        try:
            n, seconds = work[op](d)
            settle()
        finally:
            umount()
        out[op] = request_profile(counts(path), n, seconds)
    return out


def file_profiles(requests: dict, profiles: dict) -> None:
    """Add one run's profiles ({operation: profile}) to a target's lists of them."""
    for op, p in profiles.items():
        requests.setdefault(op, []).append(p)


def median_profile(runs: list[dict]) -> dict:
    """Each figure of an operation's profile as its median over the runs."""
    keys = sorted({k for p in runs for k in p["requests"]})
    return {"ops": runs[0]["ops"], "runs": len(runs), "op_us": median([p["op_us"] for p in runs]),
            **{field: {k: median([p[field].get(k, 0.0) for p in runs]) for k in keys}
               for field in ("requests", "handler_us")}}


def requests_table(results: dict) -> str:
    """Per operation and target: its time, and the requests and handler time in it."""
    lines = []
    for op, label in (("create", "a create of 4 KiB"), ("stat_first", "a first stat")):
        rows = [(t, r[op]) for t, r in results.get("requests", {}).items() if op in r]
        if not rows:
            continue
        lines.append(f"requests in {label} (per operation, medians of {rows[0][1]['runs']} run(s) "
                     f"of {rows[0][1]['ops']:,}; handler µs, from GRAVFS_OPSTATS or fuse_floor --count):")
        for t, p in rows:
            reqs = sorted(p["requests"], key=lambda k: -p["handler_us"][k])
            detail = ", ".join(f"{k} {p['requests'][k]:.2g}x {p['handler_us'][k]:.0f}" for k in reqs)
            handlers = sum(p["handler_us"].values())
            lines.append(f"  {t:20} {p['op_us']:7,.0f} µs = handlers {handlers:5,.0f} + outside them "
                         f"{p['op_us'] - handlers:5,.0f}; {sum(p['requests'].values()):.3g} "
                         f"requests: {detail}")
    return "\n".join(lines)


def writeback_seconds(state: str, timeout: float = 600.0) -> float:
    """Seconds until a daemon's background uploads have emptied its workspace's pending
    directory: the write-back of files just created through the mount."""
    repos = os.path.join(state, "repos")
    pending = [p for p in (os.path.join(repos, r, "pending") for r in os.listdir(repos))
               if os.path.isdir(p)]

    def waiting() -> bool:
        return any(os.listdir(os.path.join(p, sub)) for p in pending for sub in os.listdir(p))

    t = time.perf_counter()
    while waiting():
        if time.perf_counter() - t > timeout:
            raise SystemExit(f"write-back did not finish in {timeout:.0f} s")
        time.sleep(0.02)
    return time.perf_counter() - t


def ls_l_seconds(d: str) -> float:
    t = time.perf_counter()
    subprocess.run(["ls", "-l", d], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def small_names(n: int) -> list[str]:
    """The names of make_small_tree's files (known without listing the directory)."""
    return [f"f{i:06d}" for i in range(n)]


def make_small_tree(d: str, n: int) -> None:
    os.makedirs(d, exist_ok=True)
    for name in small_names(n):
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"x" * 100)


def make_big(path: str, mb: int) -> None:
    block = os.urandom(MiB)
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(block)


def wait_mounted(mnt: str, timeout: float = 30) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if os.path.ismount(mnt):
            return
        time.sleep(0.1)
    raise SystemExit(f"{mnt} did not get mounted")


def unmount(mnt: str) -> None:
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        if os.path.ismount(mnt):
            time.sleep(1)
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)


# -- Spark ---------------------------------------------------------------------------------

class Spark:
    """One local[2] session for every target (the JVM starts once)."""

    def __init__(self):
        from pyspark.sql import SparkSession
        self.s = (SparkSession.builder.master("local[2]").appName("gravfs-bench")
                  .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                  .config("spark.sql.parquet.enableVectorizedReader", "true")
                  .config("spark.driver.memory", "2g").getOrCreate())
        self.s.sparkContext.setLogLevel("ERROR")

    def make_dataset(self, path: str, rows: int) -> None:
        from pyspark.sql import functions as F
        df = self.s.range(rows).select(
            F.col("id"), (F.col("id") * 7 % 1000).alias("k"), F.rand(1).alias("x"),
            F.sha2(F.col("id").cast("string"), 256).alias("s"))
        df.repartition(8).write.mode("overwrite").parquet(path)
        for _ in range(3):  # JIT warm-up: otherwise whichever target goes first pays for it
            self.scan_seconds(path)

    def scan_seconds(self, path: str) -> float:
        from pyspark.sql import functions as F
        t = time.perf_counter()
        self.s.read.parquet(path).agg(F.sum("x"), F.countDistinct("k"), F.max("s")).collect()
        return time.perf_counter() - t

    def measure(self, path: str, out: dict) -> None:
        """A scan after the page cache is dropped, then the same scan again (warm)."""
        drop_caches()
        out["spark_cold_s"].append(self.scan_seconds(path))
        out["spark_warm_s"].append(self.scan_seconds(path))

    def stop(self) -> None:
        self.s.stop()


# -- targets -------------------------------------------------------------------------------

class Gravfs:
    """A repository on a store, mounted from a CLI daemon per workspace."""

    def __init__(self, name: str, store: str, base: str, env: dict, options: tuple = ()):
        self.name, self.store, self.base = name, store, base
        self.options = [x for o in options for x in ("-o", o)]  # gravfs mount -o
        self.env = dict(os.environ, **env, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.mnt = os.path.join(base, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.state = os.path.join(base, "state")
        self.workspaces = 0

    def cli(self, state: str, *args: str, env: dict | None = None) -> str:
        res = subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", self.store, "--state-dir", state,
                              *args], capture_output=True, text=True, env={**self.env, **(env or {})})
        if res.returncode != 0:
            raise SystemExit(f"gravfs {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout

    def setup(self, big_local: str, small_local: str, spark_local: str | None, list_entries: int) -> None:
        """Fill the repository through the API (not the mount) and commit."""
        old = dict(os.environ)
        os.environ.update({k: v for k, v in self.env.items() if k.startswith(("AWS_", "GRAVFS_"))})
        try:
            from gravfs.fs.entry import EntryInfo, KIND_FILE
            from gravfs.fs.importer import import_tree
            from gravfs.fs.repository import Repository
            repo = Repository.init(self.store, self.state)
            try:
                # imports first: an import refuses a branch with uncommitted changes
                import_tree(repo, small_local, "main", "small", "small", progress=False)
                if spark_local:
                    import_tree(repo, spark_local, "main", "parquet", "parquet", progress=False)
                e = repo.write_file("main", "big", big_local)
                self.big_address = e.address
                small = repo.write_file("main", "many/.seed", os.path.join(small_local, "f000000"))
                now = time.time_ns()
                items = [(b"many/e%07d" % i, EntryInfo(address=small.address, size=small.size,
                                                       mtime_ns=now, mode=0o100644, kind=KIND_FILE))
                         for i in range(list_entries)]
                for i in range(0, len(items), 20000):
                    repo.stage("main", items[i:i + 20000])
                self.commit = repo.commit("main", "bench data").id
            finally:
                repo.close()
        finally:
            os.environ.clear()
            os.environ.update(old)

    def prime_tier(self, state: str) -> None:
        code = ("import sys; from gravfs.fs.repository import Repository;"
                "r=Repository.open(sys.argv[1], sys.argv[2]); r.data.acquire(sys.argv[3]).release(); r.close()")
        subprocess.run([sys.executable, "-c", code, self.store, state, self.big_address],
                       check=True, env=self.env)

    def mount(self, state: str | None = None, fresh: bool = False, env: dict | None = None) -> str:
        """``env``: more of the daemon's environment (GRAVFS_OPSTATS)."""
        if fresh:
            self.workspaces += 1
            state = os.path.join(self.base, f"ws{self.workspaces}")
        self.cli(state or self.state, "mount", self.mnt, *self.options, env=env)
        wait_mounted(self.mnt)
        return self.mnt

    def umount(self) -> None:
        if os.path.ismount(self.mnt):
            subprocess.run([sys.executable, "-m", "gravfs.cli", "umount", self.mnt], capture_output=True,
                           env=self.env)
        unmount(self.mnt)

    def daemon_cpu(self) -> float:
        """CPU seconds (user + system) the mount's daemon has used so far."""
        try:
            pid = int(os.getxattr(self.mnt, "user.gravfs.pid"))
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError):
            return 0.0

    def paths(self) -> dict:
        return {"commit": os.path.join(self.mnt, "commits", self.commit),
                "branch": os.path.join(self.mnt, "branches", "main")}


class Floor:
    """scripts/fuse_floor.py mounted with the benchmark's sizes (mount options and read-ahead
    as gravfs's);
    ``big``: the native big file and its SHA-256, for a work floor (``--work``), read
    from the disk or, with ``s3`` (a SeaweedServer), from that server (uploaded here);
    with ``s3``, ``dataset`` (the Spark dataset's directory) is uploaded there too and
    served as ``parquet/``."""

    def __init__(self, base: str, a, big: tuple[str, str] | None = None, s3=None,
                 dataset: str | None = None):
        self.base = base
        self.mnt = os.path.join(base, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.args = ["--small", str(a.stats), "--many", str(a.list_entries), "--big-mb", str(a.big_mb)]
        self.env = None
        if big is not None:
            big, digest = big
            self.args += ["--big-sha256", digest]
            if s3 is None:
                self.args += ["--big-file", big]
            else:
                prefix = f"work-floor-{uuid.uuid4().hex[:8]}"
                client = s3_client(s3)
                client.upload_file(big, s3.bucket, f"{prefix}/big")
                self.args += ["--big-s3-endpoint", s3.endpoint_url, "--big-s3-bucket", s3.bucket,
                              "--big-s3-key", f"{prefix}/big"]
                if dataset:
                    self.args += ["--objects", upload_dataset(client, s3.bucket, prefix, dataset,
                                                              os.path.join(base, "objects.json"))]
                self.env = {**os.environ, "AWS_ACCESS_KEY_ID": s3.access_key,
                            "AWS_SECRET_ACCESS_KEY": s3.secret_key}
        self.work = big is not None
        self.s3 = s3 is not None
        # what a work floor adds to the floor's figures: a create's work, a cold read's
        # and, on S3, a cold Spark scan's; the plain floor has no Spark dataset
        # (the plain floor keeps a file's bytes in one bytes object: no big writes)
        self.groups = (({"read", "spark"} if dataset else {"read"}) if s3
                       else {"read", "create", "write"}) if self.work else set(GROUPS) - {"spark", "write"}
        self.mounts = 0
        self.proc = None

    def mount(self, count: str | None = None) -> str:
        """``count``: count requests into this file (fuse_floor.py --count)."""
        extra = ["--count", count] if count else []
        if self.work:  # a new directory each mount: its creates go to fresh names
            self.mounts += 1
            extra += ["--work", os.path.join(self.base, f"work{self.mounts}")]
        from gravfs.fuse.launch import tune_readahead
        from gravfs.fuse.options import MountOptions, parse
        options = ",".join(sorted(parse([]).fuse))  # a gravfs mount's: default_permissions
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "fuse_floor.py"),
                                      self.mnt, "-o", options, *self.args, *extra], env=self.env)
        wait_mounted(self.mnt, timeout=120)
        tune_readahead(self.mnt, MountOptions().readahead_kb)  # as a gravfs daemon does
        return self.mnt

    def umount(self) -> None:
        unmount(self.mnt)
        if self.proc is not None:
            self.proc.wait(timeout=30)
            self.proc = None


def upload_dataset(client, bucket: str, prefix: str, directory: str, manifest: str) -> str:
    """Upload a directory's files under ``prefix/parquet/``; write the manifest the work
    floor's ``--objects`` reads (name, key, size, SHA-256 of each) and return its path."""
    objects = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        key = f"{prefix}/parquet/{name}"
        client.upload_file(path, bucket, key)
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        objects.append({"name": name, "key": key, "size": os.path.getsize(path), "sha256": digest})
    with open(manifest, "w") as f:
        json.dump(objects, f)
    return manifest


class Rclone:
    def __init__(self, base: str, endpoint: str, bucket: str, key: str, secret: str):
        self.base = base
        self.mnt = os.path.join(base, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.prefix = f"rclone-{uuid.uuid4().hex[:8]}"
        self.remote = f"sw:{bucket}/{self.prefix}"
        self.env = dict(os.environ, RCLONE_CONFIG_SW_TYPE="s3", RCLONE_CONFIG_SW_PROVIDER="Other",
                        RCLONE_CONFIG_SW_ENDPOINT=endpoint, RCLONE_CONFIG_SW_ACCESS_KEY_ID=key,
                        RCLONE_CONFIG_SW_SECRET_ACCESS_KEY=secret, RCLONE_CONFIG_SW_REGION="us-east-1",
                        RCLONE_CONFIG="/dev/null")
        self.env.pop("AWS_CA_BUNDLE", None)  # rclone refuses a CA bundle on a plain-HTTP transport
        self.caches = 0

    def run(self, *args: str) -> None:
        res = subprocess.run(["rclone", *args], env=self.env, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"rclone {' '.join(args)} failed: {res.stderr.strip()[-2000:]}")

    def setup(self, big_local: str, small_local: str, spark_local: str | None) -> None:
        self.run("copyto", big_local, f"{self.remote}/big")
        self.run("copy", "--transfers", "16", small_local, f"{self.remote}/small")
        if spark_local:
            self.run("copy", spark_local, f"{self.remote}/parquet")

    def mount(self) -> str:
        self.caches += 1
        cache = os.path.join(self.base, f"cache{self.caches}")
        subprocess.run(["rclone", "mount", self.remote, self.mnt, "--daemon", "--vfs-cache-mode", "full",
                        "--cache-dir", cache, "--dir-cache-time", "1h", "--attr-timeout", "1s",
                        "--vfs-read-chunk-size", "16M"], check=True, env=self.env)
        wait_mounted(self.mnt)
        return self.mnt

    def umount(self) -> None:
        unmount(self.mnt)


# -- measurement ---------------------------------------------------------------------------

GROUPS = {"read", "write", "stat", "create", "ls", "spark", "requests", "scale"}  # --only's


def wanted(a, group: str) -> bool:
    return not a.only or group in a.only


def take_turns(n: int, runs: dict[str, Iterator[None]], out: dict, tolerated: dict) -> None:
    """Run 1 of every target, then run 2 of every target, and so on. A shared VM's speed
    drifts by the minute (the fixed loop's time moved 1.5x within a 3-minute run), so
    targets measured one after another would each meet a different machine, and their
    ratios would show the drift. ``tolerated``: baselines whose failure (reported in
    their figures as ``error``) must not stop the others, with what to unmount then."""
    live = dict(runs)
    for r in range(n):
        for name, steps in list(live.items()):
            print(f"{name}: run {r + 1} of {n} ...", flush=True)
            try:
                next(steps, None)
            except (Exception, SystemExit) as exc:
                if name not in tolerated:
                    raise
                out[name]["error"] = repr(exc)
                print(f"{name} stopped: {exc!r}", file=sys.stderr)
                tolerated[name].umount()
                del live[name]


def bench_native(a, data: dict, spark, out: dict) -> Iterator[None]:
    out.update({k: [] for k in ("read_cold_MBps", "read_warm_MBps", "read_warm3_MBps",
                                 "streams_first_ms", "stat_per_s", "create_per_s",
                                 "readback_per_s", "readback_random_per_s", "ls_l_s",
                                 "write_MBps", "write_small_MBps", "write_close_s", "spark_cold_s",
                                 "spark_warm_s")})
    smalls = [os.path.join(data["small"], n) for n in sorted(os.listdir(data["small"]))]
    for r in range(a.runs):
        if wanted(a, "read"):
            read_cold_then_warm(data["big"], out, "read_cold_MBps")
            out["streams_first_ms"].append(first_byte_among_streams_ms(data["big"]))
        if wanted(a, "write"):
            write_then_close(os.path.join(data["base"], f"written{r}"), a.big_mb, out)
            write_small(os.path.join(data["base"], f"small-writes{r}"), out)
        if wanted(a, "stat"):
            stat_rate(smalls)
            out["stat_per_s"].append(stat_rate(smalls, 1.0))
        if wanted(a, "create"):
            # kept until the run's end: on ext4, creates in a block group whose inodes
            # were just freed take 10-100x longer (for minutes), so deleting them here
            # would make the next run measure that, and so would the targets after this
            out["create_per_s"].append(create_rate(os.path.join(data["base"], f"creates{r}"),
                                                   a.creates))
            read_back(os.path.join(data["base"], f"creates{r}"), out)
        if wanted(a, "ls"):
            out["ls_l_s"].append(ls_l_seconds(data["many"]))
        if spark and wanted(a, "spark"):
            spark.measure(data["parquet"], out)
        yield


def bench_gravfs(a, g: Gravfs, spark, out: dict, requests: dict) -> Iterator[None]:
    """``requests``: the requests group's profile is filed here (local stores only)."""
    out.update({k: [] for k in ("read_cold_store_MBps", "read_cold_tier_MBps", "read_warm_MBps",
                                 "read_warm3_MBps", "read_warm_branch_MBps", "first_byte_ms",
                                 "streams_first_ms",
                                 "stat_commit_per_s", "stat_branch_first_per_s", "stat_branch_per_s",
                                 "create_per_s", "writeback_s", "writeback_cpu_s",
                                 "readback_per_s", "readback_random_per_s", "ls_l_s",
                                 "write_MBps", "write_small_MBps", "write_close_s", "write_upload_s",
                                 "spark_cold_s", "spark_warm_s", "daemon_cpu_s")})
    for r in range(a.runs):
        out.setdefault("python_loop_ms", []).append(python_loop_ms())  # the host's speed now
        p = g.paths()
        big = os.path.join(p["commit"], "big")
        if wanted(a, "read"):
            # cold from the store: a fresh workspace, page cache dropped
            g.mount(fresh=True)
            out["first_byte_ms"].append(first_byte_ms(big))
            drop_caches()
            out["read_cold_store_MBps"].append(read_MBps(big))
            g.umount()
            g.mount(fresh=True)  # nothing of big in the daemon's chunk cache
            out["streams_first_ms"].append(first_byte_among_streams_ms(big))
            g.umount()
            # cold from the local tier: the main workspace holds the object
            g.prime_tier(g.state)
        g.mount()
        cpu0 = g.daemon_cpu()
        if wanted(a, "read"):
            read_cold_then_warm(big, out, "read_cold_tier_MBps")
            bbig = os.path.join(p["branch"], "big")
            read_MBps(bbig)
            out["read_warm_branch_MBps"].append(read_MBps(bbig))
        if wanted(a, "stat"):
            sm = os.path.join(p["commit"], "small")
            names = sorted(os.listdir(sm))
            smalls = [os.path.join(sm, n) for n in names]
            stat_rate(smalls)
            out["stat_commit_per_s"].append(stat_rate(smalls, 1.0))
            # branch names the kernel has not seen yet (no listing of the branch directory)
            bsmalls = [os.path.join(p["branch"], "small", n) for n in names]
            out["stat_branch_first_per_s"].append(stat_rate(bsmalls))
            out["stat_branch_per_s"].append(stat_rate(bsmalls, 3.0))
            for k, v in busy_statfs(g.mnt).items():
                out.setdefault(k, []).append(v)
        if wanted(a, "write"):
            write_then_close(os.path.join(p["branch"], f"written{r}"), a.big_mb, out)
            # its upload from pending, after the close (and before the next group)
            out["write_upload_s"].append(writeback_seconds(g.state))
            write_small(os.path.join(p["branch"], f"small-writes{r}"), out)
            writeback_seconds(g.state)  # (its upload too, before the next group)
        if r == 0 or not a.slow_once:
            if wanted(a, "create"):
                out["create_per_s"].append(create_rate(os.path.join(p["branch"], f"creates{r}"),
                                                       a.creates))
                cpu = g.daemon_cpu()
                out["writeback_s"].append(writeback_seconds(g.state))
                out["writeback_cpu_s"].append(g.daemon_cpu() - cpu)
                read_back(os.path.join(p["branch"], f"creates{r}"), out)
            if wanted(a, "ls"):
                out["ls_l_s"].append(ls_l_seconds(os.path.join(p["commit"], "many")))
        if spark and wanted(a, "spark"):
            spark.measure(os.path.join(p["commit"], "parquet"), out)
        out["daemon_cpu_s"].append(g.daemon_cpu() - cpu0)
        g.umount()
        if wanted(a, "requests") and g.name.startswith("gravfs-local"):
            file_profiles(requests, profile_requests(
                a, r, lambda path: os.path.join(g.mount(env={"GRAVFS_OPSTATS": path}), "branches", "main"),
                g.umount, read_opstats, g.base, settle=lambda: writeback_seconds(g.state)))
        yield


def bench_floor(a, fl: Floor, spark, out: dict, requests: dict) -> Iterator[None]:
    """``requests``: the requests group's profile is filed here (on the work floor, of
    creates only: its stats are the floor's)."""
    out.update({k: [] for k in ("read_cold_MBps", "read_warm_MBps", "read_warm3_MBps",
                                "stat_first_per_s", "stat_per_s", "create_per_s",
                                "readback_per_s", "readback_random_per_s", "ls_l_s",
                                "write_MBps", "write_small_MBps", "write_close_s", "spark_cold_s",
                                "spark_warm_s")})
    for r in range(a.runs):
        out.setdefault("python_loop_ms", []).append(python_loop_ms())  # the host's speed now
        mnt = fl.mount()
        big = os.path.join(mnt, "big")
        if wanted(a, "read"):
            read_cold_then_warm(big, out, "read_cold_MBps")
        if wanted(a, "write") and "write" in fl.groups:
            write_then_close(os.path.join(mnt, f"written{r}"), a.big_mb, out)
            write_small(os.path.join(mnt, f"small-writes{r}"), out)
        if wanted(a, "stat") and "stat" in fl.groups:
            smalls = [os.path.join(mnt, "small", n) for n in small_names(a.stats)]
            out["stat_first_per_s"].append(stat_rate(smalls))  # not listed: a lookup each
            out["stat_per_s"].append(stat_rate(smalls, 3.0))
            for k, v in busy_statfs(mnt).items():
                out.setdefault(k, []).append(v)
        if r == 0 or not a.slow_once:
            if wanted(a, "create") and "create" in fl.groups:
                out["create_per_s"].append(create_rate(os.path.join(mnt, f"creates{r}"), a.creates))
                read_back(os.path.join(mnt, f"creates{r}"), out)
            if wanted(a, "ls") and "ls" in fl.groups:
                out["ls_l_s"].append(ls_l_seconds(os.path.join(mnt, "many")))
        if spark and wanted(a, "spark") and "spark" in fl.groups:
            spark.measure(os.path.join(mnt, "parquet"), out)
        fl.umount()
        if wanted(a, "requests") and not fl.s3:
            ops = [op for op, group in (("create", "create"), ("stat_first", "stat"))
                   if group in fl.groups]
            file_profiles(requests, profile_requests(a, r, lambda path: fl.mount(count=path),
                                                     fl.umount, _read_json, fl.base, ops))
        yield


def bench_rclone(a, rc: Rclone, spark, out: dict) -> Iterator[None]:
    out.update({k: [] for k in ("read_cold_store_MBps", "read_warm_MBps", "first_byte_ms",
                                "streams_first_ms", "stat_per_s", "create_per_s",
                                "readback_per_s", "readback_random_per_s", "write_MBps",
                                "write_close_s", "spark_cold_s", "spark_warm_s")})
    for r in range(a.runs):
        mnt = rc.mount()
        big = os.path.join(mnt, "big")
        if wanted(a, "read"):
            out["first_byte_ms"].append(first_byte_ms(big))
            rc.umount()
            mnt = rc.mount()
            out["streams_first_ms"].append(first_byte_among_streams_ms(os.path.join(mnt, "big")))
            rc.umount()
            mnt = rc.mount()
            read_cold_then_warm(big, out, "read_cold_store_MBps", warm3=False)
        if wanted(a, "stat"):
            sm = os.path.join(mnt, "small")
            smalls = [os.path.join(sm, n) for n in sorted(os.listdir(sm))]
            stat_rate(smalls)
            out["stat_per_s"].append(stat_rate(smalls, 1.0))
        if (r == 0 or not a.slow_once) and wanted(a, "create"):
            out["create_per_s"].append(create_rate(os.path.join(mnt, f"creates{r}"), a.creates))
            read_back(os.path.join(mnt, f"creates{r}"), out)
        if wanted(a, "write"):
            write_then_close(os.path.join(mnt, f"written{r}"), a.big_mb, out)
            write_small(os.path.join(mnt, f"small-writes{r}"), out)
        if spark and wanted(a, "spark"):
            spark.measure(os.path.join(mnt, "parquet"), out)
        rc.umount()
        yield


# -- report --------------------------------------------------------------------------------

TARGETS = ("native", "pyfuse3-floor", "pyfuse3-work-floor", "gravfs-local", "gravfs-local-nospin",
           "pyfuse3-work-floor-s3", "gravfs-s3", "rclone-s3", "s3-get-floor")
DEFAULT_TARGETS = tuple(t for t in TARGETS if t != "gravfs-local-nospin")
# the columns of the floor key in ROWS, and the gravfs targets each is the floor of
FLOORS = {"pyfuse3-floor": ("gravfs-local", "gravfs-local-nospin", "gravfs-s3"),
          "pyfuse3-work-floor": ("gravfs-local", "gravfs-local-nospin"),
          "pyfuse3-work-floor-s3": ("gravfs-s3",)}

ROWS = [  # label, native key, gravfs key, rclone key, pyfuse3-floor key, higher is better
    ("seq read cold, store (MB/s)", "read_cold_MBps", "read_cold_store_MBps", "read_cold_store_MBps",
     "read_cold_MBps", True),
    ("seq read cold, local tier (MB/s)", "read_cold_MBps", "read_cold_tier_MBps", None, None, True),
    ("seq read warm (MB/s)", "read_warm_MBps", "read_warm_MBps", "read_warm_MBps", "read_warm_MBps", True),
    ("seq read warm, 3rd read (MB/s)", "read_warm3_MBps", "read_warm3_MBps", None, "read_warm3_MBps", True),
    ("seq read warm, branch path (MB/s)", "read_warm_MBps", "read_warm_branch_MBps", None, None, True),
    ("first byte, cold (ms)", None, "first_byte_ms", "first_byte_ms", None, False),
    ("first MiB among 3 streams, cold (ms)", "streams_first_ms", "streams_first_ms",
     "streams_first_ms", None, False),
    ("stat/s commits/ (cached)", "stat_per_s", "stat_commit_per_s", None, None, True),
    ("stat/s branch, first pass", "stat_per_s", "stat_branch_first_per_s", None, "stat_first_per_s", True),
    ("stat/s branch, steady", "stat_per_s", "stat_branch_per_s", "stat_per_s", "stat_per_s", True),
    # (no native key: a native statfs does not queue behind other clients' requests)
    ("statfs among 2 busy clients (ms)", None, "busy_statfs_ms", None, "busy_statfs_ms", False),
    ("  the same, max (ms)", None, "busy_statfs_max_ms", None, "busy_statfs_max_ms", False),
    ("  the clients' getxattr/s", None, "busy_clients_per_s", None, "busy_clients_per_s", True),
    ("seq write + close, big file (MB/s)", "write_MBps", "write_MBps", "write_MBps", "write_MBps", True),
    # (no native key: its close takes microseconds, a ratio to it says nothing)
    ("close of that file (s)", None, "write_close_s", "write_close_s", "write_close_s", False),
    ("its upload after the close (s)", None, "write_upload_s", None, None, False),
    ("8 KiB writes, 32 MiB file (MB/s)", "write_small_MBps", "write_small_MBps", "write_small_MBps",
     "write_small_MBps", True),
    ("create 4 KiB files (files/s)", "create_per_s", "create_per_s", "create_per_s", "create_per_s", True),
    ("write-back of those files (s)", None, "writeback_s", None, None, False),
    # then read back whole, page cache dropped: rclone's from its cache, gravfs-s3's from
    # what it kept of its uploads, the floor's from memory, the work floor's from its copies
    ("read back of those files (files/s)", "readback_per_s", "readback_per_s", "readback_per_s",
     "readback_per_s", True),
    ("  the same, shuffled (files/s)", "readback_random_per_s", "readback_random_per_s",
     "readback_random_per_s", "readback_random_per_s", True),
    ("ls -l of big dir (s)", "ls_l_s", "ls_l_s", None, "ls_l_s", False),
    ("Spark Parquet scan, cold (s)", "spark_cold_s", "spark_cold_s", "spark_cold_s", "spark_cold_s",
     False),
    ("Spark Parquet scan, warm (s)", "spark_warm_s", "spark_warm_s", "spark_warm_s", "spark_warm_s",
     False),
    # the host's speed at each run's start: ratios of targets measured minutes apart
    # mean little when it moved between them
    ("fixed Python loop, run start (ms)", None, "python_loop_ms", None, "python_loop_ms", False),
]


FLOOR_RATIOS = [  # label, gravfs key, floor key: the goals of issue #15 stated against a floor
    ("cold read from the store", "read_cold_store_MBps", "read_cold_MBps"),
    ("warm read", "read_warm_MBps", "read_warm_MBps"),
    ("stat first pass", "stat_branch_first_per_s", "stat_first_per_s"),
    ("creates", "create_per_s", "create_per_s"),
    ("Spark cold scan's time", "spark_cold_s", "spark_cold_s"),
]


def table(results: dict) -> str:
    med = {t: {k: median(v) for k, v in r.items()} for t, r in results["targets"].items()}
    targets = [t for t in TARGETS if t in med]
    lines = [f"{'':36}" + "".join(f"{t:>22}" for t in targets)]
    for label, nk, gk, rk, fk, higher in ROWS:
        base = med.get("native", {}).get(nk) if nk else None
        cells = []
        for t in targets:
            key = {"native": nk, "rclone-s3": rk, **dict.fromkeys(FLOORS, fk)}.get(t, gk)
            v = med[t].get(key) if key else None
            if v is None:
                cells.append(f"{'-':>22}")
                continue
            txt = f"{v:.3g}" if v < 100 else f"{v:,.0f}"
            if base and t != "native":
                ratio = v / base if higher else base / v
                txt += f" ({ratio:.2f}x)"
            cells.append(f"{txt:>22}")
        lines.append(f"{label:36}" + "".join(cells))
    lines.append("ratios: fraction of native speed (time-based rows: native time / target time)")
    rc = med.get("rclone-s3", {}).get("read_cold_store_MBps")
    if rc:
        lines.append("cold store read against rclone on the same bucket: " + ", ".join(
            f"{t} {med[t]['read_cold_store_MBps'] / rc:.2f}x" for t in ("gravfs-s3", "s3-get-floor")
            if med.get(t, {}).get("read_cold_store_MBps")))
    for fl, of in FLOORS.items():
        f = med.get(fl, {})
        parts = [f"{label} {t} {med[t][gk] / f[fk]:.2f}x" for label, gk, fk in FLOOR_RATIOS
                 for t in of if f.get(fk) and med.get(t, {}).get(gk)]
        if parts:
            lines.append(f"against {fl}: " + ", ".join(parts))
    return "\n".join(lines)


def s3_get_MBps(client, bucket: str, key: str, size: int) -> float:
    """MB/s of reading one object with ranged GETs of the reader's chunk size, as many
    in flight as its read-ahead keeps, each body read and dropped (page cache dropped
    first: the server reads its disk)."""
    from concurrent.futures import ThreadPoolExecutor
    from gravfs.data.reader import CHUNK, MAX_AHEAD

    def get(offset: int) -> int:
        end = min(size, offset + CHUNK) - 1
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{end}")["Body"]
        n = 0
        while True:
            b = body.read(MiB)
            if not b:
                return n
            n += len(b)

    drop_caches()
    t = time.perf_counter()
    with ThreadPoolExecutor(MAX_AHEAD) as pool:
        n = sum(pool.map(get, range(0, size, CHUNK)))
    el = time.perf_counter() - t
    if n != size:
        raise RuntimeError(f"s3-get-floor read {n} bytes of {size}")
    return n / MiB / el


def s3_client(server):
    """A boto3 client of the bench's SeaweedFS, with a connection for every GET in flight."""
    import boto3
    from botocore.config import Config
    from gravfs.data.reader import MAX_AHEAD
    return boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1",
                        aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                        config=Config(max_pool_connections=2 * MAX_AHEAD))


def bench_s3_floor(a, server, big_local: str, out: dict) -> Iterator[None]:
    client = s3_client(server)
    key = f"s3-get-floor-{uuid.uuid4().hex[:8]}/big"
    client.upload_file(big_local, server.bucket, key)
    size = os.path.getsize(big_local)
    out["read_cold_store_MBps"] = []
    for _ in range(a.runs):
        out["read_cold_store_MBps"].append(s3_get_MBps(client, server.bucket, key, size))
        yield



# -- scale: a branch of N entries -----------------------------------------------------------

def find_files(*tops: str) -> tuple[float, int]:
    """(seconds, files) of ``find TOP... -type f``."""
    t = time.perf_counter()
    res = subprocess.run(["find", *tops, "-type", "f"], capture_output=True, check=True)
    return time.perf_counter() - t, res.stdout.count(b"\n")


def forget_dentries() -> bool:
    """Make the kernel drop unused dentries and inodes (FORGET to every FUSE daemon)."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def timed_requests(mnt: str, prefix: str, out: dict):
    """Time a request every 5 ms while the block runs (statfs: the kernel asks the
    daemon each time); put ``<prefix>_wait_{median,p99,max}_ms`` and the probe count
    in ``out``: how long another client's request waits behind the block's work."""
    import threading
    waits: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                os.statvfs(mnt)
            except OSError:
                pass  # (a floor without statfs answers ENOSYS: a round trip all the same)
            waits.append(time.perf_counter() - t)
            stop.wait(0.005)

    th = threading.Thread(target=probe, daemon=True)
    th.start()
    try:
        yield waits
    finally:
        stop.set()
        th.join()
    if waits:
        waits.sort()
        out.update({f"{prefix}_probes": len(waits),
                    f"{prefix}_wait_median_ms": statistics.median(waits) * 1e3,
                    f"{prefix}_wait_p99_ms": waits[int(len(waits) * 0.99)] * 1e3,
                    f"{prefix}_wait_max_ms": waits[-1] * 1e3})


def forget_stalls(mnt: str, forgotten: Callable[[], bool], min_s: float = 0.0,
                  timeout: float = 120.0) -> dict:
    """The kernel told to forget the inodes it holds (``forget_dentries``) while a request
    is timed (``timed_requests``), until ``forgotten()`` and at least ``min_s`` seconds:
    how long that took, and how long a request waited meanwhile, which is how long the
    daemon's handling of a FORGET batch holds the other requests. {} when the kernel
    cannot be told."""
    out: dict = {}
    with timed_requests(mnt, "forget", out) as waits:
        t0 = time.perf_counter()
        if not forget_dentries():
            return {}
        while (time.perf_counter() - t0 < min_s or not forgotten() or not waits) and \
                time.perf_counter() - t0 < timeout:
            time.sleep(0.05)
        out["forget_s"] = time.perf_counter() - t0
    return out


SCALE_STATS = 2000  # random files stat'ed once, cold (fresh daemon, caches dropped)
SCALE_COLD_RUNS = 3  # fresh mounts of those cold stats (the median is quoted)
SCALE_SETTLE_S = 3.0  # a mount's idle time before its "settled" cold stats


def scale_sample(n: int, k: int) -> list[str]:
    """Relative paths of random files of bench_repo.build_branch's n-entry tree of k files
    a day (the floor's --lake tree has the same names)."""
    from bench_repo import key
    return [key(i, k).decode() for i in random.Random(n).sample(range(n), min(n, SCALE_STATS))]


def disk_random_reads(directory: str, count: int = SCALE_STATS, size: int = 4096) -> float:
    """Random ``size``-byte reads per second from the files under ``directory`` (its
    range SSTs) with the page cache dropped: the disk's share of a cold lookup, which
    reads at least one metadata block that no cache holds."""
    files = [os.path.join(directory, f) for f in sorted(os.listdir(directory))]
    rnd = random.Random(count)
    picks = []
    for path in rnd.choices(files, k=count):
        blocks = max(1, os.path.getsize(path) // size)
        picks.append((path, rnd.randrange(blocks) * size))
    drop_caches()
    fds: dict[str, int] = {}
    t = time.perf_counter()
    try:
        for path, offset in picks:
            fd = fds.get(path)
            if fd is None:
                fd = fds[path] = os.open(path, os.O_RDONLY)
            os.pread(fd, size, offset)
        return count / (time.perf_counter() - t)
    finally:
        for fd in fds.values():
            os.close(fd)


SCALE_IN_ORDER = 20000  # files of the first pass in order (a day directory's, by default)


def in_order_files(n: int, k: int) -> list[str]:
    """Relative paths, in name order, of SCALE_IN_ORDER files from the middle of
    bench_repo.build_branch's n-entry tree of k files a day, starting a day: with 20k a
    day, one whole day directory (the floor's --lake tree has the same names)."""
    from bench_repo import key
    first = max(0, n - SCALE_IN_ORDER) // 2 // k * k
    return [key(i, k).decode() for i in range(first, min(n, first + SCALE_IN_ORDER))]


def largest_dir(n: int, k: int) -> tuple[str, int]:
    """(relative path, entries) of the tree's largest directory: a day in the middle, or
    the directory of the days when there are more days than files a day."""
    from bench_repo import key
    days = -(-n // k)
    if days > k:
        return key(0, k).decode().split("/day=")[0], days
    middle = max(0, n - 1) // k // 2 * k
    return key(middle, k).decode().rpartition("/")[0], min(k, n - middle)


@contextlib.contextmanager
def fresh_mount(mount, umount) -> Iterator[None]:
    mount()
    try:
        yield
    finally:
        umount()


def cold_probes(top: str, n: int, k: int, mount, umount) -> dict:
    """Random first-pass stats and ``ls -l`` of the largest directory (``ls_l_day_s``:
    a 20k-entry day directory by default), each on a fresh mount after the page cache
    and dentries are dropped; and the first pass in order over 20k files on a fresh
    mount with the page cache kept (the stat group's first pass at this scale: what the
    mount's own work costs a name)."""
    out = {}
    with fresh_mount(mount, umount):
        out["first_stat_per_s"] = stat_rate([os.path.join(top, p) for p in in_order_files(n, k)])
    out["cold_stat_runs"] = cold_stat_runs(top, n, k, mount, umount)
    out["cold_stat_per_s"] = statistics.median(out["cold_stat_runs"])
    listed, out["ls_l_entries"] = largest_dir(n, k)
    with fresh_mount(mount, umount):
        drop_caches()
        out["ls_l_day_s"] = ls_l_seconds(os.path.join(top, listed))
    return out


def cold_stat_runs(top: str, n: int, k: int, mount, umount, settle: float = 0.0) -> list[float]:
    """Random first-pass stats a second, each run on a fresh mount right after the page
    cache and dentries are dropped: at once (what the daemon does in the background
    then, its range warm-up, races with the stats as it would with a user's), or after
    the mount sat idle for ``settle`` seconds (a mount made before its first use)."""
    rates = []
    for _ in range(SCALE_COLD_RUNS):
        with fresh_mount(mount, umount):
            time.sleep(settle)
            drop_caches()
            rates.append(stat_rate([os.path.join(top, p) for p in scale_sample(n, k)]))
    return rates


def daemon_memory(mnt: str) -> dict:
    """The daemon's memory report (``user.gravfs.memory``), with ``outside``: its
    anonymous memory (no mapped SSTable pages, which are page cache) less what the
    bounded caches hold, which are sized by budget, not by the inodes the kernel knows."""
    m = json.loads(os.getxattr(mnt, "user.gravfs.memory"))
    m["outside"] = m["rss_anon_bytes"] - m["block_cache_bytes"] - m["read_cache_bytes"]
    return m


def marginal_memory(top: str, mnt: str, mount, umount) -> dict:
    """Anonymous memory a known inode adds, outside the bounded caches: the slope
    between ``find`` over the first half of the day directories and over the rest,
    on a fresh mount. What a bigger lake costs, without the start-up memory and the
    caches that fill in the first thousands of inodes and then stay (stat cache)."""
    with fresh_mount(mount, umount):
        def sample() -> tuple[int, int]:
            m = daemon_memory(mnt)
            return m["inodes"], m["outside"]
        events = os.path.join(top, "tables", "events")
        days = [os.path.join(events, d) for d in sorted(os.listdir(events))]
        half = len(days) // 2
        find_files(*days[:half])
        i1, b1 = sample()
        find_files(*days[half:])
        i2, b2 = sample()
    return {"marginal_inodes": i2 - i1, "rss_per_inode_marginal": (b2 - b1) / max(1, i2 - i1)}


def lake_db(store: str, state: str, dest: str) -> None:
    """A RocksDB holding the branch's committed records: the range SSTs of main's
    metarange ingested as gravfs wrote them (copied), for the lake work floor."""
    import rocksdict
    from gravfs.fs.repository import Repository
    from gravfs.version.committed.reader import range_key
    repo = Repository.open(store, state)
    try:
        with repo.staging.read_txn() as txn:
            metarange = repo.layers("main", txn).metarange
        ranges = [os.path.join(store, range_key(r.id)) for r in repo.committed.iter_ranges(metarange)]
    finally:
        repo.close()
    shutil.rmtree(dest, ignore_errors=True)
    db = rocksdict.Rdict(dest, options=rocksdict.Options(raw_mode=True))
    try:
        db.ingest_external_file(ranges)
    finally:
        db.close()


def floor_scale(base: str, name: str, n: int, k: int, lake: list[str], forget_s: float) -> dict:
    """find (rate, files), the forget after it (timed for ``forget_s``: gravfs's
    forgetting of the same tree), cold stats and ls -l of a day directory on a floor
    whose lake the arguments ``lake`` give (fuse_floor.py --lake N or --lake-db DIR)."""
    fl = Floor(os.path.join(base, f"{name}-scale{n}-{k}"), argparse.Namespace(stats=0, list_entries=0, big_mb=1))
    fl.args += lake
    with fresh_mount(fl.mount, fl.umount):
        waits: dict = {}
        with timed_requests(fl.mnt, "find", waits):
            seconds, files = find_files(os.path.join(fl.mnt, "tables"))
        stalls = forget_stalls(fl.mnt, lambda: True, forget_s)
    return {"find_s": seconds, "find_files": files, "find_rate": files / seconds, **waits, **stalls,
            **cold_probes(fl.mnt, n, k, fl.mount, fl.umount)}


def bench_scale(a, base: str, n: int, k: int) -> dict:
    """A branch of n entries (bench_repo.build_branch: k files per day directory) on a
    local store: ``find``, random cold stats and ``ls -l`` of a day directory against
    the floor on the same shape and against the lake work floor on the same records
    (``fuse_floor.py --lake-db``), and the daemon's memory per inode the kernel knows,
    before and after the kernel forgets them (with the part its bounded caches hold)."""
    from bench_repo import build_branch
    from gravfs.fs.repository import Repository
    out: dict = {"entries": n, "day_files": k}
    root = os.path.join(base, f"scale{n}-{k}")
    g = Gravfs("gravfs-local", os.path.join(root, "store"), root, {})
    repo = Repository.init(g.store, g.state)
    try:
        t = time.perf_counter()
        addr, _ = repo.data.put_bytes(b"x")
        build_branch(repo, n, addr, k)
        out["build_s"] = time.perf_counter() - t
    finally:
        repo.close()
    top = os.path.join(g.mnt, "branches", "main")
    t = time.perf_counter()
    g.mount()
    out["mount_s"] = time.perf_counter() - t
    try:
        counts = lambda: json.loads(os.getxattr(g.mnt, "user.gravfs.inodes"))  # noqa: E731
        m0 = daemon_memory(g.mnt)
        out["rss_start"] = m0["rss_bytes"]
        with timed_requests(g.mnt, "find", out):
            out["find_s"], files = find_files(top)
        out["find_files"] = files
        out["find_rate"] = files / out["find_s"]
        m1 = daemon_memory(g.mnt)
        out["known_inodes"] = m1["inodes"]
        out["rss_after_find"] = m1["rss_bytes"]
        out["rss_per_inode"] = (out["rss_after_find"] - out["rss_start"]) / max(1, out["known_inodes"])
        out["caches_after_find"] = m1["block_cache_bytes"] + m1["read_cache_bytes"]
        out["cache_capacity"] = m1["block_cache_capacity"]
        out["anon_start"], out["anon_after_find"] = m0["rss_anon_bytes"], m1["rss_anon_bytes"]
        out["rss_per_inode_outside_caches"] = (m1["outside"] - m0["outside"]) / max(
            1, out["known_inodes"])
        out["find2_s"] = find_files(top)[0]  # the kernel's dentries, as far as they stayed
        out.update(forget_stalls(g.mnt, lambda: counts()["inodes"] <= 100))
        if "forget_s" in out:
            m2 = daemon_memory(g.mnt)
            out["known_after_drop"] = m2["inodes"]
            out["rss_after_drop"] = m2["rss_bytes"]
            out["rss_after_drop_outside_caches"] = m2["outside"]
        out["daemon_cpu_s"] = g.daemon_cpu()
    finally:
        g.umount()
    out.update(cold_probes(top, n, k, g.mount, g.umount))
    cold = Gravfs("gravfs-local", g.store, root, {}, ("warm_ranges=0",))  # no range warm-up
    for key, target, settle in (("cold_stat_nowarm", cold, 0.0),
                                ("cold_stat_settled", g, SCALE_SETTLE_S),
                                ("cold_stat_settled_nowarm", cold, SCALE_SETTLE_S)):
        out[f"{key}_runs"] = cold_stat_runs(top, n, k, target.mount, target.umount, settle)
        out[f"{key}_per_s"] = statistics.median(out[f"{key}_runs"])
    out.update(marginal_memory(top, g.mnt, g.mount, g.umount))
    out["disk_random_read_per_s"] = disk_random_reads(os.path.join(g.store, "_gravfs", "ranges"))
    db = os.path.join(base, f"lake-db{n}-{k}")
    lake_db(g.store, g.state, db)
    shutil.rmtree(root, ignore_errors=True)
    for prefix, name, lake in (("floor", "floor", ["--lake", str(n), "--lake-day-files", str(k)]),
                               ("work_floor", "workfloor", ["--lake-db", db])):
        out.update({f"{prefix}_{key}": v for key, v in
                    floor_scale(base, name, n, k, lake, out.get("forget_s", 0.0)).items()})
    shutil.rmtree(db, ignore_errors=True)
    if out["work_floor_find_files"] != files:
        raise SystemExit(f"the lake work floor found {out['work_floor_find_files']:,} files, "
                         f"gravfs {files:,}")
    out["work_floor_find_vs_floor"] = out["work_floor_find_rate"] / out["floor_find_rate"]
    out["find_vs_work_floor"] = out["find_rate"] / out["work_floor_find_rate"]
    out["work_floor_cold_stat_vs_floor"] = out["work_floor_cold_stat_per_s"] / out["floor_cold_stat_per_s"]
    out["find_vs_floor"] = out["find_rate"] / out["floor_find_rate"]
    out["cold_stat_vs_floor"] = out["cold_stat_per_s"] / out["floor_cold_stat_per_s"]
    out["first_stat_vs_floor"] = out["first_stat_per_s"] / out["floor_first_stat_per_s"]
    out["work_floor_first_stat_vs_floor"] = (out["work_floor_first_stat_per_s"]
                                             / out["floor_first_stat_per_s"])
    out["first_stat_vs_work_floor"] = out["first_stat_per_s"] / out["work_floor_first_stat_per_s"]
    out["ls_l_day_vs_floor"] = out["ls_l_day_s"] / out["floor_ls_l_day_s"]
    return out


def waits_cells(r: dict, prefix: str) -> str:
    """"median / p99 / max" of ``timed_requests``'s waits for gravfs and both floors."""
    return "  ".join(
        f"{r[p + prefix + '_wait_median_ms']:.2f} / {r[p + prefix + '_wait_p99_ms']:.1f} / "
        f"{r[p + prefix + '_wait_max_ms']:.1f}" if p + prefix + "_wait_max_ms" in r else "-"
        for p in ("", "floor_", "work_floor_"))


def scale_label(r: dict) -> str:
    """A row's shape: its entries, and its files a day when not the default 20k."""
    k = r.get("day_files", 20000)
    return f"{r['entries']:,}" + ("" if k == 20000 else f"/{k:,}")


def scale_table(rows: list[dict]) -> str:
    lines = ["entries      find/s  floor/s  ratio  known inodes  RSS start  after find  B/inode  "
             "B/inode outside caches (anon)  marginal  after drop (known), anon outside caches"]
    for r in rows:
        lines.append(
            f"{scale_label(r):>11} {r['find_rate']:>8,.0f} {r['floor_find_rate']:>8,.0f} "
            f"{r['find_vs_floor']:>5.2f}x {r['known_inodes']:>12,} {r['rss_start'] / MiB:>7.0f} MB "
            f"{r['rss_after_find'] / MiB:>8.0f} MB {r['rss_per_inode']:>8.0f} "
            f"{r['rss_per_inode_outside_caches']:>30.0f}  "
            f"{r.get('rss_per_inode_marginal', float('nan')):>8.0f}  "
            f"{r.get('rss_after_drop', 0) / MiB:>8.0f} MB ({r.get('known_after_drop', '-')}), "
            f"{r.get('rss_after_drop_outside_caches', 0) / MiB:.0f} MB")
    lines.append("entries      lake work floor: find/s  vs floor  gravfs vs it  cold stats/s  vs floor  "
                 "ls -l largest dir s")
    for r in rows:
        if "work_floor_find_rate" in r:
            lines.append(
                f"{scale_label(r):>11} {r['work_floor_find_rate']:>24,.0f} "
                f"{r['work_floor_find_vs_floor']:>8.2f}x {r['find_vs_work_floor']:>11.2f}x "
                f"{r['work_floor_cold_stat_per_s']:>13,.0f} {r['work_floor_cold_stat_vs_floor']:>8.2f}x "
                f"{r['work_floor_ls_l_day_s']:>15.2f}")
    lines.append("entries      mount s  cold stats/s (no warm-up)  floor/s  ratio  disk 4K reads/s  "
                 "ls -l largest dir s  floor s  time ratio  metadata cache after find / budget")
    for r in rows:
        disk = r.get("disk_random_read_per_s")
        nowarm = r.get("cold_stat_nowarm_per_s")
        lines.append(
            f"{scale_label(r):>11} {r['mount_s']:>8.2f} {r['cold_stat_per_s']:>13,.0f} "
            f"{'(-)' if nowarm is None else f'({nowarm:,.0f})':>11} "
            f"{r['floor_cold_stat_per_s']:>8,.0f} {r['cold_stat_vs_floor']:>5.2f}x "
            f"{'-' if disk is None else format(disk, ',.0f'):>16} "
            f"{r['ls_l_day_s']:>16.2f} {r['floor_ls_l_day_s']:>8.2f} {r['ls_l_day_vs_floor']:>10.2f}x  "
            f"{r['caches_after_find'] / MiB:.0f} / {r['cache_capacity'] / MiB:.0f} MB")
    lines.append(f"entries      cold stats/s after {SCALE_SETTLE_S:.0f} s idle: gravfs  "
                 "without its range warm-up  ratio")
    for r in rows:
        if "cold_stat_settled_per_s" in r:
            lines.append(
                f"{scale_label(r):>11} {r['cold_stat_settled_per_s']:>35,.0f} "
                f"{r['cold_stat_settled_nowarm_per_s']:>25,.0f} "
                f"{r['cold_stat_settled_per_s'] / r['cold_stat_settled_nowarm_per_s']:>5.2f}x")
    lines.append("entries      the kernel forgets after find: s  a request's wait meanwhile, ms "
                 "(median / p99 / max): gravfs  floor  lake work floor")
    for r in rows:
        if "forget_s" in r:
            lines.append(f"{scale_label(r):>11} {r['forget_s']:>32.2f}  " + waits_cells(r, "forget"))
    lines.append("entries      another client's request during find, ms (median / p99 / max): "
                 "gravfs  floor  lake work floor")
    for r in rows:
        if "find_wait_max_ms" in r:
            lines.append(f"{scale_label(r):>11} {'':>61}" + waits_cells(r, "find"))
    lines.append("entries      first pass in order, 20k files (stats/s): gravfs  floor  ratio  "
                 "lake work floor  vs floor  gravfs vs it")
    for r in rows:
        if "first_stat_per_s" in r:
            lines.append(
                f"{scale_label(r):>11} {r['first_stat_per_s']:>46,.0f} "
                f"{r['floor_first_stat_per_s']:>6,.0f} {r['first_stat_vs_floor']:>5.2f}x "
                f"{r['work_floor_first_stat_per_s']:>16,.0f} "
                f"{r['work_floor_first_stat_vs_floor']:>8.2f}x {r['first_stat_vs_work_floor']:>12.2f}x")
    return "\n".join(lines)


def parse_scale(text: str) -> list[tuple[int, int]]:
    """``--scale``'s "N[/K],...": (entries, files a day directory) of each branch."""
    from bench_repo import DAY_FILES, MAX_DAYS
    shapes = []
    for item in filter(None, text.split(",")):
        n, _, k = item.partition("/")
        try:
            shape = int(n), int(k) if k else DAY_FILES
        except ValueError:
            raise ValueError(f"{item!r} is not N or N/K (entries, files a day)") from None
        if min(shape) < 1:
            raise ValueError(f"{item!r}: entries and files a day of at least 1")
        if -(-shape[0] // shape[1]) > MAX_DAYS:
            raise ValueError(f"{item!r}: more than {MAX_DAYS:,} day directories")
        shapes.append(shape)
    return shapes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, one run, no Spark (< 3 min)")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    ap.add_argument("--big-mb", type=int)
    ap.add_argument("--creates", type=int)
    ap.add_argument("--list-entries", type=int)
    ap.add_argument("--stats", type=int, help="number of files stat'ed")
    ap.add_argument("--spark-rows", type=int, default=4_000_000)
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--only", default="",
                    help="comma-separated groups to measure: read,write,stat,create,ls,spark,requests,"
                         "scale (default all; scale needs --scale)")
    ap.add_argument("--slow-once", action="store_true",
                    help="creates and ls -l only in the first run (minutes each through a mount)")
    ap.add_argument("--scale", default="",
                    help="scale section: comma-separated branch sizes (e.g. 1000000,10000000): find "
                         "against the floor, daemon memory per known inode; alone with --only scale")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    q = a.quick
    a.only = sorted(filter(None, a.only.split(",")))
    unknown = set(a.only) - GROUPS
    if unknown:  # a typo would measure nothing and still write a result file
        ap.error(f"--only: unknown group(s) {', '.join(sorted(unknown))} "
                 f"(known: {', '.join(sorted(GROUPS))})")
    try:
        a.scale = parse_scale(a.scale)
    except ValueError as exc:
        ap.error(f"--scale: {exc}")
    if "scale" in a.only and not a.scale:  # it would measure nothing
        ap.error("--only scale needs --scale N[,N...]")
    a.runs = a.runs or (1 if q else 3)
    if a.runs < 1:  # no turns at all: an empty result file
        ap.error(f"--runs: at least 1 (got {a.runs})")
    a.big_mb = a.big_mb or (128 if q else 1024)
    a.creates = a.creates or (1000 if q else 10000)
    a.list_entries = a.list_entries or (10000 if q else 100000)
    a.stats = a.stats or (2000 if q else 10000)
    for name in ("creates", "stats", "list_entries", "big_mb"):
        if getattr(a, name) < 1:  # nothing measured, or a division by zero in the profiles
            ap.error(f"--{name.replace('_', '-')}: at least 1 (got {getattr(a, name)})")
    use_spark = not (a.no_spark or q) and wanted(a, "spark")
    targets = a.targets.split(",")
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; choose from {','.join(TARGETS)}")

    base = tempfile.mkdtemp(prefix="gravfs-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    data = {"base": os.path.join(base, "native")}
    for k in ("big", "small", "many", "parquet"):
        data[k] = os.path.join(data["base"], k)
    os.makedirs(data["base"])
    results: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "params": vars(a), "targets": {},
                     "requests": {},
                     "drop_caches": drop_caches(), "nproc": os.cpu_count(), "host": host()}
    spark = server = None
    mounts = []
    floors: dict[str, Floor] = {}  # a floor's failure must not stop the others (take_turns)
    try:
        if a.scale:
            rows = results["scale"] = []
            for n, k in a.scale:
                print(f"scale {n:,} ({k:,} files a day) ...", flush=True)
                rows.append(bench_scale(a, base, n, k))
                print(scale_table(rows[-1:]), flush=True)
            if a.only == ["scale"]:
                targets, use_spark = [], False
        if targets:
            make_big(data["big"], a.big_mb)
            make_small_tree(data["small"], a.stats)
            make_small_tree(data["many"], a.list_entries)
        if use_spark:
            spark = Spark()
            spark.make_dataset(data["parquet"], a.spark_rows)
        spark_local = data["parquet"] if spark else None
        out = results["targets"]
        runs: dict[str, Iterator[None]] = {}  # each target's runs, taken in turn below
        if "native" in targets:
            runs["native"] = bench_native(a, data, spark, out.setdefault("native", {}))
        if "pyfuse3-floor" in targets:
            floors["pyfuse3-floor"] = Floor(os.path.join(base, "floor"), a)
        big = None  # the big file and its digest, for the work floors
        if {"pyfuse3-work-floor", "pyfuse3-work-floor-s3"} & set(targets):
            with open(data["big"], "rb") as f:
                big = (data["big"], hashlib.file_digest(f, "sha256").hexdigest())
        if "pyfuse3-work-floor" in targets:
            floors["pyfuse3-work-floor"] = Floor(os.path.join(base, "workfloor"), a, big=big)
        for name, options in (("gravfs-local", ()), ("gravfs-local-nospin", ("spin_us=0",))):
            if name in targets:
                print(f"{name}: setup ...", flush=True)
                g = Gravfs(name, os.path.join(base, name, "store"), os.path.join(base, name), {},
                           options)
                mounts.append(g)
                g.setup(data["big"], data["small"], spark_local, a.list_entries)
                runs[name] = bench_gravfs(a, g, spark, out.setdefault(name, {}),
                                          results["requests"].setdefault(name, {}))
        if {"gravfs-s3", "rclone-s3", "s3-get-floor", "pyfuse3-work-floor-s3"} & set(targets):
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            from s3server import SeaweedServer, find_weed
            server = SeaweedServer(os.path.join(base, "weed"), find_weed())
            os.makedirs(server.data_dir)
            server.start()
            s3env = {"GRAVFS_S3_ENDPOINT": server.endpoint_url, "AWS_ACCESS_KEY_ID": server.access_key,
                     "AWS_SECRET_ACCESS_KEY": server.secret_key}
            if "pyfuse3-work-floor-s3" in targets:
                print("pyfuse3-work-floor-s3: setup ...", flush=True)
                floors["pyfuse3-work-floor-s3"] = Floor(os.path.join(base, "workfloor-s3"), a, big=big,
                                                        s3=server, dataset=spark_local)
            if "gravfs-s3" in targets:
                print("gravfs-s3: setup ...", flush=True)
                g = Gravfs("gravfs-s3", f"s3://{server.bucket}/bench-{uuid.uuid4().hex[:8]}",
                           os.path.join(base, "gs"), s3env)
                mounts.append(g)
                g.setup(data["big"], data["small"], spark_local, a.list_entries)
                runs["gravfs-s3"] = bench_gravfs(a, g, spark, out.setdefault("gravfs-s3", {}), {})
            if "rclone-s3" in targets:
                print("rclone-s3: setup ...", flush=True)
                rc = Rclone(os.path.join(base, "rc"), server.endpoint_url, server.bucket,
                            server.access_key, server.secret_key)
                mounts.append(rc)
                rc.setup(data["big"], data["small"], spark_local)
                runs["rclone-s3"] = bench_rclone(a, rc, spark, out.setdefault("rclone-s3", {}))
            if "s3-get-floor" in targets and wanted(a, "read"):
                runs["s3-get-floor"] = bench_s3_floor(a, server, data["big"],
                                                      out.setdefault("s3-get-floor", {}))
        for name, floor in floors.items():
            mounts.append(floor)
            runs[name] = bench_floor(a, floor, spark, out.setdefault(name, {}),
                                     results["requests"].setdefault(name, {}))
        take_turns(a.runs, runs, out, tolerated=floors)
    except BaseException as exc:
        results["error"] = repr(exc)
        print(f"benchmark stopped: {exc!r}", file=sys.stderr)
    finally:
        for m in mounts:
            try:
                m.umount()
            except BaseException:
                pass
        if spark:
            spark.stop()
        if server:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)

    results["medians"] = {t: {k: median(v) for k, v in r.items()} for t, r in results["targets"].items()}
    results["requests_runs"] = {t: r for t, r in results["requests"].items() if r}
    results["requests"] = {t: {op: median_profile(runs) for op, runs in r.items()}
                           for t, r in results["requests_runs"].items()}
    results["host"]["python_loop_ms_after"] = python_loop_ms()  # the host's speed may drift
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"mount-{time.strftime('%Y%m%d-%H%M%S')}{'-quick' if q else ''}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print(f"{a.big_mb} MiB file, {a.stats} files stat'ed, {a.creates} creates, "
          f"{a.list_entries}-entry directory, {a.runs} run(s), medians; page cache dropped: "
          f"{results['drop_caches']}")
    h = results["host"]
    print(f"host: {h['cpu'] or 'CPU unknown'}, kernel {h['kernel']}, Python {h['python']} "
          f"(fixed loop {h['python_loop_ms']} ms before, {h['python_loop_ms_after']} ms after), "
          + ", ".join(f"{k} {v}" for k, v in h["packages"].items()))
    print(table(results))
    if results["requests"]:
        print(requests_table(results))
    if results.get("scale"):
        print(scale_table(results["scale"]))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
