"""A local copy's content pass made as it is written: used only while every change was
an append at the end of what was written (gravfs.fuse.openfiles, gravfs.data.contentpass)."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings, strategies as st

from gravfs.data import objects, sparse
from gravfs.data.objects import DataObjects, address_of
from gravfs.fuse import openfiles
from gravfs.fuse.localfiles import LocalFiles
from gravfs.fuse.openfiles import OpenFile
from gravfs.store.local import LocalStore

GRID = 4096
FOLLOW_FROM = 2 * GRID


@pytest.fixture
def small_sizes(monkeypatch):
    monkeypatch.setattr(sparse, "GRID", GRID)
    monkeypatch.setattr(sparse, "_ZERO_GRID", bytes(GRID))
    monkeypatch.setattr(sparse, "MIN_HOLE", 4 * GRID)
    monkeypatch.setattr(openfiles, "FOLLOW_FROM", FOLLOW_FROM)


def _whole_pass(of: OpenFile) -> tuple[str, int, bool]:
    data = os.pread(of.fd, os.fstat(of.fd).st_size + 1, 0)
    run = best = 0
    for i in range(0, len(data), GRID):
        chunk = data[i:i + GRID]
        run = run + len(chunk) if chunk.count(0) == len(chunk) else 0
        best = max(best, run)
    return hashlib.sha256(data).hexdigest(), len(data), best >= 4 * GRID


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3 * GRID), st.booleans()),
    st.tuples(st.just("o_append"), st.integers(1, 2 * GRID), st.booleans()),
    st.tuples(st.just("write_at"), st.integers(0, 8 * GRID), st.integers(1, GRID)),
    st.tuples(st.just("truncate"), st.integers(0, 8 * GRID), st.booleans()),
    st.tuples(st.just("truncate0"), st.just(0), st.just(0)),
), max_size=14)


@pytest.mark.usefixtures("small_sizes")
@settings(max_examples=80, deadline=None)
@given(ops)
def test_the_pass_made_while_writing_is_the_files_or_none(tmp_path_factory, steps):
    local = LocalFiles(str(tmp_path_factory.mktemp("files")))
    of = OpenFile(None, None, local)
    of.materialize(None)
    clean = True  # every change so far an append at the end, since the last empty state
    try:
        for op, a, b in steps:
            size = os.fstat(of.fd).st_size
            if op == "append":
                of.pwrite(bytes(a) if b else os.urandom(a), size)
            elif op == "o_append":
                of.pwrite(bytes(a) if b else os.urandom(a), None)
            elif op == "write_at":
                of.pwrite(os.urandom(b), a)
                clean = clean and a == size
            elif op == "truncate":
                of.truncate(None, a)
                clean = (clean and a == size) or a == 0
            else:
                of.truncate(None, 0)
                clean = True
            size = os.fstat(of.fd).st_size
            if clean and size > FOLLOW_FROM:
                assert of.following is not None  # in use whenever it can be
            if of.following is not None and of.in_order == size:
                assert of.following.finish(size) == _whole_pass(of)
            if not clean:
                assert of.in_order == -1 and of.following is None
    finally:
        of.close()


def test_a_big_file_written_in_order_is_stored_without_reading_it_again(tmp_path, monkeypatch):
    """The close stores it under the address of its bytes, from the pass made while it
    was written (the whole-file pass is not run); out of order, the whole-file pass."""
    data = DataObjects(LocalStore(str(tmp_path / "store"), fsync=False), None,
                       str(tmp_path / "tmp"))
    whole_passes = []
    real = objects.content_pass
    monkeypatch.setattr(objects, "content_pass", lambda fd: whole_passes.append(fd) or real(fd))
    local = LocalFiles(str(tmp_path / "files"))
    os.mkdir(tmp_path / "files")
    body = os.urandom(openfiles.FOLLOW_FROM + 3 * sparse.GRID + 5)
    for in_order in (True, False):
        of = OpenFile(None, None, local)
        of.materialize(data)
        try:
            step = 256 << 10
            offsets = list(range(0, len(body), step))
            if not in_order:
                offsets.reverse()
            for off in offsets:
                of.pwrite(body[off:off + step], off)
            entry = of.upload(data)
        finally:
            of.close()
        assert entry.address == address_of(hashlib.sha256(body).hexdigest())
        assert data.store.get(entry.address) == body
        assert len(whole_passes) == (0 if in_order else 1)


def test_a_big_files_last_close_moves_it_to_pending_uploads(tmp_path, monkeypatch):
    """Its last close (and only that) moves a big dense file's local copy into pending
    uploads under the address of its bytes; an fsync or a close with other writers
    left stores it and keeps the copy, as does a file stored sparse."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    os.mkdir(tmp_path / "tmp")
    data = DataObjects(store, None, str(tmp_path / "tmp"), pending_dir=str(tmp_path / "pending"))
    pause = str(tmp_path / "pause")
    open(pause, "w").close()  # uploads wait: what is pending stays so
    monkeypatch.setenv(objects.PAUSE_ENV, pause)
    data.start_uploader(1)
    local = LocalFiles(str(tmp_path / "files"))
    os.mkdir(tmp_path / "files")
    try:
        body = os.urandom(openfiles.WRITEBACK_MAX + 5)
        address = address_of(hashlib.sha256(body).hexdigest())
        for durable, last, moved in ((True, True, False), (False, False, False),
                                     (False, True, True)):
            of = OpenFile(None, None, local)
            of.materialize(data)
            try:
                of.pwrite(body, 0)
                path = of.path
                of.handles = 1 if last else 2  # (the closing one, and another writer)
                entry = of.upload(data, durable=durable)
                assert entry.address == address and entry.size == len(body)
                assert of.materialized is not moved and os.path.exists(path) is not moved
                assert (data.pending_addresses() == [address]) is moved
                assert store.size(address) == (None if moved else len(body))
                if not moved:
                    store.delete(address)
            finally:
                of.close()
        holes = OpenFile(None, None, local)
        holes.materialize(data)
        try:
            holes.pwrite(body[:4096], 0)
            holes.pwrite(body[:4096], openfiles.WRITEBACK_MAX + 2 * sparse.MIN_HOLE)
            entry = holes.upload(data)
            assert sparse.is_sparse(entry.address) and holes.materialized
        finally:
            holes.close()
    finally:
        os.unlink(pause)
        data.stop_uploader(drain=False)


