"""Garbage collection on Spark (local[2]) over a dated history: branches, a merge, a
tag, a deleted branch, a sparse file, a by-reference entry, staged work, stray
objects. Commits get their dates from GRAVFS_COMMIT_DATE; object ages are set
with utime on the local store (no sleeps).

What is checked: the report lists exactly the objects no kept commit (nor this
host's staging) references and that are older than the cutoff; afterwards those
are gone, every file of every kept commit reads back, fsck --data is clean; a
dry run deletes nothing; the second run reads no range; a commit that dedups
against a dying object while the run is under way keeps its object.
"""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from gravfs.data import sparse
from gravfs.fs.entry import ADDRESS_FULL, KIND_FILE, EntryInfo, decode_entry
from gravfs.fs.fsck import fsck
from gravfs.fs.repository import Repository
from gravfs.spark.gc import gc
from gravfs.version.committed.reader import METARANGES_PREFIX, RANGES_PREFIX
from gravfs.version.committer import StagedContentGoneError
from gravfs.version.retention import DAY_NS, RetentionRules, save_rules
from tests.repo_util import small_settings

pytestmark = pytest.mark.spark

DAY = 86400.0
COLLECTABLE = ("data/", "sparse/", RANGES_PREFIX, METARANGES_PREFIX)


def _date(monkeypatch, now_ns: int, days: float) -> None:
    monkeypatch.setenv("GRAVFS_COMMIT_DATE", str((now_ns - int(days * DAY_NS)) / 1e9))


def build_history(store, state: str, ext_dir: str, monkeypatch) -> dict:
    """The dated history (see the module doc); returns names -> commit ids."""
    now = time.time_ns()
    ids: dict = {}
    with Repository.init(store, state, settings=small_settings()) as repo:
        def commit(branch, name, days, files=(), remove=()):
            _date(monkeypatch, now, days)
            for path, data in files:
                repo.write_file(branch, path, data)
            for path in remove:
                repo.remove(branch, path)
            ids[name] = repo.commit(branch, name).id

        bulk = [(f"dir{d}/f{i:03d}.txt", f"{d}-{i}-v1 ".encode() * 20)
                for d in range(3) for i in range(40)]
        commit("main", "m40", 40, bulk + [("churn.txt", b"churn 40")])
        repo.create_tag("old", ids["m40"])
        commit("main", "m30", 30, [("churn.txt", b"churn 30"), ("gone.txt", b"soon removed")])
        repo.create_branch("feature", "main")
        commit("feature", "f25", 25, [("feat/a.txt", b"feature a v1")])
        commit("feature", "f18", 18, [("feat/a.txt", b"feature a v2")])
        holes = os.path.join(ext_dir, "holes.bin")
        with open(holes, "wb") as f:  # a sparse file: data, a 9 MiB hole, data
            f.write(b"head" * 1000)
            f.seek(9 << 20, 1)
            f.write(b"tail" * 1000)
        with open(holes, "rb") as f:
            commit("main", "m20", 20, [("churn.txt", b"churn 20"), ("holes.bin", f.read())],
                   remove=["gone.txt"])
        commit("main", "m12", 12, [("churn.txt", b"churn 12"), ("holes.bin", b"small now")])
        _date(monkeypatch, now, 10)
        ids["merge"] = repo.merge("feature", "main").id
        repo.create_branch("doomed", "main")
        commit("doomed", "d9", 9, [("doomed.txt", b"only on a deleted branch")])
        repo.delete_branch("doomed")
        commit("main", "m5", 5, [("churn.txt", b"churn 5")])
        # a by-reference entry: its source is outside the store
        src = os.path.join(ext_dir, "external.bin")
        with open(src, "wb") as f:
            f.write(b"outside the store")
        st = os.stat(src)
        repo.stage("main", [(b"byref.bin", EntryInfo(
            address=f"file://{src}", address_type=ADDRESS_FULL, size=st.st_size,
            mtime_ns=st.st_mtime_ns, e_tag=f"{st.st_mtime_ns:x}-{st.st_size:x}",
            kind=KIND_FILE))])
        commit("main", "m1", 1, [("churn.txt", b"churn 1")])
        monkeypatch.delenv("GRAVFS_COMMIT_DATE")
        # uncommitted work of this host: kept although no commit has it
        repo.write_file("feature", "staged.txt", b"staged, not committed")
        # a stray object (an upload whose entry never got staged)
        repo.data.put_bytes(b"stray upload")
        save_rules(repo.store, RetentionRules(7, {"feature": 20}))
    return ids


