"""gravfs.version.history: which commits changed a path (``gravfs log REF -- PATH``)."""

from __future__ import annotations

import io

from gravfs.fs.repository import Repository
from gravfs.version.history import change_kind, path_changes
from tests.repo_util import small_settings


def test_change_kind_follows_git_log_path():
    """A commit changed a path when its entry there differs from every parent's."""
    assert change_kind(b"a", []) == "added" and change_kind(None, []) is None
    assert change_kind(b"b", [b"a"]) == "modified" and change_kind(b"a", [b"a"]) is None
    assert change_kind(None, [b"a"]) == "removed" and change_kind(b"a", [None]) == "added"
    assert change_kind(b"b", [b"a", b"b"]) is None  # a merge that took one side's version
    assert change_kind(b"c", [b"a", b"b"]) == "modified"
    assert change_kind(b"c", [None, None]) == "added"


def test_path_history_of_a_merged_history(tmp_path):
    """The commits that changed a/x, newest first: the one that made dev's version, not
    the merge that took it, nor commits that changed other paths; each commit's tree is
    looked up once, and -n stops the walk."""
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())

    def put(branch: str, path: str, body: bytes, message: str):
        repo.write_file(branch, path, io.BytesIO(body))
        return repo.commit(branch, message)

    c1 = put("main", "a/x", b"one", "add x")
    repo.create_branch("dev", "main")
    c2 = put("dev", "a/x", b"two", "change x on dev")
    put("main", "a/y", b"y", "add y")
    merged = repo.merge("dev", "main")
    c4 = put("main", "a/x", b"one", "x back to its first content")
    repo.remove("main", "a/x")
    c5 = repo.commit("main", "remove x")
    put("main", "b/z", b"z", "other path")
    looked = []
    got = [(c.id, kind) for c, kind in repo.path_history("main", b"a/x",
                                                          seen=lambda: looked.append(1))]
    assert got == [(c5.id, "removed"), (c4.id, "modified"), (c2.id, "modified"),
                   (c1.id, "added")]
    assert merged.id not in {cid for cid, _ in got}
    assert len(looked) == len(list(repo.log("main")))  # one lookup a commit
    assert [c.id for c, _ in repo.path_history("main", b"a/x", limit=2)] == [c5.id, c4.id]
    assert list(repo.path_history("main", b"a/x", limit=0)) == []  # as gravfs log -n 0
    assert list(repo.path_history("main", b"a/nothing")) == []
    assert [(c.id, k) for c, k in repo.path_history("dev", b"a/x")] == [
        (c2.id, "modified"), (c1.id, "added")]
    repo.close()


def test_path_changes_asks_each_commit_once(tmp_path):
    """identity() is asked once a commit, parents shared by several children included."""
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())
    repo.write_file("main", "f", io.BytesIO(b"1"))
    repo.commit("main", "f")
    repo.create_branch("dev", "main")
    for branch in ("main", "dev"):
        repo.write_file(branch, f"only-{branch}", io.BytesIO(b"x"))
        repo.commit(branch, branch)
    repo.merge("dev", "main")
    asked: list[str] = []

    def identity(c):
        asked.append(c.id)
        return repo.entry_identity(b"f")(c)

    start = repo.resolve("main").commit.id
    assert [k for _, k in path_changes(repo.commits, start, identity)] == ["added"]
    assert sorted(asked) == sorted(c.id for c in repo.log("main"))
    repo.close()


def test_a_walk_with_damaged_commits_goes_on_along_the_other_lines(tmp_path):
    """The mount's commits/ listing failed with EIO for every commit when one old commit
    object of one branch was damaged."""
    import pytest

    from gravfs.errors import CorruptDataError
    from gravfs.version.history import walk
    from gravfs.version.refs.commits import COMMITS_PREFIX, CommitStore
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())
    for n in range(3):
        repo.write_file("main", f"f{n}", io.BytesIO(b"x"))
        repo.commit("main", f"c{n}")
    repo.create_branch("other")
    repo.write_file("other", "o", io.BytesIO(b"o"))
    other = repo.commit("other", "o").id
    main = [c.id for c in repo.log("main")]  # c2 c1 c0 and the root
    repo.store.put(COMMITS_PREFIX + main[1], b"damaged")
    commits = CommitStore(repo.store)  # (repo.commits keeps what it read)
    with pytest.raises(CorruptDataError, match="does not hash to its id"):
        list(walk(commits, [main[0], other]))
    damaged: list[str] = []
    assert [c.id for c in walk(commits, [main[0], other], None, damaged)] == [other, main[0]]
    assert len(damaged) == 1 and main[1] in damaged[0]
    damaged.clear()  # a damaged start: the other start's line is walked whole
    assert [c.id for c in walk(commits, [main[1], main[2]], None, damaged)] == main[2:]
    assert len(damaged) == 1


def test_dir_history_lists_the_commits_that_changed_anything_under_it(tmp_path):
    """log -- DIR listed nothing (it looked the directory up as one file)."""
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())

    def put(branch: str, path: str, message: str):
        repo.write_file(branch, path, io.BytesIO(message.encode()))
        return repo.commit(branch, message).id
    added = put("main", "d/a", "d/a")
    put("main", "dx/other", "beside d, not under it")
    deeper = put("main", "d/sub/b", "d/sub/b")
    repo.create_branch("dev")
    on_dev = put("dev", "d/a", "dev changes d/a")
    put("main", "e", "elsewhere")
    repo.merge("dev", "main")  # takes dev's d: differs from main's, not from dev's
    repo.remove("main", "d/a")
    repo.remove("main", "d/sub/b")
    gone = repo.commit("main", "d emptied").id
    got = [(c.id, kind) for c, kind in repo.dir_history("main", b"d")]
    assert got == [(gone, "removed"), (on_dev, "modified"), (deeper, "modified"),
                   (added, "added")]
    assert [c.id for c, _ in repo.dir_history("main", b"d/sub")] == [gone, deeper]
    assert [c.id for c, _ in repo.dir_history("main", b"d", limit=2)] == [gone, on_dev]
