"""Repository API on the local store: refs, staging reads, commits, diff, merge, reset."""

import copy
import errno
import io
import os
import pickle
import re
import time

import pytest

from gravfs.version.committer import Committer, NothingToCommitError, StagedContentGoneError
from gravfs.errors import (AlreadyExistsError, AmbiguousRefError, BadNameError, ConflictError,
                           GravfsError, NotFoundError, PathTypeError, ReadOnlyError)
from gravfs.fs.entry import EntryInfo, encode_entry
from gravfs.fs.repository import Repository, node_from_item
from gravfs.version.compaction import compact
from tests.repo_util import repo, small_settings, store_target  # noqa: F401  (fixtures)


def names(nodes):
    return [n.name + ("/" if n.kind == "dir" else "") for n in nodes]


def test_init_creates_main_with_root_commit(repo, store_target, tmp_path):
    (name, cid), = repo.list_branches()
    assert name == "main"
    c = repo.commits.get(cid)
    assert c.parents == () and c.generation == 0
    with pytest.raises(AlreadyExistsError):
        Repository.init(store_target, str(tmp_path / "state2"))
    with pytest.raises(NotFoundError, match="no gravfs repository"):
        Repository.open(str(tmp_path / "nothing"), str(tmp_path / "state3"))


def test_init_refuses_a_store_that_holds_other_things(store_target, tmp_path):
    """A directory or prefix holding anything but a repository: before, init made a
    repository among the files, and garbage collection would have deleted those it found
    under data/<xx>/ (objects no commit references)."""
    from gravfs.store import open_store
    from gravfs.version.config import REPO_JSON

    store = open_store(store_target) if isinstance(store_target, str) else store_target
    store.put("data/ab/their-file.csv", b"1,2\n")
    with pytest.raises(GravfsError, match=r"is not empty \(it holds data/ab/their-file.csv\): "
                                          "a repository needs a directory or S3 prefix of its own"):
        Repository.init(store_target, str(tmp_path / "state"))
    assert not store.exists(REPO_JSON) and store.get("data/ab/their-file.csv") == b"1,2\n"


def test_staged_reads_then_commit(repo):
    repo.write_file("main", "a/b.txt", b"hello")
    repo.write_file("main", "a/c.txt", b"world")
    repo.mkdir("main", "empty")
    assert repo.read("main", "a/b.txt") == b"hello"
    assert names(repo.list_dir("main")) == ["a/", "empty/"]
    assert names(repo.list_dir("main", "a")) == ["b.txt", "c.txt"]
    assert [(k, p) for k, p in repo.status("main")] == [
        ("added", b"a/b.txt"), ("added", b"a/c.txt"), ("added", b"empty/")]
    c = repo.commit("main", "first")
    assert repo.status("main") == []
    assert repo.resolve(c.id[:8]).commit.id == c.id
    assert repo.read(c.id, "a/c.txt") == b"world"
    assert names(repo.list_dir(c.id)) == ["a/", "empty/"]  # empty dir survives the commit
    with pytest.raises(NothingToCommitError):
        repo.commit("main", "again")


def test_commits_and_tags_are_read_only(repo):
    repo.write_file("main", "f", b"1")
    c = repo.commit("main", "one")
    repo.create_tag("v1", "main")
    for ref in (c.id, "v1"):
        with pytest.raises(ReadOnlyError):
            repo.write_file(ref, "g", b"2")
    with pytest.raises(AlreadyExistsError):
        repo.create_tag("v1", "main")
    assert repo.resolve("v1").commit.id == c.id


def test_ref_syntax_tilde_and_prefix(repo):
    ids = []
    for i in range(3):
        repo.write_file("main", "f", str(i).encode())
        ids.append(repo.commit("main", f"c{i}").id)
    assert repo.resolve("main~1").commit.id == ids[1]
    assert repo.resolve("main~2").commit.id == ids[0]
    assert repo.resolve("main~~").commit.id == ids[0]
    assert repo.resolve(ids[2][:6]).commit.id == ids[2]
    with pytest.raises(NotFoundError):
        repo.resolve("main~10")
    with pytest.raises(NotFoundError):
        repo.resolve("nosuchbranch")
    log = [c.message for c in repo.log("main")]
    assert log == ["c2", "c1", "c0", "Repository created"]
    assert [c.message for c in repo.log("main", 2)] == ["c2", "c1"]


def test_tilde_past_the_root_counts_first_parents(repo):
    for i in range(21):
        repo.write_file("main", "f", str(i).encode())
        repo.commit("main", f"c{i}")
    assert repo.resolve("main~21").commit.parents == ()
    with pytest.raises(NotFoundError) as exc:
        repo.resolve("main~25")
    assert str(exc.value) == "main~25: history of main has only 22 commits"
    with pytest.raises(NotFoundError, match=r"^main~3~~20: history of main has only 22 commits$"):
        repo.resolve("main~3~~20")  # 3 + 1 + 20 = 24 steps
    # a merge: generation counts the longer side, ~N only the first parents
    repo.create_branch("side", "main~20")
    for i in range(5):
        repo.write_file("side", f"s{i}", b"s")
        repo.commit("side", f"s{i}")
    repo.create_branch("short", "main~21")
    repo.write_file("short", "x", b"x")
    repo.commit("short", "x")
    repo.merge("side", "short")
    assert repo.resolve("short").commit.generation == 7
    with pytest.raises(NotFoundError, match=r"^short~3: history of short has only 3 commits$"):
        repo.resolve("short~3")
    # git's ^: ^ and ^1 the first parent, ^2 the merged side, ^0 the commit itself
    merge = repo.resolve("short").commit
    assert repo.resolve("short^").commit.id == repo.resolve("short^1").commit.id \
        == repo.resolve("short~1").commit.id == merge.parents[0]
    assert repo.resolve("short^2").commit.id == merge.parents[1] == repo.head("side")
    assert repo.resolve("short^0").commit.id == merge.id
    assert repo.resolve("short^2~5").commit.id == repo.resolve("main~20").commit.id
    assert repo.resolve("short^^").commit.id == repo.resolve("main~21").commit.id
    with pytest.raises(NotFoundError, match=r"^short\^3: commit [0-9a-f]{12} has 2 "
                                            r"parent\(s\), not 3$"):
        repo.resolve("short^3")
    with pytest.raises(NotFoundError, match=r"^short\^2~9: commit [0-9a-f]{12} has no parent$"):
        repo.resolve("short^2~9")


def test_ambiguous_prefix_is_reported(repo):
    # two objects whose ids share the prefix "abcdef"
    for tail in ("01", "02"):
        repo.store.put("_gravfs/commits/abcdef" + tail + "0" * 56, b"{}")
    with pytest.raises(AmbiguousRefError, match="ambiguous"):
        repo.resolve("abcdef")
    with pytest.raises(NotFoundError):
        repo.resolve("abc")  # too short to be taken as a prefix


@pytest.mark.parametrize("bad", ["", "a/b", "-x", ".hidden", "a..b", "x.lock", "sp ace", "t~1",
                                 "a:b", "q?", "@", "HEAD", "x" * 256,
                                 # invalid UTF-8 (it made the branch, then failed), a bidi
                                 # override, a line separator, NEL
                                 "bad\udcff", "ma\u202ein", "x\u2028y", "z\x85w"])
def test_bad_branch_names_are_refused(repo, bad):
    with pytest.raises(BadNameError):
        repo.create_branch(bad)


