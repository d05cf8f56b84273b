"""Directory trees of the mount: one per branch, commit or tag the kernel has seen.

A tree says which ref a subtree shows and whether it is writable. Branch trees
read staging over the current head (the repository resolves the branch on
every call, with a short head cache); commit and tag trees are pinned to one
commit, so their inodes, attributes and data never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from gravfs.version.refs.commits import Commit


@dataclass(eq=False)
class Tree:
    kind: str  # "branch" | "commit" | "tag"
    name: str  # its directory name in the layout (a commit prefix as typed)
    commit: Optional[Commit] = None  # pinned commit of immutable trees
    writable: bool = False

    @cached_property  # (every inode-table probe keys on it; a tree never changes)
    def ident(self) -> tuple:
        if self.kind == "branch":
            return ("branch", self.name)
        return (self.kind, self.name, self.commit.id)

    @property
    def immutable(self) -> bool:
        return self.kind != "branch"

    @property
    def ref(self):
        """What Repository read methods take: a branch name or a pinned target."""
        if self.kind == "branch":
            return self.name
        from gravfs.version.repository import RefTarget
        return RefTarget(self.commit)

    def __repr__(self) -> str:
        return f"Tree({self.kind}:{self.name})"
