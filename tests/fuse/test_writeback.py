"""Write-back through the mount: closed files are staged at once and uploaded in the
background from the workspace's pending directory (a big file on its last close).

The daemon's uploader is held with a test hook (GRAVFS_TEST_UPLOAD_PAUSE_FILE:
uploads wait while that file exists), so the tests see the pending state.
"""

from __future__ import annotations

import glob
import os
import threading

from gravfs import hashing
from gravfs.data.objects import PAUSE_ENV, DataObjects, address_of
from gravfs.store.local import LocalStore
from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import write_bytes as _write, read_bytes as _read
from tests.fuse_util import Mount, fuse_available, wait_for

import pytest


def _pending(m: Mount) -> list[str]:
    return sorted(os.path.basename(p) for p in
                  glob.glob(os.path.join(m.state_dir, "repos", "*", "pending", "*", "*")))


def _in_store(m: Mount, data: bytes) -> bool:
    address = address_of(hashing.hexdigest(data))
    return os.path.exists(os.path.join(m.store, *address.split("/")))


@pytest.fixture
def paused_mount(tmp_path):
    """A mounted repository whose background uploader waits until ``m.unpause()``."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    pause = str(tmp_path / "pause-uploads")
    open(pause, "w").close()
    m = Mount(str(tmp_path / "repo"), env={PAUSE_ENV: pause})
    m.unpause = lambda: os.path.exists(pause) and os.unlink(pause)
    m.init()
    m.mount()
    try:
        yield m
    finally:
        m.unpause()
        m.cleanup()


def _files(n: int = 5) -> dict[str, bytes]:
    return {f"d/f{i}": os.urandom(4096) for i in range(n)}


def test_closed_file_is_readable_before_its_upload(paused_mount):
    m = paused_mount
    files = _files()
    os.makedirs(m.branch_path("d"))
    for name, data in files.items():
        _write(m.branch_path(name), data)
    digests = sorted(hashing.hexdigest(d) for d in files.values())
    assert _pending(m) == digests
    assert not any(_in_store(m, d) for d in files.values())
    for name, data in files.items():
        assert _read(m.branch_path(name)) == data
    # append to a written-back file: its content comes back from the pending copy
    with open(m.branch_path("d/f1"), "ab") as f:
        f.write(b"tail")
    assert _read(m.branch_path("d/f1")) == files["d/f1"] + b"tail"
    m.unpause()
    wait_for(lambda: _pending(m) == [], timeout=30)
    assert all(_in_store(m, d) for d in files.values())
    assert _read(m.branch_path("d/f1")) == files["d/f1"] + b"tail"
    m.assert_clean_log()


def test_cat_reads_pending_content(paused_mount):
    m = paused_mount
    data = b"only in the pending directory\n"
    _write(m.branch_path("note.txt"), data)
    assert _pending(m) == [hashing.hexdigest(data)]
    assert not _in_store(m, data)
    res = m.cli("cat", "main:note.txt")
    assert res.stdout == data.decode()


def test_cli_commit_while_uploads_are_pending(paused_mount):
    m = paused_mount
    files = _files()
    os.makedirs(m.branch_path("d"))
    for name, data in files.items():
        _write(m.branch_path(name), data)
    assert len(_pending(m)) == len(files)
    cid = m.commit()  # the CLI drains the workspace's pending uploads first
    assert _pending(m) == []
    assert all(_in_store(m, d) for d in files.values())
    fsck = m.cli("fsck")
    assert "clean" in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
    for name, data in files.items():
        assert _read(m.path("commits", cid, name)) == data
    m.unpause()  # the daemon's queued uploads find their files gone: fine
    _write(m.branch_path("after"), b"after the commit")
    wait_for(lambda: _pending(m) == [], timeout=30)
    m.umount()
    m.assert_clean_log()


def test_kill9_with_pending_uploads_then_remount(paused_mount):
    m = paused_mount
    files = _files()
    os.makedirs(m.branch_path("d"))
    for name, data in files.items():
        _write(m.branch_path(name), data)
    with open(m.branch_path("synced"), "wb") as f:
        f.write(b"fsynced")
        f.flush()
        os.fsync(f.fileno())
    files["synced"] = b"fsynced"
    assert len(_pending(m)) == len(files)
    m.kill9(clear=False)
    assert len(_pending(m)) == len(files)  # a process crash loses nothing closed
    m.unpause()
    m.remount()  # the new daemon drains what the dead one left
    wait_for(lambda: _pending(m) == [], timeout=30)
    assert all(_in_store(m, d) for d in files.values())
    for name, data in files.items():
        assert _read(m.branch_path(name)) == data
    cid = m.commit()
    fsck = m.cli("fsck")
    assert "clean" in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
    assert _read(m.path("commits", cid, "d/f3")) == files["d/f3"]


def test_a_big_file_goes_to_pending_uploads_on_its_last_close(paused_mount):
    """A big file's last close moves it to pending uploads (its close does not wait for
    the store); the mount reads it from there, by ranges too, a writer appends to it, a
    kill -9 loses nothing and a commit uploads it. A big file fsync'd, or closed while
    another writable descriptor stays open, is stored at once and its local copy stays."""
    m = paused_mount
    mib = 1 << 20
    big = os.urandom(9 * mib + 5)
    _write(m.branch_path("big.bin"), big)
    assert _pending(m) == [hashing.hexdigest(big)]
    assert not _in_store(m, big)
    with open(m.branch_path("big.bin"), "rb") as f:
        f.seek(7 * mib + 1)
        assert f.read(100) == big[7 * mib + 1:7 * mib + 101]
    assert _read(m.branch_path("big.bin")) == big
    with open(m.branch_path("big.bin"), "ab") as f:  # its content comes back from pending
        f.write(b"tail")
    appended = big + b"tail"
    assert _read(m.branch_path("big.bin")) == appended
    assert hashing.hexdigest(appended) in _pending(m)

    synced = os.urandom(5 * mib)
    with open(m.branch_path("synced.bin"), "wb") as f:
        f.write(synced)
        f.flush()
        os.fsync(f.fileno())
        assert _in_store(m, synced)  # the fsync stored it: nothing of it pending
        assert hashing.hexdigest(synced) not in _pending(m)
        f.write(b"more")  # the local copy stayed: no copy back in
    two = os.urandom(5 * mib)
    f = open(m.branch_path("two.bin"), "wb")
    g = open(m.branch_path("two.bin"), "r+b")
    try:
        f.write(two)
        f.close()  # another writable handle stays open: stored at once
        assert _in_store(m, two) and hashing.hexdigest(two) not in _pending(m)
        assert g.read() == two
        g.write(b"end")
    finally:
        g.close()  # the last one: pending
    assert hashing.hexdigest(two + b"end") in _pending(m)

    m.kill9(clear=False)
    assert hashing.hexdigest(appended) in _pending(m)  # a process crash loses nothing closed
    m.unpause()
    m.remount()
    wait_for(lambda: _pending(m) == [], timeout=60)
    assert _in_store(m, appended) and _in_store(m, synced + b"more")
    cid = m.commit()
    fsck = m.cli("fsck")
    assert "clean" in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
    assert _read(m.path("commits", cid[:12], "big.bin")) == appended
    assert _read(m.path("commits", cid[:12], "synced.bin")) == synced + b"more"
    assert _read(m.path("commits", cid[:12], "two.bin")) == two + b"end"


def test_a_big_file_with_holes_is_stored_at_its_close(paused_mount):
    """A big sparse file is stored as its extents and a manifest at its close (as
    before): its extents are objects of their own, so nothing of it waits pending."""
    m = paused_mount
    mib = 1 << 20
    head, tail = os.urandom(mib), os.urandom(mib)
    with open(m.branch_path("sparse.bin"), "wb") as f:
        f.write(head)
        f.seek(40 * mib)
        f.write(tail)
    assert _pending(m) == []
    assert _in_store(m, head) and _in_store(m, tail)
    assert _read(m.branch_path("sparse.bin")) == head + bytes(39 * mib) + tail
    m.assert_clean_log()


def test_umount_waits_for_a_big_upload_and_says_so(paused_mount):
    """An unmount uploads what is pending before the daemon exits (a big file's upload
    may take minutes): ``gravfs umount`` waits for it and says on stderr that it does."""
    import subprocess
    import sys

    from tests.fuse_util import ROOT
    m = paused_mount
    big = os.urandom(6 << 20)
    _write(m.branch_path("big.bin"), big)
    assert _pending(m) == [hashing.hexdigest(big)]
    umount = subprocess.Popen([sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir",
                               m.state_dir, "umount", m.mnt], stderr=subprocess.PIPE, text=True,
                              env=m.env, cwd=ROOT)
    failsafe = threading.Timer(60, m.unpause)  # (without the message: readline ends)
    failsafe.start()
    try:
        said = umount.stderr.readline()  # the upload is held: the daemon cannot exit yet
        m.unpause()
        _, rest = umount.communicate(timeout=120)
    finally:
        failsafe.cancel()
        m.unpause()
        if umount.poll() is None:
            umount.kill()
    m.mounted = False
    assert "still staging files or finishing uploads" in said, said + rest
    assert umount.returncode == 0, said + rest
    assert _pending(m) == [] and _in_store(m, big)


def test_concurrent_drains_of_one_workspace(tmp_path):
    """Several processes may drain at once: a file another one just uploaded and
    removed is skipped, and every object ends up in the store."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    pending = str(tmp_path / "pending")
    blobs = [os.urandom(1000 + i) for i in range(40)]
    for b in blobs:
        digest = hashing.hexdigest(b)
        os.makedirs(os.path.join(pending, digest[:2]), exist_ok=True)
        with open(os.path.join(pending, digest[:2], digest), "wb") as f:
            f.write(b)
    drainers = [DataObjects(store, None, str(tmp_path), pending_dir=pending) for _ in range(4)]
    errors: list[BaseException] = []
    counts: list[int] = []

    def drain(d: DataObjects) -> None:
        try:
            counts.append(d.flush_pending())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=drain, args=(d,)) for d in drainers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(counts) == len(blobs)  # each pending file removed exactly once
    assert drainers[0].pending_addresses() == []
    for b in blobs:
        assert store.get(address_of(hashing.hexdigest(b))) == b