# main (7 days): m1, m5, merge (first older); feature (20 days): f18, f25 (first
# older); tag old: m40. m30, m20, m12, d9 expire.
KEPT = {"m1", "m5", "merge", "f18", "f25", "m40"}


def _all_objects(repo) -> dict[str, int]:
    out = {}
    for p in COLLECTABLE:
        out.update({i.key: i.size for i in repo.store.list_info(p)})
    return out


def _referenced(repo, commits, staged: bool = True) -> set[str]:
    """Objects the commits' trees (and staging) use, computed without the collector."""
    out: set[str] = set()
    addresses: set[str] = set()
    for cid in commits:
        mr = repo.commits.get(cid).metarange
        out.add(METARANGES_PREFIX + mr)
        for info in repo.committed.iter_ranges(mr):
            out.add(RANGES_PREFIX + info.id)
            for rec in repo.committed.range_records(info.id):
                e = decode_entry(rec[2])
                if e.kind == KIND_FILE and e.address and e.address_type != ADDRESS_FULL:
                    addresses.add(e.address)
    if staged:
        for node in repo.walk("feature"):
            if node.entry is not None and node.entry.address:
                addresses.add(node.entry.address)
    for a in addresses:
        if sparse.is_sparse(a):
            if sparse.zeros_manifest(a) is None:
                out.add(a)
                out.update(x for _, _, x in repo.data.manifest(a).extents)
        else:
            out.add(a)
    return out


def _read_everything(repo, commits) -> int:
    n = 0
    for cid in commits:
        for node in repo.walk(cid):
            if node.entry is not None and node.kind == "file":
                buf = io.BytesIO()
                repo.copy_out(node, buf)
                assert len(buf.getvalue()) == node.entry.size
                n += 1
    return n


def _report_rows(repo, res) -> dict[str, tuple]:
    import pyarrow.parquet as pq
    rows = {}
    for key in res.report_parts:
        t = pq.read_table(io.BytesIO(repo.store.get(key)))
        for a, s, k, w in zip(*(t.column(c).to_pylist() for c in ("address", "size", "kind",
                                                                   "why"))):
            rows[a] = (s, k, w)
    return rows


def _age_store(root: str, seconds: float) -> None:
    t = time.time() - seconds
    for top in ("data", "sparse", "_gravfs"):
        for d, _dirs, files in os.walk(os.path.join(root, top)):
            for name in files:
                os.utime(os.path.join(d, name), (t, t))


@pytest.fixture
def local_history(tmp_path, monkeypatch):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    ext = tmp_path / "ext"
    ext.mkdir()
    ids = build_history(store, state, str(ext), monkeypatch)
    return store, state, ids


def test_gc_deletes_exactly_what_no_kept_commit_references(spark, local_history, tmp_path):
    store, state, ids = local_history
    with Repository.open(store, state) as repo:
        before = _all_objects(repo)
        live = _referenced(repo, [ids[n] for n in KEPT])
        dead = set(before) - live
        assert any(k.startswith("sparse/") for k in dead)  # the old sparse file's manifest
        assert any(k.startswith(RANGES_PREFIX) for k in dead)

        # dry run: the report, nothing deleted
        dry = gc(spark, repo, dry_run=True, min_age=0, report_dir=str(tmp_path / "rep"))
        assert dry.state == "marked" and dry.dry_run
        assert set(_report_rows(repo, dry)) == dead
        assert set(before) <= set(_all_objects(repo))
        local = tmp_path / "rep" / dry.run_id
        assert json.loads((local / "summary.json").read_text())["expired_objects"] == len(dead)
        assert dry.ranges_read == dry.ranges > 0

        res = gc(spark, repo, min_age=0)
        assert res.state == "done"
        assert res.ranges_read == 0  # the dry run's mark cache covers every kept range
        rows = _report_rows(repo, res)
        assert set(rows) == dead
        assert all(rows[a][0] == before[a] for a in dead)
        assert {rows[a][1] for a in dead} == {"data", "sparse-manifest", "range", "metarange"}
        assert res.deleted_objects == len(dead) == res.expired_objects
        after = _all_objects(repo)
        assert set(after) == set(before) - dead
        assert _read_everything(repo, [ids[n] for n in KEPT]) > 100
        assert repo.read("feature", "staged.txt") == b"staged, not committed"
        assert os.path.exists(str(tmp_path / "ext" / "external.bin"))  # by-reference source
        assert repo.read("main", "byref.bin") == b"outside the store"
        report = fsck(repo, check_data=True, progress=False)
        assert report.exit_code == 0, report.problems
        assert report.expired == 4  # m30, m20, m12 and the root: objects stay, trees unchecked

        again = gc(spark, repo, min_age=0)
        assert again.ranges_read == 0 and again.expired_objects == 0
        assert again.deleted_objects == 0


