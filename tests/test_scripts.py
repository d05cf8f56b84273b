"""The benchmark scripts and the floor start: each imports what it uses from gravfs
and answers --help. A benchmark that no longer imports (bench_committed.py did, for
five days, after a helper it used was removed) fails here instead of on the day its
figures are wanted."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "scripts", "bench_*.py"))) + [
    os.path.join(ROOT, "scripts", "fuse_floor.py")]


def test_the_benchmarks_are_all_here():
    names = {os.path.basename(p) for p in SCRIPTS}
    assert {"bench_mount.py", "bench_repo.py", "bench_committed.py", "fuse_floor.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_a_benchmark_script_imports_and_answers_help(script):
    res = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: " + os.path.basename(script)), res.stdout[:200]
