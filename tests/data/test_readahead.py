"""A sequential reader keeps the kernel reading ahead of it (gravfs.data.readahead)."""

from __future__ import annotations

import os

import pytest

from gravfs.data import readahead
from gravfs.data.readahead import AHEAD, PIECE, ReadAhead
from tests.fuse_util import wait_for
from tests.pages_util import drop_pages, pages_droppable, resident_pages

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def test_each_step_asks_only_what_no_earlier_step_did(monkeypatch):
    asked = []
    monkeypatch.setattr(readahead.os, "posix_fadvise",
                        lambda fd, off, n, advice: asked.append((fd, off, n, advice)))
    ahead = ReadAhead(7)
    for end in (MiB, 2 * MiB, 3 * MiB):
        ahead.past(end)
        # everything from the first step's end to AHEAD past this one, once, in order
        assert [a[1] for a in asked] == list(range(MiB, end + AHEAD, PIECE))
    assert all(fd == 7 and advice == os.POSIX_FADV_WILLNEED for fd, _, _, advice in asked)
    assert all(n == PIECE for _, _, n, _ in asked)  # each within one read-ahead window


def test_advice_a_descriptor_refuses_is_no_error():
    r, w = os.pipe()  # posix_fadvise on a pipe: ESPIPE
    try:
        ReadAhead(r).past(MiB)
    finally:
        os.close(r)
        os.close(w)


def _bytes_read_from_storage() -> int:
    """This process's reads from the disk (block I/O it submitted: /proc/self/io)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise AssertionError("/proc/self/io has no read_bytes")


def test_what_is_asked_for_is_read_from_the_disk_and_no_more(tmp_path):
    """The window after the reader is read from the disk without anyone reading it;
    the rest of the file is not. Counted as the disk reads the advice submits (in this
    process, before it returns), not as pages found cached afterwards: under a full
    page cache the kernel may evict such never-touched pages again at once (a run of
    the whole suite beside a CPU hog waited 30 s for a window that never stayed)."""
    if not pages_droppable(str(tmp_path)):
        pytest.skip("tmpfs pages are its storage: none to drop")
    if not os.path.exists("/proc/self/io"):
        pytest.skip("this kernel keeps no per-process I/O accounting (/proc/self/io)")
    path = tmp_path / "big"
    size = AHEAD + 8 * MiB
    path.write_bytes(os.urandom(size))
    drop_pages(str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert resident_pages(fd) == 0
        before = _bytes_read_from_storage()
        ReadAhead(fd).past(MiB)  # [1 MiB, 1 MiB + AHEAD)
        read = _bytes_read_from_storage() - before
        assert AHEAD <= read < size - MiB, read  # the last 7 MiB were not asked for
        wait_for(lambda: resident_pages(fd) > 0)  # (the reads land in the page cache)
        assert resident_pages(fd) < size // PAGE
    finally:
        os.close(fd)
