"""gravfs.fuse.errnos: what a full descriptor table of the daemon answers and logs."""

from __future__ import annotations

import errno
import os
import resource

from gravfs.fuse.errnos import errno_of
from tests.fuse_util import gravfs_mount, read_bytes  # noqa: F401  (fixture)


def test_the_daemons_own_limit_is_enfile_for_the_caller():
    assert errno_of(OSError(errno.EMFILE, "Too many open files")) == errno.ENFILE
    assert errno_of(OSError(errno.ENFILE, "Too many open files in system")) == errno.ENFILE


def test_opens_past_the_daemons_descriptor_limit_fail_with_enfile_and_a_log_line(gravfs_mount):
    """A job holding many files open for writing (a Spark write partitioned many ways)
    ran the daemon out of descriptors: the caller got EMFILE, which names its own
    limit (raising it changed nothing), and the log said nothing. Now ENFILE, a warning
    naming the daemon's limit and how to raise it, and the mount works on once they
    close."""
    m = gravfs_mount
    pid = m.pid()
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 64, old[1]))
    fds, failed = [], None
    os.makedirs(m.branch_path("parts"))
    try:
        for i in range(400):
            try:
                fds.append(os.open(m.branch_path("parts", f"p{i}"), os.O_WRONLY | os.O_CREAT, 0o644))
            except OSError as exc:
                failed = exc
                break
        assert failed is not None and failed.errno == errno.ENFILE, failed
        assert fds, "the first open failed"
        assert "this daemon's open-file limit" in m.log_text()
        for fd in fds:
            os.write(fd, b"row\n")
    finally:
        for fd in fds:
            os.close(fd)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    with open(m.branch_path("parts", "after"), "wb") as f:
        f.write(b"after\n")
    assert read_bytes(m.branch_path("parts", "p0")) == b"row\n"
    m.commit()
    assert len(os.listdir(m.path("commits", m.head(), "parts"))) == len(fds) + 1