def test_a_whole_commit_id_is_no_ref_name_and_always_names_its_commit(repo):
    """Refs are looked up before ids, so a tag named like commit A's id but pointing
    at B stood in for A: ``gravfs ls A`` showed B's files."""
    repo.write_file("main", "a", b"1")
    first = repo.commit("main", "one")
    repo.write_file("main", "a", b"2")
    second = repo.commit("main", "two")
    with pytest.raises(BadNameError, match="whole commit id"):
        repo.create_branch(first.id)
    with pytest.raises(BadNameError, match="whole commit id"):
        repo.create_tag(first.id, "main")
    # such a tag made by an older gravfs: the id still names its commit
    repo.store.put("_gravfs/refs/tags/" + first.id, (second.id + "\n").encode())
    assert repo.resolve(first.id).commit.id == first.id
    assert repo.read(first.id, "a") == b"1"
    repo.delete_tag(first.id)  # and the tag can be deleted
    # hex-looking names shorter than an id stay names, found before id prefixes
    repo.create_branch("decade", first.id)
    assert repo.resolve("decade").commit.id == first.id
    assert repo.resolve(second.id[:12]).commit.id == second.id


def test_branch_isolation_and_delete(repo):
    repo.write_file("main", "shared", b"base")
    repo.commit("main", "base")
    repo.create_branch("dev")
    repo.write_file("dev", "only-dev", b"x")
    assert names(repo.list_dir("main")) == ["shared"]
    assert names(repo.list_dir("dev")) == ["only-dev", "shared"]
    with pytest.raises(AlreadyExistsError):
        repo.create_branch("dev")
    # uncommitted changes would be lost with the branch: refused unless forced
    with pytest.raises(GravfsError, match="'dev' has uncommitted changes on this host"):
        repo.delete_branch("dev")
    assert repo.branch_exists("dev") and repo.read("dev", "only-dev") == b"x"
    repo.delete_branch("dev", force=True)
    assert not repo.branch_exists("dev")
    with pytest.raises(NotFoundError):
        repo.write_file("dev", "x", b"1")
    # recreating the branch does not resurrect its old staging
    repo.create_branch("dev")
    assert names(repo.list_dir("dev")) == ["shared"]
    with pytest.raises(GravfsError):
        repo.delete_branch("main")


def test_a_branch_whose_staging_leaves_its_head_as_it_is_is_deleted_without_force(repo):
    """What status lists is what deleting a branch would lose: a file written and
    removed again is no change."""
    repo.write_file("main", "kept", b"same")
    repo.commit("main", "base")
    repo.create_branch("dev")
    repo.write_file("dev", "tmp", b"gone again")
    repo.remove("dev", "tmp")
    assert repo.status("dev") == []
    repo.delete_branch("dev")
    assert not repo.branch_exists("dev")


def test_a_branch_made_again_saves_what_this_host_staged_on_the_one_another_host_deleted(
        repo, store_target, tmp_path, caplog):
    """Another host cannot see this host's staging when it deletes a branch; making the
    branch again here dropped what was staged on the old one without a word."""
    repo.write_file("main", "kept", b"committed")
    repo.write_file("main", "gone", b"committed")
    repo.commit("main", "base")
    repo.create_branch("dev")
    repo.write_file("dev", "d/new.csv", b"uncommitted work")
    repo.write_file("dev", "kept", b"rewritten")
    repo.remove("dev", "gone")
    repo.mkdir("dev", "empty")
    other = Repository.open(store_target, str(tmp_path / "other-host"))
    other.delete_branch("dev")  # nothing staged there: not refused
    other.close()
    for look in (lambda: repo.status("dev"), lambda: repo.commit("dev", "x")):
        with pytest.raises(NotFoundError, match=r"branch 'dev' not found \(deleted, perhaps on "
                           r"another host\); this host still holds uncommitted changes"):
            look()
    with caplog.at_level("WARNING"):
        repo.create_branch("dev")
    lost = os.path.join(repo.workspace.sub("lost+found"), "dev")
    with open(os.path.join(lost, "d", "new.csv"), "rb") as f:
        assert f.read() == b"uncommitted work"
    with open(os.path.join(lost, "kept"), "rb") as f:
        assert f.read() == b"rewritten"
    assert sorted(os.listdir(lost)) == ["d", "kept"]  # the directory is not a file
    assert repo.status("dev") == [] and repo.read("dev", "kept") == b"committed"
    assert "branch dev was deleted on another host while this host had 4 uncommitted " \
        "change(s) staged on it; 2 file(s) of them are saved in" in caplog.text

    # made again once more: a name taken in lost+found gets .1
    repo.write_file("dev", "kept", b"second")
    other = Repository.open(store_target, str(tmp_path / "other-host"))
    other.delete_branch("dev")
    other.close()
    repo.create_branch("dev")
    with open(os.path.join(lost, "kept.1"), "rb") as f:
        assert f.read() == b"second"


def test_a_write_staged_while_a_deleted_branch_s_files_are_saved_is_not_dropped(
        repo, store_target, tmp_path, monkeypatch, caplog):
    """Found by hand (two workspaces, a mount writing while the other deleted and
    made the branch again): closes staged into the branch made again while the old
    staging's files were being saved were dropped with it, saved nowhere."""
    repo.create_branch("dev")
    repo.write_file("dev", "old", b"staged before the deletion")
    other = Repository.open(store_target, str(tmp_path / "other-host"))
    other.delete_branch("dev")
    saving = Repository.save_staged

    def remade_meanwhile(self, name):
        n = saving(self, name)
        if self is not repo:
            return n
        other.create_branch("dev")
        self.forget_head("dev")
        self.write_file("dev", "new", b"closed while the old files were saved")
        return n

    monkeypatch.setattr(Repository, "save_staged", remade_meanwhile)
    with caplog.at_level("WARNING"):
        assert repo.drop_deleted_branch("dev") is False
    other.close()
    lost = os.path.join(repo.workspace.sub("lost+found"), "dev")
    assert os.listdir(lost) == ["old"]
    assert repo.read("dev", "new") == b"closed while the old files were saved"
    assert "written again while what this host had staged on it was saved" in caplog.text


def test_staged_changes_that_cannot_be_saved_stay_on_the_branch_made_again(
        repo, store_target, tmp_path):
    repo.create_branch("dev")
    repo.write_file("dev", "work", b"uncommitted")
    other = Repository.open(store_target, str(tmp_path / "other-host"))
    other.delete_branch("dev")
    other.close()
    with open(os.path.join(repo.workspace.sub("lost+found"), "dev"), "wb"):
        pass  # a file where its directory would go
    with pytest.raises(GravfsError, match=r"branch 'dev' was made, but the changes this host "
                       r"had staged .* could not be saved in lost\+found"):
        repo.create_branch("dev")
    assert repo.branch_exists("dev")
    assert repo.read("dev", "work") == b"uncommitted"  # nothing dropped
    assert [k for _, k in repo.status("dev")] == [b"work"]


