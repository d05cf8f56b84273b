"""The public Python API: the catalog of files of one repository, seen from one workspace.

The CLI, the FUSE daemon and the Spark pipelines all go through this class. It
is the version layer's repository (refs, staging, commits: gravfs.version.repository)
whose values are filesystem entries (gravfs.fs.entry), with the filesystem's
rules on top (listing, placement, mkdir/rename semantics, foreign names) and
the file contents in the data plane (gravfs.data).
"""

from __future__ import annotations

import errno
import logging
import os
import stat as statmod
import time
from dataclasses import dataclass, field, replace
from typing import BinaryIO, Callable, Iterable, Iterator, Optional, Sequence

from gravfs.data.external import is_external, reader_for, source_of
from gravfs.data.objects import DataObjects
from gravfs.data.steady import put_steady
from gravfs.errors import AlreadyExistsError, BadNameError, GravfsError, NotFoundError, PathTypeError
from gravfs.fs.entry import (KIND_BLOCK_DEVICE, KIND_CHAR_DEVICE, KIND_DIRECTORY, KIND_FIFO,
                             KIND_FILE, KIND_SOCKET, KIND_SYMLINK, EntryInfo, decode_entry,
                             encode_entry, entry_identity, same_but_times)
from gravfs.fs.paths import (dir_prefix, display, escape_name, first_name, hashed_head,
                             name_problem, show, split_last, to_key, unescape_name)
from gravfs.fs.lostfound import lost_found_path, save_whole
from gravfs.fs.references import live_addresses
from gravfs.version.collisions import file_above
from gravfs.version.committed.record import encode_value
from gravfs.version.committer import Committer
from gravfs.version.repository import DEFAULT_TIER_BYTES, VersionRepository
from gravfs.version.staging.branchview import BranchLayers, branch_layers
from gravfs.version.staging.view import Item, after_subtree

log = logging.getLogger(__name__)

PICK_PER_PENDING = 64  # see Repository.store_staged


class _once:
    """A value computed at its first read and kept in the slot named "_" + its name
    (functools.cached_property needs a __dict__, and Python 3.11 takes a per-class
    RLock on every first read; a readdir reads three of these for each listed entry).
    Two threads racing compute the same value, so no lock is needed."""

    def __init__(self, fn):
        self.fn, self.slot, self.__doc__ = fn, "_" + fn.__name__, fn.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = getattr(obj, self.slot)
        if value is _UNSET:
            value = self.fn(obj)
            setattr(obj, self.slot, value)
        return value


class _Unset:
    """Not computed yet (unpickles as the same object, so a copied node computes too)."""
    __slots__ = ()

    def __reduce__(self) -> str:
        return "_UNSET"


_UNSET = _Unset()


def _cache_slot():
    return field(default=_UNSET, init=False, repr=False, compare=False)


@dataclass(slots=True)  # slots: a stat cache holds tens of thousands of nodes
class Node:
    """A path in a tree: a file, symlink, or directory (entry None when implied).
    Not changed once made (``replace`` makes a changed copy); not frozen, because a
    frozen class fills its slots 6x slower, and every listed entry makes one.

    ``base`` is the raw name in its directory when a listing made the node (a
    name of a key another writer made can start or end with '/'; see
    gravfs.fs.paths); ``shadowed``: its escaped name is also a real name there,
    which wins.
    """

    key: bytes
    kind: str  # "file" | "dir" | "symlink" | "fifo" | "socket" | "chardev" | "blockdev"
    entry: Optional[EntryInfo]
    base: Optional[bytes] = None
    shadowed: bool = False
    _fs_name: object = _cache_slot()  # (see _once)
    _foreign: object = _cache_slot()
    _listing_key: object = _cache_slot()

    @property
    def path(self) -> str:
        """The raw key as text (a directory without its marker '/')."""
        return display(self._own_key)

    @property
    def shown(self) -> str:
        """The path as commands and messages print it (gravfs.fs.paths.show); the
        root is '/', not an empty name."""
        return show(self._own_key) or "/"

    @property
    def _own_key(self) -> bytes:
        k = self.key
        return k[:-1] if self.kind == "dir" and k.endswith(b"/") else k

    @property
    def raw_name(self) -> bytes:
        """The name in its directory as stored (see gravfs.fs.paths.split_last)."""
        if self.base is not None:
            return self.base
        k = self._own_key
        if k.endswith(b"/") and k.strip(b"/"):  # a file at "name/"
            return split_last(k[:-1])[1] + b"/"
        return split_last(k)[1]

    @_once  # (a readdir asks for it and for foreign several times an entry)
    def fs_name(self) -> bytes:
        """The POSIX name it is shown under (escaped when foreign)."""
        return self.raw_name if self.foreign is None else escape_name(self.raw_name)

    @property
    def name(self) -> str:
        return display(self.fs_name)

    @_once
    def foreign(self) -> Optional[str]:
        """Why its name is not a POSIX name (None for names gravfs could write)."""
        return name_problem(self.raw_name)

    @_once
    def listing_key(self) -> bytes:
        """Continuation key for Repository.list_dir(start_after=...)."""
        base = self.raw_name
        if self.kind == "dir":
            return base + b"/"
        if base.endswith(b"/") and base.strip(b"/"):
            return base[:-1]  # a file at "name/": resumes at the directory "name"
        return base


