"""gravfs provenance and gravfs log REF -- PATH as a user runs them: outputs, and the bad
inputs (no index, an index older than the repository, damaged index files)."""

from __future__ import annotations

import io
import json
import os
import shutil

import pytest

from gravfs.fs.repository import Repository
from gravfs.provenance import bruteforce
from gravfs.provenance import manifest as manifests
from gravfs.provenance.layout import CONTENTS, PATHS
from gravfs.spark.index import build_index
from gravfs.store import open_store
from tests.repo_util import small_settings
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def env(tmp_path):
    return _make(str(tmp_path / "store"), str(tmp_path / "state"))


def _make(store: str, state: str):
    """main: a/one, a/two; dev adds b/copy (a/one's first content) and is tagged v1;
    then main changes a/one."""
    repo = Repository.init(store, state, settings=small_settings())
    repo.write_file("main", "a/one", io.BytesIO(b"same"))
    repo.write_file("main", "a/two", io.BytesIO(b"other"))
    c1 = repo.commit("main", "first")
    repo.create_branch("dev", "main")
    repo.write_file("dev", "b/copy", io.BytesIO(b"same"))
    repo.commit("dev", "copy on dev")
    repo.create_tag("v1", "dev")
    repo.write_file("main", "a/one", io.BytesIO(b"changed"))
    repo.commit("main", "change one")
    repo.close()
    return store, state, c1


def _build(spark, store, state):
    with Repository.open(store, state) as repo:
        return build_index(spark, repo)


def test_missing_index_says_how_to_build_it(env):
    store, state, c1 = env
    rc, out, err = run_cli("provenance", "main:a/two", store=store, state=state, check=False)
    assert rc == 2 and out == ""
    assert _one_line(err) == ("gravfs: this repository has no provenance index: build it "
                              "with 'gravfs spark index'")
    # log -- PATH does not need it: each commit's tree is looked up instead
    rc, out, err = run_cli("log", "main", "--json", "--", "a/one", store=store, state=state)
    got = [(d["id"], d["change"]) for d in map(json.loads, out.splitlines())]
    assert [k for _, k in got] == ["modified", "added"] and got[1][0] == c1.id and err == ""
    # a directory: the commits that changed anything under it, as git log -- DIR
    rc, out, err = run_cli("log", "main", "--json", "--", "a", store=store, state=state)
    got = [(d["id"], d["change"], d["path"]) for d in map(json.loads, out.splitlines())]
    assert [k for _, k, _ in got] == ["modified", "added"] and got[1][0] == c1.id, got
    assert err == ""


def test_provenance_and_log_outputs(spark, env, tmp_path):
    store, state, c1 = env
    _build(spark, store, state)
    rc, out, err = run_cli("provenance", "--json", "dev:b/copy", store=store, state=state)
    rows = [json.loads(ln) for ln in out.splitlines()]
    with Repository.open(store, state) as repo:
        want = bruteforce.provenance(repo, repo.stat("dev", "b/copy").entry.address)
        dev_head = repo.resolve("dev").commit.id
    assert [(r["commit"], r["path"].encode()) for r in rows] == want
    assert rows[0] == {**rows[0], "commit": c1.id, "path": "a/one",
                       "branches": ["dev", "main"], "tags": ["v1"]}
    assert {(r["commit"], r["path"]) for r in rows[1:]} == {(dev_head, "a/one"),
                                                            (dev_head, "b/copy")}
    assert all(r["branches"] == ["dev"] and r["tags"] == ["v1"] for r in rows[1:])
    assert all(len(r["commit"]) == 64 for r in rows) and err == ""
    # the same content named by a local file, its address, its digest and a digest prefix
    local = tmp_path / "same.bin"
    local.write_bytes(b"same")
    address = rows[0]["address"]
    for target in (str(local), address, address.rsplit("/", 1)[1], address.rsplit("/", 1)[1][:8]):
        rc, o, e = run_cli("provenance", "--json", target, store=store, state=state)
        assert o == out, target
    rc, text, err = run_cli("provenance", "main:a/one", store=store, state=state)
    assert text.splitlines()[0].endswith("  a/one  (main)") and len(text.splitlines()) == 1
    rc, out, err = run_cli("log", "main", "--json", "--", "a/one", store=store, state=state)
    got = [(d["id"], d["change"], d["path"]) for d in map(json.loads, out.splitlines())]
    with Repository.open(store, state) as repo:
        want = bruteforce.path_history(repo, "main", b"a/one")
    assert [(c, k) for c, k, _ in got] == want and [k for _, k, _ in got] == ["modified", "added"]
    rc, out, err = run_cli("log", "main", "-n", "1", "--", "a/one", store=store, state=state)
    assert out.startswith("commit ") and "    modified: a/one" in out and out.count("commit ") == 1


