"""A full disk gives ENOSPC (or a one-line CLI error) and loses nothing.

The repository (store and state dir) lives on a small tmpfs, a real full disk.
"""

from __future__ import annotations

import errno
import glob
import os
import subprocess

import pytest

from gravfs.data import sparse
from tests.fuse_util import Mount, fuse_available, wait_for
from tests.repo_util import run_cli

TMPFS_BYTES = 6 << 20


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> the path of a fresh tmpfs of that many bytes."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a size-limited tmpfs (a real full disk)")
    mounted = []

    def mount(size: int) -> str:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       check=True)
        mounted.append(str(where))
        return str(where)

    try:
        yield mount
    finally:
        for where in mounted:
            subprocess.run(["umount", "-l", where], check=False)


@pytest.fixture
def small_disk(tmpfs):
    return tmpfs(TMPFS_BYTES)


@pytest.fixture
def disk_mount(tmpfs):
    """A mounted repository whose store and state dir share a 24 MiB tmpfs (m.base)."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    m = Mount(tmpfs(24 << 20)).init()
    m.mount()
    try:
        yield m
    finally:
        m.cleanup()


def _fill(disk: str, leave: int) -> str:
    """Fill the disk but ``leave`` bytes; returns the filler file's path."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = os.path.join(disk, "filler")
    with open(filler, "wb") as f:
        f.write(b"\0" * (free - leave))
    return filler


# A file that starts with a hole this long is stored at its close (as its data extents
# and a manifest, gravfs.data.sparse): a dense big file's close only moves its local copy
# into pending uploads, which a full disk does not stop (see the test below).
HOLE = sparse.MIN_HOLE


def _close_fails(m: Mount, name: str, data: bytes) -> bytes:
    """Write a new file, a hole then ``data``, whose close cannot store it (ENOSPC); the
    mount still shows the whole file. Returns the file's bytes."""
    f = open(m.branch_path(name), "wb")
    f.seek(HOLE)
    f.write(data)
    with pytest.raises(OSError) as ei:
        f.close()
    assert ei.value.errno == errno.ENOSPC
    assert os.stat(m.branch_path(name)).st_size == HOLE + len(data)
    return bytes(HOLE) + data


def _leftovers(root: str) -> list[str]:
    """Temporary files a failed write may have left behind."""
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.startswith(".") and "tmp" in f or os.path.basename(d) == "tmp":
                out.append(os.path.join(d, f))
    return out


def test_cli_put_on_a_full_disk_fails_cleanly(small_disk, tmp_path):
    store, state = os.path.join(small_disk, "store"), os.path.join(small_disk, "state")
    run_cli("init", store=store, state=state)
    keep = tmp_path / "keep.bin"
    keep.write_bytes(os.urandom(1 << 20))
    run_cli("put", str(keep), "main:keep.bin", store=store, state=state)
    run_cli("commit", "main", "-m", "keep", store=store, state=state)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(TMPFS_BYTES))
    rc, _, err = run_cli("put", str(big), "main:big.bin", store=store, state=state, check=False)
    assert rc != 0
    assert "no space left" in err.lower() and "Traceback" not in err
    assert not _leftovers(small_disk), "a failed put left temporary files on the full disk"
    _, out, _ = run_cli("status", "main", store=store, state=state)
    assert "big.bin" not in out
    p = subprocess.run([*_cli(), "cat", "main:keep.bin"], capture_output=True,
                       env=_env(store, state), check=True)
    assert p.stdout == keep.read_bytes()
    rc, out, _ = run_cli("fsck", store=store, state=state, check=False)
    assert rc == 0, out


def _cli() -> list[str]:
    import sys
    return [sys.executable, "-m", "gravfs.cli"]


def _env(store: str, state: str) -> dict:
    return dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)


