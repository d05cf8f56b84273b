"""A file's content pass (digest, zero grid chunks), made at once or following a writer."""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager

import pytest
from hypothesis import given, settings, strategies as st

from gravfs.data import contentpass, readahead, sparse
from gravfs.data.contentpass import ContentPass, FollowingPass, content_pass, copying_pass
from tests.fuse_util import wait_for

GRID = 4096  # the tests' grid (the real one is 1 MiB): small files, many chunks
MIN_HOLE = 4 * GRID


@pytest.fixture
def small_grid(monkeypatch):
    monkeypatch.setattr(sparse, "GRID", GRID)
    monkeypatch.setattr(sparse, "_ZERO_GRID", bytes(GRID))
    monkeypatch.setattr(sparse, "MIN_HOLE", MIN_HOLE)


def oracle(data: bytes) -> tuple[str, int, bool]:
    """What the pass must say: SHA-256, size, and whether MIN_HOLE bytes of whole
    all-zero grid chunks (counted from the file's start) come in a row."""
    run = best = 0
    for i in range(0, len(data), GRID):
        chunk = data[i:i + GRID]
        run = run + len(chunk) if chunk.count(0) == len(chunk) else 0
        best = max(best, run)
    return hashlib.sha256(data).hexdigest(), len(data), best >= MIN_HOLE


@contextmanager
def _following(directory):
    """A new file and a pass following it; both let go at the end."""
    fd = os.open(os.path.join(directory, "f"), os.O_RDWR | os.O_CREAT, 0o600)
    p = FollowingPass(fd, "f")
    try:
        yield fd, p
    finally:
        p.abandon()
        os.close(fd)


# bytes of a few kinds, so that zero runs start and end inside grid chunks and on them
pieces = st.lists(st.one_of(st.binary(min_size=1, max_size=3 * GRID),
                            st.integers(1, 6 * GRID).map(bytes)), max_size=12)


@pytest.mark.usefixtures("small_grid")
@settings(max_examples=60, deadline=None)
@given(pieces)
def test_the_pass_over_a_file_is_its_digest_and_its_zero_runs(tmp_path_factory, parts):
    data = b"".join(parts)
    path = tmp_path_factory.mktemp("pass") / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert content_pass(fd) == oracle(data)
    finally:
        os.close(fd)


@pytest.mark.usefixtures("small_grid")
@settings(max_examples=60, deadline=None)
@given(pieces, st.lists(st.integers(0, 12), max_size=3))
def test_a_pass_following_in_order_writes_says_what_the_whole_pass_says(
        tmp_path_factory, parts, finish_after):
    """Written piece by piece (each write told to the pass), finished after some of
    them and at the end: every finish covers exactly the bytes written so far."""
    with _following(tmp_path_factory.mktemp("follow")) as (fd, p):
        written = b""
        for i, part in enumerate(parts):
            os.pwrite(fd, part, len(written))
            written += part
            p.advance(len(written))
            if i in finish_after:
                assert p.finish(len(written)) == oracle(written)
        assert p.finish(len(written)) == oracle(written)


@pytest.mark.usefixtures("small_grid")
def test_finish_is_refused_for_a_size_other_than_the_bytes_written_in_order(tmp_path):
    with _following(tmp_path) as (fd, p):
        os.pwrite(fd, os.urandom(3 * GRID), 0)
        p.advance(3 * GRID)
        assert p.finish(2 * GRID) is None
        assert p.finish(3 * GRID) == oracle(os.pread(fd, 3 * GRID, 0))


@pytest.mark.usefixtures("small_grid")
def test_an_abandoned_pass_answers_nothing_and_lets_its_descriptor_go(tmp_path):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    p = FollowingPass(fd, "f")
    own = p._fd  # its own descriptor of the same file
    assert own != fd and os.path.samestat(os.fstat(own), os.fstat(fd))
    os.pwrite(fd, os.urandom(20 * GRID), 0)
    p.advance(20 * GRID)
    p.abandon()
    assert p.finish(20 * GRID) is None
    wait_for(lambda: p._fd == -1)  # closed by the thread as it ends
    assert p._thread is None
    p.advance(21 * GRID)  # a write after: nothing restarts
    assert p._thread is None and p._fd == -1
    os.close(fd)


@pytest.mark.usefixtures("small_grid")
def test_an_idle_pass_ends_its_thread_and_starts_another_when_writes_resume(
        tmp_path, monkeypatch):
    monkeypatch.setattr(contentpass, "IDLE_EXIT", 0.05)
    with _following(tmp_path) as (fd, p):
        first = os.urandom(5 * GRID)
        os.pwrite(fd, first, 0)
        p.advance(len(first))
        wait_for(lambda: p._thread is None)  # hashed what it could, then idle
        assert p._pass.size == 5 * GRID
        more = bytes(2 * GRID) + os.urandom(GRID + 7)
        os.pwrite(fd, more, len(first))
        p.advance(len(first) + len(more))
        assert p.finish(len(first) + len(more)) == oracle(first + more)


def test_pieces_fed_at_once_and_one_by_one_agree():
    """ContentPass.copy: a finish works on a copy, the pass goes on from where it was."""
    a = ContentPass()
    a.feed(b"x" * 10)
    b = a.copy()
    b.feed(b"y")
    a.feed(b"z")
    assert a.result()[0] == hashlib.sha256(b"x" * 10 + b"z").hexdigest()
    assert b.result()[0] == hashlib.sha256(b"x" * 10 + b"y").hexdigest()


@pytest.mark.usefixtures("small_grid")
def test_a_pass_over_a_whole_file_keeps_the_disk_reading_ahead_of_it(tmp_path, monkeypatch):
    """After each whole grid chunk (more may follow) the pass tells how far it has
    read; a pass following a writer reads what was just written, and asks nothing."""
    told = []
    monkeypatch.setattr(readahead.ReadAhead, "past", lambda self, end: told.append(end))
    data = os.urandom(3 * GRID + 100)
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    out = os.open(tmp_path / "copy", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert content_pass(fd) == oracle(data)
        assert told == [GRID, 2 * GRID, 3 * GRID]
        told.clear()
        assert copying_pass(fd, out) == oracle(data)
        assert told == [GRID, 2 * GRID, 3 * GRID]
        assert (tmp_path / "copy").read_bytes() == data
    finally:
        os.close(fd)
        os.close(out)
    told.clear()
    with _following(tmp_path / "w" if (tmp_path / "w").mkdir() is None else None) as (wfd, p):
        os.pwrite(wfd, data, 0)
        p.advance(len(data))
        assert p.finish(len(data)) == oracle(data)
    assert told == []
