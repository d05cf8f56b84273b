"""gravfs.version.repository: the head cache while the object store cannot be reached."""

from __future__ import annotations

import io
import logging
import time

import pytest

from gravfs.errors import NotFoundError, StoreUnavailableError
from gravfs.fs.repository import Repository
from gravfs.store.faulty import FaultyStore, StoreFault
from gravfs.store.local import LocalStore
from gravfs.version import repository as version_repository
from tests.repo_util import small_settings


def test_an_unreachable_store_leaves_branches_at_the_heads_read_last(tmp_path, monkeypatch,
                                                                      caplog):
    """With a head cache (the mount), a store outage does not take branches away: each
    is read at the head read last, the store is asked again once per HEAD_RETRY, and
    its heads are read again as soon as it answers. Fresh reads, branches never read,
    and repositories without a head cache (commands) get the error."""
    monkeypatch.setattr(version_repository, "HEAD_RETRY", 0.3)
    inner = LocalStore(str(tmp_path / "store"), fsync=False)
    writer = Repository.init(inner, str(tmp_path / "ws-writer"), settings=small_settings())
    store = FaultyStore(inner, [])
    cached = Repository.open(store, str(tmp_path / "ws-mount"), head_ttl=0.05)
    plain = Repository.open(store, str(tmp_path / "ws-cli"))
    before = cached.head("main")
    down = StoreFault(frozenset({"read_versioned"}), key="_gravfs/refs/*")
    store.faults.append(down)
    time.sleep(0.06)  # the cached head expired
    with caplog.at_level(logging.INFO, logger="gravfs.version.outage"):
        assert cached.head("main") == before
        asked = down.fired
        assert asked == 1
        assert cached.head("main") == before and cached.branch_exists("main")
        assert down.fired == asked  # not asked again before HEAD_RETRY
        for call in (lambda: cached.head("main", fresh=True), lambda: cached.head("other"),
                     lambda: cached.branch_exists("other"), lambda: plain.head("main"),
                     lambda: plain.branch_exists("main")):
            with pytest.raises(StoreUnavailableError):
                call()
        cached.write_file("main", "during", b"written while the store was down")
        assert cached.read("main", "during") == b"written while the store was down"
        asked = down.fired
        time.sleep(0.31)
        assert cached.head("main") == before and down.fired == asked + 1  # asked, failed
        store.faults.remove(down)
        writer.write_file("main", "f", b"1")
        after = writer.commit("main", "moved on").id
        assert cached.head("main") == before  # the next question is HEAD_RETRY away
        time.sleep(0.31)
        assert cached.head("main") == after
    warnings = [r for r in caplog.records if "heads read last" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "answers again" in caplog.text
    assert cached.read("main", "during") == b"written while the store was down"
    assert cached.read("main", "f") == b"1"


def test_a_branch_found_deleted_leaves_no_cached_head_to_stage_on(tmp_path):
    """The mount stages on its event loop from the cached head (stage_values_cached);
    after its watcher read the branch as deleted, a close still staged there, under
    a branch that no longer existed, and its content was lost without a word."""
    writer = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws-writer"),
                             settings=small_settings())
    writer.create_branch("gone", "main")
    cached = Repository.open(str(tmp_path / "store"), str(tmp_path / "ws-mount"),
                             head_ttl=3600)
    cached.head("gone")
    assert cached.stage_values_cached("gone", [(b"a", None)]) is not None
    writer.delete_branch("gone")
    with pytest.raises(NotFoundError):
        cached.head("gone", fresh=True)  # the watcher's look
    assert cached.stage_values_cached("gone", [(b"b", None)]) is None
    with pytest.raises(NotFoundError):
        cached.stage_values("gone", [(b"b", None)])
    writer.close()
    cached.close()


def test_init_checks_its_state_directory_before_it_writes_the_store(tmp_path):
    """A state directory init cannot use (inside the store, where its files would be
    taken for the store's; one that cannot be made) failed after the settings were
    written: the store then had a repository without a branch, and init again said it
    already existed."""
    import os

    from gravfs.errors import GravfsError

    store = tmp_path / "store"
    for state, why in ((store / "state", "is inside the store"),
                       (tmp_path / "file" / "state", "Not a directory")):
        (tmp_path / "file").write_text("not a directory")
        with pytest.raises((GravfsError, OSError), match=why):
            Repository.init(str(store), str(state), settings=small_settings())
        assert not (store / "_gravfs").exists()
    Repository.init(str(store), str(tmp_path / "state"), settings=small_settings()).close()
    with pytest.raises(GravfsError, match="is inside the store"):
        Repository.open(str(store), str(store / "data" / "st"))
    assert not os.path.exists(store / "data" / "st")


