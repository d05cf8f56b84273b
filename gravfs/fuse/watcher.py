"""Keeping the kernel's caches honest when branches change behind the mount.

A commit, merge or reset run from the CLI (or another host) moves a branch
head or swaps its staging tokens without a single FUSE request. Every
``poll`` seconds the watcher reads, for each branch the kernel knows
about, the head (fresh from the store) and the branch's LMDB staging state;
when either moved it invalidates every inode and directory entry of that tree
in the kernel, so the next access re-reads through the repository. Branches
that disappeared lose their ``branches/<name>`` entry the same way. A head also
counts as moved when any read of the daemon's found it apart from the read before
(``take_moved_heads``): a commit made after the kernel learned a branch but before
the watcher's first look at it moves nothing between two looks.

Staging writes by other processes on the workspace (``gravfs put``, ``rm``,
an import) keep the head and the staging token: the watcher sees them as LMDB
write transactions that this daemon did not commit (``OwnWrites``) and then
invalidates every branch tree. That is what lets branch trees use attribute
timeouts longer than the poll interval.

Names whose inode the daemon superseded (another process replaced the file
while the kernel held it: gravfs.fuse.inodes) lose their kernel entries at the
next round too.

Invalidation runs in its own thread: pyfuse3's notify calls block while a
related request is in flight.
"""

from __future__ import annotations

import errno
import logging
from typing import Optional

import pyfuse3
import trio

from gravfs.errors import CorruptDataError, GravfsError, NotFoundError

log = logging.getLogger(__name__)


#: A signature's head when the branch's head object holds no commit id (its reason next)
DAMAGED = "damaged"
_UNSEEN = object()  # a branch's look before its first


def branch_signature(repo, branch: str):
    """What changes when a branch's visible content may have changed underneath us."""
    try:
        head = repo.head(branch, fresh=True)
    except NotFoundError:
        return None
    except CorruptDataError as exc:  # this branch only: the others are still watched
        return (DAMAGED, str(exc), (), None)
    st = repo.staging.stored_state(branch)
    if st is None:  # nothing staged yet: no token to watch
        return (head, None, (), None)
    return (head, st.staging, tuple(st.sealed), (st.compacted or {}).get("metarange"))


class Watcher:
    def __init__(self, ops):
        self.ops = ops
        self.seen: dict[str, object] = {}
        self.limiter = trio.CapacityLimiter(1)
        self.rounds = 0
        # Staging transactions checked up to here. Taken before the mount serves a
        # request: a write by another process before the first poll is foreign too.
        self.txnid: Optional[int] = ops.repo.staging.change_counter()
        self.foreign_rounds = 0

    async def run(self) -> None:
        interval = self.ops.settings.poll
        failing = None
        while True:
            await trio.sleep(interval)
            try:
                read = await self.poll()
            except GravfsError as exc:  # e.g. the store is unreachable: say so once
                if str(exc) != failing:
                    log.warning("cannot poll branch heads: %s", exc)
                failing = str(exc)
                continue
            except Exception:
                log.exception("watcher round failed")
                continue
            if failing is not None and read:  # (a round that read no head proves nothing)
                log.warning("polling branch heads works again")
                failing = None

    async def poll(self) -> int:
        """One look at every branch the kernel knows; returns how many heads it read."""
        ops = self.ops
        self.rounds += 1
        if ops.deferred:  # creates still open since the last poll: other processes see them
            await ops.settle()
        if ops.superseded_names:  # a dentry may still lead there to the old inode
            names, ops.superseded_names = ops.superseded_names, []
            await trio.to_thread.run_sync(_invalidate_names, names, limiter=self.limiter)
        branches = [t for t in list(ops.trees.values())
                    if t.kind == "branch" and ops.inodes.knows_tree(t.ident)]
        names = [t.name for t in branches]

        def look():
            txnid = ops.repo.staging.change_counter()  # before the signatures
            sigs = [branch_signature(ops.repo, n) for n in names]
            return txnid, sigs, ops.repo.take_moved_heads()  # (their reads count too)

        txnid, sigs, moved = await ops.run(look)
        foreign = self.txnid is not None and ops.own.foreign_since(self.txnid, txnid)
        self.txnid = txnid
        if foreign:
            self.foreign_rounds += 1
        for tree, sig in zip(branches, sigs):
            old = self.seen.get(tree.name, _UNSEEN)
            self.seen[tree.name] = sig
            # deleted, also before this branch's first look: the kernel knew it, so it was
            gone = sig is None and old is not None
            if old is _UNSEEN:
                old = None
            if foreign and sig is not None:
                log.info("staging of this workspace changed outside the mount; invalidating "
                         "%d cached inodes of branch %s", len(ops.inodes.tree_inodes(tree.ident)),
                         tree.name)
                await self.invalidate_tree(tree)
                continue
            # (moved: a read of the daemon's found the head moved, also before this
            # branch's first look, which takes the head it reads as the one served)
            if not gone and not _moved(old, sig) and tree.name not in moved:
                continue
            if sig is not None and sig[0] == DAMAGED:
                log.error("%s; invalidating %d cached inodes of branch %s (they answer EIO)",
                          sig[1], len(ops.inodes.tree_inodes(tree.ident)), tree.name)
            else:
                log.info("branch %s changed outside the mount (head %s); invalidating %d "
                         "cached inodes", tree.name, (sig[0][:12] if sig else "deleted"),
                         len(ops.inodes.tree_inodes(tree.ident)))
            await self.invalidate_tree(tree)
            if gone:  # what this host staged there is saved, then dropped
                await ops.run(ops.repo.drop_deleted_branch, tree.name)
        for name in list(self.seen):
            if name not in names:
                del self.seen[name]
        return len(names)

    async def invalidate_tree(self, tree) -> None:
        nodes = self.ops.inodes.tree_inodes(tree.ident)
        for n in nodes:
            self.ops.inodes.outdate(n)  # remembered entries are no longer current
        targets = [(n.ino, self.ops.inodes.parent_of(n), n.name, n.key) for n in nodes]
        await trio.to_thread.run_sync(_invalidate, targets, limiter=self.limiter)


def _moved(old, new) -> bool:
    """Did the branch change in a way our own writes never cause?"""
    if old is None or old == new:
        return False
    if new is None:
        return True
    if old[0] == new[0] and old[1] is None and not old[2]:
        return False  # the first staged write created the branch's staging record
    return True


def _invalidate(targets) -> None:
    for ino, _parent, _name, _key in targets:
        _quietly(pyfuse3.invalidate_inode, ino, False)
    _invalidate_names([(parent, name) for _ino, parent, name, _key in targets if name])


def _invalidate_names(names) -> None:
    for parent, name in names:
        _quietly(pyfuse3.invalidate_entry, parent, name)


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF):
            log.debug("%s%r: %s", fn.__name__, args, exc)
