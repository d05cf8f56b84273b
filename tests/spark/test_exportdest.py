"""gravfs.spark.exportdest's directory destination: an entry's path never leads out of
DEST, whatever DEST holds (no Spark here)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from gravfs.fs.entry import (KIND_BLOCK_DEVICE, KIND_CHAR_DEVICE, KIND_FIFO, KIND_SOCKET,
                             EntryInfo)
from gravfs.spark.export import _kind, copy_entry
from gravfs.spark.exportdest import SPECIAL, DirDest


def _dest(tmp_path):
    d = DirDest(str(tmp_path / "out"))
    d.check()
    d.prepare()
    return d


def test_a_symlink_in_dest_is_never_followed(tmp_path):
    """A symlink "a" in DEST to a directory outside: reads, deletions and writes of
    a/... stay inside DEST (the write replaces the link by a directory)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b").write_bytes(b"theirs")
    (outside / "sub").mkdir()
    d = _dest(tmp_path)
    os.symlink(outside, os.path.join(d.root, "a"))
    sha = hashlib.sha256(b"theirs").hexdigest()
    assert not d.present(b"a/b", "file", 6, sha, mode=0o644, mtime_ns=1)
    d.delete_entry(b"a/b")
    assert not d.remove_dir_if_empty(b"a/sub")
    assert (outside / "b").read_bytes() == b"theirs" and (outside / "sub").is_dir()
    d.write_file(b"a/b", [b"ours"], 4, 0o600, 7)
    assert (outside / "b").read_bytes() == b"theirs"
    inside = os.path.join(d.root, "a", "b")
    assert not os.path.islink(os.path.join(d.root, "a"))
    assert open(inside, "rb").read() == b"ours" and os.stat(inside).st_mtime_ns == 7
    assert d.present(b"a/b", "file", 4, hashlib.sha256(b"ours").hexdigest(), mode=0o600,
                     mtime_ns=7)


def test_a_file_where_the_tree_has_a_directory_is_replaced(tmp_path):
    d = _dest(tmp_path)
    d.write_file(b"x", [b"1"], 1, 0o644, 1)
    d.write_dir(b"x/y/", 0o750)  # the directory marker of x/y
    assert os.stat(os.path.join(d.root, "x", "y")).st_mode & 0o7777 == 0o750
    d.write_symlink(b"x/y/l", "../t", 3)
    assert os.readlink(os.path.join(d.root, "x", "y", "l")) == "../t"
    assert d.present(b"x/y/l", "symlink", 0, None, target="../t", mtime_ns=3)
    d.delete_entry(b"x/y/l")
    assert d.remove_dir_if_empty(b"x/y") and not d.remove_dir_if_empty(b"nothing/here")