def test_min_age_keeps_young_unreferenced_objects(spark, local_history):
    store, state, ids = local_history
    with Repository.open(store, state) as repo:
        dead = set(_all_objects(repo)) - _referenced(repo, [ids[n] for n in KEPT])
        _age_store(store, 2 * DAY)
        young = repo.data.put_bytes(b"uploaded an hour ago, entry not staged here")[0]
        res = gc(spark, repo, min_age=3 * 3600)
        assert res.young_objects == 1
        assert repo.store.exists(young)
        assert set(_report_rows(repo, res)) == dead
        assert not any(repo.store.exists(k) for k in dead)


def test_concurrent_commit_dedups_against_a_dying_object(spark, local_history, tmp_path):
    """Another host commits, between the mark and the sweep, a file whose content is a
    data object the mark found dead: the writer refreshes it, the sweep keeps it."""
    store, state, ids = local_history
    _age_store(store, 2 * DAY)
    with Repository.open(store, state) as repo:
        dying = repo.stat(ids["m20"], "churn.txt").entry.address
        kept_new = {}

        def other_host_commits(res):
            assert dying in _report_rows(repo, res)
            with Repository.open(store, str(tmp_path / "other-host")) as other:
                other.write_file("main", "revived.txt", b"churn 20")
                kept_new["commit"] = other.commit("main", "revive").id

        res = gc(spark, repo, min_age=3 * 3600, on_report=other_host_commits)
        assert res.state == "done" and res.refreshed_objects >= 1
        assert repo.stat("main", "revived.txt").entry.address == dying
        assert repo.read("main", "revived.txt") == b"churn 20"
        assert fsck(repo, check_data=True, progress=False).exit_code == 0
        # everything else the report named is gone
        gone = [a for a in _report_rows(repo, res) if a != dying]
        assert gone and not any(repo.store.exists(a) for a in gone)


def test_staging_committed_while_the_mark_reads_refs_stays_live(spark, local_history,
                                                                 monkeypatch):
    """A commit that lands between the mark's reads of the refs and of this host's
    staging moves entries from the one into the other: the mark read refs first, so
    it saw them in neither, and with --min-age 0 (a store only this host writes to)
    the head lost their objects. It reads staging first now."""
    import gravfs.spark.gc as gcmod
    store, state, ids = local_history
    with Repository.open(store, state) as repo:
        repo.write_file("main", "late.txt", b"staged before the run, committed in its mark")
        _age_store(store, 2 * DAY)  # (older than the cutoff, as any file staged before)
        select = gcmod.select_commits
        landed = {}

        def select_then_a_commit_lands(*args, **kw):
            sel = select(*args, **kw)
            landed["commit"] = repo.commit("main", "lands during the mark").id
            return sel

        monkeypatch.setattr(gcmod, "select_commits", select_then_a_commit_lands)
        res = gc(spark, repo, min_age=0)
        assert res.state == "done" and res.deleted_objects > 0
        assert repo.head("main") == landed["commit"]
        assert repo.read("main", "late.txt") == b"staged before the run, committed in its mark"
        assert fsck(repo, check_data=True, progress=False).exit_code == 0


def test_a_min_age_under_an_hour_is_refused_while_a_mount_writes_back(spark, local_history,
                                                                      tmp_path):
    """A mount's uploader reuses a stored object without refreshing it unless it is an
    hour old (store.base): a run deleting younger ones while a mount of the store
    runs could take a file's content from under its new commit. A mount starting
    during such a run is refused."""
    import subprocess
    import sys
    from gravfs.errors import GravfsError
    from gravfs.spark.gc import GcRefusedError
    store, state, ids = local_history
    with Repository.open(store, state) as repo:
        _age_store(store, 2 * DAY)
        before = _all_objects(repo)
        repo.data.start_uploader(workers=1)  # what a mount's daemon runs
        try:
            with pytest.raises(GcRefusedError, match=r"a mount of .* runs on this host.*"
                               r"unmount it first, or use --min-age 1h"):
                gc(spark, repo, min_age=0)
            assert _all_objects(repo) == before
            assert not list(repo.store.list("_gravfs/gc/2"))  # no run begun
            assert gc(spark, repo, min_age=3600).state == "done"  # an hour: it runs
            assert gc(spark, repo, dry_run=True, min_age=0).state == "marked"
        finally:
            repo.data.stop_uploader()
        assert not repo.data.writer_running()
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        refused = {}

        def a_mount_starts_meanwhile(res):
            p = subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", store, "--state-dir",
                                state, "mount", str(mnt)], capture_output=True, text=True,
                               timeout=120)
            if p.returncode == 0:  # (never, when it works: not left mounted either way)
                subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
            refused["mount"] = (p.returncode, p.stderr)
            with pytest.raises(GravfsError, match="garbage collection with a minimum age"):
                repo.data.start_uploader(workers=1)

        assert gc(spark, repo, min_age=0, on_report=a_mount_starts_meanwhile).state == "done"
        rc, err = refused["mount"]
        assert rc != 0 and "garbage collection with a minimum age under an hour is " \
            "running on this host for this store" in err, err
        repo.data.start_uploader(workers=1)  # after the run: as ever
        repo.data.stop_uploader()


