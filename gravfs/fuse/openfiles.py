"""Local write-back copies of branch files, and open-file handles.

A branch file that is written, truncated or created gets one ``OpenFile``
shared by every handle on its inode: a sparse local file in the mount's
private files directory (inside the workspace). Existing content is copied in
lazily, on the first write or truncate (copy-on-write), so opening a large
committed file read-write costs nothing until it is modified; holes are not
copied (the local copy stays sparse, see gravfs.data.sparse). Whenever the
kernel flushes (a close, unless the opener still holds the file: see
gravfs.fuse.holders), fsyncs or releases a modified file, its content goes
to the store (content-addressed, deduplicated; by write-back: moved into
pending uploads and uploaded in the background, a big file only on its last
close, see OpenFile.upload) and the new entry
is staged in LMDB at the inode's *current* path (renames move open files along).
A file the mount creates is staged as a provisional entry (visible, never
committed) until its first close or fsync: in that close's transaction when no
other request comes between, else before that request (see
GravfsOperations.settle) or at the watcher's next poll.

Blocking methods are called from worker threads; ``lock`` (a trio lock) is
taken by the caller so that content never changes while it is hashed.
"""

from __future__ import annotations

import logging
import os
import stat as statmod
import time
from contextlib import closing
from dataclasses import replace
from typing import Optional

import trio

from gravfs.data.contentpass import FollowingPass
from gravfs.data.external import is_external, reader_for, source_of
from gravfs.data.objects import DataObjects, hash_file, plan_storage
from gravfs.data.reader import ReadState, data_missing
from gravfs.data.sparse import SparseHandle, is_zero
from gravfs.cleanup import unlink_quiet
from gravfs.errors import NotFoundError
from gravfs.fs.entry import KIND_FILE, EntryInfo, shown_atime
from gravfs.fuse.inodes import Inode
from gravfs.fuse.localfiles import LocalFiles
from gravfs.fuse.locks import QuickLock

log = logging.getLogger(__name__)

COPY_CHUNK = 1 << 20
# Files up to this size are always written back (uploaded in the background), and
# hashed and moved on the event loop (see GravfsOperations._stage); bigger ones are
# written back on their last close only (see OpenFile.upload).
WRITEBACK_MAX = 4 << 20
# A file written in order past this size gets its content pass made as it is written
# (gravfs.data.contentpass): a bigger file's close stores it, which hashes it first.
FOLLOW_FROM = WRITEBACK_MAX


