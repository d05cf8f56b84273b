"""The request handlers: pyfuse3 operations over a Repository.

Every handler is wrapped by ``errnos.guarded`` (only FUSEError leaves it) and
does its blocking work (LMDB, store, hashing, local disk) on a bounded pool of
worker threads (gravfs.fuse.workers), so the trio thread only juggles requests.
Namespace changes of one branch (create, mkdir, unlink, rmdir, rename,
symlink, staging a closed file) are serialized by a per-branch trio lock,
which makes each of them atomic as seen through the mount.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import json
import logging
import os
import stat as statmod
import sys
import time
import traceback
from dataclasses import replace
from functools import partial
from typing import Iterator, Optional

import pyfuse3
import trio

from gravfs import hashing
from gravfs.fs.entry import (KIND_BLOCK_DEVICE, KIND_CHAR_DEVICE, KIND_DIRECTORY, KIND_FILE,
                             KIND_SYMLINK, SPECIAL_KINDS, EntryInfo, kind_of_mode,
                             shown_atime)
from gravfs.data.objects import address_of
from gravfs.data.external import content_key, is_external, source_of
from gravfs.data.reader import DataReader
from gravfs.data.sparse import ZEROS
from gravfs.errors import AmbiguousRefError, GravfsError, NotFoundError, TreeGoneError
from gravfs.fuse import holders, kernel, opstats
from gravfs.fuse.errnos import errno_of, fail, guarded, quiet
from gravfs.fuse.forgets import Forgets
from gravfs.fuse.inorder import InOrderReads
from gravfs.fuse.inodes import ROOT, Inode, InodeTable
from gravfs.fuse.localfiles import LocalFiles
from gravfs.fuse.locks import QuickLock
from gravfs.fuse.openfiles import (WRITEBACK_MAX, DirHandle, FileHandle, ListingAhead, OpenFile,
                                    clear_suid)
from gravfs.fuse.options import MountOptions
from gravfs.fuse.spin import ACTIVITY
from gravfs.fuse.statcache import MISSING, BranchStatCache, OwnWrites
from gravfs.fuse.trees import Tree
from gravfs.fuse.workers import WorkerPool
from gravfs.fs.lostfound import free_name, lost_found_path, save_whole
from gravfs.fs.paths import MAX_NAME_BYTES, split_last
from gravfs.quoting import quote
from gravfs.sstable import DEFAULT_CACHE
from gravfs import threadwork
from gravfs.waits import WouldWait, no_waiting
from gravfs.sysmem import release_free_heap, resident
from gravfs.fs.repository import KIND_NAMES, Node, group_items
from gravfs.version.staging.area import MAX_PATH_BYTES

log = logging.getLogger(__name__)

BRANCHES_INO, COMMITS_INO, TAGS_INO = 2, 3, 4
VIRTUAL_NAMES = {b"branches": BRANCHES_INO, b"commits": COMMITS_INO, b"tags": TAGS_INO}
EMPTY_ADDRESS = address_of(hashing.hexdigest(b""))
INLINE_WRITE = 128 * 1024  # writes up to this size go to the local copy without a thread hop
# Closed files up to this size are hashed and moved to pending uploads on the event
# loop's thread: cheaper than the two thread switches of a hop on a small machine.
INLINE_WRITEBACK = 64 * 1024
READDIR_BATCH = 512
# Names listed again when the rest of a batch outlived a change of its tree (the
# rest is dropped: see readdir): about what a kernel readdir takes.
RELIST_BATCH = 64
# Entries of a readdir reply between two turns of the event loop (about 1 ms of work).
READDIR_TURN = 64
# The namespace "lock" of commits and tags, never taken: their names never change
_UNCHANGING = QuickLock()
# Lookups missing the stat cache in ascending order before listing ahead. Random
# lookups rise that many times in a row once in (run + 1)! misses: at 3, once in 24,
# so a directory stat'ed at random 40 times listed ahead about once for nothing
# (each 32 nodes, and then a worker trip); at 6, once in 5,040. A scan pays 3 more misses.
ASCENDING_RUN = 6
MAX_RUN = 8 * ASCENDING_RUN  # ... after listings ahead that went unused
# Names a run's first listing ahead takes (then doubled while they are used, up to
# READDIR_BATCH). That first one runs on the loop when at hand (~0.2 ms of it).
FIRST_AHEAD = 32
BLKSIZE = 128 * 1024
PID_XATTR = b"user.gravfs.pid"
EXIT_REPORT_XATTR = b"user.gravfs.exit_report"  # where the daemon lists files it could not stage
COMMIT_XATTR = b"user.gravfs.commit"
INODES_XATTR = b"user.gravfs.inodes"  # the inode table's record counts (JSON), on the root
MEMORY_XATTR = b"user.gravfs.memory"  # the daemon's memory and its bounded caches (JSON), on the root
XATTR_NAMESPACES = (b"user.", b"trusted.", b"security.")
# Not kept, and reported as not supported (as ext4 -o noacl, or a filesystem
# without labels): POSIX ACLs (system.*: the kernel checks modes only) and
# SELinux labels (a FUSE mount's label comes from the mount, not from xattrs).
# ls -l asks both of every entry unless a device answers "not supported" once.
UNSUPPORTED_XATTRS = (b"security.selinux",)
# Not kept, but asked before every write: answered "none" (security.capability).
NEVER_SET_XATTRS = (b"security.capability",)
# An entry's attributes live in its record, rewritten whole by each setxattr and
# read with every listing of its range: their bytes are bounded, as a filesystem's
# xattr space is (ENOSPC past it). Their names must also fit one listxattr reply.
XATTRS_MAX_BYTES = 1 << 20
XATTR_LIST_MAX = 65536  # the kernel's limit on a listxattr reply
MAX_FOREIGN_LOGGED = 10_000  # keys other writers made, each logged once
MAX_SUPERSEDED_NAMES = 10_000  # superseded names awaiting the watcher's invalidation
ATTR_SLACK = 1.0  # seconds: the kernel starts an attribute's timeout when it gets the reply
DIRECT_WRITES = kernel.direct_writes()  # write-only opens bypass the page cache (_open_handle)


def _unsupported_xattr(name: bytes) -> bool:
    """An attribute kind the mount does not keep and says so (EOPNOTSUPP/ENOTSUP)."""
    return name.startswith(b"system.") or name in UNSUPPORTED_XATTRS


def settled(fn):
    """For a handler that reads or changes what the mount shows: the creates deferred
    so far are staged first (see GravfsOperations.create)."""

    @functools.wraps(fn)
    async def wrapper(self, *args, **kwargs):
        if self.deferred:
            await self.settle()
        return await fn(self, *args, **kwargs)

    wrapper.settles = True
    return wrapper


class GravfsOperations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False

    def __init__(self, repo, settings: MountOptions):
        super().__init__()
        self.repo = repo
        self.settings = settings
        self.workers = WorkerPool(settings.threads)
        self.inodes = InodeTable()
        self.forgets = Forgets(self.inodes)
        self.trees: dict[tuple, Tree] = {}
        self.commit_trees: dict[str, Tree] = {}  # name as typed -> tree
        self.files: dict[int, FileHandle] = {}
        self.dirs: dict[int, DirHandle] = {}
        self.open_files: dict[int, OpenFile] = {}  # ino -> local copy
        self.ns_locks: dict[str, QuickLock] = {}
        self._next_fh = 1
        self.started_ns = time.time_ns()
        self.uid, self.gid = os.getuid(), os.getgid()
        self.data = repo.data  # the data plane: every read and write of file contents
        self.reader = DataReader(self.data, cache_bytes=settings.cache_mb << 20)
        self.own = OwnWrites()  # our staging transactions, told apart from others
        self.own.wrap(repo.staging)
        self.statcache = BranchStatCache(repo, self.own)
        self.local = LocalFiles("")  # set by prepare
        self.exit_report = ""
        self.rescued: list[tuple[str, str, str]] = []  # (branch:path, saved where, error)
        self.mount_root = b""  # the mount point as /proc names open files (set by prepare)
        self.foreign_logged: set[bytes] = set()
        self.nursery: Optional[trio.Nursery] = None  # set by launch: background work (readdir)
        self.in_order = InOrderReads()  # directories whose files are opened in name order
        self.deferred: dict[int, OpenFile] = {}  # ino -> a create not staged yet (see create)
        # (parent inode, name) of names whose inode was superseded: the watcher drops
        # the kernel's entries of them (a dentry may still lead to the old inode)
        self.superseded_names: list[tuple[int, bytes]] = []
        self.settling = QuickLock()
        if settings.branch:
            tree = self._branch_tree(settings.branch)
            self.inodes.add_virtual(ROOT, b"", "root", ROOT, tree=tree)
        else:
            self.inodes.add_virtual(ROOT, b"", "root", ROOT)
            for name, ino in VIRTUAL_NAMES.items():
                self.inodes.add_virtual(ino, name, name.decode(), ROOT)

    # -- setup / teardown -------------------------------------------------------------

    def prepare(self, files_dir: str) -> None:
        """Blocking setup before mounting: the empty object, the local files dir."""
        self.local = LocalFiles(files_dir)
        self.exit_report = files_dir + ".report"
        if self.settings.mountpoint:  # resolved before mounting: no request to ourselves
            self.mount_root = os.fsencode(os.path.realpath(self.settings.mountpoint)).rstrip(b"/")
        if not self.settings.read_only:
            try:  # new empty files point at the empty object: make sure it exists
                self.data.put_bytes(b"")  # stored only if missing
            except GravfsError as exc:
                log.warning("cannot store the empty object (%s); creating files may fail", exc)
        if self.settings.branch:
            name = self.settings.branch
            try:
                self.repo.head(name)  # NotFoundError before mounting
            except NotFoundError:
                if self.repo.heads.tag(name) is None:
                    raise
                raise NotFoundError(f"branch {name!r} not found: {name!r} is a tag (a mount "
                                    f"without branch= shows it, read-only, at tags/{name})") \
                    from None

    async def flush_all(self) -> None:
        """Stage every modified open file (unmount, shutdown). One that cannot be staged
        is saved in lost+found and listed in the exit report (see write_exit_report)."""
        for of in list(self.open_files.values()):
            try:
                await self._stage(of)
            except Exception as exc:
                where = await self.run(self._rescue, of)
                name = f"{of.node.tree.name}:{os.fsdecode(of.node.key)}"
                self.rescued.append((name, where, str(exc)))
                if errno_of(exc) in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
                    log.error("could not stage %s at shutdown (%s); its content is saved as %s",
                              name, exc, where)
                else:
                    log.exception("could not stage %s at shutdown; its content is saved as %s",
                                  name, where)
                if where == of.path:
                    continue  # not moved: closing would delete it
            of.close()
        self.open_files.clear()
        self.write_exit_report()

    def write_exit_report(self) -> None:
        """Tell ``gravfs umount`` (which reads the file named by EXIT_REPORT_XATTR once the
        daemon is gone) which files went to lost+found instead of staging."""
        if not self.rescued or not self.exit_report:
            return
        try:
            with open(self.exit_report, "w") as f:
                json.dump([{"file": name, "saved": where, "error": err}
                           for name, where, err in self.rescued], f)
        except OSError as exc:
            log.error("cannot write the exit report %s: %s", self.exit_report, exc)

    def _rescue(self, of: OpenFile) -> str:
        """Save the content of a file that could not be staged in this host's
        lost+found (gravfs.fs.lostfound), where the next mount leaves it alone;
        returns where it is."""
        node = of.node
        dest = lost_found_path(self.repo.workspace, node.tree.name, node.key)
        try:
            if of.materialized:
                dest = free_name(dest)
                os.replace(of.path, dest)
                of.path = ""
            else:  # written back: its content is a pending upload (or in the store)
                address = of.entry.address
                dest = save_whole(dest, lambda out: self.data.copy_to(address, out))
        except (OSError, GravfsError) as exc:
            if of.materialized:
                log.error("could not save %s to %s (%s); it stays in %s", node.key, dest, exc,
                          of.path)
                return of.path
            log.error("could not save %s to %s (%s); its content is the data object %s",
                      node.key, dest, exc, of.entry.address)
            return f"data object {of.entry.address}"
        return dest

    # -- helpers ----------------------------------------------------------------------

    async def run(self, fn, *args, **kw):
        try:
            with threadwork.working():  # the loop does not busy-poll meanwhile
                return await self.workers.run(partial(fn, *args, **kw))
        except Exception as exc:
            _drop_locals(exc)
            raise

    async def _at_hand(self, fn, *args):
        """fn(*args) on this (the event loop's) thread when all it needs is at hand,
        else on a worker (gravfs.waits: fn gives way before any slow work)."""
        try:
            with no_waiting():
                return fn(*args)
        except WouldWait:
            pass
        return await self.run(fn, *args)

    async def _stage_inline(self, tree: Tree, changes: list, items: list,
                            provisional: frozenset = frozenset()) -> bool:
        """Stage on this (the event loop's) thread when that is only a local LMDB write:
        cheaper than a worker-thread trip. False: nothing staged (use a worker)."""
        if tree.kind != "branch":
            return False
        st = self.own.collect(tree.name, changes, self.repo.stage_cached, tree.name, items,
                              provisional=provisional)
        if opstats.PATH:
            opstats.record("stage.inline" if st is not None else "stage.no-inline", 0.0)
        if st is None:
            return False
        self._file_own_dirs(tree, items)
        policy = self.repo.compaction
        if policy is not None and policy.due(st):
            from gravfs.version.compaction import maybe_compact
            await self._write(tree, None, maybe_compact, self.repo, tree.name, policy)
        return True

    async def settle(self) -> None:
        """Stage the creates deferred so far (see create), those of one branch in one
        transaction. Every request that reads or changes what the mount shows calls
        this first, so nothing sees a state without them (a close staging one holds the
        branch's namespace lock: this waits for it). When the staging fails (a full
        disk), the request goes on: the file's own close stages the create with its
        content, or reports the error; until then listings may miss the open file."""
        async with self.settling:
            while self.deferred:
                tree = next(iter(self.deferred.values())).node.tree
                async with self._ns(tree):
                    group = [of for of in self.deferred.values() if of.node.tree is tree]
                    if not group:  # a close staged them meanwhile
                        continue
                    items, keys = [], []
                    for of in group:
                        del self.deferred[of.node.ino]
                        entry, pitems = of.deferred
                        if of.node.linked:
                            items.append((of.node.key, entry))
                            keys.append(of.node.key)
                        items += pitems
                    changes = [(k, True) for k, _ in items]
                    try:
                        if not await self._stage_inline(tree, changes, items, frozenset(keys)):
                            await self._write(tree, changes, self.repo.stage, tree.name, items,
                                              frozenset(keys))
                    except Exception as exc:
                        log.warning("could not stage %d created files on %s (%s); each is "
                                    "staged at its close", len(group), tree.name, exc)
                        continue
                    for of in group:
                        of.deferred = None
                log.debug("settled %d deferred creates on %s", len(group), tree.name)

    async def _settle_for(self, node: Inode) -> None:
        """settle() for a request about ``node``, unless it is an open file: its own
        state answers (attributes, xattrs) or keeps the change until its close."""
        if self.deferred and node.ino not in self.open_files:
            await self.settle()

    @contextlib.contextmanager
    def _with_deferred(self, of: OpenFile) -> Iterator[list]:
        """The parent markers of an open file's deferred create, to stage with its entry
        (under the branch's namespace lock). Staged, the create is done; failed, the
        file's next close tries again (requests no longer do)."""
        try:
            yield of.deferred[1] if of.deferred is not None else []
        finally:
            self.deferred.pop(of.node.ino, None)
        of.deferred = None

    def _file_own_dirs(self, tree: Tree, items: list) -> None:
        """Directory markers just staged on this thread (a create's parent, with its new
        times) go into the stat cache at that transaction's version, when it is the
        newest and ours: the next create in the directory then stays on this thread."""
        cache = self.statcache
        v = cache.version(tree.name, blocking=False)
        mine = self.own.log.get(v[1]) if v is not None else None
        if mine is None or mine[0] != tree.name or mine[1] is None:
            return
        staged = {k for k, _ in mine[1]}
        for k, e in items:
            if k.endswith(b"/") and k in staged and e is not None and e.kind == KIND_DIRECTORY:
                cache.put(tree.name, v, k[:-1], Node(k, "dir", e))

    def _known_missing(self, tree: Tree, key: bytes) -> bool:
        """The stat cache knows (without a worker thread) that nothing is at key."""
        cache = self.statcache
        return cache.get(tree.name, cache.version(tree.name, blocking=False), key) is None

    async def _write(self, tree: Tree, changes: Optional[list], fn, *args,
                     fresh_dir: Optional[bytes] = None):
        """run() for a call that stages: its transactions are filed as this mount's own,
        with the keys it changes ((staged key, present); None: cannot tell)."""
        return await self.run(self.own.collect, tree.name, changes, fn, *args,
                              fresh_dir=fresh_dir)

    def _node(self, ino: int) -> Inode:
        node = self.inodes.get(ino)
        if node is None:
            raise fail(errno.ESTALE)
        return node

    def _fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    def _branch_tree(self, name: str) -> Tree:
        ident = ("branch", name)
        tree = self.trees.get(ident)
        if tree is None:
            tree = Tree("branch", name, writable=not self.settings.read_only)
            self.trees[ident] = tree
        return tree

    def _ns(self, tree: Tree) -> QuickLock:
        if tree.immutable:
            return _UNCHANGING  # nothing changes names there: no lock per commit or tag
        lock = self.ns_locks.get(tree.name)
        if lock is None:
            lock = self.ns_locks[tree.name] = QuickLock()
        return lock

    async def _settled_read(self, tree: Tree, read):
        """``await read()`` at a moment no change of the tree's names is half done, nor
        was made while it waited on a worker.

        A change (create, rename, unlink, a close) stages and then moves the inode
        table's names while it holds the tree's lock (or with nothing run between);
        a read made while it holds the lock, or one that read before a change and
        answers after it, would pair a name's inode with another file's entry (the
        kernel then shows an open file another file's size: short or padded reads).
        Such a read is made again under the lock."""
        lock = self._ns(tree)
        stamp = lock.stamp()
        if stamp is not None:
            result = await read()
            if lock.stamp() == stamp:
                return result
        elif lock.held_here():
            return await read()
        async with lock:
            return await read()

    def _ttl(self, node: Inode) -> float:
        tree = node.tree
        if tree is None or tree.kind == "branch":
            return self.settings.attr_timeout
        if node.key == b"" and tree.kind == "tag":
            return self.settings.attr_timeout  # a tag may be deleted and re-created
        return self.settings.immutable_ttl

    def _writable_tree(self, node: Inode) -> Tree:
        tree = node.tree
        if tree is None or not tree.writable:
            raise fail(errno.EROFS)
        if node.superseded:  # its name holds other content now: the kernel looks again
            raise fail(errno.ESTALE)
        if node.foreign:  # see _remember
            raise fail(errno.EPERM)
        return tree

    @staticmethod
    def _check_name(name: bytes) -> None:
        if len(name) > MAX_NAME_BYTES:
            raise fail(errno.ENAMETOOLONG)
        if name in (b".", b"..") or b"/" in name or b"\x00" in name:
            raise fail(errno.EINVAL)

    def _child_key(self, parent: Inode, name: bytes) -> bytes:
        self._check_name(name)
        key = parent.child_key(name)
        if len(key) + 1 > MAX_PATH_BYTES:
            raise fail(errno.ENAMETOOLONG)
        return key

    async def _stat(self, tree: Tree, key: bytes, parent: Optional[Inode] = None,
                    node: Optional[Inode] = None) -> Optional[Node]:
        """The node at ``key`` (a child of ``parent``, or ``node``'s own key), settled
        as _settled_read says (its rule inlined: lookups are the mount's hottest path):
        a caller pairs the answer with the inode at the key without waiting again."""
        if tree.kind != "branch":  # a commit or tag: never changes, no stat cache
            try:
                return await self._at_hand(self.repo.stat, tree.ref, key)
            except TreeGoneError:
                raise
            except NotFoundError:
                return None
        lock = self._ns(tree)
        stamp = lock.stamp()
        if stamp is None and not lock.held_here():
            return await self._stat_locked(lock, tree, key, parent, node)
        cache = self.statcache  # branch paths: answered here while the branch is unchanged
        n = cache.get(tree.name, cache.version(tree.name, blocking=False), key)
        if n is not MISSING:
            return n
        ahead = self._lookahead(parent, key, cache.hits) if parent is not None else 0
        if ahead:
            # a run's first listing on the loop when at hand: the worker's trip was
            # most of it, and in a lake of small directories (a scan lists ahead once
            # a directory) 40% of a scan's time; a longer one, up to 512 names, would
            # hold other clients' requests for several ms: on a worker
            run = self._at_hand if ahead <= FIRST_AHEAD else self.run
            version, n, listed = await run(self._stat_versioned, tree, key, parent.key, ahead)
        else:
            version, n, listed = await self._at_hand(self._stat_versioned, tree, key)
        if version is not None:
            cache.put(tree.name, version, key, n)
            if listed:
                self.statcache.put_listed(tree.name, version, parent.key, listed)
                parent.extra["listed_upto"] = listed[-1].fs_name
        if stamp is not None and lock.stamp() != stamp:  # a change came or went meanwhile
            return await self._stat_locked(lock, tree, key, parent, node)
        return n

    async def _stat_locked(self, lock: QuickLock, tree: Tree, key: bytes,
                           parent: Optional[Inode], node: Optional[Inode]) -> Optional[Node]:
        async with lock:  # the key as it is now: a rename may have moved the inode
            if node is not None:
                key = node.key
            elif parent is not None:
                key = parent.child_key(key.rpartition(b"/")[2])
            return await self._stat(tree, key, parent, node)

    @staticmethod
    def _lookahead(parent: Inode, key: bytes, hits: int) -> int:
        """How many following names to list with a lookup that missed the stat cache.

        Names looked up in ascending order (ls, find, a stat loop over a listing)
        get a growing batch of the next ones listed in the same worker-thread trip,
        once ASCENDING_RUN misses in a row have gone up; lookups in random order
        (one ascends from the last with even odds) list nothing: a listing of 32
        costs as much as several lookups and would seldom be used. ``hits``: the
        stat cache's hit count, which tells whether the names listed last were
        looked up (a scan) or not (random lookups that rose by chance: the parent
        then needs a longer run before listing again, up to MAX_RUN)."""
        name = key.rsplit(b"/", 1)[-1]
        x = parent.extra
        last, x["last_miss"] = x.get("last_miss"), name
        run = x["run"] = x.get("run", 0) + 1 if last is not None and name > last else 0
        need = x.get("need", ASCENDING_RUN)
        ahead = x.get("ahead") or 0
        used = False
        if ahead:  # the last miss listed ahead: were those names looked up since?
            used = hits - x.get("hits_at", hits) >= ahead // 2
            need = x["need"] = ASCENDING_RUN if used else min(MAX_RUN, 2 * need)
            if not used:
                run = x["run"] = 0
        upto = x.get("listed_upto")
        if run < need:
            ahead = 0
        elif used and upto is not None and name > upto and last <= upto:
            ahead = min(READDIR_BATCH, 2 * ahead)  # ran past the last batch
        else:
            ahead = FIRST_AHEAD
        x["ahead"] = ahead
        if ahead:
            x["hits_at"] = hits
        return ahead

    def _stat_versioned(self, tree: Tree, key: bytes, dir_key: Optional[bytes] = None,
                        ahead: int = 0) -> tuple[tuple, Optional[Node], list]:
        version = None
        listed: list = []
        try:
            version = self.statcache.version(tree.name, blocking=True)  # before the stat
            n = self.repo.stat(tree.ref, key)
        except TreeGoneError:
            raise
        except NotFoundError:
            n = None
        if ahead and version is not None:
            try:
                listed = self.repo.list_dir(tree.ref, dir_key, key.rsplit(b"/", 1)[-1], ahead)
            except GravfsError:
                listed = []
        return version, n, listed

    def _now_dir_entry(self, mode: int, ctx=None, base: Optional[EntryInfo] = None) -> EntryInfo:
        b = base or EntryInfo(kind=KIND_DIRECTORY)
        return replace(b, address="", size=0, kind=KIND_DIRECTORY,
                       mode=statmod.S_IFDIR | (mode & 0o7777),
                       mtime_ns=b.mtime_ns if base else time.time_ns(),
                       uid=ctx.uid if ctx else b.uid, gid=ctx.gid if ctx else b.gid)

    # -- attributes -------------------------------------------------------------------

    def _attrs(self, node: Inode, entry: Optional[EntryInfo]) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()  # zeroed: generation and st_rdev stay 0
        a.st_ino = node.ino
        a.entry_timeout = a.attr_timeout = self._ttl(node)
        a.st_blksize = BLKSIZE
        of = self.open_files.get(node.ino)
        if of is not None:
            size = of.size()
            a.st_mode = statmod.S_IFREG | (of.mode & 0o7777)
            a.st_nlink = len(of.links) if of.link_group and of.links else 1
            a.st_size = size
            a.st_blocks = (size + 511) // 512
            a.st_uid, a.st_gid = of.uid or self.uid, of.gid or self.gid  # (root's: _attrs)
            mtime = of.mtime_ns
            atime, ctime = of.atime_ns, of.ctime_ns or mtime  # (the epoch is an atime)
        elif entry is not None:
            kind = node.kind
            a.st_mode = entry.mode
            if kind == "dir":
                a.st_mode = statmod.S_IFDIR | (entry.mode & 0o7777)
            a.st_nlink = entry.nlink
            a.st_size = entry.size if kind != "dir" else 0
            if kind == "symlink":
                a.st_size = len(entry.symlink_target.encode("utf-8", "surrogateescape"))
            # a file of zeros only (sparse.ZEROS) has nothing stored: du counts nothing
            a.st_blocks = 0 if entry.address.startswith(ZEROS) else (a.st_size + 511) // 512
            a.st_rdev = entry.rdev
            # root's entries (0 is also what an import, put or a lakeFS entry carries) are
            # the mounting user's in a mount a user runs: theirs to write, as the
            # directories implied around them are; a root mount shows them as root's
            a.st_uid, a.st_gid = entry.uid or self.uid, entry.gid or self.gid
            mtime = entry.mtime_ns
            atime, ctime = shown_atime(entry), entry.ctime_ns or mtime
        else:  # implied or virtual directory
            a.st_mode = statmod.S_IFDIR | (0o555 if node.tree is None or not node.tree.writable
                                           else 0o755)
            a.st_nlink = 1
            a.st_size = 0
            a.st_uid, a.st_gid = (self.uid, self.gid)
            mtime = node.tree.commit.time_ns if node.tree and node.tree.commit else self.started_ns
            atime = ctime = mtime
        a.st_mtime_ns, a.st_ctime_ns, a.st_atime_ns = mtime, ctime, atime
        if not node.linked:
            a.st_nlink = 0  # still open, its last name gone
        return a

    async def _entry_of(self, node: Inode) -> Optional[EntryInfo]:
        """Current entry of a tree inode (None: implied directory or tree root); for
        a file open for reading whose name another process gave new content, the
        content its handles read (the inode is superseded: see _open_inode_at)."""
        if node.tree is None or node.key == b"":
            return None
        seen = self.inodes.remembered(node)
        if node.tree.immutable and seen is not None:
            return seen[0]
        n = await self._stat(node.tree, node.key, node=node) if node.linked else None
        if n is None or n.kind != node.kind or not node.linked:
            # gone, or its name is another file's now (renamed over, removed and made
            # again): never that file's entry, which would show as this one's size
            if node.opens and seen is not None:
                return seen[0]  # still open: what it was
            raise fail(errno.ESTALE if node.superseded else errno.ENOENT)
        if node.opens and self._replaced(node, seen, n.entry):
            self._supersede(node)
            return seen[0]
        self._remember(node, n)
        return n.entry

    def _replaced(self, node: Inode, seen: Optional[tuple], new: Optional[EntryInfo]) -> bool:
        """Is new other content than the entry remembered for node (``seen``), at a file
        no open file of this mount holds (whose content is the mount's own)?"""
        old = seen[0] if seen is not None else None
        return (old is not None and new is not None and node.kind == "file"
                and node.ino not in self.open_files and content_key(old) != content_key(new))

    def _supersede(self, node: Inode) -> None:
        """Give node's names a new inode (InodeTable.supersede); the kernel's entries
        of them go at the watcher's next round."""
        log.info("%s:%s changed outside the mount while the kernel held it: its name "
                 "gets a new inode (was %d)", node.tree.name, node.key.decode(errors="replace"),
                 node.ino)
        names = [(self.inodes.parent_of(node), node.name)]
        self.inodes.supersede(node)
        if len(self.superseded_names) < MAX_SUPERSEDED_NAMES:
            self.superseded_names += names

    @staticmethod
    def _drop_kernel_attrs(node: Inode) -> None:
        """Have the kernel ask for node's attributes before its next read or seek to
        the end through it (which it does once they expired): the size it holds may
        be another content's, which would cut a read short or put a write after a
        seek inside the content. Inline: an attribute-only notification waits on no
        lock a request holds."""
        try:
            pyfuse3.invalidate_inode(node.ino, True)
        except OSError as exc:
            log.debug("invalidating the attributes of inode %d: %s", node.ino, exc)

    def _kernel_may_differ(self, node: Inode, seen: Optional[tuple],
                           entry: Optional[EntryInfo]) -> bool:
        """Might the kernel hold attributes of other content than entry's for node (a
        size: reads through it would stop there)? Yes when what was last told about
        node differs, or, when nothing is remembered (listed, or evicted), when the
        branch changed outside the mount within the kernel's attribute timeout."""
        tree = node.tree
        if tree.kind != "branch" or node.kind != "file" or entry is None:
            return False
        if seen is not None and seen[0] is not None:
            return self._replaced(node, seen, entry)
        since = time.monotonic() - self.statcache.changed_at(tree.name)
        return since < self.settings.attr_timeout + ATTR_SLACK

    def _remember(self, node: Inode, n: Node, key: Optional[bytes] = None) -> None:
        """``key``: the name n was found at (a hard-linked inode has several)."""
        self._remember_entry(node, n.entry)
        self._mark_foreign(node, n, key)

    @staticmethod
    def _mark_foreign(node: Inode, n: Node, key: Optional[bytes] = None) -> None:
        """At or under a name another writer made: shown escaped, and read-only (a write
        would stage the escaped name as a new key beside it)."""
        own = n.key[:-1] if n.kind == "dir" and n.key.endswith(b"/") else n.key
        node.foreign = own != (node.key if key is None else key)

    def _remember_entry(self, node: Inode, entry: Optional[EntryInfo]) -> None:
        """Keep the entry last seen for an inode (and when: branch entries age), in the
        inode table's bounded cache."""
        self.inodes.remember(node, entry, time.monotonic())

    def _recent_entry(self, node: Inode) -> tuple[bool, Optional[EntryInfo]]:
        """(known, entry) when the entry was seen within the branch attribute timeout."""
        hit = self.inodes.remembered(node)
        if hit is None or hit[1] is None:
            return False, None
        if node.tree is not None and node.tree.immutable:
            return True, hit[0]
        if time.monotonic() - hit[1] < self.settings.attr_timeout:
            return True, hit[0]
        return False, None

    # -- lookup / forget / getattr --------------------------------------------------------

    @guarded
    @settled
    async def lookup(self, parent_inode, name, ctx=None):
        parent = self._node(parent_inode)
        if name == b".":
            node = parent
        elif name == b"..":
            node = self._node(self.inodes.parent_of(parent))
        else:
            node, entry = await self._lookup_child(parent, name)
            node.lookups += 1
            return self._attrs(node, entry)
        node.lookups += 1
        return await self._getattr_node(node)

    async def _lookup_child(self, parent: Inode, name: bytes) -> tuple[Inode, Optional[EntryInfo]]:
        if len(name) > MAX_NAME_BYTES:
            raise fail(errno.ENAMETOOLONG)
        if parent.virtual is not None:
            return await self._lookup_virtual(parent, name)
        if parent.kind != "dir":
            raise fail(errno.ENOTDIR)
        tree = parent.tree
        try:
            key = self._child_key(parent, name)
        except pyfuse3.FUSEError as e:
            if e.errno == errno.EINVAL:
                raise fail(errno.ENOENT)
            raise
        n = await self._stat(tree, key, parent)
        if n is None:
            raise fail(errno.ENOENT)
        node = self.inodes.ensure(tree, key, n.kind, parent.ino, name, _group(n))
        if node.opens:
            node = self._open_inode_at(node, tree, key, n, parent, name)
        self._remember(node, n, key)
        return node, n.entry

    def _open_inode_at(self, node: Inode, tree: Tree, key: bytes, n: Node, parent: Inode,
                       name: bytes) -> Inode:
        """The inode to pair with node n found at key, where the inode there (node) has
        open handles: a new one when they read other content (another process replaced
        the file: the kernel keeps one size and one page cache per inode, so the two
        contents cannot share one). Called only then: lookups and listings are hot."""
        if self._replaced(node, self.inodes.remembered(node), n.entry):
            self._supersede(node)
            node = self.inodes.ensure(tree, key, n.kind, parent.ino, name, _group(n))
        return node

    async def _lookup_virtual(self, parent: Inode, name: bytes) -> tuple[Inode, None]:
        if parent.virtual == "root":
            ino = VIRTUAL_NAMES.get(name)
            if ino is None:
                raise fail(errno.ENOENT)
            return self._node(ino), None
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(errno.ENOENT)
        if parent.virtual == "branches":
            if not await self.run(self.repo.branch_exists, text):
                raise fail(errno.ENOENT)
            tree = self._branch_tree(text)
        elif parent.virtual == "commits":
            tree = self.commit_trees.get(text)
            if tree is None:
                if len(text) < 6 or not hashing.is_hex_id(text):
                    raise fail(errno.ENOENT)
                tree = await self.run(self._resolve_commit, text)
                self.commit_trees[text] = tree
        elif parent.virtual == "tags":
            cid = await self.run(self.repo.heads.tag, text)
            if cid is None:
                raise fail(errno.ENOENT)
            commit = await self.run(self.repo.commits.get, cid)
            tree = Tree("tag", text, commit)
        else:
            raise fail(errno.ENOENT)
        self.trees.setdefault(tree.ident, tree)
        tree = self.trees[tree.ident]
        return self.inodes.ensure(tree, b"", "dir", parent.ino, name), None

    def _resolve_commit(self, text: str) -> Tree:
        try:
            cid = self.repo.commits.expand(text.lower())
        except AmbiguousRefError:
            raise fail(errno.ENOENT)
        if cid is None:
            raise fail(errno.ENOENT)
        return Tree("commit", text, self.repo.commits.get(cid))

    @quiet
    async def forget(self, inode_list):
        self.forgets.add(inode_list)  # a big batch: applied by Forgets.run, between requests
        if self.nursery is None and self.forgets.settle():  # no daemon: a test's handlers
            self.let_go()

    def let_go(self) -> None:
        """The kernel forgot most inodes it knew (its dentries reclaimed, or dropped):
        drop the caches that filled meanwhile too. Their entries were allocated between
        the inodes, and while one lives CPython keeps its whole arena, so without this
        the daemon would keep the memory of every inode it ever knew."""
        t = time.monotonic()
        self.statcache.drop()
        self.repo.committed.ranges.drop_parsed()
        gc.collect()  # the daemon may sit idle now: what is garbage only in cycles goes too
        release_free_heap()  # the number index's lists and the big dicts' old tables
        log.info("kernel forgot most inodes (%d known now): dropped the stat cache and "
                 "parsed ranges in %.0f ms", len(self.inodes), (time.monotonic() - t) * 1e3)

    @guarded
    async def getattr(self, inode, ctx=None):
        node = self._node(inode)
        await self._settle_for(node)
        return await self._getattr_node(node)

    async def _getattr_node(self, node: Inode) -> pyfuse3.EntryAttributes:
        if node.tree is None or node.key == b"":
            return self._attrs(node, None)
        if node.ino in self.open_files:
            return self._attrs(node, None)
        return self._attrs(node, await self._entry_of(node))

    # -- directories ------------------------------------------------------------------

    @guarded
    async def opendir(self, inode, ctx):
        node = self._node(inode)
        if node.kind != "dir":
            raise fail(errno.ENOTDIR)
        fh = self._fh()
        self.dirs[fh] = DirHandle(fh, node)
        node.opens += 1
        return fh

    @quiet
    async def releasedir(self, fh):
        h = self.dirs.pop(fh, None)
        if h is not None:
            h.node.opens -= 1
            self.inodes.maybe_drop(h.node)

    @guarded
    @settled
    async def readdir(self, fh, start_id, token):
        h = self.dirs.get(fh)
        if h is None:
            raise fail(errno.EBADF)
        node = h.node
        if start_id == 0:
            start_after = None
            h.snapshot = None
            h.pending = h.ahead = None
        else:
            start_after = h.offsets.get(start_id)
            if start_after is None:
                raise fail(errno.EINVAL)
        if node.virtual is not None:
            await self._readdir_virtual(h, start_after, token)
            return
        tree = node.tree
        filed = tree.kind == "branch"  # a branch's listed batches go to the stat cache
        lock = self._ns(tree)
        replied = 0
        while True:
            # a kernel readdir takes a few dozen entries: the rest of a listed batch
            # waits on the handle for the next call instead of being listed again,
            # unless the tree changed since (its entries may no longer be what the
            # inodes they would be paired with hold: see _settled_read)
            pending = h.pending
            h.pending = None
            if pending is not None and pending[0] == start_after and \
                    pending[3] is not None and pending[3] == lock.stamp():
                batch, more = pending[1], pending[2]
            else:
                limit = RELIST_BATCH if pending is not None and pending[0] == start_after \
                    else READDIR_BATCH
                try:
                    version, batch = await self._next_batch(h, tree, node.key, start_after,
                                                            limit)
                except TreeGoneError:
                    raise
                except NotFoundError:
                    return
                more = len(batch) >= limit
                if version is not None:
                    self.statcache.put_listed(tree.name, version, node.key, batch,
                                              start_after is None and not more)
            stamp = lock.stamp()  # the batch is current now (nothing ran since its check)
            # (a traversal passes here once a name: the loop's lookups are hoisted)
            ensure, remembered = self.inodes.ensure, self.inodes.remembered
            base, ino = node.child_key(b""), node.ino
            for i, n in enumerate(batch):
                cont = n.listing_key  # "name", or "name/" for a directory
                name = n.fs_name  # escaped when another writer made a name POSIX has not
                if n.foreign is not None and self._note_foreign(tree, n):
                    start_after = cont
                    continue
                key = base + name
                if n.key == key:  # share the listed key (the stat cache's node's): one copy
                    key = n.key
                kind, entry = n.kind, n.entry
                child = ensure(tree, key, kind, ino, name, _group(n))
                if child.opens:
                    child = self._open_inode_at(child, tree, key, n, node, name)
                if filed and kind != "dir" and remembered(child) is None:
                    # the stat cache holds it (the batch, put_listed above), where a
                    # getattr or an open finds it: remembering it too was a tenth of a
                    # traversal's time (one remembered already is refreshed below)
                    if key is not n.key or child.foreign:  # (else it stays not foreign)
                        self._mark_foreign(child, n, key)
                else:
                    self._remember(child, n, key)
                if not self._reply(h, token, name, child, entry, cont):
                    h.pending = (start_after, batch[i:], more, stamp)
                    if more:
                        self._list_ahead(h, tree, node.key, batch[-1].listing_key)
                    return
                start_after = cont
                replied += 1
                if replied % READDIR_TURN == 0:
                    # a reply of some 700 entries held the loop ~15 ms: other clients'
                    # requests waited that long behind a traversal
                    await trio.lowlevel.checkpoint()
                    if not threadwork.idle():  # a worker's call (statfs) needs the GIL too
                        ACTIVITY.hand_over()
                    if lock.stamp() != stamp:  # the rest may be stale: the next call relists
                        h.pending = (start_after, batch[i + 1:], more, stamp)
                        return
            if not more:  # the end: the kernel's next readdir gets it without a listing
                h.pending = (start_after, (), False, stamp)
                return

    async def _next_batch(self, h: DirHandle, tree: Tree, key: bytes,
                          start_after: Optional[bytes], limit: int = READDIR_BATCH) -> tuple:
        """(version, nodes) of the batch after start_after, settled (_settled_read): the
        one listed ahead when it starts there and the tree did not change since it
        began (a failed one is listed again here, to raise as usual)."""
        ahead, h.ahead = h.ahead, None
        if ahead is not None and ahead.after == start_after:
            await ahead.done.wait()
            if ahead.result is not None and ahead.stamp is not None and \
                    ahead.stamp == self._ns(tree).stamp():
                return ahead.result
        # a directory's first batch on the loop when at hand (_at_hand): the worker's
        # trip was a third of a small directory's time (a lake partitioned into
        # directories of a few files); a later one, inside a long reply, on a worker
        # (on the loop it held other clients' requests for a whole listing, ~6 ms)
        run = self._at_hand if start_after is None else self.run
        return await self._settled_read(
            tree, lambda: run(self._list_batch, tree, key, start_after, limit))

    def _list_ahead(self, h: DirHandle, tree: Tree, key: bytes, after: bytes) -> None:
        """List the next batch while the kernel takes in this reply and asks again:
        the listing (decoding every entry) overlaps the kernel's work on the reply (an
        inode and a dentry per entry) instead of following it. On the loop's thread,
        once the requests already waiting had their turn, when it reads nothing from
        the store (_at_hand): on a worker it passed the GIL back and forth with the
        replies, and a traversal ran 8-13% slower. (A later batch a reply waits for stays
        on a worker: on the loop, other clients' requests waited 30% longer.)"""
        nursery = self.nursery
        if nursery is None or h.ahead is not None:
            return
        job = h.ahead = ListingAhead(after, self._ns(tree).stamp())

        async def work() -> None:
            try:
                await trio.lowlevel.checkpoint()
                job.result = await self._at_hand(self._list_batch, tree, key, after)
            except Exception as exc:  # the readdir that wants it lists again and answers
                log.debug("listing ahead in %s:%s failed: %s", tree, key, exc)
            finally:
                job.done.set()

        nursery.start_soon(work)

    def _list_batch(self, tree: Tree, key: bytes, start_after: Optional[bytes],
                    limit: int = READDIR_BATCH):
        version = None
        if tree.kind == "branch":
            version = self.statcache.version(tree.name, blocking=True)  # before the listing
        batch = self.repo.list_dir(tree.ref, key, start_after, limit)
        for n in batch:  # worked out here, off the event loop (the nodes keep them)
            n.fs_name, n.listing_key
        return version, batch

    def _note_foreign(self, tree: Tree, n: Node) -> bool:
        """Log a key another writer made, once per key; True when it is not shown
        (its escaped name is also a real name in the directory, which wins)."""
        seen = self.foreign_logged
        if n.key not in seen and len(seen) < MAX_FOREIGN_LOGGED:
            seen.add(n.key)
            key = n.key if len(n.key) <= 120 else n.key[:120] + b"..."
            if n.shadowed:
                log.warning("%s: key %r (%s) is not shown: its escaped name %s is a real name "
                            "there (gravfs ls lists both)", tree, key, n.foreign, quote(n.fs_name))
            else:
                log.warning("%s: key %r (%s) is shown as %s", tree, key, n.foreign,
                            quote(n.fs_name))
        return n.shadowed

    def _reply(self, h: DirHandle, token, name: bytes, child: Inode,
               entry: Optional[EntryInfo], cont: Optional[bytes] = None) -> bool:
        off = h.next_offset
        if not pyfuse3.readdir_reply(token, name, self._attrs(child, entry), off):
            self.inodes.maybe_drop(child)
            return False
        h.offsets[off] = name if cont is None else cont
        h.next_offset += 1
        child.lookups += 1
        return True

    async def _readdir_virtual(self, h: DirHandle, start_after: Optional[bytes], token) -> None:
        node = h.node
        if h.snapshot is None:
            h.snapshot = sorted(await self._virtual_names(node))
        for name in h.snapshot:
            if start_after is not None and name <= start_after:
                continue
            if node.virtual == "root":
                child = self._node(VIRTUAL_NAMES[name])
            else:
                try:
                    child, _ = await self._lookup_virtual(node, name)
                except pyfuse3.FUSEError:
                    continue  # vanished since the listing
            if not self._reply(h, token, name, child, None):
                return

    async def _virtual_names(self, node: Inode) -> list[bytes]:
        if node.virtual == "root":
            return list(VIRTUAL_NAMES)
        if node.virtual in ("branches", "tags"):
            damaged: list[str] = []  # left out and logged; the others are listed
            listing = self.repo.list_branches if node.virtual == "branches" else \
                self.repo.list_tags
            rows = await self.run(listing, damaged)
            for why in damaged:
                log.error("%s", why)
            return [n.encode() for n, _ in rows]
        if node.virtual == "commits":
            return [cid.encode() for cid in await self.run(self._recent_commits)]
        return []

    def _recent_commits(self) -> list[str]:
        from gravfs.version.history import walk
        damaged: list[str] = []  # logged by the listing of branches/ and tags/
        starts = {cid for _, cid in self.repo.list_branches(damaged)}
        starts |= {cid for _, cid in self.repo.list_tags(damaged)}
        if not starts:
            return []
        unread: list[str] = []  # left out with what only they lead to, and logged
        ids = [c.id for c in walk(self.repo.commits, sorted(starts), self.settings.commits_listed,
                                  unread)]
        for why in unread:
            log.error("commits/ lists what it can: %s", why)
        return ids

    @guarded
    @settled
    async def mkdir(self, parent_inode, name, mode, ctx):
        parent = self._node(parent_inode)
        if parent.virtual == "branches" and not self.settings.read_only:
            return await self._create_branch(parent, name)
        tree = self._writable_tree(parent)
        key = self._child_key(parent, name)
        entry = _inherit(await self._parent_entry(parent), self._now_dir_entry(mode, ctx))
        async with self._ns(tree):
            await self._write(tree, [(key + b"/", True), (parent.key + b"/", True)],
                              self._create_blocking, tree, key, key + b"/", entry, None,
                              parent.key, fresh_dir=key)
        node = self.inodes.ensure(tree, key, "dir", parent.ino, name)
        self._remember_entry(node, entry)
        node.lookups += 1
        log.debug("mkdir %s:%s", tree.name, key)
        return self._attrs(node, entry)

    async def _create_branch(self, parent: Inode, name: bytes):
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL)
        await self.run(self.repo.create_branch, text)
        log.info("created branch %s through the mount", text)
        node, _ = await self._lookup_virtual(parent, name)
        node.lookups += 1
        return self._attrs(node, None)

    @guarded
    @settled
    async def rmdir(self, parent_inode, name, ctx):
        parent = self._node(parent_inode)
        if parent.virtual is not None:
            raise fail(errno.EPERM if parent.virtual == "branches" else errno.EROFS)
        tree = self._writable_tree(parent)
        key = self._child_key(parent, name)
        async with self._ns(tree):
            await self._write(tree, [(key + b"/", False), (parent.key + b"/", True)],
                              self._rmdir_blocking, tree, parent.key, key)
        node = self.inodes.find(tree, key, "dir")
        if node is not None:
            self.inodes.unlink(node)

    def _stat_or_none(self, tree: Tree, key: bytes) -> Optional[Node]:
        try:
            return self.repo.stat(tree.ref, key)
        except TreeGoneError:
            raise
        except NotFoundError:
            return None

    def _create_blocking(self, tree: Tree, key: bytes, staged_key: bytes, entry: EntryInfo,
                         of: Optional[OpenFile] = None, parent_key: bytes = b"") -> None:
        """One worker-thread trip for mkdir/create/symlink/mknod: check, stage (with the
        parent directory's new mtime and ctime), local file (a file, ``of``, is staged
        provisional: see create)."""
        n = self._stat_or_none(tree, key)
        if n is not None:
            raise fail(errno.EISDIR if n.kind == "dir" and of is not None else errno.EEXIST)
        self.repo.stage(tree.name, [(staged_key, entry)]
                        + self._parent_items(tree, parent_key, entry.mtime_ns),
                        provisional=frozenset([staged_key]) if of is not None else frozenset())
        if of is not None:
            of.materialize(self.data)

    def _rmdir_blocking(self, tree: Tree, parent_key: bytes, key: bytes) -> None:
        n = self._stat_or_none(tree, key)
        if n is None:
            raise fail(errno.ENOENT)
        if n.kind != "dir":
            raise fail(errno.ENOTDIR)
        if self.repo.list_dir(tree.ref, key, None, 1):
            raise fail(errno.ENOTEMPTY)
        items = [(n.key, None)]  # (a foreign key: its own)
        if n.key.endswith(b"/") and n.key != key + b"/":
            items.append((key + b"/", None))
        self._remove_keeping_parent(tree, parent_key, items)

    def _unlink_blocking(self, tree: Tree, parent_key: bytes, key: bytes) -> Node:
        n = self._stat_or_none(tree, key)
        if n is None:
            raise fail(errno.ENOENT)
        if n.kind == "dir":
            raise fail(errno.EISDIR)
        items = [(n.key, None)]  # a foreign key: its own
        if n.entry is not None and n.entry.link_group:  # the other names lose a link
            items += group_items(n.entry, {n.key: None}, time.time_ns())
        self._remove_keeping_parent(tree, parent_key, items)
        return n

    def _remove_keeping_parent(self, tree: Tree, parent_key: bytes, items: list) -> None:
        """Stage removals with the parent directory's new mtime and ctime (an implied
        parent gets a marker, so it survives)."""
        self.repo.stage(tree.name, list(items) + self._parent_items(tree, parent_key,
                                                                   time.time_ns()))

    def _parent_items(self, tree: Tree, parent_key: bytes, now_ns: int) -> list:
        """The marker of directory parent_key with mtime and ctime now_ns (entries came
        or went in it); [] for the tree's root (it has no entry)."""
        if not parent_key:
            return []
        p = self._stat_or_none(tree, parent_key)
        if p is None or p.kind != "dir":
            return []
        mkey = p.key if p.key.endswith(b"/") else parent_key + b"/"
        return [(mkey, _touched(p.entry or self._now_dir_entry(0o755), now_ns))]

    def _cached_parent_items(self, tree: Tree, parent_key: bytes, now_ns: int
                             ) -> Optional[list]:
        """_parent_items from the stat cache alone (None: not known there)."""
        if not parent_key:
            return []
        cache = self.statcache
        n = cache.get(tree.name, cache.version(tree.name, blocking=False), parent_key)
        if n is MISSING or n is None or n.kind != "dir" or n.entry is None:
            return None
        return [(n.key, _touched(n.entry, now_ns))]

    async def _parent_entry(self, parent: Inode) -> Optional[EntryInfo]:
        """The entry of a directory something is created in (None: a root or implied)."""
        if parent.tree is None or parent.key == b"":
            return None
        known, entry = self._recent_entry(parent)
        if known:
            return entry
        try:
            return await self._entry_of(parent)
        except pyfuse3.FUSEError:
            return None

    # -- files: create / open / read / write ----------------------------------------------------

    @guarded
    @settled
    async def create(self, parent_inode, name, mode, flags, ctx):
        parent = self._node(parent_inode)
        tree = self._writable_tree(parent)
        key = self._child_key(parent, name)
        now = time.time_ns()
        entry = EntryInfo(address=EMPTY_ADDRESS, size=0, mtime_ns=now,
                          mode=statmod.S_IFREG | (mode & 0o7777), kind=KIND_FILE,
                          uid=ctx.uid, gid=ctx.gid, atime_ns=now, ctime_ns=now)
        entry = _inherit(await self._parent_entry(parent), entry)
        # Staged provisional: the name exists (empty) for everyone, but a commit takes
        # nothing of the file until its first close or fsync stages its content. When
        # the stat cache shows the name free, that staging is deferred: the file's first
        # close stages it in its own transaction (one LMDB commit per file, not two), or
        # any other request settles it first (see settle).
        scratch = OpenFile(None, entry, self.local)
        scratch.provisional = True
        async with self._ns(tree):
            try:
                pitems = self._cached_parent_items(tree, parent.key, now)
                if tree.kind == "branch" and pitems is not None and self._known_missing(tree, key):
                    scratch.deferred = (entry, pitems)
                    scratch.materialize(self.data)  # empty: one open(2), no thread trip
                else:
                    await self._write(tree, [(key, True), (parent.key + b"/", True)],
                                      self._create_blocking, tree, key, key, entry, scratch,
                                      parent.key)
            except BaseException:
                scratch.close()
                raise
        stale = self.inodes.find(tree, key, "file")
        if stale is not None and stale.ino in self.open_files:
            # still open under a name that vanished outside the mount: keep it apart
            self.inodes.unlink(stale)
        node = self.inodes.ensure(tree, key, "file", parent.ino, name)
        self._remember_entry(node, entry)
        node.lookups += 1
        scratch.node = node
        self.open_files[node.ino] = scratch
        if scratch.deferred is not None:
            self.deferred[node.ino] = scratch
        of = scratch
        fi = self._open_handle(node, entry, flags, of, ctx)
        log.debug("create %s:%s", tree.name, key)
        return fi, self._attrs(node, entry)

    def _openfile(self, node: Inode, entry: Optional[EntryInfo]) -> OpenFile:
        of = self.open_files.get(node.ino)
        if of is None:
            of = OpenFile(node, entry, self.local)
            self.open_files[node.ino] = of
        return of

    def _open_handle(self, node: Inode, entry, flags: int, of: Optional[OpenFile],
                     ctx=None) -> pyfuse3.FileInfo:
        fh = self._fh()
        h = FileHandle(fh, node, entry, flags, of)
        if ctx is not None:
            h.opener = ctx.pid
            h.opener_uid = ctx.uid
        self.files[fh] = h
        node.opens += 1
        if of is not None:  # counted until release, whatever the access mode
            of.handles += 1
        fi = pyfuse3.FileInfo(fh=fh)
        fi.keep_cache = bool(node.tree and node.tree.immutable)
        # A write-only open has no pages of its own to keep, and through the page cache
        # each write(2) costs a GETXATTR first (security.capability: this mount keeps
        # none, and its writes clear setuid bits themselves, see write)
        fi.direct_io = DIRECT_WRITES and flags & os.O_ACCMODE == os.O_WRONLY
        return fi

    @guarded
    @settled
    async def open(self, inode, flags, ctx):
        node = self._node(inode)
        if node.kind == "dir":
            raise fail(errno.EISDIR)
        if node.tree is None:
            raise fail(errno.EACCES)
        acc = flags & os.O_ACCMODE
        writing = acc in (os.O_WRONLY, os.O_RDWR)
        if writing and not node.tree.writable:
            raise fail(errno.EROFS)
        if writing and node.foreign:  # see _remember
            raise fail(errno.EPERM)
        of = self.open_files.get(node.ino)
        entry = of.entry if of is not None else None
        if of is None:
            if node.superseded:  # the kernel looks the name up again: its new inode
                raise fail(errno.ESTALE)
            known, entry = self._recent_entry(node) if not writing else (False, None)
            if not known:  # reads may use what lookup just saw; writes start from fresh
                seen = self.inodes.remembered(node)
                entry = await self._entry_of(node)
                if node.superseded:
                    raise fail(errno.ESTALE)
                if self._kernel_may_differ(node, seen, entry):
                    self._drop_kernel_attrs(node)
            if node.kind != "file":
                raise fail(errno.EINVAL)
            if writing:
                of = self._openfile(node, entry)
        if writing:
            node.extra.pop("cached_address", None)  # its pages may soon hold other content
        if writing and flags & os.O_TRUNC:  # the kernel passes O_TRUNC (atomic_o_trunc)
            async with of.lock:
                if of.size() != 0 or not of.materialized:
                    await self.run(of.truncate, self.data, 0)
                    of.dirty = True
                    of.modified(time.time_ns(), ctx.uid != 0)
        fi = self._open_handle(node, entry, flags, of if writing else None, ctx)
        if not writing and of is None and entry is not None and node.tree.kind == "branch":
            # data is named by its hash: pages the kernel cached for an earlier read-only
            # open of the same address still hold this content (writers drop the mark)
            fi.keep_cache = node.extra.get("cached_address") == content_key(entry)
            node.extra["cached_address"] = content_key(entry)
        if entry is not None and is_external(entry.address_type):
            fi.keep_cache = False  # by reference: each open asks the source again
        elif not writing and of is None and entry is not None:
            self._read_in_order(node)
        return fi

    def _read_in_order(self, node: Inode) -> None:
        """An open for reading, noted per directory: a reader going up a directory's
        names gets the next files' contents loaded ahead of it (gravfs.fuse.inorder)."""
        nursery = self.nursery
        dir_key, name = split_last(node.key)  # (a file's name is its listing key)
        where = (node.tree, dir_key)
        asked = self.in_order.opened(where, name) if nursery is not None else None
        if asked is None:
            return
        after, count = asked

        async def work() -> None:
            names, ended = [], True
            try:
                await trio.lowlevel.checkpoint()  # (after this open's reply)
                listed = await self._at_hand(self.repo.list_dir, node.tree.ref, dir_key, after,
                                             count)
                seen = self.reader.load_ahead(  # (a directory or a reference: not loaded)
                    [(n.entry.address, n.entry.size) if n.kind == "file" and n.entry is not None
                     and not is_external(n.entry.address_type) else ("", 0) for n in listed])
                names = [n.listing_key for n in listed[:seen]]
                ended = seen == len(listed) < count
                log.debug("%s:%s read in name order: %d names after %r loaded ahead",
                          node.tree.name, dir_key, seen, after)
            except Exception as exc:  # only the speed of later reads is at stake
                log.debug("listing %s:%s to load ahead failed: %s", node.tree.name, dir_key, exc)
            finally:
                self.in_order.loaded(where, names, ended)

        nursery.start_soon(work)

    @guarded
    async def read(self, fh, off, size):
        h = self.files.get(fh)
        if h is None:
            raise fail(errno.EBADF)
        h.did_read = True  # (for atime: see _read_atime)
        of = self.open_files.get(h.node.ino)
        if of is not None and (of.materialized or of.moving_size is not None):
            async with of.lock:  # (a copy moving to pending uploads: its entry comes next)
                if of.materialized:
                    return await self.run(of.pread, off, size)
        entry = of.entry if of is not None else h.entry
        if entry is None or entry.size == 0 or off >= entry.size:
            return b""
        content = content_key(entry)
        if h.read_address != content:  # the content changed under a reused handle
            h.read_state.close()
            h.read_address = content
        if is_external(entry.address_type):  # by reference: from its source, checked
            return await self.run(self.reader.read_external, h.read_state, source_of(entry),
                                  off, size)
        data = self.reader.read_cached(h.read_state, entry.address, entry.size, off, size)
        if data is not None:  # read ahead already: no thread trip
            return data
        return await self.run(self.reader.read, h.read_state, entry.address, entry.size, off, size)

    @guarded
    async def write(self, fh, off, buf):
        h = self.files.get(fh)
        if h is None:
            raise fail(errno.EBADF)
        if not h.writable or h.openfile is None:
            raise fail(errno.EBADF)
        of = h.openfile
        async with of.lock:
            if not of.materialized:
                await self.run(of.materialize, self.data)
            if len(buf) <= INLINE_WRITE:  # into the page cache: cheaper than a thread hop
                n = of.pwrite(buf, None if h.append else off)
            else:
                n = await self.run(of.pwrite, buf, None if h.append else off)
            of.dirty = True
            of.modified(time.time_ns(), h.opener_uid != 0)
        return n

    async def _stage(self, of: OpenFile, durable: bool = False) -> None:
        """Upload (write back) a modified local copy and stage it at the inode's current
        path (with the parent markers of its create, when that was deferred)."""
        async with of.lock:
            if not of.dirty and not of.provisional:
                return
            node = of.node
            tree = node.tree
            if not node.linked:
                of.dirty = False
                return
            if not of.dirty:  # created, not written since: its entry, no longer provisional
                entry = of.meta_entry()
                async with self._ns(tree):
                    if not node.linked:
                        return
                    entry = await self._stage_entry(of, tree, entry)
                self._staged(of, entry)
                return
            size = of.size() if of.materialized else None
            if size is not None and size <= WRITEBACK_MAX:
                # write-back: hash, move to pending uploads and stage in one thread hop
                async with self._ns(tree):
                    if not node.linked:
                        of.dirty = False
                        return
                    if (not durable and size <= INLINE_WRITEBACK and tree.kind == "branch"
                            and self.data.writes_back and not of.link_group):
                        entry = of.upload(self.data, size=size)  # hash, move to pending
                        entry = await self._stage_entry(of, tree, entry)
                    else:
                        with self._with_deferred(of) as also:
                            entry = await self._write(tree, self._changes(of, also),
                                                      self._writeback_blocking, of, tree,
                                                      node.key, durable, also, size)
                self._staged(of, entry)
                return
            if of.materialized:
                entry = await self.run(of.upload, self.data, durable)
                of.entry = entry
            else:
                entry = of.meta_entry()
            async with self._ns(tree):
                if not node.linked:
                    of.dirty = False
                    return
                entry = await self._stage_entry(of, tree, entry)
            self._staged(of, entry)

    async def _stage_entry(self, of: OpenFile, tree: Tree, entry: EntryInfo) -> EntryInfo:
        """Stage an open file's entry (under the tree's namespace lock), with the parent
        markers of its deferred create, on this thread when that is a local write."""
        key = of.node.key
        with self._with_deferred(of) as also:
            changes = self._changes(of, also)
            if changes is not None and await self._stage_inline(tree, changes,  # None: links
                                                                [(key, entry)] + also):
                return entry
            return await self._write(tree, changes, self._stage_names, tree, key, entry, also)

    @staticmethod
    def _changes(of: OpenFile, also) -> Optional[list]:
        """The keys staging an open file changes (None for a link group: every name)."""
        if of.link_group:
            return None
        return [(of.node.key, True)] + [(k, True) for k, _ in also]

    def _writeback_blocking(self, of: OpenFile, tree: Tree, key: bytes, durable: bool,
                            also: list = (), size: Optional[int] = None) -> EntryInfo:
        entry = of.upload(self.data, durable, size)
        of.entry = entry  # the local copy is pending now: reads follow the entry
        return self._stage_names(tree, key, entry, also)

    def _keep_unstaged(self, of: OpenFile, exc: Exception) -> None:
        """Staging failed on the last close (a full disk, the store down): the local
        copy stays the file's content in the mount, its inode pinned so the name keeps
        showing it, and the next close, fsync or unmount stages it again; unlinking
        the name drops it (and frees its space)."""
        node = of.node
        of.node.pinned = True
        if errno_of(exc) in (errno.ENOSPC, errno.EDQUOT, errno.EIO) and not isinstance(
                exc, pyfuse3.FUSEError):
            log.warning("could not stage %s:%s on close (%s); its content stays in the mount "
                        "and is staged on the next close", node.tree.name, node.key, exc)
        else:
            log.exception("could not stage %s:%s on close; its content stays in the mount",
                          node.tree.name, node.key)

    async def _branch_deleted(self, node: Inode, exc: Exception) -> bool:
        """Whether staging failed because the file's branch was deleted meanwhile."""
        if not isinstance(exc, NotFoundError) or node.tree.kind != "branch":
            return False
        try:
            return not await self.run(self.repo.branch_exists, node.tree.name)
        except GravfsError:
            return False  # cannot tell: keep the content in the mount

    def _drop_unstaged(self, node: Inode) -> None:
        """The name of a file whose staging failed is gone: forget its local copy."""
        of = self.open_files.get(node.ino)
        if of is not None and of.handles <= 0 and not of.lock.locked():
            # (locked: a last release is staging it; it drops the copy when done)
            del self.open_files[node.ino]
            of.close()
        node.pinned = False

    def _staged(self, of: OpenFile, entry: EntryInfo) -> None:
        node = of.node
        node.pinned = False
        of.entry = entry
        of.dirty = False
        of.provisional = False
        self._remember_entry(node, entry)
        for h in self.files.values():
            if h.node is node:
                h.entry = entry  # later reads of read-only handles see what was written
        log.debug("staged %s:%s (%d bytes)", node.tree.name, node.key, entry.size)

    @guarded
    async def flush(self, fh):
        """close(2) of a descriptor: stage the file, unless the process that opened
        this handle still holds it (a forked child closed its inherited copy)."""
        h = self.files.get(fh)
        if h is None or h.openfile is None:
            return
        of = h.openfile
        if (of.dirty or of.provisional) and self._closed_by_copy(h):
            log.debug("flush of %s:%s by a copy of the descriptor; pid %d still has it "
                      "open: not staged", h.node.tree.name, h.node.key, h.opener)
            return
        await self._stage(of)

    def _closed_by_copy(self, h: FileHandle) -> bool:
        """Whether this flush is not the opener's close: the opener still holds the
        file and no other handle is open on it (with two handles open, a descriptor
        of the opener may be the other one's)."""
        node = h.node
        if h.opener is None or node.opens != 1 or not node.linked or not self.mount_root:
            return False
        if self.settings.branch:
            path = self.mount_root + b"/" + node.key
        else:
            path = b"%s/branches/%s/%s" % (self.mount_root, node.tree.name.encode(), node.key)
        return holders.holds(h.opener, path)

    @guarded
    async def fsync(self, fh, datasync):
        h = self.files.get(fh)
        if h is not None and h.openfile is not None:
            of = h.openfile
            await self._stage(of, durable=True)
            await self.run(self._make_durable, of.entry)

    def _make_durable(self, entry: Optional[EntryInfo]) -> None:
        """fsync: a content staged by an earlier close may still be a pending upload,
        and the daemon's staging commits are not synced (sync=False)."""
        if entry is not None and entry.address:
            self.data.sync_pending(entry.address)
        self.repo.staging.sync()

    @guarded
    async def release(self, fh):
        h = self.files.pop(fh, None)
        if h is None:
            return
        node = h.node
        node.opens -= 1
        h.read_state.close()
        of = h.openfile
        try:
            if h.did_read and self.settings.atime != "noatime":
                await self._read_atime(node)
            if of is not None:
                of.handles -= 1
                if of.handles <= 0:
                    try:
                        await self._stage(of)
                    except Exception as exc:
                        if node.linked and not await self._branch_deleted(node, exc):
                            self._keep_unstaged(of, exc)
                            raise
                        if node.linked:  # no name in the mount can show it any more
                            where = await self.run(self._rescue, of)
                            if where == of.path:  # not moved (logged): closing would delete it
                                self._keep_unstaged(of, exc)
                                raise
                            log.warning("%s:%s was closed after its branch was deleted; its "
                                        "content is saved as %s", node.tree.name,
                                        os.fsdecode(node.key), where)
                        else:  # unlinked while its upload ran: nothing is left to keep
                            log.debug("dropped %s:%s, unlinked while staging (%s)",
                                      node.tree.name, node.key, exc)
                    if of.handles <= 0 and self.open_files.get(node.ino) is of:
                        del self.open_files[node.ino]
                        if of.materialized:
                            await self.run(of.close)
                        else:
                            of.close()  # nothing local left (written back): no thread hop
        finally:
            self.inodes.maybe_drop(node)

    async def _read_atime(self, node: Inode) -> None:
        """A handle that read content was released: the atime mount option says whether
        the entry's atime moves (relatime: when not newer than mtime/ctime or older than
        a day, as Linux's; strictatime: always). Only branch trees keep it."""
        tree = node.tree
        if tree is None or not tree.writable or not node.linked or node.kind != "file":
            return
        known, e = self._recent_entry(node)
        if not known or e is None:
            e = await self._entry_of(node)
        if e is None:
            return
        now = time.time_ns()
        atime = shown_atime(e)
        if self.settings.atime == "relatime" and atime > max(e.mtime_ns, e.ctime_ns) and \
                now - atime < 86400 * 10**9:
            return
        try:
            await self._change_meta(node, tree, lambda x: replace(x, atime_ns=now))
        except pyfuse3.FUSEError:
            return  # gone meanwhile
        try:  # the kernel's cached attributes still show the old atime
            await self.run(pyfuse3.invalidate_inode, node.ino, True)
        except OSError:
            pass

    # -- attributes -----------------------------------------------------------------------

    @guarded
    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self._node(inode)
        if node.tree is None or node.tree.immutable:
            raise fail(errno.EROFS)
        await self._settle_for(node)  # (an open file keeps the change until its close: cp -p)
        tree = self._writable_tree(node)
        if node.key == b"":
            return self._attrs(node, None)  # a branch root has no entry to keep metadata in
        if fields.update_size:
            if node.kind != "file":
                raise fail(errno.EISDIR if node.kind == "dir" else errno.EINVAL)
            await self._truncate(node, attr.st_size, ctx is not None and ctx.uid != 0)
        now = time.time_ns()

        def change(e: EntryInfo) -> EntryInfo:
            mode = e.mode
            if fields.update_mode:
                mode = statmod.S_IFMT(e.mode) | (attr.st_mode & 0o7777)
            if (fields.update_uid or fields.update_gid) and node.kind != "dir":
                mode = clear_suid(mode)  # chown clears setuid/setgid (kill-priv is ours)
            e = replace(e, mode=mode, ctime_ns=now)  # every attribute change is a ctime
            if fields.update_uid:
                e = replace(e, uid=attr.st_uid)
            if fields.update_gid:
                e = replace(e, gid=attr.st_gid)
            if fields.update_mtime:
                e = replace(e, mtime_ns=attr.st_mtime_ns)
            if fields.update_atime:
                e = replace(e, atime_ns=attr.st_atime_ns)
            return e

        if (fields.update_mode or fields.update_uid or fields.update_gid or fields.update_mtime
                or fields.update_atime or fields.update_ctime):
            await self._change_meta(node, tree, change)
        return await self._getattr_node(node)

    async def _truncate(self, node: Inode, size: int, kill_suid: bool = False) -> None:
        of = self.open_files.get(node.ino)
        temporary = of is None
        if temporary:
            entry = await self._entry_of(node)
            if node.superseded:  # (by that look: its name holds other content now)
                raise fail(errno.ESTALE)
            of = self._openfile(node, entry)
        try:
            async with of.lock:
                await self.run(of.truncate, self.data, size)
                of.dirty = True
                of.modified(time.time_ns(), kill_suid)
            if of.handles <= 0:
                await self._stage(of)
        finally:
            if temporary and of.handles <= 0 and self.open_files.get(node.ino) is of:
                del self.open_files[node.ino]
                await self.run(of.close)

    async def _change_meta(self, node: Inode, tree: Tree, change) -> None:
        """Apply ``change`` to the entry's metadata and stage it (or keep it for the close)."""
        of = self.open_files.get(node.ino)
        if of is not None:
            async with of.lock:
                e = change(of.meta_entry())
                of.mode, of.mtime_ns, of.uid, of.gid = e.mode, e.mtime_ns, e.uid, e.gid
                of.atime_ns, of.ctime_ns = shown_atime(e), e.ctime_ns
                of.xattrs = dict(e.xattrs)
                if of.dirty or of.provisional:
                    return  # staged with the content on close
                async with self._ns(tree):
                    if node.linked:
                        e = await self._write(tree, self._changes(of, ()), self._stage_names,
                                              tree, node.key, e)
                of.entry = e
                self._remember_entry(node, e)
            return
        async with self._ns(tree):
            if not node.linked:  # removed while open for reading (fchmod): its name may
                seen = self.inodes.remembered(node)  # be another file's; fstat shows it
                if seen is None or seen[0] is None:
                    raise fail(errno.ENOENT)
                self._remember_entry(node, change(seen[0]))
                return
            n = await self._stat(tree, node.key)
            if n is None or n.kind != node.kind:
                raise fail(errno.ENOENT)
            if n.kind == "dir":
                e = change(n.entry or self._now_dir_entry(0o755))
                key = node.key + b"/"
                await self._write(tree, [(key, True)], self.repo.stage, tree.name, [(key, e)])
            else:
                e = change(n.entry)
                e = await self._write(tree, None if e.link_group else [(node.key, True)],
                                      self._stage_names, tree, node.key, e)
        self._remember_entry(node, e)

    def _stage_names(self, tree: Tree, key: bytes, entry: EntryInfo,
                     also: list = ()) -> EntryInfo:
        """Stage an inode's entry at key, or at every name of its link group (their
        current list, read here: names may have come and gone since the file was
        opened), with the items ``also``, in one transaction. Returns the entry staged."""
        if entry.link_group:
            n = self._stat_or_none(tree, key)
            if n is not None and n.entry is not None and n.entry.link_group == entry.link_group:
                entry = replace(entry, links=n.entry.links)
            items = [(k, entry) for k in entry.links] or [(key, entry)]
        else:
            items = [(key, entry)]
        self.repo.stage(tree.name, items + list(also))
        return entry

    # -- names: unlink / rename / symlink / link ---------------------------------------------

    @guarded
    @settled
    async def unlink(self, parent_inode, name, ctx):
        parent = self._node(parent_inode)
        tree = self._writable_tree(parent)
        key = self._child_key(parent, name)
        async with self._ns(tree):
            n = await self._write(tree, [(key, False), (parent.key + b"/", True)],
                                  self._unlink_blocking, tree, parent.key, key)
            if n.entry is not None and n.entry.link_group:
                self.statcache.drop(tree.name)  # its other names changed too
            node = self.inodes.find(tree, key, n.kind)
            if node is not None:
                if n.entry is not None and n.entry.link_group and len(n.entry.links) > 1:
                    # a hard link: the inode lives on under its other names
                    self.inodes.unlink_name(node, key)
                    self._relinked(node, group_items(n.entry, {key: None}, time.time_ns()))
                else:
                    self._drop_unstaged(node)
                    self.inodes.unlink(node)
        log.debug("unlink %s:%s", tree.name, key)

    def _relinked(self, node: Inode, items: list) -> None:
        """The names of a hard-linked inode changed (items: what was staged at each):
        its remembered entry and its open copy follow (a close restages every name)."""
        if not items:
            return
        e = items[0][1]
        if node.linked and node.key not in {k for k, _ in items}:
            node.key = items[0][0]  # (its name went outside the mount)
        self._remember_entry(node, e)
        of = self.open_files.get(node.ino)
        if of is not None:
            of.link_group, of.links, of.ctime_ns = e.link_group, e.links, e.ctime_ns

    @guarded
    @settled
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags & ~pyfuse3.RENAME_NOREPLACE:  # RENAME_EXCHANGE, RENAME_WHITEOUT: not
            raise fail(errno.EINVAL)           # supported (a whiteout was a plain rename)
        po, pn = self._node(parent_inode_old), self._node(parent_inode_new)
        if po.tree is None or pn.tree is None:
            raise fail(errno.EPERM if po.virtual == "branches" or pn.virtual == "branches"
                       else errno.EROFS)
        if po.tree is not pn.tree:
            raise fail(errno.EXDEV)
        tree = self._writable_tree(po)
        src = self._child_key(po, name_old)
        dst = self._child_key(pn, name_new)
        under = src + b"/"
        provisional = frozenset(  # created and not closed: they stay provisional
            of.node.key for of in self.open_files.values()
            if of.provisional and of.node is not None and of.node.tree is tree
            and (of.node.key == src or of.node.key.startswith(under)))
        async with self._ns(tree):
            d = await self._write(tree, None, self._rename_blocking, tree, po.key, src, dst, flags,
                                  provisional)
            if d is False:
                return  # renamed onto itself
            if d is not None:
                victim = self.inodes.find(tree, dst, d.kind)
                if victim is not None:
                    self.inodes.unlink_name(victim, dst)
            self.inodes.rekey(tree, src, dst, pn.ino, name_new)
        log.debug("rename %s:%s -> %s", tree.name, src, dst)

    def _rename_blocking(self, tree: Tree, src_parent: bytes, src: bytes, dst: bytes,
                         flags: int, provisional: frozenset = frozenset()):
        """Check and stage a rename; returns the replaced node (None, or False for a no-op).
        ``provisional``: keys at or under src of files created and not closed yet."""
        s = self._stat_or_none(tree, src)
        if s is None:
            raise fail(errno.ENOENT)
        d = self._stat_or_none(tree, dst)
        if s.kind == "dir" and (dst == src or dst.startswith(src + b"/")):
            raise fail(errno.EINVAL)
        if d is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise fail(errno.EEXIST)
            if src == dst or (s.entry is not None and d.entry is not None
                              and s.entry.link_group
                              and s.entry.link_group == d.entry.link_group):
                return False  # two names of one inode: POSIX says do nothing
            if s.kind == "dir":
                if d.kind != "dir":
                    raise fail(errno.ENOTDIR)
                if self.repo.list_dir(tree.ref, dst, None, 1):
                    raise fail(errno.ENOTEMPTY)
            elif d.kind == "dir":
                raise fail(errno.EISDIR)
        now = time.time_ns()
        dst_parent = dst.rpartition(b"/")[0]
        # both directories' mtime and ctime (an implied source directory gets a marker)
        touched = self._parent_items(tree, src_parent, now)
        if dst_parent != src_parent and not dst_parent.startswith(src + b"/"):
            touched += self._parent_items(tree, dst_parent, now)
        self.repo.rename(tree.name, src, dst, provisional=provisional, ctime_ns=now,
                         also=touched)
        return d

    @guarded
    @settled
    async def symlink(self, parent_inode, name, target, ctx):
        parent = self._node(parent_inode)
        tree = self._writable_tree(parent)
        key = self._child_key(parent, name)
        try:
            text = target.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL)
        now = time.time_ns()
        entry = EntryInfo(address="", size=len(target), mtime_ns=now,
                          mode=statmod.S_IFLNK | 0o777, kind=KIND_SYMLINK, symlink_target=text,
                          uid=ctx.uid, gid=ctx.gid, atime_ns=now, ctime_ns=now)
        entry = _inherit(await self._parent_entry(parent), entry)
        return await self._make_node(parent, tree, key, name, entry)

    async def _make_node(self, parent: Inode, tree: Tree, key: bytes, name: bytes,
                         entry: EntryInfo) -> pyfuse3.EntryAttributes:
        """Stage a new symlink or special file and answer with its attributes."""
        async with self._ns(tree):
            await self._write(tree, [(key, True), (parent.key + b"/", True)],
                              self._create_blocking, tree, key, key, entry, None, parent.key)
        node = self.inodes.ensure(tree, key, KIND_NAMES[entry.kind], parent.ino, name)
        self._remember_entry(node, entry)
        node.lookups += 1
        log.debug("%s %s:%s", KIND_NAMES[entry.kind], tree.name, key)
        return self._attrs(node, entry)

    @guarded
    @settled
    async def readlink(self, inode, ctx):
        node = self._node(inode)
        if node.kind != "symlink":
            raise fail(errno.EINVAL)
        entry = await self._entry_of(node)
        return entry.symlink_target.encode("utf-8", "surrogateescape")

    @guarded
    @settled
    async def link(self, inode, new_parent_inode, new_name, ctx):
        """A hard link inside one branch (see gravfs.fs.repository.Repository.link):
        the new name shares the inode. Across trees EXDEV; into read-only trees EROFS."""
        node, parent = self._node(inode), self._node(new_parent_inode)
        if parent.tree is None or not parent.tree.writable or node.tree is None:
            raise fail(errno.EROFS if parent.tree is None or not parent.tree.writable
                       or node.tree is None else errno.EXDEV)
        if node.tree is not parent.tree:
            raise fail(errno.EXDEV)
        tree = self._writable_tree(parent)
        if node.kind == "dir":
            raise fail(errno.EPERM)
        if node.key == b"" or not node.linked:
            raise fail(errno.ESTALE if node.superseded else errno.ENOENT)
        key = self._child_key(parent, new_name)
        of = self.open_files.get(node.ino)
        if of is not None and of.provisional:
            await self._stage(of)  # the new name gets the file's entry, not a provisional one
        async with self._ns(tree):
            entry = await self._write(tree, None, self._link_blocking, tree, node.key, key,
                                      parent.key)
            self.inodes.add_name(node, key, entry.link_group)
            self._relinked(node, [(k, entry) for k in entry.links])
        node.lookups += 1
        log.debug("link %s:%s -> %s", tree.name, node.key, key)
        return self._attrs(node, entry)

    def _link_blocking(self, tree: Tree, src: bytes, dst: bytes, parent_key: bytes) -> EntryInfo:
        if self._stat_or_none(tree, dst) is not None:
            raise fail(errno.EEXIST)
        if self._stat_or_none(tree, src) is None:
            raise fail(errno.ENOENT)
        now = time.time_ns()
        return self.repo.link(tree.name, src, dst, now,
                              also=self._parent_items(tree, parent_key, now))

    @guarded
    @settled
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        """Regular files (mknod S_IFREG) are created empty; fifos, sockets and device
        nodes are entries of their own kind (with rdev), kept by commits like files."""
        if statmod.S_ISREG(mode) or statmod.S_IFMT(mode) == 0:
            fi, attrs = await self.create(parent_inode, name, mode, os.O_WRONLY, ctx)
            await self.release(fi.fh)
            return attrs
        kind = kind_of_mode(mode)
        if kind not in SPECIAL_KINDS:
            raise fail(errno.EINVAL)
        parent = self._node(parent_inode)
        tree = self._writable_tree(parent)
        key = self._child_key(parent, name)
        now = time.time_ns()
        entry = EntryInfo(address="", size=0, mtime_ns=now, atime_ns=now, ctime_ns=now,
                          mode=statmod.S_IFMT(mode) | (mode & 0o7777), kind=kind,
                          rdev=rdev if kind in (KIND_CHAR_DEVICE, KIND_BLOCK_DEVICE) else 0,
                          uid=ctx.uid, gid=ctx.gid)
        entry = _inherit(await self._parent_entry(parent), entry)
        return await self._make_node(parent, tree, key, name, entry)

    # -- extended attributes ----------------------------------------------------------------

    @staticmethod
    def _xattr_name(name: bytes) -> str:
        """The stored name of an attribute to set or remove (ENOTSUP: not kept)."""
        if (not name.startswith(XATTR_NAMESPACES) or _unsupported_xattr(name)
                or name in NEVER_SET_XATTRS):
            raise fail(errno.ENOTSUP)
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL)

    async def _xattrs_of(self, node: Inode) -> dict:
        """The inode's extended attributes (its own mapping: callers only read it)."""
        of = self.open_files.get(node.ino)
        if of is not None:
            return of.xattrs
        entry = await self._entry_of(node)
        return entry.xattrs if entry is not None else {}

    @guarded
    async def getxattr(self, inode, name, ctx):
        node = self._node(inode)
        if _unsupported_xattr(name):
            raise fail(errno.EOPNOTSUPP)
        if name in NEVER_SET_XATTRS:
            raise fail(pyfuse3.ENOATTR)
        if name == PID_XATTR and inode == ROOT:
            return str(os.getpid()).encode()
        if name == EXIT_REPORT_XATTR and inode == ROOT and self.exit_report:
            return os.fsencode(self.exit_report)
        if name == INODES_XATTR and inode == ROOT:
            counts = {**self.inodes.counts(), "forgets_pending": self.forgets.pending}
            return json.dumps(counts, sort_keys=True).encode()
        if name == MEMORY_XATTR and inode == ROOT:
            if self.forgets.settle():  # what the kernel forgot counts as given back
                self.let_go()
            return json.dumps(self._memory(), sort_keys=True).encode()
        if name == COMMIT_XATTR and node.tree is not None and node.key == b"":
            if node.tree.kind == "branch":
                return (await self.run(self.repo.head, node.tree.name, True)).encode()
            return node.tree.commit.id.encode()
        if node.tree is None or node.key == b"":
            raise fail(pyfuse3.ENOATTR)
        await self._settle_for(node)
        value = (await self._xattrs_of(node)).get(name.decode("utf-8", "surrogateescape"))
        if value is None:
            raise fail(pyfuse3.ENOATTR)
        return bytes(value)

    def _memory(self) -> dict:
        """Resident memory (all, and anonymous: without the mapped SSTable pages the
        kernel can drop), and what of it the bounded caches hold: the rest grows with
        the inodes the kernel knows (what an operator watching a traversal asks)."""
        mem = resident()
        return {"rss_bytes": mem["rss"], "rss_anon_bytes": mem["anon"],
                "inodes": len(self.inodes),
                "block_cache_bytes": DEFAULT_CACHE.used_bytes,
                "block_cache_capacity": DEFAULT_CACHE.capacity_bytes,
                "read_cache_bytes": self.reader.cached_bytes,
                # live Python objects' blocks: tells freed-but-kept memory from objects alive
                "python_blocks": sys.getallocatedblocks()}

    @guarded
    @settled
    async def listxattr(self, inode, ctx):
        node = self._node(inode)
        if node.tree is None or node.key == b"":
            return []
        names = [k.encode() for k in sorted(await self._xattrs_of(node))]
        return [n for n in names if not _unsupported_xattr(n)]  # (older versions kept labels)

    @guarded
    @settled
    async def setxattr(self, inode, name, value, ctx):
        node = self._node(inode)
        tree = self._writable_tree(node)
        if node.key == b"":
            raise fail(errno.ENOTSUP)
        key = self._xattr_name(name)

        def change(e: EntryInfo) -> EntryInfo:
            xattrs = {**e.xattrs, key: bytes(value)}
            names = sum(len(k.encode()) + 1 for k in xattrs)
            if names > XATTR_LIST_MAX or names + sum(map(len, xattrs.values())) > \
                    XATTRS_MAX_BYTES:
                raise fail(errno.ENOSPC)
            return replace(e, xattrs=xattrs)

        await self._change_meta(node, tree, change)

    @guarded
    @settled
    async def removexattr(self, inode, name, ctx):
        node = self._node(inode)
        tree = self._writable_tree(node)
        if node.key == b"":
            raise fail(pyfuse3.ENOATTR)
        key = self._xattr_name(name)
        if key not in await self._xattrs_of(node):
            raise fail(pyfuse3.ENOATTR)

        def change(e: EntryInfo) -> EntryInfo:
            return replace(e, xattrs={k: v for k, v in e.xattrs.items() if k != key})

        await self._change_meta(node, tree, change)

    # -- file system ----------------------------------------------------------------------

    @guarded
    async def statfs(self, ctx):
        st = await self.run(os.statvfs, self.repo.workspace.root)
        s = pyfuse3.StatvfsData()
        s.f_bsize = st.f_bsize
        s.f_frsize = st.f_frsize
        s.f_blocks = st.f_blocks
        s.f_bfree = st.f_bfree
        s.f_bavail = st.f_bavail
        s.f_files = st.f_files
        s.f_ffree = st.f_ffree
        s.f_favail = st.f_favail
        s.f_namemax = MAX_NAME_BYTES
        return s

    @guarded
    @settled
    async def access(self, inode, mode, ctx):
        node = self._node(inode)
        if mode & os.W_OK and (node.tree is None or not node.tree.writable):
            return node.virtual == "branches" and not self.settings.read_only
        return True


