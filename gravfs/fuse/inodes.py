"""The inode table: (tree, key, kind) <-> inode number, with kernel lookup counts.

Inode numbers are never reused within a mount for another file, so generation
numbers stay 0.
A file and a directory at the same key get different inodes (the kernel must
never see an inode change type). An inode lives while the kernel holds a
lookup on it or a handle is open; renames re-key it (and everything below a
renamed directory) so open files follow their path, and unlink detaches it so
a new file at that name gets a fresh inode. So does a name whose content another
process replaced while the kernel may still hold the old content's size or pages
(supersede): the kernel keeps one size and one page cache per inode, so an inode
never changes content behind it.

Hard links: the names of one link group (gravfs.fs.entry.EntryInfo.link_group)
share one inode, found by (tree, group); ``key`` is one of its names (the one
staging and stat use), ``names`` the others, each mapped to the inode too.
A group's inode number is stable while the daemon runs, even after the kernel
forgets it: tools that find hard links by st_ino (tar, rsync -H, du) may see
one name before a FORGET and the other after it. A group first looked up gets a
number derived from (tree, group) in a range counters never reach; a group made
by a link through the mount keeps its first name's number, noted for the
newest LINKED_HERE groups (bounded memory; an older one gets its derived number
after a FORGET).

Memory: a traversal makes the kernel know millions of inodes, so an inode is
small (slots; its name is the tail of its key unless it differs; no per-inode
dict or set unless used), the path index is one dict per (tree, kind) keyed
by the inode's own key bytes, and the number index keeps lists, not a dict
(gravfs.fuse.inoindex). The entries last seen for inodes (attributes) are
not kept on the inode but in a bounded cache (oldest evicted first; open inodes
are kept). FORGET down to zero lookups drops every trace of an inode.
"""

from __future__ import annotations

import logging
from itertools import islice
from typing import Iterable, Iterator, Optional

import pyfuse3
import xxhash

from gravfs.fuse.inoindex import InoIndex
from gravfs.fuse.trees import Tree

log = logging.getLogger(__name__)

ROOT = pyfuse3.ROOT_INODE
FIRST_DYNAMIC = 16
GROUP_INOS = 1 << 62  # link groups' derived numbers: [2**62, 2**63)
LINKED_HERE = 1 << 16  # link groups made through the mount whose numbers are noted
MAX_ENTRIES = 4096  # remembered entries (attributes last seen), over all inodes
# Inode._flags: three flags, the kind (KINDS[flags >> 3 & 7]), and above them the open
# handles; an inode without handles keeps its flags under 64, a number CPython shares
LINKED, PINNED, FOREIGN = 1, 2, 4
KINDS = ("file", "dir", "symlink", "fifo", "socket", "chardev", "blockdev")
_KIND_SHIFT = 3
_KIND_BITS = {kind: i << _KIND_SHIFT for i, kind in enumerate(KINDS)}
_KIND_MASK = 7 << _KIND_SHIFT
_DIR = _KIND_BITS["dir"]
OPENS = 64  # one open handle


def _is_tail(key: bytes, name: bytes) -> bool:
    """Whether ``name`` is the last component of ``key``."""
    return key.endswith(name) and (len(key) == len(name) or key[-len(name) - 1] == 47)  # "/"


