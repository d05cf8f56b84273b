"""A Spark import whose driver is killed (kill -9 of its process group) at any stage:
nothing is committed, the re-run completes with the same tree as ``gravfs import``,
and ``gravfs fsck`` is clean.

Each kill point is made deterministic by a store fault that hangs the process
at that point (GRAVFS_STORE_FAULT, inherited by the executors): the test waits
for the stage's visible effect in the store, then kills.
"""

from __future__ import annotations

import os

import pytest

from gravfs.fs.repository import Repository
from tests.repo_util import small_settings
from tests.spark.killable import HANG, KillableCli, count_files
from tests.spark.test_import import make_tree
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("stage,fault,reached", [
    # executors are uploading contents (each process lets 10 uploads through, then hangs)
    ("uploading", f"op=upload|put,key=data/*,after=10,{HANG}",
     lambda store, before, run: count_files(store, "data") >= 10),
    # tasks are writing ranges; the driver's metarange write will hang (seen as new
    # ranges, or as the hang itself when every range the job wrote existed already)
    ("writing ranges", f"op=put_file_if_absent,key=_gravfs/metaranges/*,{HANG}",
     lambda store, before, run: count_files(store, "_gravfs/ranges") > before["ranges"]
     or "injected hang: put_file_if_absent _gravfs/metaranges/" in run.stderr()),
    # the driver wrote the commit object; the head's compare-and-swap hangs
    ("moving the head", f"op=cas,key=_gravfs/refs/branches/*,{HANG}",
     lambda store, before, run: count_files(store, "_gravfs/commits") > before["commits"]),
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
    before = {"ranges": count_files(store, "_gravfs/ranges"),
              "commits": count_files(store, "_gravfs/commits")}
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, GRAVFS_STORE_FAULT=fault)
    with KillableCli(["spark", "import", src, "main", "--master", "local[2]", *SPARK_CONF], env,
                     str(tmp_path / "import.err"), state) as run:
        run.wait_for(lambda: reached(store, before, run), stage)
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
