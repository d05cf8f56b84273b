"""The FUSE mount through Python's os APIs: layout, reads, writes, errnos, invalidation."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import mmap
import os
import stat
import subprocess
import sys
import time

import pytest

from gravfs.fuse import kernel
from gravfs.fuse.options import MountOptions
from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import write_bytes as _write, read_bytes as _read, errno_of_call as _errno
from tests.fuse_util import fails_with, wait_for


# -- layout --------------------------------------------------------------------------------


def test_layout_lists_branches_commits_tags(gravfs_mount):
    m = gravfs_mount
    assert sorted(os.listdir(m.mnt)) == ["branches", "commits", "tags"]
    assert os.listdir(m.path("branches")) == ["main"]
    m.cli("branch", "create", "dev")
    m.cli("tag", "create", "v1", "main")
    assert sorted(os.listdir(m.path("branches"))) == ["dev", "main"]
    assert os.listdir(m.path("tags")) == ["v1"]
    head = m.head()
    assert os.listdir(m.path("commits")) == [head]
    assert os.path.isdir(m.path("commits", head[:8]))
    assert os.path.isdir(m.path("commits", head))
    assert not os.path.exists(m.path("commits", "0123456789"))
    assert not os.path.exists(m.path("branches", "nope"))
    assert _errno(os.listdir, m.path("nothing")) == errno.ENOENT
    m.assert_clean_log()


def test_a_damaged_ref_is_left_out_of_the_listing_and_logged(gravfs_mount):
    """One emptied branch head made every listing of branches/ fail."""
    m = gravfs_mount
    m.cli("branch", "create", "dev")
    m.cli("branch", "create", "ok")
    with open(os.path.join(m.store, "_gravfs", "refs", "branches", "dev"), "wb"):
        pass
    assert sorted(os.listdir(m.path("branches"))) == ["main", "ok"]
    assert "branch 'dev' is damaged" in m.log_text()
    # EIO at once, or (another process looked dev up before: the kernel holds its entry)
    # once the watcher's next poll has seen the damage and dropped it
    wait_for(lambda: fails_with(errno.EIO, os.stat, m.path("branches", "dev")), timeout=5)


def _two_commits(tmp_path) -> tuple[Mount, str, str]:
    """A repository (not mounted yet) whose main has two commits: a, then b (b"1")."""
    m = Mount(str(tmp_path)).init()
    local = os.path.join(m.base, "local")
    _write(local, b"1")
    m.cli("put", local, "main:a")
    first = m.commit(message="one")
    m.cli("put", local, "main:b")
    return m, first, m.commit(message="two")


def test_a_damaged_commit_leaves_the_rest_of_commits_listed(tmp_path):
    """One damaged old commit object made every listing of commits/ fail (EIO)."""
    m, first, second = _two_commits(tmp_path)
    with open(os.path.join(m.store, "_gravfs", "commits", first), "wb") as f:
        f.write(b"damaged")
    m.mount()
    try:
        assert os.listdir(m.path("commits")) == [second]
        assert f"commits/ lists what it can: _gravfs/commits/{first}: commit object does " \
            "not hash to its id" in m.log_text()
        assert _read(m.path("commits", second, "b")) == b"1"
    finally:
        m.cleanup()


def test_a_commit_whose_tree_is_gone_answers_eio_not_an_empty_directory(tmp_path):
    """Garbage collection deletes the trees of the commits it expires (their commit
    objects stay): commits/<id>/ of one listed as an empty directory, and its files
    as absent (ENOENT), as if the commit had held nothing."""
    import shutil
    m, first, second = _two_commits(tmp_path)
    with open(os.path.join(m.store, "_gravfs", "commits", first), "rb") as f:
        metarange = json.load(f)["metarange"]
    os.unlink(os.path.join(m.store, "_gravfs", "metaranges", metarange))  # as a sweep does
    shutil.rmtree(os.path.join(m.state_dir, "repos"))  # and no copy cached on this host
    m.mount()
    try:
        assert {first, second} <= set(os.listdir(m.path("commits")))  # (and the root)
        for probe in (os.listdir, os.stat):
            with pytest.raises(OSError) as e:
                probe(m.path("commits", first, "a") if probe is os.stat
                      else m.path("commits", first))
            assert e.value.errno == errno.EIO
        assert f"_gravfs/metaranges/{metarange} not found" in m.log_text()
        assert "a commit's tree, which garbage collection deletes" in m.log_text()
        assert _read(m.path("commits", second, "b")) == b"1"  # the others as ever
    finally:
        m.cleanup()


def test_a_file_closed_after_its_branch_was_deleted_goes_to_lost_and_found(gravfs_mount):
    """Its close failed and the content stayed pinned in a daemon where no name showed
    it; were the branch made again before the unmount, it was staged there."""
    m = gravfs_mount
    m.cli("branch", "create", "gone")
    os.mkdir(m.branch_path("d", branch="gone"))
    f = open(m.branch_path("d/open.txt", branch="gone"), "wb")
    f.write(b"written while the branch went away")
    f.flush()
    m.cli("branch", "delete", "--force", "gone")  # (its directory d is a staged change)
    time.sleep(MountOptions.head_ttl + 0.2)  # the daemon's cached head is stale by then
    with pytest.raises(FileNotFoundError):
        f.close()  # the writer learns that its file did not land
    saved = os.path.join(m.state_dir, "repos", os.listdir(os.path.join(m.state_dir, "repos"))[0],
                         "lost+found", "gone", "d", "open.txt")
    wait_for(lambda: os.path.exists(saved))
    assert _read(saved) == b"written while the branch went away"
    assert "gone:d/open.txt was closed after its branch was deleted" in m.log_text()
    m.cli("branch", "create", "gone")
    m.umount()  # nothing left to stage: the new branch of that name gets nothing
    assert m.cli("status", "gone").stdout.strip() == "On branch gone: nothing to commit"


def test_write_commit_and_read_from_commit_dir(gravfs_mount):
    m = gravfs_mount
    os.makedirs(m.branch_path("a/b"))
    _write(m.branch_path("a/b/c.txt"), b"hello world")
    _write(m.branch_path("top"), b"x" * 100_000)
    assert _read(m.branch_path("a/b/c.txt")) == b"hello world"
    cid = m.commit(message="first")
    # the new commit is there at once, by full id and any unique prefix
    assert _read(m.path("commits", cid, "a/b/c.txt")) == b"hello world"
    assert _read(m.path("commits", cid[:10], "top")) == b"x" * 100_000
    assert cid in os.listdir(m.path("commits"))
    assert sorted(os.listdir(m.path("commits", cid))) == ["a", "top"]
    # the branch still shows the same content over its new head
    assert _read(m.branch_path("a/b/c.txt")) == b"hello world"
    assert os.getxattr(m.branch_path(), "user.gravfs.commit").decode() == cid
    m.cli("tag", "create", "v1", cid)
    assert _read(m.path("tags", "v1", "a/b/c.txt")) == b"hello world"
    m.assert_clean_log()


def test_stat_attributes(gravfs_mount):
    m = gravfs_mount
    p = m.branch_path("f.bin")
    _write(p, b"0123456789")
    os.chmod(p, 0o640)
    os.utime(p, ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))
    st = os.stat(p)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_size == 10
    assert st.st_mtime_ns == 1_600_000_000_123_456_789
    cid = m.commit()
    st2 = os.stat(m.path("commits", cid, "f.bin"))
    assert stat.S_IMODE(st2.st_mode) == 0o640 and st2.st_mtime_ns == 1_600_000_000_123_456_789
    assert stat.S_ISDIR(os.stat(m.branch_path()).st_mode)
    m.assert_clean_log()


# -- writes ----------------------------------------------------------------------------------


def test_append_truncate_and_random_writes(gravfs_mount):
    m = gravfs_mount
    p = m.branch_path("f")
    _write(p, b"abc")
    _write(p, b"def", "ab")
    assert _read(p) == b"abcdef"
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"ghi")  # O_APPEND writes at the end whatever the offset
    os.close(fd)
    assert _read(p) == b"abcdefghi"
    os.truncate(p, 4)
    assert _read(p) == b"abcd"
    os.truncate(p, 6)
    assert _read(p) == b"abcd\0\0"
    cid = m.commit()
    # random write into a committed file: copy-on-write
    with open(p, "r+b") as f:
        f.seek(2)
        f.write(b"ZZ")
    assert _read(p) == b"abZZ\0\0"
    assert _read(m.path("commits", cid, "f")) == b"abcd\0\0"
    with open(p, "r+b") as f:
        f.truncate(1)
        f.seek(0, 2)
        f.write(b"!")
    assert _read(p) == b"a!"
    m.assert_clean_log()


def test_huge_sparse_truncate_does_not_allocate(gravfs_mount):
    m = gravfs_mount
    p = m.branch_path("sparse")
    _write(p, b"head")
    huge = 1 << 40  # 1 TiB
    with open(p, "r+b") as f:
        f.truncate(huge)
        assert os.fstat(f.fileno()).st_size == huge
        f.seek(huge - 4)
        f.write(b"tail")
        f.seek(huge - 8)
        assert f.read(8) == b"\0\0\0\0tail"
        f.truncate(8)
    assert _read(p) == b"head\0\0\0\0"
    assert os.stat(p).st_size == 8
    m.assert_clean_log()


def test_a_file_of_zeros_only_takes_no_blocks(gravfs_mount):
    """``truncate -s 1G`` stores nothing (its address is sparse/zeros/<size>), yet
    ``du`` counted 1G for it: st_blocks was the size's. (A branch's file just closed
    keeps the open file's attributes in the kernel until they time out.)"""
    m = gravfs_mount
    with open(m.branch_path("zeros.img"), "wb") as f:
        f.truncate(1 << 30)
    _write(m.branch_path("data.bin"), b"x" * 5000)
    cid = m.commit(message="zeros")
    zeros = os.stat(m.path("commits", cid[:12], "zeros.img"))
    assert zeros.st_size == 1 << 30 and zeros.st_blocks == 0
    # 512-byte units of the size, as before, for a file with data
    assert os.stat(m.path("commits", cid[:12], "data.bin")).st_blocks == 10
    m.assert_clean_log()


def test_overwrite_with_o_trunc_and_two_handles(gravfs_mount):
    m = gravfs_mount
    p = m.branch_path("f")
    _write(p, b"a long first version")
    _write(p, b"short")
    assert _read(p) == b"short"
    with open(p, "r+b") as a, open(p, "rb") as b:
        a.write(b"SH")
        a.flush()
        assert b.read() == b"SHort"
    assert _read(p) == b"SHort"


def test_mkdir_rmdir_and_empty_dirs_persist(gravfs_mount):
    m = gravfs_mount
    os.makedirs(m.branch_path("x/y/z"))
    _write(m.branch_path("x/file"), b"1")
    assert _errno(os.rmdir, m.branch_path("x")) == errno.ENOTEMPTY
    assert _errno(os.mkdir, m.branch_path("x")) == errno.EEXIST
    cid = m.commit()
    assert os.path.isdir(m.path("commits", cid, "x/y/z"))
    assert os.listdir(m.path("commits", cid, "x/y/z")) == []
    os.rmdir(m.branch_path("x/y/z"))
    assert os.listdir(m.branch_path("x/y")) == []
    os.rmdir(m.branch_path("x/y"))
    assert os.listdir(m.branch_path("x")) == ["file"]


def test_removing_last_file_keeps_implied_directory(gravfs_mount):
    m = gravfs_mount
    src = os.path.join(m.base, "src")
    os.makedirs(os.path.join(src, "d"))
    _write(os.path.join(src, "d", "only"), b"1")
    m.cli("import", src, "main", "-m", "import")  # 'd' exists only implied by its file
    p = m.branch_path("d", "only")
    wait_for(lambda: os.path.exists(p))
    os.unlink(p)
    assert os.path.isdir(m.branch_path("d")) and os.listdir(m.branch_path("d")) == []
    os.rmdir(m.branch_path("d"))
    assert not os.path.exists(m.branch_path("d"))


def test_rename_files_and_directories(gravfs_mount):
    m = gravfs_mount
    os.makedirs(m.branch_path("job/_temporary/0/task"))
    for i in range(5):
        _write(m.branch_path(f"job/_temporary/0/task/part-{i}"), str(i).encode())
    os.rename(m.branch_path("job/_temporary/0/task"), m.branch_path("job/out"))
    assert sorted(os.listdir(m.branch_path("job/out"))) == [f"part-{i}" for i in range(5)]
    assert os.listdir(m.branch_path("job/_temporary/0")) == []
    assert _read(m.branch_path("job/out/part-3")) == b"3"
    # replace an existing file atomically
    _write(m.branch_path("a"), b"A")
    _write(m.branch_path("b"), b"B")
    os.rename(m.branch_path("a"), m.branch_path("b"))
    assert _read(m.branch_path("b")) == b"A" and not os.path.exists(m.branch_path("a"))
    # a directory onto an empty directory; not onto a non-empty one
    os.mkdir(m.branch_path("empty"))
    os.rename(m.branch_path("job/out"), m.branch_path("empty"))
    assert len(os.listdir(m.branch_path("empty"))) == 5
    os.mkdir(m.branch_path("d2"))
    _write(m.branch_path("d2/f"), b"")
    assert _errno(os.rename, m.branch_path("empty"), m.branch_path("d2")) == errno.ENOTEMPTY
    assert _errno(os.rename, m.branch_path("b"), m.branch_path("d2")) == errno.EISDIR
    assert _errno(os.rename, m.branch_path("d2"), m.branch_path("b")) == errno.ENOTDIR
    assert _errno(os.rename, m.branch_path("d2"), m.branch_path("d2/sub")) == errno.EINVAL
    cid = m.commit()
    assert sorted(os.listdir(m.path("commits", cid))) == ["b", "d2", "empty", "job"]
    m.assert_clean_log()


