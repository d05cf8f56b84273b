"""Crash points for tests: the process dies at a named point.

``GRAVFS_CRASH_AT=NAME[:N][@GLOB]`` makes the process die with exit code 99
(``os._exit``: no cleanup, no flush, like ``kill -9``) the N-th time (default:
the first) it reaches the point NAME, counting only hits whose subject (the
object key, for store and tier points) matches GLOB. Every point is listed in
CRASH_POINTS with what has happened when a process dies there; the suite walks
each of them and checks that every ``crash_point("...")`` in the source is
listed (tests/test_faults.py). The variable is read once, when this module is
imported (a point is on every staging write's path): set it in the environment
a process starts with. Unset, a point costs one global lookup. A spec that can
never crash (a name no point has, a hit of 0, a glob on a point without subjects)
is one line on stderr at start.

Store faults (a store that fails or hangs) are gravfs.store.faulty.
"""

from __future__ import annotations

import os
import threading
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import NamedTuple, Optional

CRASH_EXIT_CODE = 99
CRASH_ENV = "GRAVFS_CRASH_AT"

#: Every crash point: name -> what has happened when a process dies there.
CRASH_POINTS: dict[str, str] = {
    "commit:sealed": "the staging token is sealed; nothing is written to the store yet",
    "commit:applied": "changed ranges and the metarange are in the store; no commit object",
    "commit:object-written": "the commit object is in the store; not recorded as pending",
    "commit:pending-recorded": "the commit is recorded as pending in staging; the head has not moved",
    "commit:head-moved": "the head points at the new commit; its sealed tokens are not dropped",
    "import:batch-staged": "one more batch of an import is staged (files uploaded); not committed",
    "import:staged": "every entry of an import is staged; the commit has not started",
    "sst:written": "a range or metarange SST is complete in the workspace's temp directory, "
                   "not yet in the store",
    "staging:in-txn": "inside an LMDB write transaction, before it commits",
    "staging:written": "an LMDB write transaction has committed; the caller has not seen it",
    "data:uploaded": "a file's data object is in the store; its entry is not staged",
    "writeback:pending-moved": "a closed file is moved into pending uploads; its entry is not staged",
    "writeback:before-upload": "an uploader is about to store a pending object",
    "writeback:uploaded": "a pending object is in the store; its pending file is not removed",
    "local:publish": "a local store's temp file is written and synced, not yet renamed or "
                     "linked into place (subject: the key)",
    "tier:fetched": "the tier downloaded an object into a temp file, not yet renamed into "
                    "the cache (subject: the key)",
}

#: The points that pass a subject (an object key or data address) for a glob to match.
SUBJECT_POINTS = frozenset({"writeback:pending-moved", "writeback:before-upload",
                            "writeback:uploaded", "data:uploaded", "tier:fetched",
                            "local:publish"})


class CrashTarget(NamedTuple):
    name: str
    hit: int
    glob: Optional[str]


@lru_cache(maxsize=8)
def parse_crash_spec(spec: str) -> CrashTarget:
    """``NAME[:N][@GLOB]`` as a CrashTarget."""
    name, at, glob = spec.partition("@")
    hit = 1
    head, colon, tail = name.rpartition(":")
    if colon and tail.isdigit() and head:
        name, hit = head, int(tail)
    return CrashTarget(name, hit, glob if at else None)


def spec_problem(spec: str) -> Optional[str]:
    """Why a spec can never crash anything (None: it can): a test that sets one
    would otherwise pass without testing what it names."""
    target = parse_crash_spec(spec)
    if target.name not in CRASH_POINTS:
        return f"no crash point is named {target.name!r} (gravfs.faults.CRASH_POINTS lists them)"
    if target.hit < 1:
        return "the hit to crash at counts from 1"
    if target.glob is not None and target.name not in SUBJECT_POINTS:
        return f"{target.name} passes no subject for the glob {target.glob!r} to match"
    return None


_hits: dict[CrashTarget, int] = {}
_hits_lock = threading.Lock()
_SPEC: Optional[str] = os.environ.get(CRASH_ENV) or None
if _SPEC is not None and (_problem := spec_problem(_SPEC)) is not None:
    os.write(2, f"gravfs: {CRASH_ENV}={_SPEC} never crashes: {_problem}\n".encode())


def crash_point(name: str, subject: Optional[str] = None) -> None:
    """Die here (exit code 99, no cleanup) when ``GRAVFS_CRASH_AT`` names this point."""
    spec = _SPEC
    if spec is None:
        return
    target = parse_crash_spec(spec)
    if target.name != name:
        return
    if target.glob is not None and (subject is None or not fnmatchcase(subject, target.glob)):
        return
    with _hits_lock:
        n = _hits[target] = _hits.get(target, 0) + 1
    if n == target.hit:
        what = f"{name} ({subject})" if subject else name
        os.write(2, f"gravfs: crashed at {what} ({CRASH_ENV}={spec})\n".encode())
        os._exit(CRASH_EXIT_CODE)
