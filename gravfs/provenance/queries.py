"""Provenance and path history from the index (pyarrow, no Spark).

Joins: contents_in_ranges (address -> range, path) with ranges_in_commits
(range -> commits) gives every (commit, path) holding a content;
paths_in_ranges (path -> range, identity) with ranges_in_commits gives the
entry a path has in every commit. Ranges are shared by all the commits that
did not change them, so neither join lists any commit's files.

Branches and tags "containing" a commit are those whose history includes it,
computed at query time (refs move, so they are never indexed): the commit
graph comes from the commits table (one small read), and from each ref's
head a walk goes down no further than the oldest result's generation. Heads
the index does not cover yet (the repository moved on since the last
``gravfs spark index``) are walked through the store until they reach
indexed commits, and reported: results then cover the indexed commits only.
"""

from __future__ import annotations

import heapq
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from gravfs import hashing
from gravfs.errors import AmbiguousRefError
from gravfs.provenance.layout import COMMITS, CONTENTS, PATHS, RANGES_IN_COMMITS
from gravfs.keyrange import prefix_end
from gravfs.provenance.reader import IndexReader
from gravfs.version.history import path_changes
from gravfs.version.refs.commits import Commit

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
ADDRESS_PREFIXES = ("data/", "sparse/")


def looks_like_address(text: str) -> bool:
    """An address as entries store it (data/..., sparse/..., a URL) or a hex digest."""
    return (text.startswith(ADDRESS_PREFIXES) or bool(_URL.match(text))
            or hashing.is_hex_id(text))


class IndexedCommits:
    """Commits as the index holds them (one read of the commits table), falling back to
    the store for commits it does not cover; ``get`` as CommitStore's, for history.walk."""

    def __init__(self, reader: IndexReader, store_commits):
        self.store_commits = store_commits
        self.memo: dict = {}  # walks over these commits (RefReach)
        t = reader.read_all(COMMITS)
        self._commits: dict[str, Commit] = {}
        cols = {n: t.column(n).to_pylist() for n in t.column_names}
        for i, cid in enumerate(cols["id"]):
            h = cid.hex()
            self._commits[h] = Commit(cols["metarange"][i].hex(),
                                      tuple(p.hex() for p in cols["parents"][i]),
                                      cols["message"][i], cols["author"][i],
                                      cols["time_ns"][i], cols["generation"][i],
                                      json.loads(cols["metadata"][i] or "{}"), h)

    @classmethod
    def of(cls, reader: IndexReader, store_commits) -> "IndexedCommits":
        """The reader's commits, read once per reader (the table of an index run never
        changes; a new run means a new reader)."""
        got = reader.memo.get("commits")
        if got is None or got.store_commits is not store_commits:
            got = reader.memo["commits"] = cls(reader, store_commits)
        return got

    def covers(self, cid: str) -> bool:
        return cid in self._commits

    def __len__(self) -> int:
        return len(self._commits)

    def get(self, cid: str) -> Commit:
        c = self._commits.get(cid)
        return c if c is not None else self.store_commits.get(cid)


@dataclass(frozen=True)
class RefHead:
    name: str
    kind: str  # "branch" | "tag"
    commit: str


def list_refs(heads) -> list[RefHead]:
    """Branches and tags as they are now (gravfs.version.refs.heads.Heads)."""
    return ([RefHead(n, "branch", c) for n, c in sorted(heads.branches())]
            + [RefHead(n, "tag", c) for n, c in sorted(heads.tags())])


def ref_bits(commits: IndexedCommits, refs: list[RefHead], targets: set[str]
             ) -> dict[str, int]:
    """For each target commit, the set of refs (bit i: refs[i]) whose history holds it."""
    if not targets or not refs:
        return dict.fromkeys(targets, 0)
    reach = RefReach.of(commits, refs)
    reach.down_to(min(commits.get(t).generation for t in targets))
    bits = reach.bits
    return {t: bits.get(t, 0) for t in targets}