# -- files open for writing and commits -----------------------------------------------------


def _rows(start: int, n: int) -> bytes:
    return b"".join(b"%d,%d\n" % (i, i * i) for i in range(start, start + n))


def _committed(m: Mount, cid: str, name: str):
    """Content of name in commit cid, or None when the commit has no such file."""
    p = m.path("commits", cid[:12], name)
    return _read(p) if os.path.exists(p) else None


def test_commit_takes_no_bytes_of_a_new_file_still_being_written(gravfs_mount):
    """The CLI commit is started from the writing process: its fork closes the
    inherited (close-on-exec) descriptor, a FUSE flush that is not the writer's close.
    A file created and never closed is not in the commit; its close stages it whole."""
    m = gravfs_mount
    _write(m.branch_path("other.txt"), b"closed before the commit\n")
    header = b"id,square\n"
    f = open(m.branch_path("torn.csv"), "wb")
    try:
        f.write(header + _rows(0, 1000))
        f.flush()  # write(2) reaches the daemon; no close
        cid = m.commit(message="mid-write")
        assert _committed(m, cid, "other.txt") == b"closed before the commit\n"
        assert _committed(m, cid, "torn.csv") is None
        assert "torn.csv" not in os.listdir(m.path("commits", cid[:12]))
        f.write(_rows(1000, 1000))
    finally:
        f.close()
    assert _read(m.branch_path("torn.csv")) == header + _rows(0, 2000)
    cid2 = m.commit(message="after the close")
    assert _committed(m, cid2, "torn.csv") == header + _rows(0, 2000)
    m.assert_clean_log()


