"""holds(): whether a process still has a descriptor on a path (/proc/PID/fd)."""

from __future__ import annotations

import os
import subprocess

from gravfs.fuse.holders import holds


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
