"""Walking the commit graph: log order, merge bases, the parent a change is taken against."""

from __future__ import annotations

import heapq
from typing import Callable, Iterator, Optional

from gravfs.errors import CorruptDataError, GravfsError, NotFoundError, TreeGoneError
from gravfs.version.refs.commits import Commit, CommitStore


def walk(commits: CommitStore, starts: list[str], limit: Optional[int] = None,
         damaged: Optional[list[str]] = None) -> Iterator[Commit]:
    """Ancestors of starts, newest first (by generation, then time), each once. A
    commit that cannot be read (damaged, missing) raises, or with ``damaged`` is
    appended there and the walk goes on along the other lines."""
    seen = set(starts)
    heap: list = []

    def push(cid: str) -> None:
        try:
            c = commits.get(cid)
        except (CorruptDataError, NotFoundError) as exc:
            if damaged is None:
                raise
            damaged.append(str(exc))
            return
        heapq.heappush(heap, (-c.generation, -c.time_ns, cid, c))

    for cid in starts:
        push(cid)
    n = 0
    while heap and (limit is None or n < limit):
        _, _, _, c = heapq.heappop(heap)
        yield c
        n += 1
        for p in c.parents:
            if p not in seen:
                seen.add(p)
                push(p)


def change_kind(cur: Optional[bytes], before: list[Optional[bytes]]) -> Optional[str]:
    """How a commit changed a path, from the entry's identity there (None: absent) and in
    each parent (None: it did not). It changed it when it differs from every parent's, as
    git's log -- PATH shows a merge only when it matches none of its parents."""
    if not before:
        return "added" if cur is not None else None
    if any(b == cur for b in before):
        return None
    if cur is None:
        return "removed"
    return "added" if all(b is None for b in before) else "modified"


def path_changes(commits: CommitStore, start: str,
                 identity: Callable[[Commit], Optional[bytes]],
                 limit: Optional[int] = None,
                 ends: Optional[list[Commit]] = None) -> Iterator[tuple[Commit, str]]:
    """(commit, kind) of start's history, newest first as walk(), that changed a path;
    ``identity(c)`` is the path's entry identity in c (None: absent), asked once a commit.

    A tree that is gone (TreeGoneError: garbage collection expires old commits' trees)
    raises, or with ``ends`` ends the history there: the commit whose change can no
    longer be told is appended to it, as git's log stops at a shallow clone's edge."""
    memo: dict[str, Optional[bytes]] = {}

    def at(c: Commit) -> Optional[bytes]:
        if c.id not in memo:
            memo[c.id] = identity(c)
        return memo[c.id]

    n = 0
    for c in walk(commits, [start]):
        if limit is not None and n >= limit:
            return
        parents = [commits.get(p) for p in c.parents]
        try:
            kind = change_kind(at(c), [at(p) for p in parents])
        except TreeGoneError:
            if ends is None:
                raise
            ends.append(c)
            return
        memo.pop(c.id, None)  # walk() yields each commit once, after its children
        if kind is not None:
            yield c, kind
            n += 1


def dir_changes(commits: CommitStore, start: str, differs: Callable[[str, str], bool],
                holds: Callable[[str], bool], limit: Optional[int] = None,
                ends: Optional[list[Commit]] = None) -> Iterator[tuple[Commit, str]]:
    """(commit, kind) of start's history, newest first as walk(), that changed anything
    under a directory: ``differs(parent metarange, metarange)`` says whether the two
    trees differ there, ``holds(metarange)`` whether a tree has anything there. A merge
    counts when it differs from every parent, as git's log -- DIR. ``ends``: as
    path_changes's."""
    n = 0
    for c in walk(commits, [start]):
        if limit is not None and n >= limit:
            return
        before = [commits.get(p).metarange for p in c.parents]
        try:
            if before and not all(differs(mr, c.metarange) for mr in before):
                continue
            now = holds(c.metarange)
            had = [holds(mr) for mr in before]
        except TreeGoneError:
            if ends is None:
                raise
            ends.append(c)
            return
        if not now and not any(had):
            continue
        yield c, ("modified" if now and any(had) else "added" if now else "removed")
        n += 1


def merge_base(commits: CommitStore, a: str, b: str) -> Optional[str]:
    """Best common ancestor: the reachable-from-both commit of highest generation."""
    if a == b:
        return a
    flags: dict[str, int] = {a: 1, b: 2}
    heap = []
    for cid in (a, b):
        c = commits.get(cid)
        heapq.heappush(heap, (-c.generation, cid))
    best: Optional[tuple[int, str]] = None
    while heap:
        neg_gen, cid = heapq.heappop(heap)
        f = flags[cid]
        if f == 3:
            if best is None or -neg_gen > best[0]:
                best = (-neg_gen, cid)
            continue
        if best is not None and -neg_gen < best[0]:
            break
        for p in commits.get(cid).parents:
            old = flags.get(p, 0)
            new = old | f
            if new != old:
                flags[p] = new
                heapq.heappush(heap, (-commits.get(p).generation, p))
    return best[1] if best else None


def is_ancestor(commits: CommitStore, ancestor: str, descendant: str, max_steps: int = 10000) -> bool:
    target = commits.get(ancestor)
    stack, seen = [descendant], set()
    while stack and len(seen) < max_steps:
        cid = stack.pop()
        if cid == ancestor:
            return True
        if cid in seen:
            continue
        seen.add(cid)
        c = commits.get(cid)
        if c.generation <= target.generation:
            continue
        stack.extend(c.parents)
    return False


def change_parent(target: Commit, number: Optional[int], verb: str) -> str:
    """The id of the parent against which ``target``'s change is taken (to revert or to
    cherry-pick it): the only one, or the ``number``-th (from 1) of a merge."""
    n = len(target.parents)
    if n == 0:
        raise GravfsError(f"cannot {verb} {target.id[:12]}: it has no parent")
    if number is None:
        if n > 1:
            shown = ", ".join(f"{i} {p[:12]}" for i, p in enumerate(target.parents, 1))
            raise GravfsError(f"{target.id[:12]} is a merge commit (parents {shown}): say "
                              f"which parent's line to {verb} against with --parent N (1: "
                              "what the merge brought into its first parent)")
        number = 1
    if not 1 <= number <= n:
        raise GravfsError(f"cannot {verb} {target.id[:12]} against parent {number}: it has "
                          f"{n} parent{'s' if n > 1 else ''}")
    return target.parents[number - 1]
