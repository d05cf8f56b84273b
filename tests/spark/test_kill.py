"""A Spark import whose driver is killed (kill -9 of its process group) at any stage:
nothing is committed, the re-run completes with the same tree as ``gravfs import``,
and ``gravfs fsck`` is clean.

Each kill point is made deterministic by a store fault that hangs the process
at that point (GRAVFS_STORE_FAULT, inherited by the executors): the test waits
for the stage's visible effect in the store, then kills.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gravfs.fs.repository import Repository
from tests.repo_util import small_settings
from tests.spark.test_import import make_tree
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark

HANG = "mode=hang,secs=300"


def _count(store: str, sub: str) -> int:
    n = 0
    for _root, _dirs, files in os.walk(os.path.join(store, sub)):
        n += len(files)
    return n


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]
    except FileNotFoundError:
        return "(none)"


def _wait_for(pred, what: str, proc, err_path: str, state: str, timeout: float = 180.0) -> None:
    """Wait for the stage's effect; a failure shows the import's stderr and Spark's log."""
    deadline = time.monotonic() + timeout
    while not pred():
        if proc.poll() is not None:
            raise AssertionError(f"the import ended ({proc.returncode}) before {what}: "
                                 f"{_tail(err_path)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; stderr: {_tail(err_path)}; "
                                 f"spark.log: {_tail(os.path.join(state, 'logs', 'spark.log'))}")
        time.sleep(0.1)


@pytest.mark.parametrize("stage,fault,reached", [
    # executors are uploading contents (each process lets 10 uploads through, then hangs)
    ("uploading", f"op=upload|put,key=data/*,after=10,{HANG}",
     lambda store, before: _count(store, "data") >= 10),
    # tasks are writing ranges; the driver's metarange write will hang (seen as new
    # ranges, or as the hang itself when every range the job wrote existed already)
    ("writing ranges", f"op=put_file_if_absent,key=_gravfs/metaranges/*,{HANG}",
     lambda store, before: _count(store, "_gravfs/ranges") > before["ranges"]
     or "injected hang: put_file_if_absent _gravfs/metaranges/" in before["stderr"]()),
    # the driver wrote the commit object; the head's compare-and-swap hangs
    ("moving the head", f"op=cas,key=_gravfs/refs/branches/*,{HANG}",
     lambda store, before: _count(store, "_gravfs/commits") > before["commits"]),
])
def test_killed_import_commits_nothing_and_reruns(tmp_path, stage, fault, reached):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    src = str(tmp_path / "src")
    os.makedirs(src)
    make_tree(src, dirs=6, files=30)
    with Repository.init(store, state, settings=small_settings()) as repo:
        repo.create_branch("single", "main")
        head = repo.head("main", fresh=True)
    run_cli("import", "-q", src, "single", store=store, state=state)
    err_path = str(tmp_path / "import.err")
    before = {"ranges": _count(store, "_gravfs/ranges"),
              "commits": _count(store, "_gravfs/commits"),
              "stderr": lambda: _tail(err_path, 1 << 20)}
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, GRAVFS_STORE_FAULT=fault)
    # stderr to a file, not a pipe: nobody reads a pipe while the import hangs, and a
    # driver whose stderr fills a pipe's 64 KiB blocks before the stage is reached
    with open(err_path, "wb") as err:  # -v: the store's injected hang is logged
        proc = subprocess.Popen([sys.executable, "-m", "gravfs.cli", "-v", "spark", "import", src,
                                 "main", "--master", "local[2]", *SPARK_CONF], env=env,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        _wait_for(lambda: reached(store, before), stage, proc, err_path, state)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
        proc.wait()
    with Repository.open(store, state) as repo:
        assert repo.head("main", fresh=True) == head, stage
    run_cli("spark", "import", src, "main", "--master", "local[2]", *SPARK_CONF,
            store=store, state=state)
    rc, out, err = run_cli("diff", "single", "main", store=store, state=state)
    assert out.strip() == "no differences"
    with Repository.open(store, state) as repo:
        mr = {b: repo.commits.get(repo.head(b, fresh=True)).metarange for b in ("single", "main")}
    assert mr["main"] == mr["single"]
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 0, out + err
