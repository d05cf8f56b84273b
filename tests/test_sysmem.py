"""Memory this process may use: cgroup v1/v2 limits, nested and namespaced groups."""

from __future__ import annotations

import os

from gravfs import sysmem
from gravfs.sstable.cache import default_capacity

GiB = 1 << 30


def _write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_v2_limit_of_the_group_and_the_smallest_above_it(tmp_path):
    root = str(tmp_path / "cg")
    proc = str(tmp_path / "cgroup")
    _write(proc, "0::/kubepods/pod1/ctr\n")
    _write(f"{root}/kubepods/pod1/ctr/memory.max", "max\n")
    _write(f"{root}/kubepods/pod1/memory.max", str(4 * GiB))
    _write(f"{root}/kubepods/memory.max", str(64 * GiB))
    assert sysmem.cgroup_limit(root, proc) == 4 * GiB


def test_v1_memory_controller_among_others(tmp_path):
    root = str(tmp_path / "cg")
    proc = str(tmp_path / "cgroup")
    _write(proc, "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n")
    _write(f"{root}/memory/docker/abc/memory.limit_in_bytes", str(2 * GiB))
    _write(f"{root}/memory/memory.limit_in_bytes", "9223372036854771712")  # v1's "no limit"
    assert sysmem.cgroup_limit(root, proc) == 2 * GiB


def test_namespaced_group_is_the_mount_root(tmp_path):
    """Inside a cgroup namespace /proc names a path the mount does not have: the
    limit at the mount's root is the container's."""
    root = str(tmp_path / "cg")
    proc = str(tmp_path / "cgroup")
    _write(proc, "0::/some/host/path\n")
    _write(f"{root}/memory.max", str(3 * GiB))
    assert sysmem.cgroup_limit(root, proc) == 3 * GiB


def test_no_limit_or_nothing_readable(tmp_path):
    root = str(tmp_path / "cg")
    proc = str(tmp_path / "cgroup")
    _write(proc, "0::/a\n")
    _write(f"{root}/a/memory.max", "max\n")
    assert sysmem.cgroup_limit(root, proc) is None
    assert sysmem.cgroup_limit(root, str(tmp_path / "missing")) is None
    _write(f"{root}/a/memory.max", "garbage")
    assert sysmem.cgroup_limit(root, proc) is None


def test_memory_limit_is_at_most_physical_memory():
    phys = sysmem.physical_memory()
    assert phys and phys > 0
    assert 0 < sysmem.memory_limit() <= phys


def test_block_cache_takes_a_quarter_within_bounds():
    assert default_capacity(4 * GiB) == GiB
    assert default_capacity(256 << 20) == 128 << 20  # a small container: the floor
    assert default_capacity(1024 * GiB) == 16 * GiB
    assert default_capacity(None) == 512 << 20