def test_remove_rename_and_placement(repo):
    repo.write_file("main", "d/x", b"1")
    repo.write_file("main", "d/sub/y", b"2")
    repo.commit("main", "c")
    with pytest.raises(PathTypeError) as ei:
        repo.remove("main", "d")
    assert ei.value.errno == errno.ENOTEMPTY
    with pytest.raises(PathTypeError) as ei:
        repo.write_file("main", "d", b"file over dir")
    assert ei.value.errno == errno.EISDIR
    with pytest.raises(PathTypeError) as ei:
        repo.write_file("main", "d/x/under-a-file", b"no")
    assert ei.value.errno == errno.ENOTDIR
    repo.rename("main", "d", "e")
    assert names(repo.list_dir("main")) == ["e/"]
    assert repo.read("main", "e/sub/y") == b"2"
    with pytest.raises(NotFoundError):
        repo.stat("main", "d/x")
    with pytest.raises(BadNameError):
        repo.rename("main", "e", "e/inside")
    repo.remove("main", "e", recursive=True)
    assert repo.list_dir("main") == []
    repo.commit("main", "gone")
    assert repo.list_dir("main") == []


def test_bad_paths(repo):
    for p in ["a/../b", "./x", "n" * 256, "a\x00b"]:
        with pytest.raises(BadNameError):
            repo.write_file("main", p, b"1")


def test_diff_and_merge(repo):
    for i in range(50):
        repo.write_file("main", f"f{i:03d}", str(i).encode())
    repo.commit("main", "base")
    repo.create_branch("dev")
    repo.write_file("dev", "f010", b"dev")
    repo.remove("dev", "f020")
    repo.write_file("dev", "new", b"n")
    d = repo.commit("dev", "dev work")
    diffs = [(x.kind, x.key) for x in repo.diff("main", "dev")]
    assert diffs == [("changed", b"f010"), ("removed", b"f020"), ("added", b"new")]
    repo.write_file("main", "f030", b"main")
    repo.commit("main", "main work")
    m = repo.merge("dev", "main")
    assert set(m.parents) == {d.id, repo.resolve("main~1").commit.id}
    assert repo.read("main", "f010") == b"dev" and repo.read("main", "f030") == b"main"
    with pytest.raises(NotFoundError):
        repo.stat("main", "f020")
    with pytest.raises(GravfsError, match="already merged"):
        repo.merge("dev", "main")


def test_merge_conflicts_and_strategies(repo):
    _committed(repo, "main", "x", b"base", "base")
    repo.create_branch("dev")
    _committed(repo, "dev", "x", b"dev", "d")
    _committed(repo, "main", "x", b"main", "m")
    with pytest.raises(ConflictError) as ei:
        repo.merge("dev", "main")
    assert ei.value.keys == [b"x"]
    head = repo.head("main")
    repo.merge("dev", "main", strategy="dest-wins")
    assert repo.read("main", "x") == b"main"
    repo.create_branch("dev2", head)
    repo.merge("dev", "dev2", strategy="source-wins")
    assert repo.read("dev2", "x") == b"dev"


@pytest.mark.parametrize("spread", [False, True])  # one process / slices on workers
def test_the_same_bytes_written_on_both_sides_merge_without_conflict(repo, spread, request):
    """Both branches wrote one content at a path (their entries differ by their times
    only): no conflict, as in git; the destination keeps its entry. Other bytes, or the
    same bytes with another mode, are a conflict."""
    if spread:
        if str(getattr(repo.store, "url", "")).startswith("s3://"):
            request.getfixturevalue("s3_environ")  # the workers open the store themselves
        repo.committed.workers = 2
        repo.committed.parallel_min_records = repo.committed.parallel_min_ranges = 1
        repo.committed.slices = 4
    _committed(repo, "main", "x", b"base", "base")
    repo.create_branch("dev")
    for path, dev, main in (("x", b"same", b"same"), ("new", b"both", b"both"),
                            ("moded", b"m", b"m"), ("other", b"dev's", b"main's")):
        repo.write_file("dev", path, dev, mode=0o600 if path == "moded" else 0o644)
        repo.write_file("main", path, main)
    repo.commit("dev", "dev")
    repo.commit("main", "main")
    mine = {p: repo.stat("main", p).entry for p in ("x", "new")}
    with pytest.raises(ConflictError) as ei:
        repo.merge("dev", "main")
    assert ei.value.keys == [b"moded", b"other"]
    for p in ("moded", "other"):
        repo.remove("dev", p)
    repo.commit("dev", "drop what conflicts")
    repo.merge("dev", "main")
    assert {p: repo.stat("main", p).entry for p in ("x", "new")} == mine
    assert repo.read("main", "x") == b"same" and repo.read("main", "other") == b"main's"


@pytest.mark.parametrize("strategy", ["fail", "source-wins", "dest-wins"])
def test_merge_that_would_make_a_file_a_directory_is_a_conflict(repo, strategy):
    """A file "a" on one side and "a/c" on the other: each was fine alone, but the
    mount could show only one of them (git calls it a file/directory conflict)."""
    repo.write_file("main", "a/b", b"1")
    repo.commit("main", "base")
    repo.create_branch("x")
    repo.remove("main", "a/b")
    repo.write_file("main", "a", b"a file now")
    repo.commit("main", "a is a file")
    repo.write_file("x", "a/c", b"2")
    repo.commit("x", "a/c")
    head = repo.head("main")
    for src, dst in (("x", "main"), ("main", "x")):
        with pytest.raises(ConflictError, match=r"both a file and a directory: a \(and a/c\)") \
                as ei:
            repo.merge(src, dst, strategy=strategy)
        assert ei.value.keys == [b"a"]
    assert repo.head("main") == head
    # made the same on both sides first, the merge goes through
    repo.remove("x", "a/c")
    repo.write_file("x", "a2/c", b"2")
    repo.commit("x", "moved")
    repo.merge("x", "main", strategy=strategy)
    assert repo.read("main", "a") == b"a file now" and repo.read("main", "a2/c") == b"2"


def test_merge_keeps_a_layout_one_side_already_holds(repo):
    """Keys "d" and "d/e" as an object store held them, on the source: the other side's
    "d/f" merges in beside them (the layout at "d" is the source's already)."""
    repo.create_branch("lake")
    repo.write_file("lake", "d/e", b"e")
    other = repo.write_file("lake", "other", b"o")
    repo.stage("lake", [(b"d", other)])  # stage() does not check placement (as imports)
    repo.commit("lake", "d beside d/e")
    repo.write_file("main", "d/f", b"f")
    repo.commit("main", "d/f")
    repo.merge("lake", "main")
    assert [repo.read("main", p) for p in ("d", "d/e", "d/f")] == [b"o", b"e", b"f"]


def test_revert_that_would_make_a_file_a_directory_is_a_conflict(repo):
    repo.write_file("main", "a", b"1")
    repo.commit("main", "a")
    repo.remove("main", "a")
    gone = repo.commit("main", "rm a")
    repo.write_file("main", "a/x", b"2")
    repo.commit("main", "a/x")
    head = repo.head("main")
    with pytest.raises(ConflictError, match=r"reverting .* both a file and a directory: "
                       r"a \(and a/x\)"):
        repo.revert("main", gone.id)
    assert repo.head("main") == head


def test_merge_refuses_dirty_destination(repo):
    repo.create_branch("dev")
    repo.write_file("dev", "a", b"1")
    repo.commit("dev", "a")
    repo.write_file("main", "dirty", b"1")
    with pytest.raises(GravfsError, match="uncommitted"):
        repo.merge("dev", "main")


def test_revert(repo):
    repo.write_file("main", "a", b"1")
    repo.commit("main", "a1")
    repo.write_file("main", "a", b"2")
    repo.write_file("main", "b", b"new")
    c = repo.commit("main", "a2")
    repo.revert("main", c.id)
    assert repo.read("main", "a") == b"1"
    with pytest.raises(NotFoundError):
        repo.stat("main", "b")


