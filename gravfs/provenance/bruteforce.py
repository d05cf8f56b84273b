"""The answers without an index: every commit's tree read in full.

The reference the index's answers must equal (tests) and the baseline the
benchmark measures it against. Cost: every record of every commit.
"""

from __future__ import annotations

from typing import Optional

from gravfs.fs.entry import decode_entry
from gravfs.version.committed.record import decode_value
from gravfs.version.history import walk
from gravfs.version.refs.commits import Commit


def all_commits(repo) -> list[Commit]:
    """Every commit object in the store."""
    return [repo.commits.get(cid) for cid in repo.commits.all_ids()]


def provenance(repo, address: str) -> list[tuple[str, bytes]]:
    """(commit id, path) of every commit holding ``address`` at a path, earliest first."""
    out = []
    for c in all_commits(repo):
        for info in repo.committed.iter_ranges(c.metarange):
            for key, value in repo.committed.ranges.range_items(info.id, fill_cache=False):
                if decode_entry(decode_value(value)[1]).address == address:
                    out.append((c.time_ns, c.id, key))
    out.sort()
    return [(cid, key) for _, cid, key in out]


def refs_containing(repo, commit_id: str) -> tuple[list[str], list[str]]:
    """(branches, tags) whose whole history includes the commit."""
    found: tuple[list[str], list[str]] = ([], [])
    for i, refs in enumerate((repo.list_branches(), repo.list_tags())):
        for name, head in refs:
            if any(c.id == commit_id for c in walk(repo.commits, [head])):
                found[i].append(name)
    return found


def path_history(repo, ref: str, key: bytes, limit: Optional[int] = None
                 ) -> list[tuple[str, str]]:
    """(commit id, change) of the commits of ref's history that changed ``key``, newest
    first: the entry of every commit looked up in its tree."""
    return [(c.id, kind) for c, kind in repo.path_history(ref, key, limit)]