def _renameat2(src: str, dst: str, flags: int) -> int:
    """renameat2(2) (Python has no binding): 0 or the errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.renameat2(-100, os.fsencode(src), -100, os.fsencode(dst), flags)  # AT_FDCWD
    return 0 if rc == 0 else ctypes.get_errno()


def test_rename_flags(gravfs_mount):
    """RENAME_NOREPLACE keeps an existing target; RENAME_EXCHANGE and RENAME_WHITEOUT
    are not supported (EINVAL, as the man page says of a filesystem without them):
    a whiteout rename was done as a plain rename, leaving no whiteout behind."""
    m = gravfs_mount
    a, b, c = (m.branch_path(n) for n in "abc")
    _write(a, b"A")
    _write(b, b"B")
    assert _renameat2(a, b, 1) == errno.EEXIST  # RENAME_NOREPLACE
    assert _renameat2(a, b, 2) == errno.EINVAL  # RENAME_EXCHANGE
    assert _renameat2(a, c, 4) == errno.EINVAL  # RENAME_WHITEOUT
    assert (_read(a), _read(b), os.path.exists(c)) == (b"A", b"B", False)
    assert _renameat2(a, c, 1) == 0
    assert _read(c) == b"A" and not os.path.exists(a)


def test_rename_open_file_follows_path(gravfs_mount):
    m = gravfs_mount
    f = open(m.branch_path("tmp.part"), "wb")
    f.write(b"first ")
    f.flush()
    os.rename(m.branch_path("tmp.part"), m.branch_path("final"))
    f.write(b"second")
    f.close()
    assert _read(m.branch_path("final")) == b"first second"
    assert not os.path.exists(m.branch_path("tmp.part"))
    cid = m.commit()
    assert os.listdir(m.path("commits", cid)) == ["final"]


def test_unlink_open_file(gravfs_mount):
    m = gravfs_mount
    f = open(m.branch_path("gone"), "w+b")
    f.write(b"data")
    os.unlink(m.branch_path("gone"))
    f.write(b" more")
    f.seek(0)
    assert f.read() == b"data more"
    f.close()
    assert not os.path.exists(m.branch_path("gone"))
    assert "gone" not in os.listdir(m.branch_path())


def test_symlinks(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("target"), b"t")
    os.symlink("target", m.branch_path("link"))
    os.symlink("../nowhere/\u00e9", m.branch_path("dangling"))
    assert os.readlink(m.branch_path("link")) == "target"
    assert _read(m.branch_path("link")) == b"t"
    assert os.readlink(m.branch_path("dangling")) == "../nowhere/\u00e9"
    assert stat.S_ISLNK(os.lstat(m.branch_path("link")).st_mode)
    cid = m.commit()
    assert os.readlink(m.path("commits", cid, "link")) == "target"


def test_xattrs_kept_as_metadata(gravfs_mount):
    m = gravfs_mount
    p = m.branch_path("x")
    _write(p, b"1")
    os.setxattr(p, "user.color", b"blue")
    os.setxattr(p, "user.bin", bytes(range(256)))
    os.mkdir(m.branch_path("d"))
    os.setxattr(m.branch_path("d"), "user.dir", b"yes")
    assert os.getxattr(p, "user.color") == b"blue"
    assert sorted(os.listxattr(p)) == ["user.bin", "user.color"]
    os.removexattr(p, "user.bin")
    assert os.listxattr(p) == ["user.color"]
    assert _errno(os.getxattr, p, "user.nope") == errno.ENODATA
    cid = m.commit()
    assert os.getxattr(m.path("commits", cid, "x"), "user.color") == b"blue"
    assert os.getxattr(m.path("commits", cid, "d"), "user.dir") == b"yes"
    assert _errno(os.setxattr, m.path("commits", cid, "x"), "user.a", b"1") == errno.EROFS


def test_xattr_space_is_bounded(gravfs_mount):
    """An entry's attributes are bounded (ENOSPC past 1 MiB, or past names one
    listxattr reply can hold), as a filesystem's xattr space is; before, 300 values
    of 64 KiB made a 20 MB record, each setxattr rewriting it whole."""
    m = gravfs_mount
    p = m.branch_path("x")
    _write(p, b"1")
    value = os.urandom(65536)
    n = 0
    while True:
        try:
            os.setxattr(p, f"user.k{n}", value)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            break
        n += 1
        assert n < 20
    assert n == 15  # 15 values and their names fit 1 MiB, a 16th does not
    os.setxattr(p, "user.k0", b"small")  # replacing one frees its space
    os.setxattr(p, "user.k15", value)
    assert len(os.listxattr(p)) == 16
    # names: as many as one listxattr reply holds
    q = m.branch_path("y")
    _write(q, b"1")
    long_names = [f"user.{i:03d}" + "n" * 240 for i in range(300)]
    set_ = 0
    for name in long_names:
        try:
            os.setxattr(q, name, b"")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            break
        set_ += 1
    assert set_ == 65536 // 249
    assert sorted(os.listxattr(q)) == long_names[:set_]
    cid = m.commit()
    assert len(os.listxattr(m.path("commits", cid, "y"))) == set_


def test_fsync_makes_content_durable(gravfs_mount):
    m = gravfs_mount
    with open(m.branch_path("f"), "wb") as f:
        f.write(b"synced")
        f.flush()
        os.fsync(f.fileno())
        out = m.cli("status", "main").stdout
        assert "f" in out
        assert m.cli("cat", "main:f").stdout == "synced"


def test_statfs(gravfs_mount):
    m = gravfs_mount
    st = os.statvfs(m.branch_path())
    assert st.f_namemax == 255
    local = os.statvfs(m.state_dir)
    assert st.f_blocks == local.f_blocks and st.f_bsize == local.f_bsize


def test_kernel_readahead_raised(gravfs_mount):
    m = gravfs_mount
    dev = next(l.split()[2] for l in open("/proc/self/mountinfo") if l.split()[4] == m.mnt)
    wait_for(lambda: open(f"/sys/class/bdi/{dev}/read_ahead_kb").read().strip() == "4096")


# -- errnos -----------------------------------------------------------------------------------


def test_errnos(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("file"), b"1")
    os.mkdir(m.branch_path("dir"))
    cid = m.commit()
    ro = m.path("commits", cid)
    assert _errno(open, os.path.join(ro, "new"), "wb") == errno.EROFS
    assert _errno(open, os.path.join(ro, "file"), "ab") == errno.EROFS
    assert _errno(os.mkdir, os.path.join(ro, "d2")) == errno.EROFS
    assert _errno(os.unlink, os.path.join(ro, "file")) == errno.EROFS
    assert _errno(os.rename, os.path.join(ro, "file"), os.path.join(ro, "f2")) == errno.EROFS
    assert _errno(os.chmod, os.path.join(ro, "file"), 0o600) == errno.EROFS
    assert _errno(os.truncate, os.path.join(ro, "file"), 0) == errno.EROFS
    assert _errno(os.mkdir, m.path("commits", "abc")) == errno.EROFS
    assert _errno(os.stat, m.branch_path("missing")) == errno.ENOENT
    assert _errno(os.unlink, m.branch_path("missing")) == errno.ENOENT
    assert _errno(os.rmdir, m.branch_path("file")) == errno.ENOTDIR
    assert _errno(os.listdir, m.branch_path("file")) == errno.ENOTDIR
    assert _errno(os.stat, m.branch_path("file", "x")) == errno.ENOTDIR
    assert _errno(open, m.branch_path("dir"), "wb") == errno.EISDIR
    assert _errno(os.unlink, m.branch_path("dir")) == errno.EISDIR
    assert _errno(os.mkdir, m.branch_path("file")) == errno.EEXIST
    assert _errno(os.open, m.branch_path("file"), os.O_CREAT | os.O_EXCL | os.O_WRONLY) == errno.EEXIST
    long = "n" * 256
    assert _errno(open, m.branch_path(long), "wb") == errno.ENAMETOOLONG
    assert _errno(os.mkdir, m.branch_path(long)) == errno.ENAMETOOLONG
    assert _errno(os.stat, m.branch_path(long)) == errno.ENAMETOOLONG
    _write(m.branch_path("n" * 255), b"ok")  # 255 bytes is fine
    assert _errno(os.link, m.branch_path("dir"), m.branch_path("hard")) == errno.EPERM
    assert _errno(os.link, m.branch_path("file"), m.branch_path("dir")) == errno.EEXIST
    m.cli("branch", "create", "other")
    assert _errno(os.rename, m.branch_path("file"), m.branch_path("file", branch="other")) == errno.EXDEV
    assert _errno(os.link, m.branch_path("file"), m.branch_path("hard", branch="other")) == errno.EXDEV
    cid = m.commit()
    assert _errno(os.link, m.branch_path("file"), m.path("commits", cid, "hard")) == errno.EROFS
    assert _errno(os.link, m.path("commits", cid, "file"), m.branch_path("hard")) == errno.EXDEV
    m.assert_clean_log()


def test_mkdir_in_branches_creates_a_branch(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("f"), b"1")
    m.commit()
    os.mkdir(m.path("branches", "feature"))
    assert "feature" in m.cli("branch", "list").stdout
    assert _read(m.branch_path("f", branch="feature")) == b"1"


# -- changes from outside the mount -------------------------------------------------------------


def test_cli_changes_show_up_in_the_mount(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("keep"), b"1")
    _write(m.branch_path("drop"), b"2")
    assert sorted(os.listdir(m.branch_path())) == ["drop", "keep"]
    m.commit()
    # put from the CLI: visible once the short attribute/entry timeouts pass
    local = os.path.join(m.base, "local")
    _write(local, b"from cli")
    m.cli("put", local, "main:cli.txt")
    wait_for(lambda: os.path.exists(m.branch_path("cli.txt")), timeout=5)
    assert _read(m.branch_path("cli.txt")) == b"from cli"
    # reset from the CLI drops staged changes: the mount follows
    os.unlink(m.branch_path("drop"))
    m.cli("reset", "main")
    wait_for(lambda: os.path.exists(m.branch_path("drop")), timeout=5)
    assert not os.path.exists(m.branch_path("cli.txt"))
    # a merge moving the head shows up too
    m.cli("branch", "create", "dev")
    m.cli("put", local, "dev:merged.txt")
    m.cli("commit", "dev", "-m", "on dev")
    assert "merged.txt" not in os.listdir(m.branch_path())
    m.cli("merge", "dev", "main")
    wait_for(lambda: "merged.txt" in os.listdir(m.branch_path()), timeout=5)
    head = m.head()
    assert os.getxattr(m.branch_path(), "user.gravfs.commit").decode() == head
    assert head in os.listdir(m.path("commits"))


def test_head_move_invalidates_cached_content(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("f"), b"version one")
    m.commit()
    assert _read(m.branch_path("f")) == b"version one"
    m.cli("branch", "create", "dev")
    local = os.path.join(m.base, "v2")
    _write(local, b"version two!")
    m.cli("put", local, "dev:f")
    m.cli("commit", "dev", "-m", "v2")
    m.cli("merge", "dev", "main")
    wait_for(lambda: _read(m.branch_path("f")) == b"version two!", timeout=5)
    assert os.stat(m.branch_path("f")).st_size == 12


# -- large files --------------------------------------------------------------------------------


def test_large_file_ranged_reads(gravfs_mount):
    m = gravfs_mount
    size = 20 * 1024 * 1024 + 12345
    block = os.urandom(1 << 20)
    data = (block * 21)[:size]
    _write(m.branch_path("big"), data)
    cid = m.commit()
    # the tier does not hold it (it was written locally): read in place from the store
    with open(m.path("commits", cid, "big"), "rb") as f:
        f.seek(size - 100)
        assert f.read() == data[-100:]
        f.seek(7 * 1024 * 1024 + 3)
        assert f.read(10) == data[7 * 1024 * 1024 + 3:7 * 1024 * 1024 + 13]
    assert _read(m.path("commits", cid, "big")) == data
    assert _read(m.branch_path("big")) == data
    m.assert_clean_log()


def test_umount_flushes_and_remount_shows_everything(gravfs_mount):
    m = gravfs_mount
    os.makedirs(m.branch_path("d"))
    _write(m.branch_path("d/f"), b"kept")
    m.umount()
    assert not os.path.ismount(m.mnt)
    assert m.cli("cat", "main:d/f").stdout == "kept"
    m.remount()
    assert _read(m.branch_path("d/f")) == b"kept"


def test_branch_mounted_at_root(tmp_path):
    from tests.fuse_util import Mount
    m = Mount(str(tmp_path)).init()
    m.cli("branch", "create", "dev")
    m.mount(branch="dev")
    try:
        _write(m.path("x"), b"on dev")
        assert os.listdir(m.mnt) == ["x"]
        assert m.cli("cat", "dev:x").stdout == "on dev"
        assert m.cli("ls", "main").stdout.strip() == ""
    finally:
        m.cleanup()


def test_mount_errors_are_one_line(tmp_path):
    from tests.fuse_util import Mount
    m = Mount(str(tmp_path))
    res = m.cli("mount", m.mnt, check=False)
    assert res.returncode != 0
    assert "no gravfs repository" in res.stderr and "Traceback" not in res.stderr
    assert not os.path.ismount(m.mnt)
    m.init()
    res = m.cli("mount", m.mnt, "--branch", "nope", check=False)
    assert res.returncode != 0 and "nope" in res.stderr
    res = m.cli("mount", m.mnt, "-o", "bogus_option", check=False)
    assert res.returncode != 0 and "bogus_option" in res.stderr
    res = m.cli("umount", m.mnt, check=False)
    assert res.returncode != 0 and "not mounted" in res.stderr


def test_files_never_vanish_while_the_cli_commits(gravfs_mount):
    """Commit drops staged tokens after moving the head: the mount's head cache must follow."""
    import threading

    m = gravfs_mount
    names = [f"f{i}" for i in range(40)]
    missing = []
    stop = threading.Event()

    errors = []

    def reader():
        while not stop.is_set():
            before = set(written)  # closed before the listing started
            try:
                listed = set(os.listdir(m.branch_path()))
            except OSError as exc:
                errors.append(exc)
                return
            missing.extend(before - listed)

    written: set = set()
    t = threading.Thread(target=reader)
    t.start()
    try:
        for round_ in range(4):
            for n in names[round_ * 10:(round_ + 1) * 10]:
                _write(m.branch_path(n), n.encode())
                written.add(n)
            m.commit(message=f"round {round_}")
    finally:
        stop.set()
        t.join()
    assert not errors, f"listing failed during commits: {errors}\n{m.log_tail()}"
    assert not missing, f"files disappeared from listings during commits: {sorted(set(missing))}"
    assert sorted(os.listdir(m.branch_path())) == sorted(names)


