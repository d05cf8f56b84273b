"""holds(): whether a process still has a descriptor on a path (/proc/PID/fd)."""

from __future__ import annotations

import os
import subprocess

from gravfs.fuse.holders import holds, mount_users


def test_an_open_file_is_held_and_a_closed_one_is_not(tmp_path):
    path = os.fsencode(tmp_path / "held")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert holds(os.getpid(), path)
        assert not holds(os.getpid(), path + b"-other")
    finally:
        os.close(fd)
    assert not holds(os.getpid(), path)


def test_among_hundreds_of_descriptors_and_with_a_name_that_is_not_utf8(tmp_path):
    others = [os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY) for _ in range(300)]
    path = os.fsencode(tmp_path) + b"/caf\xe9"  # not UTF-8: compared as the kernel names it
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert holds(os.getpid(), path)
        os.unlink(path)  # the kernel's name is now "<path> (deleted)": still held
        assert holds(os.getpid(), path)
    finally:
        os.close(fd)
        for o in others:
            os.close(o)
    assert not holds(os.getpid(), path)


def test_a_process_that_is_gone_holds_nothing(tmp_path):
    child = subprocess.Popen(["true"])
    child.wait()
    assert not holds(child.pid, os.fsencode(tmp_path))


def test_mount_users_are_those_with_a_directory_or_a_descriptor_inside(tmp_path):
    """Whom an unmount refused as busy names: a working directory or an open file under
    the mount point, not a path that only starts with its name."""
    inside, beside = tmp_path / "mnt", tmp_path / "mnt-other"
    (inside / "d").mkdir(parents=True)
    beside.mkdir()
    (inside / "d" / "f").write_text("x")
    procs = [subprocess.Popen(["sleep", "60"], cwd=inside / "d"),
             subprocess.Popen(["sh", "-c", f"exec 3<'{inside}/d/f'; exec sleep 60"], cwd=tmp_path),
             subprocess.Popen(["sleep", "60"], cwd=beside)]
    try:
        import time
        deadline = time.monotonic() + 30
        while len(mount_users(str(inside))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # (the shell's exec of sleep, its descriptor kept)
        users = mount_users(str(inside))
        assert sorted(users) == sorted([f"sleep (pid {procs[0].pid}, working directory)",
                                        f"sleep (pid {procs[1].pid}, an open file)"]), users
        assert mount_users(str(inside), limit=1) == users[:1]
        assert mount_users(str(beside)) == [f"sleep (pid {procs[2].pid}, working directory)"]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert mount_users(str(inside)) == []
