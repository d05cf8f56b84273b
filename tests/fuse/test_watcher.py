"""The watcher's poll: a create held open reaches staging at the next one; a damaged
branch head is watched apart from the others."""

from __future__ import annotations

import errno
import os

from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import fails_with, read_bytes, wait_for, write_bytes as _write


def test_a_created_file_held_open_reaches_staging_at_the_next_poll(gravfs_mount):
    """A create waits for the file's close to be staged (one transaction for both);
    while the file stays open, the next poll stages it, so other processes see the
    name within a poll, as a provisional entry that commits leave out."""
    m = gravfs_mount
    with open(m.branch_path("held.csv"), "wb") as f:
        f.write(b"partial")
        f.flush()
        wait_for(lambda: "held.csv" in m.cli("ls", "main").stdout, timeout=10)
        _write(m.branch_path("other"), b"x")
        cid = m.commit(message="while open")
        listed = m.cli("ls", cid).stdout
        assert "other" in listed and "held.csv" not in listed
    assert m.cli("cat", "main:held.csv").stdout == "partial"  # staged by its close
    m.assert_clean_log()


def test_a_damaged_branch_head_stops_the_watch_of_that_branch_only(gravfs_mount):
    """One emptied head made every poll fail ("cannot poll branch heads"): changes made
    outside the mount to any other branch stayed hidden behind the kernel's caches."""
    m = gravfs_mount
    m.cli("branch", "create", "dev")
    _write(m.branch_path("f", branch="dev"), b"on dev")
    _write(m.branch_path("f"), b"old")
    assert read_bytes(m.branch_path("f")) == b"old"
    assert read_bytes(m.branch_path("f", branch="dev")) == b"on dev"  # both trees known
    with open(os.path.join(m.store, "_gravfs", "refs", "branches", "dev"), "wb"):
        pass
    local = os.path.join(m.base, "local")
    _write(local, b"new, from the CLI")
    m.cli("put", local, "main:f")
    wait_for(lambda: read_bytes(m.branch_path("f")) == b"new, from the CLI", timeout=5)
    wait_for(lambda: fails_with(errno.EIO, os.stat, m.branch_path("f", branch="dev")), timeout=5)
    assert "branch 'dev' is damaged" in m.log_text()
    assert "cannot poll branch heads" not in m.log_text()


def test_a_head_moved_before_the_watchers_first_look_is_noticed(tmp_path, monkeypatch):
    """The kernel learned a branch from one head; another workspace committed before
    the watcher's first look at that branch. The look read only the new head and took
    it as the one served: the kernel kept the old tree's attributes and pages (the
    kill -9 test of test_launch failed on a fast host this way). In process, no kernel:
    the invalidations are recorded."""
    import trio

    from gravfs.fs.repository import Repository
    from gravfs.fuse import watcher as watcher_mod
    from gravfs.fuse.inodes import ROOT
    from gravfs.fuse.operations import GravfsOperations
    from gravfs.fuse.options import MountOptions

    store = str(tmp_path / "store")
    Repository.init(store, str(tmp_path / "state")).close()
    other = Repository.open(store, str(tmp_path / "other-state"))
    local = str(tmp_path / "local")
    _write(local, b"old")
    other.write_file("main", "f", local)
    other.commit("main", "old")
    repo = Repository.open(store, str(tmp_path / "state"), staging_sync=False, head_ttl=60.0)
    ops = GravfsOperations(repo, MountOptions())
    invalidated: list = []
    monkeypatch.setattr(watcher_mod, "_invalidate", invalidated.extend)

    async def main():
        watcher = watcher_mod.Watcher(ops)
        b = await ops.lookup(ROOT, b"branches", None)
        m = await ops.lookup(b.st_ino, b"main", None)
        f = await ops.lookup(m.st_ino, b"f", None)
        assert f.st_size == 3  # served from the first head
        _write(local, b"new content")
        other.write_file("main", "f", local)
        other.commit("main", "new")
        await watcher.poll()  # the first look at main
        assert f.st_ino in [ino for ino, *_ in invalidated]
        invalidated.clear()
        await watcher.poll()  # nothing moved since
        assert invalidated == []
        assert (await ops.lookup(m.st_ino, b"f", None)).st_size == len(b"new content")

    try:
        trio.run(main)
    finally:
        repo.close()
        other.close()