KIND_NAMES = {KIND_FILE: "file", KIND_DIRECTORY: "dir", KIND_SYMLINK: "symlink",
              KIND_FIFO: "fifo", KIND_SOCKET: "socket", KIND_CHAR_DEVICE: "chardev",
              KIND_BLOCK_DEVICE: "blockdev"}


def group_items(entry: EntryInfo, renamed: dict, ctime_ns: int = 0
                ) -> list[tuple[bytes, EntryInfo]]:
    """Keep a hard-link group whole: ``entry`` (any name's record) with its names
    mapped through ``renamed`` (key -> new key, or None: removed), staged at every
    remaining name with the new list (and ctime, when given). Every name of a group
    carries the same record, so one record is enough to restage them all."""
    links = sorted({renamed.get(k, k) for k in entry.links} - {None})
    e = replace(entry, links=tuple(links), ctime_ns=ctime_ns or entry.ctime_ns)
    return [(k, e) for k in links]


def node_from_item(key: bytes, data: bytes, base: Optional[bytes] = None) -> Node:
    """Every listed entry is made here: filled directly, as decode_entry fills an
    EntryInfo (the dataclass's ``__init__`` costs more). ``base``: its name as listed."""
    e = decode_entry(data)
    n = _new(Node)
    n.key = key
    n.kind = KIND_NAMES[e.kind]
    n.entry = e
    n.base = base
    n.shadowed = False
    n._listing_key = _UNSET
    if base is None:
        n._fs_name = n._foreign = _UNSET
    else:  # a listed name (its raw_name): foreign and fs_name known at once
        n._foreign = problem = name_problem(base)
        n._fs_name = base if problem is None else _UNSET
    return n


_new = object.__new__
assert set(Node.__dataclass_fields__) == {"key", "kind", "entry", "base", "shadowed", "_fs_name",
                                          "_foreign", "_listing_key"}, \
    "node_from_item fills every Node field: add the new one there"


def _has_children(lay: BranchLayers, prefix: bytes) -> bool:
    """Is there a live key under prefix other than prefix itself?"""
    for k, _ident, _data in lay.iter(prefix):
        if not k.startswith(prefix):
            return False
        if k != prefix:
            return True
    return False


def _find_hashed(lay: BranchLayers, dir_key: bytes, shown: bytes) -> Optional[bytes]:
    """The raw name in directory dir_key that the over-long escaped name ``shown``
    stands for: a scan of the names starting with the head it keeps."""
    prefix = dir_prefix(dir_key)
    start = prefix + hashed_head(shown)
    while True:
        for k, _ident, _data in lay.iter(start):
            if not k.startswith(prefix + hashed_head(shown)):
                return None
            raw, more = first_name(k[len(prefix):])
            if escape_name(raw) == shown:
                return raw
            if more:
                if k == prefix + raw + b"/" and escape_name(raw + b"/") == shown:
                    return raw + b"/"
                start = after_subtree(prefix + raw + b"/")
                break
        else:
            return None