class Inode:
    # six slots: 80 bytes an object with its GC header (ten took 112), and a
    # traversal makes one per name it passes
    __slots__ = ("ino", "tree", "key", "lookups", "_flags", "_extra")

    def __init__(self, ino: int, tree: Optional[Tree], key: bytes, kind: str, parent: int,
                 name: bytes, virtual: Optional[str] = None, lookups: int = 0,
                 pinned: bool = False, group: str = ""):
        self.ino = ino
        self.tree = tree  # None for virtual directories
        self.key = key  # path inside the tree, no trailing '/'; b"" for the tree root
        self.lookups = lookups
        self._flags = LINKED | (PINNED if pinned else 0) | _KIND_BITS[kind]
        # rare notes: virtual, group, names, name, a tree root's parent, lookahead
        self._extra: Optional[dict] = None
        if not (key and _is_tail(key, name)):  # (a listed name is: nothing to note)
            self.place(parent, name)
        if group:
            self.group = group
        if virtual is not None:
            self.extra["virtual"] = virtual

    @property
    def group(self) -> str:
        """Hard links: the link group id ("" when not hard-linked)."""
        return self._extra.get("group", "") if self._extra else ""

    @group.setter
    def group(self, group: str) -> None:
        if group:
            self.extra["group"] = group
        elif self._extra:
            self._extra.pop("group", None)

    @property
    def _names(self) -> Optional[set]:
        return self._extra.get("names") if self._extra else None

    def _flag(self, bit: int, on: bool) -> None:
        self._flags = self._flags | bit if on else self._flags & ~bit

    @property
    def virtual(self) -> Optional[str]:
        """"root" | "branches" | "commits" | "tags" for virtual directories, else None."""
        return self._extra.get("virtual") if self._extra else None

    @property
    def superseded(self) -> bool:
        """Its names hold other content now, which the kernel may not have been told
        (InodeTable.supersede)."""
        return bool(self._extra and self._extra.get("superseded"))

    @property
    def linked(self) -> bool:
        return bool(self._flags & LINKED)

    @linked.setter
    def linked(self, on: bool) -> None:
        self._flag(LINKED, on)

    @property
    def pinned(self) -> bool:
        """Never dropped (the root, virtual directories)."""
        return bool(self._flags & PINNED)

    @pinned.setter
    def pinned(self, on: bool) -> None:
        self._flag(PINNED, on)

    @property
    def foreign(self) -> bool:
        """At or under a name another writer made (read-only)."""
        return bool(self._flags & FOREIGN)

    @foreign.setter
    def foreign(self, on: bool) -> None:
        self._flag(FOREIGN, on)

    @property
    def kind(self) -> str:
        """One of KINDS (fixed: a kind change makes a new inode)."""
        return KINDS[(self._flags & _KIND_MASK) >> _KIND_SHIFT]

    def place(self, parent: int, name: bytes) -> None:
        """Where the kernel last found the inode. Only a tree's root keeps the parent:
        the others' is the directory of their key (InodeTable.parent_of)."""
        if not self.key:
            self.extra["parent"] = parent
        self.name = name

    @property
    def opens(self) -> int:
        """Open handles (files and directories) on the inode."""
        return self._flags // OPENS

    @opens.setter
    def opens(self, n: int) -> None:
        self._flags = self._flags % OPENS + n * OPENS

    @property
    def name(self) -> bytes:
        x = self._extra
        if x is not None:
            name = x.get("name")
            if name is not None:
                return name
        key = self.key
        return key[key.rfind(b"/") + 1:]

    @name.setter
    def name(self, name: bytes) -> None:
        """Kept only when it is not the tail of the key (a tree's root, an escaped name)."""
        key = self.key
        if key and _is_tail(key, name):
            if self._extra:
                self._extra.pop("name", None)
        else:
            self.extra["name"] = name

    @property
    def names(self) -> set:
        """The other keys of a hard-linked inode (an empty set is not kept)."""
        names = self._names
        if names is None:
            names = self.extra["names"] = set()
        return names

    @names.setter
    def names(self, value: Optional[set]) -> None:
        if value:
            self.extra["names"] = value
        elif self._extra:
            self._extra.pop("names", None)

    def other_names(self) -> tuple:
        return tuple(self._names) if self._names else ()

    @property
    def extra(self) -> dict:
        """Rarely used per-inode notes (directory lookahead, page-cache address, a name
        that is not its key's tail)."""
        if self._extra is None:
            self._extra = {}
        return self._extra

    @property
    def is_dir(self) -> bool:
        return self._flags & _KIND_MASK == _DIR

    def child_key(self, name: bytes) -> bytes:
        return name if not self.key else self.key + b"/" + name

    def __repr__(self) -> str:
        return f"Inode({self.ino}, {self.tree!r}, {self.key!r}, {self.kind})"


