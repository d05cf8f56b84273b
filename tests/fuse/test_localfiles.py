"""The daemon's local copies: fresh names, and empty files made ahead by a thread."""

from __future__ import annotations

import logging
import os
import stat
import threading

import pytest

from gravfs.fuse import localfiles
from gravfs.fuse.localfiles import LocalFiles
from tests.fuse_util import wait_for


def _files(d) -> list[str]:
    """Names of the files in d and its subdirectories (the batches' directories)."""
    return sorted(n for _, _, names in os.walk(d) for n in names)


def _check_new(path: str, fd: int) -> None:
    st = os.fstat(fd)
    assert st.st_size == 0 and stat.S_IMODE(st.st_mode) == 0o600
    assert os.path.samestat(st, os.stat(path))


def test_without_the_thread_each_create_makes_a_new_file(tmp_path):
    local = LocalFiles(str(tmp_path))
    made = [local.create() for _ in range(3)]
    assert len({p for p, _ in made}) == 3
    for path, fd in made:
        _check_new(path, fd)
        os.close(fd)
    assert _files(tmp_path) == sorted(os.path.basename(p) for p, _ in made)  # none ahead


def test_creates_take_spares_and_the_thread_refills(tmp_path):
    local = LocalFiles(str(tmp_path), spares=6, refill_below=3)
    local.start()
    try:
        wait_for(lambda: len(_files(tmp_path)) == 6)
        ahead = _files(tmp_path)
        taken = [local.create() for _ in range(4)]
        for path, fd in taken:
            assert os.path.basename(path) in ahead
            _check_new(path, fd)
            os.pwrite(fd, b"content", 0)  # a taken file is the caller's
        # 2 left, below 3: the thread makes 4 more, the taken ones stay as they are
        wait_for(lambda: len(local._ready) == 6)
        assert len(_files(tmp_path)) == 10
        for path, fd in taken:
            assert os.pread(fd, 16, 0) == b"content"
            os.close(fd)
    finally:
        local.close()
    # the spares not taken are gone; the taken files are left to their callers
    assert _files(tmp_path) == sorted(os.path.basename(p) for p, _ in taken)


def test_threads_never_get_the_same_file(tmp_path):
    local = LocalFiles(str(tmp_path), spares=8, refill_below=4)
    local.start()
    got: list[tuple[str, int]] = []

    def take() -> None:
        for _ in range(50):
            got.append(local.create())  # list.append is atomic

    try:
        workers = [threading.Thread(target=take) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        local.close()
    assert len({p for p, _ in got}) == len(got) == 200
    assert len({os.fstat(fd).st_ino for _, fd in got}) == 200
    for _, fd in got:
        os.close(fd)


def test_a_directory_it_cannot_write_gives_the_error_to_the_create(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(localfiles, "RETRY_AFTER", 0.05)
    d = tmp_path / "ws" / "files" / "mine"  # not there yet, nor the workspace
    local = LocalFiles(str(d), spares=4, refill_below=2)
    with caplog.at_level(logging.INFO, logger="gravfs.fuse.localfiles"):
        local.start()
        try:
            with pytest.raises(FileNotFoundError):
                local.create()  # nothing made ahead: made here, and refused here
            wait_for(lambda: "cannot make empty files ahead" in caplog.text)
            os.makedirs(d)
            wait_for(lambda: len(_files(d)) == 4)  # it recovers by itself
            path, fd = local.create()
            _check_new(path, fd)
            os.close(fd)
        finally:
            local.close()
    assert caplog.text.count("cannot make empty files ahead") == 1  # once, not every retry
    assert "making empty files ahead" in caplog.text
    assert _files(d) == [os.path.basename(path)]


def test_a_removed_directory_is_made_again_and_its_spares_dropped(tmp_path, caplog):
    """The workspace's files directory removed under a running mount: a create makes it
    again (with a warning) and drops the spares made there, whose names are gone."""
    import shutil

    d = tmp_path / "ws" / "files" / "mine"
    os.makedirs(d)
    local = LocalFiles(str(d), spares=4, refill_below=2)
    local.start()
    try:
        wait_for(lambda: len(_files(d)) == 4)
        shutil.rmtree(tmp_path / "ws" / "files")
        with caplog.at_level(logging.WARNING, logger="gravfs.fuse.localfiles"):
            path, fd = local.create_here()
        _check_new(path, fd)
        os.close(fd)
        assert "was removed; making it again" in caplog.text
        for _ in range(3):  # no spare with a dead name is handed out
            path, fd = local.create()
            assert os.path.exists(path)
            os.close(fd)
    finally:
        local.close()


def test_each_refill_makes_its_batch_beside_none_of_the_spares_left(tmp_path):
    """A close moves its copy out of the directory the copy was made in; a batch made
    in the same directory would hold its lock (slow creates: an allocator stepping
    over recently deleted inodes) and the move would wait."""
    local = LocalFiles(str(tmp_path), spares=6, refill_below=3)
    local.start()
    taken = []
    try:
        wait_for(lambda: len(local._ready) == 6)
        for _ in range(3):
            left = {os.path.dirname(p) for p, _ in list(local._ready)[4:]}
            taken += [local.create() for _ in range(4)]  # 2 left: below 3, a batch of 4
            wait_for(lambda: len(local._ready) == 6)
            batch = {os.path.dirname(p) for p, _ in list(local._ready)[2:]}
            assert len(left) == len(batch) == 1 and not left & batch
            assert os.path.dirname(next(iter(batch))) == str(tmp_path)
    finally:
        local.close()
    for _, fd in taken:
        os.close(fd)
    # close removes the spares and the directories a taken copy is not in
    kept = {os.path.dirname(p) for p, _ in taken}
    assert {os.path.join(tmp_path, d) for d in os.listdir(tmp_path)} == kept
    assert _files(tmp_path) == sorted(os.path.basename(p) for p, _ in taken)
