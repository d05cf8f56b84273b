"""File/directory collisions: a path that two sides, each fine alone, would make both a
file and a directory.

A directory exists while some key lies under ``dir/`` (its marker ``dir/`` included).
Writes refuse a file where a directory is and paths below a file (gravfs.fs), but a
merge, a revert, a commit rebased onto a moved head or an import can join a file ``a``
from one side with ``a/b`` from the other. The mount could show only one of them, so
these are conflicts, as in git. A layout that one side already holds (data imported
from object stores may have both ``a`` and ``a/b``) is that side's, and is kept.

Such a pair is one key that one side changed and one the other changed (a key
neither changed is in both sides, whose layout it then is): a merge's two change sets,
a rebase's moved head and staged changes (``meeting``). So the work follows the size
of the changes.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Iterable, Iterator

Has = Callable[[bytes], bool]


def file_ancestors(key: bytes) -> Iterator[bytes]:
    """The paths a key needs to be directories ("a", "a/b" for "a/b/c" and for the
    marker "a/b/"), shortest first."""
    i = key.find(b"/")
    while i > 0:
        if key[i - 1:i] != b"/":  # "a//b": "a/" is not a file's name
            yield key[:i]
        i = key.find(b"/", i + 1)


def file_above(key: bytes, is_file: Has) -> bytes | None:
    """The first path above ``key`` that ``is_file`` says is a file, or None."""
    return next((p for p in file_ancestors(key) if is_file(p)), None)


def meeting(theirs: Iterable[bytes], ours: dict[bytes, object]) -> dict[bytes, bytes]:
    """Pairs {file: a key under it} of a key ``theirs`` set (a moved head's changes,
    the smaller side of a merge) and one ``ours`` sets (key -> identity, None to
    delete): the candidates for a new collision. Walks ``theirs``, looking up
    ``ours`` (which may be many)."""
    out: dict[bytes, bytes] = {}
    keys: list[bytes] | None = None
    for k in theirs:
        for p in file_ancestors(k):
            if ours.get(p) is not None:
                out.setdefault(p, k)
        if k.endswith(b"/") or k in out:
            continue
        if keys is None:
            keys = sorted(ours)  # (already in key order: linear)
        under = k + b"/"
        for i in range(bisect_left(keys, under), len(keys)):
            if not keys[i].startswith(under):
                break
            if ours[keys[i]] is not None:
                out[k] = keys[i]
                break
    return out


class InTree:
    """A committed tree, asked about collisions."""

    def __init__(self, committed, metarange_id: str):
        self.committed, self.metarange_id = committed, metarange_id

    def has(self, key: bytes) -> bool:
        return self.committed.get(self.metarange_id, key) is not None

    def first_under(self, path: bytes) -> bytes | None:
        under = path + b"/"
        rs = self.committed.ranges
        k = rs.first_key_from(rs.metarange(self.metarange_id), under)
        return k if k is not None and k.startswith(under) else None

    def any_under(self, path: bytes) -> bool:
        return self.first_under(path) is not None


class WithChanges:
    """A committed tree with changes {key: identity, None to delete} over it (a
    commit's staged changes before they are applied)."""

    def __init__(self, changes: dict[bytes, object], tree: InTree):
        self.changes, self.tree = changes, tree
        self._sorted: list[bytes] | None = None

    def has(self, key: bytes) -> bool:
        if key in self.changes:
            return self.changes[key] is not None
        return self.tree.has(key)

    def any_under(self, path: bytes) -> bool:
        under, changes = path + b"/", self.changes
        if self._sorted is None:
            self._sorted = sorted(changes)
        keys = self._sorted
        for i in range(bisect_left(keys, under), len(keys)):
            if not keys[i].startswith(under):
                break
            if changes[keys[i]] is not None:
                return True
        for rec in self.tree.committed.iter(self.tree.metarange_id, under):
            if not rec.key.startswith(under):
                break
            if changes.get(rec.key, True) is not None:  # not deleted by the changes
                return True
        return False


def new_collisions(candidates: dict[bytes, bytes], result, *sides) -> list[bytes]:
    """The files of candidate pairs whose two halves the result holds while no side
    (InTree, WithChanges) already had that path as both a file and a directory
    (sorted): these are the conflicts."""
    out = []
    for f, under in sorted(candidates.items()):
        if not (result.has(f) and result.has(under)):
            continue  # a strategy or a deletion left one half out
        if any(side.has(f) and side.any_under(f) for side in sides):
            continue  # that side's own layout
        out.append(f)
    return out


def describe(collisions: list[bytes], candidates: dict[bytes, bytes],
             show: Callable[[bytes], str]) -> str:
    """One line naming the first collisions, e.g. "a (and a/b)"."""
    shown = ", ".join(f"{show(f)} (and {show(candidates[f])})" for f in collisions[:5])
    more = f" and {len(collisions) - 5} more" if len(collisions) > 5 else ""
    return f"{shown}{more}"