def test_bad_targets_are_one_line(spark, env, tmp_path):
    store, state, _ = env
    _build(spark, store, state)
    cases = {("provenance", "main:a"): "gravfs: a: is a directory in main (provenance takes a file)",
             ("provenance", "nothing-here"): "gravfs: 'nothing-here' is not a local file, a "
                                             "content address or REF:PATH",
             ("provenance", "main:nope"): "gravfs: nope: no such file or directory in main",
             ("provenance", "abcdef12"): "gravfs: no indexed commit holds a content whose "
                                         "address starts with 'abcdef12'",
             ("log", "main", "--", "a", "b"): "gravfs: log takes one PATH after --"}
    for args, line in cases.items():
        rc, out, err = run_cli(*args, store=store, state=state, check=False)
        assert rc != 0 and _one_line(err) == line, args
    rc, out, err = run_cli("provenance", str(tmp_path / "absent.bin"), store=store, state=state,
                           check=False)
    assert rc != 0 and "is not a local file" in _one_line(err)


def test_index_older_than_repository_answers_for_what_it_covers(spark, env):
    store, state, c1 = env
    _build(spark, store, state)
    with Repository.open(store, state) as repo:
        repo.write_file("main", "a/two", io.BytesIO(b"same"))
        newer = repo.commit("main", "newer")
    rc, out, err = run_cli("provenance", "--json", "dev:b/copy", store=store, state=state)
    assert newer.id not in out and c1.id in out
    assert _one_line(err).startswith("gravfs: note: the provenance index is older than the "
                                     "repository: it covers 4 commit(s), and 1 ref(s) (main) "
                                     "point to newer commits")
    # log -- PATH looks the commits the index does not cover up in their trees
    rc, out, err = run_cli("log", "main", "--json", "--", "a/two", store=store, state=state)
    got = [(d["id"], d["change"]) for d in map(json.loads, out.splitlines())]
    assert got == [(newer.id, "modified"), (c1.id, "added")] and err == ""
    with Repository.open(store, state) as repo:
        assert got == bruteforce.path_history(repo, "main", b"a/two")
    # the CLI extends it: only the new commit and its new range(s) are read
    rc, out, err = run_cli("spark", "index", "--json", "--master", "local[2]", *SPARK_CONF,
                           store=store, state=state)
    res = json.loads(out)
    assert res["commits"] == 1 and res["commits_total"] == 5 and res["full"] is False
    rc, out, err = run_cli("provenance", "dev:b/copy", store=store, state=state)
    assert newer.id[:12] in out and err == ""
    rc, out, err = run_cli("spark", "index", store=store, state=state)  # no JVM started
    assert out.strip() == "The provenance index is up to date (5 commits)"


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """A repository with its index, built once; tests damage copies of it."""
    base = tmp_path_factory.mktemp("built")
    store, state, _ = _make(str(base / "store"), str(base / "state"))
    _build(spark, store, state)
    return store


@pytest.mark.parametrize("what", ["middle", "truncated", "sidecar", "manifest", "missing"])
def test_damaged_index_file_is_one_clear_line(spark, built, tmp_path, what):
    store = str(tmp_path / "store")
    shutil.copytree(built, store)
    m = manifests.load(open_store(store))
    if what == "manifest":
        key = manifests.MANIFEST
    elif what == "sidecar":
        key = m.files(PATHS)[0].sidecar
    else:
        key = m.files(CONTENTS)[0].key
    path = os.path.join(store, key)
    data = bytearray(open(path, "rb").read())
    if what == "missing":
        os.unlink(path)
    elif what == "middle":  # the first pages' bytes, size kept
        for i in range(4, min(len(data) - 8, 400)):
            data[i] ^= 0x5A
    else:
        data = data[: len(data) // 2]
    if what != "missing":
        os.chmod(path, 0o644)
        with open(path, "wb") as out:
            out.write(data)
    state = str(tmp_path / "state")  # nothing cached yet
    args = ("log", "main", "--", "b/copy") if what == "sidecar" else ("provenance", "main:a/two")
    rc, out, err = run_cli(*args, store=store, state=state, check=False)
    assert rc == 7 and out == ""
    kind = "manifest" if what == "manifest" else "file"
    state_of = "is missing: " if what == "missing" else "is damaged ("
    assert _one_line(err).startswith(f"gravfs: provenance index {kind} {key} {state_of}"), err
    assert err.rstrip().endswith("rebuild it with 'gravfs spark index --full'"), err
    if what == "manifest":  # --full rebuilds over a manifest that does not parse
        with Repository.open(store, state) as repo:
            assert build_index(spark, repo, full=True).commits == 4
        rc, out, err = run_cli(*args, store=store, state=state)
        assert "a/two" in out and err == ""
