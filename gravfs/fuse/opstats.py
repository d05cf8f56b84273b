"""Per-request counters for diagnosing the mount's speed (off unless asked for).

With ``GRAVFS_OPSTATS=<path>`` in the daemon's environment every handler
wrapped by ``errnos.guarded``/``quiet`` counts its calls and wall time (from
entering the handler to its answer, waits in worker threads and locks
included); the table is written to ``<path>`` every few seconds and at
unmount. Unset, the wrappers are not added at all.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

PATH = os.environ.get("GRAVFS_OPSTATS") or None
_stats: dict[str, list] = defaultdict(lambda: [0, 0.0])
_last_dump = [0.0]


def enabled() -> bool:
    return PATH is not None


def record(name: str, wall: float) -> None:
    s = _stats[name]
    s[0] += 1
    s[1] += wall
    now = time.monotonic()
    if now - _last_dump[0] > 2.0:
        _last_dump[0] = now
        dump()


def dump() -> None:
    if PATH is None:
        return
    rows = sorted(_stats.items(), key=lambda kv: -kv[1][1])
    lines = [f"{'op':16} {'calls':>9} {'total s':>9} {'us/call':>9}"]
    for name, (n, wall) in rows:
        lines.append(f"{name:16} {n:9d} {wall:9.3f} {wall / max(n, 1) * 1e6:9.1f}")
    tmp = PATH + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, PATH)


def reset() -> None:
    _stats.clear()
