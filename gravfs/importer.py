"""Import a local directory tree into a branch as one commit.

Files are hashed and uploaded by a thread pool (hashlib and boto3 release the
GIL), staged in batches, then committed. Modes, mtimes, symlinks and empty
directories are kept. Unreadable files stop the import with a clear error
before anything is committed (what was staged stays staged).
"""

from __future__ import annotations

import logging
import os
import stat as statmod
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Optional

from gravfs.committed.entry import KIND_DIRECTORY, KIND_FILE, KIND_SYMLINK, EntryInfo
from gravfs.errors import GravfsError
from gravfs.faults import crash_point
from gravfs.paths import to_key
from gravfs.progress import progress_bar

log = logging.getLogger(__name__)

BATCH = 5000


def scan(src: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, kind, stat) of everything under src, depth first."""
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
                stack.append(r)
            elif statmod.S_ISLNK(st.st_mode):
                yield r, "symlink", st
            elif statmod.S_ISREG(st.st_mode):
                yield r, "file", st
            else:
                log.warning("skipping %s: not a regular file, directory or symlink", r)


def import_tree(repo, src: str, branch: str, prefix: str = "", message: Optional[str] = None,
                progress: bool = True, workers: int = 8):
    """Stage every file under src at branch:prefix/..., then commit. Returns (commit, count)."""
    if not os.path.isdir(src):
        raise GravfsError(f"{src}: not a directory")
    repo.head(branch)  # fail early on a missing branch
    pfx = to_key(prefix)
    base = pfx + b"/" if pfx else b""
    items = list(scan(src))
    total_bytes = sum(st.st_size for _, kind, st in items if kind == "file")

    def entry_for(item) -> tuple[bytes, EntryInfo]:
        rel, kind, st = item
        key = base + to_key(rel)
        mode = st.st_mode
        if kind == "file":
            address, size = repo.data.put_path(os.path.join(src, rel))
            return key, EntryInfo(address=address, size=size, mtime_ns=st.st_mtime_ns, mode=mode,
                              kind=KIND_FILE)
        if kind == "symlink":
            target = os.readlink(os.path.join(src, rel))
            return key, EntryInfo(address="", size=len(target.encode()), mtime_ns=st.st_mtime_ns,
                              mode=mode, kind=KIND_SYMLINK, symlink_target=target)
        return key + b"/", EntryInfo(address="", size=0, mtime_ns=st.st_mtime_ns, mode=mode, kind=KIND_DIRECTORY)

    t0 = time.monotonic()
    with progress_bar(f"importing {src}", total=total_bytes, unit="bytes", enabled=progress) as bar, \
            ThreadPoolExecutor(max_workers=workers) as pool:
        batch = []
        for key, entry in pool.map(entry_for, items):
            batch.append((key, entry))
            if entry.kind == KIND_FILE:
                bar.advance(entry.size)
            if len(batch) >= BATCH:
                repo.stage(branch, batch)
                crash_point("import:batch-staged")
                batch = []
        if batch:
            repo.stage(branch, batch)
            crash_point("import:batch-staged")
    log.info("staged %d entries (%d bytes) in %.1fs", len(items), total_bytes, time.monotonic() - t0)
    crash_point("import:staged")
    msg = message or f"Import {os.path.abspath(src)}"
    commit = repo.commit(branch, msg, metadata={"import_source": os.path.abspath(src)})
    return commit, len(items)
