#!/usr/bin/env python3
"""The least a pyfuse3 + trio filesystem can cost: the baseline of bench_mount's
"pyfuse3-floor" column.

An in-memory tree answered entirely on the event loop's thread, with no store, no
staging and no thread hops: ``small/`` and ``many/`` hold N and M 100-byte files
named like bench_mount's native trees, ``big`` is a file of B MiB (1 MiB reads
served from one prebuilt buffer), and any directory accepts new files (kept in
memory) and new directories. Timeouts and cache flags are gravfs's for branch
paths (10 s, keep_cache), and so are the mount options when given (``-o``;
bench_mount passes gravfs's defaults: ``default_permissions`` makes the kernel
check permissions, so a create's next path walk asks for the directory's changed
attributes). Whatever gravfs costs above this column is gravfs's;
what this column costs is the kernel round trip plus pyfuse3 and trio.

With ``--work DIR`` it is the work floor (bench_mount's "pyfuse3-work-floor"):
the same tree, plus the least work gravfs's promises ask of a create and of a cold
read, done with no code of gravfs's. A created file's bytes go to a local file in DIR
as they arrive (hashed with SHA-256 as they come), and its close puts the name, the
hash and the size into an LMDB environment in DIR (one write transaction, not synced,
as the daemon's staging): a closed file survives kill -9. ``big`` is read from
``--big-file`` (pread, the kernel's read-ahead) and checked against ``--big-sha256``
by one background pass that starts at its first read; the read that reaches the last
byte waits for that pass (no whole-file reader gets unchecked content to EOF). With
``--big-s3-endpoint/-bucket/-key`` (credentials from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY) ``big`` is that object instead, read as gravfs's reader fetches
it: ranged GETs of its chunk size, as many ahead as its read-ahead keeps, each chunk
hashed in order as it arrives. With ``--objects MANIFEST`` too, ``parquet/`` holds files
of the same bucket (a JSON list of name, key, size and SHA-256: bench_mount's Spark
dataset), each fetched whole from its first read (a Parquet reader starts at the
footer), its chunks hashed in order and kept in memory for the mount's life. What
gravfs costs above this column is its own; above the plain floor, the promises'.

With ``--lake-db DIR`` it is the lake work floor (bench_mount's scale section): the
floor whose lake is a branch's committed entries, in a RocksDB that holds the branch's
range SSTs as gravfs wrote them (ingested by the benchmark). A listing iterates the
database from the directory's prefix (RocksDB's reader: each block's checksum checked,
tables opened on first use) and decodes each entry's attributes (size, mode, owner,
mtime: a protobuf class declaring only those fields of DESIGN.md's Entry); every
listed or looked-up name gets an inode number kept both ways, returned on forget; a
lookup is a point read, and a directory one seek. That is the least a mount of a
committed tree does per name, with no code of gravfs's: RocksDB's C++ reader, not an
SST reader in Python.

    scripts/fuse_floor.py MOUNTPOINT [-o OPT[,OPT...]] [--small N] [--many M] [--big-mb B]
                          [--work DIR --big-sha256 HEX
                           (--big-file PATH | --big-s3-endpoint URL --big-s3-bucket B --big-s3-key K
                            [--objects MANIFEST])]
                          [--lake-db DIR] [--count FILE]

With ``--count FILE`` each request type's calls and its handler's time (from entering
the handler to its answer) are counted and written to FILE as JSON at unmount, in the
form of the gravfs daemon's ``GRAVFS_OPSTATS`` table: bench_mount's requests group
compares a create's and a first stat's requests with gravfs's. Counting adds a clock
read and a dictionary update to each request, so the timed groups run without it.

Runs in the foreground until unmounted (fusermount3 -u MOUNTPOINT).
"""

from __future__ import annotations

import argparse
import errno
import functools
import hashlib
import inspect
import json
import os
import stat
import struct
import threading
import time

import lmdb

import pyfuse3
import trio

MiB = 1 << 20
TIMEOUT = 10.0
# gravfs's cache flags: write-only opens bypass the page cache from Linux 6.6 on (a
# direct write there drops other opens' cached pages of its range), which spares the
# kernel's GETXATTR of security.capability before each write
_KERNEL = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2] if x.isdigit())
DIRECT_WRITES = _KERNEL >= (6, 6)