class RefReach:
    """Which refs reach each commit: one walk from all heads at once, newest generation
    first, carrying a bit set of the refs down to the parents (a commit is taken after
    all its children, which have higher generations). The walk stops at the oldest
    generation asked for so far and resumes from there when a later query asks for an
    older one, so a reader answering many queries walks the history once, and one
    query costs the commits since its oldest target, whatever the number of refs."""

    def __init__(self, commits: IndexedCommits, refs: list[RefHead]):
        self.commits = commits
        self.bits: dict[str, int] = {}
        self.heap: list[tuple[int, str]] = []
        for i, ref in enumerate(refs):
            if ref.commit not in self.bits:
                heapq.heappush(self.heap, (-commits.get(ref.commit).generation, ref.commit))
            self.bits[ref.commit] = self.bits.get(ref.commit, 0) | (1 << i)

    @classmethod
    def of(cls, commits: IndexedCommits, refs: list[RefHead]) -> "RefReach":
        """The walk for these refs, kept with the commits while the refs stay the same."""
        key = tuple(refs)
        got = commits.memo.get(("reach", key))
        if got is None:
            commits.memo.clear()  # the refs moved: the old walk answers nothing now
            got = commits.memo[("reach", key)] = cls(commits, refs)
        return got

    def down_to(self, floor: int) -> None:
        """Final bits for every commit of generation >= floor: all their children,
        and so every commit above floor, have been taken."""
        heap, bits, get = self.heap, self.bits, self.commits.get
        while heap and -heap[0][0] > floor:
            _, cid = heapq.heappop(heap)
            b = bits[cid]
            for p in get(cid).parents:
                old = bits.get(p)
                if old is None:
                    heapq.heappush(heap, (-get(p).generation, p))
                    old = 0
                bits[p] = old | b


@dataclass
class Coverage:
    """What the index covers against the refs as they are now."""

    commits: int
    stale_refs: list[RefHead] = field(default_factory=list)

    def note(self) -> Optional[str]:
        if not self.stale_refs:
            return None
        names = ", ".join(r.name for r in self.stale_refs[:5])
        more = f" and {len(self.stale_refs) - 5} more" if len(self.stale_refs) > 5 else ""
        return (f"the provenance index is older than the repository: it covers "
                f"{self.commits} commit(s), and {len(self.stale_refs)} ref(s) ({names}{more}) "
                f"point to newer commits, which these results leave out; update it with "
                f"'gravfs spark index'")


def coverage(commits: IndexedCommits, refs: list[RefHead]) -> Coverage:
    return Coverage(len(commits), [r for r in refs if not commits.covers(r.commit)])


# -- provenance ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Holder:
    """A commit holding the content at a path."""

    commit: Commit
    path: bytes
    branches: tuple[str, ...]
    tags: tuple[str, ...]
    collected: bool = False  # garbage collection expired the commit since it was indexed


@dataclass
class Provenance:
    address: str
    holders: list[Holder]
    coverage: Coverage


def resolve_address(reader: IndexReader, text: str) -> Optional[str]:
    """The indexed address ``text`` names: itself, or the one address whose digest starts
    with a hex ``text`` (AmbiguousRefError when several do); None when none is indexed."""
    if not hashing.is_hex_id(text):
        return text
    found: set[bytes] = set()
    for prefix in ADDRESS_PREFIXES:
        lo = f"{prefix}{text[:2]}/{text}".encode()
        t = reader.scan(CONTENTS, lo, prefix_end(lo), ["address"])
        found.update(t.column("address").unique().to_pylist())
        if len(found) > 1:
            shown = sorted(a.decode("utf-8", "replace") for a in found)
            raise AmbiguousRefError(f"content prefix {text!r} is ambiguous ({shown[0]}, "
                                    f"{shown[1]}, ...)")
    return found.pop().decode("utf-8", "surrogateescape") if found else None


def _commits_of_ranges(reader: IndexReader, range_ids) -> dict[bytes, list[str]]:
    t = reader.get_many(RANGES_IN_COMMITS, range_ids, ["commit_id"])
    out: dict[bytes, list[str]] = {}
    for r, c in zip(t.column("range_id").to_pylist(), t.column("commit_id").to_pylist()):
        out.setdefault(r, []).append(c.hex())
    return out