def test_the_watcher_says_polling_works_again_only_after_reading_a_head(tmp_path,
                                                                         monkeypatch, caplog):
    """After a failed poll, a round in which the kernel knew no branch read nothing
    from the store, yet logged "polling branch heads works again" while the store was
    still down (seen by hand with SeaweedFS stopped). In process, no kernel."""
    import logging

    import trio

    from gravfs.errors import StoreUnavailableError
    from gravfs.fs.repository import Repository
    from gravfs.fuse import watcher as watcher_mod
    from gravfs.fuse.inodes import ROOT
    from gravfs.fuse.operations import GravfsOperations
    from gravfs.fuse.options import MountOptions

    store = str(tmp_path / "store")
    Repository.init(store, str(tmp_path / "state")).close()
    repo = Repository.open(store, str(tmp_path / "state"), staging_sync=False, head_ttl=60.0)
    ops = GravfsOperations(repo, MountOptions(poll=0.01))
    real_signature, real_knows = watcher_mod.branch_signature, ops.inodes.knows_tree

    def down(repo, branch):
        raise StoreUnavailableError("object store at X unavailable: read timed out")

    async def main():
        watcher = watcher_mod.Watcher(ops)
        b = await ops.lookup(ROOT, b"branches", None)
        await ops.lookup(b.st_ino, b"main", None)  # the kernel knows main
        monkeypatch.setattr(watcher_mod, "branch_signature", down)
        with trio.fail_after(30):
            await watch(watcher)

    async def watch(watcher):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            while "cannot poll branch heads" not in caplog.text:
                await trio.sleep(0.01)
            monkeypatch.setattr(ops.inodes, "knows_tree", lambda ident: False)  # forgotten
            rounds = watcher.rounds
            while watcher.rounds < rounds + 5:  # rounds that read no head
                await trio.sleep(0.01)
            assert "works again" not in caplog.text
            monkeypatch.setattr(watcher_mod, "branch_signature", real_signature)
            monkeypatch.setattr(ops.inodes, "knows_tree", real_knows)  # looked up again
            while "works again" not in caplog.text:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    try:
        with caplog.at_level(logging.INFO, logger="gravfs.fuse.watcher"):
            trio.run(main)
    finally:
        repo.close()


def test_a_branch_deleted_on_another_host_leaves_this_host_s_staged_files_in_lost_and_found(
        gravfs_mount):
    """Its staging stayed in this host's workspace: a branch of that name made again,
    by any host, showed those files as its own uncommitted changes (and a commit here
    took them into it). The watcher that sees the branch go saves them and drops it."""
    m = gravfs_mount
    m.cli("branch", "create", "dev")
    os.makedirs(m.branch_path("d", branch="dev"))
    _write(m.branch_path("d/work.csv", branch="dev"), b"uncommitted work")
    assert "added  d/work.csv" in m.cli("status", "dev").stdout
    other = ["--state-dir", os.path.join(m.base, "other-host")]  # (the last one counts)
    m.cli(*other, "branch", "delete", "dev")  # nothing staged on the other host
    saved = os.path.join(m.state_dir, "repos", os.listdir(os.path.join(m.state_dir, "repos"))[0],
                         "lost+found", "dev", "d", "work.csv")
    wait_for(lambda: os.path.exists(saved), timeout=10)
    assert read_bytes(saved) == b"uncommitted work"
    assert "2 uncommitted change(s) staged on it; 1 file(s) of them are saved" in m.log_text()
    wait_for(lambda: m.cli("status", "dev", check=False).stderr ==
             "gravfs: branch 'dev' not found\n", timeout=10)  # nothing held any more
    m.cli(*other, "branch", "create", "dev")
    wait_for(lambda: os.path.isdir(m.branch_path(branch="dev")), timeout=10)
    assert os.listdir(m.branch_path(branch="dev")) == []
    assert m.cli("status", "dev").stdout.strip() == "On branch dev: nothing to commit"
    m.assert_clean_log()
