"""How much memory this process may use (physical memory, or less under a cgroup
limit), and giving back what it has freed.

Caches sized from physical memory alone overrun a container's limit (a 4 GiB pod
on a 256 GiB host sees the host's memory in sysconf), and the kernel then kills
the process instead of the cache giving way. Both cgroup versions are read, at
the process's own group and every group above it (each limit applies); inside a
cgroup namespace the process's group is the mount's root, so the root is read
too.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

CGROUP_ROOT = "/sys/fs/cgroup"
_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def physical_memory() -> Optional[int]:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def cgroup_limit(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> Optional[int]:
    """The smallest memory limit of this process's cgroups (v2 memory.max, v1
    memory.limit_in_bytes), or None when none is set or none can be read."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hier, controllers, path = parts
        if controllers == "":  # v2: one unified hierarchy
            limits += _limits(root, path, "memory.max")
        elif "memory" in controllers.split(","):
            limits += _limits(os.path.join(root, "memory"), path, "memory.limit_in_bytes")
    return min(limits) if limits else None


def _limits(top: str, path: str, name: str) -> list[int]:
    """The limits in ``name`` at ``top/path`` and each directory above it, up to top."""
    out = []
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    for depth in range(len(parts), -1, -1):
        value = _read_limit(os.path.join(top, *parts[:depth], name))
        if value is not None:
            out.append(value)
    return out


def _read_limit(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _UNLIMITED else None


def memory_limit() -> Optional[int]:
    """Bytes this process may use: the smaller of physical memory and its cgroup limit
    (None when neither can be read)."""
    known = [v for v in (physical_memory(), cgroup_limit()) if v is not None]
    return min(known) if known else None


def resident() -> dict[str, int]:
    """This process's resident memory in bytes: ``rss`` (all) and ``anon`` (without
    mapped files, whose pages the kernel can drop and read again)."""
    kb = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon"):
                kb[name] = int(value.split()[0])
    return {"rss": kb.get("VmRSS", 0) << 10, "anon": kb.get("RssAnon", 0) << 10}


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim); False
    where there is no such call (another C library).

    glibc returns freed memory by itself only from the top of its heap: blocks freed
    below a live one (a daemon's indexes, after the inodes they served are
    forgotten) stay in the process's memory until this is called."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None