def _mark_shadowed(lay: BranchLayers, txn, repo: "Repository", prefix: bytes, n: Node) -> Node:
    """A foreign node whose escaped name is also a real name there is shadowed by it."""
    literal = prefix + n.fs_name
    if (lay.get(literal, repo.staging, txn, repo.committed) is not None
            or lay.first_under(literal + b"/") is not None):
        return replace(n, shadowed=True)
    return n


class Repository(VersionRepository):
    def __init__(self, store, state_dir: Optional[str] = None,
                 tier_bytes: int = DEFAULT_TIER_BYTES, head_ttl: float = 0.0,
                 staging_sync: bool = True):
        """``staging_sync=False`` (the mount daemon): LMDB commits skip fsync; the
        caller syncs (``self.staging.sync()``) on fsync and periodically."""
        super().__init__(store, state_dir, tier_bytes, head_ttl, staging_sync, show_key=show)
        self.committed.same_change = same_but_times  # both sides wrote the same bytes
        self.data = DataObjects(store, self.tier, self.workspace.tmp,
                                pending_dir=self.workspace.sub("pending"))
        self.external = reader_for(store)  # by-reference entries' sources (gravfs.data.external)

    def close(self) -> None:
        self.data.stop_uploader()
        super().close()

    def staged_objects(self, data: bytes) -> list[str]:
        return live_addresses(decode_entry(data), self.store.url, self.data)

    def store_staged(self, values: Callable[[], Iterator[bytes]]) -> None:
        """Upload the pending objects a commit references, only those when a mount's
        uploader runs (it sends the rest) and they can be told quickly: with writers
        outrunning the uploader, another branch's job or files replaced or removed
        since, a commit costs its own change, not the backlog. They can when the
        changes number less than PICK_PER_PENDING times the pending objects (reading a
        change costs a thousandth of an upload). With no uploader running (a mount
        killed), the commit drains them all: nothing else would."""
        pending = self.data.pending_addresses()
        if not pending or not self.data.writer_running():
            self.data.flush_pending(pending)
            return
        have, wanted = set(pending), {}
        for n, data in enumerate(values()):
            if n == PICK_PER_PENDING * len(pending):
                wanted = None  # a big commit: most of what is pending is its own
                break
            wanted.update((a, None) for a in self.staged_objects(data) if a in have)
        if wanted is not None:
            if len(wanted) < len(pending):
                log.info("uploading the %d of %d pending object(s) this commit references "
                         "(the mount's uploader sends the rest)", len(wanted), len(pending))
            pending = list(wanted)
        self.data.flush_pending(pending)

    def restore_object(self, key: str) -> bool:
        return key.startswith("data/") and self.data.restore(key)

    # -- branches -----------------------------------------------------------------

    def _start_unstaged(self, name: str) -> None:
        """What this host staged on an earlier branch of that name, deleted on another
        host (this host's own deletion drops it, see delete_branch), is not dropped
        without a word: its files are saved in lost+found first (save_staged).
        Should that fail, nothing is dropped: the new branch shows them as its
        uncommitted changes, and the error says so."""
        try:
            self._save_then_drop(name)
        except (OSError, GravfsError) as exc:
            raise GravfsError(
                f"branch {name!r} was made, but the changes this host had staged on an "
                f"earlier branch of that name could not be saved in lost+found ({exc}): "
                f"they stay, as the new branch's uncommitted changes ('gravfs status "
                f"{name}')") from exc

    def drop_deleted_branch(self, name: str) -> bool:
        """A branch found deleted (by another host: a mount's watcher saw it go): save
        what this host staged on it (save_staged) and drop that staging, so that a
        branch made again of that name, by any host, does not show it as its own.
        False when the branch is back already (its staging is then left alone), when
        saving failed (logged; the staging stays: a later making of the branch here
        tries again), or when something was staged meanwhile (see _save_then_drop)."""
        try:
            if self.heads.branch_or_none(name) is not None:
                return False
            return self._save_then_drop(name)
        except (OSError, GravfsError) as exc:
            log.error("branch %s was deleted on another host; what this host staged on it "
                      "could not be saved in lost+found (%s): it stays staged", name, exc)
            return False

    def _save_then_drop(self, name: str) -> bool:
        """save_staged, then drop the branch's staging in a transaction that first
        checks nothing was staged there meanwhile: a mount's close into the branch made
        again while the files were saved (tenths of a second) was dropped unsaved. If
        something was, the staging stays (the branch shows it; nothing is lost)."""
        with self.staging.read_txn() as txn:
            before = self._staging_of(txn, name)
        self.save_staged(name)

        def drop(txn) -> bool:
            if self._staging_of(txn, name) != before:
                return False
            self.staging.drop_branch(txn, name)
            return True

        if self.staging.write(drop):
            return True
        log.warning("branch %s: written again while what this host had staged on it was "
                    "saved in lost+found; its staging is left as it is", name)
        return False

    def _staging_of(self, txn, name: str) -> tuple:
        """A branch's staging as stored: its state and every entry of its tokens."""
        st = self.staging.state(txn, name)
        return st.dump(), [list(self.staging.iter_token(txn, t)) for t in st.tokens()]

    def save_staged(self, name: str) -> int:
        """Save the files this host staged on branch ``name`` (compared with the commit
        the staging began from) in lost+found, logged with what else was staged
        (removals, directories, links: not files); returns how many changes."""
        c = Committer(self)
        if c.is_clean(name):
            return 0
        st = self.staging.get_state(name)
        base = st.base or self.writable_head(name)
        changes = c.status(name, head_id=base)
        files: list[Node] = []
        with self.staging.read_txn() as txn:
            st = self.staging.state(txn, name)
            mr = st.compacted["metarange"] if st.compacted else self.commits.get(base).metarange
            lay = branch_layers(self.staging, txn, self.committed, name, mr, st)
            for kind, key in changes:
                n = None if kind == "removed" else self._stat_key(lay, txn, key)
                if n is not None and n.kind == "file":
                    files.append(n)
        for n in files:
            save_whole(lost_found_path(self.workspace, name, n.key),
                       lambda out: self.copy_out(n, out))
        if changes:
            log.warning("branch %s was deleted on another host while this host had %d "
                        "uncommitted change(s) staged on it; %d file(s) of them are saved "
                        "in %s, the rest (removals, directories, links) dropped", name,
                        len(changes), len(files),
                        os.path.join(self.workspace.sub("lost+found"), name))
        return len(changes)

    # -- reading ------------------------------------------------------------------

    def stat(self, ref: str, path: str | bytes) -> Node:
        """The node at a path. A path may name keys other writers made through their
        escaped names (gravfs.fs.paths.escape_name); a real name equal to one wins."""
        key = to_key(path)
        with self.staging.read_txn() as txn:
            lay = self.layers(ref, txn)
            if not key:
                return Node(b"", "dir", None)
            n = self._stat_key(lay, txn, key)
            if n is None:
                foreign = self._foreign_key(lay, key)
                if foreign is not None:
                    n = self._stat_key(lay, txn, foreign)
            if n is not None:
                return n
        raise NotFoundError(f"{show(key)}: no such file or directory in {ref}")

    def _stat_key(self, lay: BranchLayers, txn, key: bytes) -> Optional[Node]:
        item = lay.get(key, self.staging, txn, self.committed)
        if item is not None:
            return node_from_item(key, item[2])
        if key.endswith(b"/"):
            return None
        # a directory: its marker or its first child, whichever the one seek finds (a
        # lookup of the marker, then a seek, made a directory's lookup three of them)
        prefix = key + b"/"
        for k, _ident, data in lay.iter(prefix):
            if not k.startswith(prefix):
                return None
            if k != prefix:
                return Node(prefix, "dir", None)
            e = decode_entry(data)
            if e.kind == KIND_DIRECTORY:
                return Node(prefix, "dir", e)
            # a file at "key/" is not a directory marker: a directory if a child follows
        return None

    def _foreign_key(self, lay: BranchLayers, key: bytes) -> Optional[bytes]:
        """The stored key a path with escaped foreign names stands for (None: the path
        has none)."""
        if b"%" not in key:
            return None
        out, changed = b"", False
        for part in key.split(b"/"):
            raw = unescape_name(part)
            if raw is None and hashed_head(part) is not None:
                raw = _find_hashed(lay, out, part)
                if raw is None:
                    return None
            if raw is not None:
                changed, part = True, raw
            out = out + b"/" + part if out else part
        return out if changed else None

    def list_dir(self, ref: str, path: str | bytes = b"", start_after: Optional[bytes] = None,
                 limit: Optional[int] = None) -> list[Node]:
        """Children of a directory in listing-key order (files ``name``, dirs ``name/``).

        ``start_after`` is a child's listing key (Node.listing_key), for paging.
        A name that is both a file and a directory (possible in data imported
        from object stores) is listed once, as the directory. Keys other
        writers made are listed too (Node.foreign, shown as Node.fs_name); a
        file stored at ``name/`` is listed as its own entry beside the directory.
        """
        key = to_key(path)
        with self.staging.read_txn() as txn:
            lay = self.layers(ref, txn)
            prefix = dir_prefix(key) if key else b""
            out = self._list_under(lay, txn, prefix, start_after, limit)
            if not out and key:  # empty, a foreign name's directory, or none
                real = self._listed_prefix(lay, txn, key, ref)
                if real != prefix:
                    out = self._list_under(lay, txn, real, start_after, limit)
        return out

    def _list_under(self, lay: BranchLayers, txn, prefix: bytes, start_after: Optional[bytes],
                    limit: Optional[int]) -> list[Node]:
        """list_dir of the directory whose keys start with prefix. (A listing that finds
        a name needs no check that the directory exists: that check decoded a data
        block of its own, ~40% of a short listing's time.)"""
        out: list[Node] = []
        files: set[bytes] = set()
        dirs: set[bytes] = set()  # keys that are also listed as a directory (dropped below)
        shadowed = 0  # files of out that a directory of out lists
        foreign = False  # any name another writer made (checked for shadowing below)
        add, add_file = out.append, files.add  # (once a listed name: hoisted)
        for name, item, first in lay.list_dir(prefix, start_after):
            if item is not None:
                n = node_from_item(item[0], item[2], name)
                add(n)
                if n.kind != "dir":  # most entries: one file, its name's check known
                    add_file(n.key)
                    if n._foreign is not None:
                        foreign = True
                    new: Sequence[Node] = ()
                else:
                    new = (n,)
            else:
                had = len(out)
                self._list_subdir(lay, prefix, name, first, start_after, out)
                new = out[had:]
            for n in new:
                foreign = foreign or n.foreign is not None
                if n.kind != "dir":
                    files.add(n.key)
                elif n.key.endswith(b"/"):
                    dirs.add(n.key[:-1])
                    if n.key[:-1] in files:
                        shadowed += 1
            # a full page of what is returned: a reader takes a shorter one for the
            # end (the mount listed 511 of 1,000 names with one such pair in them)
            if limit is not None and len(out) - shadowed >= limit:
                break
        if foreign:
            out = [_mark_shadowed(lay, txn, self, prefix, n) if n.foreign else n for n in out]
        if dirs:
            out = [n for n in out if n.kind == "dir" or n.key not in dirs]
        return out

    def _listed_prefix(self, lay: BranchLayers, txn, key: bytes, ref) -> bytes:
        """Listing prefix of the directory at key (foreign names resolved)."""
        if not key:
            return b""
        prefix = dir_prefix(key)
        if lay.first_under(prefix) is not None:
            return prefix
        foreign = self._foreign_key(lay, key)
        if foreign is not None and not foreign.endswith(b"/"):
            if lay.first_under(foreign + b"/") is not None:
                return foreign + b"/"
            key = foreign
        if lay.get(key, self.staging, txn, self.committed) is not None:
            raise GravfsError(f"{show(key)}: not a directory")
        raise NotFoundError(f"{show(key)}: no such directory in {ref}")

    @staticmethod
    def _list_subdir(lay: BranchLayers, prefix: bytes, name: bytes, first: Item,
                     start_after: Optional[bytes], out: list) -> None:
        """The entries of subdirectory ``name``, whose first live item is ``first``
        (its marker when that is ``name/`` itself: no lookup of its own)."""
        mkey = prefix + name + b"/"
        entry = decode_entry(first[2]) if first[0] == mkey else None
        if entry is not None and entry.kind != KIND_DIRECTORY:
            # a file another writer stored at "name/": listed before the directory
            # (listing key "name", so resuming after it lists the directory next)
            if start_after != name:
                out.append(Node(mkey, KIND_NAMES[entry.kind], entry, name + b"/"))
            if not _has_children(lay, mkey):
                return
            entry = None
        out.append(Node(mkey, "dir", entry, name))

    def walk(self, ref: str, path: str | bytes = b"") -> Iterator[Node]:
        """Every file, symlink and directory marker under path, in key order."""
        key = to_key(path)
        prefix = dir_prefix(key)
        if key:
            with self.staging.read_txn() as txn:
                lay = self.layers(ref, txn)
                if lay.first_under(prefix) is None:
                    foreign = self._foreign_key(lay, key)
                    if foreign is not None:
                        prefix = dir_prefix(foreign)
        return self.walk_key(ref, prefix)

    def walk_key(self, ref: str, prefix: bytes) -> Iterator[Node]:
        """walk() under an exact key prefix (no path normalization)."""
        with self.staging.read_txn() as txn:
            lay = self.layers(ref, txn)
            for key, _ident, data in lay.iter(prefix):
                if not key.startswith(prefix):
                    return
                yield node_from_item(key, data)

    def read(self, ref_or_node, path: str | bytes | None = None, offset: int = 0,
             length: int = -1) -> bytes:
        node = ref_or_node if isinstance(ref_or_node, Node) else self.stat(ref_or_node, path)
        if node.kind != "file":
            raise GravfsError(f"{node.shown}: not a regular file")
        if is_external(node.entry.address_type):  # by reference: from its checked source
            return self.external.read(source_of(node.entry), offset, length)
        if node.entry.size == 0:
            return b""
        return self.data.read(node.entry.address, offset, length)

    def copy_out(self, node: Node, out: BinaryIO) -> int:
        if node.kind != "file":
            raise GravfsError(f"{node.shown}: not a regular file")
        if is_external(node.entry.address_type):
            return self.external.copy_to(source_of(node.entry), out)
        if node.entry.size == 0:
            return 0
        return self.data.copy_to(node.entry.address, out)

    # -- writing ------------------------------------------------------------------

    def stage(self, branch: str, items: Iterable[tuple[bytes, Optional[EntryInfo]]],
              provisional: frozenset = frozenset()) -> int:
        """Stage entries (None = delete) atomically; the low-level write used by all.
        ``provisional``: keys staged as provisional puts (read, never committed: see
        gravfs.version.staging.area). Returns how many entries were staged; may
        compact (see VersionRepository.stage_values).
        """
        return self.stage_values(branch, encode_items(items), provisional)

    def stage_cached(self, branch: str, items: Iterable[tuple[bytes, Optional[EntryInfo]]],
                     provisional: frozenset = frozenset()):
        """stage() from the local staging database only, or None: see
        VersionRepository.stage_values_cached (the mount's event-loop thread)."""
        return self.stage_values_cached(branch, encode_items(items), provisional)

    def check_placement(self, branch: str, key: bytes, directory: bool) -> None:
        """Refuse a file where a directory is (or vice versa) and paths under a file."""
        with self.staging.read_txn() as txn:
            lay = self.layers(branch, txn)
            own = key.rstrip(b"/")
            if directory:
                if lay.get(own, self.staging, txn, self.committed) is not None:
                    raise PathTypeError(f"{show(own)}: a file exists there", errno.EEXIST)
            elif lay.first_under(own + b"/") is not None:
                raise PathTypeError(f"{show(own)}: is a directory", errno.EISDIR)
            self._check_parents(lay, txn, own)

    def check_parents(self, branch: str, key: bytes) -> None:
        """Refuse a path below a file (an import's prefix, whose own file it replaces)."""
        with self.staging.read_txn() as txn:
            self._check_parents(self.layers(branch, txn), txn, key)

    def _check_parents(self, lay: BranchLayers, txn, key: bytes) -> None:
        above = file_above(key, lambda k: lay.get(k, self.staging, txn, self.committed)
                           is not None)
        if above is not None:
            raise PathTypeError(f"{show(above)}: not a directory", errno.ENOTDIR)

    def write_file(self, branch: str, path: str | bytes, src: str | bytes | BinaryIO,
                   mode: int = 0o644, mtime_ns: Optional[int] = None,
                   xattrs: Optional[dict] = None) -> EntryInfo:
        """Store content (a local path, bytes, or a stream) at path on a branch."""
        key = to_key(path)
        if not key:
            raise BadNameError("cannot write the root directory")
        self.writable_head(branch)
        self.check_placement(branch, key, directory=False)
        if isinstance(src, (bytes, bytearray, memoryview)):
            address, size = self.data.put_bytes(bytes(src))
        elif isinstance(src, str):
            try:  # (a FIFO put there since the caller looked: see open_regular)
                # small=0: any size is uploaded by put_snapshot (a scratch copy), as it was
                address, size, st = put_steady(self.data, src, small=0)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                raise GravfsError(f"{src}: {exc.strerror}") from None
            if mtime_ns is None:
                mtime_ns = st.st_mtime_ns
        else:
            address, size = self.data.put_stream(src)
        entry = EntryInfo(address=address, size=size, mtime_ns=mtime_ns or time.time_ns(),
                      mode=statmod.S_IFREG | (mode & 0o7777), kind=KIND_FILE,
                      xattrs=dict(xattrs or {}))
        self.stage(branch, [(key, entry)])
        return entry

    def mkdir(self, branch: str, path: str | bytes, mode: int = 0o755) -> None:
        key = to_key(path, directory=True)
        if not key:
            raise AlreadyExistsError("the root directory exists")
        self.check_placement(branch, key, directory=True)
        entry = EntryInfo(address="", size=0, mtime_ns=time.time_ns(),
                      mode=statmod.S_IFDIR | (mode & 0o7777), kind=KIND_DIRECTORY)
        self.stage(branch, [(key, entry)])

    def symlink(self, branch: str, path: str | bytes, target: str) -> None:
        key = to_key(path)
        self.check_placement(branch, key, directory=False)
        entry = EntryInfo(address="", size=len(target.encode()), mtime_ns=time.time_ns(),
                      mode=statmod.S_IFLNK | 0o777, kind=KIND_SYMLINK, symlink_target=target)
        self.stage(branch, [(key, entry)])

    def remove(self, branch: str, path: str | bytes, recursive: bool = False) -> int:
        """Delete a file, or a directory (with recursive, everything under it)."""
        node = self.stat(branch, path)
        if node.kind != "dir":
            if node.entry.link_group:  # its other names lose one link
                return self.stage(branch, [(node.key, None)] + group_items(
                    node.entry, {node.key: None}, time.time_ns()))
            return self.stage(branch, [(node.key, None)])
        prefix = dir_prefix(node.key)
        doomed = [n.key for n in self.walk_key(branch, prefix)]
        children = [k for k in doomed if k != prefix]
        if children and not recursive:
            raise PathTypeError(f"{node.shown}: directory not empty (rm -r removes it with "
                                "its contents)", errno.ENOTEMPTY)
        doomed.append(prefix)  # tombstone the marker even if only implied
        return self.stage(branch, [(k, None) for k in doomed])

    def rename(self, branch: str, src: str | bytes, dst: str | bytes,
               provisional: frozenset = frozenset(), ctime_ns: int = 0,
               also: Iterable[tuple[bytes, Optional[EntryInfo]]] = ()) -> int:
        """Move a file or a whole directory in one staging transaction. ``provisional``:
        keys (at or under src) staged provisional, which stay so where they move.
        ``ctime_ns``: the moved entry's new ctime (the mount's rename: Linux's), 0 keeps
        it. Hard links keep their group whole (every name's list follows). ``also``:
        more items staged in the same transaction (the directories' new times)."""
        node = self.stat(branch, src)
        dkey = to_key(dst)
        if not dkey:
            raise BadNameError("cannot rename onto the root directory")
        victims = self._replaced_links(branch, dkey, node)
        if node.kind != "dir":
            moved = replace(node.entry, ctime_ns=ctime_ns or node.entry.ctime_ns)
            puts = (group_items(moved, {node.key: dkey}) if moved.link_group
                    else [(dkey, moved)])
            return self.stage(branch, list(also) + [(node.key, None)] + victims + puts,
                              provisional=frozenset([dkey]) if node.key in provisional
                              else frozenset())
        sp, dp = dir_prefix(node.key), dir_prefix(dkey)
        if dp.startswith(sp):
            raise BadNameError(f"cannot move {node.shown} into itself")
        moves: list[tuple[bytes, Optional[EntryInfo]]] = list(also) + list(victims)
        groups: dict[str, EntryInfo] = {}
        for n in self.walk_key(branch, sp):
            moves.append((n.key, None))
            if n.entry is not None and n.entry.link_group:
                groups.setdefault(n.entry.link_group, n.entry)  # restaged whole below
            else:
                moves.append((dp + n.key[len(sp):], n.entry))
        for e in groups.values():  # names inside moved, names outside keep the group
            moves += group_items(e, {k: dp + k[len(sp):] for k in e.links if k.startswith(sp)})
        if node.entry is None and not any(k == sp for k, _ in moves):
            moves.append((dp, EntryInfo(address="", size=0, mtime_ns=time.time_ns(),
                                    mode=statmod.S_IFDIR | 0o755, kind=KIND_DIRECTORY)))
        moves.sort(key=lambda kv: kv[1] is not None)  # deletions first, puts win on equal keys
        return self.stage(branch, moves, provisional=frozenset(
            dp + k[len(sp):] for k in provisional if k.startswith(sp)))

    def _replaced_links(self, branch: str, dkey: bytes, node: Node) -> list:
        """A rename onto a hard-linked name: its other names lose that link."""
        try:
            d = self.stat(branch, dkey)
        except NotFoundError:
            return []
        e = d.entry
        if d.kind == "dir" or e is None or not e.link_group:
            return []
        if node.entry is not None and node.entry.link_group == e.link_group:
            return []
        return group_items(e, {d.key: None}, time.time_ns())

    def link(self, branch: str, src: str | bytes, dst: str | bytes, ctime_ns: int = 0,
             also: Iterable[tuple[bytes, Optional[EntryInfo]]] = ()) -> EntryInfo:
        """A hard link: dst becomes one more name of src's inode (a link group; see
        gravfs.fs.entry.EntryInfo). Every name is restaged with the new list (and
        ctime) in one staging transaction, with ``also``; returns the entry every name
        now has."""
        node = self.stat(branch, src)
        if node.kind == "dir":
            raise PathTypeError(f"{node.shown}: is a directory", errno.EPERM)
        dkey = to_key(dst)
        self.writable_head(branch)
        self.check_placement(branch, dkey, directory=False)
        try:
            self.stat(branch, dkey)
            raise AlreadyExistsError(f"{show(dkey)}: exists")
        except NotFoundError:
            pass
        e = node.entry
        if not e.link_group:
            e = replace(e, link_group=os.urandom(16).hex(), links=(node.key,))
        e = replace(e, links=tuple(sorted(set(e.links) | {dkey})),
                    ctime_ns=ctime_ns or time.time_ns())
        self.stage(branch, list(also) + [(k, e) for k in e.links])
        return e

    def reset(self, branch: str, path: Optional[str | bytes] = None) -> int:
        """Drop the branch's uncommitted changes, or only those at and under path."""
        return super().reset(branch, None if path is None else to_key(path))


def encode_items(items: Iterable[tuple[bytes, Optional[EntryInfo]]]) -> list[tuple[bytes, Optional[bytes]]]:
    """(key, entry or None) -> (key, encoded value or None), as the version layer stages them."""
    encoded = []
    for key, entry in items:
        if entry is None:
            encoded.append((key, None))
        else:
            # identity from the EntryInfo: the same digest as from its bytes, no decode
            encoded.append((key, encode_value(entry_identity(entry), encode_entry(entry))))
    return encoded
