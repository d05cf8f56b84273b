"""Reading what is left of an LMDB file, page by page, without LMDB.

Salvaging a damaged staging database needs a reader that survives the damage:
LMDB maps the file (a page past a truncated end faults with SIGBUS) and
asserts on pages of the wrong kind (the process aborts). This one reads pages
with plain reads, checks every page it visits (inside the file, its own page
number in its header, the kind expected, every node inside the page) and skips
a subtree whose page is missing or damaged, so the rest of the tree is still
read. It reads the B-tree of one snapshot (one meta page), so it never mixes
in stale copies of pages the snapshot no longer uses. Only what gravfs's
staging stores is read: plain keys and values (values on overflow pages too)
and named databases; no DUPSORT.
"""

from __future__ import annotations

import os
import struct
from typing import Iterator, Optional

from gravfs.version.staging.lmdbcheck import DB_RECORD, PAGE_HEADER, Meta

P_BRANCH, P_LEAF, P_OVERFLOW = 0x01, 0x02, 0x04
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
P_INVALID = (1 << 64) - 1
_HDR = struct.Struct("=QHHHH")  # mp_pgno, mp_pad, mp_flags, mp_lower, mp_upper (mp_pages)
_NODE = struct.Struct("=HHHH")  # mn_lo, mn_hi, mn_flags, mn_ksize; key and data follow
_PGNO = struct.Struct("=Q")
_OVF_PAGES = struct.Struct("=I")  # overflow pages: mp_lower/mp_upper hold the page count


class SnapshotReader:
    """The trees of one snapshot of an LMDB data file; ``lost`` counts the pages
    (and the subtrees under them) that could not be read."""

    def __init__(self, path: str, meta: Meta):
        self.meta = meta
        self.psize = meta.page_size
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.lost = 0
        self.problems: list[str] = []

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> "SnapshotReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _lose(self, pgno: int, why: str) -> None:
        self.lost += 1
        if len(self.problems) < 5:
            self.problems.append(f"page {pgno}: {why}")

    def page(self, pgno: int, kinds: int) -> Optional[bytes]:
        """Page pgno if it is readable and of one of the kinds; else None (counted lost)."""
        if pgno < 2 or pgno > self.meta.last_page:
            self._lose(pgno, "page number out of range")
            return None
        off = pgno * self.psize
        if off + self.psize > self.size:
            self._lose(pgno, "past the end of the file")
            return None
        buf = os.pread(self.fd, self.psize, off)
        own, _pad, flags, lower, upper = _HDR.unpack_from(buf)
        if own != pgno or not flags & kinds:
            self._lose(pgno, "not the page its parent points to, overwritten or zeroed")
            return None
        if not flags & P_OVERFLOW and not (PAGE_HEADER <= lower <= upper <= self.psize):
            self._lose(pgno, "bad node bounds")
            return None
        return buf

    def _nodes(self, pgno: int, buf: bytes) -> Optional[list[tuple[int, int, int, bytes, int]]]:
        """(lo, hi, flags, key, data offset) of every node, or None when one is damaged."""
        _own, _pad, _flags, lower, upper = _HDR.unpack_from(buf)
        out = []
        for i in range((lower - PAGE_HEADER) // 2):
            (ptr,) = struct.unpack_from("=H", buf, PAGE_HEADER + 2 * i)
            if ptr < upper or ptr + _NODE.size > self.psize:
                self._lose(pgno, "node outside the page")
                return None
            lo, hi, flags, ksize = _NODE.unpack_from(buf, ptr)
            kstart = ptr + _NODE.size
            if kstart + ksize > self.psize:
                self._lose(pgno, "key outside the page")
                return None
            out.append((lo, hi, flags, buf[kstart:kstart + ksize], kstart + ksize))
        return out

    def _value(self, pgno: int, buf: bytes, node) -> Optional[bytes]:
        lo, hi, flags, _key, at = node
        size = lo | hi << 16
        if flags & F_DUPDATA:
            self._lose(pgno, "duplicate-sorted data (gravfs writes none)")
            return None
        if not flags & F_BIGDATA:
            if at + size > self.psize:
                self._lose(pgno, "value outside the page")
                return None
            return buf[at:at + size]
        if at + _PGNO.size > self.psize:
            self._lose(pgno, "overflow pointer outside the page")
            return None
        (ovf,) = _PGNO.unpack_from(buf, at)
        first = self.page(ovf, P_OVERFLOW)
        if first is None:
            return None
        (pages,) = _OVF_PAGES.unpack_from(first, 12)
        start = ovf * self.psize + PAGE_HEADER
        if PAGE_HEADER + size > pages * self.psize or start + size > self.size or \
                ovf + pages - 1 > self.meta.last_page:
            self._lose(ovf, "overflow value cut short")
            return None
        return os.pread(self.fd, size, start)

    def items(self, root: int) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, node flags, value) of the tree at root, in key order, skipping
        what cannot be read."""
        if root == P_INVALID:
            return  # an empty tree
        stack = [root]
        seen: set[int] = set()
        while stack:
            pgno = stack.pop()
            if pgno in seen:
                self._lose(pgno, "page reached twice (a loop)")
                continue
            seen.add(pgno)
            buf = self.page(pgno, P_BRANCH | P_LEAF)
            if buf is None:
                continue
            nodes = self._nodes(pgno, buf)
            if nodes is None:
                continue
            if _HDR.unpack_from(buf)[2] & P_BRANCH:
                # a branch node's child page number is in mn_lo, mn_hi and mn_flags
                stack.extend(lo | hi << 16 | fl << 32 for lo, hi, fl, _k, _a in reversed(nodes))
                continue
            for node in nodes:
                value = self._value(pgno, buf, node)
                if value is not None:
                    yield node[3], node[2], value

    def named_dbs(self) -> dict[bytes, int]:
        """name -> root page of every named database of the snapshot."""
        out = {}
        for key, flags, value in self.items(self.meta.main_root):
            if flags & F_SUBDATA and len(value) == DB_RECORD.size:
                out[key] = DB_RECORD.unpack(value)[-1]
        return out
