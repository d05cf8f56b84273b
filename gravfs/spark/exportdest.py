"""Where ``gravfs spark export`` writes: a directory, or an S3 prefix.

Both destinations take a file's content as a stream of chunks and answer
only once the copy is verified: size and checksum.

- Directory: the content goes to a temporary file under
  ``DEST/_gravfs_export/tmp/``, is read back and hashed (SHA-256 against the
  hash of the bytes read from the store), gets the entry's mode and mtime, and
  is renamed into place: a file at its final path is always a complete,
  verified copy. Zero chunks of a sparse file stay holes. Symlinks are
  symlinks, directory markers directories, FIFOs and sockets made again
  (``mknod``), devices too where the export may make them (else skipped, with
  the reason in the report).
- S3: a content up to PART bytes is one PUT, a larger one a multipart upload
  of PART-sized parts, each with Content-MD5 (the server refuses a body that
  does not match); the object's ETag (MD5, or the MD5 of the parts' MD5s) and
  size are compared with what was sent. The object carries the entry's address,
  source version, mode and mtime in its metadata (``gravfs-address``...), set
  atomically with its content, so a resumed export recognizes a finished copy of
  the same entry by a HEAD. S3 has no symlinks or
  directories: those entries are skipped (the report says so), as are files
  whose key S3 cannot hold (a name that is not UTF-8, a key over 1,024 bytes).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import stat as statmod
import uuid
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional
from urllib.parse import urlparse

from gravfs.data.contentpass import pwrite_all
from gravfs.data.sparse import GRID, is_zero
from gravfs.cleanup import unlink_quiet
from gravfs.errors import CorruptDataError, GravfsError, NotFoundError
from gravfs.store.s3 import S3Store

log = logging.getLogger(__name__)

STATE_DIR = "_gravfs_export"    # DEST/_gravfs_export/: the export's own files
SUCCESS = "_SUCCESS"
RESERVED = (STATE_DIR, SUCCESS)  # top-level names an exported commit may not use
PART = 16 << 20                  # S3: single PUT up to this, else parts of this size
MAX_S3_KEY = 1024                # S3's limit on a key's UTF-8 length
NOT_UTF8 = "the name is not UTF-8, which S3 keys must be"
TOO_LONG = f"the key would be longer than S3's {MAX_S3_KEY} bytes"
READ_BACK = 8 << 20
HOLE_GRID = GRID                 # a sparse file's zero pieces of this size stay holes

COPIED, PRESENT, SKIPPED, DELETED = "copied", "present", "skipped", "deleted"
# the special files (by the report's names of kinds): no content, a type and a device
SPECIAL = {"fifo": statmod.S_IFIFO, "socket": statmod.S_IFSOCK,
           "chardev": statmod.S_IFCHR, "blockdev": statmod.S_IFBLK}
DEVICES = ("chardev", "blockdev")


class Copy:
    """What one file's copy wrote: action, checksum (hex SHA-256 of the content), reason."""

    __slots__ = ("action", "sha256", "reason")

    def __init__(self, action: str, sha256: Optional[str] = None, reason: Optional[str] = None):
        self.action, self.sha256, self.reason = action, sha256, reason


class Hashing:
    """SHA-256 (and MD5, for S3 ETags) of the chunks passing through."""

    def __init__(self, chunks: Iterable[bytes], md5: bool = False):
        self._chunks = chunks
        self.sha = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False) if md5 else None
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for c in self._chunks:
            self.sha.update(c)
            if self.md5 is not None:
                self.md5.update(c)
            self.size += len(c)
            yield c


def _check_size(where: str, got: int, want: int) -> None:
    if got != want:
        raise CorruptDataError(f"{where}: copied {got} bytes, the entry has {want}")


# --- a directory -----------------------------------------------------------------------