def test_commit_takes_the_last_closed_state_of_a_file_being_rewritten(gravfs_mount):
    m = gravfs_mount
    old = b"id,square\n" + _rows(0, 10)
    _write(m.branch_path("t.csv"), old)
    cid0 = m.commit(message="old")
    f = open(m.branch_path("t.csv"), "wb")  # O_TRUNC: the mount shows it empty at once
    try:
        f.write(b"id,square\n" + _rows(0, 500))
        f.flush()
        # a child that inherits the descriptor and exits (no exec) closes it too
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        assert "t.csv" not in m.cli("status", "main").stdout  # nothing staged meanwhile
        _write(m.branch_path("other.txt"), b"x")
        cid = m.commit(message="mid-rewrite")
        assert cid != cid0
        assert _committed(m, cid, "t.csv") == old
        f.write(_rows(500, 500))
        f.flush()
        os.fsync(f.fileno())  # an fsync stages what was written so far
        cid2 = m.commit(message="after fsync")
        assert _committed(m, cid2, "t.csv") == b"id,square\n" + _rows(0, 1000)
        f.write(b"tail\n")
    finally:
        f.close()
    cid3 = m.commit(message="closed")
    assert _committed(m, cid3, "t.csv") == b"id,square\n" + _rows(0, 1000) + b"tail\n"
    m.assert_clean_log()


