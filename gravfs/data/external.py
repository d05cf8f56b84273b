"""Contents of by-reference entries (ADDRESS_FULL): read from their source, never other bytes.

An entry imported by reference (zero-copy) names its content by the full URL of a
source object, ``s3://bucket/key`` (the key as listed) or ``file:///abs/path``,
with the size and version tag (``e_tag``) the source had then. Nothing of it is in
the store, and the source may change at any time, so every read checks that the
source is still that version before any byte leaves this module:

- S3: each GET carries ``If-Match: "<e_tag>"`` (412: changed, 404: gone), and the
  answer's ETag and total size (Content-Range) are compared as well, in case a
  server ignores If-Match.
- file: the tag is ``f"{st_mtime_ns:x}-{st_size:x}"``. The file is fstat'ed once
  opened and again after every read, and its path stat'ed (still the same inode),
  so a write during the read or a file renamed over the path is seen.

Whole contents are read by chunks, each checked before it is returned or yielded,
so a source that changes midway fails the read at that chunk instead of mixing
versions. A changed, vanished or unreadable source raises SourceChangedError
(a CorruptDataError: one line from the CLI, EIO in the mount).

S3 sources are read with the repository store's S3 settings (endpoint,
credentials, timeouts) when the store is on S3, else with the environment's
(``GRAVFS_S3_ENDPOINT`` / ``AWS_ENDPOINT_URL`` and the AWS credential chain);
``GRAVFS_SOURCE_S3_ENDPOINT`` names another endpoint for sources.
"""

from __future__ import annotations

import logging
import os
import stat as statmod
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from gravfs.errors import CorruptDataError, NotFoundError, PreconditionFailedError, SourceChangedError

log = logging.getLogger(__name__)

# The protobuf Entry's address_type of a full URL (gravfs.fs.entry.ADDRESS_FULL; this
# layer does not import the filesystem layer).
ADDRESS_FULL = 2
CHUNK = 8 << 20  # bytes per checked read of a whole content (one GET each on S3)
SOURCE_ENDPOINT_ENV = "GRAVFS_SOURCE_S3_ENDPOINT"


def is_external(address_type: int) -> bool:
    """Whether an entry's content is a source object outside the store (by reference)."""
    return address_type == ADDRESS_FULL


@dataclass(frozen=True)
class Source:
    """A by-reference entry's content: the source URL and the version it must have."""

    url: str
    size: int
    e_tag: str

    @property
    def key(self) -> str:
        """Names exactly this version (caches): the same URL with another tag differs."""
        return f"{self.url}\n{self.e_tag}\n{self.size}"


def source_of(entry) -> Source:
    """The Source of an entry (anything with ``address``, ``size`` and ``e_tag``)."""
    return Source(entry.address, entry.size, entry.e_tag)


def content_key(entry) -> str:
    """What names an entry's bytes (caches, "same content" marks): a data object's
    address, or a source's URL with the version it must have."""
    return source_of(entry).key if is_external(entry.address_type) else entry.address


def file_tag(st: os.stat_result) -> str:
    """The e_tag of a file source, from its stat."""
    return f"{st.st_mtime_ns:x}-{st.st_size:x}"


def _unreadable(src: Source, why: str) -> CorruptDataError:
    return CorruptDataError(f"by-reference entry {src.url!r}: {why}")


def _changed(src: Source, why: str) -> SourceChangedError:
    return SourceChangedError(f"source {src.url} of a by-reference entry changed since it was "
                              f"referenced ({why})", url=src.url)


def _vanished(src: Source) -> SourceChangedError:
    return SourceChangedError(f"source {src.url} of a by-reference entry no longer exists",
                              url=src.url, vanished=True)


class ExternalReader:
    """Checked reads of source objects, with the S3 settings of one store.

    Thread-safe (one S3 client per source bucket, shared); pickles as its store
    only (Spark ships it to executors, which make their own clients).
    """

    def __init__(self, store=None):
        self.store = store
        self._buckets: dict[str, object] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"store": self.store}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["store"])

    # -- public -------------------------------------------------------------------

    def read(self, src: Source, offset: int = 0, length: int = -1) -> bytes:
        """``length`` bytes at ``offset`` (to the end when negative), checked."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        end = src.size if length < 0 else min(src.size, offset + length)
        if offset >= end:
            self.check(src)  # nothing to read: still only from the right version
            return b""
        return b"".join(self._chunks(src, offset, end, CHUNK))

    def iter(self, src: Source, chunk: int = CHUNK) -> Iterator[bytes]:
        """The whole content by chunks, each checked before it is yielded."""
        if src.size == 0:
            self.check(src)
            return iter(())
        return self._chunks(src, 0, src.size, chunk)

    def copy_to(self, src: Source, out: BinaryIO) -> int:
        """Write the whole content to ``out``; returns its size."""
        n = 0
        for buf in self.iter(src):
            out.write(buf)
            n += len(buf)
        return n

    def check(self, src: Source) -> None:
        """The source exists with the entry's size and tag (a HEAD / a stat; fsck)."""
        scheme, where = self._parse(src)
        if scheme == "file":
            with _FileReading(src, where):
                return
        bucket, key = where
        with _s3_errors(src):
            etag, size = self._bucket(bucket).head_version(key, src.e_tag)
        _check_s3(src, etag, size)

    # -- internals ------------------------------------------------------------------

    def _parse(self, src: Source):
        if not src.e_tag:
            raise _unreadable(src, "no version tag (e_tag) to check the source against")
        url = src.url
        if url.startswith("file://"):
            path = url[len("file://"):]
            if not path.startswith("/"):
                raise _unreadable(src, "a file:// source needs an absolute path (file:///PATH)")
            return "file", path
        if url.startswith("s3://"):
            bucket, _, key = url[len("s3://"):].partition("/")
            if not bucket or not key:
                raise _unreadable(src, "expected s3://BUCKET/KEY")
            return "s3", (bucket, key)
        raise _unreadable(src, "only s3:// and file:// sources can be read")

    def _chunks(self, src: Source, start: int, end: int, chunk: int) -> Iterator[bytes]:
        scheme, where = self._parse(src)
        if scheme == "file":
            return _file_chunks(src, where, start, end, chunk)
        return self._s3_chunks(src, where, start, end, chunk)

    def _s3_chunks(self, src: Source, where: tuple[str, str], start: int, end: int,
                   chunk: int) -> Iterator[bytes]:
        bucket, key = where
        b = self._bucket(bucket)
        off = start
        while off < end:
            want = min(chunk, end - off)
            with _s3_errors(src):
                data, etag, size = b.get_version_range(key, off, want, src.e_tag)
            _check_s3(src, etag, size)
            if len(data) != want:
                raise _changed(src, f"{len(data)} bytes at offset {off}, expected {want}")
            log.debug("read %d bytes of %s at %d", want, src.url, off)
            yield data
            off += want

    def _bucket(self, name: str):
        with self._lock:
            b = self._buckets.get(name)
            if b is None:
                from gravfs.data.s3source import source_bucket  # boto3 only when needed
                b = self._buckets[name] = source_bucket(self.store, name,
                                                        os.environ.get(SOURCE_ENDPOINT_ENV) or None)
            return b


