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
