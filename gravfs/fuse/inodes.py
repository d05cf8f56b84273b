"""The inode table: (tree, key, kind) <-> inode number, with kernel lookup counts.

Inode numbers are never reused within a mount, so generation numbers stay 0.
A file and a directory at the same key get different inodes (the kernel must
never see an inode change type). An inode lives while the kernel holds a
lookup on it or a handle is open; renames re-key it (and everything below a
renamed directory) so open files follow their path, and unlink detaches it so
a new file at that name gets a fresh inode.

Hard links: the names of one link group (gravfs.fs.entry.EntryInfo.link_group)
share one inode, found by (tree, group); ``key`` is one of its names (the one
staging and stat use), ``names`` the others, each mapped to the inode too.
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
    group: str = ""  # hard links: the link group id
    names: set = field(default_factory=set)  # hard links: its other keys

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
        self._by_group: dict[tuple, int] = {}
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

    def ensure(self, tree: Tree, key: bytes, kind: str, parent: int, name: bytes,
               group: str = "") -> Inode:
        """The inode of (tree, key, kind), created when new; parent/name refreshed.
        ``group``: a hard-linked name, whose inode is the group's (created when new)."""
        node = self.find(tree, key, kind)
        if node is not None and node.group != group:
            self.unlink_name(node, key)  # linked or unlinked outside the mount: a new inode
            node = None
        if node is None and group:
            ino = self._by_group.get((tree.ident, group))
            node = self._by_ino.get(ino) if ino is not None else None
            if node is not None and node.kind == kind:
                if node.linked:
                    node.names.add(key)
                else:  # its names were all gone: this one is its name again
                    node.key, node.linked = key, True
                self._by_path[(tree.ident, key, kind)] = node.ino
            else:
                node = None
        if node is not None:
            node.parent, node.name = parent, name
            return node
        ino = self._next
        self._next += 1
        node = Inode(ino, tree, key, kind, parent, name, group=group)
        self._by_ino[ino] = node
        self._by_path[(tree.ident, key, kind)] = ino
        self._by_tree.setdefault(tree.ident, set()).add(ino)
        if group:
            self._by_group[(tree.ident, group)] = ino
        return node

    def add_name(self, node: Inode, key: bytes, group: str) -> None:
        """A hard link made through the mount: key is one more name of node."""
        if not node.group:
            node.group = group
            self._by_group[(node.tree.ident, group)] = node.ino
        node.names.add(key)
        self._by_path[(node.tree.ident, key, node.kind)] = node.ino

    def unlink_name(self, node: Inode, key: bytes) -> None:
        """One name of node is gone; the inode is unlinked when it was its last."""
        node.names.discard(key)
        k = (node.tree.ident, key, node.kind)
        if self._by_path.get(k) == node.ino:
            del self._by_path[k]
        if key == node.key:
            if node.names:
                node.key = min(node.names)
                node.names.discard(node.key)
            else:
                self.unlink(node)

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
        if node.group and node.tree is not None:
            self._by_group.pop((node.tree.ident, node.group), None)
        if node.tree is not None:
            s = self._by_tree.get(node.tree.ident)
            if s is not None:
                s.discard(node.ino)
                if not s:
                    del self._by_tree[node.tree.ident]

    def _detach(self, node: Inode) -> None:
        if node.tree is None:
            return
        for key in (node.key, *node.names):
            k = (node.tree.ident, key, node.kind)
            if self._by_path.get(k) == node.ino:
                del self._by_path[k]
        node.names.clear()
        if node.group and self._by_group.get((node.tree.ident, node.group)) == node.ino:
            if node.ino not in self._by_ino:  # dropped (an unlinked one stays findable)
                del self._by_group[(node.tree.ident, node.group)]

    def unlink(self, node: Inode) -> None:
        """The name is gone: the inode lives on only for its open handles and lookups."""
        self._detach(node)
        node.linked = False
        self.maybe_drop(node)

    def rekey(self, tree: Tree, old: bytes, new: bytes, parent: int, name: bytes) -> None:
        """A rename of old -> new inside tree: move that inode and everything below it."""
        below = old + b"/"

        def hit(k: bytes) -> bool:
            return k == old or k.startswith(below)

        moved = []
        for ino in list(self._by_tree.get(tree.ident, ())):
            node = self._by_ino[ino]
            if node.linked and (hit(node.key) or any(hit(k) for k in node.names)):
                moved.append(node)
        for node in moved:
            for k in (node.key, *node.names):
                if hit(k) and self._by_path.get((tree.ident, k, node.kind)) == node.ino:
                    del self._by_path[(tree.ident, k, node.kind)]
        for node in moved:
            keys = [new + k[len(old):] if hit(k) else k for k in (node.key, *node.names)]
            if hit(node.key) and node.key == old:
                node.parent, node.name = parent, name
            node.key, node.names = keys[0], set(keys[1:])
            for key in keys:
                k = (tree.ident, key, node.kind)
                prev = self._by_path.get(k)
                if prev is not None and prev != node.ino:
                    other = self._by_ino.get(prev)
                    if other is not None:
                        self.unlink_name(other, key)
                self._by_path[k] = node.ino

    def tree_inodes(self, ident: tuple) -> list[Inode]:
        return [self._by_ino[i] for i in self._by_tree.get(ident, ()) if i in self._by_ino]

    def trees(self) -> Iterator[tuple]:
        return iter(list(self._by_tree))

    def all(self) -> list[Inode]:
        return list(self._by_ino.values())