def test_revert_of_a_merge_needs_its_parent_named(repo):
    """A merge commit's revert went against its first parent without a word; git (-m)
    and lakeFS (parent number) ask which."""
    _committed(repo, "main", "base", b"b", "base")
    repo.create_branch("dev")
    _committed(repo, "dev", "from-dev", b"d", "dev's file")
    _committed(repo, "main", "from-main", b"m", "main's file")
    merge = repo.merge("dev", "main")
    head = repo.head("main")
    with pytest.raises(GravfsError, match=r"is a merge commit \(parents 1 [0-9a-f]{12}, 2 "
                       r"[0-9a-f]{12}\): say which parent's line to revert against with --parent N"):
        repo.revert("main", merge.id)
    with pytest.raises(GravfsError, match="against parent 3: it has 2 parents"):
        repo.revert("main", merge.id, parent=3)
    assert repo.head("main") == head
    repo.revert("main", merge.id, parent=2)  # against dev's line: main's side is undone
    assert repo.read("main", "from-dev") == b"d"
    with pytest.raises(NotFoundError):
        repo.stat("main", "from-main")
    repo.revert("main", "main~1", parent=1)  # the merge again, against main's line
    for gone in ("from-dev", "from-main"):  # dev's side undone now, main's before
        with pytest.raises(NotFoundError):
            repo.stat("main", gone)
    assert repo.read("main", "base") == b"b"
    with pytest.raises(GravfsError, match="against parent 2: it has 1 parent$"):
        repo.revert("main", "main", parent=2)
    repo.write_file("main", "dirty", b"x")
    with pytest.raises(GravfsError, match="commit or reset them before reverting"):
        repo.revert("main", "main", parent=1)


def test_cherry_pick_takes_one_commits_change(repo):
    _committed(repo, "main", "base", b"b", "base")
    repo.create_branch("dev")
    _committed(repo, "dev", "one", b"1", "one")
    repo.write_file("dev", "base", b"changed on dev")
    repo.remove("dev", "one")
    wanted = repo.commit("dev", "the fix")
    _committed(repo, "main", "mine", b"m", "mine")
    c = repo.cherry_pick("main", wanted.id)  # that commit's change only, not "one"'s
    assert repo.read("main", "base") == b"changed on dev" and repo.read("main", "mine") == b"m"
    with pytest.raises(NotFoundError):
        repo.stat("main", "one")
    assert c.message == f"the fix\n\n(cherry picked from commit {wanted.id})"
    assert c.metadata == {"cherry-picked": wanted.id} and c.parents[0] != wanted.id
    with pytest.raises(GravfsError, match=r"nothing to commit: cherry-picking [0-9a-f]{12} "
                       r"leaves 'main' as it is"):
        repo.cherry_pick("main", wanted.id)  # its change is there already
    root = list(repo.log("main"))[-1].id
    with pytest.raises(GravfsError, match="cannot cherry-pick [0-9a-f]{12}: it has no parent"):
        repo.cherry_pick("main", root)
    _committed(repo, "dev", "base", b"dev again", "dev again")
    _committed(repo, "main", "base", b"main's own", "main's own")
    head = repo.head("main")
    with pytest.raises(ConflictError):
        repo.cherry_pick("main", "dev")
    assert repo.head("main") == head


def test_reset_all_and_path(repo):
    repo.write_file("main", "keep/a", b"1")
    repo.commit("main", "c")
    repo.write_file("main", "keep/a", b"changed")
    repo.write_file("main", "drop/b", b"2")
    repo.write_file("main", "drop/c", b"3")
    repo.reset("main", "drop")
    assert names(repo.list_dir("main")) == ["keep/"]
    assert repo.read("main", "keep/a") == b"changed"
    repo.reset("main")
    assert repo.read("main", "keep/a") == b"1"
    assert repo.status("main") == []


def test_reset_that_would_bring_a_path_back_under_a_staged_file_is_refused(repo):
    """a/b committed, then removed and "a" staged as a file: resetting a/b alone would
    make "a" both; refused with nothing dropped. Resetting "a" takes both back."""
    repo.write_file("main", "a/b", b"1")
    repo.commit("main", "c")
    repo.remove("main", "a/b")
    repo.write_file("main", "a", b"a file")
    with pytest.raises(PathTypeError, match="resetting a/b would bring it back under the "
                                            "file a staged since") as ei:
        repo.reset("main", "a/b")
    assert ei.value.errno == errno.ENOTDIR
    assert repo.status("main") == [("added", b"a"), ("removed", b"a/b")]
    repo.write_file("main", "c/d", b"new")  # a reset that brings nothing back is taken
    repo.reset("main", "c/d")
    assert repo.reset("main", "a") == 2
    assert repo.read("main", "a/b") == b"1" and repo.status("main") == []


def test_writes_during_commit_go_to_the_next_commit(repo, monkeypatch):
    repo.write_file("main", "before", b"1")
    real_apply = repo.committed.apply

    def apply_and_write(*a, **kw):
        # a write that lands while the commit is building its metarange
        repo.write_file("main", "during", b"2")
        return real_apply(*a, **kw)

    monkeypatch.setattr(repo.committed, "apply", apply_and_write)
    c = repo.commit("main", "c1")
    monkeypatch.setattr(repo.committed, "apply", real_apply)
    assert [n.name for n in repo.list_dir(c.id)] == ["before"]
    assert repo.read("main", "during") == b"2"
    assert repo.status("main") == [("added", b"during")]
    c2 = repo.commit("main", "c2")
    assert names(repo.list_dir(c2.id)) == ["before", "during"]


def test_two_workspaces_rebase_or_conflict(store_target, tmp_path):
    store = store_target
    a = Repository.init(store, str(tmp_path / "ws-a"), settings=small_settings())
    a.write_file("main", "common", b"0")
    a.commit("main", "base")
    b = Repository.open(store, str(tmp_path / "ws-b"))
    a.write_file("main", "from-a", b"a")
    b.write_file("main", "from-b", b"b")
    ca = a.commit("main", "a")
    cb = b.commit("main", "b")  # head moved, disjoint paths: rebased
    assert cb.parents == (ca.id,)
    assert names(b.list_dir("main")) == ["common", "from-a", "from-b"]
    # same path on both sides: conflict, staging kept
    a.write_file("main", "common", b"A")
    b.write_file("main", "common", b"B")
    a.commit("main", "a2")
    with pytest.raises(ConflictError) as ei:
        b.commit("main", "b2")
    assert ei.value.keys == [b"common"]
    assert b.read("main", "common") == b"B"
    assert b.status("main") == [("changed", b"common")]
    b.reset("main")
    assert b.read("main", "common") == b"A"
    # a file on one side where the other put a path under it: a conflict, staging kept
    a.write_file("main", "q", b"file")
    b.write_file("main", "q/r", b"under")
    head = a.commit("main", "q").id
    with pytest.raises(ConflictError, match=r"both a file and a directory: q \(and q/r\); "
                       "your changes are still staged") as ei:
        b.commit("main", "q/r")
    assert ei.value.keys == [b"q"]
    assert b.head("main", fresh=True) == head
    assert b.status("main") == [("added", b"q/r")]


