"""Reads that the kernel's caches answer at once, or not at all (gravfs.data.nowait)."""

from __future__ import annotations

import os

import pytest

from gravfs.data import nowait
from tests.pages_util import NO_CACHED_OPENS, answers_after_drops, cached_opens_work, pages_droppable


def test_a_cached_file_opens_and_reads_without_waiting(tmp_path):
    if not cached_opens_work(str(tmp_path)):
        pytest.skip(NO_CACHED_OPENS)
    path = tmp_path / "f"
    data = os.urandom(10000)
    path.write_bytes(data)
    assert path.read_bytes() == data  # walk and pages cached
    fd = nowait.open_cached(str(path))
    assert fd is not None, "openat2(RESOLVE_CACHED) refused a path just walked"
    try:
        assert bytes(nowait.pread_cached(fd, 5000, 100)) == data[100:5100]
        assert nowait.pread_cached(fd, 100, len(data) - 50) is None  # short: not an answer
        if not pages_droppable(str(path)):
            pytest.skip("tmpfs pages are its storage: none to drop")
        answers = answers_after_drops(str(path), lambda: nowait.pread_cached(fd, 4096, 0))
        assert None in answers  # would wait for the disk
        assert all(bytes(a) == data[:4096] for a in answers if a is not None)
        assert os.pread(fd, 4096, 0) == data[:4096]  # (the blocking read still works)
    finally:
        os.close(fd)


def test_a_missing_file_is_none_and_the_path_stays_usable(tmp_path):
    if not cached_opens_work(str(tmp_path)):
        pytest.skip(NO_CACHED_OPENS)
    assert nowait.open_cached(str(tmp_path / "absent")) is None
    (tmp_path / "there").write_bytes(b"x")
    fd = nowait.open_cached(str(tmp_path / "there"))  # ENOENT did not switch it off
    assert fd is not None
    os.close(fd)


def test_without_openat2_every_open_is_declined(tmp_path, monkeypatch):
    """A kernel or a seccomp filter without openat2 (ENOSYS): declined, and not asked again."""
    import ctypes
    import errno

    calls = []

    def enosys(*args):
        calls.append(args)
        ctypes.set_errno(errno.ENOSYS)
        return -1

    monkeypatch.setattr(nowait, "_call", enosys)
    (tmp_path / "f").write_bytes(b"x")
    assert nowait.open_cached(str(tmp_path / "f")) is None
    assert nowait.open_cached(str(tmp_path / "f")) is None
    assert len(calls) == 1 and nowait._call is None
