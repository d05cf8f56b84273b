"""The benchmark scripts and the floor start: each imports what it uses from gravfs
and answers --help. A benchmark that no longer imports (bench_committed.py did, for
five days, after a helper it used was removed) fails here instead of on the day its
figures are wanted."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

from gravfs.fuse import kernel
from tests.fuse_util import *  # noqa: F401,F403 (gravfs_mount, fuse_available, wait_for)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "scripts", "bench_*.py"))) + [
    os.path.join(ROOT, "scripts", "fuse_floor.py")]


def test_the_benchmarks_are_all_here():
    names = {os.path.basename(p) for p in SCRIPTS}
    assert {"bench_mount.py", "bench_repo.py", "bench_committed.py", "fuse_floor.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_a_benchmark_script_imports_and_answers_help(script):
    res = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: " + os.path.basename(script)), res.stdout[:200]


def _script(name: str):
    """scripts/<name>.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.fuse
def test_the_floor_counts_each_request_type(tmp_path):
    """fuse_floor.py --count: what bench_mount's requests group compares gravfs with."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: this test needs a real FUSE mount")
    mnt, counts = tmp_path / "mnt", tmp_path / "counts.json"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "fuse_floor.py"), str(mnt),
                             "-o", "default_permissions", "--small", "3", "--many", "1",
                             "--big-mb", "1", "--count", str(counts)])
    try:
        wait_for(lambda: os.path.ismount(mnt) or proc.poll() is not None, timeout=60)
        assert os.path.ismount(mnt), f"the floor exited ({proc.returncode}) before mounting"
        with open(mnt / "new", "wb") as f:
            f.write(b"x" * 4096)
        for i in range(3):
            assert os.stat(mnt / "small" / f"f{i:06d}").st_size == 100
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # never mounted, or hung: not left running
            proc.kill()
            raise
    with open(counts) as f:
        got = json.load(f)
    assert {k: got[k][0] for k in ("create", "write", "release")} == {
        "create": 1, "write": 1, "release": 1}
    assert got["lookup"][0] >= 5  # new (not there yet), small, its three files
    assert all(n > 0 and 0 <= t < 60 for n, t in got.values())  # handlers never asked: absent
    assert "readdir" not in got
    # gravfs's cache flags: a write-only open bypasses the page cache where gravfs's does,
    # and the kernel then asks no security.capability before the write
    assert ("getxattr" in got) == (not kernel.direct_writes()), got


@pytest.mark.fuse
def test_bench_mount_reads_the_daemons_request_table(gravfs_mount, tmp_path):
    """The requests group reads GRAVFS_OPSTATS as the daemon writes it: the handlers'
    rows, not the timers inside them (dotted names)."""
    m = gravfs_mount
    m.umount()
    stats = str(tmp_path / "opstats")
    m.env["GRAVFS_OPSTATS"] = stats
    m.mount()
    with open(m.branch_path("new"), "wb") as f:
        f.write(b"x" * 4096)
    m.umount()  # writes the table
    bench = _script("bench_mount")
    counts = bench.read_opstats(stats)
    assert counts["create"][0] == 1 and counts["write"][0] == 1 and counts["flush"][0] >= 1
    assert not [k for k in counts if "." in k]
    assert any("." in line.split()[0] for line in open(stats).read().splitlines()[1:]), \
        "the daemon's table has timers inside handlers too (stage.inline): this skips them"
    profile = bench.request_profile(counts, 2, 0.004)
    assert profile["op_us"] == 2000
    assert profile["requests"]["create"] == 0.5
    assert profile["handler_us"]["create"] == pytest.approx(counts["create"][1] / 2 * 1e6)


def test_each_worker_count_of_the_scattered_section_stores_its_ranges(tmp_path):
    """The worker counts apply the same changes: each must write its ranges (a count that
    found the last one's already stored would be timed without the writes)."""
    bench = _script("bench_committed")
    env = bench.Env(str(tmp_path), bench.default_policy())
    ds = bench.Dataset(20_000)
    tree, _ = bench.build_tree(env, ds, bench.base_records(ds, workers=0))
    before = bench.tree_objects(env.store)
    rows = bench.bench_scattered(env, ds, tree, 40, 2, random.Random(1), [1, 2])
    assert [r["workers"] for r in rows] == [1, 2]
    for r in rows:
        assert r["ranges_written"] > 0 and r["bytes_written"] > 0, r
    assert rows[0]["metarange_ids"] == rows[1]["metarange_ids"]
    assert bench.tree_objects(env.store) == before  # the base stays whole


def test_the_merge_in_one_process_writes_its_ranges_too(tmp_path, monkeypatch):
    """bench_repo's merge section merges the same branches twice (on workers, then in one
    process): the second must store its ranges again, not find the first one's."""
    from gravfs.version.committed import parallel
    monkeypatch.setattr(parallel, "default_workers", lambda: 2)  # the one-process run too
    bench = _script("bench_repo")
    out = bench.bench_merge(20_000, 20, 1, str(tmp_path))
    assert out["workers"] == 2
    assert out["objects_written"] > 0
    assert out["single_process_objects_written"] == out["objects_written"]


@pytest.mark.parametrize("script,args,says", [
    ("bench_repo.py", ["--repeat", "0"], "--repeat: at least 1 run"),
    ("bench_repo.py", ["--merge-repeat", "-1"], "--merge-repeat: at least 1 run"),
    ("bench_committed.py", ["--repeat", "0"], "--repeat: at least 1 run"),
    ("bench_committed.py", ["--workers", "1,0"], "--workers: worker counts of at least 1"),
    ("bench_committed.py", ["--workers", "two"], "--workers: worker counts of at least 1"),
])
def test_a_benchmark_refuses_runs_or_workers_below_one(script, args, says):
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and "Traceback" not in res.stderr


def test_scale_shapes_are_parsed_with_their_files_a_day():
    bench = _script("bench_mount")
    assert bench.parse_scale("1000000,200000/8") == [(1000000, 20000), (200000, 8)]
    for bad in ("x", "10/0", "0", "10/y", "10000000/8"):  # the last: 1.25M day directories
        with pytest.raises(ValueError):
            bench.parse_scale(bad)


def test_the_scale_sections_files_and_largest_directory_follow_the_shape():
    bench = _script("bench_mount")
    files = bench.in_order_files(200000, 8)
    assert len(files) == 20000 and files == sorted(files)
    assert files[0].endswith("part-00090000.parquet") and "/day=11250/" in files[0]
    assert bench.largest_dir(200000, 8) == ("tables/events", 25000)  # the days' directory
    day = bench.largest_dir(1000000, 20000)
    assert day == ("tables/events/day=00024", 20000)  # as before N/K
    assert {f.rpartition("/")[0] for f in bench.in_order_files(1000000, 20000)} == {day[0]}


def test_the_created_files_are_read_back_half_shuffled_half_in_order(tmp_path, monkeypatch):
    """Each file once: neither pass finds the other's files in a daemon's memory."""
    bench = _script("bench_mount")
    names = [f"f{i:03d}" for i in range(101)]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    passes = []
    monkeypatch.setattr(bench, "read_back_rate", lambda d, order: passes.append(order) or 1.0)
    out = {"readback_per_s": [], "readback_random_per_s": []}
    bench.read_back(str(tmp_path), out)
    shuffled, in_order = passes
    assert in_order == names[:50]
    assert sorted(shuffled) == names[50:] and shuffled != names[50:]
    assert out == {"readback_per_s": [1.0], "readback_random_per_s": [1.0]}


def test_small_writes_write_the_file_in_buffered_writers_flushes(tmp_path, monkeypatch):
    bench = _script("bench_mount")
    sizes = []
    write = os.write
    monkeypatch.setattr(bench.os, "write", lambda fd, b: sizes.append(len(b)) or write(fd, b))
    out = {"write_small_MBps": []}
    bench.write_small(str(tmp_path / "f"), out)
    assert sizes == [8192] * (32 * 1024 * 1024 // 8192)
    assert len(out["write_small_MBps"]) == 1 and out["write_small_MBps"][0] > 0
    assert not (tmp_path / "f").exists()


@pytest.mark.fuse
def test_the_floors_lake_has_the_branchs_names_in_small_directories(tmp_path):
    """fuse_floor.py --lake N --lake-day-files K: the same tree as bench_repo.build_branch's
    (the scale section compares gravfs with the floor on it)."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: this test needs a real FUSE mount")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from bench_repo import key
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "fuse_floor.py"), str(mnt),
                             "--small", "0", "--many", "0", "--big-mb", "1",
                             "--lake", "50", "--lake-day-files", "8"])
    try:
        wait_for(lambda: os.path.ismount(mnt) or proc.poll() is not None, timeout=60)
        assert os.path.ismount(mnt), f"the floor exited ({proc.returncode}) before mounting"
        got = sorted(os.path.relpath(os.path.join(d, f), mnt)
                     for d, _, names in os.walk(mnt / "tables") for f in names)
        days = os.listdir(mnt / "tables" / "events")
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert got == [key(i, 8).decode() for i in range(50)]
    assert len(days) == 7  # 8 files a day, the last day 2
