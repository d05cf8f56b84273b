#!/usr/bin/env python3
"""Benchmark the FUSE mount against a plain local directory.

    scripts/bench_mount.py [--store URL] [--files N] [--file-kb K] [--big-mb M] [--json]

Creates a repository (a fresh local store by default; ``--store s3://...`` with
``GRAVFS_S3_ENDPOINT`` and AWS credentials for S3), mounts it, and measures:
small-file creation, stat, listing and reads on a branch; the CLI commit of
those files; cold reads from ``commits/<id>/`` in a fresh workspace (nothing
cached locally); sequential write and read of one big file; and the time to
the first byte of that big file when it is not cached. The same file
operations on a local directory give the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Cli:
    def __init__(self, store: str, state_dir: str):
        self.store, self.state_dir = store, state_dir
        self.env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def __call__(self, *args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", self.store, "--state-dir",
                              self.state_dir, *args], capture_output=True, text=True, env=self.env)
        if res.returncode != 0:
            raise SystemExit(f"gravfs {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def small_files(root: str, n: int, size: int) -> dict:
    payload = os.urandom(size)
    d = os.path.join(root, "small")
    os.makedirs(d, exist_ok=True)
    names = [os.path.join(d, f"f{i:06d}") for i in range(n)]

    def create():
        for p in names:
            with open(p, "wb") as f:
                f.write(payload)

    def stat():
        for p in names:
            os.stat(p)

    def read():
        for p in names:
            with open(p, "rb") as f:
                f.read()

    out = {"create_per_s": n / timed(create), "stat_per_s": n / timed(stat)}
    out["list_s"] = timed(lambda: os.listdir(d))
    out["read_per_s"] = n / timed(read)
    return out


def big_file(path: str, mb: int) -> dict:
    block = os.urandom(1 << 20)

    def write():
        with open(path, "wb") as f:
            for _ in range(mb):
                f.write(block)

    def read():
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass

    return {"write_MBps": mb / timed(write), "read_MBps": mb / timed(read)}


def read_cold(path: str, mb: int) -> dict:
    t = time.perf_counter()
    with open(path, "rb") as f:
        f.read(4096)
        first = time.perf_counter() - t
        while f.read(1 << 20):
            pass
    total = time.perf_counter() - t
    return {"first_byte_ms": first * 1000, "read_MBps": mb / total}


def read_tree(root: str) -> float:
    n = 0
    for d, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                f.read()
            n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="store URL (default: a fresh local store in a temp dir)")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--file-kb", type=int, default=4)
    ap.add_argument("--big-mb", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    base = tempfile.mkdtemp(prefix="gravfs-bench-")
    store = a.store or os.path.join(base, "store")
    if a.store and a.store.startswith("s3://"):
        store = a.store.rstrip("/") + f"/bench-{uuid.uuid4().hex[:8]}"
    cli = Cli(store, os.path.join(base, "state"))
    mnt = os.path.join(base, "mnt")
    os.makedirs(mnt)
    results: dict = {"store": store, "files": a.files, "file_kb": a.file_kb, "big_mb": a.big_mb}
    try:
        local = os.path.join(base, "local")
        results["local_small"] = small_files(local, a.files, a.file_kb << 10)
        results["local_big"] = big_file(os.path.join(local, "big"), a.big_mb)

        cli("init")
        cli("mount", mnt)
        branch = os.path.join(mnt, "branches", "main")
        results["mount_small"] = small_files(branch, a.files, a.file_kb << 10)
        results["mount_big"] = big_file(os.path.join(branch, "big"), a.big_mb)
        results["commit_s"] = timed(lambda: cli("commit", "main", "-m", "bench"))
        cid = json.loads(cli("branch", "list", "--json"))[0]["commit"]
        cli("umount", mnt)

        # a second workspace: nothing of the data is cached locally
        cold = Cli(store, os.path.join(base, "state2"))
        cold("mount", mnt)
        tree = os.path.join(mnt, "commits", cid)
        results["cold_big"] = read_cold(os.path.join(tree, "big"), a.big_mb)
        t = time.perf_counter()
        n = read_tree(os.path.join(tree, "small"))
        results["cold_small_read_per_s"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        read_tree(os.path.join(tree, "small"))
        results["warm_small_read_per_s"] = n / (time.perf_counter() - t)
        cold("umount", mnt)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

    if a.json:
        print(json.dumps(results, indent=1, sort_keys=True))
        return 0
    print(f"store: {results['store']}  ({a.files} files of {a.file_kb} KiB, one {a.big_mb} MiB file)")
    rows = [
        ("create small files /s", results["local_small"]["create_per_s"], results["mount_small"]["create_per_s"]),
        ("stat /s", results["local_small"]["stat_per_s"], results["mount_small"]["stat_per_s"]),
        ("list directory s", results["local_small"]["list_s"], results["mount_small"]["list_s"]),
        ("read small files /s", results["local_small"]["read_per_s"], results["mount_small"]["read_per_s"]),
        ("big write MB/s", results["local_big"]["write_MBps"], results["mount_big"]["write_MBps"]),
        ("big read MB/s", results["local_big"]["read_MBps"], results["mount_big"]["read_MBps"]),
    ]
    print(f"{'':28}{'local dir':>14}{'mount':>14}")
    for name, l, m in rows:
        print(f"{name:28}{l:14.1f}{m:14.1f}")
    print(f"commit of the branch (CLI):    {results['commit_s']:.2f} s")
    print(f"cold commits/<id> big file:    first byte {results['cold_big']['first_byte_ms']:.1f} ms, "
          f"{results['cold_big']['read_MBps']:.1f} MB/s")
    print(f"cold commits/<id> small files: {results['cold_small_read_per_s']:.0f}/s "
          f"(warm {results['warm_small_read_per_s']:.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
