"""``gravfs spark gc`` through the command line: on SeaweedFS (executors open s3://
from the environment), a sweep killed midway (kill -9 of the driver's process
group) and its re-run, and bad input before Spark starts."""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from gravfs.fs.fsck import fsck
from gravfs.fs.repository import Repository
from gravfs.version.retention import LAST_SWEEP_KEY, read_status
from tests.spark.test_gc import KEPT, _all_objects, _read_everything, _referenced, build_history
from tests.spark.killable import KillableCli
from tests.spark.test_runtime import SPARK_CONF, _one_line, run_cli

pytestmark = pytest.mark.spark


def _report(repo, run_id: str) -> set[str]:
    import pyarrow.parquet as pq
    out = set()
    for key in repo.store.list(f"_gravfs/gc/{run_id}/report/"):
        out.update(pq.read_table(io.BytesIO(repo.store.get(key))).column("address").to_pylist())
    return out


def _history(store: str, state: str, tmp_path, monkeypatch) -> tuple[dict, dict, set]:
    """build_history's commits, every object of the store, and those GC must delete."""
    ext = tmp_path / "ext"
    ext.mkdir()
    ids = build_history(store, state, str(ext), monkeypatch)
    with Repository.open(store, state) as repo:
        before = _all_objects(repo)
        return ids, before, set(before) - _referenced(repo, [ids[n] for n in KEPT])


def test_gc_on_seaweedfs(tmp_path, s3_environ, monkeypatch):
    s3_server = s3_environ
    store = f"s3://{s3_server.bucket}/gc-{tmp_path.name}"
    state = str(tmp_path / "state")
    ids, before, dead = _history(store, state, tmp_path, monkeypatch)
    # an index built before the collection: its expired commits get marked
    run_cli("spark", "index", "--master", "local[2]", *SPARK_CONF, store=store, state=state)
    with Repository.open(store, state) as repo:
        addresses = {n: repo.stat(ids[c], p).entry.address
                     for n, c, p in (("churn 12", "m12", "churn.txt"),
                                     ("doomed", "d9", "doomed.txt"))}
    rc, out, err = run_cli("spark", "gc", "--min-age", "0", "--master", "local[2]", "--json",
                           *SPARK_CONF, store=store, state=state)
    res = json.loads(out)
    assert res["state"] == "done" and res["deleted_objects"] == len(dead), err
    for name, holders in (("churn 12", {"m12": True, "merge": False, "d9": True}),
                          ("doomed", {"d9": True})):
        rc, out, err = run_cli("provenance", addresses[name], "--json", store=store, state=state)
        got = {r["commit"]: r["collected"] for r in map(json.loads, out.splitlines())}
        assert got == {ids[c]: gone for c, gone in holders.items()}, out
        gone = sum(holders.values())
        assert f"garbage collection run {res['run_id']} expired {gone} of these commit(s)" in err
    rc, out, err = run_cli("provenance", addresses["churn 12"], store=store, state=state)
    assert [line.endswith("[tree collected]") for line in out.splitlines()] == [True, False, True]
    with Repository.open(store, state) as repo:
        assert _report(repo, res["run_id"]) == dead
        assert json.loads(repo.store.get(LAST_SWEEP_KEY)) == {"run": res["run_id"]}
        assert set(_all_objects(repo)) == set(before) - dead
        assert _read_everything(repo, [ids[n] for n in KEPT]) > 100
        checked = fsck(repo, check_data=True, progress=False)
        assert checked.exit_code == 0 and checked.expired == 4
        commits = len(list(repo.store.list("_gravfs/commits/")))
    rc, out, err = run_cli("spark", "gc", "--min-age", "0", "--master", "local[2]", "--json",
                           *SPARK_CONF, store=store, state=state)
    again = json.loads(out)
    assert again["ranges_read"] == 0 and again["deleted_objects"] == 0
    # what reads old trees, on a host that cached none: the provenance index, rebuilt,
    # leaves the expired commits out (reading one failed every run), a path's history
    # ends there
    fresh = str(tmp_path / "fresh-host")
    rc, out, err = run_cli("spark", "index", "--full", "--master", "local[2]", "--json",
                           *SPARK_CONF, store=store, state=fresh)
    ix = json.loads(out)  # m30, m20, m12 and d9 (of a deleted branch): not the root,
    assert ix["expired_commits"] == 4 and ix["commits"] == commits - 4, err  # (empty tree)
    rc, out, err = run_cli("log", "main", "--", "churn.txt", store=store, state=fresh)
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("commit ")]
    assert listed == [ids["m1"], ids["m5"]]
    assert (f"the history ends at commit {ids['merge'][:12]}" in err
            and f"garbage collection run {again['run_id']} expired what came before it" in err)
    rc, out, err = run_cli("log", "main", "--", "dir0", store=store, state=fresh)
    assert "commit " not in out and f"the history ends at commit {ids['merge'][:12]}" in err
    rc, out, err = run_cli("ls", ids["m12"], store=store, state=fresh, check=False)
    assert rc == 2 and "a commit's tree, which garbage collection deletes" in err


