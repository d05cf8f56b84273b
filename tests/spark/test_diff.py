"""gravfs.spark.diff (gravfs/spark/treediff.py): the difference of two refs as a DataFrame,
equal to ``gravfs diff``, reading exactly the ranges ``gravfs diff`` reads."""

from __future__ import annotations

import os
import random

import pytest

from gravfs.fs.importer import import_tree as local_import
from gravfs.spark import diff
from gravfs.spark.treediff import plan, plan_segments
from gravfs.version.committed.reader import MetaRange, RangeInfo
from tests.spark.test_import import make_tree
from tests.spark.test_runtime import run_cli

pytestmark = pytest.mark.spark


def _info(rid: str, lo: bytes, hi: bytes) -> RangeInfo:
    return RangeInfo(rid, lo, hi, 1, 1)


def test_segments_skip_common_ranges_and_group_overlaps():
    left = MetaRange("L", [_info("a", b"a", b"c"), _info("b", b"d", b"f"),
                           _info("c", b"g", b"k"), _info("e", b"x", b"z")])
    right = MetaRange("R", [_info("a", b"a", b"c"), _info("b2", b"d", b"e"),
                            _info("b3", b"e1", b"h"), _info("d", b"m", b"n"),
                            _info("e", b"x", b"z")])
    segs = plan_segments(left, right)
    assert [([r.id for r in s.left], [r.id for r in s.right]) for s in segs] == [
        (["b", "c"], ["b2", "b3"]),  # overlapping spans chain into one segment
        ([], ["d"]),                 # only on one side: all added
    ]
    assert sum(s.ranges for s in segs) == 5


def _change_tree(repo, rnd: random.Random, branch: str) -> None:
    """Random edits: changed, added and removed files, a symlink, an empty directory."""
    nodes = [n for n in repo.walk(branch) if n.kind == "file"]
    for n in rnd.sample(nodes, 12):
        repo.write_file(branch, n.key, rnd.randbytes(50))
    for n in rnd.sample(nodes, 8):
        try:
            repo.remove(branch, n.key)
        except Exception:  # already rewritten above: remove the new one instead
            pass
    for i in range(6):
        repo.write_file(branch, f"new/{rnd.randrange(1000)}/f{i}", rnd.randbytes(20))
    repo.symlink(branch, "new/link", "f0")
    repo.mkdir(branch, "new/empty")
    repo.commit(branch, "changes")


def test_diff_equals_gravfs_diff(spark, repo, tmp_path):
    src = str(tmp_path / "src")
    os.makedirs(src)
    make_tree(src, dirs=8, files=30)
    local_import(repo, src, "main", progress=False)
    repo.create_branch("b", "main")
    _change_tree(repo, random.Random(3), "b")
    rc, out, err = run_cli("diff", "main", "b", store=repo.store.url,
                           state=str(tmp_path / "state2"))
    want = sorted(line.split(None, 1)[1] + " " + line.split(None, 1)[0]
                  for line in out.splitlines())
    df = diff(spark, repo, "main", "b")
    rows = df.collect()
    got = sorted(f"{r['path']} {r['change']}" for r in rows)
    assert got == want and len(got) > 20
    # each side carries its entry, null where absent, with an mtime
    for r in rows:
        assert (r["left"] is None) == (r["change"] == "added")
        assert (r["right"] is None) == (r["change"] == "removed")
        side = r["right"] or r["left"]
        assert side["mtime"] is not None and side["identity"]
        if r["change"] == "changed":
            assert r["left"]["identity"] != r["right"]["identity"]
    # only the ranges gravfs diff reads, and far fewer than the trees hold
    p = plan(repo, "main", "b")
    it = repo.diff("main", "b")
    assert len(list(it)) == len(rows)
    assert p.ranges_read == it.stats.ranges_read
    assert p.ranges_read < p.ranges_left + p.ranges_right


def test_diff_of_equal_refs_is_empty(spark, repo, tmp_path):
    repo.write_file("main", "a", b"x")
    repo.commit("main", "one")
    repo.create_branch("b", "main")
    assert diff(spark, repo, "main", "b").count() == 0
    assert plan(repo, "main", "b").ranges_read == 0


def test_diff_from_empty_commit(spark, repo):
    empty = repo.head("main", fresh=True)
    repo.write_file("main", "a/b", b"x")
    repo.commit("main", "one")
    rows = diff(spark, repo, empty, "main").collect()
    assert [(r["path"], r["change"]) for r in rows] == [("a/b", "added")]
