"""hold_standard_fds: descriptors 0-2 are never a file gravfs opens."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _closing(*fds: int):
    return lambda: [os.close(fd) for fd in fds]


def test_closed_ones_hold_dev_null_and_open_ones_are_left(tmp_path):
    code = f"""
import os, sys
sys.path.insert(0, {ROOT!r})
from gravfs.stdfds import hold_standard_fds
before = sys.stdin is None, sys.stdout is None, sys.stderr is None
hold_standard_fds()
fd = os.open({str(tmp_path / "data")!r}, os.O_CREAT | os.O_WRONLY)
links = [os.readlink(f"/proc/self/fd/{{n}}") for n in (0, 1, 2)]
print("oops", file=sys.stderr)  # a closed stderr swallows it, not stdout (print's None)
with open({str(tmp_path / "out")!r}, "w") as f:
    f.write(repr((fd, links, before, sys.stdin is None, os.get_inheritable(1))))
"""
    for closed in ((0, 1, 2), (1,), (0, 2)):
        p = subprocess.run([sys.executable, "-c", code], preexec_fn=_closing(*closed),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, timeout=60)
        assert p.returncode == 0
        fd, links, before, stdin_none, inheritable = eval((tmp_path / "out").read_text())
        assert fd >= 3 and inheritable
        assert [links[n] == "/dev/null" for n in (0, 1, 2)] == [n in closed for n in (0, 1, 2)]
        assert before == tuple(n in closed for n in (0, 1, 2)) and stdin_none == (0 in closed)
        if 1 not in closed:
            assert p.stdout == b""  # (stderr's line did not land in stdout)