def provenance(reader: IndexReader, store_commits, heads, address: str,
               collected: Optional[Callable[[list[Commit]], set[str]]] = None) -> Provenance:
    """Every (commit, path) holding ``address``, earliest commit first (then commit id,
    path), with the branches and tags that contain each commit. ``collected(commits)``:
    the ids of those whose trees garbage collection took since the index was built (they
    held the content, which may be gone with them): such holders are marked, not left
    out, as ``gravfs log`` still lists the commits."""
    rows = reader.get(CONTENTS, address.encode("utf-8", "surrogateescape"), ["range_id", "path"])
    by_range: dict[bytes, list[bytes]] = {}
    for r, p in zip(rows.column("range_id").to_pylist(), rows.column("path").to_pylist()):
        by_range.setdefault(r, []).append(p)
    in_commits = _commits_of_ranges(reader, by_range)
    pairs = {(c, p) for r, paths in by_range.items() for c in in_commits.get(r, ())
             for p in paths}
    commits = IndexedCommits.of(reader, store_commits)
    refs = list_refs(heads)
    cov = coverage(commits, refs)
    bits_of = ref_bits(commits, refs, {c for c, _ in pairs})
    names: dict[int, tuple] = {}  # (branches, tags) per set of refs: few distinct ones
    gone = collected([commits.get(c) for c in {c for c, _ in pairs}]) \
        if collected and pairs else set()
    holders = []
    for cid, path in pairs:
        bits = bits_of[cid]
        bt = names.get(bits)
        if bt is None:
            rs = [r for i, r in enumerate(refs) if bits >> i & 1]
            bt = names[bits] = (tuple(r.name for r in rs if r.kind == "branch"),
                                tuple(r.name for r in rs if r.kind == "tag"))
        holders.append(Holder(commits.get(cid), path, *bt, cid in gone))
    holders.sort(key=lambda h: (h.commit.time_ns, h.commit.id, h.path))
    return Provenance(address, holders, cov)


# -- path history -------------------------------------------------------------------------

@dataclass(frozen=True)
class PathChange:
    """A commit that changed the path: ``kind`` added, modified or removed."""

    commit: Commit
    kind: str


@dataclass
class PathHistory:
    changes: list[PathChange]
    coverage: Coverage
    looked_up: int  # commits of the ref's history the index does not cover


def path_identities(reader: IndexReader, key: bytes) -> dict[str, bytes]:
    """commit id -> identity of the entry at ``key``, for every indexed commit that has it."""
    rows = reader.get(PATHS, key, ["range_id", "identity"])
    ident = dict(zip(rows.column("range_id").to_pylist(), rows.column("identity").to_pylist()))
    out = {}
    for r, cids in _commits_of_ranges(reader, ident).items():
        for c in cids:
            out[c] = ident[r]
    return out


def path_history(reader: IndexReader, store_commits, heads, start: str, key: bytes,
                 lookup: Callable[[Commit], Optional[bytes]],
                 limit: Optional[int] = None,
                 ends: Optional[list[Commit]] = None) -> PathHistory:
    """Commits of ``start``'s history (newest first, as ``gravfs log``) that changed ``key``.
    Commits the index does not cover (made since its last run, or expired by garbage
    collection) are answered by ``lookup(commit)``, the entry's identity read from the
    commit's tree; ``ends``: see history.path_changes."""
    at = path_identities(reader, key)
    commits = IndexedCommits.of(reader, store_commits)
    cov = coverage(commits, list_refs(heads))
    looked_up = 0

    def identity(c: Commit) -> Optional[bytes]:
        nonlocal looked_up
        if commits.covers(c.id):
            return at.get(c.id)
        looked_up += 1
        return lookup(c)

    out = [PathChange(c, kind) for c, kind in path_changes(commits, start, identity, limit,
                                                            ends)]
    return PathHistory(out, cov, looked_up)