class DirDest:
    """A local or shared directory (every executor must see the same path)."""

    kind = "dir"

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.url = self.root

    def _path(self, rel: bytes) -> bytes:
        return os.fsencode(self.root) + b"/" + rel

    def tmp_dir(self) -> bytes:
        return self._path(f"{STATE_DIR}/tmp".encode())

    # the export's own small files (state, report parts, _SUCCESS)
    def put_bytes(self, rel: str, data: bytes) -> None:
        """Staged in the temp directory, not beside ``rel``: a run killed before the
        rename leaves nothing a reader of the report directory would take for a part."""
        path = self._path(rel.encode())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.makedirs(self.tmp_dir(), exist_ok=True)
        tmp = self.tmp_dir() + b"/" + uuid.uuid4().hex.encode()
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            unlink_quiet(tmp)
            raise

    def get_bytes(self, rel: str) -> Optional[bytes]:
        try:
            with open(self._path(rel.encode()), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self, rel: str) -> None:
        try:
            os.unlink(self._path(rel.encode()))
        except FileNotFoundError:
            pass

    def is_empty(self) -> bool:
        try:
            return not os.listdir(self.root)
        except FileNotFoundError:
            return True

    def check(self) -> None:
        """DEST is a directory or can be made one (GravfsError otherwise); nothing is
        written into an existing one."""
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise GravfsError(f"{self.root} is not a directory")
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise GravfsError(f"cannot write to {self.root}: "
                              f"{exc.strerror or exc}") from None

    def prepare(self) -> None:
        """Create the export's state directory; drop a killed run's temp files.
        Raises GravfsError when DEST cannot be written."""
        try:
            os.makedirs(self.tmp_dir(), exist_ok=True)
            for name in os.listdir(self.tmp_dir()):
                os.unlink(os.path.join(self.tmp_dir(), name))
        except OSError as exc:
            raise GravfsError(f"cannot write to {self.root}: "
                              f"{exc.strerror or exc}") from None

    def cleanup(self) -> None:
        """At the end of a run: what is left in the temp directory is a killed task's."""
        try:
            for name in os.listdir(self.tmp_dir()):
                os.unlink(os.path.join(self.tmp_dir(), name))
            os.rmdir(self.tmp_dir())
        except OSError as exc:
            log.warning("could not remove %s: %s", os.fsdecode(self.tmp_dir()), exc)

    # entries: their directories are walked from DEST one name at a time, never through
    # a symlink, so nothing an entry's path names is written or read outside DEST (a
    # tree may hold a symlink "a" beside keys under "a/": see export.shadowed_files)
    @contextmanager
    def _dir(self, names: list[bytes], create: bool) -> Iterator[int]:
        """A descriptor of the directory DEST/names... ``create``: make missing
        directories, and replace a file or symlink where the path needs a directory
        (the tree's keys under that name win, as in the mount); without it a missing
        or non-directory step raises FileNotFoundError or NotADirectoryError."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for d in names:
                parent, fd = fd, -1
                try:
                    fd = self._step(parent, d, create)
                finally:
                    os.close(parent)
            yield fd
        finally:
            if fd >= 0:
                os.close(fd)

    @contextmanager
    def _parent(self, rel: bytes, create: bool) -> Iterator[tuple[int, bytes]]:
        """(descriptor of rel's directory, rel's last name): see _dir."""
        *names, last = rel.rstrip(b"/").split(b"/")
        with self._dir(names, create) as fd:
            yield fd, last

    def _step(self, fd: int, name: bytes, create: bool) -> int:
        """Open directory ``name`` under ``fd`` without following a link."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(3):
            try:
                return os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    raise
                if not create:
                    raise (FileNotFoundError if exc.errno == errno.ENOENT
                           else NotADirectoryError)(exc.errno, exc.strerror, name) from None
                if exc.errno != errno.ENOENT:  # a file, or a symlink (ELOOP)
                    log.warning("%s/%s: a file or symlink where the exported tree has a "
                                "directory; replaced by the directory", self.root,
                                name.decode("utf-8", "replace"))
                    try:
                        os.unlink(name, dir_fd=fd)
                    except (FileNotFoundError, IsADirectoryError):
                        pass  # another task replaced it (by the directory) meanwhile
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass  # another task made it (or a file again: the next round)
        return os.open(name, flags, dir_fd=fd)

    def present(self, rel: bytes, kind: str, size: int, sha256: Optional[str],
                target: str = "", mode: int = 0, mtime_ns: int = 0, rdev: int = 0) -> bool:
        """Is a verified copy of this entry already at ``rel``? (mode/mtime are fixed
        when only they differ; a content of unknown hash is never taken as present)."""
        try:
            with self._parent(rel, create=False) as (fd, name):
                return self._present_at(fd, name, kind, size, sha256, target, mode, mtime_ns,
                                        rdev)
        except (FileNotFoundError, NotADirectoryError):
            return False

    @staticmethod
    def _present_at(fd: int, name: bytes, kind: str, size: int, sha256: Optional[str],
                    target: str, mode: int, mtime_ns: int, rdev: int) -> bool:
        st = os.lstat(name, dir_fd=fd)
        if kind in SPECIAL:
            if statmod.S_IFMT(st.st_mode) != SPECIAL[kind] or (
                    kind in DEVICES and st.st_rdev != rdev):
                return False
            if statmod.S_IMODE(st.st_mode) != mode & 0o7777:
                os.chmod(name, mode & 0o7777, dir_fd=fd)
            if st.st_mtime_ns != mtime_ns:
                os.utime(name, ns=(mtime_ns, mtime_ns), dir_fd=fd, follow_symlinks=False)
            return True
        if kind == "symlink":
            if not statmod.S_ISLNK(st.st_mode) or os.readlink(name, dir_fd=fd) != \
                    os.fsencode(target):
                return False
            if st.st_mtime_ns != mtime_ns:
                os.utime(name, ns=(mtime_ns, mtime_ns), dir_fd=fd, follow_symlinks=False)
            return True
        if kind == "dir":
            if not statmod.S_ISDIR(st.st_mode):
                return False
            if statmod.S_IMODE(st.st_mode) != mode & 0o7777:
                os.chmod(name, mode & 0o7777, dir_fd=fd)
            return True
        if not statmod.S_ISREG(st.st_mode) or st.st_size != size or sha256 is None:
            return False
        try:
            own = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return False  # replaced meanwhile
        with open(own, "rb") as f:
            if _hash_stream(f) != sha256:
                return False
            if statmod.S_IMODE(st.st_mode) != mode & 0o7777:
                os.fchmod(f.fileno(), mode & 0o7777)
            if st.st_mtime_ns != mtime_ns:
                os.utime(f.fileno(), ns=(mtime_ns, mtime_ns))
        return True

    def write_file(self, rel: bytes, chunks: Iterable[bytes], size: int, mode: int,
                   mtime_ns: int, sparse: bool = False) -> Copy:
        tmp = self.tmp_dir() + b"/" + uuid.uuid4().hex.encode()
        h = Hashing(chunks)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                pos = 0
                for c in h:
                    for i in range(0, len(c), HOLE_GRID if sparse else len(c)):
                        piece = c[i:i + HOLE_GRID] if sparse else c
                        if not sparse or not is_zero(piece):  # zeros stay a hole
                            pwrite_all(fd, piece, pos)
                        pos += len(piece)
                os.ftruncate(fd, pos)
            finally:
                os.close(fd)
            _check_size(rel.decode("utf-8", "replace"), h.size, size)
            want = h.sha.hexdigest()
            got = _hash_file(tmp)
            if got != want or os.stat(tmp).st_size != size:
                raise CorruptDataError(f"{self.root}/{rel.decode('utf-8', 'replace')}: the copy "
                                       f"reads back as {got[:16]}..., wrote {want[:16]}...")
            os.chmod(tmp, mode & 0o7777)
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
            self._place(tmp, rel)
        except BaseException:
            unlink_quiet(tmp)
            raise
        return Copy(COPIED, want)

    def write_symlink(self, rel: bytes, target: str, mtime_ns: int) -> Copy:
        tmp = self.tmp_dir() + b"/" + uuid.uuid4().hex.encode()
        os.symlink(os.fsencode(target), tmp)
        self._settle(tmp, rel, None, mtime_ns)
        return Copy(COPIED)

    def write_special(self, rel: bytes, kind: str, rdev: int, mode: int, mtime_ns: int) -> Copy:
        """A FIFO, socket or device node: made again, not copied (a regular file would
        change its type). A device needs privilege; without it the entry is skipped."""
        tmp = self.tmp_dir() + b"/" + uuid.uuid4().hex.encode()
        try:
            os.mknod(tmp, SPECIAL[kind] | 0o600, rdev if kind in DEVICES else 0)
        except PermissionError:
            return Copy(SKIPPED, reason=f"a {kind}: making one needs privilege (CAP_MKNOD)")
        self._settle(tmp, rel, mode, mtime_ns)
        return Copy(COPIED)

    def _settle(self, tmp: bytes, rel: bytes, mode: Optional[int], mtime_ns: int) -> None:
        """Give the temp entry made for ``rel`` its mode (None: a symlink has none) and
        mtime, and rename it into place; it is removed if that fails."""
        try:
            if mode is not None:
                os.chmod(tmp, mode & 0o7777)
            os.utime(tmp, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
            self._place(tmp, rel)
        except BaseException:
            unlink_quiet(tmp)
            raise

    def write_dir(self, rel: bytes, mode: int) -> Copy:
        with self._dir(rel.rstrip(b"/").split(b"/"), create=True) as fd:
            os.fchmod(fd, mode & 0o7777)  # (the walk made it, or opened it: a directory)
        return Copy(COPIED)

    def _place(self, tmp: bytes, rel: bytes) -> None:
        with self._parent(rel, create=True) as (fd, name):
            os.replace(tmp, name, dst_dir_fd=fd)

    def delete_entry(self, rel: bytes) -> None:
        """Remove a file or symlink (absent: nothing to do)."""
        try:
            with self._parent(rel, create=False) as (fd, name):
                os.unlink(name, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except IsADirectoryError:
            pass  # a directory now: the driver's sweep removes it once empty

    def remove_dir_if_empty(self, rel: bytes) -> bool:
        try:
            with self._parent(rel, create=False) as (fd, name):
                os.rmdir(name, dir_fd=fd)
            return True
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                return False
            raise


def _hash_file(path: bytes) -> str:
    with open(path, "rb") as f:
        return _hash_stream(f)


def _hash_stream(f) -> str:
    h = hashlib.sha256()
    while True:
        buf = f.read(READ_BACK)
        if not buf:
            return h.hexdigest()
        h.update(buf)


# --- an S3 prefix ------------------------------------------------------------------------

class S3Dest(S3Store):
    """``s3://bucket/prefix`` with the store's S3 settings (endpoint, credentials,
    timeouts, retries, error messages: gravfs.store.s3), plus what an export
    needs beyond the object-store contract: metadata, Content-MD5 and ETags."""

    kind = "s3"

    def unfit(self, rel: bytes) -> Optional[str]:
        """Why ``rel`` cannot be a key under this prefix (None: it can). Such a file
        is skipped, so one legacy name does not fail the whole export."""
        try:
            name = rel.decode("utf-8")
        except UnicodeDecodeError:
            return NOT_UTF8
        return TOO_LONG if len((self.prefix + name).encode()) > MAX_S3_KEY else None

    def _key(self, rel: bytes) -> str:
        why = self.unfit(rel)
        if why is not None:
            raise GravfsError(f"{rel.decode('utf-8', 'replace')[:80]}: {why}")
        return self.prefix + rel.decode("utf-8")

    # the export's own small files: through the object-store contract
    def put_bytes(self, rel: str, data: bytes) -> None:
        self.put(rel, data)

    def get_bytes(self, rel: str) -> Optional[bytes]:
        try:
            return self.get(rel)
        except NotFoundError:
            return None

    def remove(self, rel: str) -> None:
        self.delete(rel)

    def is_empty(self) -> bool:
        resp = self._listed("", MaxKeys=1)
        return not resp.get("Contents")

    def check(self) -> None:
        self.is_empty()  # a missing bucket or bad credentials fail here, before any work

    def prepare(self) -> None:
        pass  # nothing to set up: the export's first write is its state object

    def cleanup(self) -> None:
        pass

    def head(self, rel: bytes) -> Optional[dict]:
        key = self._key(rel)
        try:
            return self._call("head", key, self._client.head_object, Key=key)
        except NotFoundError:
            return None

    def present(self, rel: bytes, size: int, meta: dict) -> bool:
        """Is the object an earlier run wrote for this very entry there? (Its metadata
        came with its verified content in one PUT: see the module doc.)"""
        h = self.head(rel)
        return (h is not None and int(h["ContentLength"]) == size
                and h.get("Metadata", {}) == meta)

    @staticmethod
    def metadata(address: str, e_tag: str, mode: int, mtime_ns: int) -> dict:
        """The metadata of an entry's object: its address, source version, mode, mtime."""
        meta = {"gravfs-address": address, "gravfs-mode": oct(mode & 0o7777),
                "gravfs-mtime-ns": str(mtime_ns)}
        if e_tag:  # a by-reference entry's source version
            meta["gravfs-etag"] = e_tag
        return meta

    def write_file(self, rel: bytes, chunks: Iterable[bytes], size: int, meta: dict) -> Copy:
        key = self._key(rel)
        parts = _parts(chunks, PART)
        first = next(parts, b"")
        second = next(parts, None)
        if second is None:  # one PUT
            md5 = hashlib.md5(first, usedforsecurity=False)
            _check_size(key, len(first), size)
            resp = self._call("put", key, self._client.put_object, Key=key, Body=first,
                              ContentMD5=base64.b64encode(md5.digest()).decode(), Metadata=meta)
            self._verify(key, resp["ETag"], md5.hexdigest(), size)
            return Copy(COPIED, hashlib.sha256(first).hexdigest())
        return self._multipart(key, [first, second], parts, size, meta)

    def _multipart(self, key: str, head: list, rest: Iterator[bytes], size: int,
                   meta: dict) -> Copy:
        up = self._call("upload", key, self._client.create_multipart_upload, Key=key,
                        Metadata=meta)["UploadId"]
        try:
            sha = hashlib.sha256()
            digests, done, total = [], [], 0
            for n, part in enumerate(_chain(head, rest), 1):
                sha.update(part)
                total += len(part)
                d = hashlib.md5(part, usedforsecurity=False).digest()
                resp = self._call("upload", key, self._client.upload_part, Key=key,
                                  UploadId=up, PartNumber=n, Body=part,
                                  ContentMD5=base64.b64encode(d).decode())
                digests.append(d)
                done.append({"PartNumber": n, "ETag": resp["ETag"]})
            _check_size(key, total, size)
            resp = self._call("upload", key, self._client.complete_multipart_upload, Key=key,
                              UploadId=up, MultipartUpload={"Parts": done})
        except BaseException:
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=up)
            except Exception as exc:  # best effort; the bucket's lifecycle rules clean up
                log.warning("could not abort the multipart upload of %s: %s", key, exc)
            raise
        want = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest() + \
            f"-{len(digests)}"
        self._verify(key, resp["ETag"], want, size)
        return Copy(COPIED, sha.hexdigest())

    def _verify(self, key: str, etag: str, want: str, size: int) -> None:
        """The written object's ETag and size against what was sent; a mismatch deletes it."""
        got = etag.strip('"')
        h = self._call("head", key, self._client.head_object, Key=key)
        if got != want or int(h["ContentLength"]) != size:
            self._call("delete", key, self._client.delete_object, Key=key)
            raise CorruptDataError(f"s3://{self.bucket}/{key}: the copy has ETag {got} and "
                                   f"{h['ContentLength']} bytes, expected {want} and {size}")

    def delete_entry(self, rel: bytes) -> None:
        """Remove an entry's object (absent: nothing to do)."""
        key = self._key(rel)
        self._call("delete", key, self._client.delete_object, Key=key)

    def remove_dir_if_empty(self, rel: bytes) -> bool:
        return False  # S3 has no directories


def _b64md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def _parts(chunks: Iterable[bytes], size: int) -> Iterator[bytes]:
    """Re-cut a stream of chunks into pieces of exactly ``size`` bytes (the last shorter)."""
    buf = bytearray()
    for c in chunks:
        buf += c
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)


def _chain(head: list, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from rest


# --- opening -----------------------------------------------------------------------------

_open: dict[str, object] = {}


def open_dest(url: str):
    """The destination named by ``url`` (a path, ``file://PATH`` or ``s3://BUCKET/PREFIX``),
    one per process."""
    d = _open.get(url)
    if d is None:
        d = _open[url] = _make(url)
    return d


def _make(url: str):
    if url.startswith("s3://"):
        p = urlparse(url)
        if not p.netloc:
            raise GravfsError(f"{url}: no bucket (expected s3://BUCKET/PREFIX)")
        return S3Dest(p.netloc, p.path.strip("/"))
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif "://" in url:
        raise GravfsError(f"unsupported destination {url!r} (use a directory or "
                          "s3://BUCKET/PREFIX)")
    if not url:  # not the working directory
        raise GravfsError("no destination given (a directory or s3://BUCKET/PREFIX)")
    return DirDest(url)