@pytest.mark.parametrize("strategy", ["staged-wins", "head-wins"])
def test_a_commit_strategy_settles_what_two_workspaces_both_changed(store_target, tmp_path,
                                                                    strategy):
    """After a conflict there was no way to commit one's own version of a path the
    other workspace changed: a re-staged path conflicted again (the staging's base
    stays where it began). The strategy chooses per path, as merge's do; a path both
    sides set alike, and paths only one side changed, are kept either way."""
    store = store_target
    a = Repository.init(store, str(tmp_path / "ws-a"), settings=small_settings())
    for name in ("p", "q", "r", "same"):
        a.write_file("main", name, b"0")
    a.commit("main", "base")
    b = Repository.open(store, str(tmp_path / "ws-b"))
    a.write_file("main", "p", b"A")
    a.remove("main", "q")
    a.write_file("main", "same", b"S")
    a.write_file("main", "from-a", b"a")
    b.write_file("main", "p", b"B")
    b.write_file("main", "q", b"B")
    b.write_file("main", "same", b"S")
    b.write_file("main", "from-b", b"b")
    a.commit("main", "a")
    with pytest.raises(ConflictError, match="'gravfs commit main --strategy staged-wins'") as ei:
        b.commit("main", "b")
    assert ei.value.keys == [b"p", b"q"]
    b.write_file("main", "p", b"B2")  # re-staged after seeing the conflict: still one
    with pytest.raises(ConflictError):
        b.commit("main", "b")
    with pytest.raises(GravfsError, match="unknown commit strategy 'ours'"):
        b.commit("main", "b", strategy="ours")
    assert b.status("main") == [("added", b"from-b"), ("changed", b"p"), ("added", b"q"),
                                ("changed", b"same")]  # its times
    c = b.commit("main", "b", strategy=strategy)
    want = ({"p": b"B2", "q": b"B"} if strategy == "staged-wins" else {"p": b"A"})
    assert names(b.list_dir(c.id)) == sorted(["from-a", "from-b", "r", "same", *want])
    for name, data in {**want, "same": b"S", "r": b"0", "from-a": b"a", "from-b": b"b"}.items():
        assert b.read(c.id, name) == data, name
    assert b.status("main") == []  # head-wins: the left-out changes are dropped
    assert b.read("main", "p") == want["p"]


def test_compaction_keeps_view_and_commits(repo):
    for i in range(300):
        repo.write_file("main", f"d/{i:04d}", b"x%d" % i)
    repo.commit("main", "base")
    repo.stage("main", [(f"d/{i:04d}".encode(), None) for i in range(0, 300, 2)])
    repo.write_file("main", "d/new", b"n")
    before = [n.name for n in repo.list_dir("main", "d")]
    assert compact(repo, "main")
    st = repo.staging.get_state("main")
    assert st.compacted and not st.sealed
    assert [n.name for n in repo.list_dir("main", "d")] == before
    repo.write_file("main", "d/after", b"a")
    c = repo.commit("main", "after compaction")
    assert [n.name for n in repo.list_dir(c.id, "d")] == sorted(before + ["after"])
    assert repo.staging.get_state("main").compacted is None


def test_staged_changes_that_leave_the_head_as_it_is_leave_the_branch_clean(repo):
    """A file written and removed again: compaction drops the changes instead of keeping
    a compacted tree equal to the head, and a commit of such a staging (an older gravfs
    kept it) drops it too, so a merge into the branch is not refused as "uncommitted"
    while commit says there is nothing to commit."""
    repo.write_file("main", "a/1", b"one")
    repo.commit("main", "c0")
    repo.create_branch("dev", "main")
    repo.write_file("dev", "b/1", b"y")
    repo.commit("dev", "c1")
    repo.write_file("main", "b/1", b"x")
    repo.remove("main", "b/1")
    assert not compact(repo, "main")
    st = repo.staging.get_state("main")
    assert not st.compacted and not st.sealed and Committer(repo).is_clean("main")
    assert repo.status("main") == []
    repo.merge("dev", "main")
    assert repo.read("main", "b/1") == b"y"

    repo.write_file("main", "b/2", b"x")
    repo.remove("main", "b/2")
    c = Committer(repo)  # a compacted tree equal to the head, as an older compaction left it
    st = c.seal("main")
    head = repo.head("main")
    c.settle_compaction("main", list(st.sealed),
                        {"metarange": repo.commits.get(head).metarange, "base": head})
    assert not c.is_clean("main")
    with pytest.raises(NothingToCommitError):
        repo.commit("main", "nothing")
    assert c.is_clean("main") and repo.staging.get_state("main").compacted is None
    repo.write_file("dev", "b/3", b"z")
    repo.commit("dev", "c2")
    repo.merge("dev", "main")
    assert repo.read("main", "b/3") == b"z" and repo.status("main") == []

    # nor does a merge (or revert) need a commit first: it drops such changes itself
    repo.write_file("main", "b/4", b"x")
    repo.remove("main", "b/4")
    repo.write_file("main", "b/1", b"y")  # the bytes and mode the head has, other times
    repo.write_file("dev", "b/4", b"w")
    repo.commit("dev", "c3")
    assert repo.status("main") == [("changed", b"b/1")]
    with pytest.raises(GravfsError, match="'main' has uncommitted changes"):
        repo.merge("dev", "main")  # b/1's times changed: a change to commit
    repo.reset("main", b"b/1")
    repo.write_file("main", "b/4", b"x")
    repo.remove("main", "b/4")
    assert not c.is_clean("main") and repo.status("main") == []
    merged = repo.merge("dev", "main")
    assert repo.read("main", "b/4") == b"w" and c.is_clean("main")
    repo.write_file("main", "b/5", b"x")
    repo.remove("main", "b/5")
    repo.revert("main", merged.id, parent=1)
    assert {n.path for n in repo.walk("main") if n.kind == "file"} == {"a/1", "b/1", "b/3"}


def test_compaction_of_a_missing_branch_is_refused(repo):
    with pytest.raises(NotFoundError, match="branch 'nosuch' not found"):
        compact(repo, "nosuch")
    assert repo.staging.stored_state("nosuch") is None  # no staging state left for it