def test_mount_write_on_a_full_disk_is_enospc_and_keeps_the_rest(small_disk):
    """A write that finds the disk full fails with ENOSPC; the mount stays up, what was
    written before (that file's first bytes too) is kept, and once the user frees room
    (a file of theirs on that disk: removing a file from a branch frees no stored
    object) writing and committing work again."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    m = Mount(small_disk).init()
    m.mount()
    try:
        keep = os.urandom(512 << 10)
        with open(m.branch_path("keep.bin"), "wb") as f:
            f.write(keep)
        m.commit(message="keep")
        with open(m.branch_path("staged.txt"), "wb") as f:
            f.write(b"staged before the disk filled")
        filler = _fill(small_disk, 2 << 20)
        chunk = os.urandom(1 << 20)
        with pytest.raises(OSError) as ei:
            with open(m.branch_path("big.bin"), "wb") as f:
                for _ in range(2 * TMPFS_BYTES >> 20):
                    f.write(chunk)
                    f.flush()
        assert ei.value.errno == errno.ENOSPC
        # the mount is alive and everything written before is intact
        with open(m.branch_path("keep.bin"), "rb") as f:
            assert f.read() == keep
        with open(m.branch_path("staged.txt"), "rb") as f:
            assert f.read() == b"staged before the disk filled"
        os.unlink(filler)  # the user frees the space: writing and committing work again
        with open(m.branch_path("after.txt"), "wb") as f:
            f.write(b"space again")
        m.commit(message="after")
        head = m.path("commits", m.head()[:12])
        with open(os.path.join(head, "after.txt"), "rb") as f:
            assert f.read() == b"space again"
        with open(os.path.join(head, "staged.txt"), "rb") as f:
            assert f.read() == b"staged before the disk filled"
        if os.path.exists(os.path.join(head, "big.bin")):  # its bytes up to the failed write
            with open(os.path.join(head, "big.bin"), "rb") as f:
                written = f.read()
            assert written == (chunk * (2 * TMPFS_BYTES >> 20))[:len(written)]
        m.assert_clean_log()
    finally:
        m.cleanup()


def test_mount_close_that_cannot_stage_keeps_the_content(disk_mount):
    """A file whose close cannot store its content (the disk filled meanwhile) stays in
    the mount with that content and is staged by the next fsync once there is space."""
    m = disk_mount
    filler = _fill(m.base, 8 << 20)  # room for the local copy, not for storing it
    data = _close_fails(m, "big.bin", os.urandom(6 << 20))  # stored sparse on close
    with open(m.branch_path("big.bin"), "rb") as g:
        assert g.read() == data
    os.unlink(filler)
    fd = os.open(m.branch_path("big.bin"), os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    m.commit(message="after the disk had room again")
    with open(m.path("commits", m.head()[:12], "big.bin"), "rb") as g:
        assert g.read() == data
    m.assert_clean_log()


def test_a_big_files_close_needs_no_second_copy_on_a_full_disk(disk_mount):
    """A dense big file's close moves its local copy into pending uploads, and a local
    store takes the pending file by a hard link: on a disk with room for one copy and
    not two, the close, the upload and the commit all succeed."""
    m = disk_mount
    _fill(m.base, 8 << 20)
    data = os.urandom(6 << 20)
    with open(m.branch_path("big.bin"), "wb") as f:
        f.write(data)
    cid = m.commit(message="one copy")
    with open(m.path("commits", cid[:12], "big.bin"), "rb") as g:
        assert g.read() == data
    fsck = m.cli("fsck")
    assert "clean" in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
    m.assert_clean_log()


def test_unmount_that_cannot_stage_saves_the_file_in_lost_and_found(disk_mount):
    m = disk_mount
    _fill(m.base, 8 << 20)
    os.mkdir(m.branch_path("d"))
    data = _close_fails(m, "d/big.bin", os.urandom(6 << 20))
    res = m.cli("umount", m.mnt, check=False)
    assert not os.path.ismount(m.mnt)
    saved = glob.glob(os.path.join(m.state_dir, "repos", "*", "lost+found", "main", "d",
                                   "big.bin"))
    assert len(saved) == 1, "the unstaged file was not saved at unmount"
    assert res.returncode == 1 and saved[0] in res.stderr, res.stderr
    with open(saved[0], "rb") as g:
        assert g.read() == data
    assert "lost+found" in m.log_text()
    m.remount()  # the next mount leaves lost+found alone
    assert os.path.exists(saved[0])


def test_failed_close_commits_nothing_and_umount_reports_lost_and_found(disk_mount):
    """A file of 15 MiB of data whose close cannot store it (the store shares the full disk):
    the mount shows it, a commit does not take it (never as an empty file), and
    the umount that has to save it in lost+found says so and fails."""
    m = disk_mount
    with open(m.branch_path("ok.txt"), "wb") as f:
        f.write(b"fits")
    # its local copy fits, a second copy of its data in the store not
    data = _close_fails(m, "big.bin", os.urandom(15 << 20))
    cid = m.commit(message="what could be staged")
    listed = m.cli("ls", cid).stdout
    assert "ok.txt" in listed and "big.bin" not in listed
    assert not os.path.exists(m.path("commits", cid[:12], "big.bin"))
    res = m.cli("umount", m.mnt, check=False)
    assert not os.path.ismount(m.mnt)
    m.mounted = False
    saved = glob.glob(os.path.join(m.state_dir, "repos", "*", "lost+found", "main",
                                   "big.bin"))
    assert len(saved) == 1
    with open(saved[0], "rb") as g:
        assert g.read() == data
    assert res.returncode != 0, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert any("main:big.bin" in l and saved[0] in l for l in lines), res.stderr
    assert "Traceback" not in res.stderr


def test_a_full_store_on_a_disk_of_its_own_is_named(small_disk, tmp_path):
    """The store's disk full, the state dir's not: put and commit said only "gravfs: No
    space left on device", which sent users to the wrong disk. The store's object path is
    named; nothing is staged or committed, and the first commit's file reads back."""
    store, state = os.path.join(small_disk, "store"), str(tmp_path / "state")
    run_cli("init", store=store, state=state)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(TMPFS_BYTES + (1 << 20)))
    rc, _, err = run_cli("put", str(big), "main:big.bin", store=store, state=state, check=False)
    assert rc == 1 and err.startswith(f"gravfs: {store}/data/") and err.endswith(
        ": No space left on device\n"), err
    assert not _leftovers(small_disk)
    _, out, _ = run_cli("status", "main", store=store, state=state)
    assert "big.bin" not in out
    assert run_cli("fsck", store=store, state=state, check=False)[0] == 0
