"""Memory this process may use: cgroup v1/v2 limits, nested and namespaced groups."""

from __future__ import annotations

from gravfs import sysmem
from gravfs.sstable.cache import default_capacity

GiB = 1 << 30


def _limit(tmp_path, proc_cgroup: str, files: dict[str, str]):
    """cgroup_limit over a made-up /proc/self/cgroup and cgroup mount."""
    root = tmp_path / "cg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "cgroup"
    proc.write_text(proc_cgroup)
    return sysmem.cgroup_limit(str(root), str(proc))


def test_v2_limit_of_the_group_and_the_smallest_above_it(tmp_path):
    assert _limit(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/memory.max": "max\n",
        "kubepods/pod1/memory.max": str(4 * GiB),
        "kubepods/memory.max": str(64 * GiB)}) == 4 * GiB


def test_v1_memory_controller_among_others(tmp_path):
    assert _limit(tmp_path, "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n", {
        "memory/docker/abc/memory.limit_in_bytes": str(2 * GiB),
        "memory/memory.limit_in_bytes": "9223372036854771712"}) == 2 * GiB  # v1's "no limit"


def test_namespaced_group_is_the_mount_root(tmp_path):
    """Inside a cgroup namespace /proc names a path the mount does not have: the
    limit at the mount's root is the container's."""
    assert _limit(tmp_path, "0::/some/host/path\n", {"memory.max": str(3 * GiB)}) == 3 * GiB


def test_no_limit_or_nothing_readable(tmp_path):
    assert _limit(tmp_path, "0::/a\n", {"a/memory.max": "max\n"}) is None
    assert _limit(tmp_path, "0::/a\n", {"a/memory.max": "garbage"}) is None
    assert _limit(tmp_path, "not a cgroup line\n", {"memory.max": "1024"}) is None
    assert sysmem.cgroup_limit(str(tmp_path), str(tmp_path / "missing")) is None


def test_memory_limit_is_at_most_physical_memory():
    phys = sysmem.physical_memory()
    assert phys and phys > 0
    assert 0 < sysmem.memory_limit() <= phys


def test_block_cache_takes_a_quarter_within_bounds():
    assert default_capacity(4 * GiB) == GiB
    assert default_capacity(256 << 20) == 128 << 20  # a small container: the floor
    assert default_capacity(1024 * GiB) == 16 * GiB
    assert default_capacity(None) == 512 << 20


def test_release_free_heap_gives_back_blocks_freed_below_a_live_one():
    """glibc keeps blocks freed below the top of its heap; trimming hands them back."""
    assert 0 < sysmem.resident()["anon"] < sysmem.resident()["rss"]
    blocks = [bytearray(2000) for _ in range(50_000)]  # ~100 MB of C heap, not pymalloc
    pin = bytearray(2000)  # a live block above them: free() alone cannot shrink the heap
    del blocks
    before = sysmem.resident()["anon"]
    assert sysmem.release_free_heap() is True  # glibc: Debian, the machines gravfs runs on
    assert before - sysmem.resident()["anon"] > 50 * (1 << 20)
    del pin
