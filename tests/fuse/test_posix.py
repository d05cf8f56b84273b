"""POSIX semantics of a branch: special files, hard links, times, permissions with
several users, and what commits, the CLI and a kill -9 keep of them (README: POSIX)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

import pytest

from gravfs.fs.entry import TIME_NS_MAX, TIME_NS_MIN
from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import Mount, fuse_available, read_bytes as _read, write_bytes as _write
from tests.fuse_util import errno_of_call as _errno, wait_for


# the system's python: the test's own may live where other users cannot run it
USER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _as_user(uid: int, gid: int, code: str) -> subprocess.CompletedProcess:
    """Run python code as another user (the mount's permission checks are the kernel's)."""
    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return subprocess.run([USER_PYTHON, "-c", code], capture_output=True, text=True,
                          preexec_fn=drop, timeout=60)


def _open_mount(options: list[str]):
    """A mount other users can reach (pytest's tmp_path is private to root)."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    base = tempfile.mkdtemp(prefix="gravfs-posix-")
    os.chmod(base, 0o755)
    m = Mount(base).init()
    m.mount(options=options)
    try:
        yield m
    finally:
        m.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def shared_mount():
    """A mount several users may use (-o allow_other,default_permissions)."""
    yield from _open_mount(["allow_other,default_permissions"])


@pytest.fixture
def owner_mount():
    """A mount without allow_other, in a directory every user can reach."""
    yield from _open_mount([])


def test_special_files_are_entries_kept_by_commits(gravfs_mount):
    m = gravfs_mount
    d = m.branch_path("dev")
    os.mkdir(d)
    os.mkfifo(os.path.join(d, "fifo"), 0o640)
    os.mknod(os.path.join(d, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(os.path.join(d, "disk"), stat.S_IFBLK | 0o660, os.makedev(8, 1))
    s = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(d)  # (a socket's path must fit sun_path)
    try:
        s.bind("sock")
    finally:
        os.chdir(cwd)
        s.close()
    os.chown(os.path.join(d, "fifo"), 65534, 65533)

    def check(root):
        st = {n: os.lstat(os.path.join(root, n)) for n in ("fifo", "null", "disk", "sock")}
        assert stat.S_ISFIFO(st["fifo"].st_mode) and stat.S_IMODE(st["fifo"].st_mode) == 0o640
        assert (st["fifo"].st_uid, st["fifo"].st_gid) == (65534, 65533)
        assert stat.S_ISCHR(st["null"].st_mode) and st["null"].st_rdev == os.makedev(1, 3)
        assert stat.S_ISBLK(st["disk"].st_mode) and st["disk"].st_rdev == os.makedev(8, 1)
        assert stat.S_ISSOCK(st["sock"].st_mode)

    check(d)
    cid = m.commit()
    check(m.path("commits", cid, "dev"))
    m.cli("tag", "create", "v1", cid)
    check(m.path("tags", "v1", "dev"))
    assert _errno(os.chmod, m.path("commits", cid, "dev", "fifo"), 0o600) == errno.EROFS
    assert _errno(os.mkfifo, m.path("commits", cid, "dev", "new")) == errno.EROFS
    # the mount is nodev (FUSE's default): a device node is an entry, never a device
    assert _errno(os.open, os.path.join(d, "null"), os.O_RDONLY) == errno.EACCES
    out = m.cli("ls", f"{cid}:dev").stdout
    assert "null (char device 1,3)" in out and "disk (block device 8,1)" in out
    assert "fifo (fifo)" in out and "sock (socket)" in out
    rows = [json.loads(line) for line in m.cli("ls", f"{cid}:dev", "--json").stdout.splitlines()]
    kinds = {r["path"].rsplit("/", 1)[-1]: r["type"] for r in rows}
    assert kinds == {"disk": "blockdev", "fifo": "fifo", "null": "chardev", "sock": "socket"}
    assert "not a regular file" in m.cli("cat", f"{cid}:dev/fifo", check=False).stderr
    m.assert_clean_log()


def test_hard_links_share_one_inode_and_survive_commit_rename_and_branch(gravfs_mount):
    m = gravfs_mount
    os.makedirs(m.branch_path("a/b"))
    _write(m.branch_path("a/b/f"), b"one")
    os.link(m.branch_path("a/b/f"), m.branch_path("g"))
    os.link(m.branch_path("g"), m.branch_path("a/h"))
    ino = os.stat(m.branch_path("g")).st_ino
    for p in ("a/b/f", "g", "a/h"):
        st = os.stat(m.branch_path(p))
        assert (st.st_ino, st.st_nlink) == (ino, 3)
    with open(m.branch_path("a/h"), "ab") as f:  # a write through one name...
        f.write(b" two")
    assert _read(m.branch_path("a/b/f")) == b"one two"  # ...is seen through all
    os.chmod(m.branch_path("g"), 0o600)
    assert stat.S_IMODE(os.stat(m.branch_path("a/b/f")).st_mode) == 0o600
    os.rename(m.branch_path("a/b"), m.branch_path("c"))  # a directory holding a name moves
    os.unlink(m.branch_path("a/h"))
    assert os.stat(m.branch_path("c/f")).st_nlink == 2
    cid = m.commit()
    com = [os.stat(m.path("commits", cid, p)) for p in ("c/f", "g")]
    assert com[0].st_ino == com[1].st_ino and com[0].st_nlink == 2
    assert _read(m.path("commits", cid, "g")) == b"one two"
    # a branch from the commit keeps the group: a write through one name shows in both
    m.cli("branch", "create", "dev", "--from", cid)
    _write(m.branch_path("g", branch="dev"), b"dev")
    assert _read(m.branch_path("c/f", branch="dev")) == b"dev"
    assert _read(m.branch_path("c/f")) == b"one two"
    # the CLI shows each name as a file, with its link count
    assert m.cli("cat", "dev:c/f").stdout == "dev"
    assert "g (2 links)" in m.cli("ls", "main").stdout
    m.cli("rm", "dev:g")  # the other name of the group keeps a right list
    assert m.cli("ls", "dev:c").stdout.count("links") == 0
    assert json.loads(m.cli("ls", "dev:c/f", "--json").stdout)["links"] == ["c/f"]
    # not across branches or into read-only trees
    assert _errno(os.link, m.branch_path("g"), m.branch_path("x", branch="dev")) == errno.EXDEV
    assert _errno(os.link, m.branch_path("g"), m.path("commits", cid, "x")) == errno.EROFS
    # the last names go: an open descriptor keeps the inode, with no link left
    f = open(m.branch_path("g"), "rb")
    os.unlink(m.branch_path("g"))
    assert os.stat(m.branch_path("c/f")).st_nlink == 1
    os.unlink(m.branch_path("c/f"))
    assert os.fstat(f.fileno()).st_nlink == 0 and f.read() == b"one two"
    f.close()
    m.assert_clean_log()


def test_times_follow_posix(gravfs_mount):
    m = gravfs_mount
    os.mkdir(m.branch_path("d"))
    p = m.branch_path("d/f")
    _write(p, b"x")
    os.utime(p, ns=(1_000_000_000_111, 2_000_000_000_222))  # set apart
    st = os.stat(p)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000_111, 2_000_000_000_222)
    c0 = st.st_ctime_ns
    os.chmod(p, 0o640)  # ctime moves, mtime stays
    st = os.stat(p)
    assert st.st_ctime_ns > c0 and st.st_mtime_ns == 2_000_000_000_222
    c1 = st.st_ctime_ns
    os.link(p, m.branch_path("d/g"))
    assert os.stat(p).st_ctime_ns > c1
    d0 = os.stat(m.branch_path("d"))
    _write(m.branch_path("d/new"), b"")
    d1 = os.stat(m.branch_path("d"))
    assert d1.st_mtime_ns > d0.st_mtime_ns and d1.st_ctime_ns > d0.st_ctime_ns
    os.unlink(m.branch_path("d/new"))
    assert os.stat(m.branch_path("d")).st_mtime_ns > d1.st_mtime_ns
    with open(p, "ab") as f:
        f.write(b"y")
    st = os.stat(p)
    assert st.st_mtime_ns > 2_000_000_000_222 and st.st_atime_ns == 1_000_000_000_111
    cid = m.commit()
    back = os.stat(m.path("commits", cid, "d/f"))
    assert (back.st_atime_ns, back.st_mtime_ns, back.st_ctime_ns) == (
        st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)
    _read(p)  # reads leave atime alone by default (noatime, see README)
    assert os.stat(p).st_atime_ns == 1_000_000_000_111
    # the epoch is a time too (a found case: an atime of 0 showed as the mtime), on a
    # directory, a file and a file held open, and after a commit
    with open(p, "rb") as held, open(m.branch_path("d/w"), "wb") as writing:
        writing.write(b"w")
        for path in (m.branch_path("d"), p, m.branch_path("d/w")):
            os.utime(path, ns=(0, 1))
            assert (os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns) == (0, 1), path
        assert os.fstat(held.fileno()).st_atime_ns == 0
        assert os.fstat(writing.fileno()).st_atime_ns == 0
    cid = m.commit()
    assert os.stat(m.path("commits", cid, "d")).st_atime_ns == 0
    assert os.stat(m.path("commits", cid, "d/f")).st_atime_ns == 0
    # times past 2262 (ext4 keeps them to 2446) or before 1677: the nearest gravfs records
    far = 15032385535 * 10**9
    with open(m.branch_path("d/w"), "ab") as writing:
        writing.write(b"more")
        writing.flush()
        for path in (p, m.branch_path("d/w")):
            os.utime(path, ns=(far, -far))
            st = os.stat(path)
            assert (st.st_atime_ns, st.st_mtime_ns) == (TIME_NS_MAX, TIME_NS_MIN), path
    assert os.stat(m.branch_path("d/w")).st_mtime_ns == TIME_NS_MIN
    cid = m.commit()
    assert os.stat(m.path("commits", cid, "d/w")).st_atime_ns == TIME_NS_MAX
    m.assert_clean_log()


def test_permissions_with_several_users(shared_mount):
    m = shared_mount
    root = m.branch_path()
    sticky = os.path.join(root, "tmp")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    r = _as_user(65534, 65534, f"open({os.path.join(sticky, 'mine')!r}, 'w').write('x')")
    assert r.returncode == 0, r.stderr
    # sticky directory: another user may not remove or rename it
    r = _as_user(65533, 65533, f"import os; os.unlink({os.path.join(sticky, 'mine')!r})")
    assert "PermissionError" in r.stderr
    # setgid directory: new names take its group, new directories keep the bit
    sg = os.path.join(root, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, 4242)
    os.chmod(sg, 0o2777)
    _write(os.path.join(sg, "f"), b"")
    os.mkdir(os.path.join(sg, "sub"))
    assert os.stat(os.path.join(sg, "f")).st_gid == 4242
    sub = os.stat(os.path.join(sg, "sub"))
    assert sub.st_gid == 4242 and sub.st_mode & stat.S_ISGID
    # a write by a user other than root clears the setuid bit
    f = os.path.join(root, "suid")
    _write(f, b"#!")
    os.chown(f, 65534, 65534)
    os.chmod(f, 0o4755)
    r = _as_user(65534, 65534, f"open({f!r}, 'ab').write(b'more')")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o755
    # chown by the owner to another group: refused unless a member (here: not)
    r = _as_user(65534, 65534, f"import os; os.chown({f!r}, -1, 4242)")
    assert "PermissionError" in r.stderr
    # owner/group/mode checks
    private = os.path.join(root, "private")
    _write(private, b"secret")
    os.chmod(private, 0o600)
    r = _as_user(65534, 65534, f"open({private!r}).read()")
    assert "PermissionError" in r.stderr
    m.assert_clean_log()


def test_without_allow_other_the_mount_serves_only_its_owner(owner_mount):
    m = owner_mount
    _write(m.branch_path("f"), b"x")
    os.chmod(m.branch_path("f"), 0o644)
    r = _as_user(65534, 65534, f"import os; print(os.stat({m.base!r}).st_mode)")
    assert r.returncode == 0, r.stderr  # the directory holding the mount point is open
    r = _as_user(65534, 65534, f"import os; os.stat({m.branch_path('f')!r})")
    assert "PermissionError" in r.stderr


def test_hard_link_writable_through_every_name_after_a_listing(gravfs_mount):
    """A listing meets the inode under its second name; that name is the inode's own,
    not one another writer made, so writes through either name stay allowed."""
    top = os.path.join(gravfs_mount.mnt, "branches", "main")
    open(os.path.join(top, "x"), "wb").close()
    os.link(os.path.join(top, "x"), os.path.join(top, "y"))
    for name in os.listdir(top):  # readdirplus: each name with its attributes
        os.lstat(os.path.join(top, name))
    with open(os.path.join(top, "x"), "ab") as f:
        f.write(b"1")
    with open(os.path.join(top, "y"), "ab") as f:
        f.write(b"2")
    assert _read(os.path.join(top, "x")) == b"12"


def test_kill9_keeps_links_special_files_and_metadata(gravfs_mount):
    m = gravfs_mount
    os.mkdir(m.branch_path("d"))
    _write(m.branch_path("d/f"), b"linked")
    os.link(m.branch_path("d/f"), m.branch_path("g"))
    os.mkfifo(m.branch_path("d/fifo"))
    os.mknod(m.branch_path("d/null"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.chmod(m.branch_path("g"), 0o700)
    os.utime(m.branch_path("d/fifo"), ns=(5, 7))
    f = open(m.branch_path("d/f"), "ab")  # written through one name, fsync'd
    f.write(b" and synced")
    f.flush()
    os.fsync(f.fileno())
    m.kill9(clear=False)
    try:
        f.close()
    except OSError:
        pass
    m.remount()
    a, b = os.stat(m.branch_path("d/f")), os.stat(m.branch_path("g"))
    assert a.st_ino == b.st_ino and a.st_nlink == 2 and stat.S_IMODE(a.st_mode) == 0o700
    assert _read(m.branch_path("g")) == b"linked and synced"
    st = os.stat(m.branch_path("d/fifo"))
    assert stat.S_ISFIFO(st.st_mode) and (st.st_atime_ns, st.st_mtime_ns) == (5, 7)
    assert os.stat(m.branch_path("d/null")).st_rdev == os.makedev(1, 3)


def test_atime_mount_options(gravfs_mount):
    """Reads move atime only with -o relatime/strictatime, when the reading handle is
    released (asynchronously: waited for)."""
    m = gravfs_mount
    f = m.branch_path("f")
    _write(f, b"content")
    os.utime(f, ns=(10**18, 15 * 10**17))  # atime older than mtime
    m.umount()
    m.mount(options=["relatime"])
    _read(f)
    first = wait_for(lambda: os.stat(f).st_atime_ns > 15 * 10**17 and os.stat(f).st_atime_ns)
    _read(f)
    m.umount()  # (waits for every release)
    m.mount(options=["strictatime"])
    assert os.stat(f).st_atime_ns == first  # relatime: newer than mtime, less than a day old
    _read(f)
    wait_for(lambda: os.stat(f).st_atime_ns > first)
    m.assert_clean_log()


def test_merge_and_reset_keep_link_groups_whole(gravfs_mount):
    """A group changed on one side comes whole from that side; a reset of the branch
    gives back the head's groups (README: POSIX semantics)."""
    m = gravfs_mount
    _write(m.branch_path("a"), b"base")
    os.link(m.branch_path("a"), m.branch_path("b"))
    base = m.commit()
    m.cli("branch", "create", "dev", "--from", base)
    _write(m.branch_path("b", branch="dev"), b"changed on dev")
    os.link(m.branch_path("a", branch="dev"), m.branch_path("c", branch="dev"))
    m.commit("dev")
    _write(m.branch_path("other"), b"main moves on")
    m.commit()
    m.cli("merge", "dev", "main", "-m", "merge dev")
    merged = m.head()

    def whole(root):
        st = [os.stat(os.path.join(root, n)) for n in ("a", "b", "c")]
        return ({s.st_ino for s in st} == {st[0].st_ino} and st[0].st_nlink == 3
                and _read(os.path.join(root, "a")) == b"changed on dev")

    assert whole(m.path("commits", merged))
    wait_for(lambda: whole(m.branch_path()))  # (the mount sees the merge within a poll)
    # a link staged and reset away: the head's group is back
    os.link(m.branch_path("a"), m.branch_path("d"))
    m.cli("reset", "main")
    wait_for(lambda: not os.path.exists(m.branch_path("d")))
    wait_for(lambda: os.stat(m.branch_path("a")).st_nlink == 3)
    m.assert_clean_log()