class _Node:
    __slots__ = ("ino", "mode", "size", "data", "children", "mtime_ns")

    def __init__(self, ino: int, mode: int, size: int = 0):
        self.ino, self.mode, self.size = ino, mode, size
        self.data = b""
        self.children: dict[bytes, _Node] | None = {} if stat.S_ISDIR(mode) else None
        self.mtime_ns = time.time_ns()


class FloorFS(pyfuse3.Operations):
    enable_writeback_cache = False

    def __init__(self, small: int, many: int, big_mb: int, lake: int = 0, day_files: int = 20000):
        super().__init__()
        self.nodes: dict[int, _Node] = {}
        self.last_ino = pyfuse3.ROOT_INODE
        self.root = self._new(stat.S_IFDIR | 0o755, ino=pyfuse3.ROOT_INODE)
        for dname, n in ((b"small", small), (b"many", many)):
            d = self._add(self.root, dname, stat.S_IFDIR | 0o755)
            for i in range(n):
                f = self._add(d, b"f%06d" % i, stat.S_IFREG | 0o644, size=100)
                f.data = b"x" * 100
        self._add(self.root, b"big", stat.S_IFREG | 0o644, size=big_mb * MiB)
        if lake:  # bench_repo.build_branch's shape: tables/events/day=D/part-I.parquet
            t = self._add(self._add(self.root, b"tables", stat.S_IFDIR | 0o755), b"events",
                          stat.S_IFDIR | 0o755)
            day = None
            for i in range(lake):
                if i % day_files == 0:
                    day = self._add(t, b"day=%05d" % (i // day_files), stat.S_IFDIR | 0o755)
                self._add(day, b"part-%08d.parquet" % i, stat.S_IFREG | 0o644, size=1000 + i % 977)
        self.block = os.urandom(MiB)
        self.fhs: dict[int, _Node] = {}
        self.listings: dict[int, list] = {}
        self.next_fh = 1

    def _new(self, mode: int, size: int = 0, ino: int | None = None) -> _Node:
        if ino is None:
            ino = self.last_ino = self.last_ino + 1
        node = self.nodes[ino] = _Node(ino, mode, size)
        return node

    def _add(self, parent: _Node, name: bytes, mode: int, size: int = 0) -> _Node:
        node = self._new(mode, size)
        parent.children[name] = node
        return node

    def _attr(self, node: _Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.st_mode = node.mode
        a.st_nlink = 2 if node.children is not None else 1
        a.st_size = node.size
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = node.mtime_ns
        a.st_uid, a.st_gid = os.getuid(), os.getgid()
        a.st_blksize = 4096
        a.st_blocks = (node.size + 511) // 512
        a.entry_timeout = a.attr_timeout = TIMEOUT
        return a

    async def lookup(self, parent_inode, name, ctx=None):
        node = self.nodes[parent_inode].children.get(name)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(node)

    async def getattr(self, inode, ctx=None):
        return self._attr(self.nodes[inode])

    async def getxattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(pyfuse3.ENOATTR)

    async def opendir(self, inode, ctx):
        fh = self.next_fh
        self.next_fh += 1
        self.listings[fh] = list(self.nodes[inode].children.items())  # one snapshot per open
        return fh

    async def releasedir(self, fh):
        self.listings.pop(fh, None)

    async def readdir(self, fh, start_id, token):
        items = self.listings[fh]
        for i in range(start_id, len(items)):
            name, node = items[i]
            if not pyfuse3.readdir_reply(token, name, self._attr(node), i + 1):
                return

    async def mkdir(self, parent_inode, name, mode, ctx):
        node = self._add(self.nodes[parent_inode], name, stat.S_IFDIR | (mode & 0o7777))
        return self._attr(node)

    async def create(self, parent_inode, name, mode, flags, ctx):
        node = self._add(self.nodes[parent_inode], name, stat.S_IFREG | (mode & 0o7777))
        return self._open_fh(node, flags), self._attr(node)

    async def unlink(self, parent_inode, name, ctx):
        """(the bench's write group removes the file it wrote)"""
        if self.nodes[parent_inode].children.pop(name, None) is None:
            raise pyfuse3.FUSEError(errno.ENOENT)

    async def open(self, inode, flags, ctx):
        return self._open_fh(self.nodes[inode], flags)

    def _open_fh(self, node: _Node, flags: int) -> pyfuse3.FileInfo:
        fh = self.next_fh
        self.next_fh += 1
        self.fhs[fh] = node
        return pyfuse3.FileInfo(fh=fh, keep_cache=True,
                                direct_io=DIRECT_WRITES and flags & os.O_ACCMODE == os.O_WRONLY)

    async def read(self, fh, off, size):
        node = self.fhs[fh]
        if node.data or node.size == 0:
            return node.data[off:off + size]
        size = min(size, node.size - off, MiB)
        return self.block[:size] if size > 0 else b""

    async def write(self, fh, off, buf):
        node = self.fhs[fh]
        data = bytearray(node.data)
        data[off:off + len(buf)] = buf
        node.data = bytes(data)
        node.size = len(node.data)
        return len(buf)

    async def flush(self, fh):
        pass

    async def release(self, fh):
        self.fhs.pop(fh, None)

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = 255
        return s


def _attrs_message():
    """A protobuf class declaring only the fields of the branch's entries (the Entry
    schema of DESIGN.md) that a stat shows; a parse skips the others."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.protobuf.message_factory import GetMessageClass

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    f = descriptor_pb2.FileDescriptorProto(name="fusefloor_attrs.proto", package="fusefloor",
                                           syntax="proto3",
                                           dependency=["google/protobuf/timestamp.proto"])
    m = f.message_type.add(name="Attrs")
    F = descriptor_pb2.FieldDescriptorProto
    for name, number, ftype in (("size", 3, F.TYPE_INT64), ("mode", 20, F.TYPE_UINT32),
                                ("uid", 24, F.TYPE_UINT32), ("gid", 25, F.TYPE_UINT32)):
        m.field.add(name=name, number=number, type=ftype, label=F.LABEL_OPTIONAL)
    m.field.add(name="last_modified", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                type_name=".google.protobuf.Timestamp")
    pool.Add(f)
    return GetMessageClass(pool.FindMessageTypeByName("fusefloor.Attrs"))


def _zigzag_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _record_data(value: bytes) -> bytes:
    """The entry of a record value: zigzag len(identity) | identity | zigzag len(data) | data."""
    b = value[0]
    if b < 0x80:  # the usual lengths: an identity under 64 bytes, an entry under 8 KiB
        p = 1 + (b >> 1)
        c = value[p]
        if c < 0x80:
            return value[p + 1:p + 1 + (c >> 1)]
        d = value[p + 1]
        if d < 0x80:
            return value[p + 2:p + 2 + (((c & 0x7F) | d << 7) >> 1)]
    n, pos = _zigzag_varint(value, 0)
    n, pos = _zigzag_varint(value, pos + n)
    return value[pos:pos + n]


class _Listing:
    """A lake directory being listed: where the next readdir goes on."""
    __slots__ = ("prefix", "own", "entries", "next_id", "pending")

    def __init__(self, prefix: bytes, own: list):
        self.prefix, self.own = prefix, own  # own: the floor's names in it (the root's)
        self.entries, self.next_id, self.pending = None, 0, None


class LakeWorkFloorFS(FloorFS):
    """The floor with its lake read from a branch's records (``--lake-db``): the least
    a listing, a lookup and a stat of committed entries cost (see the module's doc)."""

    def __init__(self, small: int, many: int, big_mb: int, db_path: str):
        import rocksdict

        super().__init__(small, many, big_mb)
        opts = rocksdict.Options(raw_mode=True)
        opts.set_max_open_files(4096)  # tables opened on first use, as gravfs opens ranges
        self.db = rocksdict.Rdict(db_path, options=opts, access_type=rocksdict.AccessType.read_only())
        self.read_opts = rocksdict.ReadOptions()  # block checksums verified (RocksDB's default)
        self.Attrs = _attrs_message()
        self.lake: dict[int, bytes] = {}  # ino -> key (a directory's ends with "/")
        self.inos: dict[bytes, int] = {}  # key -> ino, so a name keeps its number
        self.counts: dict[int, int] = {}  # lookups the kernel holds (forget returns them)
        self.dir_listings: dict[int, _Listing] = {}
        self.started_ns = time.time_ns()

    # -- the lake's names ---------------------------------------------------------------

    def _entries(self, prefix: bytes):
        """(name, key, record value or None for a directory) under prefix, key order."""
        it = self.db.iter(self.read_opts)
        it.seek(prefix)
        n = len(prefix)
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                return
            slash = k.find(b"/", n)
            if slash >= 0:
                yield k[n:slash], k[:slash + 1], None
                it.seek(k[:slash] + b"0")  # past the subdirectory ("0" follows "/")
            else:
                yield k[n:], k, it.value()
                it.next()

    def _ino(self, key: bytes) -> int:
        ino = self.inos.get(key)
        if ino is None:
            ino = self.inos[key] = self.last_ino = self.last_ino + 1
            self.lake[ino] = key
        return ino

    def _lake_attr(self, ino: int, value: bytes | None) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_blksize = 4096
        a.entry_timeout = a.attr_timeout = TIMEOUT
        if value is None:
            a.st_mode, a.st_nlink = stat.S_IFDIR | 0o755, 2
            a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = self.started_ns
            return a
        m = self.Attrs.FromString(_record_data(value))
        a.st_mode = m.mode or stat.S_IFREG | 0o644
        a.st_nlink = 1
        a.st_size = m.size
        a.st_blocks = (m.size + 511) // 512
        ts = m.last_modified
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = ts.seconds * 1_000_000_000 + ts.nanos
        a.st_uid, a.st_gid = m.uid, m.gid
        return a

    def _looked_up(self, ino: int) -> None:
        self.counts[ino] = self.counts.get(ino, 0) + 1

    def _dir_prefix(self, inode: int) -> bytes | None:
        """The key prefix of a lake directory (b"" for the root), None for the floor's own."""
        if inode == pyfuse3.ROOT_INODE:
            return b""
        key = self.lake.get(inode)
        return key if key is not None and key.endswith(b"/") else None

    # -- requests -------------------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode in self.nodes and name in self.nodes[parent_inode].children:
            return await super().lookup(parent_inode, name, ctx)
        prefix = self._dir_prefix(parent_inode)
        if prefix is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        key = prefix + name
        value = self.db.get(key, read_opt=self.read_opts)
        if value is None:
            key += b"/"
            it = self.db.iter(self.read_opts)
            it.seek(key)
            if not (it.valid() and it.key().startswith(key)):
                raise pyfuse3.FUSEError(errno.ENOENT)
        ino = self._ino(key)
        self._looked_up(ino)
        return self._lake_attr(ino, value)

    async def getattr(self, inode, ctx=None):
        key = self.lake.get(inode)
        if key is None:
            return await super().getattr(inode, ctx)
        return self._lake_attr(inode, None if key.endswith(b"/")
                               else self.db.get(key, read_opt=self.read_opts))

    async def forget(self, inode_list):
        for ino, n in inode_list:
            left = self.counts.get(ino, 0) - n
            if left > 0:
                self.counts[ino] = left
            elif ino in self.lake:
                self.counts.pop(ino, None)
                del self.inos[self.lake.pop(ino)]

    async def opendir(self, inode, ctx):
        prefix = self._dir_prefix(inode)
        if prefix is None:
            return await super().opendir(inode, ctx)
        fh = self.next_fh
        self.next_fh += 1
        own = list(self.nodes[inode].children.items()) if inode in self.nodes else []
        self.dir_listings[fh] = _Listing(prefix, own)
        return fh

    async def releasedir(self, fh):
        self.dir_listings.pop(fh, None)
        await super().releasedir(fh)

    def _listed(self, lst: _Listing):
        """(name, floor node or None, key, value) of every entry: the floor's, then the lake's."""
        for name, node in lst.own:
            yield name, node, None, None
        for name, key, value in self._entries(lst.prefix):
            yield name, None, key, value

    async def readdir(self, fh, start_id, token):
        lst = self.dir_listings.get(fh)
        if lst is None:
            return await super().readdir(fh, start_id, token)
        if lst.entries is None or lst.next_id != start_id:  # a new pass, or a seek: list again
            lst.entries, lst.next_id, lst.pending = self._listed(lst), 0, None
            for _ in range(start_id):
                if next(lst.entries, None) is None:
                    return
            lst.next_id = start_id
        while True:
            entry, lst.pending = lst.pending, None
            if entry is None:
                entry = next(lst.entries, None)
                if entry is None:
                    return
            name, node, key, value = entry
            if node is not None:
                attr = self._attr(node)
            else:
                attr = self._lake_attr(self._ino(key), value)
            if not pyfuse3.readdir_reply(token, name, attr, lst.next_id + 1):
                lst.pending = entry
                return
            if node is None:
                self._looked_up(attr.st_ino)
            lst.next_id += 1


class _Written:
    """A written file's local copy, hashed as its bytes arrive in order."""
    __slots__ = ("fd", "key", "node", "sha", "hashed", "dirty")

    def __init__(self, fd: int, key: bytes, node: _Node, fresh: bool):
        self.fd, self.key, self.node = fd, key, node
        self.sha = hashlib.sha256()
        self.hashed = 0 if fresh else -1  # bytes hashed so far; -1: rehash at close
        self.dirty = fresh


class _LocalBig:
    """One local file read with pread on the event loop, checked by one background
    SHA-256 pass that starts at the first read; the read of the last byte waits for it."""

    def __init__(self, path: str, size: int, sha256: str):
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self.size, self.sha256 = size, sha256
        self.checked = threading.Event()
        self.failed = False
        self.started = False

    def _check(self) -> None:
        sha, off = hashlib.sha256(), 0
        while chunk := os.pread(self.fd, 4 * MiB, off):
            sha.update(chunk)
            off += len(chunk)
        self.failed = sha.hexdigest() != self.sha256
        self.checked.set()

    async def read(self, off: int, size: int) -> bytes:
        if not self.started:
            self.started = True
            threading.Thread(target=self._check, daemon=True).start()
        if off + size >= self.size:
            await trio.to_thread.run_sync(self.checked.wait)
            if self.failed:
                raise pyfuse3.FUSEError(errno.EIO)
        return os.pread(self.fd, size, off)


def _s3_fetchers(endpoint: str, ahead: int) -> tuple:
    """(boto3 client, thread pool) for ranged GETs, ``ahead`` at once."""
    import boto3
    from botocore.config import Config
    from concurrent.futures import ThreadPoolExecutor

    return (boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                         config=Config(max_pool_connections=2 * ahead)),
            ThreadPoolExecutor(ahead))


class _S3Big:
    """One object read by ranged GETs of CHUNK bytes, AHEAD chunks ahead of the reader,
    hashed in order by one thread as the chunks arrive; chunks both served past and
    hashed are dropped. ``keep`` (a dataset file, read footer first and then again
    by column): its first read fetches it whole, AHEAD chunks at once in the hash's
    order, and every chunk is kept. ``fetchers``: a client and pool shared by objects."""

    CHUNK = 4 * MiB
    AHEAD = 8

    def __init__(self, endpoint: str, bucket: str, key: str, size: int, sha256: str,
                 fetchers: tuple | None = None, keep: bool = False):
        self.client, self.pool = fetchers or _s3_fetchers(endpoint, self.AHEAD)
        self.bucket, self.key, self.size, self.sha256 = bucket, key, size, sha256
        self.keep = keep
        self.chunks: dict = {}  # index -> Future of its bytes
        self.lock = threading.Lock()
        self.nchunks = (size + self.CHUNK - 1) // self.CHUNK
        self.hashed_to = 0  # chunks below this are hashed
        self.served_to = 0  # the reader is past the chunks below this
        self.checked = threading.Event()
        self.failed = False
        self.hasher: threading.Thread | None = None

    def _get(self, i: int) -> bytes:
        end = min(self.size, (i + 1) * self.CHUNK) - 1
        body = self.client.get_object(Bucket=self.bucket, Key=self.key,
                                      Range=f"bytes={i * self.CHUNK}-{end}")["Body"]
        return body.read()

    def _future(self, i: int):
        """Chunk i's fetch, started if it was not (under the lock)."""
        f = self.chunks.get(i)
        if f is None:
            f = self.chunks[i] = self.pool.submit(self._get, i)
        return f

    def _hash_all(self) -> None:
        sha = hashlib.sha256()
        for i in range(self.nchunks):
            with self.lock:
                f = self._future(i)
                for j in range(i + 1, min(self.nchunks, i + self.AHEAD)) if self.keep else ():
                    self._future(j)
            sha.update(f.result())
            with self.lock:
                self.hashed_to = i + 1
                self._drop()
        self.failed = sha.hexdigest() != self.sha256
        self.checked.set()

    def _drop(self) -> None:
        if self.keep:
            return
        for i in [i for i in self.chunks if i < min(self.hashed_to, self.served_to)]:
            del self.chunks[i]

    async def read(self, off: int, size: int) -> bytes:
        size = min(size, self.size - off)
        if size <= 0:
            return b""
        first, last = off // self.CHUNK, (off + size - 1) // self.CHUNK
        with self.lock:
            if self.hasher is None:
                self.hasher = threading.Thread(target=self._hash_all, daemon=True)
                self.hasher.start()
            futures = [self._future(i) for i in range(first, last + 1)]
            for i in range(last + 1, min(self.nchunks, last + 1 + self.AHEAD)):
                self._future(i)
        parts = []
        for f in futures:
            parts.append(f.result() if f.done() else await trio.to_thread.run_sync(f.result))
        if off + size >= self.size:
            await trio.to_thread.run_sync(self.checked.wait)
            if self.failed:
                raise pyfuse3.FUSEError(errno.EIO)
        with self.lock:
            self.served_to = max(self.served_to, first)
            self._drop()
        base = first * self.CHUNK
        if len(parts) == 1:
            return memoryview(parts[0])[off - base:off - base + size]
        return b"".join(parts)[off - base:off - base + size]


class WorkFloorFS(FloorFS):
    """The floor plus what gravfs's promises cost at the least (see the module's doc)."""

    def __init__(self, small: int, many: int, big_mb: int, lake: int, work: str,
                 big_file: str | None, big_sha256: str, big_s3: tuple | None = None,
                 objects: list[dict] | None = None):
        super().__init__(small, many, big_mb, lake)
        self.objects: dict[int, _S3Big] = {}  # ino -> a dataset file in the S3 bucket
        if objects:
            endpoint, bucket = big_s3[0], big_s3[1]
            fetchers = _s3_fetchers(endpoint, _S3Big.AHEAD)
            d = self._add(self.root, b"parquet", stat.S_IFDIR | 0o755)
            for o in objects:
                node = self._add(d, os.fsencode(o["name"]), stat.S_IFREG | 0o644, size=o["size"])
                self.objects[node.ino] = _S3Big(endpoint, bucket, o["key"], o["size"],
                                                o["sha256"], fetchers, keep=True)
        self.spool = os.path.join(work, "spool")
        os.makedirs(self.spool, exist_ok=True)
        self.env = lmdb.open(os.path.join(work, "staging"), map_size=1 << 30, sync=False)
        self.written: dict[int, _Written] = {}  # fh -> the handle's local copy
        self.keys: dict[int, bytes] = {}  # ino -> its staging key (files created here)
        self.big_ino = self.root.children[b"big"].ino
        self.big = (_S3Big(*big_s3, big_mb * MiB, big_sha256) if big_s3
                    else _LocalBig(big_file, big_mb * MiB, big_sha256))

    async def create(self, parent_inode, name, mode, flags, ctx):
        fi, attr = await super().create(parent_inode, name, mode, flags, ctx)
        fd = os.open(self._local(attr.st_ino), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                     0o600)
        key = self.keys[attr.st_ino] = b"%d/%s" % (parent_inode, name)
        self.written[fi.fh] = _Written(fd, key, self.fhs[fi.fh], fresh=True)
        return fi, attr

    async def open(self, inode, flags, ctx):
        fi = await super().open(inode, flags, ctx)
        key = self.keys.get(inode)
        if key is not None and flags & os.O_ACCMODE != os.O_RDONLY:
            fd = os.open(self._local(inode), os.O_RDWR | os.O_CLOEXEC)
            w = self.written[fi.fh] = _Written(fd, key, self.nodes[inode], fresh=False)
            if flags & os.O_TRUNC:
                os.ftruncate(fd, 0)
                w.node.size, w.hashed, w.dirty = 0, 0, True
        return fi

    async def unlink(self, parent_inode, name, ctx):
        node = self.nodes[parent_inode].children.get(name)
        await super().unlink(parent_inode, name, ctx)
        key = self.keys.pop(node.ino, None)
        if key is not None:  # staged away, as gravfs does; open descriptors keep the copy
            with self.env.begin(write=True) as txn:
                txn.delete(key)
            os.unlink(self._local(node.ino))

    def _local(self, ino: int) -> str:
        return os.path.join(self.spool, str(ino))

    async def write(self, fh, off, buf):
        w = self.written.get(fh)
        if w is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        n = os.pwrite(w.fd, buf, off)
        if off == w.hashed:
            w.sha.update(buf)
            w.hashed += n
        else:
            w.hashed = -1
        w.dirty = True
        w.node.size = max(w.node.size, off + n)
        return n

    async def flush(self, fh):
        w = self.written.get(fh)
        if w is None or not w.dirty:
            return
        size = w.node.size
        if w.hashed != size:  # written out of order: hash the local copy
            w.sha = hashlib.sha256(os.pread(w.fd, size, 0))
            w.hashed = size
        with self.env.begin(write=True) as txn:
            txn.put(w.key, w.sha.digest() + struct.pack("<QQ", size, time.time_ns()))
        w.dirty = False

    async def release(self, fh):
        w = self.written.pop(fh, None)
        if w is not None:
            os.close(w.fd)
        await super().release(fh)

    async def read(self, fh, off, size):
        node = self.fhs[fh]
        if node.ino in self.keys:  # created here: its local copy
            fd = os.open(self._local(node.ino), os.O_RDONLY | os.O_CLOEXEC)
            try:
                return os.pread(fd, size, off)
            finally:
                os.close(fd)
        obj = self.objects.get(node.ino)
        if obj is not None:
            return await obj.read(off, size)
        if node.ino != self.big_ino:
            return await super().read(fh, off, size)
        return await self.big.read(off, size)


def count_requests(fs: pyfuse3.Operations) -> dict[str, list]:
    """Wrap the request handlers fs's classes define (pyfuse3's defaults, which answer
    ENOSYS, stay as they are) so that each counts its calls and handler time:
    {name: [calls, seconds]}, filled as requests come."""
    counts: dict[str, list] = {}
    for cls in type(fs).__mro__:
        if cls is pyfuse3.Operations:
            break
        for name, fn in vars(cls).items():
            if name not in counts and not name.startswith("_") and inspect.iscoroutinefunction(fn):
                counts[name] = [0, 0.0]
                setattr(fs, name, _counted(getattr(fs, name), counts[name]))
    return counts


def _counted(handler, cell: list):
    @functools.wraps(handler)
    async def counted(*args, **kwargs):
        t = time.perf_counter()
        try:
            return await handler(*args, **kwargs)
        finally:
            cell[0] += 1
            cell[1] += time.perf_counter() - t
    return counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mountpoint")
    ap.add_argument("-o", dest="options", default="", metavar="OPT[,OPT...]",
                    help="FUSE mount options (flags such as default_permissions)")
    ap.add_argument("--small", type=int, default=10000)
    ap.add_argument("--many", type=int, default=100000)
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--lake", type=int, default=0,
                    help="also tables/events/day=*/part-*.parquet: N files as bench_repo.build_branch")
    ap.add_argument("--lake-day-files", type=int, default=20000, metavar="K",
                    help="with --lake: K files a day directory (build_branch's day_files)")
    ap.add_argument("--lake-db", metavar="DIR",
                    help="the lake work floor: the lake is the branch whose records this "
                         "RocksDB holds (its range SSTs ingested)")
    ap.add_argument("--work", metavar="DIR",
                    help="the work floor: creates staged in DIR, big read from --big-file or "
                         "S3 and checked against --big-sha256")
    ap.add_argument("--big-file", metavar="PATH", help="with --work: big's content (--big-mb MiB)")
    ap.add_argument("--big-sha256", metavar="HEX", help="with --work: big's SHA-256, checked")
    ap.add_argument("--big-s3-endpoint", metavar="URL", help="with --work: big from this S3 server")
    ap.add_argument("--big-s3-bucket", metavar="BUCKET")
    ap.add_argument("--big-s3-key", metavar="KEY")
    ap.add_argument("--objects", metavar="MANIFEST",
                    help="with --big-s3-*: parquet/, files of the same bucket named in this JSON "
                         "list of {name, key, size, sha256}, each checked as big is")
    ap.add_argument("--count", metavar="FILE",
                    help="count each request type's calls and handler time; JSON to FILE at unmount")
    a = ap.parse_args()
    if not os.path.isdir(a.mountpoint):
        ap.error(f"{a.mountpoint}: not a directory")
    if a.count and not os.path.isdir(os.path.dirname(os.path.abspath(a.count))):
        ap.error(f"--count {a.count}: no such directory to write it in")  # not at unmount
    s3 = (a.big_s3_endpoint, a.big_s3_bucket, a.big_s3_key)
    if a.objects and not a.work:
        ap.error("--objects goes with --work and the --big-s3-* options")
    if a.lake_day_files < 1:
        ap.error(f"--lake-day-files: at least 1 (got {a.lake_day_files})")
    if a.lake_db:
        if a.work or a.lake:
            ap.error("--lake-db goes without --work and --lake")
        if not os.path.isfile(os.path.join(a.lake_db, "CURRENT")):
            ap.error(f"--lake-db {a.lake_db}: not a RocksDB directory")
        fs = LakeWorkFloorFS(a.small, a.many, a.big_mb, a.lake_db)
    elif a.work:
        if not a.big_sha256 or bool(a.big_file) == any(s3):
            ap.error("--work needs --big-sha256 and either --big-file or the --big-s3-* options")
        if any(s3) and not all(s3):
            ap.error("--big-s3-endpoint, --big-s3-bucket and --big-s3-key go together")
        if a.big_file and not os.path.isfile(a.big_file):
            ap.error(f"--big-file {a.big_file}: no such file")
        if a.big_file and os.path.getsize(a.big_file) != a.big_mb * MiB:
            ap.error(f"{a.big_file} does not hold --big-mb {a.big_mb} MiB")
        objects = None
        if a.objects:
            if not all(s3):
                ap.error("--objects goes with the --big-s3-* options")
            try:
                with open(a.objects) as f:
                    objects = json.load(f)
                if not isinstance(objects, list) or not all(
                        isinstance(o, dict) and {"name", "key", "size", "sha256"} <= set(o)
                        for o in objects):
                    raise ValueError("not a JSON list of objects with name, key, size and sha256")
            except (OSError, ValueError) as exc:
                ap.error(f"--objects {a.objects}: {exc}")
        fs = WorkFloorFS(a.small, a.many, a.big_mb, a.lake, a.work, a.big_file, a.big_sha256,
                         s3 if all(s3) else None, objects)
    else:
        fs = FloorFS(a.small, a.many, a.big_mb, a.lake, a.lake_day_files)
    options = {"fsname=fusefloor", "subtype=fusefloor"} | {o for o in a.options.split(",") if o}
    counts = count_requests(fs) if a.count else None
    try:
        pyfuse3.init(fs, a.mountpoint, options)
    except RuntimeError as exc:
        ap.error(f"cannot mount on {a.mountpoint}: {exc} (an unknown -o option, /dev/fuse not usable, or the directory not empty?)")
    try:
        trio.run(lambda: pyfuse3.main(min_tasks=4, max_tasks=64))  # as gravfs
    finally:
        pyfuse3.close(unmount=True)
        if counts is not None:
            with open(a.count, "w") as f:
                json.dump({k: v for k, v in counts.items() if v[0]}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
