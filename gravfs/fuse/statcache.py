"""Stat results of branch trees, kept while the branch cannot have changed.

A branch path's entry depends only on the branch head and the workspace's
staging database. The head is what ``Repository.head`` returns (itself cached
for ``head_ttl``) and every staging change, from this mount or another
process on the workspace, commits an LMDB write transaction and so moves the
environment's ``last_txnid``. Results are filed under that (head, txnid)
version: while both are unchanged a lookup or getattr costs two dictionary
reads and no worker thread, LMDB read transaction, JSON decode or layer walk.

The version is read *before* the stat it labels, so a result can be filed
under an older version than it reflects but never under a newer one.
"""

from __future__ import annotations

import time
from typing import Optional

MISSING = object()  # "not cached" (None is a cached "no such path")
MAX_ENTRIES = 500_000


class BranchStatCache:
    def __init__(self, repo, max_entries: int = MAX_ENTRIES):
        self.repo = repo
        self.max_entries = max_entries
        self._versions: dict[str, tuple] = {}
        self._nodes: dict[str, dict[bytes, object]] = {}
        self.hits = self.misses = 0

    def version(self, branch: str, blocking: bool) -> Optional[tuple]:
        """(head, last staging txn) of a branch; None when only a store read would tell
        (head cache expired) and ``blocking`` is false."""
        head = self._cached_head(branch)
        if head is None:
            if not blocking:
                return None
            head = self.repo.head(branch)
        return head, self.repo.staging.env.info()["last_txnid"]

    def _cached_head(self, branch: str) -> Optional[str]:
        ttl = getattr(self.repo, "head_ttl", 0)
        hit = getattr(self.repo, "_heads_cache", {}).get(branch)
        if ttl <= 0 or not hit or time.monotonic() - hit[0] >= ttl:
            return None
        return hit[1]

    def get(self, branch: str, version: Optional[tuple], key: bytes):
        if version is None or self._versions.get(branch) != version:
            self.misses += 1
            return MISSING
        node = self._nodes[branch].get(key, MISSING)
        if node is MISSING:
            self.misses += 1
        else:
            self.hits += 1
        return node

    def put(self, branch: str, version: tuple, key: bytes, node) -> None:
        if self._versions.get(branch) != version:
            self._versions[branch] = version
            self._nodes[branch] = {}
        nodes = self._nodes[branch]
        if len(nodes) >= self.max_entries:
            nodes.clear()
        nodes[key] = node

    def drop(self, branch: Optional[str] = None) -> None:
        if branch is None:
            self._versions.clear()
            self._nodes.clear()
        else:
            self._versions.pop(branch, None)
            self._nodes.pop(branch, None)