def test_streams_large_file_without_loading(repo, tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as f:
        for i in range(64):
            f.write(bytes([i]) * (1 << 20))
    e = repo.write_file("main", "big", str(big))
    assert e.size == 64 << 20
    assert repo.read("main", "big", offset=(5 << 20) + 7, length=3) == bytes([5]) * 3
    # identical content is stored once
    e2 = repo.write_file("main", "copy", io.BytesIO(big.read_bytes()))
    assert e2.address == e.address


def test_sensor_compacts_past_threshold(repo):
    from gravfs.version.compaction import CompactionPolicy
    for i in range(200):
        repo.write_file("main", f"t/{i:03d}", b"x")
    repo.commit("main", "base")
    repo.compaction = CompactionPolicy(max_tombstones=100)
    repo.stage("main", [(f"t/{i:03d}".encode(), None) for i in range(50)])
    assert repo.staging.get_state("main").compacted is None
    repo.stage("main", [(f"t/{i:03d}".encode(), None) for i in range(50, 150)])
    st = repo.staging.get_state("main")
    assert st.compacted is not None and st.tombstones == 0 and not st.sealed
    assert [n.name for n in repo.list_dir("main", "t")] == [f"{i:03d}" for i in range(150, 200)]
    assert [k for k, _ in repo.status("main")] == ["removed"] * 150


def test_new_refs_start_at_the_current_head_despite_the_head_cache(store_target, tmp_path):
    """The mount caches heads (head_ttl); a branch or tag it creates must still start at
    the head another process just committed, not at the cached one."""
    a = Repository.init(store_target, str(tmp_path / "ws-a"), settings=small_settings())
    cached = Repository.open(store_target, str(tmp_path / "ws-b"), head_ttl=3600)
    old = cached.head("main")  # now cached for an hour
    a.write_file("main", "f", b"1")
    new = a.commit("main", "add f").id
    assert cached.head("main") == old  # the cache is stale, as intended for reads
    assert cached.create_branch("feature").id == new
    assert cached.read("feature", "f") == b"1"
    assert cached.create_tag("v1", "main").id == new


# -- keys another writer made (issue 9: names gravfs did not write) -----------------------


def _committed(repo, branch: str, path: str, data: bytes, message: str):
    """One file written on ``branch`` and committed alone."""
    repo.write_file(branch, path, data)
    return repo.commit(branch, message)


def _foreign_repo(repo):
    from tests.foreign_util import FOREIGN_KEYS, commit_keys
    repo.write_file("main", "ok.txt", b"ok")
    repo.write_file("main", "d/fine", b"fine")
    repo.commit("main", "gravfs's own")
    commit_keys(repo, "main", FOREIGN_KEYS)
    return repo


def test_foreign_keys_are_listed_under_escaped_names(repo):
    """Keys gravfs refuses but another writer committed are listed, not hidden or
    mangled: each one under a reversible escaped name that reads it back."""
    from tests.foreign_util import FOREIGN_KEYS
    _foreign_repo(repo)
    long_shown = [n.name for n in repo.list_dir("main") if n.name.startswith("long")]
    assert len(long_shown) == 1 and len(long_shown[0].encode()) <= 255
    assert re.search(r"%~[0-9a-f]{16}$", long_shown[0])
    assert names(repo.list_dir("main")) == ["%2Fabs", "a/", "d/", long_shown[0], "nul%00x",
                                            "ok.txt", "trail%2F"]
    assert names(repo.list_dir("main", "d")) == ["%2E%2E/", "%2E/", "fine"]
    assert names(repo.list_dir("main", "d/%2E%2E")) == ["up"]
    assert names(repo.list_dir("main", "a")) == ["%2Fb"]
    shown = {"%2Fabs": b"/abs", "a/%2Fb": b"a//b", "d/%2E%2E/up": b"d/../up",
             "d/%2E/dot": b"d/./dot", "nul%00x": b"nul\x00x", long_shown[0]: b"long" + b"x" * 300,
             "trail%2F": b"trail/"}
    for path, key in shown.items():
        n = repo.stat("main", path)
        assert n.key == key and n.kind == "file"
        assert repo.read("main", path) == FOREIGN_KEYS[key]
    foreign = {n.name: n.foreign for n in repo.list_dir("main")}
    assert foreign["ok.txt"] is None and foreign["a"] is None
    assert "'/'" in foreign["%2Fabs"] and "NUL" in foreign["nul%00x"]
    assert "trailing" in foreign["trail%2F"] and "255" in foreign[long_shown[0]]
    # the trailing-slash file is not a directory: nothing else lives under "trail/"
    with pytest.raises(NotFoundError):
        repo.stat("main", "trail")
    # an ordinary name with '%' is itself, never decoded
    with pytest.raises(NotFoundError):
        repo.stat("main", "ok%2Etxt")


def test_listing_pages_through_foreign_keys(repo):
    """Paging with each child's listing key gives the whole listing once, in order,
    also across a file stored at "name/" that is listed beside the directory."""
    from tests.foreign_util import commit_keys
    _foreign_repo(repo)
    commit_keys(repo, "main", {b"trail/inside": b"i", b"/abs2/deep": b"d", b"//x": b"x"})
    whole = repo.list_dir("main")
    assert names(whole)[:3] == ["%2F%2Fx", "%2Fabs", "%2Fabs2/"]
    assert "trail%2F" in names(whole) and "trail/" in names(whole)
    paged, after = [], None
    while True:
        batch = repo.list_dir("main", "", after, 1)
        if not batch:
            break
        paged.extend(batch)
        after = batch[-1].listing_key
    assert names(paged) == names(whole)
    assert repo.read("main", "%2Fabs2/deep") == b"d" and repo.read("main", "trail/inside") == b"i"


def test_real_name_wins_over_an_equal_escaped_name(repo):
    from tests.foreign_util import commit_keys
    repo.write_file("main", "%2Fabs", b"real")
    repo.commit("main", "a real name that looks escaped")
    commit_keys(repo, "main", {b"/abs": b"foreign"})
    assert repo.read("main", "%2Fabs") == b"real"
    listed = [(n.name, n.key, n.shadowed) for n in repo.list_dir("main")]
    assert sorted(listed) == [("%2Fabs", b"%2Fabs", False), ("%2Fabs", b"/abs", True)]


def test_foreign_keys_can_be_renamed_and_removed_by_escaped_name(repo):
    _foreign_repo(repo)
    repo.rename("main", "%2Fabs", "abs")
    repo.rename("main", "d/%2E%2E", "d/up-dir")
    repo.remove("main", "nul%00x")
    repo.remove("main", "a/%2Fb")
    repo.commit("main", "fix names")
    keys = {n.key for n in repo.walk("main")}
    assert b"abs" in keys and b"d/up-dir/up" in keys
    assert not keys & {b"/abs", b"d/../up", b"nul\x00x", b"a//b"}


def test_provisional_entries_are_read_but_never_committed(repo):
    """A provisional put (the mount's file created and not closed yet) reads like a
    file, commits and compaction treat it as absent and leave it staged, and a
    later write replaces it."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo

    empty = repo.write_file("main", "x", b"")  # the empty object exists
    repo.write_file("main", "old", b"committed")
    repo.commit("main", "base")
    e = EntryInfo(address=empty.address, size=0, kind=KIND_FILE, mtime_ns=1)
    repo.stage("main", [(b"open", e), (b"closed", e)], provisional=frozenset([b"open"]))
    repo.remove("main", "old")
    repo.stage("main", [(b"old", e)], provisional=frozenset([b"old"]))  # re-created
    assert names(repo.list_dir("main")) == ["closed", "old", "open", "x"]
    assert ("added", b"open") not in repo.status("main")
    c = repo.commit("main", "with open files")
    assert names(repo.list_dir(c.id)) == ["closed", "x"]  # "old" went, "open" never came
    assert names(repo.list_dir("main")) == ["closed", "old", "open", "x"]  # still staged
    with pytest.raises(NothingToCommitError):
        repo.commit("main", "only provisional")
    repo.write_file("main", "more", b"m")
    assert compact(repo, "main")
    assert names(repo.list_dir("main")) == ["closed", "more", "old", "open", "x"]
    assert repo.staging.get_state("main").provisional == 2
    repo.write_file("main", "open", b"closed at last")
    assert repo.staging.get_state("main").provisional == 1  # a commit scans only while > 0
    c2 = repo.commit("main", "closed")
    assert repo.read(c2.id, "open") == b"closed at last"
    assert names(repo.list_dir(c2.id)) == ["closed", "more", "open", "x"]
    assert names(repo.list_dir("main")) == ["closed", "more", "old", "open", "x"]
    assert repo.staging.drop_provisional() == 1  # "old": its writer is gone
    assert repo.staging.get_state("main").provisional == 0
    assert names(repo.list_dir("main")) == ["closed", "more", "open", "x"]
    with pytest.raises(NothingToCommitError):
        repo.commit("main", "nothing left")


def test_a_listed_node_computes_its_names_once_and_copies_that_have_not_do_too():
    raw = encode_entry(EntryInfo(address="data/aa/x", size=1))
    fresh = node_from_item(b"d/x", raw)
    copies = [pickle.loads(pickle.dumps(fresh)), copy.deepcopy(fresh)]
    assert fresh.fs_name == b"x" and fresh.fs_name is fresh.fs_name
    assert fresh.listing_key == b"x" and fresh.foreign is None
    for c in copies:  # copied before anything was computed
        assert (c.fs_name, c.listing_key, c.foreign) == (b"x", b"x", None)
    odd = node_from_item(b"d/a\x00b", raw)  # a name POSIX cannot show: escaped
    assert odd.foreign is not None and odd.fs_name != b"a\x00b"


def _age_staging(repo, branch: str, hours: float) -> None:
    """As if the branch's oldest staged change was made ``hours`` ago."""
    def older(st):
        st.since_ns -= int(hours * 3.6e12)
    repo.staging.update_state(branch, older)


def _gc_took(repo, address: str, cached_copy: bool = False) -> None:
    """What garbage collection on another host does to an object only this host's
    staging references: deletes it (the local tier's copy stays if asked)."""
    repo.store.delete(address)
    if not cached_copy:
        repo.tier.discard(address)


def test_old_staging_whose_content_gc_took_is_not_committed(repo):
    """Staging older than an hour is claimed at commit: a data object another host's
    GC deleted (staged a day ago, never committed) made a commit whose file could
    not be read; now the commit is refused, naming the file, and nothing changes."""
    repo.write_file("main", "gone", b"committed")
    repo.commit("main", "base")
    repo.remove("main", "gone")  # a deletion among the staged changes
    repo.write_file("main", "keep", b"kept content")
    repo.write_file("main", "d/lost", b"content GC took")
    head = repo.head("main", fresh=True)
    _age_staging(repo, "main", 25)
    _gc_took(repo, repo.stat("main", "d/lost").entry.address)
    with pytest.raises(StagedContentGoneError, match=r"content of 1 file\(s\) \(d/lost\) is gone "
                       r"from the store.*gravfs reset main PATH"):
        repo.commit("main", "late")
    assert repo.head("main", fresh=True) == head
    assert sorted(p for _, p in repo.status("main")) == [b"d/lost", b"gone", b"keep"]
    repo.reset("main", b"d/lost")
    repo.commit("main", "what is left")
    assert repo.read("main", "keep") == b"kept content"
    assert repo.staging.get_state("main").since_ns is None


def test_old_staging_is_restored_from_this_hosts_copy(repo):
    """A data object gone from the store but in this host's cache is written again."""
    repo.write_file("main", "f", b"cached here")
    address = repo.stat("main", "f").entry.address
    repo.read("main", "f")  # (a copy in the tier)
    if not repo.tier.cached(address):
        repo.tier.acquire(address).release()
    _age_staging(repo, "main", 25)
    _gc_took(repo, address, cached_copy=True)
    repo.commit("main", "restored")
    assert repo.store.exists(address)
    repo.tier.discard(address)
    assert repo.read("main", "f") == b"cached here"


def test_old_staging_claims_refresh_its_objects(tmp_path):
    """An object staged long ago gets a fresh last-modified before the commit refers to
    it, as a deduplicating write would: a GC mark running now no longer condemns it."""
    store = str(tmp_path / "store")
    repo = Repository.init(store, str(tmp_path / "state"), settings=small_settings())
    try:
        repo.write_file("main", "f", b"old content")
        address = repo.stat("main", "f").entry.address
        path = os.path.join(store, address)
        two_hours_ago = time.time() - 7200
        os.utime(path, (two_hours_ago, two_hours_ago))
        _age_staging(repo, "main", 2)
        repo.commit("main", "claimed")
        assert os.stat(path).st_mtime > time.time() - 60
    finally:
        repo.close()


def test_staging_age_restarts_with_what_a_commit_leaves(repo):
    """After a commit the age is that of what is still staged: none, or the writes
    that came while the commit ran (no older than its seal)."""
    repo.write_file("main", "a", b"1")
    assert repo.staging.get_state("main").since_ns is not None
    repo.commit("main", "one")
    assert repo.staging.get_state("main").since_ns is None
    repo.write_file("main", "b", b"2")
    _age_staging(repo, "main", 30)
    committer = Committer(repo)
    real_seal = committer.seal

    def seal_then_write(branch):
        st = real_seal(branch)
        repo.write_file("main", "c", b"written while committing")
        return st

    committer.seal = seal_then_write
    before = time.time_ns()
    committer.commit("main", "two", "me", {})
    since = repo.staging.get_state("main").since_ns
    assert before <= since <= time.time_ns()
    repo.commit("main", "three")
    assert repo.staging.get_state("main").since_ns is None


def test_old_compacted_staging_whose_tree_gc_took_is_not_committed(store_target, tmp_path):
    """Old staging compacted into a tree GC took: refused, whether the tree is still
    parsed in memory (a mount) or must be read (a command)."""
    state = str(tmp_path / "state")
    with Repository.init(store_target, state, settings=small_settings()) as repo:
        repo.write_file("main", "a", b"1")
        compact(repo, "main")
        st = repo.staging.get_state("main")
        assert st.compacted
        _age_staging(repo, "main", 25)
        _gc_took(repo, "_gravfs/metaranges/" + st.compacted["metarange"])
        with pytest.raises(StagedContentGoneError, match="the tree its staging was compacted "
                           "into is gone from the store.*gravfs reset main'"):
            repo.commit("main", "late")
    with Repository.open(store_target, state) as repo:
        with pytest.raises(StagedContentGoneError, match="compacted into is gone"):
            repo.commit("main", "late")
        repo.reset("main")
        assert repo.status("main") == []


def test_a_listing_page_is_full_where_a_name_is_both_file_and_directory(repo):
    """A page of ``limit`` names unless the directory ends (readers take a shorter one
    for the end): the file a directory of the same name hides does not count."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    a, n = repo.data.put_bytes(b"x")
    e = EntryInfo(address=a, size=n, mtime_ns=1, kind=KIND_FILE)
    repo.stage("main", [(b"d/%02d" % i, e) for i in range(20)] + [(b"d/03/in", e),
                                                                  (b"d/05/in", e)])
    whole = repo.list_dir("main", "d")
    assert [x.fs_name for x in whole] == [b"%02d" % i for i in range(20)]
    page = repo.list_dir("main", "d", None, 10)
    assert [x.fs_name for x in page] == [b"%02d" % i for i in range(10)]
    assert [x.kind for x in page[3:6]] == ["dir", "file", "dir"]


def test_a_listing_that_finds_names_makes_no_separate_check_that_the_directory_exists(
        repo, monkeypatch):
    """The check (a seek that decoded a data block of its own, ~40% of a short
    listing) is made only when the listing comes back empty: to tell an empty
    directory from a missing one, a file, or a foreign name's directory."""
    from gravfs.errors import GravfsError, NotFoundError
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.version.staging.branchview import BranchLayers

    a, n = repo.data.put_bytes(b"x")
    e = EntryInfo(address=a, size=n, mtime_ns=1, kind=KIND_FILE)
    repo.stage("main", [(b"d/%02d" % i, e) for i in range(5)] + [(b"f", e)])
    repo.mkdir("main", "empty")
    checks: list = []
    first_under = BranchLayers.first_under
    monkeypatch.setattr(BranchLayers, "first_under",
                        lambda self, prefix: checks.append(prefix) or first_under(self, prefix))
    assert [x.fs_name for x in repo.list_dir("main", "d", b"01", 2)] == [b"02", b"03"]
    assert checks == []
    assert repo.list_dir("main", "d", b"04") == []  # past the end: checked, still a directory
    assert repo.list_dir("main", "empty") == [] and checks == [b"d/", b"empty/"]
    with pytest.raises(NotFoundError):
        repo.list_dir("main", "nothing")
    with pytest.raises(GravfsError, match="not a directory"):
        repo.list_dir("main", "f")



def test_a_listed_directorys_marker_comes_from_the_listings_own_scan(repo, monkeypatch):
    """A listing finds each subdirectory by its first key, which is the directory's
    marker when it has one: the marker is not looked up again (a point lookup per
    subdirectory was a quarter of listing a directory of small directories). The
    nodes are what they were: a marker's entry (mode, times), None for an implied one."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.version.staging.branchview import BranchLayers

    a, n = repo.data.put_bytes(b"x")
    e = EntryInfo(address=a, size=n, mtime_ns=1, kind=KIND_FILE)
    repo.stage("main", [(b"p/i/x", e), (b"p/m/y", e), (b"p/z", e)])
    repo.mkdir("main", "p/m", mode=0o700)
    repo.mkdir("main", "p/e", mode=0o750)
    gets: list = []
    get = BranchLayers.get

    def listed() -> dict:
        with monkeypatch.context() as m:
            m.setattr(BranchLayers, "get",
                      lambda self, key, *rest: gets.append(key) or get(self, key, *rest))
            return {x.fs_name: x for x in repo.list_dir("main", "p")}

    for got in (listed(), repo.commit("main", "p") and listed()):  # staged, then committed
        assert gets == []
        assert [(x.kind, x.key) for x in got.values()] == [
            ("dir", b"p/e/"), ("dir", b"p/i/"), ("dir", b"p/m/"), ("file", b"p/z")]
        assert got[b"i"].entry is None
        assert got[b"m"].entry.mode & 0o7777 == 0o700 and got[b"e"].entry.mode & 0o7777 == 0o750


def test_write_file_of_a_fifo_fails_at_once_naming_it(repo, tmp_path):
    """A FIFO where a file was (gravfs put checks the path, then a FIFO replaces it):
    refused as not a regular file, without waiting in open(2) for a writer."""
    import threading

    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    got = []

    def put():
        try:
            repo.write_file("main", "f", fifo)
        except Exception as exc:
            got.append(exc)

    t = threading.Thread(target=put)
    t.start()
    t.join(10)
    if t.is_alive():  # (the old code hung here: let it go before failing)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join()
    assert len(got) == 1 and isinstance(got[0], GravfsError), got
    assert "not a regular file" in str(got[0]) and fifo in str(got[0])
    assert repo.status("main") == []


def test_a_directorys_stat_finds_its_marker_or_first_child_with_one_seek(repo, monkeypatch):
    """A stat that finds no file at the key seeks once under ``key/``: a marker
    (mkdir), an implied directory (a child only), a file another writer stored at
    ``key/`` with or without children after it; no lookup of the marker of its own."""
    from gravfs.errors import NotFoundError
    from gravfs.version.staging.branchview import BranchLayers
    from tests.foreign_util import commit_keys

    commit_keys(repo, "main", {b"implied/x": b"1", b"trail/": b"t", b"trail/inside": b"i",
                               b"lone/": b"l", b"f": b"1"}, dirs=(b"made/",))
    repo.mkdir("main", "staged", mode=0o700)
    gets: list = []
    get = BranchLayers.get
    monkeypatch.setattr(BranchLayers, "get",
                        lambda self, key, *rest: gets.append(key) or get(self, key, *rest))
    got = {p: repo.stat("main", p) for p in ("implied", "trail", "made", "staged", "f")}
    assert gets == [b"implied", b"trail", b"made", b"staged", b"f"]
    assert {p: (n.kind, n.key, n.entry is None) for p, n in got.items()} == {
        "implied": ("dir", b"implied/", True), "trail": ("dir", b"trail/", True),
        "made": ("dir", b"made/", False), "staged": ("dir", b"staged/", False),
        "f": ("file", b"f", False)}
    assert got["staged"].entry.mode & 0o7777 == 0o700
    with pytest.raises(NotFoundError):
        repo.stat("main", "lone")  # a file at "lone/" and nothing under it


def _stage_pending(repo, branch: str, key: bytes, data: bytes) -> str:
    """Stage ``data`` at ``key`` as a mount's close does: pending upload first (put
    there by hand when no uploader runs: what a killed mount left)."""
    from gravfs import hashing
    from gravfs.data.objects import address_of
    from gravfs.fs.entry import KIND_FILE
    path = os.path.join(repo.workspace.tmp, "w-%d" % time.monotonic_ns())
    with open(path, "wb") as f:
        f.write(data)
    if repo.data.writer_running():
        address, size = repo.data.put_pending(path)
    else:
        address, size = address_of(hashing.hexdigest(data)), len(data)
        os.makedirs(os.path.dirname(repo.data.pending_path(address)), exist_ok=True)
        os.rename(path, repo.data.pending_path(address))
    repo.stage(branch, [(key, EntryInfo(address=address, size=size, mtime_ns=time.time_ns(),
                                        mode=0o100644, kind=KIND_FILE))])
    return address


@pytest.mark.parametrize("case", ["picks-its-own", "big-drains-all", "no-uploader-drains-all"])
def test_a_commit_uploads_what_it_references_not_the_uploaders_backlog(
        repo, tmp_path, monkeypatch, case):
    """A mount's writers can outrun its uploader; a commit then waited for every pending
    upload (other branches' files, versions of a file since replaced): 882 of them, 17 s,
    for a commit of 32 files on SeaweedFS. It uploads its own; a commit with many changes
    per pending object (most of them its own, then) drains all without picking, and so
    does one with no uploader running (a killed mount's leftovers: nothing else would)."""
    from gravfs.data.objects import PAUSE_ENV
    import gravfs.fs.repository as fsrepo
    pause = tmp_path / "pause"
    pause.write_text("")
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    if case == "big-drains-all":
        monkeypatch.setattr(fsrepo, "PICK_PER_PENDING", 0)  # any commit counts as big
    repo.create_branch("other", "main")
    if case != "no-uploader-drains-all":
        repo.data.start_uploader(workers=2)
    try:
        old = [_stage_pending(repo, "main", b"log", b"version %d\n" % i) for i in range(3)]
        mine = [old.pop(), _stage_pending(repo, "main", b"notes", b"notes\n")]
        theirs = _stage_pending(repo, "other", b"x", b"other branch\n")
        backlog = old + [theirs]
        assert sorted(repo.data.pending_addresses()) == sorted(mine + backlog)
        cid = repo.commit("main", "two files").id
        drained = case != "picks-its-own"
        assert all(repo.store.exists(a) for a in mine)
        assert [a for a in backlog if repo.store.exists(a)] == (backlog if drained else [])
        assert sorted(repo.data.pending_addresses()) == ([] if drained else sorted(backlog))
        assert repo.read(cid, "log") == b"version 2\n"
        pause.unlink()  # the uploader sends the rest; the other branch commits as ever
        repo.data.stop_uploader()
        assert repo.data.pending_addresses() == []
        assert repo.read(repo.commit("other", "x").id, "x") == b"other branch\n"
    finally:
        if pause.exists():
            pause.unlink()
