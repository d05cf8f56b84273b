"""Local cache of the record IDs of ranges, so a rewrite hashes only what changed.

A range ID is h(valueRecordID_1 || ... || valueRecordID_n) and each
valueRecordID costs three SHA-256 calls, a third of the CPU of rewriting a
range.  When a range is rewritten because of a few changes, the records it
keeps have the IDs they had: the writer files the concatenated record IDs
of every range it writes here, and a rewrite reads them back for the
records it takes unchanged from an old range.

The cache is derived data and checks itself: a file is used only if it hashes
to the range ID it is filed under and has 32 bytes per record of the range,
so a damaged or foreign file is never believed (it is removed and the IDs are
computed).  That trusts a range to hold the records its ID names, as copying
it by ID does.  Files are written without fsync (losing one costs only
hashing) under <dir>/<id[:2]>/<id>; the oldest are removed when the
directory outgrows its byte budget.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading

from gravfs.store.modes import PRIVATE_FILE, make_dir

log = logging.getLogger(__name__)

DEFAULT_BYTES = 1 << 30
RECORD_ID_SIZE = 32


class RecordIDs:
    """Concatenated valueRecordIDs by range ID under ``root``, at most ~``max_bytes``."""

    def __init__(self, root: str, max_bytes: int = DEFAULT_BYTES):
        self.root = root
        self.max_bytes = max_bytes
        self._added = 0
        self._lock = threading.Lock()

    def _path(self, range_id: str) -> str:
        return os.path.join(self.root, range_id[:2], range_id)

    def get(self, range_id: str, count: int) -> bytes | None:
        """The record IDs of the range's ``count`` records, or None if not known here."""
        path = self._path(range_id)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        if len(data) != count * RECORD_ID_SIZE or hashlib.sha256(data).hexdigest() != range_id:
            log.warning("record-ID cache: %s does not match its range; removed", path)
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        return data

    def put(self, range_id: str, data: bytes) -> None:
        """File the record IDs of a range just written (best effort)."""
        path = self._path(range_id)
        tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
            except FileNotFoundError:  # the first of its subdirectory (not asked every time)
                make_dir(os.path.dirname(path))  # private, as all of the state dir
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
            with open(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            log.debug("record-ID cache: cannot write %s: %s", path, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        with self._lock:
            self._added += len(data)
            prune = self._added > self.max_bytes // 8
            if prune:
                self._added = 0
        if prune:
            self.prune()

    def prune(self) -> int:
        """Remove the oldest files until the directory is within 80% of its budget."""
        files = []
        try:
            for sub in os.scandir(self.root):
                if not sub.is_dir():
                    continue
                for e in os.scandir(sub.path):
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    files.append((st.st_mtime, st.st_size, e.path))
        except OSError:
            return 0
        total = sum(f[1] for f in files)
        if total <= self.max_bytes:
            return 0
        files.sort()
        removed = 0
        for _, size, path in files:
            if total <= self.max_bytes * 0.8:
                break
            try:
                os.unlink(path)
            except OSError:
                continue
            total -= size
            removed += 1
        log.debug("record-ID cache: removed %d old file(s) from %s", removed, self.root)
        return removed


def split(data: bytes) -> list[bytes]:
    """The 32-byte record IDs of a get() result, as a list."""
    return [data[i:i + RECORD_ID_SIZE] for i in range(0, len(data), RECORD_ID_SIZE)]