def test_two_tasks_replacing_one_symlink_by_a_directory_both_write(tmp_path, monkeypatch):
    """Two tasks meet the symlink "lnk" where their files need a directory; the other
    task unlinks it and makes the directory between this task's failed open and its own
    unlink, which then meets a directory (EISDIR): the directory is taken as made and
    both files land in it (the CI of 7bef1f5 failed the job there)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    d = _dest(tmp_path)
    lnk = os.path.join(d.root, "lnk")
    os.symlink(outside, lnk)
    real_unlink = os.unlink
    raced = []

    def unlink_after_the_other_task(path, *, dir_fd=None):
        if path == b"lnk" and not raced:  # the other task's whole replacement first
            raced.append(True)
            d.write_file(b"lnk/theirs", [b"2"], 1, 0o644, 2)
        return real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", unlink_after_the_other_task)
    d.write_file(b"lnk/ours", [b"1"], 1, 0o644, 1)
    assert raced and not os.path.islink(lnk) and os.path.isdir(lnk)
    assert sorted(os.listdir(lnk)) == ["ours", "theirs"] and not os.listdir(outside)


def test_many_tasks_replacing_one_symlink_at_once(tmp_path):
    """The same race left to the scheduler: eight threads, released together, each
    write a file under the symlink "lnk", over 50 rounds; every file lands in DEST."""
    outside = tmp_path / "outside"
    outside.mkdir()
    d = _dest(tmp_path)
    lnk = os.path.join(d.root, "lnk")
    for _ in range(50):
        if os.path.isdir(lnk) and not os.path.islink(lnk):
            shutil.rmtree(lnk)
        os.symlink(outside, lnk)
        gate = threading.Barrier(8)

        def task(i):
            gate.wait()
            d.write_file(f"lnk/f{i}".encode(), [b"x"], 1, 0o644, 1)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(task, range(8)))  # (a task's exception is raised here)
        assert sorted(os.listdir(lnk)) == sorted(f"f{i}" for i in range(8))
        assert not os.listdir(outside)


def test_shadowed_files_of_a_range_and_of_some_keys(tmp_path):
    """A file "f" whose keys under "f/" lie in a later range than its own (keys such as
    "f.0001" sort between "f" and "f/"): found with one seek past the range's end, as
    for keys that are only some of the tree's (an incremental export's changes)."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    from gravfs.spark.export import shadowed_files
    from tests.repo_util import head_metarange, small_settings

    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())
    addr, n = repo.data.put_bytes(b"x")
    e = EntryInfo(address=addr, size=n, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    keys = [b"f", b"g", b"g/", b"h"] + [b"f.%04d" % i for i in range(3000)] + [b"f/z", b"h/i"]
    repo.stage("main", [(k, e) for k in keys])
    repo.commit("main", "c")
    mr_id = head_metarange(repo, "main")
    rs = repo.committed.ranges
    ranges = [list(k for k, _ in rs.range_items(rid)) for rid in rs.metarange(mr_id).ids]
    first = next(r for r in ranges if b"f" in r)
    assert b"f/z" not in first  # the case this test is about
    assert b"f" in shadowed_files(rs, mr_id, first, whole_range=True)
    assert b"f.0001" not in shadowed_files(rs, mr_id, first, whole_range=True)
    # "g/" marks an empty directory "g": that takes the name too
    assert shadowed_files(rs, mr_id, [b"f", b"f.0001", b"g", b"g/", b"h"],
                          whole_range=False) == {b"f", b"g", b"h"}
    repo.close()


def test_special_files_are_made_again_not_copied_as_files(tmp_path):
    """A FIFO, socket or device of the tree is made again with its type (and device
    number); before, each became an empty regular file. A second run finds it present."""
    d = _dest(tmp_path)
    null = os.makedev(1, 3)
    for key, kind, rdev in ((b"p/fifo", KIND_FIFO, 0), (b"sock", KIND_SOCKET, 0),
                            (b"dev/null", KIND_CHAR_DEVICE, null)):
        e = EntryInfo(address="", size=0, mtime_ns=5 * 10**18, kind=kind, mode=0o640, rdev=rdev)
        assert copy_entry(None, d, key, e).action == "copied"
        st = os.lstat(os.path.join(d.root, os.fsdecode(key)))
        assert stat.S_IFMT(st.st_mode) == SPECIAL[_kind(e)]
        assert (stat.S_IMODE(st.st_mode), st.st_rdev, st.st_mtime_ns) == (0o640, rdev, 5 * 10**18)
        assert copy_entry(None, d, key, e).action == "present"
    # a regular file where a FIFO should be is replaced
    with open(os.path.join(d.root, "f2"), "wb") as f:
        f.write(b"x")
    e = EntryInfo(address="", size=0, mtime_ns=1, kind=KIND_FIFO, mode=0o600)
    assert copy_entry(None, d, b"f2", e).action == "copied"
    assert stat.S_ISFIFO(os.lstat(os.path.join(d.root, "f2")).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="running the export as another user needs root")
def test_a_device_the_export_may_not_make_is_skipped():
    """Without CAP_MKNOD (an export run by a user) a device node is skipped, with the
    reason; FIFOs need no privilege."""
    top = tempfile.mkdtemp(prefix="gravfs-export-")  # (pytest's tmp_path is root's only)
    try:
        os.chmod(top, 0o777)
        d = DirDest(os.path.join(top, "out"))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child runs as nobody
            try:
                os.setgid(65534)
                os.setuid(65534)
                d.check()
                d.prepare()
                dev = EntryInfo(address="", size=0, mtime_ns=1, kind=KIND_BLOCK_DEVICE,
                                mode=0o600, rdev=os.makedev(7, 0))
                fifo = EntryInfo(address="", size=0, mtime_ns=1, kind=KIND_FIFO, mode=0o600)
                got = [copy_entry(None, d, b"loop0", dev), copy_entry(None, d, b"fifo", fifo)]
                os.write(w, repr([(c.action, c.reason) for c in got]).encode())
            except BaseException as exc:
                os.write(w, repr(exc).encode())
            finally:
                os._exit(0)
        os.close(w)
        out = os.read(r, 4096).decode()
        os.waitpid(pid, 0)
        assert out == repr([("skipped", "a blockdev: making one needs privilege "
                             "(CAP_MKNOD)"), ("copied", None)])
        assert not os.path.lexists(os.path.join(d.root, "loop0"))
        assert os.listdir(d.tmp_dir()) == []
    finally:
        shutil.rmtree(top)
