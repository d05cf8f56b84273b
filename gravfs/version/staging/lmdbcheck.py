"""Checking the staging database before LMDB maps it: its file, with plain reads, and
the disk it is on (``check_disk``: not a network filesystem).

LMDB maps its data file and trusts the meta pages: a file cut short makes the
first access past its end kill the process with SIGBUS, and an emptied or
deleted one is silently set up as a new, empty database (every staged change
gone without a word). So before opening, ``check_data_file`` reads the two meta
pages (pages 0 and 1: ``MDB_meta`` after a 16-byte page header) and requires the
file to hold every page the newer one counts, ``(last_pg + 1) * page size``
bytes; and a marker file beside the database, written once it has opened, says
that the data file must exist and must not be empty.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Optional

from gravfs.errors import GravfsError
from gravfs.mounts import NETWORK_TYPES, mount_holding

DATA_FILE = "data.mdb"
MARKER = "gravfs-staging"  # beside data.mdb once it has opened: the file must exist
MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
PAGE_HEADER = 16  # mp_pgno (8), mp_pad (2), mp_flags (2), mp_lower/upper (4)
# MDB_meta on 64-bit builds: magic u32, version u32, address (8), mapsize (8),
# two MDB_db of 48 bytes (the first one's md_pad holds the page size), last_pg (8), txnid (8)
_META = struct.Struct("=IIQQ48s48sQQ")
# MDB_db: md_pad (the page size in the free DB), md_flags, md_depth, branch, leaf and
# overflow page counts, entries, md_root
DB_RECORD = struct.Struct("=IHHQQQQQ")


class StagingDamagedError(GravfsError):
    """The staging database cannot be used as it is; names the file and the repair."""

    exit_code = 7


@dataclass(frozen=True)
class Meta:
    page_size: int
    map_size: int
    last_page: int
    txnid: int
    main_root: int  # root page of the main DB (it lists the named DBs)

    @property
    def needed_bytes(self) -> int:
        """Size the data file has at least when every page it counts is there."""
        return (self.last_page + 1) * self.page_size


def parse_meta(buf: bytes) -> Optional[Meta]:
    """The MDB_meta of one meta page (its first bytes), or None when it is not one."""
    if len(buf) < PAGE_HEADER + _META.size:
        return None
    magic, version, _addr, mapsize, free_db, main_db, last_pg, txnid = \
        _META.unpack_from(buf, PAGE_HEADER)
    if magic != MAGIC or version != DATA_VERSION:
        return None
    psize = DB_RECORD.unpack(free_db)[0]
    if psize < 256 or psize > 1 << 20 or psize & (psize - 1):
        return None
    return Meta(psize, mapsize, last_pg, txnid, DB_RECORD.unpack(main_db)[-1])


def read_metas(path: str) -> list[Meta]:
    """The valid meta pages of an LMDB data file, newest first."""
    try:
        with open(path, "rb") as f:
            m0 = parse_meta(f.read(PAGE_HEADER + _META.size))
            if m0 is None:
                return []
            f.seek(m0.page_size)
            m1 = parse_meta(f.read(PAGE_HEADER + _META.size))
    except FileNotFoundError:
        return []
    metas = [m for m in (m0, m1) if m is not None]
    return sorted(metas, key=lambda m: m.txnid, reverse=True)


def read_meta(path: str) -> tuple[int, Optional[Meta], str]:
    """(file size, the meta page LMDB would use or None, what is wrong or "").

    Another process may be committing meanwhile: LMDB writes a transaction's pages
    before its meta page, so the meta pages are read first and the size after them
    (the other order sees a new meta against the old size and calls a growing file
    cut short); a problem is read once more, so that a meta page read while it was
    being written is not one."""
    found = _read_meta_once(path)
    if found[2]:
        found = _read_meta_once(path)
    return found


def _read_meta_once(path: str) -> tuple[int, Optional[Meta], str]:
    try:
        with open(path, "rb") as f:
            m0 = parse_meta(f.read(PAGE_HEADER + _META.size))
            m1 = None
            if m0 is not None:
                f.seek(m0.page_size)
                m1 = parse_meta(f.read(PAGE_HEADER + _META.size))
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return 0, None, "the file is missing"
    if size == 0:
        return 0, None, "the file is empty"
    if m0 is None:
        return size, None, "not an LMDB database: no valid meta page at its start"
    if m1 is None:
        if size < 2 * m0.page_size:
            return size, m0, f"truncated to {size} bytes, shorter than its two meta pages"
        return size, m0, "its second meta page is damaged"
    meta = m1 if m1.txnid > m0.txnid else m0  # as LMDB picks
    if size < meta.needed_bytes:
        return size, meta, f"truncated to {size} bytes; its pages need {meta.needed_bytes}"
    return size, meta, ""


def check_data_file(directory: str) -> Optional[str]:
    """What is wrong with the staging database in ``directory``, or None.

    Without the marker (a new database, or one from before the marker existed)
    a missing or empty file is fine (LMDB creates it), and so is one shorter
    than its two meta pages (LMDB may be writing them; it reads the header with
    pread and reports a short one itself); only a file cut short of the pages
    its meta counts is refused, since LMDB would fault on it.
    """
    marked = os.path.exists(os.path.join(directory, MARKER))
    size, meta, problem = read_meta(os.path.join(directory, DATA_FILE))
    if not problem or marked:
        return problem or None
    if meta is not None and problem.startswith("truncated") and size >= 2 * meta.page_size:
        return problem
    return None


def mark(directory: str) -> None:
    """Record that the database in ``directory`` exists (see module doc)."""
    path = os.path.join(directory, MARKER)
    if os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(f"gravfs staging database: {DATA_FILE} here must exist and not be empty; "
                "if it is damaged run 'gravfs fsck --repair-staging'\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def damaged(directory: str, problem: str) -> StagingDamagedError:
    """The one-line error for a damaged database in ``directory``."""
    return StagingDamagedError(
        f"staging database {os.path.join(directory, DATA_FILE)} is damaged ({problem}); "
        "run 'gravfs fsck --repair-staging' to set it aside and keep the staged changes "
        "that can still be read")


def check_disk(path: str, mountinfo: Optional[str] = None) -> None:
    """Refuse a staging directory on a network filesystem (an NFS home's default state
    dir, ~/.local/state/gravfs): LMDB keeps its lock table in shared memory of a file,
    which hosts do not share, so two hosts using one state dir would corrupt the staged
    changes; LMDB's own documentation rules such filesystems out."""
    m = mount_holding(path, mountinfo)
    if m is None or m.fstype not in NETWORK_TYPES:
        return
    user = os.environ.get("USER") or str(os.getuid())
    raise GravfsError(
        f"the staging database {path} would be on a network filesystem ({m.fstype} at "
        f"{m.point}): it needs a local disk of this host (LMDB; hosts sharing it would "
        f"corrupt it); give --state-dir or GRAVFS_STATE_DIR a local directory, such as "
        f"/var/tmp/gravfs-{user}")