def test_init_finishes_a_repository_an_earlier_init_left_without_a_branch(tmp_path, caplog):
    """The store failed between the settings and the first branch: init again makes
    the root commit and the default branch; once there, init refuses as before."""
    from gravfs.errors import AlreadyExistsError
    from gravfs.version.config import REPO_JSON

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    LocalStore(store).put(REPO_JSON, small_settings().to_json())
    with caplog.at_level(logging.WARNING, logger="gravfs.version.repository"):
        Repository.init(store, state, settings=small_settings()).close()
    assert "finishing the repository an earlier init left" in caplog.text
    with Repository.open(store, state) as r:
        assert [name for name, _ in r.heads.branches()] == ["main"]
        assert r.resolve("main").commit.message == "Repository created"
    with pytest.raises(AlreadyExistsError):
        Repository.init(store, state, settings=small_settings())


def test_a_new_branch_or_tag_may_not_take_the_name_another_ref_answers_to(tmp_path):
    """A ref names a branch first, then a tag, then a commit prefix: a branch made with a
    tag's name turned every later use of the tag into the moving branch, a tag made with
    a branch's name could never be named, and a branch named like a commit prefix hid it."""
    from gravfs.errors import AlreadyExistsError
    repo = Repository.init(LocalStore(str(tmp_path / "store"), fsync=False),
                           str(tmp_path / "ws"), settings=small_settings())
    head = repo.head("main")
    repo.create_tag("v2", "main")
    with pytest.raises(AlreadyExistsError, match="a tag named 'v2' exists: a branch of that "
                       "name would take its place"):
        repo.create_branch("v2")
    with pytest.raises(AlreadyExistsError, match="a branch named 'main' exists: refs name the "
                       "branch first"):
        repo.create_tag("main", "main")
    for name, make in ((head[:7], repo.create_branch), (head[:6], lambda n: repo.create_tag(n, "main"))):
        with pytest.raises(AlreadyExistsError, match=f"'{name}' starts the id of commit "
                           f"{head[:12]}"):
            make(name)
    assert repo.resolve(head[:7]).commit.id == head
    assert sorted(n for n, _ in repo.list_branches()) == ["main"]
    assert sorted(n for n, _ in repo.list_tags()) == ["v2"]
    repo.create_tag("20241201", "main")  # hex, but no commit's id starts so
    repo.create_branch("deadbeef")
    assert repo.resolve("deadbeef").branch == "deadbeef"


def test_moved_heads_are_those_two_reads_found_apart(tmp_path):
    """take_moved_heads: a branch whose head another workspace moved between two reads
    here, also across a cleared head cache and a deletion and re-creation; once each,
    and never a branch only read once or read unchanged."""
    store = str(tmp_path / "store")
    Repository.init(store, str(tmp_path / "ws-a"), settings=small_settings()).close()
    here = Repository.open(store, str(tmp_path / "ws-a"), head_ttl=3600)
    there = Repository.open(store, str(tmp_path / "ws-b"))
    try:
        here.head("main")
        there.create_branch("dev", "main")
        here.head("dev")
        here.head("main", fresh=True)
        assert here.take_moved_heads() == set()
        there.write_file("main", "f", io.BytesIO(b"1"))
        there.commit("main", "one")
        here.head("main")  # cached: no read of the store, nothing seen
        assert here.take_moved_heads() == set()
        here.head("main", fresh=True)
        assert here.take_moved_heads() == {"main"}
        assert here.take_moved_heads() == set()  # taken once
        there.delete_branch("dev")
        there.create_branch("dev", "main")  # where main is now, not where dev was
        with pytest.raises(NotFoundError):
            here.head("nope", fresh=True)
        here.create_branch("x", "main")  # which clears the head cache
        here.head("dev")
        assert here.take_moved_heads() == {"dev"}
    finally:
        here.close()
        there.close()