class InodeTable:
    def __init__(self, max_entries: int = MAX_ENTRIES):
        self._by_ino: InoIndex[Inode] = InoIndex(dense_below=GROUP_INOS)
        self._paths: dict[tuple, dict[bytes, Inode]] = {}  # (tree ident, kind) -> key -> inode
        self._by_group: dict[tuple, int] = {}
        self._linked_here: dict[tuple, int] = {}  # (tree, group) -> number, links made here
        self._entries: dict[int, tuple] = {}  # ino -> (entry, seen or None); bounded
        self.max_entries = max_entries
        self._peak = 0  # most inodes known since the indexes were last compacted
        self._next = FIRST_DYNAMIC

    def __len__(self) -> int:
        return len(self._by_ino)

    def counts(self) -> dict:
        """How many records each index holds (tests check FORGET leaves none behind)."""
        return {"inodes": len(self._by_ino), "paths": sum(map(len, self._paths.values())),
                "path_dicts": len(self._paths), "groups": len(self._by_group),
                "linked_here": len(self._linked_here),
                "entries": len(self._entries)}

    def get(self, ino: int) -> Optional[Inode]:
        return self._by_ino.get(ino)

    def _index(self, tree: Tree, kind: str) -> dict[bytes, Inode]:
        k = (tree.ident, kind)
        d = self._paths.get(k)
        if d is None:
            d = self._paths[k] = {}
        return d

    def _unindex(self, tree: Tree, key: bytes, kind: str, node: Inode) -> None:
        k = (tree.ident, kind)
        d = self._paths.get(k)
        if d is not None and d.get(key) is node:
            del d[key]
            if not d:
                del self._paths[k]

    def add_virtual(self, ino: int, name: bytes, virtual: str, parent: int,
                    tree: Optional[Tree] = None) -> Inode:
        node = Inode(ino, tree, b"", "dir", parent, name,
                     virtual=virtual if tree is None else None, lookups=1, pinned=True)
        self._by_ino[ino] = node
        if tree is not None:
            self._index(tree, "dir")[b""] = node
        return node

    def find(self, tree: Tree, key: bytes, kind: str) -> Optional[Inode]:
        d = self._paths.get((tree.ident, kind))
        return d.get(key) if d is not None else None

    def ensure(self, tree: Tree, key: bytes, kind: str, parent: int, name: bytes,
               group: str = "") -> Inode:
        """The inode of (tree, key, kind), created when new; parent/name refreshed.
        ``group``: a hard-linked name, whose inode is the group's (created when new)."""
        d = self._paths.get((tree.ident, kind))  # (find, inlined: once a listed name)
        node = d.get(key) if d is not None else None
        if node is not None and node.group != group:
            self.unlink_name(node, key)  # linked or unlinked outside the mount: a new inode
            node = d = None  # (d may have gone with its last name)
        if node is None and group:
            ino = self._by_group.get((tree.ident, group))
            node = self._by_ino.get(ino) if ino is not None else None
            if node is not None and node.kind == kind:
                if node.linked:
                    node.names.add(key)
                else:  # its names were all gone: this one is its name again
                    node.key, node.linked = key, True
                self._index(tree, kind)[key] = node
            else:
                node = None
        if node is not None:
            node.place(parent, name)
            return node
        if group:
            ino = self._group_ino(tree, group)
            if ino is None:
                ino = self._next
                self._next += 1
            node = Inode(ino, tree, key, kind, parent, name, group=group)
            self._by_group[(tree.ident, group)] = ino
        else:  # (every name a traversal lists comes here: the plain call is the cheaper)
            ino = self._next
            self._next = ino + 1
            node = Inode(ino, tree, key, kind, parent, name)
        by_ino = self._by_ino
        by_ino[ino] = node
        known = len(by_ino)
        if known > self._peak:
            self._peak = known
        if d is None:
            d = self._index(tree, kind)
        d[key] = node
        return node

    def parent_of(self, node: Inode) -> int:
        """The number of the directory holding the inode: a tree root's (or virtual
        directory's) noted parent, else the inode of its key's directory, which the
        kernel knows while it knows a name in it (the tree's root when it has gone)."""
        key = node.key
        if not key or node.tree is None:
            x = node._extra
            return x.get("parent", ROOT) if x else ROOT
        d = self.find(node.tree, key[:max(0, key.rfind(b"/"))], "dir")
        if d is None:
            d = self.find(node.tree, b"", "dir")
        return ROOT if d is None else d.ino

    def _group_ino(self, tree: Tree, group: str) -> Optional[int]:
        """The stable number of a link group's inode; None when another inode has it
        (a hash collision: the group then gets a fresh number)."""
        k = (tree.ident, group)
        ino = self._linked_here.get(k) or _derived_ino(k)
        return None if ino in self._by_ino else ino

    def add_name(self, node: Inode, key: bytes, group: str) -> None:
        """A hard link made through the mount: key is one more name of node."""
        if not node.group:
            k = (node.tree.ident, group)
            node.group = group
            self._by_group[k] = node.ino
            if node.ino != _derived_ino(k):
                self._linked_here[k] = node.ino
                if len(self._linked_here) > LINKED_HERE:
                    del self._linked_here[next(iter(self._linked_here))]
        node.names.add(key)
        self._index(node.tree, node.kind)[key] = node

    def unlink_name(self, node: Inode, key: bytes) -> None:
        """One name of node is gone; the inode is unlinked when it was its last."""
        if node._names:
            node._names.discard(key)
        self._unindex(node.tree, key, node.kind, node)
        if key == node.key:
            if node._names:
                node.key = min(node._names)
                node._names.discard(node.key)
                node.names = node._names
            else:
                node.names = None
                self.unlink(node)
        elif not node._names:
            node.names = None

    def forget(self, ino: int, n: int) -> bool:
        """Drop n lookups; True when the table has just shrunk to a quarter of its peak."""
        self.forget_many(((ino, n),))
        return self.shrink()

    def forget_many(self, pairs: Iterable[tuple[int, int]]) -> None:
        """FORGET's (inode, lookups) pairs. The kernel hands back up to ~55k inodes a
        batch after a traversal, so the common inode (no notes, handles or pin) is
        dropped inline here: 1 µs an inode, not 3.7. (``shrink`` gives the memory
        back: after a whole backlog, not per batch, so it copies what is left once.)"""
        by_ino = self._by_ino
        get, pop = by_ino.get, by_ino.pop
        entries_pop = self._entries.pop
        paths = self._paths
        for ino, n in pairs:
            node = get(ino)
            if node is None:
                continue
            left = node.lookups - n
            if left > 0:
                node.lookups = left
                continue
            node.lookups = 0
            flags = node._flags
            if flags >= OPENS or flags & PINNED:
                continue
            if node._extra is not None or node.tree is None:
                self.maybe_drop(node)  # a group, other names, a tree root: the long way
                continue
            pop(ino)
            entries_pop(ino, None)
            # (_unindex inlined: calling it made a forget 1.4 µs, not 1.15)
            k = (node.tree.ident, KINDS[(flags & _KIND_MASK) >> _KIND_SHIFT])
            d = paths.get(k)
            if d is not None and d.get(node.key) is node:
                del d[node.key]
                if not d:
                    del paths[k]

    def shrink(self) -> bool:
        """Give back the memory of forgotten inodes: a dict keeps its size when emptied,
        so one at a quarter of its peak is copied (amortized: a copy per 3/4 removed)."""
        n = len(self._by_ino)
        if n * 4 < self._peak and self._peak > 4096:
            self._by_ino.compact()
            self._paths = {k: dict(d) for k, d in self._paths.items()}
            self._peak = n
            return True
        return False

    def maybe_drop(self, node: Inode) -> None:
        if node.lookups > 0 or node.opens > 0 or node.pinned:
            return
        self._by_ino.pop(node.ino, None)
        self._entries.pop(node.ino, None)
        self._detach(node)
        if node.group and node.tree is not None:
            k = (node.tree.ident, node.group)
            if self._by_group.get(k) == node.ino:
                del self._by_group[k]

    def _detach(self, node: Inode) -> None:
        if node.tree is None:
            return
        for key in (node.key, *node.other_names()):
            self._unindex(node.tree, key, node.kind, node)
        node.names = None
        if node.group and self._by_group.get((node.tree.ident, node.group)) == node.ino:
            if node.ino not in self._by_ino:  # dropped (an unlinked one stays findable)
                del self._by_group[(node.tree.ident, node.group)]

    def unlink(self, node: Inode) -> None:
        """The name is gone: the inode lives on only for its open handles and lookups."""
        self._detach(node)
        node.linked = False
        self.maybe_drop(node)

    def supersede(self, node: Inode) -> None:
        """The content at node's names changed behind the kernel (another process) while
        the kernel may still pair node with the old content: its names get a new inode
        at their next lookup, and node lives on, unlinked, for the handles reading the
        old content and the kernel's lookups (its path operations get ESTALE, which
        makes the kernel look the name up again)."""
        node.extra["superseded"] = True
        if node.group and node.tree is not None:
            k = (node.tree.ident, node.group)
            if self._by_group.get(k) == node.ino:  # the group's next lookup: a new inode
                del self._by_group[k]
        self.unlink(node)

    # -- entries last seen ----------------------------------------------------------------

    def remember(self, node: Inode, entry, seen: Optional[float]) -> None:
        """Keep the entry last seen for an inode (``seen``: when; None: not current)."""
        entries = self._entries
        entries.pop(node.ino, None)  # the newest last
        entries[node.ino] = (entry, seen)
        if len(entries) > self.max_entries:
            self._evict()

    def _evict(self) -> None:
        """Down to an eighth below the bound, so a traversal that remembers an entry
        per inode evicts in batches, not one entry per call."""
        entries = self._entries
        by_ino = self._by_ino
        over = len(entries) - self.max_entries + max(1, self.max_entries // 8)
        for ino in list(islice(entries, over)):
            kept = entries.pop(ino)
            node = by_ino.get(ino)
            if node is not None and node.opens > 0:
                entries[ino] = kept  # an open inode keeps what it was (see operations)

    def remembered(self, node: Inode) -> Optional[tuple]:
        """(entry, seen) last remembered for the inode, or None."""
        return self._entries.get(node.ino)

    def outdate(self, node: Inode) -> None:
        """The remembered entry of the inode is no longer current (kept for open files)."""
        hit = self._entries.get(node.ino)
        if hit is not None:
            self._entries[node.ino] = (hit[0], None)

    def rekey(self, tree: Tree, old: bytes, new: bytes, parent: int, name: bytes) -> None:
        """A rename of old -> new inside tree: move that inode and everything below it."""
        below = old + b"/"

        def hit(k: bytes) -> bool:
            return k == old or k.startswith(below)

        moved = []
        for node in self.tree_inodes(tree.ident):
            if node.linked and (hit(node.key) or any(hit(k) for k in node.other_names())):
                moved.append(node)
        for node in moved:
            for k in (node.key, *node.other_names()):
                if hit(k):
                    self._unindex(tree, k, node.kind, node)
        for node in moved:
            keys = [new + k[len(old):] if hit(k) else k for k in (node.key, *node.other_names())]
            at_old = hit(node.key) and node.key == old
            node.key, node.names = keys[0], set(keys[1:])
            if at_old:
                node.place(parent, name)
            for key in keys:
                index = self._index(tree, node.kind)
                other = index.get(key)
                if other is not None and other is not node:
                    self.unlink_name(other, key)
                    index = self._index(tree, node.kind)
                index[key] = node

    def tree_inodes(self, ident: tuple) -> list[Inode]:
        """The linked inodes of a tree (each once)."""
        out: dict[int, Inode] = {}
        for (t, _kind), d in list(self._paths.items()):
            if t == ident:
                for node in d.values():
                    out[node.ino] = node
        return list(out.values())

    def knows_tree(self, ident: tuple) -> bool:
        """Has the tree any linked inode (without listing them)?"""
        return any(t == ident for t, _kind in self._paths)

    def trees(self) -> Iterator[tuple]:
        return iter(list(dict.fromkeys(t for t, _kind in self._paths)))

    def all(self) -> list[Inode]:
        return list(self._by_ino.values())


def _derived_ino(k: tuple) -> int:
    return GROUP_INOS | xxhash.xxh3_64_intdigest(repr(k).encode()) & (GROUP_INOS - 1)
