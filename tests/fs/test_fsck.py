"""gravfs fsck: what it reports and its exit status (0 clean, 1 damage, 3 warnings only)."""

from __future__ import annotations

import os

from gravfs.fs.repository import Repository
from tests.foreign_util import FOREIGN_KEYS, commit_keys
from tests.repo_util import run_cli, small_settings


def _repo(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    repo = Repository.init(store, state, settings=small_settings())
    repo.write_file("main", "fine/a.txt", b"a")
    repo.commit("main", "gravfs's own")
    return repo, store, state


def test_fsck_reports_each_foreign_key_as_a_warning(tmp_path):
    """Keys another writer committed that gravfs would refuse were called clean."""
    repo, store, state = _repo(tmp_path)
    rc, out, _ = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 0 and "fsck: clean" in out
    cid = commit_keys(repo, "main", FOREIGN_KEYS).id
    commit_keys(repo, "main", {b"later": b"same foreign keys in a second commit"})
    repo.close()
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 3, (out, err)
    warnings = [l for l in out.splitlines() if l.startswith("warning: ")]
    assert len(warnings) == len(FOREIGN_KEYS)  # each key once, however many commits hold it
    shown = {"%2Fabs": "'/'", "a/%2Fb": "'/'", "d/%2E%2E/up": "'..'", "d/%2E/dot": "'.'",
             "nul%00x": "NUL", "trail%2F": "trailing '/'", "%~": "255 bytes"}
    for name, why in shown.items():
        line = [l for l in warnings if f"foreign key {name}" in l or (name == "%~" and name in l)]
        assert len(line) == 1 and why in line[0], (name, warnings)
        assert " in range " in line[0] and f" of commit {cid[:12]}" in line[0]
    assert "stored as b'nul\\x00x'" in out
    assert "fsck: 7 warning(s)" in out and "clean" not in out


def test_fsck_damage_outranks_warnings(tmp_path):
    repo, store, state = _repo(tmp_path)
    commit_keys(repo, "main", {b"/abs": b"foreign"})
    address = repo.stat("main", "fine/a.txt").entry.address
    repo.close()
    os.unlink(os.path.join(store, address))
    rc, out, _ = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 1
    assert "missing" in out and "warning: foreign key %2Fabs" in out
    assert "1 problem(s), 1 warning(s)" in out


def test_fsck_removes_temp_files_of_killed_store_writers(tmp_path):
    """A writer killed between writing a store object's temp file and its rename left
    the temp file in the store for good; fsck removes those older than an hour."""
    repo, store, state = _repo(tmp_path)
    repo.close()
    data_dir = os.path.join(store, "data")
    some = os.path.join(data_dir, sorted(os.listdir(data_dir))[0])
    stale = os.path.join(some, ".gravfs-tmp.deadbeef.4242.0123456789ab")
    fresh = os.path.join(some, ".gravfs-tmp.cafe.4243.0123456789ab")
    for path in (stale, fresh):
        with open(path, "wb") as f:
            f.write(b"half an upload")
    os.utime(stale, (1, 1))
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 0, (out, err)
    assert "removed 1 temporary file(s) of killed writers" in out
    assert not os.path.exists(stale) and os.path.exists(fresh)  # a live writer's is kept


def test_fsck_removes_probe_keys_a_failed_probe_left(tmp_path):
    """A conditional-write probe that failed midway (an S3 outage) left its key under
    _gravfs/probe/ for good; fsck removes those older than an hour."""
    repo, store, state = _repo(tmp_path)
    repo.store.put("_gravfs/probe/old", b"first")
    repo.store.put("_gravfs/probe/running", b"first")  # a host probing now
    repo.close()
    os.utime(os.path.join(store, "_gravfs", "probe", "old"), (1, 1))
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 0 and "removed 1 probe key(s) of failed probes" in out, (out, err)
    assert sorted(os.listdir(os.path.join(store, "_gravfs", "probe"))) == ["running"]


def test_damaged_refs_are_problems_listed_apart_and_deletable(tmp_path):
    """A branch head emptied or overwritten read as a missing branch: fsck called the
    store clean (the branch was skipped), `log dev` said "ref not found", and garbage
    collection would have taken its commits for unreachable."""
    repo, store, state = _repo(tmp_path)
    repo.create_branch("dev", "main")
    repo.write_file("dev", "staged", b"uncommitted")
    repo.create_branch("bare", "main")
    repo.create_tag("t1", "main")
    repo.close()
    refs = os.path.join(store, "_gravfs", "refs")
    for name in ("dev", "bare"):
        with open(os.path.join(refs, "branches", name), "wb"):
            pass  # emptied
    with open(os.path.join(refs, "tags", "t1"), "wb") as f:
        f.write(b"not a commit\n")
    rc, out, _ = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 1, out
    assert "branch 'dev' is damaged: its object _gravfs/refs/branches/dev holds ''" in out
    assert "tag 't1' is damaged" in out and "'not a commit'" in out
    assert "3 problem(s): 4 refs" in out
    rc, out, err = run_cli("log", "dev", store=store, state=state, check=False)
    assert rc == 7 and "branch 'dev' is damaged" in err and "not found" not in err
    rc, out, err = run_cli("branch", "list", store=store, state=state, check=False)
    assert rc == 7 and out.startswith("main\t") and "dev" not in out
    assert "gravfs: branch 'dev' is damaged" in err
    # its staged change cannot be compared with a head that holds no commit: --force
    rc, _, err = run_cli("branch", "delete", "dev", store=store, state=state, check=False)
    assert rc == 1 and "branch 'dev' has changes staged on this host that cannot be " \
        "compared with its head (branch 'dev' is damaged" in err and "--force" in err, err
    run_cli("branch", "delete", "--force", "dev", store=store, state=state)
    run_cli("branch", "delete", "bare", store=store, state=state)  # nothing staged
    run_cli("tag", "delete", "t1", store=store, state=state)
    rc, out, _ = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 0 and "fsck: clean: 1 refs" in out


def test_a_branch_whose_head_commit_is_missing_says_so(tmp_path):
    repo, store, state = _repo(tmp_path)
    head = repo.head("main")
    repo.close()
    os.unlink(os.path.join(store, "_gravfs", "commits", head))
    rc, _, err = run_cli("ls", "main", store=store, state=state, check=False)
    assert rc == 2 and f"commit {head} not found" in err, err


def test_fsck_warns_of_a_file_hidden_by_a_directory_of_its_name(tmp_path):
    """Another writer's tree with a file at 'a' and keys under 'a/' (or a directory
    marker 'z/'): the mount shows the directory, so fsck names each such file once,
    with the oldest commit holding it, as a warning (the store is sound)."""
    repo, store, state = _repo(tmp_path)
    # enough names between 'a' and 'a/' that the small ranges break between them
    between = {b"a-%03d" % i: b"x%d" % i for i in range(300)}
    cid = commit_keys(repo, "main", {b"a": b"file a", **between, b"a/b": b"under",
                                     b"z": b"file z", b"z.t": b"t"}, dirs=(b"z/",)).id
    commit_keys(repo, "main", {b"later": b"the same hidden files in a second commit"})
    assert len(repo.committed.iter_ranges(repo.commits.get(cid).metarange)) > 2
    repo.close()
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False)
    assert rc == 3, (out, err)
    warnings = sorted(l for l in out.splitlines() if l.startswith("warning: "))
    assert warnings == [
        f"warning: file a is hidden by a directory of its name (holding a/b) in commit "
        f"{cid[:12]}: the mount and gravfs ls show the directory, gravfs cat reads the file",
        f"warning: file z is hidden by a directory of its name (holding z/) in commit "
        f"{cid[:12]}: the mount and gravfs ls show the directory, gravfs cat reads the file"]
    rc, out, _ = run_cli("cat", "main:a", store=store, state=state)
    assert out == "file a"
