"""Retention rules (stored in the repository, checked) and the commits they keep:
heads always, each branch's first-parent chain within its window plus the first
commit older than it, tags' commits, the longest window for shared history."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gravfs.errors import CorruptDataError
from gravfs.fs.repository import Repository
from gravfs.version.retention import (DAY_NS, RetentionError, RetentionRules, load_rules,
                                      make_rules, parse_branch_rules, parse_days, save_rules,
                                      select_commits)
from tests.repo_util import small_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def history(tmp_path, monkeypatch):
    """main: m30 m20 m10 m5 m1 and a merge of feature (f15 f3, from m20) at 0.5 days;
    tag old at m30. Returns (repo, {name: commit id}, now_ns)."""
    now = time.time_ns()
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"),
                           settings=small_settings())
    ids = {}

    def commit(branch, name, days_ago):
        monkeypatch.setenv("GRAVFS_COMMIT_DATE", str((now - days_ago * DAY_NS) / 1e9))
        repo.write_file(branch, f"{name}.txt", name.encode())
        ids[name] = repo.commit(branch, name).id

    commit("main", "m30", 30)
    commit("main", "m20", 20)
    repo.create_branch("feature", "main")
    commit("feature", "f15", 15)
    commit("main", "m10", 10)
    commit("main", "m5", 5)
    commit("feature", "f3", 3)
    commit("main", "m1", 1)
    monkeypatch.setenv("GRAVFS_COMMIT_DATE", str((now - DAY_NS // 2) / 1e9))
    ids["merge"] = repo.merge("feature", "main").id
    monkeypatch.delenv("GRAVFS_COMMIT_DATE")
    repo.create_tag("old", ids["m30"])
    yield repo, ids, now
    repo.close()


def kept(repo, ids, rules, now) -> set[str]:
    by_id = {v: k for k, v in ids.items()}
    sel = select_commits(repo.store, rules, now)
    return {by_id.get(c, c) for c in sel.kept}


def test_commit_dates_come_from_the_environment(history):
    repo, ids, now = history
    assert abs(repo.commits.get(ids["m20"]).time_ns - (now - 20 * DAY_NS)) < 10**6
    merge = repo.commits.get(ids["merge"])
    assert merge.parents == (ids["m1"], ids["f3"])  # the branch's own head first


def test_window_keeps_first_parent_history_and_the_first_older_commit(history):
    repo, ids, now = history
    # main: merge, m1, m5 within 7 days, m10 the first older; feature: f3, f15 (first
    # older); tag: m30. m20 is kept by no rule.
    assert kept(repo, ids, RetentionRules(7), now) == {"merge", "m1", "m5", "m10", "f3", "f15",
                                                       "m30"}


def test_second_parents_are_their_own_branch_s_business(history):
    repo, ids, now = history
    repo.delete_branch("feature")
    # main's first-parent chain does not go through f3 or f15
    assert kept(repo, ids, RetentionRules(7), now) == {"merge", "m1", "m5", "m10", "m30"}


def test_longest_window_wins_and_zero_keeps_heads_and_tags(history):
    repo, ids, now = history
    rules = RetentionRules(0, {"feature": 25})
    # main keeps its head (older than a 0-day window: the first older commit);
    # feature's 25 days reach f15 and m20 (within), m30 (first older)
    assert kept(repo, ids, rules, now) == {"merge", "f3", "f15", "m20", "m30"}
    assert kept(repo, ids, RetentionRules(0), now) == {"merge", "f3", "m30"}
    repo.create_branch("long", "main")
    sel = select_commits(repo.store, RetentionRules(2, {"long": 40}), now)
    assert {ids[n] for n in ("merge", "m1", "m5", "m10", "m20", "m30")} <= set(sel.kept)
    # main's 2-day walk stops at the merge, which the 40-day walk of long has kept
    assert sel.commits_read == len(sel.kept)


def test_shared_history_is_read_once(tmp_path):
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"),
                           settings=small_settings())
    with repo:
        for i in range(30):
            repo.write_file("main", "f", str(i).encode())
            repo.commit("main", str(i))
        for b in range(10):
            repo.create_branch(f"b{b}", "main")
        reads = []
        from gravfs.version.retention import read_commit

        def read(cid):
            reads.append(cid)
            return read_commit(repo.store, cid)
        sel = select_commits(repo.store, RetentionRules(3650), time.time_ns(), read=read)
        assert len(sel.kept) == 31
        assert len(reads) == len(set(reads)) == 31  # not 11 branches x 31


def test_rules_are_stored_in_the_repository(tmp_path):
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    with repo:
        assert load_rules(repo.store) is None
        save_rules(repo.store, make_rules(7, {"main": 30}, ["main"]))
    with Repository.open(str(tmp_path / "store"), str(tmp_path / "other-host")) as other:
        assert load_rules(other.store) == RetentionRules(7, {"main": 30})


def test_bad_rules():
    with pytest.raises(RetentionError, match="negative"):
        parse_days("-1", "--default-days")
    with pytest.raises(RetentionError, match="whole number"):
        parse_days("1.5", "--default-days")
    with pytest.raises(RetentionError, match="NAME=DAYS"):
        parse_branch_rules(["main"])
    with pytest.raises(RetentionError, match="negative"):
        parse_branch_rules(["main=-2"])
    with pytest.raises(RetentionError, match="--branch main given twice: give each branch once"):
        parse_branch_rules(["main=3", "dev=1", "main=4"])
    with pytest.raises(RetentionError, match="no such branch"):
        make_rules(1, {"nope": 3}, ["main"])


def _cli(*args, store, state):
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_cli_rules_set_show_and_one_line_errors(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state).close()
    rc, out, _ = _cli("gc", "rules", "show", store=store, state=state)
    assert rc == 0 and "no retention rules" in out
    for args, msg in ((["--default-days", "-1"], "negative"),
                      (["--default-days", "7", "--branch", "nope=3"], "--branch nope: no such branch"),
                      (["--default-days", "7", "--branch", "main=-3"], "negative")):
        rc, out, err = _cli("gc", "rules", "set", *args, store=store, state=state)
        assert rc != 0 and "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gravfs: ") and msg in lines[0], err
    rc, out, err = _cli("gc", "rules", "set", "--default-days", "7", "--branch", "main=30",
                        store=store, state=state)
    assert rc == 0, err
    rc, out, _ = _cli("gc", "rules", "show", "--json", store=store, state=state)
    assert out.strip() == '{"branches": {"main": 30}, "default_days": 7}'


def _sweeping(repo, run: str, kept_ids: list[str], mark_started_ns: int) -> None:
    """The store as a sweep in progress leaves it: the fence, the run's status, its kept
    commits."""
    import json

    from gravfs.store.base import SWEEP_FENCE
    from gravfs.version.retention import kept_key, status_key

    repo.store.put(status_key(run), json.dumps({"state": "sweeping",
                                                "mark_started_ns": mark_started_ns}).encode())
    repo.store.put(kept_key(run), json.dumps(kept_ids).encode())
    repo.store.put(SWEEP_FENCE, json.dumps({"run": run}).encode())


def test_commits_a_running_sweep_expires_cannot_become_refs(history):
    from gravfs.version.retention import ExpiredCommitError

    repo, ids, now = history
    _sweeping(repo, "r1", [ids["m1"], ids["merge"], ids["m30"]], now)
    for make in (lambda: repo.create_branch("b1", ids["m20"]),
                 lambda: repo.create_tag("t1", ids["m20"])):
        with pytest.raises(ExpiredCommitError, match="run r1"):
            make()
    assert "b1" not in dict(repo.list_branches()) and "t1" not in dict(repo.list_tags())
    repo.create_branch("from-kept", ids["m1"])  # kept by the run: allowed
    assert repo.head("from-kept") == ids["m1"]
    with pytest.raises(ExpiredCommitError):
        repo.merge(ids["m20"], "from-kept")
    assert repo.head("from-kept") == ids["m1"]


def test_a_sweep_that_starts_during_branch_creation_undoes_it(history, monkeypatch):
    from gravfs.version.retention import ExpiredCommitError

    repo, ids, now = history
    create = repo.heads.create_branch

    def create_then_sweep(name, cid):  # the fence is taken between the checks
        create(name, cid)
        _sweeping(repo, "r2", [ids["m1"]], now)

    monkeypatch.setattr(repo.heads, "create_branch", create_then_sweep)
    with pytest.raises(ExpiredCommitError, match="run r2"):
        repo.create_branch("late", ids["m10"])
    assert "late" not in dict(repo.list_branches())


def test_a_sweep_that_starts_during_a_merge_undoes_it(history, monkeypatch):
    from gravfs.version import repository as version_repository
    from gravfs.version.retention import ExpiredCommitError

    repo, ids, now = history
    repo.create_branch("dest", ids["m1"])
    merge = version_repository.Committer.merge

    def merge_then_sweep(self, *args):
        c = merge(self, *args)
        _sweeping(repo, "r3", [ids["m1"]], now)
        return c

    monkeypatch.setattr(version_repository.Committer, "merge", merge_then_sweep)
    with pytest.raises(ExpiredCommitError, match="run r3"):
        repo.merge(ids["f15"], "dest")
    assert repo.head("dest") == ids["m1"]


def test_commits_whose_tree_was_collected_cannot_be_used(history):
    from gravfs.version.committed.reader import METARANGES_PREFIX
    from gravfs.version.retention import ExpiredCommitError

    repo, ids, now = history
    old = repo.commits.get(ids["m30"])
    repo.store.delete(METARANGES_PREFIX + old.metarange)  # as a finished sweep leaves it
    with pytest.raises(ExpiredCommitError, match="deleted by garbage collection"):
        repo.create_branch("b", ids["m30"])
    repo.create_branch("side", "main")
    before = repo.head("side")
    with pytest.raises(ExpiredCommitError):
        repo.merge(ids["m30"], "side")
    with pytest.raises(ExpiredCommitError):
        repo.revert("side", ids["m30"])
    assert repo.head("side") == before
    assert "b" not in dict(repo.list_branches())


def test_a_damaged_head_stops_the_selection(history):
    """An emptied branch head was skipped: its commits would have been collected."""
    repo, ids, now = history
    with open(os.path.join(repo.store.url.removeprefix("file://"), "_gravfs", "refs",
                           "branches", "feature"), "wb"):
        pass
    with pytest.raises(CorruptDataError, match="branch 'feature' is damaged"):
        select_commits(repo.store, RetentionRules(7), now)


def test_a_damaged_run_record_is_one_clear_error_and_fsck_reports_it(history, tmp_path):
    """A run's status or kept commits that do not parse were an internal error
    (JSONDecodeError) in fsck, branch creation, log and provenance."""
    from gravfs.fs.fsck import fsck
    from gravfs.version.retention import (check_not_expired, collected_commits, kept_key,
                                          last_sweep, status_key)

    repo, ids, now = history
    _sweeping(repo, "20260101T000000Z-abcdef", [ids["m1"]], now)
    repo.store.put(status_key("20260101T000000Z-abcdef"), b"{torn")
    with pytest.raises(CorruptDataError, match=r"status.json is damaged .*removing "
                                               r"_gravfs/gc/20260101T000000Z-abcdef/"):
        last_sweep(repo.store)
    checked = fsck(repo, progress=False)  # went on past it, reporting it
    assert checked.exit_code != 0 and checked.commits > 1
    assert any("status.json is damaged" in p for p in checked.problems)
    repo.store.put(status_key("20260101T000000Z-abcdef"),
                   b'{"state": "sweeping", "mark_started_ns": %d}' % now)
    repo.store.put(kept_key("20260101T000000Z-abcdef"), b'{"not": "a list"}')
    with pytest.raises(CorruptDataError, match="kept-commits.json is damaged .not a JSON array"):
        check_not_expired(repo.store, repo.commits.get(ids["m20"]))
    repo.store.put(kept_key("20260101T000000Z-abcdef"), b'["%s"]' % ids["m1"].encode())
    swept = last_sweep(repo.store)  # whole again: m20 expired, its tree still there
    assert swept.expired(repo.commits.get(ids["m20"]))
    assert collected_commits(repo.store, swept, [repo.commits.get(ids["m20"])]) == set()
    m20 = repo.commits.get(ids["m20"])
    repo.store.delete("_gravfs/metaranges/" + m20.metarange)  # as the sweep deletes it
    assert collected_commits(repo.store, swept, [m20, repo.commits.get(ids["m1"])]) == {m20.id}


def test_the_last_sweep_is_found_through_its_pointer_and_without_it(history, caplog):
    """A run a day is hundreds of statuses in a year, each read at every provenance
    query: the sweep names itself in LAST_SWEEP_KEY, and a pointer that names no swept
    run, or does not parse, falls back to reading every run's status."""
    import json

    from gravfs.version.retention import (LAST_SWEEP_KEY, kept_key, last_sweep,
                                          name_last_sweep, status_key)

    repo, ids, now = history
    runs = [f"202601{d:02d}T000000Z-abcdef" for d in range(1, 21)]
    for i, run in enumerate(runs):
        repo.store.put(status_key(run), json.dumps({
            "state": "done", "mark_started_ns": now - i, "sweep_started_ns": i}).encode())
        repo.store.put(kept_key(run), json.dumps([ids["m1"]]).encode())
        repo.store.put(f"_gravfs/gc/{run}/report/part-00000.parquet", b"a report")
    reads: list[str] = []
    get = repo.store.get
    repo.store.get = lambda key: reads.append(key) or get(key)  # counts, reads for real
    assert last_sweep(repo.store).run_id == runs[-1]  # no pointer: every status read
    assert len([k for k in reads if k.endswith("status.json")]) == len(runs)
    name_last_sweep(repo.store, runs[-1])
    reads.clear()
    assert last_sweep(repo.store).run_id == runs[-1]
    assert reads == [LAST_SWEEP_KEY, status_key(runs[-1]), kept_key(runs[-1])]
    # a run named before its sweep started (killed then) is passed over
    repo.store.put(status_key(runs[0]), json.dumps({"state": "marked",
                                                    "mark_started_ns": now}).encode())
    name_last_sweep(repo.store, runs[0])
    assert last_sweep(repo.store).run_id == runs[-1]
    repo.store.put(LAST_SWEEP_KEY, b"{torn")
    with caplog.at_level("WARNING"):
        assert last_sweep(repo.store).run_id == runs[-1]
    assert "last-sweep.json does not parse" in caplog.text