def test_created_file_without_writes_is_staged_by_its_close(gravfs_mount):
    """touch: a create followed by a close stages an empty file (so does mknod)."""
    m = gravfs_mount
    open(m.branch_path("empty"), "wb").close()
    os.mknod(m.branch_path("node"))
    cid = m.commit(message="empty files")
    assert _committed(m, cid, "empty") == b""
    assert _committed(m, cid, "node") == b""
    m.assert_clean_log()


def test_file_created_by_a_killed_mount_and_never_closed_is_gone(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("kept"), b"closed")
    f = open(m.branch_path("open.csv"), "wb")
    f.write(b"never closed\n")
    f.flush()
    m.kill9()
    try:
        f.close()
    except OSError:
        pass  # the mount is gone
    m.remount()
    assert sorted(os.listdir(m.branch_path())) == ["kept"]
    assert "open.csv" not in m.cli("ls", "main").stdout
    cid = m.commit(message="after the crash")
    assert _committed(m, cid, "kept") == b"closed"
    assert _committed(m, cid, "open.csv") is None


def test_created_files_fsynced_or_closed_survive_a_killed_mount(gravfs_mount):
    """A create's staging waits for the file's first close or fsync, which stage it
    with the content: both survive kill -9, the file only ever written does not."""
    m = gravfs_mount
    os.mkdir(m.branch_path("d"))
    f = open(m.branch_path("d", "synced"), "wb")
    f.write(b"synced")
    f.flush()
    os.fsync(f.fileno())
    _write(m.branch_path("d", "closed"), b"closed")
    g = open(m.branch_path("d", "open"), "wb")
    g.write(b"never closed")
    g.flush()
    m.kill9()
    for h in (f, g):
        try:
            h.close()
        except OSError:
            pass  # the mount is gone
    m.remount()
    assert sorted(os.listdir(m.branch_path("d"))) == ["closed", "synced"]
    assert _read(m.branch_path("d", "synced")) == b"synced"
    assert _read(m.branch_path("d", "closed")) == b"closed"


def test_renamed_file_still_open_stays_out_of_commits(gravfs_mount):
    """Renaming a created, unclosed file (or its directory) keeps it out of commits."""
    m = gravfs_mount
    os.makedirs(m.branch_path("d"))
    f = open(m.branch_path("d/a.csv"), "wb")
    g = open(m.branch_path("b.csv"), "wb")
    try:
        f.write(b"a" * 1000)
        g.write(b"b" * 1000)
        f.flush()
        g.flush()
        os.rename(m.branch_path("d"), m.branch_path("e"))
        os.rename(m.branch_path("b.csv"), m.branch_path("c.csv"))
        assert sorted(os.listdir(m.branch_path())) == ["c.csv", "e"]
        _write(m.branch_path("other"), b"x")
        cid = m.commit(message="while open")
        assert _committed(m, cid, "e/a.csv") is None and _committed(m, cid, "c.csv") is None
    finally:
        f.close()
        g.close()
    cid = m.commit(message="closed")
    assert _committed(m, cid, "e/a.csv") == b"a" * 1000
    assert _committed(m, cid, "c.csv") == b"b" * 1000
    m.assert_clean_log()


def test_files_written_after_the_workspace_lost_its_files_directory_are_committed(gravfs_mount):
    """Someone removes the workspace's files directory (and pending uploads) under a
    running mount: the next files created took spare copies whose names were gone, their
    closes failed, and their releases staged them empty (a commit then held empty files,
    and the shell's `echo > f` reported nothing). Every byte is committed now."""
    import shutil

    m = gravfs_mount
    _write(m.branch_path("before"), b"before")
    m.commit()
    (ws,) = glob.glob(os.path.join(m.state_dir, "repos", "*"))
    shutil.rmtree(os.path.join(ws, "files"))
    shutil.rmtree(os.path.join(ws, "pending"))
    want = {f"f{i}": os.urandom(100 + i) for i in range(80)}  # more than the spares
    for name, body in want.items():
        _write(m.branch_path(name), body)
    cid = m.commit()
    for name, body in want.items():
        assert _read(m.path("commits", cid, name)) == body, name
    assert "was removed from the mount's files directory" in m.log_text()
