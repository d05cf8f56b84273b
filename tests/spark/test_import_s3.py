"""gravfs spark import into a repository on S3 (the suite's SeaweedFS): executors open
the store from its URL and the AWS environment, as on a cluster."""

from __future__ import annotations

import os

import pytest

from gravfs.fs.repository import Repository
from tests.fuse_util import s3_env
from tests.spark.test_import import make_tree
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


def test_spark_import_into_s3_store(tmp_path, s3_server, monkeypatch):
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    env = s3_env(s3_server)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    store = f"s3://{s3_server.bucket}/spark-{tmp_path.name}"
    state = str(tmp_path / "state")
    src = str(tmp_path / "src")
    os.makedirs(src)
    make_tree(src, dirs=5, files=30)
    run_cli("init", store=store, state=state)
    run_cli("branch", "create", "single", store=store, state=state)
    run_cli("import", "-q", src, "single:t", store=store, state=state)
    run_cli("spark", "import", src, "main:t", "--master", "local[2]", "--partitions", "3",
            *SPARK_CONF, store=store, state=state)
    rc, out, err = run_cli("diff", "single", "main", store=store, state=state)
    assert out.strip() == "no differences"
    with Repository.open(store, state) as repo:
        mr = {b: repo.commits.get(repo.head(b, fresh=True)).metarange for b in ("single", "main")}
        e = repo.stat("main", "t/part=003/h0/part-00004.bin").entry
        with open(os.path.join(src, "part=003/h0/part-00004.bin"), "rb") as f:
            assert repo.data.read(e.address) == f.read()  # uploaded by an executor
    assert mr["main"] == mr["single"]
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 0, out + err
