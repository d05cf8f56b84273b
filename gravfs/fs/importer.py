"""Import a local directory tree into a branch as one commit.

Files are hashed and uploaded by a thread pool (hashlib and boto3 release the
GIL) and staged in batches into a staging token of the import's own, which no
branch reads: until the import commits, the branch shows nothing of it and a
commit of the branch does not take it. A killed or failed import leaves that
token behind (recorded in the staging database's ``imports``); the next import
of the same source into the same branch:prefix resumes it (files whose size,
mtime and mode did not change are not read again), any other import into that
branch drops it. A branch with uncommitted changes is refused unless
``include_staged``: they then go into the import's commit. Modes, mtimes,
symlinks and empty directories are kept.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat as statmod
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Optional

from gravfs.fs.entry import (ADDRESS_FULL, KIND_DIRECTORY, KIND_FILE, KIND_SYMLINK,
                             TIME_NS_MAX, TIME_NS_MIN, EntryInfo, decode_entry)
from gravfs.version.committed.record import decode_value
from gravfs.version.committed.manager import EMPTY_METARANGE_ID
from gravfs.version.committer import Committer, NothingToCommitError
from gravfs.errors import CorruptDataError, GravfsError, NotFoundError
from gravfs.faults import crash_point
from gravfs.data.objects import DataObjects
from gravfs.data.steady import put_steady
from gravfs.fs import ownpaths
from gravfs.fs.paths import to_key
from gravfs.fs.references import live_addresses
from gravfs.store.base import REFRESH_AGE
from gravfs.store.local import DeferredLocalStore, LocalStore
from gravfs.progress import progress_bar
from gravfs.threadmap import ordered_map
from gravfs.version.refs.commits import Commit
from gravfs.fs.repository import encode_items
from gravfs.version.repository import default_author
from gravfs.version.staging.area import PUTS, new_token, staged_value

log = logging.getLogger(__name__)

BATCH = 5000
AHEAD = BATCH  # files uploaded ahead of staging: the workers keep on while a batch is staged
SPECIAL = "not a regular file, directory or symlink"  # what an import leaves out
BATCH_SECONDS = 2.0  # stage what is uploaded at least this often: a killed import resumes there


def scan(src: str, leave_out: Optional[dict[str, str]] = None,
         skipped: Optional[list[str]] = None) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, kind, stat) of everything under src, depth first; the directories
    ``leave_out`` names (relative path -> what it is: see own_dirs_under) are passed over.
    Special files (FIFOs, sockets, devices) are logged and added to ``skipped``."""
    stack = [""]
    while stack:
        rel = stack.pop()
        full = os.path.join(src, rel) if rel else src
        try:
            entries = sorted(os.scandir(full), key=lambda e: e.name)
        except OSError as exc:
            raise GravfsError(f"cannot read directory {full}: {exc.strerror}") from exc
        if rel and not entries:
            yield rel, "dir", os.stat(full)
        for e in reversed(entries):
            r = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            if statmod.S_ISDIR(st.st_mode):
                if leave_out and r in leave_out:
                    log.warning("leaving out %s: it is %s", os.path.join(src, r), leave_out[r])
                    continue
                stack.append(r)
            elif statmod.S_ISLNK(st.st_mode):
                yield r, "symlink", st
            elif statmod.S_ISREG(st.st_mode):
                yield r, "file", st
            else:
                skip_special(r, skipped)


def skip_special(rel: str, skipped: Optional[list[str]] = None) -> None:
    """Pass over a FIFO, socket or device (a data lake holds none): logged, and named
    in ``skipped`` for a summary."""
    log.warning("skipping %s: %s", rel, SPECIAL)
    if skipped is not None:
        skipped.append(rel)


def own_dirs_under(repo, src: str) -> dict[str, str]:
    """The repository's own directories (gravfs.fs.ownpaths) under an import's source,
    as paths relative to it -> what each is: the import leaves them out. A source that
    is in one of them is refused."""
    top = os.path.realpath(src)
    out = {}
    for real, what in ownpaths.own_dirs(repo.store.url, repo.workspace.state_dir):
        if ownpaths.within(top, real):
            raise GravfsError(f"cannot import {src}: it is in {what}")
        if ownpaths.within(real, top):
            out[os.path.relpath(real, top)] = what
    return out


@dataclass
class ImportResult:
    commit: Commit
    files: int  # entries imported: files, symlinks, empty directories
    reused: int = 0  # files already uploaded by an interrupted run of the same import
    dropped: int = 0  # staged entries of interrupted imports of other sources, dropped
    staged: int = 0  # staged changes of the branch committed with the import


