"""Checks of file modes: what a tree grants beyond its owner, and reads as another uid."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile

import pytest

NOBODY = 65534


def loose_entries(root: str, dir_mode: int = 0o700, file_mode: int = 0o600) -> list[str]:
    """Every directory (root included) and file under ``root`` whose permission bits differ."""
    out = []
    for d, dirs, files in os.walk(root):
        for path in [d] + [os.path.join(d, f) for f in files]:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            want = dir_mode if stat.S_ISDIR(st.st_mode) else file_mode
            if stat.S_IMODE(st.st_mode) != want:
                out.append(f"{stat.S_IMODE(st.st_mode):o} {path}")
    return out


def open_base() -> str:
    """A directory every user may enter (pytest's tmp_path is 0700, which would hide
    everything in it from another uid whatever gravfs does); remove it when done."""
    base = tempfile.mkdtemp(prefix="gravfs-modes-")
    os.chmod(base, 0o755)
    return base


def readable_by(uid: int, path: str) -> bool:
    """Whether a process running as ``uid`` (needs root here) can read ``path``."""
    if os.geteuid() != 0:
        pytest.skip("switching to another uid needs root")
    code = ("import os, sys\n"
            f"os.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
            "try:\n open(sys.argv[1], 'rb').read(1)\n"
            "except PermissionError:\n sys.exit(3)\n")
    res = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 3), res.stderr
    return res.returncode == 0