def test_no_commit_holds_a_torn_file_while_writers_race_commits(gravfs_mount):
    """Three writers write (in two parts), append to, rename, truncate and unlink files
    of their own directories while commits from this process and from the CLI, and
    compactions, run back to back: every file of every commit holds a content some
    writer closed at that path (none half-written or empty in between), and the
    branch and its last commit hold what the writers left."""
    import random
    import threading

    from gravfs.fs.repository import Repository
    from gravfs.version.compaction import compact
    from gravfs.version.committer import NothingToCommitError

    m = gravfs_mount
    repo = Repository.open(m.store, m.state_dir)
    root = m.branch_path()
    closed: dict[str, set] = {}  # path -> every content a writer may have closed there
    final: dict[str, bytes] = {}
    errors: list = []
    done = threading.Event()

    def writer(w: int) -> None:
        rnd = random.Random(w)
        os.makedirs(os.path.join(root, f"w{w}", "d"))
        names = [f"w{w}/f{j}" for j in range(6)] + [f"w{w}/d/g{j}" for j in range(4)]
        mine: dict[str, bytes] = {}
        try:
            for i in range(1500):
                p, op = rnd.choice(names), rnd.random()
                full = os.path.join(root, p)
                if op < 0.5:
                    content = f"{p}:{i}:".encode() * rnd.randint(1, 3000)
                    closed.setdefault(p, set()).add(content)
                    with open(full, "wb") as f:
                        f.write(content[:len(content) // 2])
                        f.flush()
                        f.write(content[len(content) // 2:])
                    mine[p] = content
                elif p not in mine:
                    continue
                elif op < 0.65:
                    mine[p] += b"+%d" % i
                    closed[p].add(mine[p])
                    with open(full, "ab") as f:
                        f.write(b"+%d" % i)
                elif op < 0.8:
                    q = rnd.choice(names)
                    if q != p:
                        closed.setdefault(q, set()).add(mine[p])
                        os.rename(full, os.path.join(root, q))
                        mine[q] = mine.pop(p)
                elif op < 0.95:
                    os.unlink(full)
                    del mine[p]
                else:
                    closed[p].add(b"")
                    os.truncate(full, 0)
                    mine[p] = b""
        except Exception as exc:
            errors.append((w, repr(exc)))
        final.update(mine)

    def committer() -> None:
        k = 0
        while not done.is_set():
            k += 1
            try:
                if k % 3 == 0:
                    res = m.cli("commit", "main", "-m", "from the CLI", check=False)
                    if res.returncode != 0 and "nothing to commit" not in res.stderr:
                        errors.append(("cli commit", res.stderr))
                elif k % 3 == 1:
                    compact(repo, "main")
                else:
                    repo.commit("main", "from this process")
            except NothingToCommitError:
                pass
            except Exception as exc:
                errors.append(("commit", repr(exc)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    commits = threading.Thread(target=committer)
    commits.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    commits.join()
    try:
        assert not errors, errors
        seen = {}
        for dirpath, _, files in os.walk(root):
            for name in files:
                seen[os.path.relpath(os.path.join(dirpath, name), root)] = _read(
                    os.path.join(dirpath, name))
        assert seen == final
        history = [c.id for c in repo.log("main")]
        assert len(history) > 3  # (dozens here: the commits did race the writers)
        torn = [(cid[:12], n.path, repo.read(n)[:40]) for cid in history
                for n in repo.walk(cid) if n.kind == "file" and repo.read(n) not in closed[n.path]]
        assert not torn, f"{len(torn)} torn files in {len(history)} commits: {torn[:5]}"
        try:
            last = repo.commit("main", "last").id
        except NothingToCommitError:  # the committer took the writers' last changes
            last = repo.head("main", fresh=True)
        assert {n.path: repo.read(n) for n in repo.walk(last) if n.kind == "file"} == final
    finally:
        repo.close()
    m.assert_clean_log()


@pytest.mark.parametrize("size", [1000, 9 * 1024 * 1024 + 5])
def test_corrupt_data_object_reads_fail_with_eio(gravfs_mount, size):
    """Small objects are hashed whole before a byte is served, large ones (read in place from this
    local store) by a pass that a whole-file read waits for before its end."""
    import hashlib

    m = gravfs_mount
    data = os.urandom(size)
    _write(m.branch_path("victim"), data)
    cid = m.commit()
    digest = hashlib.sha256(data).hexdigest()
    obj = os.path.join(m.store, "data", digest[:2], digest)
    assert os.path.getsize(obj) == size
    os.chmod(obj, 0o644)
    with open(obj, "r+b") as f:  # flip one byte near the end, keep the size
        f.seek(size - 10)
        b = f.read(1)
        f.seek(size - 10)
        f.write(bytes([b[0] ^ 0xFF]))
    assert _errno(_read, m.path("commits", cid, "victim")) == errno.EIO
    assert "does not match" in m.log_text() or "hashes to" in m.log_text()


def test_damaged_tier_copy_is_fetched_again_by_a_new_daemon(gravfs_mount):
    """A big object verified by an earlier process is served chunk-checked; a damaged
    chunk drops the local copy and the read is served from a fresh fetch."""
    import glob
    import hashlib

    m = gravfs_mount
    data = os.urandom(20 * 1024 * 1024 + 77)
    _write(m.branch_path("big"), data)
    cid = m.commit()
    subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir", m.state_dir,
                    "cat", "main:big"], stdout=subprocess.DEVNULL, env=m.env, check=True)  # fills the tier
    digest = hashlib.sha256(data).hexdigest()
    copies = glob.glob(os.path.join(m.state_dir, "**", "objects", "data", digest[:2], digest),
                       recursive=True)
    assert copies, "the CLI's read did not leave a copy in the local tier"
    assert glob.glob(os.path.join(m.state_dir, "**", "sums", "data", digest[:2], digest),
                     recursive=True)
    with open(copies[0], "r+b") as f:
        f.seek(13 * 1024 * 1024)
        f.write(b"rot")
    m.umount()
    m.remount()
    assert _read(m.path("commits", cid, "big")) == data
    assert "does not match its sum" in m.log_text()


def test_big_objects_of_a_local_store_are_read_in_place(gravfs_mount):
    """No tier copy of a big object of a local-directory store: its file is read where
    it is, verified in the background once; a later daemon checks it by chunk sums."""
    import glob
    import hashlib

    m = gravfs_mount
    mib = 1 << 20
    data = os.urandom(20 * mib + 77)
    _write(m.branch_path("big"), data)
    cid = m.commit()
    m.umount()
    m.remount()
    digest = hashlib.sha256(data).hexdigest()
    big = m.path("commits", cid, "big")

    def found(kind):
        return glob.glob(os.path.join(m.state_dir, "**", kind, "data", digest[:2], digest), recursive=True)

    with open(big, "rb") as f:  # footer first, as Parquet readers do
        f.seek(len(data) - 1000)
        assert f.read() == data[-1000:]
        f.seek(3 * mib)
        assert f.read(mib) == data[3 * mib:4 * mib]
    time.sleep(0.5)
    assert not found("sums"), "a few reads of a big object started hashing all of it"
    assert _read(big) == data
    assert not found("objects"), "the big object was copied into the local tier"
    wait_for(lambda: found("sums"), timeout=10)  # the background verification recorded them
    # damage one chunk of the store's file: a new daemon reads the rest, fails that chunk
    obj = os.path.join(m.store, "data", digest[:2], digest)
    os.chmod(obj, 0o644)
    with open(obj, "r+b") as f:
        f.seek(13 * mib + 5)
        f.write(b"rot")
    m.umount()
    m.remount()
    with open(big, "rb") as f:
        f.seek(2 * mib)
        assert f.read(mib) == data[2 * mib:3 * mib]
        f.seek(13 * mib)
        with pytest.raises(OSError) as exc:
            f.read(mib)
        assert exc.value.errno == errno.EIO
    assert "chunk 13 does not match its sum" in m.log_text()
    assert _errno(_read, big) == errno.EIO  # refused from then on, not served from other chunks


def test_data_missing_from_the_store_is_eio_not_enoent(gravfs_mount):
    """A listed file whose data object is gone has lost its data: EIO (and an error in
    the log), not ENOENT, which would say the file does not exist."""
    import hashlib

    m = gravfs_mount
    big, small = os.urandom(9 * 1024 * 1024), b"small content"
    _write(m.branch_path("big"), big)
    _write(m.branch_path("small"), small)
    cid = m.commit()
    m.umount()
    for data in (big, small):
        digest = hashlib.sha256(data).hexdigest()
        os.unlink(os.path.join(m.store, "data", digest[:2], digest))
    m.remount()
    for name in ("big", "small"):
        assert os.path.exists(m.path("commits", cid, name))
        assert _errno(_read, m.path("commits", cid, name)) == errno.EIO  # in place / tier
    with pytest.raises(OSError) as exc:  # a write needs the old content first
        with open(m.branch_path("small"), "r+b") as f:
            f.write(b"X")
    assert exc.value.errno == errno.EIO
    assert "is missing" in m.log_text()


def test_read_only_mount(tmp_path):
    from tests.fuse_util import Mount
    m = Mount(str(tmp_path)).init()
    src = tmp_path / "x"
    src.write_bytes(b"committed")
    m.cli("put", str(src), "main:x")
    m.cli("commit", "main", "-m", "x")
    m.mount(options=["ro"])
    try:
        assert _read(m.branch_path("x")) == b"committed"
        assert _errno(open, m.branch_path("y"), "wb") == errno.EROFS
        assert _errno(os.mkdir, m.path("branches", "new")) == errno.EROFS
        assert _errno(os.unlink, m.branch_path("x")) == errno.EROFS
    finally:
        m.cleanup()


def test_create_read_only_then_write_through_another_handle(gravfs_mount):
    m = gravfs_mount
    p = m.branch_path("ro-created")
    fd_ro = os.open(p, os.O_CREAT | os.O_RDONLY, 0o644)
    with open(p, "r+b") as w:
        os.close(fd_ro)  # releasing the read-only creator must not end the writer's copy
        w.write(b"still writing")
    assert _read(p) == b"still writing"
    assert m.cli("cat", "main:ro-created").stdout == "still writing"


# -- caching of branch trees (long attribute timeouts, stat cache) --------------------------


def test_acl_and_selinux_xattrs_are_not_supported_and_user_xattrs_work(gravfs_mount):
    """POSIX ACLs and SELinux labels are not kept: asked or set, they answer
    EOPNOTSUPP as on a filesystem without them (ls -l then asks once per device,
    see the next test), while user and other security.* xattrs keep working."""
    m = gravfs_mount
    p = m.branch_path("f")
    _write(p, b"data")
    os.mkdir(m.branch_path("d"))
    os.setxattr(p, "user.k", b"v")
    cid = m.commit()
    for path in (p, m.branch_path("d"), m.path("commits", cid, "f"), m.branch_path(), m.mnt):
        for name in ("system.posix_acl_access", "system.posix_acl_default", "security.selinux"):
            assert _errno(os.getxattr, path, name) == errno.EOPNOTSUPP, (path, name)
    # a write asks security.capability first: "none", not an error
    assert _errno(os.getxattr, p, "security.capability") == errno.ENODATA
    for name in ("system.other", "security.selinux"):  # (the kernel checks capabilities' form)
        assert _errno(os.setxattr, p, name, b"x") == errno.ENOTSUP, name
    for name in ("system.other", "security.selinux", "security.capability"):
        assert _errno(os.removexattr, p, name) == errno.ENOTSUP, name
    assert os.getxattr(p, "user.k") == b"v"
    assert os.getxattr(m.path("commits", cid, "f"), "user.k") == b"v"
    os.setxattr(p, "security.label", b"lbl")  # security.* other than labels: kept
    assert os.getxattr(p, "security.label") == b"lbl"
    assert sorted(os.listxattr(p)) == ["security.label", "user.k"]
    out = subprocess.run(["ls", "-l", m.branch_path()], capture_output=True, text=True, check=True)
    assert " d\n" in out.stdout and " f\n" in out.stdout and not out.stderr
    m.assert_clean_log()


def _remount_counting(m, tmp_path) -> str:
    """Mount again with the daemon counting its requests (GRAVFS_OPSTATS); the table's path."""
    m.umount()
    stats = str(tmp_path / "opstats")
    m.env["GRAVFS_OPSTATS"] = stats
    m.mount()
    return stats


def _counted_calls(m, stats: str) -> dict[str, int]:
    """Unmount (the daemon writes its table) and read calls per handler from it."""
    m.umount()
    with open(stats) as f:
        return {line.split()[0]: int(line.split()[1]) for line in f.read().splitlines()[1:]}


def test_ls_l_asks_for_acls_and_labels_once_not_per_entry(gravfs_mount, tmp_path):
    """ls -l of a directory sends no GETXATTR per entry: told once that ACLs and
    labels are not supported, ls stops asking on this mount (GRAVFS_OPSTATS counts
    the daemon's requests)."""
    m = gravfs_mount
    os.mkdir(m.branch_path("many"))
    for i in range(100):
        _write(m.branch_path("many", f"f{i:03d}"), b"x")
    stats = _remount_counting(m, tmp_path)
    out = subprocess.run(["ls", "-l", m.branch_path("many")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.count(" f") == 100 and not out.stderr
    calls = _counted_calls(m, stats)
    assert calls["readdir"] >= 1
    # the mount's own checks and ls's first entry; 200 when each entry is asked twice
    assert calls.get("getxattr", 0) <= 10, calls


@pytest.mark.skipif(not kernel.direct_writes(),
                    reason="before Linux 6.6 write-only opens keep the page cache: a direct "
                           "write there leaves a reader's cached pages stale")
def test_write_only_opens_ask_no_xattr_before_each_write(gravfs_mount, tmp_path):
    """Write-only opens bypass the page cache, so the kernel does not ask for
    security.capability before each write(2) (100 writes: 100 GETXATTR through the
    page cache); a file created so and one opened so for appends."""
    m = gravfs_mount
    stats = _remount_counting(m, tmp_path)
    path = m.branch_path("log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for i in range(50):
        os.write(fd, b"%04d\n" % i)
    os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    for i in range(50, 100):
        os.write(fd, b"%04d\n" % i)
    os.close(fd)
    assert _read(path) == b"".join(b"%04d\n" % i for i in range(100))
    calls = _counted_calls(m, stats)
    assert calls["write"] == 100
    assert calls.get("getxattr", 0) <= 5, calls
    m.remount()
    assert _read(path) == b"".join(b"%04d\n" % i for i in range(100))
    assert "write-only opens bypass the page cache (kernel" in m.log_text()
    m.assert_clean_log()


def test_a_reader_holding_the_file_sees_what_write_only_opens_write(gravfs_mount):
    """Pages a reader cached (read(2) and a shared mapping) show the bytes a write-only
    open writes over them, and the part of a page a reader saw short of the end
    (tail -f) shows what was appended there."""
    path = gravfs_mount.branch_path("data.bin")
    _write(path, b"a" * 20000)
    with open(path, "rb", buffering=0) as r:
        assert r.read() == b"a" * 20000
        view = mmap.mmap(r.fileno(), 0, prot=mmap.PROT_READ)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"B" * 100, 5000)
            r.seek(0)
            got = r.read()
            assert got[4990:5110] == b"a" * 10 + b"B" * 100 + b"a" * 10
            assert view[5000:5100] == b"B" * 100
            os.pwrite(fd, b"C" * 100, 19950)  # over the end, within its last page
            r.seek(19900)
            assert r.read() == b"a" * 50 + b"C" * 100
        finally:
            os.close(fd)
            view.close()
    assert os.stat(path).st_size == 20050
    gravfs_mount.assert_clean_log()


def test_a_shared_writable_mapping_writes_the_file(gravfs_mount):
    """Read-write opens keep the page cache: a MAP_SHARED mapping of one is written
    back, and what it wrote is staged by the close and committed."""
    m = gravfs_mount
    path = m.branch_path("mapped.bin")
    _write(path, b"0" * 8192)
    with open(path, "r+b") as f:
        with mmap.mmap(f.fileno(), 0) as view:
            view[100:105] = b"hello"
            view[8000:8005] = b"world"
            view.flush()
    expected = b"0" * 100 + b"hello" + b"0" * 7895 + b"world" + b"0" * 187
    assert _read(path) == expected
    m.cli("commit", "main", "-m", "mapped")
    m.umount()
    m.remount()
    assert _read(path) == expected
    m.assert_clean_log()


def test_staging_by_another_process_shows_before_the_attr_timeout(gravfs_mount):
    """Branch trees keep attributes in the kernel for 10 s; a write to the workspace's
    staging by another process (the CLI) is seen within a few poll intervals."""
    m = gravfs_mount
    _write(m.branch_path("f"), b"short")
    os.mkdir(m.branch_path("d"))
    assert os.stat(m.branch_path("f")).st_size == 5  # cached in the kernel now
    assert not os.path.exists(m.branch_path("d/new"))  # the mount knows d is empty
    local = os.path.join(m.base, "local")
    _write(local, b"much longer content")
    m.cli("put", local, "main:f")
    m.cli("put", local, "main:d/new")
    # from the CLI's exit: its own start-up time on a loaded machine is not the mount's
    wait_for(lambda: os.stat(m.branch_path("f")).st_size == 19, timeout=4)
    wait_for(lambda: os.path.exists(m.branch_path("d/new")), timeout=4)
    assert _read(m.branch_path("f")) == b"much longer content"
    assert _read(m.branch_path("d/new")) == b"much longer content"
    m.assert_clean_log()


def test_creates_in_a_new_directory_and_listing_agree(gravfs_mount):
    """Creates in a directory the mount made answer their lookups from the stat cache;
    what they report must match what a fresh listing and a remount show."""
    m = gravfs_mount
    d = m.branch_path("new")
    os.mkdir(d)
    for i in range(50):
        _write(os.path.join(d, f"c{i:03d}"), b"%d" % i)
    os.unlink(os.path.join(d, "c007"))
    os.rename(os.path.join(d, "c008"), os.path.join(d, "moved"))
    names = sorted(f"c{i:03d}" for i in range(50) if i not in (7, 8)) + ["moved"]
    assert sorted(os.listdir(d)) == sorted(names)
    assert not os.path.exists(os.path.join(d, "c007"))
    assert _read(os.path.join(d, "moved")) == b"8"
    assert os.stat(os.path.join(d, "c049")).st_size == 2
    m.umount()
    m.remount()
    assert sorted(os.listdir(d)) == sorted(names)
    assert _read(os.path.join(d, "c049")) == b"49"
    m.assert_clean_log()


# -- keys another writer made (issue 9) -----------------------------------------------------


def test_a_name_both_file_and_directory_leaves_no_name_out_of_a_listing(gravfs_mount):
    """Object-store data: d/0050 and d/0050/in. The directory is listed, once, and every
    other name too: readdir took a batch shortened by the file it drops for its end (511
    of 1,000 names listed)."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    m = gravfs_mount
    other = Repository.open(m.store, os.path.join(m.base, "other-writer"))
    try:
        a, n = other.data.put_bytes(b"x")
        e = EntryInfo(address=a, size=n, mtime_ns=1, kind=KIND_FILE)
        other.stage("main", [(b"d/%04d" % i, e) for i in range(1000)] + [(b"d/0050/in", e)])
        cid = other.commit("main", "imported").id
    finally:
        other.close()
    for root in (m.path("commits", cid, "d"), m.branch_path("d")):
        wait_for(lambda: os.path.isdir(root))
        names = os.listdir(root)
        assert sorted(names) == ["%04d" % i for i in range(1000)], root
        assert os.listdir(os.path.join(root, "0050")) == ["in"]


def test_foreign_keys_list_escaped_and_read_through_the_mount(gravfs_mount):
    """A listing never fails over keys gravfs would refuse (they made `ls` fail with EIO
    and nothing logged): each one is shown under its escaped name, reads back, is
    logged once, and is read-only until renamed to a proper name."""
    from gravfs.fs.repository import Repository
    from tests.foreign_util import FOREIGN_KEYS, commit_keys
    m = gravfs_mount
    os.makedirs(m.branch_path("d"))
    _write(m.branch_path("d/fine"), b"fine")
    _write(m.branch_path("ok.txt"), b"ok")
    m.commit()
    other = Repository.open(m.store, os.path.join(m.base, "other-writer"))
    try:
        cid = commit_keys(other, "main", FOREIGN_KEYS, dirs=(b"/empty/",)).id
    finally:
        other.close()
    root = m.path("commits", cid)
    listing = sorted(os.listdir(root))
    long = [n for n in listing if n.startswith("long")]
    assert len(long) == 1 and len(long[0]) == 255
    assert listing == sorted(["%2Fabs", "%2Fempty", "a", "d", long[0], "nul%00x", "ok.txt",
                              "trail%2F"])
    assert sorted(os.listdir(os.path.join(root, "d"))) == ["%2E", "%2E%2E", "fine"]
    assert os.listdir(os.path.join(root, "a")) == ["%2Fb"]
    shown = {"%2Fabs": b"/abs", "a/%2Fb": b"a//b", "d/%2E%2E/up": b"d/../up",
             "d/%2E/dot": b"d/./dot", "nul%00x": b"nul\x00x", long[0]: b"long" + b"x" * 300,
             "trail%2F": b"trail/"}
    for path, key in shown.items():
        assert _read(os.path.join(root, path)) == FOREIGN_KEYS[key]
    walked = sorted(os.path.relpath(os.path.join(d, f), root)
                    for d, _, files in os.walk(root) for f in files)
    assert walked == sorted(list(shown) + ["ok.txt", "d/fine"])
    # the branch shows the same once the mount sees its new head
    wait_for(lambda: "nul%00x" in os.listdir(m.branch_path()), timeout=30)
    assert sorted(os.listdir(m.branch_path())) == listing
    assert _errno(_write, m.branch_path("%2Fabs"), b"x") == errno.EPERM
    assert _errno(_write, m.branch_path("d/%2E%2E/new"), b"x") == errno.EPERM
    os.rename(m.branch_path("%2Fabs"), m.branch_path("abs"))
    os.unlink(m.branch_path("nul%00x"))
    os.rmdir(m.branch_path("%2Fempty"))
    assert _read(m.branch_path("abs")) == b"leading slash"
    names = os.listdir(m.branch_path())
    assert "abs" in names and not {"%2Fabs", "nul%00x", "%2Fempty"} & set(names)
    m.commit(message="names fixed")
    other = Repository.open(m.store, os.path.join(m.base, "other-writer"))
    try:
        keys = {n.key for n in other.walk_key("main", b"")}
    finally:
        other.close()
    assert b"abs" in keys and not keys & {b"/abs", b"nul\x00x", b"/empty/"}
    text = m.log_text()
    assert text.count("key b'nul\\x00x' (NUL byte) is shown as nul%00x") == 1
    assert text.count("key b'/abs'") == 1
    m.assert_clean_log()


# -- sparse files ----------------------------------------------------------------------------


def _stored_bytes(m) -> int:
    """Bytes of file content in the store (data objects and sparse manifests)."""
    total = 0
    for top in ("data", "sparse"):
        for d, _, files in os.walk(os.path.join(m.store, top)):
            total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    return total


def _local_copies_allocated(m) -> int:
    """Disk blocks the mount's local copies of open files take."""
    total = 0
    for d, _, files in os.walk(os.path.join(m.state_dir, "repos")):
        if os.sep + "files" + os.sep in d + os.sep:
            total += sum(os.stat(os.path.join(d, f)).st_blocks * 512 for f in files)
    return total


def test_sparse_file_stays_sparse(gravfs_mount):
    """truncate -s 1G, then one write at its end: holes are neither uploaded nor copied
    back for writing, and no unreferenced 1 GiB object is left behind."""
    m = gravfs_mount
    size = 1 << 30
    p = m.branch_path("sparse.img")
    before = _stored_bytes(m)
    subprocess.run(["truncate", "-s", str(size), p], check=True)
    assert os.stat(p).st_size == size
    assert _stored_bytes(m) == before  # all hole: no object at all
    tail = os.urandom(4096)
    with open(p, "r+b") as f:
        f.seek(size - len(tail))
        f.write(tail)
        f.flush()
        assert _local_copies_allocated(m) < 8 << 20  # the copy-on-write copied no zeros
    assert _stored_bytes(m) - before < 4 << 20
    with open(p, "rb") as f:
        assert f.read(4096) == b"\0" * 4096
        f.seek(size // 2)
        assert f.read(1 << 20) == b"\0" * (1 << 20)
        f.seek(size - 8192)
        assert f.read() == b"\0" * 4096 + tail
    cid = m.commit(message="sparse")
    with open(m.path("commits", cid[:12], "sparse.img"), "rb") as f:
        f.seek(size - 8192)
        assert f.read() == b"\0" * 4096 + tail
    # extended by truncate, then written in the middle: still no zeros stored
    with open(p, "r+b") as f:
        f.truncate(2 * size)
        f.seek(size + size // 2)
        f.write(b"middle")
    assert os.stat(p).st_size == 2 * size
    with open(p, "rb") as f:
        f.seek(size + size // 2 - 2)
        assert f.read(8) == b"\0\0middle"
    assert _stored_bytes(m) - before < 8 << 20
    m.commit(message="extended")
    fsck = m.cli("fsck", "--data")
    assert "clean" in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
    m.assert_clean_log()


def test_sparse_content_dedups_and_reads_through_the_cli(gravfs_mount, tmp_path):
    m = gravfs_mount
    size = 48 << 20
    head, mid = os.urandom(5000), os.urandom(3 << 20)
    content = bytearray(size)
    content[:len(head)] = head
    content[20 << 20:(20 << 20) + len(mid)] = mid
    # one copy written with holes (seek past them), one written densely (zeros written)
    with open(m.branch_path("holes.bin"), "wb") as f:
        f.write(head)
        f.seek(20 << 20)
        f.write(mid)
        f.truncate(size)
    _write(m.branch_path("dense.bin"), bytes(content))
    local = tmp_path / "local.bin"
    with open(local, "wb") as f:
        f.write(head)
        f.seek(20 << 20)
        f.write(mid)
        f.truncate(size)
    m.cli("put", str(local), "main:put.bin")
    cid = m.commit(message="three copies")
    import json
    rows = {r["path"]: r for r in map(json.loads, m.cli("ls", "--json", cid).stdout.splitlines())}
    addresses = {rows[n]["address"] for n in ("holes.bin", "dense.bin", "put.bin")}
    assert len(addresses) == 1, rows  # the same bytes: one address however written
    assert addresses.pop().startswith("sparse/")
    assert _stored_bytes(m) < 8 << 20
    out = subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir",
                          m.state_dir, "cat", f"{cid}:holes.bin"], capture_output=True,
                         env=m.env, check=True).stdout
    assert out == bytes(content)
    assert _read(m.path("commits", cid[:12], "put.bin")) == bytes(content)
    m.assert_clean_log()


def test_big_files_get_their_contents_address_however_written(gravfs_mount):
    """A big file written in order is hashed as it is written (its close does not read
    it again); one rewritten in places, appended to after an fsync, or truncated is
    hashed whole at its close. Every one is stored under the address of its bytes."""
    from gravfs.data.objects import address_of
    m = gravfs_mount
    body = os.urandom(9 << 20)
    step = 128 << 10
    with open(m.branch_path("in-order.bin"), "wb", buffering=0) as f:
        for off in range(0, len(body), step):
            f.write(body[off:off + step])
    with open(m.branch_path("rewritten.bin"), "wb", buffering=0) as f:
        f.write(body)
        f.seek(3 << 20)
        f.write(body[3 << 20:(3 << 20) + step])  # the same bytes again, out of order
    with open(m.branch_path("synced.bin"), "wb", buffering=0) as f:
        f.write(body[:6 << 20])
        os.fsync(f.fileno())  # staged here, then appended to
        f.write(body[6 << 20:])
    with open(m.branch_path("cut.bin"), "wb", buffering=0) as f:
        f.write(body + b"tail")
        f.truncate(len(body))
    cid = m.commit(message="big files")
    import json
    rows = {r["path"]: r for r in map(json.loads, m.cli("ls", "--json", cid).stdout.splitlines())}
    want = address_of(hashlib.sha256(body).hexdigest())
    for name in ("in-order.bin", "rewritten.bin", "synced.bin", "cut.bin"):
        assert rows[name]["address"] == want, name
        assert _read(m.path("commits", cid[:12], name)) == body
    m.assert_clean_log()


def test_lookups_list_ahead_only_in_ascending_runs():
    """A lookup that misses the stat cache lists the next names only after
    ASCENDING_RUN misses in a row went up (ls, find, a sorted stat loop), growing
    the batch when the lookups run past it; random order lists (almost) nothing."""
    import random

    from gravfs.fuse.inodes import Inode
    from gravfs.fuse.operations import ASCENDING_RUN, READDIR_BATCH, GravfsOperations

    ahead = GravfsOperations._lookahead
    d = Inode(20, None, b"d", "dir", 1, b"d")
    names = [b"f%05d" % i for i in range(20000)]
    listed = 0
    for name in random.Random(7).sample(names, 2000):
        listed += ahead(d, b"d/" + name, 0) > 0  # (nothing listed is ever looked up)
    assert listed <= 5  # wasted listings make the parent wait for longer runs

    # 2000 random lookups spread over 50 directories, 40 each (random stats over a
    # partitioned table): no directory sees many misses, so each one's first chance
    # run is what lists (31-43 times in all with a run of 3, 0-2 with 6)
    dirs = [Inode(100 + i, None, b"d%d" % i, "dir", 1, b"d%d" % i) for i in range(50)]
    rnd = random.Random(8)
    listed = 0
    for i in range(2000):
        d = dirs[i % 50]
        listed += ahead(d, d.key + b"/" + rnd.choice(names), 0) > 0
    assert listed <= 3

    d = Inode(21, None, b"d", "dir", 1, b"d")
    hits = 0
    got = [ahead(d, b"d/" + n, hits) for n in names[:ASCENDING_RUN + 1]]
    assert got == [0] * ASCENDING_RUN + [32]
    d.extra["listed_upto"] = names[ASCENDING_RUN + 32]  # what that listing reached
    hits += 32  # ... and the kernel looked those names up: stat cache hits
    assert ahead(d, b"d/" + names[ASCENDING_RUN + 33], hits) == 64  # ran past it: doubled
    d.extra["listed_upto"] = names[ASCENDING_RUN + 33 + 64]
    hits += 64
    assert ahead(d, b"d/" + names[ASCENDING_RUN + 34 + 64], hits) == 128
    hits += 128
    assert ahead(d, b"d/" + names[5], hits) == 0  # went back: the run starts over
    assert [ahead(d, b"d/" + n, hits) for n in names[6:6 + ASCENDING_RUN]] == \
        [0] * (ASCENDING_RUN - 1) + [32]
    d.extra["listed_upto"] = names[0]
    for i in range(10):  # running past every batch: doubling up to the readdir batch
        d.extra["listed_upto"] = names[100 * i + 100]
        hits += READDIR_BATCH
        got = ahead(d, b"d/" + names[100 * i + 101], hits)
    assert got == READDIR_BATCH


def test_a_listing_ahead_nobody_used_is_not_repeated():
    """Random lookups can rise a few times in a row; when the names listed ahead then
    go unlooked-up, the next rising miss lists nothing and the parent needs a run
    twice as long; a listing that is used brings the usual run back."""
    from gravfs.fuse.inodes import Inode
    from gravfs.fuse.operations import ASCENDING_RUN, GravfsOperations

    ahead = GravfsOperations._lookahead
    d = Inode(22, None, b"d", "dir", 1, b"d")
    names = [b"f%05d" % i for i in range(20000)]
    assert [ahead(d, b"d/" + n, 0) for n in names[:ASCENDING_RUN + 1]] == [0] * ASCENDING_RUN + [32]
    assert ahead(d, b"d/" + names[1000], 0) == 0  # no hits since: not listed again
    twice = [ahead(d, b"d/" + n, 0) for n in names[1001:1001 + 2 * ASCENDING_RUN]]
    assert twice == [0] * (2 * ASCENDING_RUN - 1) + [32]
    # this time the names were looked up (32 hits): the run goes on listing, and after
    # a step back the usual run is enough again
    assert ahead(d, b"d/" + names[5000], 32) == 32
    assert ahead(d, b"d/" + names[10], 64) == 0
    assert [ahead(d, b"d/" + n, 64) for n in names[11:11 + ASCENDING_RUN]] == \
        [0] * (ASCENDING_RUN - 1) + [32]


def test_a_runs_first_listing_ahead_runs_on_the_loop_when_it_reads_nothing_from_the_store(
        tmp_path):
    """Lookups in ascending order list the next names ahead: the run's first listing
    (FIRST_AHEAD names) on the event loop's thread while everything it needs is at
    hand (the worker's trip was 40% of a scan over small directories), the longer
    ones after it on a worker, and the first one on a worker too when it would read
    the store (here: the branch head, its cache expired); the answers are the same."""
    import threading

    import trio

    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fuse import operations as ops_mod
    from gravfs.fuse.inodes import ROOT

    repo, ops, ctx = _ops_in_process(tmp_path)
    names = [b"f%05d" % i for i in range(200)]
    for d in (b"d", b"e"):
        repo.stage("main", [(d + b"/" + name, EntryInfo(
            address="data/00/" + "0" * 64, size=i + 1, mtime_ns=1, mode=0o100644, kind=KIND_FILE))
            for i, name in enumerate(names)])
    # (names listed ahead, thread) of each stat that listed: (tree, key, dir_key, ahead)
    listings = _threads_of(ops, "_stat_versioned",
                           lambda args, thread: (args[3], thread) if args[3:4] and args[3] else None)
    loop_thread = threading.get_ident()

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            d = await _dir_d(ops)
            for i, name in enumerate(names):
                assert (await ops.lookup(d, name)).st_size == i + 1
            first, *later = listings
            assert first == (ops_mod.FIRST_AHEAD, loop_thread)
            assert later and all(n > ops_mod.FIRST_AHEAD and t != loop_thread for n, t in later)
            listings.clear()
            repo.head_ttl = 0  # every stat and listing now reads the head from the store
            b = await ops.lookup(ROOT, b"branches")
            e = (await ops.lookup((await ops.lookup(b.st_ino, b"main")).st_ino, b"e")).st_ino
            for i, name in enumerate(names[:ops_mod.ASCENDING_RUN + 1]):
                assert (await ops.lookup(e, name)).st_size == i + 1
            assert len(listings) == 1 and listings[0][0] == ops_mod.FIRST_AHEAD
            assert listings[0][1] != loop_thread
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        repo.close()


def test_readdir_lists_the_next_batch_while_the_kernel_takes_a_reply(tmp_path, monkeypatch):
    """A reply the kernel had no room for keeps the rest of its batch and lists the next
    one meanwhile; the readdir that reaches that batch takes it (no batch
    is listed twice), names come out once each and in order, and a readdir from an
    earlier offset or from the start does not take a batch listed for elsewhere."""
    import trio

    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod
    from gravfs.fuse.inodes import ROOT

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    repo = Repository.init(store, state)
    n = 3 * ops_mod.READDIR_BATCH + 7
    e = EntryInfo(address="data/00/" + "0" * 64, size=1, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    repo.stage("main", [(b"d/f%05d" % i, e) for i in range(n)])
    names = [b"f%05d" % i for i in range(n)]
    ops = ops_mod.GravfsOperations(repo, MountOptions())
    room = 300  # entries the "kernel" takes per readdir: less than a batch
    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply", _kernel_reply(room))
    listed, aheads = [], []
    list_batch, list_ahead = ops._list_batch, ops._list_ahead

    def counted(tree, key, after, *limit):  # a listing made (not one that would have waited)
        batch = list_batch(tree, key, after, *limit)
        listed.append(after)
        return batch

    ops._list_batch = counted
    ops._list_ahead = lambda h, tree, key, after: aheads.append(after) or list_ahead(h, tree, key,
                                                                                       after)

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            d = await ops.lookup(ROOT, b"branches")
            d = await ops.lookup(d.st_ino, b"main")
            d = await ops.lookup(d.st_ino, b"d")
            fh = await ops.opendir(d.st_ino, None)
            whole = await _read_dir(ops, fh)
            assert [name for name, _ in whole] == names
            # four batches, each listed once (the end is known without a fifth listing)
            assert len(set(aheads)) == 3 and len(listed) == len(set(listed)) == 4
            # back to the 101st name, with a batch listed ahead for elsewhere
            part = await _read_dir(ops, fh, replies=1)
            assert [name for name, _ in part] == names[:room] and ops.dirs[fh].ahead is not None
            again = await _read_dir(ops, fh, whole[100][1], replies=2)
            assert [name for name, _ in again] == names[101:101 + 2 * room]
            await ops.releasedir(fh)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        repo.close()


@pytest.mark.parametrize("mounter", [(1001, 1002), (0, 0)])
def test_roots_entries_are_the_mounting_users_in_a_mount_a_user_runs(tmp_path, mounter):
    """``gravfs import``, ``put``, a Spark import and lakeFS record no owner (uid and gid
    0): a mount run by a user showed those files as root's, 0644, so the user could
    not write, append to or chmod them (EACCES), in directories shown as theirs. Root's
    entries are the mounting user's there; another owner stays; a root mount is as it was.
    (In process: this machine's interpreter is under /root, where no other uid reaches.)"""
    import trio

    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod
    from gravfs.fuse.inodes import ROOT

    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    e = EntryInfo(address="data/00/" + "0" * 64, size=1, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    repo.stage("main", [(b"d/imported", e), (b"d/theirs", EntryInfo(
        address=e.address, size=1, mtime_ns=1, mode=0o100644, uid=1234, gid=1235))])
    ops = ops_mod.GravfsOperations(repo, MountOptions())
    ops.uid, ops.gid = mounter  # as os.getuid() and os.getgid() of a daemon the user runs

    async def main():
        d = await ops.lookup(ROOT, b"branches")
        d = await ops.lookup(d.st_ino, b"main")
        d = await ops.lookup(d.st_ino, b"d")
        imported = await ops.lookup(d.st_ino, b"imported")
        theirs = await ops.lookup(d.st_ino, b"theirs")
        return [(a.st_uid, a.st_gid) for a in (d, imported, theirs)]

    try:
        assert trio.run(main) == [mounter, mounter, (1234, 1235)]
    finally:
        repo.close()


def test_a_first_and_an_ahead_listing_run_on_the_loop_when_they_read_nothing_from_the_store(
        tmp_path, monkeypatch):
    """A directory's first batch and the batch listed ahead while the kernel takes a
    reply are listed on the event loop's thread while everything they need is at hand
    (a worker's trip passed the GIL back and forth with the replies: a traversal ran
    8-13% slower; it was a third of a small directory's time), and on a worker when
    they would read the store (here: the branch head, its cache expired); a later
    batch a reply waits for is listed on a worker; the names are the same either way."""
    import threading

    import trio

    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fuse import operations as ops_mod

    repo, ops, ctx = _ops_in_process(tmp_path)
    n, room = 2 * ops_mod.READDIR_BATCH + 5, ops_mod.READDIR_BATCH + 188
    e = EntryInfo(address="data/00/" + "0" * 64, size=1, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    names = [b"f%05d" % i for i in range(n)]
    repo.stage("main", [(b"d/" + name, e) for name in names])

    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply", _kernel_reply(room))
    threads = _threads_of(ops, "_list_batch")
    loop_thread = threading.get_ident()

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            d = await _dir_d(ops)
            fh = await ops.opendir(d, None)
            assert [name for name, _ in await _read_dir(ops, fh)] == names
            # the first reply takes the first batch (the loop), then the second (a
            # worker: the reply waits for it), and lists the third ahead (the loop)
            assert len(threads) == 3 and threads[1] != loop_thread
            assert threads[0] == threads[2] == loop_thread
            threads.clear()
            repo.head_ttl = 0  # every listing now reads the head from the store
            assert [name for name, _ in await _read_dir(ops, fh)] == names
            assert len(threads) == 3 and loop_thread not in threads
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        repo.close()


def test_a_long_readdir_reply_lets_other_requests_run_and_stays_current(tmp_path, monkeypatch):
    """A reply of many entries takes turns with the loop's other tasks (another
    client's request waited out a whole 700-entry reply, ~15 ms, during a traversal)
    and, while work runs on a thread, hands it the GIL; a name unlinked during such a
    turn is not listed after it, and every other name is listed once."""
    import trio

    from gravfs import threadwork
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fuse import operations as ops_mod
    from gravfs.fuse import spin

    repo, ops, ctx = _ops_in_process(tmp_path)
    n, room = 2000, 1000
    e = EntryInfo(address="data/00/" + "0" * 64, size=1, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    names = [b"f%05d" % i for i in range(n)]
    repo.stage("main", [(b"d/" + name, e) for name in names])
    in_reply = trio.Event()

    def reply(token, name, attrs, off):
        if len(token) >= room:
            return False
        token.append((name, off))
        if len(token) == 10:
            in_reply.set()
        return True

    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply", reply)
    handed: list = []
    monkeypatch.setattr(spin.Activity, "hand_over", lambda self: handed.append(1))
    seen_at: list = []

    async def other_client(token: list, d: int) -> None:
        while not in_reply.is_set():
            await trio.sleep(0)
        seen_at.append(len(token))
        await ops.unlink(d, names[1500], ctx)

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            d = await _dir_d(ops)
            fh = await ops.opendir(d, None)
            token: list = []
            nursery.start_soon(other_client, token, d)
            await ops.readdir(fh, 0, token)
            # the other task ran inside the reply, and the reply stopped at that turn
            assert seen_at and 10 <= seen_at[0] < room and len(token) == seen_at[0]
            out = token + await _read_dir(ops, fh, token[-1][1])
            handed.clear()  # (the listings ahead above ran on threads too)
            with threadwork.working():  # (as a worker's statfs marks itself)
                token = []
                await ops.readdir(fh, 0, token)
            # one a turn (and one as the request arrives: Activity.note)
            assert len(handed) == len(token) // ops_mod.READDIR_TURN + 1
            await ops.releasedir(fh)
            assert [name for name, _ in out] == names[:1500] + names[1501:]
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        repo.close()


def test_listed_files_are_answered_from_the_stat_cache_and_stay_current(tmp_path, monkeypatch):
    """A branch listing files its files in the stat cache and does not remember them a
    second time per inode; getattr and open of a listed file answer what the listing
    showed, an entry remembered before the listing is refreshed by it (not left stale),
    and a listed directory is remembered as before (the stat cache holds no
    directories from listings)."""
    import trio

    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    repo = Repository.init(store, state)

    def entry(size: int) -> EntryInfo:
        return EntryInfo(address="data/00/" + "0" * 64, size=size, mtime_ns=size,
                         mode=0o100644, kind=KIND_FILE)

    repo.stage("main", [(b"d/f%d" % i, entry(10 + i)) for i in range(5)]
               + [(b"d/sub/x", entry(1))])
    ops = ops_mod.GravfsOperations(repo, MountOptions())
    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply",
                        lambda token, name, attrs, off: token.append((name, attrs)) or True)

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            d = await _dir_d(ops)
            f0 = await ops.lookup(d, b"f0")  # remembered: size 10
            assert ops.inodes.remembered(ops._node(f0.st_ino))[0].size == 10
            repo.stage("main", [(b"d/f0", entry(99))])  # as another process would
            fh = await ops.opendir(d, None)
            token: list = []
            await ops.readdir(fh, 0, token)
            await ops.releasedir(fh)
            listed = dict(token)
            assert sorted(listed) == [b"f0", b"f1", b"f2", b"f3", b"f4", b"sub"]
            assert listed[b"f0"].st_size == 99 and listed[b"f3"].st_size == 13
            # the entry remembered before the listing follows it
            assert ops.inodes.remembered(ops._node(f0.st_ino))[0].size == 99
            assert (await ops.getattr(f0.st_ino)).st_size == 99
            # a file met first in the listing: not remembered, answered all the same
            f3 = ops._node(listed[b"f3"].st_ino)
            assert ops.inodes.remembered(f3) is None
            assert (await ops.getattr(f3.ino)).st_size == 13
            fi = await ops.open(f3.ino, os.O_RDONLY, None)
            await ops.release(fi.fh)
            assert ops.inodes.remembered(ops._node(listed[b"sub"].st_ino)) is not None
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        repo.close()


def test_a_kernel_that_forgets_most_inodes_makes_the_daemon_drop_its_caches(tmp_path,
                                                                             monkeypatch):
    """After a walk the kernel forgets (its dentries reclaimed or dropped): the stat
    cache and the parsed ranges the walk filled go too, so the memory can go back
    (CPython keeps an arena while anything in it lives). The listing itself puts
    nothing in the block cache."""
    import trio

    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod
    from gravfs.fuse.inodes import FIRST_DYNAMIC, ROOT
    from gravfs.sstable import DEFAULT_CACHE

    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    e = EntryInfo(address="data/00/" + "0" * 64, size=1, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    n = 6000
    repo.stage("main", [(b"d/f%05d" % i, e) for i in range(n)])
    repo.commit("main", "six thousand")
    ops = ops_mod.GravfsOperations(repo, MountOptions())
    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply", lambda token, name, attrs, off:
                        token.append(off) or True)
    ranges = repo.committed.ranges

    async def main():
        d = await ops.lookup(ROOT, b"branches")
        d = await ops.lookup(d.st_ino, b"main")
        d = await ops.lookup(d.st_ino, b"d")
        cached = DEFAULT_CACHE.used_bytes
        fh = await ops.opendir(d.st_ino, None)
        start, listed = 0, 0
        while True:
            token: list = []
            await ops.readdir(fh, start, token)
            if not token:
                break
            listed, start = listed + len(token), token[-1]
        await ops.releasedir(fh)
        assert listed == n and len(ops.inodes) > n
        assert DEFAULT_CACHE.used_bytes <= cached
        assert ops.statcache._nodes["main"] and len(ranges._states) > 0
        known = [(node.ino, node.lookups) for node in ops.inodes.all()
                 if ops.inodes.parent_of(node) == d.st_ino]
        assert len(known) == n
        await ops.forget(known[: n // 2])  # half: the caches stay
        assert ops.statcache._nodes["main"] and len(ranges._states) > 0
        await ops.forget(known[n // 2:])
        assert not ops.statcache._nodes and len(ranges._states) == 0
        assert len(ops.inodes) < FIRST_DYNAMIC  # the directory, the root and virtual ones
        attrs = await ops.lookup(d.st_ino, b"f01234")  # everything reads as before
        assert attrs.st_size == 1

    try:
        trio.run(main)
    finally:
        repo.close()


def test_many_missing_names_in_a_commit_answer_enoent(gravfs_mount):
    """A burst of failed lookups on a commit path answers ENOENT each time: when they
    ran on worker threads, each exception came back through trio with its read
    transaction in a reference cycle, and after 256 of them (the staging database's
    reader slots) the next ones answered EIO. (The worker path itself is tested by
    test_a_failed_worker_call_frees_its_read_transaction.)"""
    m = gravfs_mount
    os.mkdir(m.branch_path("d"))
    _write(m.branch_path("d", "kept"), b"x")
    cid = m.commit()
    d = m.path("commits", cid, "d")
    for i in range(600):
        assert _errno(os.stat, os.path.join(d, f"gone{i:04d}")) == errno.ENOENT
    assert _read(os.path.join(d, "kept")) == b"x"
    m.assert_clean_log()


def test_a_failed_worker_call_frees_its_read_transaction(tmp_path):
    """The transaction held by a frame of a worker thread's exception is freed when the
    exception reaches the event loop, not at the next collector pass."""
    import gc
    import io

    import trio

    from gravfs.errors import NotFoundError
    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod
    from gravfs.version.repository import RefTarget

    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    repo.write_file("main", "d/kept", io.BytesIO(b"x"))
    commit = repo.commits.get(repo.commit("main", "one").id)
    ops = ops_mod.GravfsOperations(repo, MountOptions())

    async def main():
        for i in range(300):  # more than the staging database's reader slots
            with pytest.raises(NotFoundError):  # raised in Repository.stat's read txn
                await ops.run(repo.stat, RefTarget(commit), f"d/gone{i}")
        assert (await ops.run(repo.stat, RefTarget(commit), "d/kept")).entry.size == 1

    gc.collect()
    gc.disable()  # (no collector pass: only prompt freeing helps)
    try:
        trio.run(main)
        readers = repo.staging.env.info()["num_readers"]
    finally:
        gc.enable()
        repo.close()
    assert readers <= 4  # slots ever used at once: not one per failed call


def test_commit_paths_are_looked_up_on_the_event_loop_when_all_is_at_hand(tmp_path):
    """A lookup on a commit path costs no worker-thread trip once its metarange is
    parsed and its range is in the tier (as on branch paths); the first one, which
    parses the metarange, gives way to a worker."""
    import io

    import pyfuse3
    import trio

    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod
    from gravfs.fuse.inodes import ROOT

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    repo = Repository.init(store, state)
    for i in range(20):
        repo.write_file("main", f"d/f{i:04d}", io.BytesIO(b"%d" % i))
    cid = repo.commit("main", "files").id
    repo.close()
    repo = Repository.open(store, state)  # a fresh daemon: nothing parsed yet
    ops = ops_mod.GravfsOperations(repo, MountOptions())
    trips = []
    run = ops.run

    async def counted(fn, *args, **kw):
        trips.append(getattr(fn, "__name__", repr(fn)))
        return await run(fn, *args, **kw)

    ops.run = counted

    async def main():
        c = await ops.lookup(ROOT, b"commits")
        c = await ops.lookup(c.st_ino, cid.encode())
        before = len(trips)
        d = await ops.lookup(c.st_ino, b"d")
        assert trips[before:] == ["stat"]  # the metarange is parsed on a worker
        for i in range(20):
            a = await ops.lookup(d.st_ino, b"f%04d" % i)
            assert a.st_size == len(b"%d" % i)
        with pytest.raises(pyfuse3.FUSEError) as err:
            await ops.lookup(d.st_ino, b"missing")
        assert err.value.errno == errno.ENOENT
        assert trips[before:] == ["stat"]  # the rest answered on the loop

    try:
        trio.run(main)
    finally:
        repo.close()


def _ops_in_process(tmp_path):
    """A repository with directory d and the mount's handlers over it (no kernel)."""
    import types

    from gravfs.fs.repository import Repository
    from gravfs.fuse import operations as ops_mod

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state).close()
    repo = Repository.open(store, state, staging_sync=False, head_ttl=60.0)
    repo.mkdir("main", "d")
    repo.data.start_uploader(1)
    ops = ops_mod.GravfsOperations(repo, MountOptions())
    ops.prepare(str(tmp_path / "files"))
    os.makedirs(ops.local.directory)
    ctx = types.SimpleNamespace(uid=os.getuid(), gid=os.getgid(), pid=os.getpid(), umask=0o22)
    return repo, ops, ctx


def _kernel_reply(room: int):
    """A fake pyfuse3.readdir_reply: a kernel with room for ``room`` entries a READDIR
    (the token is a list of (name, offset))."""
    def reply(token, name, attrs, off):
        if len(token) >= room:
            return False
        token.append((name, off))
        return True

    return reply


def _threads_of(ops, method: str, record=lambda args, thread: thread) -> list:
    """Wrap ``ops.<method>`` so each call that returns appends ``record(args, thread
    id)`` (unless None) to the list returned: which thread listed what. An attempt
    that raises (WouldWait, then a worker's turn) is not a call made."""
    import threading

    calls: list = []
    fn = getattr(ops, method)

    def wrapped(*args):
        got = fn(*args)
        kept = record(args, threading.get_ident())
        if kept is not None:
            calls.append(kept)
        return got

    setattr(ops, method, wrapped)
    return calls


async def _read_dir(ops, fh: int, start: int = 0, replies: int = 0) -> list:
    """(name, offset) of the READDIRs from offset ``start`` on, until one comes back
    empty (or after ``replies`` of them)."""
    out: list = []
    n = 0
    while replies == 0 or n < replies:
        token: list = []
        await ops.readdir(fh, start, token)
        if not token:
            break
        out += token
        start = token[-1][1]
        n += 1
    return out


async def _dir_d(ops) -> int:
    from gravfs.fuse.inodes import ROOT

    b = await ops.lookup(ROOT, b"branches")
    m = await ops.lookup(b.st_ino, b"main")
    return (await ops.lookup(m.st_ino, b"d")).st_ino


async def _create(ops, d: int, name: bytes, ctx):
    """What the kernel sends for open(O_CREAT) of a new name: a lookup that fails,
    then the create."""
    import pyfuse3

    with pytest.raises(pyfuse3.FUSEError):
        await ops.lookup(d, name)
    return await ops.create(d, name, 0o644, os.O_WRONLY | os.O_CREAT, ctx)


def test_a_created_file_is_staged_with_its_first_close_in_one_transaction(tmp_path):
    """Create, write, chmod and close of a new file commit one staging transaction: the
    create's (the provisional entry and the directory's new times) waits for the close
    when no other request comes between."""
    import types

    import pyfuse3
    import trio

    repo, ops, ctx = _ops_in_process(tmp_path)

    async def main():
        d = await _dir_d(ops)
        await ops.getattr(d)  # the directory's marker in the stat cache, as the kernel does
        before = repo.staging.change_counter()
        t0 = time.time_ns()
        fi, attrs = await _create(ops, d, b"new", ctx)
        fi_ino = attrs.st_ino
        assert repo.staging.change_counter() == before  # nothing staged yet
        await ops.write(fi.fh, 0, b"content")
        attr = pyfuse3.EntryAttributes()
        attr.st_mode, attr.st_mtime_ns = 0o600, 1_000_000_000
        fields = types.SimpleNamespace(update_size=False, update_mode=True, update_uid=False,
                                       update_gid=False, update_mtime=True,
                                       update_atime=False, update_ctime=False)
        await ops.setattr(fi_ino, attr, fields, fi.fh, ctx)  # cp -p, before its close
        await ops.flush(fi.fh)
        await ops.release(fi.fh)
        assert repo.staging.change_counter() == before + 1
        return t0

    try:
        t0 = trio.run(main)
        assert repo.read("main", "d/new") == b"content"
        f = repo.stat("main", "d/new").entry
        assert (f.mode & 0o7777, f.mtime_ns) == (0o600, 1_000_000_000)
        d = repo.stat("main", "d")
        assert d.entry.mtime_ns >= t0 and d.entry.ctime_ns >= t0  # the directory's new times
    finally:
        repo.close()


def test_requests_between_a_create_and_its_close_see_the_file(tmp_path):
    """A create not staged yet is staged before any request that reads what the
    mount shows: a listing, a lookup and the directory's attributes see the open file."""
    import trio

    from gravfs.fuse import operations as ops_mod

    repo, ops, ctx = _ops_in_process(tmp_path)
    seen = {}

    def reply(token, name, attrs, off):
        token.append(name)
        return True

    async def main():
        d = await _dir_d(ops)
        before = (await ops.getattr(d)).st_mtime_ns
        fi, _ = await _create(ops, d, b"open.csv", ctx)
        await ops.write(fi.fh, 0, b"half")
        assert ops.deferred
        fh = await ops.opendir(d, ctx)
        token: list = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ops_mod.pyfuse3, "readdir_reply", reply)
            await ops.readdir(fh, 0, token)
        await ops.releasedir(fh)
        seen["listed"] = token
        seen["provisional"] = repo.stat("main", "d/open.csv").entry.size  # staged: empty
        seen["dir_newer"] = (await ops.getattr(d)).st_mtime_ns > before
        seen["lookup"] = (await ops.lookup(d, b"open.csv")).st_ino
        await ops.flush(fi.fh)
        await ops.release(fi.fh)

    try:
        trio.run(main)
        assert seen["listed"] == [b"open.csv"]
        assert seen["provisional"] == 0 and seen["dir_newer"] and seen["lookup"]
        assert repo.read("main", "d/open.csv") == b"half"
        assert not ops.deferred
    finally:
        repo.close()


def test_a_create_that_cannot_be_staged_leaves_other_requests_working(tmp_path, caplog):
    """Staging a deferred create fails (a full disk): the request that settled it goes
    on, and the file's close stages the create with its content once staging works."""
    import pyfuse3
    import trio

    from gravfs.errors import GravfsError

    repo, ops, ctx = _ops_in_process(tmp_path)
    stage_inline = ops._stage_inline
    failing = {"on": False}

    async def flaky(*args, **kw):
        if failing["on"]:
            raise GravfsError("staging database: disk error: No space left on device")
        return await stage_inline(*args, **kw)

    ops._stage_inline = flaky

    async def main():
        d = await _dir_d(ops)
        await ops.getattr(d)
        fi, _ = await _create(ops, d, b"f", ctx)
        await ops.write(fi.fh, 0, b"kept")
        failing["on"] = True
        with pytest.raises(pyfuse3.FUSEError) as err:
            await ops.lookup(d, b"other")  # settles (and fails to), then answers as usual
        assert err.value.errno == errno.ENOENT
        assert not ops.deferred  # requests no longer try: the close does
        failing["on"] = False
        await ops.flush(fi.fh)
        await ops.release(fi.fh)

    try:
        with caplog.at_level("WARNING", logger="gravfs.fuse.operations"):
            trio.run(main)
        assert "could not stage 1 created files on main" in caplog.text
        assert repo.read("main", "d/f") == b"kept"
        assert repo.stat("main", "d").entry.mtime_ns > 0
    finally:
        repo.close()


def _two_files(tmp_path):
    """In-process handlers over d/a (10 bytes) and d/b (20 bytes), every stat and
    staging on a worker (as when a range must be read first)."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo

    repo, ops, ctx = _ops_in_process(tmp_path)
    repo.stage("main", [(b"d/" + name, EntryInfo(address="data/00/" + "0" * 64, size=size,
                                                   mtime_ns=1, mode=0o100644, kind=KIND_FILE))
                        for name, size in ((b"a", 10), (b"b", 20))])
    ops._at_hand = ops.run
    return repo, ops, ctx


def _pausing(fn, when):
    """fn, made to wait (on its worker) after it ran for a call ``when`` matches, until
    the returned event is set; ``ran`` is set when it ran."""
    import threading

    ran, go = threading.Event(), threading.Event()

    def paused(*args):
        out = fn(*args)
        if when(*args) and not go.is_set():
            ran.set()
            go.wait(10)
        return out

    return paused, ran, go


def _serve(repo, ops, body) -> None:
    """``await body(nursery)`` in a trio run, with the handlers' nursery set; then
    the repository is closed."""
    import trio

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            await body(nursery)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        repo.close()


def test_a_lookup_that_read_before_a_rename_answers_what_the_name_is_after_it(tmp_path):
    """A lookup's stat waits on a worker while a rename replaces its name: the answer
    binds the name's inode (now the renamed file's) to the renamed file's entry, not
    to the replaced file's (a reader of the renamed file would read 20 bytes of 10,
    or the first 10 of 20: the kernel takes the size from the answer)."""
    import trio

    repo, ops, ctx = _two_files(tmp_path)
    ops._stat_versioned, ran, go = _pausing(ops._stat_versioned, lambda tree, key, *r: key == b"d/b")

    async def body(nursery):
        d = await _dir_d(ops)
        a = (await ops.lookup(d, b"a")).st_ino
        answers = []

        async def look():
            answers.append(await ops.lookup(d, b"b"))

        nursery.start_soon(look)
        await trio.to_thread.run_sync(ran.wait, 10)  # it read b: 20 bytes
        await ops.rename(d, b"a", d, b"b", 0, ctx)
        go.set()
        while not answers:
            await trio.sleep(0.01)
        assert (answers[0].st_ino, answers[0].st_size) == (a, 10)
        assert ops.inodes.remembered(ops._node(a))[0].size == 10
        assert (await ops.getattr(a)).st_size == 10

    _serve(repo, ops, body)


def test_a_lookup_while_a_rename_is_half_done_waits_for_it(tmp_path):
    """A rename has staged (its entries are visible) but not yet moved its inodes: a
    lookup of its target meanwhile waits, then answers the renamed file's inode and
    entry (not the replaced file's inode with the renamed file's size)."""
    import trio

    repo, ops, ctx = _two_files(tmp_path)
    ops._rename_blocking, ran, go = _pausing(ops._rename_blocking, lambda *args: True)

    async def body(nursery):
        d = await _dir_d(ops)
        a = (await ops.lookup(d, b"a")).st_ino
        b = (await ops.lookup(d, b"b")).st_ino
        answers = []

        async def look():
            answers.append(await ops.lookup(d, b"b"))

        nursery.start_soon(ops.rename, d, b"a", d, b"b", 0, ctx)
        await trio.to_thread.run_sync(ran.wait, 10)  # staged, inodes not moved yet
        nursery.start_soon(look)
        await trio.sleep(0.05)
        assert answers == []  # waits for the rename
        go.set()
        while not answers:
            await trio.sleep(0.01)
        assert (answers[0].st_ino, answers[0].st_size) == (a, 10)
        assert ops.inodes.get(b) is None or not ops.inodes.get(b).linked

    _serve(repo, ops, body)


def test_an_open_file_renamed_over_keeps_its_own_attributes(tmp_path):
    """A reader has b open when a rename puts a in its place: the reader's getattr (an
    fstat, or the kernel refreshing its attributes) answers b's size, not the size of
    the file that has b's name now (the kernel would cut the reader's reads short)."""
    repo, ops, ctx = _two_files(tmp_path)

    async def body(nursery):
        d = await _dir_d(ops)
        b = (await ops.lookup(d, b"b")).st_ino
        fi = await ops.open(b, os.O_RDONLY, ctx)
        await ops.rename(d, b"a", d, b"b", 0, ctx)
        attrs = await ops.getattr(b, ctx)
        assert (attrs.st_size, attrs.st_nlink) == (20, 0)
        assert (await ops.lookup(d, b"b")).st_size == 10
        await ops.release(fi.fh)

    _serve(repo, ops, body)


def test_a_listing_kept_from_before_a_rename_is_not_answered_after_it(tmp_path, monkeypatch):
    """The rest of a listed batch waits on the handle for the kernel's next readdir; a
    rename between the two must not have the next reply pair the renamed file's inode
    with the replaced file's listed entry."""
    from gravfs.fuse import operations as ops_mod

    repo, ops, ctx = _two_files(tmp_path)

    def reply(token, name, attrs, off):  # a kernel with room for one entry a reply
        if token:
            return False
        token.append((name, attrs, off))
        return True

    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply", reply)

    async def body(nursery):
        d = await _dir_d(ops)
        fh = await ops.opendir(d, ctx)
        first: list = []
        await ops.readdir(fh, 0, first)
        assert [(name, attrs.st_size) for name, attrs, _ in first] == [(b"a", 10)]
        await ops.rename(d, b"a", d, b"b", 0, ctx)
        rest: list = []
        await ops.readdir(fh, first[0][2], rest)
        assert [(name, attrs.st_ino, attrs.st_size) for name, attrs, _ in rest] == \
            [(b"b", first[0][1].st_ino, 10)]
        await ops.releasedir(fh)

    _serve(repo, ops, body)


def _replace_outside(repo, ops, key: bytes, size: int, digit: str) -> None:
    """What another process on the workspace (gravfs put) does: a staging write that
    is not the mount's own (its transaction was never noted by the mount's)."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo

    repo.stage("main", [(key, EntryInfo(address="data/00/" + digit * 64, size=size,
                                        mtime_ns=2, mode=0o100644, kind=KIND_FILE))])
    ops.own.mine.discard(repo.staging.change_counter())


def test_a_file_replaced_outside_while_open_for_reading_gets_a_new_inode(tmp_path):
    """Another process gives d/b new content while a reader has it open: the kernel
    keeps one size and one page cache per inode, so the open inode keeps answering
    what its reader reads (20 bytes), the name gets a new inode (30 bytes), and an
    open or chmod through the old one gets ESTALE (the kernel then looks the name up
    again and lands on the new inode)."""
    import pyfuse3

    repo, ops, ctx = _two_files(tmp_path)

    async def body(nursery):
        d = await _dir_d(ops)
        b = (await ops.lookup(d, b"b")).st_ino
        fi = await ops.open(b, os.O_RDONLY, ctx)
        _replace_outside(repo, ops, b"d/b", 30, "1")
        assert (await ops.getattr(b, ctx)).st_size == 20
        new = await ops.lookup(d, b"b")
        assert (new.st_ino != b, new.st_size) == (True, 30)
        assert ops.files[fi.fh].entry.size == 20
        for call in (ops.open(b, os.O_RDONLY, ctx), ops.open(b, os.O_WRONLY, ctx),
                     ops.setattr(b, pyfuse3.EntryAttributes(), pyfuse3.SetattrFields(), None,
                                 ctx)):
            with pytest.raises(pyfuse3.FUSEError) as e:
                await call
            assert e.value.errno == errno.ESTALE
        fi2 = await ops.open(new.st_ino, os.O_RDONLY, ctx)
        assert ops.files[fi2.fh].entry.size == 30
        assert ops.superseded_names == [(d, b"b")]  # for the watcher's next round
        await ops.release(fi.fh)
        await ops.release(fi2.fh)
        with pytest.raises(pyfuse3.FUSEError) as e:  # a stat through the old dentry
            await ops.getattr(b, ctx)
        assert e.value.errno == errno.ESTALE

    _serve(repo, ops, body)


def test_fchmod_of_a_removed_open_file_leaves_the_file_now_at_its_name_alone(tmp_path):
    """chmod through a reader's descriptor of a file removed since (its name holds
    another file now) changes what the descriptor's fstat shows, nothing staged."""
    import types

    import pyfuse3

    repo, ops, ctx = _two_files(tmp_path)

    async def body(nursery):
        d = await _dir_d(ops)
        b = (await ops.lookup(d, b"b")).st_ino
        fi = await ops.open(b, os.O_RDONLY, ctx)
        await ops.unlink(d, b"b", ctx)
        _replace_outside(repo, ops, b"d/b", 30, "1")
        attr = pyfuse3.EntryAttributes()
        attr.st_mode = 0o600
        fields = types.SimpleNamespace(**{f"update_{x}": x == "mode" for x in (
            "size", "mode", "uid", "gid", "atime", "mtime", "ctime")})
        shown = await ops.setattr(b, attr, fields, fi.fh, ctx)
        assert (shown.st_mode & 0o777, shown.st_size) == (0o600, 20)
        assert repo.stat("main", b"d/b").entry.mode & 0o777 == 0o644
        await ops.release(fi.fh)

    _serve(repo, ops, body)


def test_an_open_after_an_outside_change_makes_the_kernel_ask_the_size_again(
        tmp_path, monkeypatch):
    """A listing tells the kernel each file's size without the daemon remembering it
    per inode. After another process changed the branch, within the attribute
    timeout, an open of a file whose size the kernel may hold from before (nothing
    remembered, or something else) drops the kernel's attributes: its next read or
    seek to the end asks again. In a branch nothing else changed, or once the
    timeout passed, an open is just an open."""
    import pyfuse3

    from gravfs.fuse import operations as ops_mod

    repo, ops, ctx = _two_files(tmp_path)
    monkeypatch.setattr(ops_mod.pyfuse3, "readdir_reply",
                        lambda token, name, attrs, off: token.append((name, attrs)) or True)
    dropped: list = []
    monkeypatch.setattr(ops_mod.pyfuse3, "invalidate_inode",
                        lambda ino, attr_only=False: dropped.append((ino, attr_only)))

    async def body(nursery):
        d = await _dir_d(ops)
        fh = await ops.opendir(d, ctx)
        listed: list = []
        await ops.readdir(fh, 0, listed)
        await ops.releasedir(fh)
        ino = {name: attrs.st_ino for name, attrs in listed}
        await ops.release((await ops.open(ino[b"a"], os.O_RDONLY, ctx)).fh)
        assert dropped == []
        _replace_outside(repo, ops, b"d/b", 30, "1")
        fi = await ops.open(ino[b"b"], os.O_WRONLY, ctx)
        assert (ops.open_files[ino[b"b"]].size(), dropped) == (30, [(ino[b"b"], True)])
        await ops.release(fi.fh)
        _replace_outside(repo, ops, b"d/a", 40, "2")
        ops.inodes.outdate(ops.inodes.get(ino[b"a"]))  # as the watcher's round does
        fi = await ops.open(ino[b"a"], os.O_RDONLY, ctx)
        assert (ops.files[fi.fh].entry.size, dropped[1:]) == (40, [(ino[b"a"], True)])
        await ops.release(fi.fh)
        ops.statcache._changed["main"] -= ops.settings.attr_timeout + 2  # the timeout passed
        ops.inodes.outdate(ops.inodes.get(ino[b"a"]))
        await ops.release((await ops.open(ino[b"a"], os.O_RDONLY, ctx)).fh)
        assert len(dropped) == 2

    _serve(repo, ops, body)


def test_a_file_replaced_by_another_process_is_read_and_extended_whole_through_the_mount(
        tmp_path):
    """The kernel took d/f's size from a listing; gravfs put gives it longer content
    before the watcher's next look (its poll set far off here): reading the path gives
    the whole new content, not the new content cut at the old size, and a write
    after a seek to the end goes there, not at the old size inside the content."""
    m = Mount(str(tmp_path)).init()
    local = os.path.join(m.base, "local")
    _write(local, b"short")
    m.cli("put", local, "main:d/f")
    m.cli("put", local, "main:d/g")
    m.mount(options=["poll=3600"])
    try:
        assert sorted(os.listdir(m.branch_path("d"))) == ["f", "g"]
        longer = b"much longer content, " * 500
        _write(local, longer)
        m.cli("put", local, "main:d/f")
        m.cli("put", local, "main:d/g")
        with open(m.branch_path("d/f"), "rb") as f:
            assert (os.fstat(f.fileno()).st_size, f.read()) == (len(longer), longer)
        with open(m.branch_path("d/g"), "r+b") as f:
            f.seek(0, os.SEEK_END)
            f.write(b"!")
        assert _read(m.branch_path("d/g")) == longer + b"!"
        m.assert_clean_log()
    finally:
        m.cleanup()


def test_every_handler_settles_deferred_creates_or_cannot_see_them():
    """A new handler must choose: settle the deferred creates first (``settled``), or
    be one that neither reads nor changes what the mount shows."""
    import pyfuse3

    from gravfs.fuse import operations as ops_mod

    own_state_only = {
        "forget", "releasedir", "opendir", "read", "write", "flush", "fsync", "release",
        "statfs",
        # settle themselves unless the inode is an open file (its own state answers)
        "getattr", "getxattr", "setattr",
    }
    handlers = {name for name, fn in vars(ops_mod.GravfsOperations).items()
                if callable(fn) and hasattr(pyfuse3.Operations, name)
                and not name.startswith("_") and name not in ("init", "destroy")}
    unsettled = {name for name in handlers if not getattr(getattr(ops_mod.GravfsOperations, name),
                                                            "settles", False)}
    assert unsettled == own_state_only, sorted(unsettled ^ own_state_only)


def test_open_files_show_in_listings_and_lookups_while_others_write(gravfs_mount):
    """A file created and still open shows in a listing and a lookup of another process
    before its close, while other writers create and close files beside it: the
    staging its create waits for is done first (see GravfsOperations.settle)."""
    import threading

    m = gravfs_mount
    d = m.branch_path("busy")
    os.mkdir(d)
    stop = threading.Event()

    def noise(w: int) -> None:
        i = 0
        while not stop.is_set():
            _write(os.path.join(d, f"n{w}-{i:04d}"), b"n")
            i += 1

    others = [threading.Thread(target=noise, args=(w,)) for w in range(2)]
    for t in others:
        t.start()
    problems = []
    try:
        for i in range(60):
            name = f"held-{i:03d}"
            with open(os.path.join(d, name), "wb") as f:
                f.write(b"h" * i)
                if name not in os.listdir(d):
                    problems.append(f"listing misses {name}")
                if i % 2 and not os.path.exists(os.path.join(d, name)):
                    problems.append(f"lookup misses {name}")
    finally:
        stop.set()
        for t in others:
            t.join(timeout=60)
    assert not problems, problems[:5]
    assert os.path.getsize(os.path.join(d, "held-059")) == 59
    m.assert_clean_log()


def test_a_local_store_moved_away_while_mounted_is_an_outage_not_a_deletion(tmp_path):
    """The store's directory goes away under a mount (moved, its disk unmounted): every
    branch read as deleted, so the branch vanished from the mount and a new file's
    create said ENOENT. Now the branch stays (as last read), what needs the store fails
    with EIO, the store's directory is not made again, and once it is back the mount
    goes on as before."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    base = str(tmp_path / "m")
    m = Mount(base, store=os.path.join(base, "disk", "store")).init()
    try:
        m.mount(options=["head_ttl=0.2", "poll=0.2"])
        _write(m.branch_path("before"), b"committed")
        m.commit()
        os.rename(os.path.join(base, "disk"), os.path.join(base, "away"))
        with open("/proc/sys/vm/drop_caches", "w") as f:  # lookups reach the daemon
            f.write("2")
        time.sleep(1.0)  # past the head cache, and the watcher's polls
        assert os.path.isdir(m.branch_path())
        # a new name: EIO where the branch's range must be read from the store (a local
        # store's are read in place), written where a range read before answers; never
        # ENOENT, as if the branch were gone
        try:
            _write(m.branch_path("during"), b"x")
            during = 0
        except OSError as e:
            during = e.errno
        assert during in (0, errno.EIO)
        time.sleep(1.0)  # the watcher's polls, which used to find the branch deleted
        assert os.path.isdir(m.branch_path())
        assert not os.path.exists(os.path.join(base, "disk"))
        log = m.log_text()
        assert "is gone: its _gravfs directory is missing" in log
        assert "head deleted" not in log
        os.rename(os.path.join(base, "away"), os.path.join(base, "disk"))
        _write(m.branch_path("after"), b"written once it was back")
        cid = m.commit()
        assert _read(m.path("commits", cid, "after")) == b"written once it was back"
        assert _read(m.path("commits", cid, "before")) == b"committed"
        if during == 0:
            assert _read(m.path("commits", cid, "during")) == b"x"
    finally:
        if os.path.isdir(os.path.join(base, "away")):
            os.rename(os.path.join(base, "away"), os.path.join(base, "disk"))
        m.cleanup()


def test_files_opened_in_name_order_are_loaded_ahead_of_their_reader(tmp_path):
    """A reader opening a directory's files in name order (cp -r, tar) gets the next
    files' contents loaded on the read-ahead workers while it reads the earlier ones;
    their reads are then answered without a worker's trip. Opens that go up and down
    load nothing."""
    import threading

    import trio

    from gravfs.fuse import inorder

    repo, ops, ctx = _ops_in_process(tmp_path)
    n = 4 * inorder.BATCH
    contents = {b"f%04d" % i: os.urandom(100 + i) for i in range(n)}
    for name, data in contents.items():
        repo.write_file("main", b"d/" + name, data)
    for i in range(5, n, 11):  # directories among the files: skipped, and listed past
        repo.mkdir("main", b"d/f%04dx" % i)
    reads = []  # the store's files read for a request (not by the read-ahead workers)
    read_small = repo.data.read_small

    def counted(address, size, nowait=False):
        data = read_small(address, size, nowait)
        if data is not None and not threading.current_thread().name.startswith("gravfs-readahead"):
            reads.append(address)
        return data

    repo.data.read_small = counted

    async def loads_done():
        """A reader slower than the loads: what was asked for has landed."""
        with trio.fail_after(30):
            while (any(d.loading for d in ops.in_order._dirs.values())
                   or ops.reader._loading):
                await trio.sleep(0.005)

    async def read_file(d: int, name: bytes) -> bytes:
        ino = (await ops.lookup(d, name)).st_ino
        fi = await ops.open(ino, os.O_RDONLY, ctx)
        try:
            return await ops.read(fi.fh, 0, 1 << 20)
        finally:
            await ops.release(fi.fh)
            await loads_done()

    async def main():
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            d = await _dir_d(ops)
            names = sorted(contents)
            zigzag = [x for pair in zip(names[n // 2:], reversed(names[:n // 2])) for x in pair]
            for name in zigzag[:40]:  # up, down, up, down: nothing is loaded ahead
                assert await read_file(d, name) == contents[name]
            assert ops.reader.stats["loaded_ahead"] == 0
            assert len(reads) == 40
            ops.reader._chunks.clear()
            reads.clear()
            for name in names:
                assert await read_file(d, name) == contents[name]
            # the files up to the run's end were read for their requests; every later
            # one had been loaded ahead
            assert len(reads) == inorder.RUN + 1
            assert ops.reader.stats["loaded_ahead"] == n - inorder.RUN - 1
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        ops.reader.close()
        repo.close()


def test_a_damaged_file_among_files_read_in_order_is_eio_and_the_rest_intact(gravfs_mount):
    """Loading files ahead of a reader checks them as a read does: through a real
    mount, a directory read in name order gives every file's content, and EIO for
    each whose stored object was damaged (a small one and one of 1.5 MiB)."""
    import hashlib

    m = gravfs_mount
    os.makedirs(m.branch_path("many"))
    contents = {f"f{i:03d}": os.urandom(2000 + i) for i in range(80)}
    contents.update({f"f{i:03d}": os.urandom((3 << 19) + i) for i in range(80, 86)})  # 1.5 MiB
    for name, data in contents.items():
        _write(m.branch_path("many", name), data)
    m.commit()
    m.umount()
    victims = ("f050", "f083")
    for victim in victims:
        digest = hashlib.sha256(contents[victim]).hexdigest()
        obj = os.path.join(m.store, "data", digest[:2], digest)
        os.chmod(obj, 0o644)
        with open(obj, "r+b") as f:
            f.seek(100)
            f.write(b"rot")
    m.remount()  # a new daemon: nothing of these files in its caches
    for name in sorted(contents):
        path = m.branch_path("many", name)
        if name in victims:
            assert _errno(_read, path) == errno.EIO
        else:
            assert _read(path) == contents[name], name
    assert "does not match" in m.log_text() or "hashes to" in m.log_text()
