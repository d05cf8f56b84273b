"""The watcher's poll: a create held open reaches staging at the next one."""

from __future__ import annotations

from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import wait_for, write_bytes as _write


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
