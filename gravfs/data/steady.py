"""Storing a local file that a writer may change while it is read (an import's source,
a `gravfs put` of a log being written): a read that straddles a write would commit half
old, half new bytes, a torn file, so such a read is done again."""

from __future__ import annotations

import logging
import os
from typing import BinaryIO

from gravfs.data.objects import open_regular

log = logging.getLogger(__name__)

SMALL_FILE = 256 << 10  # read into memory whole (one open instead of two)
READ_TRIES = 3  # reads of a file that changes while it is read


def _version(st: os.stat_result) -> tuple:
    """What changes with any write to, or replacement of, a file."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def put_steady(data, path: str, what: str = "not a regular file", small: int = SMALL_FILE
               ) -> tuple[str, int, os.stat_result]:
    """put_file, read again while the file changes under the read: (address, size, the
    stat the read matches). After READ_TRIES changing reads the last is kept, with a
    warning (as tar's "file changed as we read it"). ``what``: the error for a path that
    is no regular file (see open_regular); ``small``: see put_file."""
    for _ in range(READ_TRIES):
        f, before = open_regular(path, what)
        with f:
            address, size = put_file(data, path, before, f, small)
        after = os.stat(path)
        if _version(after) == _version(before) and size == after.st_size:
            return address, size, before
        log.info("%s changed while it was read; reading it again", path)
    log.warning("%s kept changing while it was read (%d reads): the last read is kept, "
                "which may mix old and new bytes", path, READ_TRIES)
    return address, size, after


def put_file(data, path: str, st: os.stat_result, f: BinaryIO, small: int = SMALL_FILE
              ) -> tuple[str, int]:
    """Store a file's content from ``f`` (opened on path): one of at most ``small`` bytes
    read once into memory (an import's many small files: one open instead of two), any
    other by put_snapshot (a writer at work leaves no damaged object)."""
    if st.st_size <= small:
        content = f.read(small + 1)
        if len(content) <= small:
            return data.put_bytes(content)
    return data.put_snapshot(f.fileno(), path)