def _drop_locals(exc: BaseException) -> None:
    """Free what the frames an exception came through still hold: trio hands a worker
    thread's exception back inside a reference cycle, so its frames, and an LMDB read
    transaction open in one of them (which keeps its reader slot until the object is
    freed, even after the ``with`` block aborted it), would otherwise live until the
    next collector pass: a burst of 256 failed lookups on commit paths filled the
    staging database's reader table and the next ones answered EIO. The tracebacks
    keep their lines for the log."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def _group(n: Node) -> str:
    """The link group of a looked-up node ("" unless hard-linked)."""
    return n.entry.link_group if n.entry is not None else ""


def _touched(e: EntryInfo, now_ns: int) -> EntryInfo:
    """A directory's entry after a name came or went in it."""
    return replace(e, mtime_ns=now_ns, ctime_ns=now_ns)


def _inherit(parent: Optional[EntryInfo], entry: EntryInfo) -> EntryInfo:
    """Linux's setgid directories: a new name in one takes the directory's group, and a
    new directory keeps the setgid bit."""
    if parent is None or not parent.mode & statmod.S_ISGID:
        return entry
    mode = entry.mode | statmod.S_ISGID if entry.kind == KIND_DIRECTORY else entry.mode
    return replace(entry, gid=parent.gid, mode=mode)