@pytest.mark.parametrize("size, sparse_tail", [(5, False), (openfiles.WRITEBACK_MAX + 5, False),
                                                (openfiles.WRITEBACK_MAX + 5, True)])
def test_a_local_copy_whose_name_was_removed_is_stored_from_its_descriptor(tmp_path, size,
                                                                           sparse_tail):
    """The files directory deleted while files are open (by hand, by a cleaner of old
    files): the close failed with ENOENT and the release then staged the content staged
    before (a new file: empty), without a word. The content is still in the descriptor:
    it is copied to a new local file (the directory made again) and stored, whether it
    moves to pending uploads (small; a big file's last close) or is stored in place (a
    big one with another writer, holes kept)."""
    from gravfs.store.tier import LocalTier

    store = LocalStore(str(tmp_path / "store"), fsync=False)
    os.mkdir(tmp_path / "tmp")
    data = DataObjects(store, LocalTier(store, str(tmp_path / "cache"), 1 << 30),
                       str(tmp_path / "tmp"), pending_dir=str(tmp_path / "pending"))
    data.start_uploader(1)
    files = tmp_path / "files"
    local = LocalFiles(str(files))
    os.mkdir(files)
    of = OpenFile(None, None, local)
    try:
        of.materialize(data)
        body = os.urandom(size)
        of.pwrite(body, 0)
        if sparse_tail:
            os.ftruncate(of.fd, size + (8 << 20))  # a hole: stored sparse, in place
            body += bytes(8 << 20)
        of.handles = 2 if sparse_tail else 1
        for name in os.listdir(files):
            os.unlink(files / name)
        os.rmdir(files)
        entry = of.upload(data)
        assert entry.size == len(body)
        data.flush_pending()
        assert data.read(entry.address) == body
        assert os.path.isdir(files)
        assert of.materialized is sparse_tail  # (kept as the local copy there)
        if sparse_tail:
            assert os.path.dirname(of.path) == str(files) and os.pread(of.fd, 10, 0) == body[:10]
    finally:
        of.close()
        data.stop_uploader()
