"""Object store on a local directory: the embedded default.

Every write goes to a temp file in the target directory, is fsynced and then
renamed into place, so a crash never leaves a partial object. Conditional
writes take an fcntl lock file per key, which makes them atomic across threads
and processes on one host (not across NFS clients, where flock is unreliable).

Modes (``modes``): objects are 0600 in 0700 directories, and a root created
here is 0700; a root with the set-group-ID bit shares the store with its group.
Opening a store tightens its top directories (``data``, ``_gravfs``) if an
older gravfs left them open to others.

A store that held a repository when it was opened (its ``_gravfs`` directory) and
has lost it since (the directory moved or deleted, the disk under it unmounted) is
unavailable, not empty: reads raise StoreUnavailableError rather than "not found"
(which would tell the mount every branch was deleted), and writes never make the
directory again (a new, empty store on the disk below a mount point).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from gravfs.cleanup import unlink_quiet
from gravfs.errors import GravfsError, NotFoundError, PreconditionFailedError, StoreUnavailableError
from gravfs.faults import crash_point
from gravfs.store import modes
from gravfs.store.base import RESERVED_PREFIX, ObjectInfo, ObjectStore, check_key, ordered_walk

log = logging.getLogger(__name__)

_TMP = RESERVED_PREFIX + "tmp."
_LOCK = RESERVED_PREFIX + "lock."
_CHUNK = 1 << 20
_TOP_DIRS = ("data", "_gravfs")
_MARK = "_gravfs"  # every repository's store has it (refs, settings)


# errors only a write gives (a full disk, a quota, a file too big): the store's, where a
# copy's read error (EIO) may be its source's
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class LocalStore(ObjectStore):
    """Objects as files under ``root`` (directories are created as needed)."""

    conditions_are_own = True  # compare_and_swap under this process's own locks

    def __init__(self, root: str, fsync: bool = True):
        # the real path: every name of the store (a symlink, "..") shares one workspace
        self.root = os.path.realpath(root)
        self.url = "file://" + self.root
        self._fsync = fsync
        self._modes: tuple[int, int] | None = None  # (directory, file) modes, see _entry_modes
        self._mark = os.path.join(self.root, _MARK)
        self._held_repository = os.path.isdir(self._mark)  # see the module doc
        if os.path.isdir(self.root):
            self._entry_modes()

    # --- paths ---------------------------------------------------------------

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def _tmp_path(self, path: str) -> str:
        d, name = os.path.split(path)
        return os.path.join(d, f"{_TMP}{name}.{os.getpid()}.{uuid.uuid4().hex[:12]}")

    def _missing(self, key: str) -> GravfsError:
        """The error for a key that is not there (the store's own, if it is gone)."""
        self._check_there()
        return NotFoundError(f"object {key} not found in {self.url}")

    def _check_there(self) -> None:
        """Raise StoreUnavailableError if the repository this store held is gone."""
        if self._held_repository and not os.path.isdir(self._mark):
            raise StoreUnavailableError(
                f"the store {self.root} is gone: its {_MARK} directory is missing (moved or "
                "deleted, or the disk it is on is not mounted); nothing is read from or "
                "written to it until it is back")

    # --- reads ---------------------------------------------------------------

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError("offset and length must be >= 0")
        try:
            with open(self._path(key), "rb") as f:
                return os.pread(f.fileno(), length, offset) if length else b""
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None

    def local_path(self, key: str) -> str | None:
        return self._path(key)

    def download(self, key: str, dest_path: str) -> int:
        try:
            src = open(self._path(key), "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None
        with src, open(dest_path, "wb") as dst:
            size = os.fstat(src.fileno()).st_size
            done = 0
            try:  # in-kernel copy: no trip through Python buffers
                while done < size:
                    n = os.sendfile(dst.fileno(), src.fileno(), done, size - done)
                    if n == 0:
                        break
                    done += n
            except OSError as e:
                if done or e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
            if done == 0 or done < size:
                src.seek(done)
                dst.seek(done)
                shutil.copyfileobj(src, dst, _CHUNK)
                return dst.tell()
            return done

    def size(self, key: str) -> int | None:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            self._check_there()
            return None
        return None if stat.S_ISDIR(st.st_mode) else st.st_size

    def read_versioned(self, key: str) -> tuple[bytes, str]:
        try:
            with open(self._path(key), "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None
        return data, _version(data, st)

    # --- modes ---------------------------------------------------------------

    def _entry_modes(self) -> tuple[int, int]:
        """(directory, file) modes of new entries, from the root's mode once it exists;
        the first call also tightens the top directories of an older store."""
        if self._modes is None:
            try:
                root_mode = os.stat(self.root).st_mode
            except FileNotFoundError:
                return modes.PRIVATE_DIR, modes.PRIVATE_FILE
            self._modes = modes.store_modes(root_mode)
            for top in _TOP_DIRS:
                modes.tighten(os.path.join(self.root, top), self._modes[0])
        return self._modes

    @property
    def _shared(self) -> bool:
        return self._entry_modes()[1] != modes.PRIVATE_FILE

    def _make_dirs(self, d: str) -> None:
        """``d`` and its missing parents in the store with the store's directory mode."""
        if os.path.isdir(d):  # most writes: one stat, no exception
            return
        self._check_there()  # (a root that went away is not made again)
        if not os.path.isdir(self.root):
            os.makedirs(os.path.dirname(self.root), exist_ok=True)  # outside the store: as usual
            modes.make_dir(self.root)  # a root created here is private
        modes.make_dir(d, self._entry_modes()[0], exact=self._shared)

    def _create(self, path: str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_EXCL) -> int:
        """Open a new file of the store with the store's file mode."""
        file_mode = self._entry_modes()[1]
        fd = os.open(path, flags | os.O_CLOEXEC, file_mode)
        if self._shared:
            try:
                os.fchmod(fd, file_mode)  # the umask may have taken the group's bits
            except BaseException:
                os.close(fd)
                raise
        return fd

    # --- writes --------------------------------------------------------------

    def _write_temp(self, path: str, data: bytes | None = None, src_path: str | None = None) -> tuple[str, os.stat_result]:
        """Write a fully synced temp file next to ``path``; returns (temp path, its stat)."""
        self._make_dirs(os.path.dirname(path))
        tmp = self._tmp_path(path)
        try:
            with open(self._create(tmp), "wb") as f:
                if src_path is None:
                    f.write(data or b"")
                else:
                    with open(src_path, "rb") as src:
                        shutil.copyfileobj(src, f, _CHUNK)
                f.flush()
                if self._fsync:
                    os.fsync(f.fileno())
                st = os.fstat(f.fileno())
        except OSError as e:
            unlink_quiet(tmp)
            if e.filename is None and e.errno in _WRITE_ERRORS:  # (a write names no file)
                raise OSError(e.errno, e.strerror, path) from e
            raise
        except BaseException:
            unlink_quiet(tmp)
            raise
        return tmp, st

    def _sync_dir(self, path: str) -> None:
        if not self._fsync:
            return
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _replace(self, tmp: str, path: str) -> None:
        try:
            os.replace(tmp, path)
        except IsADirectoryError:
            unlink_quiet(tmp)
            raise GravfsError(f"cannot write object {path}: a directory of that name exists") from None
        except BaseException:
            unlink_quiet(tmp)
            raise
        self._sync_dir(path)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp, _ = self._write_temp(path, data)
        crash_point("local:publish", key)
        self._replace(tmp, path)

    def upload(self, key: str, src_path: str) -> None:
        path = self._path(key)
        tmp, _ = self._write_temp(path, src_path=src_path)
        crash_point("local:publish", key)
        self._replace(tmp, path)

    def take_file(self, key: str, src_path: str) -> None:
        path = self._path(key)
        tmp = self._taken_temp(path, src_path)
        if tmp is None:
            return self.upload(key, src_path)
        crash_point("local:publish", key)
        self._replace(tmp, path)

    def scratch_file(self, prefix: str) -> tuple[int, str] | None:
        d = self._path(prefix.rstrip("/"))
        self._make_dirs(d)
        path = self._tmp_path(os.path.join(d, "scratch"))
        return self._create(path), path

    def _taken_temp(self, path: str, src_path: str) -> str | None:
        """``src_path`` renamed to a temp name beside ``path``, with the store's file
        mode and (unless the store defers it) synced; None on another file system."""
        self._make_dirs(os.path.dirname(path))
        tmp = self._tmp_path(path)
        try:
            os.rename(src_path, tmp)
        except OSError as e:
            if e.errno == errno.EXDEV:
                return None
            raise
        try:
            os.chmod(tmp, self._entry_modes()[1])
            if self._fsync:
                fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except BaseException:
            unlink_quiet(tmp)
            raise
        return tmp

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.create_claiming(key, lambda: self._put_if_absent(key, data))

    def _put_if_absent(self, key: str, data: bytes | None, src_path: str | None = None) -> bool:
        path = self._path(key)
        tmp, _ = self._write_temp(path, data, src_path)
        crash_point("local:publish", key)
        try:
            os.link(tmp, path)  # atomic create-only-if-missing, never partial
        except FileExistsError:
            return False
        finally:
            unlink_quiet(tmp)
        self._sync_dir(path)
        return True

    def put_file_if_absent(self, key: str, src_path: str) -> bool:
        """Hard-link the (complete) file into place: no second copy and no second
        write to sync.  Falls back to copying across file systems."""
        return self.create_claiming(key, lambda: self._put_file_if_absent(key, src_path))

    def _put_file_if_absent(self, key: str, src_path: str) -> bool:
        path = self._path(key)
        self._make_dirs(os.path.dirname(path))
        if self._fsync:
            fd = os.open(src_path, os.O_RDONLY)
            try:
                os.fsync(fd)  # cheap if the writer synced it already
            finally:
                os.close(fd)
        crash_point("local:publish", key)
        try:
            os.chmod(src_path, self._entry_modes()[1])  # the link is the object: its mode
            os.link(src_path, path)  # atomic create-only-if-missing, never partial
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
                # name the store's side: the source is the caller's own file, and a
                # message naming it sent users looking at the wrong disk
                raise OSError(e.errno, e.strerror, path) from e
            return self._put_if_absent(key, None, src_path)  # copied in chunks: any size
        self._sync_dir(path)
        return True

    def compare_and_swap(self, key: str, expected_version: str | None, data: bytes | None) -> str | None:
        path = self._path(key)
        with self._key_lock(path):
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    current: str | None = _version(f.read(), st)
            except FileNotFoundError:
                current = None
            if current != expected_version:
                raise PreconditionFailedError(
                    f"object {key} in {self.url} changed: expected version "
                    f"{expected_version or '(absent)'}, found {current or '(absent)'}"
                )
            if data is None:
                unlink_quiet(path)
                self._sync_dir(path)
                return None
            tmp, st = self._write_temp(path, data)
            crash_point("local:publish", key)
            self._replace(tmp, path)
            return _version(data, st)

    @contextmanager
    def _key_lock(self, path: str) -> Iterator[None]:
        d, name = os.path.split(path)
        self._make_dirs(d)
        # The lock file is never removed: unlinking it while another process
        # waits on it would let two holders lock different inodes.
        fd = self._create(os.path.join(d, _LOCK + name), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            self._check_there()  # (a gone store deletes nothing: say so)
            return
        except IsADirectoryError:
            return
        self._sync_dir(path)

    def delete_many(self, keys: list[str]) -> int:
        dirs = set()
        for key in keys:
            path = self._path(key)
            try:
                os.unlink(path)
            except FileNotFoundError:
                if not dirs:
                    self._check_there()
                continue
            except IsADirectoryError:
                continue
            dirs.add(path)
        for path in {os.path.dirname(p): p for p in dirs}.values():
            self._sync_dir(path)
        return len(keys)

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            self._check_there()
            return None
        return None if stat.S_ISDIR(st.st_mode) else ObjectInfo(key, st.st_size, st.st_mtime)

    def touch(self, key: str) -> bool:
        try:
            os.utime(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            self._check_there()
            return False
        return True

    def remove_stale_temp_files(self, max_age_s: float = 3600.0) -> int:
        """Delete temp files left by writers that crashed (older than ``max_age_s``); returns how many."""
        cutoff = time.time() - max_age_s
        removed = 0
        try:
            dev = os.stat(self.root).st_dev
        except FileNotFoundError:
            return 0
        for dirpath, dirs, files in os.walk(self.root):
            # never into another file system mounted inside the store (a mount of this
            # very repository would be walked through, every branch and commit)
            dirs[:] = [d for d in dirs if _on_device(os.path.join(dirpath, d), dev)]
            for name in files:
                if not name.startswith(_TMP):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    if os.stat(path).st_mtime < cutoff:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    pass
        return removed

    # --- listing -------------------------------------------------------------

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[str]:
        return ordered_walk(self._level, prefix, start_after)

    def _level(self, prefix: str, hint: str | None):
        base = prefix[: prefix.rfind("/") + 1]
        stem = prefix[len(base):]
        d = os.path.join(self.root, *base.split("/")[:-1]) if base else self.root
        files: list[str] = []
        dirs: list[str] = []
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError):
            self._check_there()
            return
        with it:
            for entry in it:
                name = entry.name
                if name.startswith(RESERVED_PREFIX) or not name.startswith(stem):
                    continue
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    continue
                if is_dir:
                    dirs.append(base + name + "/")
                else:
                    files.append(base + name)
        files.sort()
        dirs.sort()
        yield files, dirs


def _on_device(path: str, dev: int) -> bool:
    try:
        return os.lstat(path).st_dev == dev
    except OSError:
        return False


def _version(data: bytes, st: os.stat_result) -> str:
    """Changes on every write: content hash plus the inode and mtime of the file."""
    return f"{hashlib.sha256(data).hexdigest()[:32]}-{st.st_ino:x}-{st.st_mtime_ns:x}"


class BatchedLocalStore(LocalStore):
    """A local store for bulk writers that opt in: each object's
    bytes are fsynced before it is renamed into place, as always, but the fsync of
    its directory (the second fsync of every write) is left to ``publish()``, which
    syncs every directory written since in one pass (``syncfs`` of the store's file
    system where the kernel has it, else an fsync of each). Callers publish before
    they record an address anywhere, so what they reference is durable; an object
    whose name is not yet durable is never torn, it may only vanish in a crash (as
    between the rename and the directory sync of any write). Every other write of
    this store, and of every other store, stays durable when it returns.
    """

    def __init__(self, root: str):
        super().__init__(root)
        self._touched: set[str] = set()  # directories with unsynced entries
        self._known: set[str] = set()    # directories known to exist (no mkdir per object)
        self._dlock = threading.Lock()

    def _sync_dir(self, path: str) -> None:
        with self._dlock:
            self._touched.add(os.path.dirname(path))

    def _make_dirs(self, d: str) -> None:
        if d in self._known:
            return
        existed = os.path.isdir(d)
        super()._make_dirs(d)
        with self._dlock:
            self._known.add(d)
            if not existed:  # new directories: their entries in the parents too
                p = d
                while p != self.root and p.startswith(self.root):
                    self._touched.update((p, os.path.dirname(p)))
                    p = os.path.dirname(p)

    def publish(self) -> int:
        """Make the names written so far durable; returns how many directories."""
        with self._dlock:
            dirs, self._touched = self._touched, set()
        if dirs:
            _sync_paths(self.root, dirs)
        return len(dirs)


def _syncfs(root: str) -> bool:
    """syncfs(2) of the file system holding ``root``; False where libc lacks it."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if fn is None:
        return False
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", root)
    finally:
        os.close(fd)
    return True


def _sync_paths(root: str, paths) -> None:
    """Make files and directories durable: one syncfs, else an fsync of each."""
    if _syncfs(root):
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class DeferredLocalStore(BatchedLocalStore):
    """A batched store whose objects wait for ``publish()`` altogether (a Spark task's
    uploads): ``put``/``upload`` write an unsynced temp file beside the object and
    return; ``publish()`` makes every pending one durable in one pass (syncfs, else
    an fsync each), renames them into place and syncs the renames. An object is
    visible only once its bytes are durable; one never published leaves a temp file
    (fsck removes it). Used by Spark tasks and ``gravfs import``; uploads may go on
    during a publish (they wait for the next one), so a writer publishes before it
    records the addresses whose puts have returned.
    """

    def __init__(self, root: str):
        super().__init__(root)
        self._fsync = False  # the bytes are synced by publish(), in one pass
        self._pending: dict[str, str] = {}  # object path -> its temp file
        self._discarded = False

    def _stage(self, path: str, tmp: str) -> None:
        with self._dlock:
            if self._discarded:  # a straggling writer (see discard)
                old = tmp
            else:
                old = self._pending.pop(path, None)
                self._pending[path] = tmp
        if old is not None:
            unlink_quiet(old)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self._stage(path, self._write_temp(path, data)[0])

    def upload(self, key: str, src_path: str) -> None:
        path = self._path(key)
        self._stage(path, self._write_temp(path, src_path=src_path)[0])

    def take_file(self, key: str, src_path: str) -> None:
        path = self._path(key)
        tmp = self._taken_temp(path, src_path)  # (unsynced: publish syncs it)
        if tmp is None:
            return self.upload(key, src_path)
        self._stage(path, tmp)

    def claim_existing(self, key: str) -> bool:
        with self._dlock:
            if self._path(key) in self._pending:
                return True
        return super().claim_existing(key)

    def discard(self) -> int:
        """Remove the temp files of the objects not published (their writer failed or
        was interrupted: nothing references them), and of any written after this:
        an interrupt can land in a pool's thread start, leaving a worker its pool does
        not wait for. Returns how many were pending."""
        with self._dlock:
            batch, self._pending, self._discarded = self._pending, {}, True
        for tmp in batch.values():
            unlink_quiet(tmp)
        return len(batch)

    def publish(self) -> int:
        """Make the pending objects durable and visible; returns how many."""
        with self._dlock:
            batch, self._pending = self._pending, {}
        try:
            if batch:
                _sync_paths(self.root, batch.values())
            for path, tmp in batch.items():
                os.replace(tmp, path)
                self._sync_dir(path)
        except BaseException:
            for tmp in batch.values():
                if os.path.exists(tmp):
                    unlink_quiet(tmp)
            raise
        super().publish()
        return len(batch)
