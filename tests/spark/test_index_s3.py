"""gravfs spark index on a repository on S3 (the suite's SeaweedFS): executors read the
ranges and write the index files through the store; queries read them through the tier."""

from __future__ import annotations

import io
import json

import pytest

from gravfs.fs.repository import Repository
from gravfs.provenance import bruteforce
from tests.repo_util import small_settings
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


def test_index_on_s3_answers_as_brute_force(tmp_path, s3_environ):
    s3_server = s3_environ
    store = f"s3://{s3_server.bucket}/index-{tmp_path.name}"
    state = str(tmp_path / "state")
    with Repository.init(store, state, settings=small_settings()) as repo:
        for i in range(40):
            repo.write_file("main", f"d{i % 4}/f{i:02d}", io.BytesIO(f"c{i % 7}".encode()))
        repo.commit("main", "first")
        repo.create_branch("dev", "main")
        repo.write_file("dev", "d0/f00", io.BytesIO(b"c3"))
        repo.commit("dev", "dev change")
        repo.write_file("main", "d1/f01", io.BytesIO(b"c3"))
        repo.commit("main", "main change")
        repo.merge("dev", "main", strategy="source-wins")
        address = repo.stat("main", "d3/f03").entry.address  # content c3
        want = bruteforce.provenance(repo, address)
        want_log = bruteforce.path_history(repo, "main", b"d0/f00")
    rc, out, err = run_cli("spark", "index", "--json", "--master", "local[2]", *SPARK_CONF,
                           store=store, state=state)
    assert json.loads(out)["commits"] == 5
    fresh = str(tmp_path / "fresh")  # nothing cached: every index file comes from S3
    rc, out, err = run_cli("provenance", "--json", address, store=store, state=fresh)
    assert [(d["commit"], d["path"].encode()) for d in map(json.loads, out.splitlines())] == want
    rc, out, err = run_cli("log", "main", "--json", "--", "d0/f00", store=store, state=fresh)
    assert [(d["id"], d["change"]) for d in map(json.loads, out.splitlines())] == want_log
    assert len(want) > 5 and len(want_log) == 2 and err == ""