class ImportJob:
    """An import's own staging token. Its process holds ``locks/import-<token>.lock``
    while it runs, so a record whose lock nobody holds belongs to a dead import.
    A lock file is removed only once its record is gone."""

    def __init__(self, repo, branch: str, source: str, prefix: bytes):
        self.repo, self.area = repo, repo.staging
        self.branch, self.source, self.prefix = branch, source, prefix.hex()
        self.token: Optional[str] = None
        self.base: Optional[str] = None
        self.resumed = False
        self.started = time.time()  # when the token's first run began
        self.dropped = 0
        self._fd: Optional[int] = None

    def _lock_path(self, token: str) -> str:
        return os.path.join(self.repo.workspace.locks, f"import-{token}.lock")

    def _try_lock(self, token: str) -> Optional[int]:
        fd = os.open(self._lock_path(token), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _release(self, token: str, fd: int) -> None:
        with self.area.read_txn() as txn:
            gone = self.area.get_import(txn, token) is None
        if gone:
            try:
                os.unlink(self._lock_path(token))
            except FileNotFoundError:
                pass
        os.close(fd)

    def claim(self, head: str) -> None:
        """Resume a dead import of the same source, drop the branch's other dead ones,
        or start a new token based on ``head``."""
        with self.area.read_txn() as txn:
            records = self.area.import_records(txn, self.branch)
        for token, rec in sorted(records.items()):
            fd = self._try_lock(token)
            if fd is None:
                continue  # a running import
            same = rec.get("source") == self.source and rec.get("prefix") == self.prefix
            if same and self.token is None and self._adopt(token):
                self.token, self._fd, self.base, self.resumed = token, fd, rec["base"], True
                self.started = float(rec.get("time", 0.0))
                log.info("resuming interrupted import %s of %s into %s", token, self.source,
                         self.branch)
                continue
            self.dropped += self._drop(token, rec)
            self._release(token, fd)
        if self.token is None:
            token = new_token()
            fd = self._try_lock(token)
            assert fd is not None  # a fresh random token
            self.token, self._fd, self.base = token, fd, head
            self.area.write(lambda txn: self.area.put_import(txn, token, self._record()))

    def _record(self) -> dict:
        return {"branch": self.branch, "source": self.source, "prefix": self.prefix,
                "base": self.base, "pid": os.getpid(), "time": time.time()}

    def _adopt(self, token: str) -> bool:
        def run(txn):
            rec = self.area.get_import(txn, token)
            if rec is None:
                return False  # committed or dropped meanwhile
            rec["pid"] = os.getpid()
            self.area.put_import(txn, token, rec)
            return True

        return self.area.write(run)

    def _drop(self, token: str, rec: dict) -> int:
        def run(txn):
            if self.area.get_import(txn, token) is None:
                return 0
            return self.area.drop_tokens(txn, [token])

        n = self.area.write(run)
        log.info("dropped %d staged entr%s of an interrupted import of %s into %s",
                 n, "y" if n == 1 else "ies", rec.get("source"), self.branch)
        return n

    def close(self) -> None:
        if self._fd is not None:
            self._release(self.token, self._fd)
            self._fd = None


def _same_file(raw: Optional[bytes], st: os.stat_result) -> Optional[EntryInfo]:
    """The entry an earlier run staged for this file, if size, mtime and mode still match."""
    if raw is None or raw[:1] not in PUTS:
        return None
    try:
        e = decode_entry(decode_value(staged_value(raw))[1])
    except CorruptDataError:
        return None  # read the file again
    if (e.kind == KIND_FILE and e.size == st.st_size and e.mtime_ns == st.st_mtime_ns
            and e.mode == st.st_mode):
        return e
    return None


def check_source(src: str) -> None:
    """An import's local source must be a directory: say which way it is not."""
    if not os.path.exists(src):
        raise NotFoundError(f"{src}: no such file or directory")
    if not os.path.isdir(src):
        raise GravfsError(f"{src}: not a directory")


def import_tree(repo, src: str, branch: str, prefix: str = "", message: Optional[str] = None,
                progress: bool = True, workers: int = 8, include_staged: bool = False,
                by_reference: bool = False) -> ImportResult:
    """Stage every file under src at branch:prefix/... in the import's own token, then
    commit it (see the module doc). ``by_reference``: files are not copied; entries
    carry their ``file://`` address, size, mtime and a tag (read from the source,
    which must then stay in place and unchanged)."""
    check_source(src)
    repo.writable_head(branch)  # a missing branch, a tag or a commit: one line, early
    head = repo.head(branch, fresh=True)
    committer = Committer(repo)
    with committer.branch_lock(branch):  # an import whose commit was cut short is finished
        committer.recover(branch)
        clean = include_staged or committer.is_clean(branch, settle=True)
    if not clean:
        raise GravfsError(f"branch {branch!r} has uncommitted changes; commit or reset them "
                          "first, or use --include-staged to commit them with the import")
    source = os.path.abspath(src)
    pfx = to_key(prefix)
    repo.check_parents(branch, pfx)  # a file at pfx itself is replaced; one above, not
    base = pfx + b"/" if pfx else b""
    items = list(scan(src, own_dirs_under(repo, src)))
    if not items:
        raise NothingToCommitError(f"nothing to commit on branch {branch!r}: {src} is empty")
    total_bytes = sum(st.st_size for _, kind, st in items if kind == "file")

    def key_of(item) -> bytes:
        rel, kind, _ = item
        return base + to_key(rel) + (b"/" if kind == "dir" else b"")

    data, bulk = (None, None) if by_reference else _bulk_data(repo)

    def entry_for(item) -> tuple[bytes, EntryInfo]:
        rel, kind, st = item
        return key_of(item), entry_of(data, source, rel, kind, st)

    job = ImportJob(repo, branch, source, pfx)
    try:
        job.claim(head)
        todo, reused, reused_bytes = _resume(repo, job, items, key_of)
        t0 = time.monotonic()
        with progress_bar(f"importing {src}", total=total_bytes, unit="bytes",
                          enabled=progress) as bar, ThreadPoolExecutor(max_workers=workers) as pool:
            bar.advance(reused_bytes)
            batch: list = []
            flushed = time.monotonic()
            for key, entry in ordered_map(pool, entry_for, todo, AHEAD):
                batch.append((key, entry))
                if entry.kind == KIND_FILE:
                    bar.advance(entry.size)
                if len(batch) >= BATCH or time.monotonic() - flushed >= BATCH_SECONDS:
                    _stage(repo, job.token, batch, bulk)
                    batch, flushed = [], time.monotonic()
            if batch:
                _stage(repo, job.token, batch, bulk)
        removed = _stage_removals(repo, job, pfx, {key_of(i) for i in items},
                                  branch if include_staged else None)
        log.info("staged %d entries (%d bytes, %d files already uploaded) and %d removal(s) "
                 "in %.1fs", len(items), total_bytes, reused, removed, time.monotonic() - t0)
        crash_point("import:staged")
        msg = message or f"Import {source}"
        meta = {"import_source": source}
        if by_reference:
            meta["import_by_reference"] = "true"
        commit, staged = committer.commit_import(branch, job.token, job.base, msg, default_author(),
                                                 meta, include_staged)
        repo.forget_head(branch)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise GravfsError(f"cannot import {where}{exc.strerror or exc}; nothing was committed "
                          f"(importing {src} again resumes)") from exc
    finally:
        if bulk is not None and bulk.discard():  # uploaded, never staged: a failure's
            log.info("removed the unpublished uploads of the interrupted import")
        job.close()
    return ImportResult(commit, len(items), reused, job.dropped, staged)


def replaced_keys(committed, metarange_id: str, pfx: bytes) -> Iterator[bytes]:
    """Keys of a tree that an import into ``pfx`` replaces, in key order: ``pfx`` itself
    (a file where the imported directory goes) and every key under ``pfx/``; every
    key of the tree for the root (``pfx`` empty)."""
    if metarange_id == EMPTY_METARANGE_ID:
        return iter(())
    return _at_or_under((rec.key for rec in committed.iter(metarange_id, pfx)), pfx)


def _at_or_under(keys: Iterator[bytes], pfx: bytes) -> Iterator[bytes]:
    """Of keys in order from ``pfx`` on: ``pfx`` and those under ``pfx/`` (all for b"")."""
    base = pfx + b"/" if pfx else b""
    for k in keys:
        if k == pfx or k.startswith(base):
            yield k
        elif k > base:
            return


def _stage_removals(repo, job: "ImportJob", pfx: bytes, keys: set,
                    staged_on: Optional[str] = None) -> int:
    """Stage deletions of what the import's base commit holds under the prefix and the
    source lacks (see the module doc); returns how many. ``staged_on``: the branch whose
    staged changes the import commits too (--include-staged): what they put there
    (a file staged at the prefix, say) is replaced as well."""
    mr = repo.commits.get(job.base).metarange
    held = replaced_keys(repo.committed, mr, pfx)
    if staged_on is not None:
        with repo.staging.read_txn() as txn:  # the branch as its reader sees it
            view = (item[0] for item in repo.layers(staged_on, txn).iter(pfx))
            held = sorted(set(held) | set(_at_or_under(view, pfx)))
    gone: list = []
    n = 0
    for k in held:
        if k not in keys:
            gone.append((k, None))
            if len(gone) >= BATCH:
                _stage(repo, job.token, gone)
                n, gone = n + len(gone), []
    if gone:
        _stage(repo, job.token, gone)
    return n + len(gone)


def _resume(repo, job: ImportJob, items: list, key_of) -> tuple[list, int, int]:
    """Items still to upload; entries of files that changed or vanished since the
    interrupted run are taken out of its token."""
    if not job.resumed:
        return items, 0, 0
    area = repo.staging
    todo, kept = [], []
    keys = set()
    with area.read_txn() as txn:
        for item in items:
            key = key_of(item)
            keys.add(key)
            e = _same_file(area.lookup(txn, [job.token], key), item[2]) \
                if item[1] == "file" else None
            if e is not None:
                kept.append((item, e))
            else:
                todo.append(item)
        stale = [k for k, _ in area.iter_token(txn, job.token) if k not in keys]
    if stale:
        area.write(lambda txn: area.delete_from_token(txn, job.token, stale))
    if kept and time.time() - job.started > REFRESH_AGE:
        gone = _claim_uploaded(repo, kept)
        todo += [item for item, _ in kept if id(item) in gone]
        kept = [(item, e) for item, e in kept if id(item) not in gone]
    reused, reused_bytes = len(kept), sum(item[2].st_size for item, _ in kept)
    log.info("resumed import: %d file(s) already uploaded, %d to do, %d gone from the source",
             reused, len(todo), len(stale))
    return todo, reused, reused_bytes


def _claim_uploaded(repo, kept: list) -> set[int]:
    """An interrupted import resumed more than an hour after it began: claim what its
    earlier runs uploaded (GC elsewhere may have deleted it, or may be marking it
    now: gravfs.store.base); ids of the items whose content must be uploaded again."""
    objects: dict[str, list[int]] = {}
    for item, e in kept:
        for obj in live_addresses(e, repo.store.url, repo.data):
            objects.setdefault(obj, []).append(id(item))
    gone = {i for obj in repo.store.claim_many(objects) for i in objects[obj]}
    if gone:
        log.warning("resumed import: the content of %d file(s) uploaded by its earlier run "
                    "is gone from the store (garbage collection); uploading it again",
                    len(gone))
    return gone


def entry_of(data, src: str, rel: str, kind: str, st: os.stat_result) -> EntryInfo:
    """The entry ``gravfs import`` stages for one listed item (uploading a file's content);
    ``data`` None: a file is referenced by its ``file://`` URL instead (byref.md)."""
    if not TIME_NS_MIN <= st.st_mtime_ns <= TIME_NS_MAX:
        log.warning("%s: its mtime (%d s since 1970) is outside the years gravfs records "
                    "(1677-2262); it is kept as the nearest", os.path.join(src, rel),
                    st.st_mtime_ns // 10**9)
    if kind == "file" and data is None:
        path = os.path.join(src, rel)
        try:
            url = "file://" + path.encode("utf-8", "surrogateescape").decode("utf-8")
        except UnicodeDecodeError:
            raise GravfsError(f"cannot import {path!r} by reference: its name is not "
                              "UTF-8") from None
        return EntryInfo(address=url, size=st.st_size, mtime_ns=st.st_mtime_ns, mode=st.st_mode,
                         kind=KIND_FILE, e_tag=f"{st.st_mtime_ns:x}-{st.st_size:x}",
                         address_type=ADDRESS_FULL)
    if kind == "file":
        address, size, st = put_steady(data, os.path.join(src, rel), "no longer a regular "
                                        "file (replaced since it was listed)")
        return EntryInfo(address=address, size=size, mtime_ns=st.st_mtime_ns, mode=st.st_mode,
                         kind=KIND_FILE)
    if kind == "symlink":
        target = os.readlink(os.path.join(src, rel))
        return EntryInfo(address="", size=len(target.encode()), mtime_ns=st.st_mtime_ns,
                         mode=st.st_mode, kind=KIND_SYMLINK, symlink_target=target)
    return EntryInfo(address="", size=0, mtime_ns=st.st_mtime_ns, mode=st.st_mode,
                     kind=KIND_DIRECTORY)


def _bulk_data(repo):
    """(data objects the import uploads through, the batched store or None).

    On a plain local store, uploads skip both fsyncs each object's write does (its
    bytes, its directory): a batch's objects are made durable in one pass and only
    then renamed into place, before the batch is staged
    (gravfs.store.local.DeferredLocalStore; two fsyncs per tiny file were most of an
    import's time). Elsewhere: the repository's own."""
    if type(repo.store) is not LocalStore:
        return repo.data, None
    bulk = DeferredLocalStore(repo.store.root)
    return DataObjects(bulk, repo.data.tier, repo.data.tmp_dir), bulk


def _stage(repo, token: str, batch: list, bulk=None) -> None:
    if bulk is not None:
        bulk.publish()  # what the batch references is durable before it is staged
    repo.staging.put_token(token, encode_items(batch))
    crash_point("import:batch-staged")
