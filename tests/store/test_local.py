"""gravfs.store.local: what only a local-directory store does. A store whose
repository directory went away (moved, deleted, its disk unmounted) is unavailable,
not empty, and is never made again by a write."""

from __future__ import annotations

import os
import tempfile

import pytest

from gravfs.errors import NotFoundError, StoreUnavailableError
from gravfs.store.local import LocalStore


def _repository_store(tmp_path) -> LocalStore:
    """A store holding a repository's files when it is opened."""
    root = tmp_path / "disk" / "store"
    LocalStore(str(root)).put("_gravfs/repo.json", b"{}")
    store = LocalStore(str(root))
    store.put("data/ab/abcd", b"content")
    return store


def test_a_store_whose_directory_went_away_is_unavailable_not_empty(tmp_path):
    store = _repository_store(tmp_path)
    os.rename(tmp_path / "disk", tmp_path / "moved")
    for read in (lambda: store.get("_gravfs/refs/heads/main"),
                 lambda: store.get_range("data/ab/abcd", 0, 3),
                 lambda: store.size("data/ab/abcd"),
                 lambda: store.stat("data/ab/abcd"),
                 lambda: store.touch("data/ab/abcd"),
                 lambda: list(store.list("_gravfs/refs/")),
                 lambda: store.delete("data/ab/abcd"),
                 lambda: store.delete_many(["data/ab/abcd"])):
        with pytest.raises(StoreUnavailableError, match="is gone: its _gravfs directory is missing"):
            read()
    for write in (lambda: store.put("data/cd/cdef", b"x"),
                  lambda: store.put_if_absent("data/cd/cdef", b"x"),
                  lambda: store.compare_and_swap("_gravfs/refs/heads/main", None, b"c")):
        with pytest.raises(StoreUnavailableError):
            write()
    assert not (tmp_path / "disk").exists()  # nothing made where the store was
    os.rename(tmp_path / "moved", tmp_path / "disk")  # back: reads and writes go on
    assert store.get("data/ab/abcd") == b"content"
    store.put("data/cd/cdef", b"x")
    assert store.get("data/cd/cdef") == b"x"


def test_an_emptied_mount_point_is_unavailable_too(tmp_path):
    """The store's directory is itself where a disk is mounted: unmounted, the directory
    is there and empty."""
    store = _repository_store(tmp_path)
    os.rename(tmp_path / "disk" / "store" / "_gravfs", tmp_path / "elsewhere")
    with pytest.raises(StoreUnavailableError):
        store.get("_gravfs/repo.json")
    with pytest.raises(StoreUnavailableError):
        store.put("_gravfs/refs/heads/x", b"c")
    assert not (tmp_path / "disk" / "store" / "_gravfs").exists()


def test_a_store_that_held_no_repository_is_made_by_its_first_write(tmp_path):
    """init's store: missing keys are missing, and a write makes the directory."""
    store = LocalStore(str(tmp_path / "new" / "store"))
    with pytest.raises(NotFoundError):
        store.get("_gravfs/repo.json")
    assert store.size("x/y") is None and list(store.list("")) == []
    store.put("_gravfs/repo.json", b"{}")
    assert store.get("_gravfs/repo.json") == b"{}"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_the_temp_file_sweep_stays_on_the_stores_file_system(tmp_path):
    """A crashed writer's temp files are swept; a file system mounted inside the store
    is not walked (a mount of the repository itself was: every branch and commit)."""
    import subprocess
    import time

    from gravfs.store.local import _TMP

    store = LocalStore(str(tmp_path / "store"))
    store.put("data/ab/abcd", b"x")
    other = tmp_path / "store" / "mounted"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(other)], check=True)
    try:
        old = time.time() - 7200
        swept, kept = tmp_path / "store" / "data" / "ab" / f"{_TMP}abcd.1.x", \
            other / f"{_TMP}not-ours"
        for p in (swept, kept):
            p.write_bytes(b"partial")
            os.utime(p, (old, old))
        assert store.remove_stale_temp_files() == 1
        assert not swept.exists() and kept.exists()
    finally:
        subprocess.run(["umount", str(other)], check=True)


def test_a_taken_file_is_renamed_into_place_with_the_stores_mode(tmp_path):
    """take_file: the scratch file becomes the object (same inode, the store's file
    mode, synced)."""
    store = LocalStore(str(tmp_path / "store"))
    store.put("x", b"x")
    src = tmp_path / "scratch"
    src.write_bytes(b"taken")
    os.chmod(src, 0o600)
    ino = os.stat(src).st_ino
    store.take_file("data/ab/one", str(src))
    obj = os.path.join(store.root, "data/ab/one")
    assert not src.exists() and store.get("data/ab/one") == b"taken"
    assert os.stat(obj).st_ino == ino
    assert os.stat(obj).st_mode & 0o777 == os.stat(os.path.join(store.root, "x")).st_mode & 0o777


@pytest.fixture
def elsewhere(tmp_path):
    """write(bytes) -> the path of a file holding them on another file system (/dev/shm)."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system other than the test's temp dir")
    made = []

    def write(data: bytes) -> str:
        fd, path = tempfile.mkstemp(dir="/dev/shm")
        made.append(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    yield write
    for path in made:
        if os.path.exists(path):
            os.unlink(path)


def test_a_taken_file_from_another_file_system_is_copied(tmp_path, elsewhere):
    store = LocalStore(str(tmp_path / "store"))
    store.take_file("data/cd/two", elsewhere(b"copied"))
    assert store.get("data/cd/two") == b"copied"


def test_a_file_from_another_file_system_is_copied_in_chunks(tmp_path, elsewhere):
    """put_file_if_absent across file systems (a state dir on another disk than the
    store: a mount's closed file going up) read the whole file into memory first: a
    file of 10 GiB took 10 GiB. It is copied a chunk at a time."""
    import tracemalloc

    store = LocalStore(str(tmp_path / "store"))
    body = os.urandom(1 << 20) * 48
    other = elsewhere(body)
    tracemalloc.start()
    try:
        assert store.put_file_if_absent("data/ef/big", other)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    assert store.get("data/ef/big") == body and os.path.exists(other)
    assert not store.put_file_if_absent("data/ef/big", other)  # there already