def test_sweep_only_and_refusals(spark, local_history):
    store, state, ids = local_history
    with Repository.open(store, state) as repo:
        dry = gc(spark, repo, dry_run=True, min_age=0)
        assert all(repo.store.exists(a) for a in _report_rows(repo, dry))
        swept = gc(spark, repo, sweep_only=dry.run_id)
        assert swept.state == "done" and swept.deleted_objects == dry.expired_objects
        assert not any(repo.store.exists(a) for a in _report_rows(repo, dry))
        from gravfs.spark.gc import GcRefusedError, _Run
        r = _Run(repo.store, "20200101T000000Z-abcdef")
        r.save(state="marking")
        with pytest.raises(GcRefusedError, match="did not finish its mark"):
            gc(spark, repo, sweep_only=r.id)
        r.save(state="failed")
        with pytest.raises(GcRefusedError, match="did not finish its mark"):
            gc(spark, repo, sweep_only=r.id)
        assert fsck(repo, check_data=True, progress=False).exit_code == 0


def test_live_set_join_is_never_broadcast(spark):
    """Spark sizes a mapInArrow output by its input, so a live set made from a few
    mark-cache part names looks tiny and would be broadcast: at 10M entries that ran
    the driver out of memory. The join must sort and merge (it spills) instead."""
    import pyarrow as pa

    from gravfs.spark.gc import classify
    parts = spark.createDataFrame(pa.table({"key": pa.array(["part-1", "part-2"])}))

    def addresses(batches):
        for b in batches:
            for key in b.column(0).to_pylist():
                yield pa.RecordBatch.from_pydict(
                    {"address": [f"data/{key}/{i}" for i in range(2000)]})

    live = parts.mapInArrow(addresses, "address: string")
    listed = spark.createDataFrame(pa.table({"address": ["data/part-1/7", "data/dead"],
                                             "size": [1, 2]}))
    joined = classify(listed, live)
    for plan in (joined._jdf.queryExecution().executedPlan().toString(), None):
        if plan is None:  # and as run, after the adaptive planner saw the real sizes
            got = sorted((r.address, r.live) for r in joined.collect())
            assert got == [("data/dead", None), ("data/part-1/7", True)]
            plan = joined._jdf.queryExecution().executedPlan().toString()
        assert "BroadcastHashJoin" not in plan, plan
        assert "SortMergeJoin" in plan, plan


def test_old_staging_of_another_host_is_not_committed_once_gc_took_it(spark, local_history,
                                                                      tmp_path):
    """GC sees only its own host's staging: content staged on another host two days ago
    and never committed is deleted by a run there. That host's commit used to land the
    file without its content; it now refuses, naming it, and goes through once the
    file is written again."""
    store, state, ids = local_history
    with Repository.open(store, str(tmp_path / "other-host")) as other:
        other.write_file("main", "late.txt", b"staged on another host, never committed")
        address = other.stat("main", "late.txt").entry.address
        other.staging.update_state("main", lambda st: setattr(
            st, "since_ns", st.since_ns - int(2 * DAY * 1e9)))
    _age_store(store, 2 * DAY)
    with Repository.open(store, state) as repo:
        res = gc(spark, repo, min_age=3 * 3600)
        assert address in _report_rows(repo, res) and not repo.store.exists(address)
    with Repository.open(store, str(tmp_path / "other-host")) as other:
        other.tier.discard(address)
        head = other.head("main", fresh=True)
        with pytest.raises(StagedContentGoneError, match=r"\(late.txt\) is gone from the store"):
            other.commit("main", "late")
        assert other.head("main", fresh=True) == head
        other.write_file("main", "late.txt", b"staged on another host, never committed")
        other.commit("main", "late, written again")
        assert other.read("main", "late.txt") == b"staged on another host, never committed"
        assert fsck(other, check_data=True, progress=False).exit_code == 0