@contextmanager
def _s3_errors(src: Source) -> Iterator[None]:
    """A failed If-Match is a changed source, a missing key (or bucket) a vanished one."""
    try:
        yield
    except PreconditionFailedError:
        raise _changed(src, "its ETag is no longer " + src.e_tag) from None
    except NotFoundError:
        raise _vanished(src) from None


def _check_s3(src: Source, etag: str, size: int) -> None:
    got = etag.strip('"')
    if got != src.e_tag:
        raise _changed(src, f"ETag {got}, the entry has {src.e_tag}")
    if size != src.size:
        raise _changed(src, f"{size} bytes, the entry has {src.size}")


class _FileReading:
    """An open file source, checked when opened and by ``recheck`` after each read."""

    def __init__(self, src: Source, path: str):
        self.src, self.path = src, path
        self.fd = -1

    def __enter__(self) -> "_FileReading":
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise _vanished(self.src) from None
        except OSError as exc:
            raise SourceChangedError(f"source {self.src.url} of a by-reference entry cannot be "
                                     f"read: {exc.strerror}", url=self.src.url) from None
        try:
            self.st = os.fstat(self.fd)
            self._same(self.st)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _same(self, st: os.stat_result) -> None:
        if not statmod.S_ISREG(st.st_mode):
            raise _changed(self.src, "no longer a regular file")
        tag = file_tag(st)
        if tag != self.src.e_tag:
            raise _changed(self.src, f"mtime-size tag {tag}, the entry has {self.src.e_tag}")
        if st.st_size != self.src.size:
            raise _changed(self.src, f"{st.st_size} bytes, the entry has {self.src.size}")

    def recheck(self) -> None:
        """After a read: the open file and the file at the path are still the version."""
        self._same(os.fstat(self.fd))
        try:
            now = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            raise _vanished(self.src) from None
        if (now.st_ino, now.st_dev) != (self.st.st_ino, self.st.st_dev):
            raise _changed(self.src, "another file is at its path now")
        self._same(now)

    def pread(self, offset: int, length: int) -> bytes:
        parts, got = [], 0
        while got < length:
            buf = os.pread(self.fd, length - got, offset + got)
            if not buf:
                break
            parts.append(buf)
            got += len(buf)
        return b"".join(parts)


def _file_chunks(src: Source, path: str, start: int, end: int, chunk: int) -> Iterator[bytes]:
    with _FileReading(src, path) as f:
        off = start
        while off < end:
            want = min(chunk, end - off)
            data = f.pread(off, want)
            f.recheck()
            if len(data) != want:
                raise _changed(src, f"{len(data)} bytes at offset {off}, expected {want}")
            yield data
            off += want


_readers: "weakref.WeakKeyDictionary[object, ExternalReader]" = weakref.WeakKeyDictionary()
_readers_lock = threading.Lock()


def reader_for(store) -> ExternalReader:
    """The ExternalReader of a store (one per store object, so its clients are shared)."""
    with _readers_lock:
        r = _readers.get(store)
        if r is None:
            r = _readers[store] = ExternalReader(store)
        return r


def read_source(store, src: Source, offset: int = 0, length: int = -1) -> bytes:
    """Checked bytes of a source object (see ExternalReader.read)."""
    return reader_for(store).read(src, offset, length)


def iter_source(store, src: Source, chunk: int = CHUNK) -> Iterator[bytes]:
    """A source object's whole content by checked chunks (see ExternalReader.iter)."""
    return reader_for(store).iter(src, chunk)


def copy_source(store, src: Source, out: BinaryIO) -> int:
    """Write a source object's whole content to ``out``, checked; returns its size."""
    return reader_for(store).copy_to(src, out)


def check_source(store, src: Source) -> None:
    """Raise SourceChangedError unless the source exists as the entry's version."""
    reader_for(store).check(src)


__all__ = ["ADDRESS_FULL", "CHUNK", "ExternalReader", "Source", "check_source", "content_key",
           "copy_source", "file_tag", "is_external", "iter_source", "read_source", "reader_for", "source_of"]