class OpenFile:
    def __init__(self, node: Optional[Inode], entry: Optional[EntryInfo], local: LocalFiles):
        self.node = node  # set by the caller when created before its inode
        self.entry = entry  # content last staged (or read) for this file; None when new
        self.local = local
        self.path = ""  # the local copy's file, from materialize until it moves or goes
        self.fd = -1
        self.moving_size: Optional[int] = None  # size while the local copy moves to pending
        self.dirty = False
        # created by the mount and never staged since: its staged entry is provisional
        # (not committed), so its first close stages it even without writes
        self.provisional = False
        # a create whose staging waits for the file's first close: (entry, the parent's
        # marker items), see GravfsOperations.create
        self.deferred: Optional[tuple] = None
        self.handles = 0
        self.lock = QuickLock()
        # bytes written in order from the start of an empty local copy (-1: not so), and
        # the content pass following them once past FOLLOW_FROM
        self.in_order = -1
        self.following: Optional[FollowingPass] = None
        base = entry or EntryInfo(kind=KIND_FILE)
        self.mode = base.mode
        self.mtime_ns = base.mtime_ns if entry is not None else time.time_ns()
        self.atime_ns = shown_atime(base) if entry is not None else self.mtime_ns
        self.ctime_ns = base.ctime_ns or self.mtime_ns
        self.uid, self.gid = base.uid, base.gid
        self.xattrs = dict(base.xattrs)
        # hard links: kept here, not only in entry (a truncate to 0 drops the entry)
        self.link_group, self.links = base.link_group, base.links

    # -- content ------------------------------------------------------------------

    @property
    def materialized(self) -> bool:
        return self.fd >= 0

    def size(self) -> int:
        fd = self.fd  # read once: an upload in a worker thread may hand it over meanwhile
        if fd >= 0:
            return os.fstat(fd).st_size
        if self.moving_size is not None:
            return self.moving_size
        return self.entry.size if self.entry else 0

    def materialize(self, data: DataObjects, limit: Optional[int] = None) -> None:
        """Create the local copy, with at most ``limit`` bytes of the old content.
        Holes stay holes: only a sparse file's extents are copied, and no chunk of
        zeros is written (the copy is sized first, so they read as zeros)."""
        if self.fd >= 0:
            return
        self.path, fd = self.local.create()
        try:
            e = self.entry
            want = e.size if e else 0
            if limit is not None:
                want = min(want, limit)
            if e is not None and is_external(e.address_type):  # by reference: copy the source
                copied = _copy_source(data, e, fd, want)
                log.debug("copied %d of %d bytes of %s for writing", copied, want, e.address)
            elif want > 0:
                os.ftruncate(fd, want)
                try:
                    h = data.acquire(e.address, chunk_checked=True)
                except NotFoundError as exc:
                    raise data_missing(e.address, exc) from None
                with h:
                    if isinstance(h, SparseHandle):
                        ranges = [(o, n) for o, n, _ in h.manifest.extents]
                    else:
                        ranges = [(0, want)]
                    copied = 0
                    for start, n in ranges:
                        off, end = start, min(start + n, want)
                        while off < end:
                            buf = h.read(off, min(COPY_CHUNK, end - off))
                            if not buf:
                                break
                            if not is_zero(buf):
                                os.pwrite(fd, buf, off)
                                copied += len(buf)
                            off += len(buf)
                log.debug("copied %d of %d bytes of %s for writing", copied, want, e.address)
        except BaseException:
            os.close(fd)
            unlink_quiet(self.path)
            raise
        self.fd = fd
        self.in_order = 0 if want == 0 else -1

    def pread(self, offset: int, length: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def pwrite(self, data: bytes, offset: Optional[int]) -> int:
        if offset is None:  # O_APPEND: the end of the file, whatever the kernel thinks
            offset = os.fstat(self.fd).st_size
        n = os.pwrite(self.fd, data, offset)
        if self.in_order >= 0:
            if offset == self.in_order:
                self._wrote_in_order(offset + n)
            else:
                self._out_of_order()
        return n

    def _wrote_in_order(self, end: int) -> None:
        self.in_order = end
        if self.following is None and end > FOLLOW_FROM:
            self.following = FollowingPass(self.fd, self.path)
        if self.following is not None:
            self.following.advance(end)

    def _out_of_order(self) -> None:
        self.in_order = -1
        if self.following is not None:
            self.following.abandon()
            self.following = None

    def truncate(self, data: DataObjects, size: int) -> None:
        if self.fd < 0:
            if size == 0:
                self.entry = None  # nothing of the old content is needed
            self.materialize(data, limit=size)
        os.ftruncate(self.fd, size)
        if size != self.in_order:
            self._out_of_order()
            if size == 0:  # empty again: in order from its start
                self.in_order = 0

    # -- entries --------------------------------------------------------------------

    def meta_entry(self, base: Optional[EntryInfo] = None) -> EntryInfo:
        """The entry with this file's metadata over ``base`` (default: the last content)."""
        b = base or self.entry or EntryInfo(kind=KIND_FILE)
        return replace(b, mode=statmod.S_IFREG | (self.mode & 0o7777), mtime_ns=self.mtime_ns,
                       uid=self.uid, gid=self.gid, xattrs=dict(self.xattrs), kind=KIND_FILE,
                       atime_ns=self.atime_ns, ctime_ns=self.ctime_ns,
                       link_group=self.link_group, links=self.links)

    def modified(self, now_ns: int, kill_suid: bool = False) -> None:
        """Content changed: mtime and ctime move. ``kill_suid`` (a writer without
        CAP_FSETID: not root): the setuid bit and a group-executable setgid bit are
        cleared, as Linux does (the mount handles kill-priv: FUSE_CAP_HANDLE_KILLPRIV)."""
        self.mtime_ns = self.ctime_ns = now_ns
        if kill_suid:
            self.mode = clear_suid(self.mode)

    def upload(self, data: DataObjects, durable: bool = False,
               size: Optional[int] = None) -> EntryInfo:
        """Store the local content (deduplicated) and return the entry to stage.

        Write-back: the local copy moves into the workspace's pending uploads (renamed,
        not copied) and is uploaded in the background; this copy is then gone (a later
        write copies the content back in). A small file always goes so. A big one goes
        so on its last handle's close, not on an fsync (``durable``) or a close while
        other (writable) handles stay open, whose next write would copy it all back:
        there it is stored here and the local copy stays, as does a big file stored
        sparse (its extents are separate objects). ``durable``: the pending file is
        fsync'd too. ``size``: the local copy's size, when the caller (holding the lock)
        has just read it.
        """
        if size is None:
            size = os.fstat(self.fd).st_size if self.fd >= 0 else WRITEBACK_MAX + 1
        if size <= WRITEBACK_MAX:
            hashed = hash_file(self.path, self.fd, size_hint=size)
        else:
            # (None unless every byte up to size was written in order and passed)
            passed = self.following.finish(size) if self.following is not None else None
            plan = plan_storage(self.fd, passed)
            if plan.holes or durable or self.handles > 1 or not data.writes_back:
                if not os.path.exists(self.path):
                    old, self.fd = self.fd, self._rename_local(self.fd)
                    os.close(old)
                address, size = data.put_path(self.path, plan=plan)
                return self.meta_entry(EntryInfo(address=address, size=size, kind=KIND_FILE))
            hashed = (plan.digest, plan.size)
            self._out_of_order()  # the copy it followed moves away
        # getattr on the trio thread reads fd and size without the lock: publish
        # the size, then give up the fd, and only then close it (never a stale fd)
        fd = self.fd
        self.moving_size = hashed[1]
        self.fd = -1  # (closed once moved: the content stays at hand until then)
        try:
            try:
                address, size = data.put_pending(self.path, durable=durable, hashed=hashed)
            except FileNotFoundError:
                if os.path.exists(self.path):
                    raise
                old, fd = fd, self._rename_local(fd)
                os.close(old)
                address, size = data.put_pending(self.path, durable=durable, hashed=hashed)
        except BaseException:
            self.fd, fd = fd, -1  # not moved: the descriptor stays the local copy
            self.moving_size = None
            raise
        finally:
            if fd >= 0:
                os.close(fd)
        self.path = ""  # moved into pending uploads (or a copy was pending)
        self.entry = self.meta_entry(EntryInfo(address=address, size=size, kind=KIND_FILE))
        self.moving_size = None
        return self.entry

    def _rename_local(self, fd: int) -> int:
        """The local copy's name was removed under the daemon (its directory deleted by
        hand or by a cleaner of old files) while its descriptor still holds the content:
        copy that to a new local file, which becomes the copy (its path; returns its
        descriptor). Before, the close failed (ENOENT) and the release then staged the
        content last staged: every byte written since was lost without a word."""
        path, new_fd = self.local.create_here()
        try:
            size, off = os.fstat(fd).st_size, 0
            os.ftruncate(new_fd, size)  # holes stay holes
            while off < size:
                buf = os.pread(fd, min(COPY_CHUNK, size - off), off)
                if not buf:
                    break
                if not is_zero(buf):
                    os.pwrite(new_fd, buf, off)
                off += len(buf)
        except BaseException:
            os.close(new_fd)
            unlink_quiet(path)
            raise
        log.warning("the local copy of %s (%d bytes) was removed from the mount's files "
                    "directory while the file was open; written again from its descriptor",
                    self.node.key.decode("utf-8", "replace") if self.node else "a file", size)
        self.path = path
        return new_fd

    def close(self) -> None:
        self._out_of_order()
        fd = self.fd
        if fd >= 0:
            self.fd = -1
            os.close(fd)
        if self.path:
            unlink_quiet(self.path)
            self.path = ""


def _copy_source(data: DataObjects, entry: EntryInfo, fd: int, want: int) -> int:
    """Copy the first ``want`` bytes of a by-reference entry's source into ``fd``
    (checked: a changed source fails the copy); the file is then an ordinary one."""
    src = source_of(entry)
    if want == 0:
        return 0
    copied = 0
    with closing(reader_for(data.store).iter(src)) as chunks:
        for buf in chunks:
            buf = buf[:want - copied]
            os.pwrite(fd, buf, copied)
            copied += len(buf)
            if copied >= want:
                break
    return copied


def clear_suid(mode: int) -> int:
    """mode without S_ISUID, and without S_ISGID when group-executable (Linux's rule:
    a setgid bit without group execute marks mandatory locking, and stays)."""
    mode &= ~statmod.S_ISUID
    if mode & statmod.S_IXGRP:
        mode &= ~statmod.S_ISGID
    return mode


class FileHandle:
    """One open() of a file: its flags, its read state, and its shared OpenFile."""

    def __init__(self, fh: int, node: Inode, entry: Optional[EntryInfo], flags: int,
                 openfile: Optional[OpenFile]):
        self.fh = fh
        self.node = node
        self.entry = entry  # snapshot for reads when there is no local copy
        acc = flags & os.O_ACCMODE
        self.writable = acc in (os.O_WRONLY, os.O_RDWR)
        self.append = bool(flags & os.O_APPEND)
        self.openfile = openfile
        self.opener: Optional[int] = None  # pid of the process that opened it
        self.opener_uid = 0  # its uid: a write by another than root clears setuid bits
        self.did_read = False  # it read content (atime, see the atime mount option)
        self.read_state = ReadState()
        self.read_address: Optional[str] = None


class DirHandle:
    """One opendir(): offsets handed to the kernel map to the name they follow."""

    def __init__(self, fh: int, node: Inode):
        self.fh = fh
        self.node = node
        self.offsets: dict[int, bytes] = {}
        self.next_offset = 1
        self.snapshot: Optional[list] = None  # virtual directories list once per open
        # the rest of a listed batch the kernel's last readdir had no room for:
        # (listed after, nodes, more follow, the namespace lock's stamp it is current at)
        self.pending: Optional[tuple] = None
        self.ahead: Optional[ListingAhead] = None  # the next batch, listed in the background


class ListingAhead:
    """A directory's next batch of names, listed on a worker thread while the kernel
    takes in the last reply (see GravfsOperations.readdir)."""

    def __init__(self, after: Optional[bytes], stamp: Optional[int]):
        self.after = after  # the listing key it starts after
        self.stamp = stamp  # its tree's namespace lock's stamp when it began (None: held)
        self.done = trio.Event()
        self.result: Optional[tuple] = None  # (version, nodes) when it worked
