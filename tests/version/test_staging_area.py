"""A damaged staging database (LMDB): truncated, emptied, deleted or with a damaged page.

Commands refuse it with one line naming the file and the repair (never SIGBUS,
never a silently empty staging area); ``gravfs fsck --repair-staging`` moves it
aside and keeps in a fresh database what can still be read; ``gravfs mount``
prints the same line and the daemon logs it.
"""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gravfs.fs.entry import EntryInfo
from gravfs.version.config import Workspace
from gravfs.fs.repository import Repository
from gravfs.version.staging.area import PUT, PUT_ID, StagingArea
from gravfs.errors import GravfsError
from gravfs.version.staging.lmdbcheck import check_disk, read_meta, read_metas
from gravfs.version.staging.lmdbread import P_LEAF, SnapshotReader
from gravfs.store import open_store
from tests.fuse_util import fuse_available
from tests.repo_util import run_cli, small_settings

REPAIR_HINT = "run 'gravfs fsck --repair-staging' to set it aside and keep the staged changes"


@pytest.fixture
def staged(tmp_path):
    """A repository whose main branch has 3000 staged files, written in 30 transactions."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    r = Repository.init(store, state, settings=small_settings())
    want = {}
    for b in range(30):
        batch = []
        for i in range(100):
            data = f"{b}-{i}".encode()
            addr, size = r.data.put_bytes(data)
            batch.append((f"d{b:02d}/f{i:03d}".encode(), EntryInfo(address=addr, size=size, mtime_ns=1)))
            want[f"d{b:02d}/f{i:03d}"] = data
        r.stage("main", batch)
    r.close()
    data_file = os.path.join(Workspace.for_store(state, open_store(store).url).staging, "data.mdb")
    return store, state, data_file, want


def _one_line_error(rc, err, data_file, what):
    assert rc == 7, (rc, err)  # not -SIGBUS, not 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (f"gravfs: staging database {data_file} is damaged ({what}); "
                        f"{REPAIR_HINT} that can still be read")


def _staged_files(store, state):
    r = Repository.open(store, state)
    try:
        return {n.path: r.read(n) for n in r.walk("main") if n.kind == "file"}
    finally:
        r.close()


def test_meta_pages_count_the_file_size(staged):
    _, _, data_file, _ = staged
    size, meta, problem = read_meta(data_file)
    assert problem == "" and meta.page_size == os.sysconf("SC_PAGE_SIZE")
    assert meta.needed_bytes <= size and size % meta.page_size == 0
    assert len(read_metas(data_file)) == 2


def test_truncated_staging_database_is_refused_before_lmdb_maps_it(staged):
    store, state, data_file, want = staged
    size = os.path.getsize(data_file)
    _, meta, _ = read_meta(data_file)
    os.truncate(data_file, size // 2)
    what = f"truncated to {size // 2} bytes; its pages need {meta.needed_bytes}"
    for args in (["ls", "main"], ["status", "main"], ["fsck"], ["commit", "main", "-m", "x"]):
        rc, out, err = run_cli(*args, store=store, state=state, check=False)
        _one_line_error(rc, err, data_file, what)

    rc, out, err = run_cli("fsck", "--repair-staging", store=store, state=state)
    lines = out.splitlines()
    aside = lines[0].rsplit("moved to ", 1)[1]
    assert lines[0].startswith(f"staging database {data_file} was damaged ({what}); moved to ")
    assert os.path.getsize(os.path.join(aside, "data.mdb")) == size // 2  # kept as it was
    kept = int(lines[1].split()[1])
    assert lines[-1].startswith("fsck: clean")
    # what was kept reads as it was staged; the rest is reported lost
    files = _staged_files(store, state)
    assert len(files) == kept and all(want[p] == d for p, d in files.items())
    if kept < len(want):
        assert any("lost" in line for line in lines[2:]), lines
    rc, out, _ = run_cli("fsck", "--repair-staging", store=store, state=state)
    assert out.splitlines()[0] == f"staging database {data_file} is healthy; nothing to repair"


@pytest.mark.parametrize("how,what", [("emptied", "the file is empty"),
                                      ("deleted", "the file is missing")])
def test_emptied_or_deleted_staging_database_is_damage_not_a_new_one(staged, how, what):
    store, state, data_file, want = staged
    if how == "emptied":
        os.truncate(data_file, 0)
    else:
        os.unlink(data_file)
    rc, out, err = run_cli("status", "main", store=store, state=state, check=False)
    _one_line_error(rc, err, data_file, what)
    rc, out, err = run_cli("put", "-", "main:x", input=b"x", store=store, state=state, check=False)
    _one_line_error(rc, err, data_file, what)
    _, out, _ = run_cli("fsck", "--repair-staging", store=store, state=state)
    assert "kept 0 staged entries" in out and "the staged changes it held are lost" in out
    assert _staged_files(store, state) == {}
    run_cli("put", "-", "main:x", input=b"x", store=store, state=state)  # usable again


def _leaf_pages(data_file):
    with SnapshotReader(data_file, read_metas(data_file)[0]) as reader:
        leaves = []
        page = reader.page

        def spy(pgno, kinds):
            buf = page(pgno, kinds)
            if buf is not None and buf[10] & P_LEAF:
                leaves.append(pgno)
            return buf

        reader.page = spy
        n = sum(1 for _ in reader.items(reader.named_dbs()[b"entries"]))
        return leaves, n


def _put_kinds(store: str, state: str) -> set[bytes]:
    """The marker bytes of the staged entries of a repository."""
    r = Repository.open(store, state)
    try:
        with r.staging.read_txn() as txn:
            return {raw[:1] for _, raw in txn.cursor(db=r.staging.entries_db)}
    finally:
        r.close()


def test_repair_keeps_every_entry_a_damaged_page_did_not_hold(staged):
    store, state, data_file, want = staged
    assert _put_kinds(store, state) == {PUT_ID}
    leaves, n = _leaf_pages(data_file)
    assert n == len(want) and len(leaves) > 10
    _, meta, _ = read_meta(data_file)
    with open(data_file, "r+b") as f:  # zero one leaf in the middle of the entries
        f.seek(leaves[len(leaves) // 2] * meta.page_size)
        f.write(bytes(meta.page_size))
    # the file check cannot see this; the repair reads every page
    _, out, _ = run_cli("fsck", "--repair-staging", store=store, state=state)
    lines = out.splitlines()
    assert "1 page(s) cannot be read" in lines[0]
    kept = int(lines[1].split()[1])
    assert len(want) - 200 < kept < len(want)
    assert lines[2].startswith("1 page(s) could not be read: the staged changes they held are lost")
    files = _staged_files(store, state)
    assert len(files) == kept and all(want[p] == d for p, d in files.items())
    # the puts were staged with their record IDs; the repair cannot check those (a long
    # path's entry key is not its path), so it keeps the puts without them
    assert _put_kinds(store, state) == {PUT}
    # and they commit
    run_cli("commit", "main", "-m", "after repair", store=store, state=state)
    r = Repository.open(store, state)
    assert {n.path for n in r.walk(r.head("main")) if n.kind == "file"} == set(files)
    r.close()


def test_repair_keeps_long_paths(staged):
    """Paths over LMDB's key limit are staged under a hashed key with the path in the
    long_paths table: a repair copies those records with their entries."""
    store, state, data_file, want = staged
    r = Repository.open(store, state)
    longs = {}
    for i in range(5):
        path = "deep/" + "/".join([f"level{i}-" + "x" * 90] * 7) + f"/f{i}"
        addr, size = r.data.put_bytes(path.encode()[-40:])
        r.stage("main", [(path.encode(), EntryInfo(address=addr, size=size, mtime_ns=1))])
        longs[path] = path.encode()[-40:]
    addr, size = r.data.put_bytes(b"last")  # the repair may go back one transaction
    r.stage("main", [(b"zz-last", EntryInfo(address=addr, size=size, mtime_ns=1))])
    since = r.staging.get_state("main").since_ns
    assert since is not None
    r.close()
    assert all(len(p.encode()) > 600 for p in longs)
    leaves, n = _leaf_pages(data_file)
    _, meta, _ = read_meta(data_file)
    with open(data_file, "r+b") as f:  # zero the first leaf of entries: d00/...
        f.seek(leaves[0] * meta.page_size)
        f.write(bytes(meta.page_size))
    _, out, _ = run_cli("fsck", "--repair-staging", store=store, state=state)
    assert "1 page(s) cannot be read" in out.splitlines()[0]
    files = _staged_files(store, state)
    assert {p: files.get(p) for p in longs} == longs, out
    assert "long paths" not in out  # none was dropped
    # the branch keeps the age of its staging (a commit of it claims what it references)
    r = Repository.open(store, state)
    try:
        assert r.staging.get_state("main").since_ns == since
    finally:
        r.close()


def test_repair_refuses_a_database_in_use(staged):
    store, state, data_file, _ = staged
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from gravfs.fs.repository import Repository; "
         f"r = Repository.open({store!r}, {state!r}); print('open', flush=True); sys.stdin.read()"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"open\n"
        rc, out, err = run_cli("fsck", "--repair-staging", store=store, state=state, check=False)
        assert rc == 1 and "is in use by another process" in err and out == ""
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    rc, out, _ = run_cli("fsck", "--repair-staging", store=store, state=state)
    assert "healthy; nothing to repair" in out


@pytest.mark.skipif(not fuse_available(), reason="needs /dev/fuse")
def test_mount_on_a_damaged_staging_database_says_why(staged, tmp_path):
    from gravfs.fuse.launch import log_path
    store, state, data_file, _ = staged
    size = os.path.getsize(data_file)
    os.truncate(data_file, size // 2)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    rc, out, err = run_cli("mount", str(mnt), store=store, state=state, check=False)
    _, meta, _ = read_meta(data_file)
    what = f"truncated to {size // 2} bytes; its pages need {meta.needed_bytes}"
    _one_line_error(rc, err, data_file, what)
    assert not os.path.ismount(mnt)
    with open(log_path(state, str(mnt))) as f:
        log = f.read()
    assert f"mount failed: staging database {data_file} is damaged ({what})" in log


def test_the_map_is_reserved_up_front_also_for_older_databases(tmp_path):
    """Every process maps room for billions of entries, so none ever needs to remap
    while it runs; a database made with a small map gets the large one when opened."""
    import lmdb

    from gravfs.version.staging import area as area_mod
    old = str(tmp_path / "old")
    env = lmdb.open(old, map_size=1 << 30, max_dbs=4)
    env.close()
    a = area_mod.StagingArea(old)
    try:
        assert a.env.info()["map_size"] >= area_mod._INITIAL_MAP >= 1 << 38
        a.put_many("main", [(b"k", b"v")], "c0")
    finally:
        a.close()
    r = area_mod.StagingArea(old, readonly=True)
    try:
        assert r.env.info()["map_size"] >= 1 << 38
    finally:
        r.close()


def test_a_branch_state_is_parsed_once_per_stored_value_and_handed_out_as_copies(
        tmp_path, monkeypatch):
    """Reading a branch's state (every lookup that misses the mount's caches does)
    parses its JSON once per value another process stored; each caller gets its own
    copy, and a new stored value is parsed again."""
    from gravfs.version.staging import area as area_mod
    path = str(tmp_path / "lmdb")
    ours = area_mod.StagingArea(path)
    ours.put_many("main", [(b"k", b"v")], "c0")
    code = ("import sys, gravfs.version.staging.area as a; s = a.StagingArea(sys.argv[1]); "
            "s.put_many('main', [(b'other', b'v')], 'c0')")
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    subprocess.run([sys.executable, "-c", code, path], check=True, cwd=cwd)
    loads = []
    real = area_mod.BranchState.load
    monkeypatch.setattr(area_mod.BranchState, "load",
                        classmethod(lambda cls, raw: loads.append(raw) or real(raw)))
    try:
        states = []
        for _ in range(3):
            with ours.read_txn() as txn:
                states.append(ours.state(txn, "main"))
        assert len(loads) == 1  # the other process's value, parsed once
        assert states[0] == states[1] == states[2] and states[0].puts == 2
        states[0].sealed.append("changed")  # a caller's copy is its own
        with ours.read_txn() as txn:
            assert ours.state(txn, "main").sealed == []
        subprocess.run([sys.executable, "-c", code.replace("b'other'", "b'third'"), path],
                       check=True, cwd=cwd)
        with ours.read_txn() as txn:
            assert ours.state(txn, "main").puts == 3
        assert len(loads) == 2
    finally:
        ours.close()


def test_a_branch_with_nothing_stored_keeps_one_fresh_token_until_a_state_is_saved(tmp_path):
    """Reads of a branch with nothing staged share one fresh token (no random token
    per lookup); once a state is saved and the branch dropped, its fresh token is a
    new one: a token that was stored is never handed out as fresh again."""
    from gravfs.version.staging.area import StagingArea
    area = StagingArea(str(tmp_path / "lmdb"))
    try:
        with area.read_txn() as txn:
            a, b = area.state(txn, "main"), area.state(txn, "main")
            other = area.state(txn, "dev")
        assert a.staging == b.staging and a is not b and other.staging != a.staging
        assert area.stored_state("main") is None  # reading stored nothing
        area.put_many("main", [(b"k", b"v")], "c0")
        stored = area.stored_state("main")
        assert stored is not None and stored.staging == a.staging  # the writer used it
        area.write(lambda txn: area.drop_branch(txn, "main"))
        with area.read_txn() as txn:
            again = area.state(txn, "main")
            assert area.lookup(txn, again.tokens(), b"k") is None
        assert again.staging != a.staging
    finally:
        area.close()


def test_a_map_another_process_outgrew_is_a_clear_error(tmp_path, monkeypatch):
    """(With maps made small for the test.) Another process grows the database past
    this process's map: this process's transactions fail with one clear error that
    says what to do, and nothing staged is lost."""
    from gravfs.errors import GravfsError
    from gravfs.version.staging import area as area_mod
    path = str(tmp_path / "lmdb")
    monkeypatch.setattr(area_mod, "_INITIAL_MAP", 1 << 20)
    ours = area_mod.StagingArea(path)
    ours.put_many("main", [(b"first", b"1")], "c0")
    code = ("import sys, gravfs.version.staging.area as a; a._INITIAL_MAP = 1 << 20; "
            "s = a.StagingArea(sys.argv[1]); "
            "[s.put_many('main', [(b'k%06d' % (i * 100 + j), b'x' * 400) for j in range(100)], 'c0') "
            "for i in range(60)]; print(s.env.info()['map_size'])")
    out = subprocess.run([sys.executable, "-c", code, path], check=True, capture_output=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert int(out.stdout) > 1 << 20
    for attempt in (lambda: ours.read_txn(), lambda: ours.put_many("main", [(b"x", b"1")], "c0")):
        with pytest.raises(GravfsError, match="grew past this process's map .* restart this process"):
            attempt()
    ours.close()
    fresh = area_mod.StagingArea(path)
    try:
        with fresh.read_txn() as txn:
            assert sum(1 for _ in fresh.iter_token(txn, fresh.state(txn, "main").staging)) == 6001
    finally:
        fresh.close()


def test_a_database_another_process_grows_is_never_called_cut_short(tmp_path):
    """The check before opening runs while the daemon commits (every CLI command on
    a mounted workspace): a file growing meanwhile is not damage. (Reading the size
    before the meta pages called it cut short about once in 250 checks here.)"""
    from gravfs.version.staging.area import StagingArea
    from gravfs.version.staging.lmdbcheck import check_data_file
    path = str(tmp_path / "lmdb")
    StagingArea(path, sync=False).close()
    code = ("import sys, gravfs.version.staging.area as a; s = a.StagingArea(sys.argv[1], sync=False); "
            "print('ready', flush=True); "
            "[s.put_many('main', [(b'k%06d' % (i * 20 + j), b'x' * 3000) for j in range(20)], None) "
            "for i in range(800)]")
    writer = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert writer.stdout.readline() == b"ready\n"
        checks, problems = 0, []
        while writer.poll() is None:
            problem = check_data_file(path)
            checks += 1
            if problem:
                problems.append(problem)
        assert writer.returncode == 0
    finally:
        writer.kill()
        writer.wait()
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    assert size > 50 * 3000 * 20 and checks > 1000, (size, checks)  # it grew while checked
    assert problems == [], f"{len(problems)} of {checks} checks: {problems[:3]}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), data=st.data(),
       empty_at=st.sampled_from([1, 10, 10_000]))
def test_dropping_tokens_leaves_exactly_the_other_tokens(tmp_path_factory, monkeypatch, sizes,
                                                         data, empty_at):
    """Emptying the table and putting the rest back (when the dropped tokens hold
    nearly all of it), or one delete per key: either way every entry of the other
    tokens stays, long paths and import records included, and nothing else does."""
    from gravfs.version.staging import area as area_mod

    monkeypatch.setattr(area_mod, "EMPTY_AT", empty_at)
    a = area_mod.StagingArea(str(tmp_path_factory.mktemp("drop")))
    try:
        tokens = [area_mod.new_token() for _ in sizes]
        tokens[0] = "ff" * 8 if data.draw(st.booleans()) else tokens[0]  # no key above it
        want = {}
        for t, n in zip(tokens, sizes):
            paths = [b"p/%03d" % i for i in range(n)] + ([b"L" * 700] if n % 3 == 1 else [])
            want[t] = {p: area_mod.put_raw(p, p) for p in paths}
            a.put_token(t, [(p, p) for p in paths])
            a.write(lambda txn, t=t: a.put_import(txn, t, {"branch": "b"}))
        gone = data.draw(st.lists(st.sampled_from(tokens), unique=True))
        expected = data.draw(st.integers(0, sum(sizes) + 5))  # a hint, right or wrong
        dropped = a.write(lambda txn: a.drop_tokens(txn, gone, expected))
        assert dropped == sum(len(want[t]) for t in gone)
        with a.read_txn() as txn:
            for t in tokens:
                got = dict(a.iter_token(txn, t))
                assert got == ({} if t in gone else want[t])
            assert set(a.import_records(txn)) == set(tokens) - set(gone)
            kept = sum(len(want[t]) for t in tokens if t not in gone)
            assert txn.stat(a.entries_db)["entries"] == kept
    finally:
        a.close()


def test_a_bulk_token_is_dropped_by_emptying_the_table(tmp_path, monkeypatch, caplog):
    from gravfs.version.staging import area as area_mod

    monkeypatch.setattr(area_mod, "EMPTY_AT", 50)
    a = area_mod.StagingArea(str(tmp_path / "s"))
    try:
        bulk, small = area_mod.new_token(), area_mod.new_token()
        a.put_token(bulk, [(b"f%04d" % i, b"v") for i in range(400)])
        a.put_token(small, [(b"g%d" % i, b"w") for i in range(40)])
        with caplog.at_level("DEBUG", logger=area_mod.__name__):
            assert a.write(lambda txn: a.drop_tokens(txn, [small], 40)) == 40  # 40 of 440: per key
            assert a.write(lambda txn: a.drop_tokens(txn, [bulk])) == 400  # no hint: per key
            assert "emptying" not in caplog.text
            a.put_token(bulk, [(b"f%04d" % i, b"v") for i in range(400)])
            a.put_token(small, [(b"g%d" % i, b"w") for i in range(40)])
            assert a.write(lambda txn: a.drop_tokens(txn, [bulk], 400)) == 400
            assert "dropped 400 staged entries by emptying the table (40 put back)" in caplog.text
        with a.read_txn() as txn:
            assert len(dict(a.iter_token(txn, small))) == 40
            assert a.token_is_empty(txn, bulk)
    finally:
        a.close()


def test_a_put_is_stored_with_its_record_id_unless_its_value_does_not_decode():
    from gravfs.version.committed.record import encode_value, value_record_id
    from gravfs.version.staging import area as area_mod
    for ident in (b"\x07" * 32, b"short id"):
        value = encode_value(ident, b"data")
        raw = area_mod.put_raw(b"a/b", value)
        assert raw == PUT_ID + value_record_id(b"a/b", ident) + value
        assert area_mod.staged_value(raw) == value
        assert area_mod.staged_value(area_mod.PROVISIONAL + value) == value
    junk = b"v"  # no lakeFS value: stored as before record IDs; its commit reports it
    assert area_mod.put_raw(b"a/b", junk) == PUT + junk
    assert area_mod.staged_value(PUT + junk) == junk


def test_the_change_counter_is_lmdbs_last_transaction_id_from_any_thread_state(tmp_path):
    """The counter the mount's stat cache and watcher compare: LMDB's last committed
    transaction id, one more per write, also when asked inside a write transaction on
    the same thread (which it does not see) or after another process wrote."""
    from gravfs.version.staging.area import StagingArea
    area = StagingArea(str(tmp_path / "lmdb"))
    try:
        start = area.change_counter()
        assert start == area.env.info()["last_txnid"]
        area.put_many("main", [(b"k", b"v")], "c0")
        assert area.change_counter() == start + 1
        seen = []

        def drop(txn):
            area.drop_branch(txn, "main")
            seen.append(area.change_counter())

        area.write(drop)
        assert seen == [start + 1] and area.change_counter() == start + 2
        code = ("import sys, gravfs.version.staging.area as a; "
                "a.StagingArea(sys.argv[1]).put_many('dev', [(b'x', b'y')], 'c0')")
        subprocess.run([sys.executable, "-c", code, str(tmp_path / "lmdb")], check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert area.change_counter() == start + 3 == area.env.info()["last_txnid"]
    finally:
        area.close()


def test_a_branch_state_reads_across_versions(tmp_path):
    """A mount daemon of an earlier gravfs kept running beside newer commands: the JSON
    of a branch state holds only the fields it knows (the staging's age has its own
    table; in the JSON it made that daemon answer EIO on the branch), and a state a
    later gravfs wrote with fields unknown here still reads."""
    area = StagingArea(str(tmp_path / "staging"))
    try:
        area.put_many("main", [(b"a", None)], base=None)
        st = area.get_state("main")
        assert st.since_ns is not None
        with area.read_txn() as txn:
            raw = txn.get(b"main", db=area.branches_db)
        stored = json.loads(raw)
        assert set(stored) == {"staging", "sealed", "base", "compacted", "pending", "puts",
                               "tombstones", "provisional"}
        later = json.dumps({**stored, "a_later_field": [1, 2]}).encode()
        area.write(lambda txn: txn.put(b"main", later, db=area.branches_db))
        again = area.get_state("main")
        assert again.staging == st.staging and again.since_ns == st.since_ns
    finally:
        area.close()


def test_a_staging_database_on_a_network_filesystem_is_refused(tmp_path, monkeypatch):
    """A non-root user's default state dir is in their home, on NFS on many clusters:
    LMDB's lock table is shared memory in a file, which hosts do not share, and two
    hosts staging in one state dir would corrupt it. Refused, naming what to do."""
    info = (f"27 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
            f"40 27 0:50 / {tmp_path} rw - nfs4 srv:/home rw\n")
    with pytest.raises(GravfsError) as exc:
        check_disk(str(tmp_path / "state" / "staging"), info)
    said = str(exc.value)
    assert f"network filesystem (nfs4 at {tmp_path})" in said and "GRAVFS_STATE_DIR" in said
    check_disk(str(tmp_path / "state"), info.replace("nfs4", "xfs"))  # a local disk
    # the staging area asks before LMDB opens anything there
    import gravfs.mounts as mounts_mod
    real = mounts_mod.mounts
    monkeypatch.setattr(mounts_mod, "mounts", lambda text=None: real(text or info))
    with pytest.raises(GravfsError, match="network filesystem"):
        StagingArea(str(tmp_path / "state" / "staging"))
    assert not (tmp_path / "state" / "staging" / "data.mdb").exists()
