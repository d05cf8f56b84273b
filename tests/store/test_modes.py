"""File modes of the store and the state dir through the command line and a real mount.

A file its owner made unreadable to others (chmod 600) must not be readable by
another user in any copy gravfs keeps: the local store, the tier, pending
uploads, the mount's local files, logs and the staging database.
"""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from tests.fuse_util import Mount, fuse_available
from tests.modes_util import NOBODY, loose_entries, open_base, readable_by


@pytest.fixture
def base():
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: this test needs a real FUSE mount")
    old = os.umask(0o022)  # the usual umask: gravfs must not rely on a stricter one
    path = open_base()
    try:
        yield path
    finally:
        os.umask(old)
        shutil.rmtree(path, ignore_errors=True)


def test_store_and_state_dir_are_private_after_init_put_mount_write_commit(base, tmp_path):
    m = Mount(base)  # store and state dir inside a directory every user may enter
    secret = tmp_path / "secret"
    secret.write_bytes(b"for my eyes only")
    os.chmod(secret, 0o600)
    try:
        m.init()
        m.cli("put", str(secret), "main:secret")
        m.commit()
        m.mount()
        with open(m.branch_path("written"), "wb") as f:  # its local file exists while open
            f.write(b"written through the mount")
            f.flush()
            assert loose_entries(m.state_dir) == []
        assert open(m.path("commits", m.head(), "secret"), "rb").read() == b"for my eyes only"
        cid = m.commit()
        assert open(m.path("commits", cid, "written"), "rb").read() == b"written through the mount"
        assert loose_entries(m.store) == []
        assert loose_entries(m.state_dir) == []  # logs, LMDB, tier, pending, local files
        objects = [p for p in glob.glob(os.path.join(m.store, "data", "*", "*"))]
        cached = [p for p in glob.glob(os.path.join(m.state_dir, "repos", "*", "cache", "objects", "**"),
                                       recursive=True) if os.path.isfile(p)]
        assert objects and cached
        control = os.path.join(base, "control")
        with open(control, "w") as f:
            f.write("anyone")
        os.chmod(control, 0o644)
        assert readable_by(NOBODY, control)  # the uid switch works: the modes decide
        assert not any(readable_by(NOBODY, p) for p in objects + cached[:3])
    finally:
        m.cleanup()


def test_state_dir_of_an_older_gravfs_is_tightened(base):
    """A workspace left 0755 by an older gravfs is 0700 again once a command opens it."""
    m = Mount(base).init()
    m.cli("ls", "main")
    ws = glob.glob(os.path.join(m.state_dir, "repos", "*"))[0]
    loose = [os.path.join(m.state_dir, "repos"), ws] + [os.path.join(ws, d) for d in ("staging", "cache")]
    for d in loose:
        os.chmod(d, 0o755)
    m.cli("ls", "main")
    assert [oct(os.stat(d).st_mode & 0o777) for d in loose] == ["0o700"] * len(loose)
