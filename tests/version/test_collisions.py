"""gravfs.version.collisions: a path two sides would make both a file and a directory."""

from __future__ import annotations

from gravfs.fs.repository import Repository
from gravfs.version.collisions import (InTree, WithChanges, file_above, file_ancestors,
                                       meeting, new_collisions)
from tests.repo_util import head_metarange, small_settings


def test_file_ancestors():
    assert list(file_ancestors(b"a/b/c")) == [b"a", b"a/b"]
    assert list(file_ancestors(b"a/b/")) == [b"a", b"a/b"]  # a directory marker
    assert list(file_ancestors(b"a//b")) == [b"a"]  # "a/" names no file
    assert list(file_ancestors(b"top")) == [] and list(file_ancestors(b"/x")) == []
    assert file_above(b"a/b/c", {b"a/b"}.__contains__) == b"a/b"
    assert file_above(b"a/b/c", set().__contains__) is None


def test_meeting_pairs_a_key_of_theirs_with_one_ours_sets():
    i = b"\x01" * 32
    assert meeting([b"a"], {b"a/c": i, b"b": i}) == {b"a": b"a/c"}
    assert meeting([b"x/y/z"], {b"x/y": i}) == {b"x/y": b"x/y/z"}
    assert meeting([b"d/"], {b"d": i}) == {b"d": b"d/"}  # a marker of the directory "d"
    assert meeting([b"a"], {b"a/c": None, b"a/d": i}) == {b"a": b"a/d"}  # deletions set none
    assert meeting([b"x/y"], {b"x": None}) == {}
    assert meeting([b"c"], {b"a": i, b"a/b": i}) == {}  # ours alone is no candidate
    assert meeting([b"a"], {b"ab": i, b"a-b": i, b"a.b/c": i}) == {}  # near "a/", not under
    assert meeting([], {b"a/b": i}) == {} and meeting([b"a"], {}) == {}


def test_trees_and_changes_over_them(tmp_path):
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())
    for k in ("d/e", "d/g", "f"):
        repo.write_file("main", k, b"1")
    repo.commit("main", "base")
    tree = InTree(repo.committed, head_metarange(repo, "main"))
    assert tree.has(b"f") and not tree.has(b"d") and tree.any_under(b"d")
    assert not tree.any_under(b"f") and not tree.any_under(b"zz")
    ident = b"\x01" * 32
    assert not WithChanges({b"d/e": None, b"d/g": None}, tree).any_under(b"d")
    assert WithChanges({b"d/e": None}, tree).any_under(b"d")  # d/g stays
    assert WithChanges({b"f/new": ident}, tree).any_under(b"f")
    assert not WithChanges({b"f/gone": None}, tree).any_under(b"f")
    over = WithChanges({b"f": None, b"n": ident}, tree)
    assert not over.has(b"f") and over.has(b"n") and over.has(b"d/e")
    # a pair is a conflict unless the result lacks a half or a side held both
    result = WithChanges({b"f/x": ident}, tree)
    assert new_collisions({b"f": b"f/x"}, result, tree) == [b"f"]
    assert new_collisions({b"f": b"f/x"}, result, tree, result) == []
    assert new_collisions({b"f": b"f/y"}, result, tree) == []
    repo.close()