def test_killed_sweep_and_its_rerun(tmp_path, monkeypatch):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    ids, before, dead = _history(store, state, tmp_path, monkeypatch)
    # each executor process lets one batch delete through, then hangs
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state,
               GRAVFS_STORE_FAULT="op=delete_many,key=*,after=1,mode=hang,secs=300")
    repo = Repository.open(store, state)
    try:
        def swept_some() -> bool:
            runs = [k.split("/")[2] for k in repo.store.list("_gravfs/gc/20")
                    if k.endswith("/status.json")]
            st = read_status(repo.store, runs[0]) if runs else None
            return bool(st and st["state"] == "sweeping"
                        and any(not repo.store.exists(k) for k in dead))
        with KillableCli(["spark", "gc", "--min-age", "0", "--master", "local[2]", *SPARK_CONF],
                         env, str(tmp_path / "gc.err"), state) as run:
            run.wait_for(swept_some, "a sweep that deleted something")
        assert any(repo.store.exists(k) for k in dead)  # killed midway
        assert repo.store.exists("_gravfs/gc/sweeping")  # the fence a killed sweep leaves
        rc, out, err = run_cli("spark", "gc", "--min-age", "0", "--master", "local[2]",
                               "--json", *SPARK_CONF, store=store, state=state)
        res = json.loads(out)
        assert res["state"] == "done"
        assert not any(repo.store.exists(k) for k in dead)
        assert set(_all_objects(repo)) == set(before) - dead
        assert not repo.store.exists("_gravfs/gc/sweeping")
        assert _read_everything(repo, [ids[n] for n in KEPT]) > 100
        rc, out, err = run_cli("fsck", "--data", "-q", store=store, state=state, check=False)
        assert rc == 0, out + err
    finally:
        repo.close()


def test_bad_input_is_one_line_before_spark(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state).close()
    (tmp_path / "file").write_text("a file")
    for args, msg in ((["spark", "gc"], "no retention rules"),
                      (["spark", "gc", "--min-age", "soon"], "not a duration"),
                      (["spark", "gc", "--min-age=-1h"], "negative"),
                      # before, a NaN was "negative" and an infinite age was taken
                      (["spark", "gc", "--min-age", "nan"], "not a duration"),
                      (["spark", "gc", "--min-age", "1e400h"], "not a duration"),
                      # before, found only after the whole mark
                      (["spark", "gc", "--report", str(tmp_path / "file")], "not a directory"),
                      (["spark", "gc", "--report", "/proc/none"], "cannot make directory"),
                      (["spark", "gc", "--sweep-only", "nope"], "not a run id"),
                      (["spark", "gc", "--sweep-only", "20250101T000000Z-abcdef"],
                       "no garbage collection run")):
        if msg != "no retention rules":
            run_cli("gc", "rules", "set", "--default-days", "1", store=store, state=state)
        t = time.monotonic()
        rc, out, err = run_cli(*args, "--master", "local[1]", *SPARK_CONF, store=store,
                               state=state, check=False)
        assert rc != 0 and msg in _one_line(err), err
        assert "Spark" not in err, err
        assert time.monotonic() - t < 60


def test_a_store_failing_as_the_sweep_starts_leaves_no_fence(tmp_path, monkeypatch):
    """The sweep names itself (last-sweep.json) once it holds the fence: a store failing
    there must release the fence, or every later sweep is refused until its lease ends."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    ids, before, dead = _history(store, state, tmp_path, monkeypatch)
    rc, out, err = run_cli("spark", "gc", "--min-age", "0", "--master", "local[1]",
                           *SPARK_CONF, store=store, state=state, check=False,
                           GRAVFS_STORE_FAULT="op=put,key=_gravfs/gc/last-sweep.json,mode=fail")
    assert rc != 0 and "last-sweep.json" in _one_line(err), err
    with Repository.open(store, state) as repo:
        assert not repo.store.exists("_gravfs/gc/sweeping")
        assert set(_all_objects(repo)) == set(before)  # nothing deleted
    rc, out, err = run_cli("spark", "gc", "--min-age", "0", "--master", "local[1]", "--json",
                           *SPARK_CONF, store=store, state=state)
    assert json.loads(out)["deleted_objects"] == len(dead), err
