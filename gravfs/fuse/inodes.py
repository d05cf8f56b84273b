"""The inode table: (tree, key, kind) <-> inode number, with kernel lookup counts.

Inode numbers are never reused within a mount, so generation numbers stay 0.
A file and a directory at the same key get different inodes (the kernel must
never see an inode change type). An inode lives while the kernel holds a
lookup on it or a handle is open; renames re-key it (and everything below a
renamed directory) so open files follow their path, and unlink detaches it so
a new file at that name gets a fresh inode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Optional

import pyfuse3

from gravfs.fuse.trees import Tree

log = logging.getLogger(__name__)

ROOT = pyfuse3.ROOT_INODE
FIRST_DYNAMIC = 16


@dataclass(eq=False)
class Inode:
    ino: int
    tree: Optional[Tree]  # None for virtual directories
    key: bytes  # path inside the tree, no trailing '/'; b"" for the tree root
    kind: str  # "dir" | "file" | "symlink"
    parent: int
    name: bytes  # name inside the parent directory
    virtual: Optional[str] = None  # "root" | "branches" | "commits" | "tags"
    lookups: int = 0
    opens: int = 0
    linked: bool = True
    pinned: bool = False  # never dropped (the root, virtual directories)
    extra: dict = field(default_factory=dict)

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    def child_key(self, name: bytes) -> bytes:
        return name if not self.key else self.key + b"/" + name


class InodeTable:
    def __init__(self):
        self._by_ino: dict[int, Inode] = {}
        self._by_path: dict[tuple, int] = {}
        self._by_tree: dict[tuple, set[int]] = {}
        self._next = FIRST_DYNAMIC

    def __len__(self) -> int:
        return len(self._by_ino)

    def get(self, ino: int) -> Optional[Inode]:
        return self._by_ino.get(ino)

    def add_virtual(self, ino: int, name: bytes, virtual: str, parent: int,
                    tree: Optional[Tree] = None) -> Inode:
        node = Inode(ino, tree, b"", "dir", parent, name,
                     virtual=virtual if tree is None else None, lookups=1, pinned=True)
        self._by_ino[ino] = node
        if tree is not None:
            self._by_path[(tree.ident, b"", "dir")] = ino
            self._by_tree.setdefault(tree.ident, set()).add(ino)
        return node

    def find(self, tree: Tree, key: bytes, kind: str) -> Optional[Inode]:
        ino = self._by_path.get((tree.ident, key, kind))
        return None if ino is None else self._by_ino[ino]

    def ensure(self, tree: Tree, key: bytes, kind: str, parent: int, name: bytes) -> Inode:
        """The inode of (tree, key, kind), created when new; parent/name refreshed."""
        node = self.find(tree, key, kind)
        if node is not None:
            node.parent, node.name = parent, name
            return node
        ino = self._next
        self._next += 1
        node = Inode(ino, tree, key, kind, parent, name)
        self._by_ino[ino] = node
        self._by_path[(tree.ident, key, kind)] = ino
        self._by_tree.setdefault(tree.ident, set()).add(ino)
        return node

    def forget(self, ino: int, n: int) -> None:
        node = self._by_ino.get(ino)
        if node is None:
            return
        node.lookups = max(0, node.lookups - n)
        self.maybe_drop(node)

    def maybe_drop(self, node: Inode) -> None:
        if node.lookups > 0 or node.opens > 0 or node.pinned:
            return
        self._by_ino.pop(node.ino, None)
        self._detach(node)
        if node.tree is not None:
            s = self._by_tree.get(node.tree.ident)
            if s is not None:
                s.discard(node.ino)
                if not s:
                    del self._by_tree[node.tree.ident]

    def _detach(self, node: Inode) -> None:
        if node.tree is None:
            return
        k = (node.tree.ident, node.key, node.kind)
        if self._by_path.get(k) == node.ino:
            del self._by_path[k]

    def unlink(self, node: Inode) -> None:
        """The name is gone: the inode lives on only for its open handles and lookups."""
        self._detach(node)
        node.linked = False
        self.maybe_drop(node)

    def rekey(self, tree: Tree, old: bytes, new: bytes, parent: int, name: bytes) -> None:
        """A rename of old -> new inside tree: move that inode and everything below it."""
        below = old + b"/"
        moved = []
        for ino in list(self._by_tree.get(tree.ident, ())):
            node = self._by_ino[ino]
            if node.linked and (node.key == old or node.key.startswith(below)):
                moved.append(node)
        for node in moved:
            self._detach(node)
        for node in moved:
            node.key = new + node.key[len(old):]
            if node.key == new:
                node.parent, node.name = parent, name
            k = (tree.ident, node.key, node.kind)
            prev = self._by_path.get(k)
            if prev is not None and prev != node.ino:
                other = self._by_ino.get(prev)
                if other is not None:
                    other.linked = False
            self._by_path[k] = node.ino

    def tree_inodes(self, ident: tuple) -> list[Inode]:
        return [self._by_ino[i] for i in self._by_tree.get(ident, ()) if i in self._by_ino]

    def trees(self) -> Iterator[tuple]:
        return iter(list(self._by_tree))

    def all(self) -> list[Inode]:
        return list(self._by_ino.values())
