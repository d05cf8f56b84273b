"""Compaction of staging into a metarange (lakeFS issue 2092).

Deleting many staged or committed entries leaves tombstones that every
listing must step over. Past a threshold the compactor applies the sealed
staging onto the head's metarange, producing a *compacted metarange* that
reads use instead of the head; tombstones of deleted keys then simply vanish.
The branch's base moves to the head the compaction was built on, after the
same conflict check a commit does, so nothing upstream is silently dropped.
It runs under the commit protocol's branch lock and records its result
through the committer (Committer.settle_compaction), like a commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gravfs.errors import ConflictError
from gravfs.version.committer import Committer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionPolicy:
    """When to compact: many tombstones, or many sealed tokens to search."""

    max_tombstones: int = 50_000
    max_sealed: int = 8
    min_entries: int = 10_000

    def due(self, st) -> bool:
        return (st.tombstones >= self.max_tombstones
                or len(st.sealed) >= self.max_sealed
                and st.puts + st.tombstones >= self.min_entries)


def compact(repo, branch: str) -> bool:
    """Compact a branch's staging now; True when a compacted metarange was written."""
    c = Committer(repo)
    with c.branch_lock(branch):
        # a missing branch, a tag or a commit, read past the head cache: before its staging
        # is touched
        repo.writable_head(branch, fresh=True)
        c.recover(branch)
        st = c.seal(branch)
        if not st.sealed:
            return False
        head = repo.commits.get(repo.heads.branch(branch)[0])
        changes, base = c.staged_changes(st, head)
        if base != head.id:
            try:
                c.check_rebase(base, head, changes)
            except ConflictError as exc:
                log.warning("not compacting %s: %s", branch, exc)
                return False
        mr = repo.committed.apply(head.metarange, changes).metarange_id
        if mr == head.metarange:
            c.settle_unchanged(branch, st, head.id)
            log.info("the %d staged change(s) of %s leave its head as it is: dropped",
                     len(changes), branch)
            return False
        c.settle_compaction(branch, list(st.sealed), {"metarange": mr, "base": head.id})
        log.info("compacted %d staged change(s) of %s into metarange %s", len(changes), branch, mr[:12])
        return True


def maybe_compact(repo, branch: str, policy: CompactionPolicy = CompactionPolicy()) -> bool:
    """The sensor: compact when the branch's counters pass the policy's thresholds."""
    st = repo.staging.get_state(branch)
    if policy.due(st):
        return compact(repo, branch)
    return False
