"""`gravfs import` when it is interrupted, and on a branch with uncommitted changes.

An import stages into a token of its own that no branch reads until the import
commits, so a killed import leaves the branch as it was; the next import of the
same source resumes it, an import of another source drops it. Kills are real:
crash points (os._exit in the process) and SIGKILL of a running `gravfs import`.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from gravfs.fs.entry import EntryInfo, decode_entry
from gravfs.version.staging.view import decode_staged
from gravfs.version.committer import Committer
from gravfs.errors import GravfsError
from gravfs.faults import CRASH_EXIT_CODE
from gravfs.fs.importer import ImportJob
from gravfs.fs.repository import Repository, encode_items as _encode_items
from tests.fuse_util import wait_for
from tests.repo_util import run_cli, small_settings


def _tree(root, n: int, tag: str = "") -> dict:
    """n small files in 10 directories; returns {relative path: bytes}."""
    want = {}
    for i in range(n):
        rel = f"d{i % 10}/f{i:05d}"
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        data = f"{tag}{i}\n".encode()
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        want[rel] = data
    return want


@pytest.fixture
def env(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    return store, state


def _files(repo, ref, under=""):
    return {n.path: repo.read(n) for n in repo.walk(ref, under) if n.kind == "file"}


def _import_proc(store, state, *args, crash=None, wait=True):
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
    env.pop("GRAVFS_CRASH_AT", None)
    if crash:
        env["GRAVFS_CRASH_AT"] = crash
    cmd = [sys.executable, "-m", "gravfs.cli", "import", "-q", *args]
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return subprocess.run(cmd, env=env, capture_output=True, timeout=300)


def _import_records(store, state, repo=None):
    """token -> (record, entries) of every import staging outside its branch."""
    r = repo or Repository.open(store, state)
    try:
        with r.staging.read_txn() as txn:
            recs = r.staging.import_records(txn)
            return {t: (rec, sum(1 for _ in r.staging.iter_token(txn, t))) for t, rec in recs.items()}
    finally:
        if repo is None:
            r.close()


def test_killed_import_is_invisible_then_resumed(env, tmp_path):
    store, state = env
    big = _tree(str(tmp_path / "big"), 300)
    r = Repository.open(store, state)
    head = r.head("main")
    r.close()
    p = _import_proc(store, state, str(tmp_path / "big"), "main:big", crash="import:staged")
    assert p.returncode == CRASH_EXIT_CODE, p.stderr
    (rec, n), = _import_records(store, state).values()
    assert n == 300 and rec["branch"] == "main" and rec["source"] == str(tmp_path / "big")

    r = Repository.open(store, state)
    assert r.head("main") == head and r.status("main") == [] and _files(r, "main") == {}
    r.close()
    _, out, err = run_cli("status", "main", store=store, state=state)
    assert "nothing to commit" in out

    # a commit of the branch does not take the import's entries
    rc, _, err = run_cli("commit", "main", "-m", "x", store=store, state=state, check=False)
    assert rc == 1 and "nothing to commit" in err
    assert len(_import_records(store, state)) == 1  # still there for the next run

    # the same import again resumes: nothing is read again, everything lands
    _, out, _ = run_cli("import", "-q", str(tmp_path / "big"), "main:big", store=store, state=state)
    assert "Resumed an interrupted import: 300 file(s) were uploaded already" in out
    r = Repository.open(store, state)
    assert _files(r, "main", "big") == {f"big/{k}": v for k, v in big.items()}
    assert r.status("main") == []
    r.close()
    assert _import_records(store, state) == {}
    locks = os.listdir(os.path.join(Repository.open(store, state).workspace.locks))
    assert not [n for n in locks if n.startswith("import-")], locks


def test_resumed_old_import_uploads_again_what_gc_took(env, tmp_path):
    """An import resumed more than an hour after its first run claims what that run
    uploaded: content garbage collection on another host deleted meanwhile (the
    import's token is this host's staging, unseen there) is uploaded again; before,
    the resumed import committed files whose content was gone."""
    store, state = env
    src = tmp_path / "src"
    want = _tree(str(src), 20)
    p = _import_proc(store, state, str(src), "main:x", crash="import:staged")
    assert p.returncode == CRASH_EXIT_CODE, p.stderr
    r = Repository.open(store, state)
    try:
        (token, (rec, _)), = _import_records(store, state, r).items()
        rec["time"] -= 26 * 3600  # begun a day ago
        r.staging.write(lambda txn: r.staging.put_import(txn, token, rec))
        with r.staging.read_txn() as txn:
            addresses = sorted({decode_entry(decode_staged(raw)[1]).address
                                for _, raw in r.staging.iter_token(txn, token)})
    finally:
        r.close()
    for a in addresses[:3]:  # what GC elsewhere deleted
        os.unlink(os.path.join(store, a))
    _, out, err = run_cli("import", "-q", str(src), "main:x", store=store, state=state)
    assert "17 file(s) were uploaded already" in out
    assert "gone from the store (garbage collection); uploading it again" in err
    r = Repository.open(store, state)
    try:
        assert _files(r, "main", "x") == {f"x/{k}": v for k, v in want.items()}
        assert all(os.path.exists(os.path.join(store, a)) for a in addresses)
    finally:
        r.close()


def test_sigkill_mid_import_then_resume_picks_up_changes(env, tmp_path):
    """kill -9 once entries are staged; the source changes before the next run: changed
    and new files are uploaded, removed ones leave the import, unchanged ones are reused."""
    store, state = env
    src = str(tmp_path / "big")
    want = _tree(src, 6000)
    proc = _import_proc(store, state, src, "main:big", wait=False)
    try:
        staged = wait_for(lambda: next((n for _, n in _import_records(store, state).values()
                                         if n > 0), 0), timeout=120, interval=0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert 0 < staged < 6000
    r = Repository.open(store, state)
    assert r.status("main") == [] and _files(r, "main") == {}
    r.close()

    (rec, n), = _import_records(store, state).values()
    staged_rel = sorted(k.decode()[len("big/"):] for k in _token_keys(store, state))
    changed, removed = staged_rel[0], staged_rel[1]
    with open(os.path.join(src, changed), "wb") as f:
        f.write(b"a new and longer content\n")
    want[changed] = b"a new and longer content\n"
    os.unlink(os.path.join(src, removed))
    del want[removed]
    with open(os.path.join(src, "added"), "wb") as f:
        f.write(b"added\n")
    want["added"] = b"added\n"

    _, out, _ = run_cli("import", "-q", src, "main:big", store=store, state=state)
    assert "Resumed an interrupted import" in out
    reused = int(out.split("import: ")[1].split()[0])
    assert reused == n - 2 - sum(1 for k in staged_rel if k.endswith("/"))
    r = Repository.open(store, state)
    assert _files(r, "main", "big") == {f"big/{k}": v for k, v in want.items()}
    assert r.status("main") == []
    r.close()


def _temp_files(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
            if f.startswith(".gravfs-tmp")]


def _interrupt_mid_upload(store: str, state: str, src: str):
    """(exit code, stderr) of an import sent SIGINT while unpublished uploads exist, or
    None if it finished first. Seen uploads are made sure of with the process stopped
    (SIGSTOP: it publishes nothing meanwhile); a scan that comes too late (a loaded
    machine: the suite's run saw none and signalled a finished import) is no answer."""
    data = os.path.join(store, "data")
    proc = _import_proc(store, state, src, "main:big", wait=False)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if _temp_files(data):
                proc.send_signal(signal.SIGSTOP)
                if _temp_files(data):
                    proc.send_signal(signal.SIGINT)
                    proc.send_signal(signal.SIGCONT)
                    _, err = proc.communicate(timeout=120)
                    return proc.returncode, err.decode()
                proc.send_signal(signal.SIGCONT)
            time.sleep(0.005)
        return None
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_mid_import_leaves_no_temp_objects_and_resumes(tmp_path):
    """SIGINT while files are uploaded: the uploads not yet published (on a local store
    they wait for one sync a batch) are removed, not left for fsck; the next run
    resumes and commits everything."""
    src = str(tmp_path / "big")
    want = _tree(src, 20000)
    for attempt in range(3):  # an import that outran every scan is tried afresh
        store, state = str(tmp_path / f"store{attempt}"), str(tmp_path / f"state{attempt}")
        Repository.init(store, state, settings=small_settings()).close()
        got = _interrupt_mid_upload(store, state, src)
        if got is not None:
            break
    assert got is not None, "the import finished before its uploads were seen, three times"
    code, err = got
    assert code == 130 and err.strip() == "gravfs: interrupted", err
    assert _temp_files(store) == []
    r = Repository.open(store, state)
    assert r.status("main") == [] and _files(r, "main") == {}
    r.close()
    run_cli("import", "-q", src, "main:big", store=store, state=state)
    r = Repository.open(store, state)
    assert _files(r, "main", "big") == {f"big/{k}": v for k, v in want.items()}
    r.close()


def _token_keys(store, state):
    r = Repository.open(store, state)
    try:
        with r.staging.read_txn() as txn:
            (token,) = r.staging.import_records(txn)
            return [k for k, _ in r.staging.iter_token(txn, token)]
    finally:
        r.close()


def test_import_of_another_source_drops_a_dead_import_but_not_a_live_one(env, tmp_path):
    store, state = env
    _tree(str(tmp_path / "a"), 40, "a")
    _tree(str(tmp_path / "b"), 3, "b")
    # a live import of this workspace (this process holds its lock)
    r = Repository.open(store, state)
    live = ImportJob(r, "main", str(tmp_path / "live"), b"live")
    live.claim(r.head("main"))
    addr, size = r.data.put_bytes(b"live")
    r.staging.put_token(live.token, _encode_items([(b"live/x", EntryInfo(address=addr, size=size,
                                                                             mtime_ns=1))]))
    p = _import_proc(store, state, str(tmp_path / "a"), "main:a", crash="import:staged")
    assert p.returncode == CRASH_EXIT_CODE, p.stderr
    assert len(_import_records(store, state, r)) == 2
    _, out, _ = run_cli("import", "-q", str(tmp_path / "b"), "main:b", store=store, state=state)
    assert "Dropped 40 staged entries of an interrupted import of another source into main" in out
    # its commit holds its own files only
    _, out, _ = run_cli("diff", "main~1", "main", store=store, state=state)
    assert sorted(line.split()[-1] for line in out.splitlines()) == [
        f"b/d{i}/f{i:05d}" for i in range(3)]
    recs = _import_records(store, state, r)
    assert list(recs) == [live.token] and recs[live.token][1] == 1
    # the live import still commits, on top of the other one
    c, staged = Committer(r).commit_import("main", live.token, live.base, "live", "t", {}, False)
    live.close()
    assert staged == 0 and set(_files(r, c.id)) == {"live/x", *(f"b/d{i}/f{i:05d}" for i in range(3))}
    r.close()
    assert _import_records(store, state) == {}


def test_import_onto_uncommitted_changes_refuses_or_includes_them(env, tmp_path):
    store, state = env
    _tree(str(tmp_path / "src"), 4)
    (tmp_path / "local").write_bytes(b"staged\n")
    run_cli("put", str(tmp_path / "local"), "main:mine", store=store, state=state)
    rc, out, err = run_cli("import", "-q", str(tmp_path / "src"), "main:raw", store=store,
                           state=state, check=False)
    assert rc == 1 and out == ""
    assert err.strip() == ("gravfs: branch 'main' has uncommitted changes; commit or reset them "
                           "first, or use --include-staged to commit them with the import")
    assert _import_records(store, state) == {}  # refused before anything was uploaded
    _, out, _ = run_cli("import", "-q", "--include-staged", str(tmp_path / "src"), "main:raw",
                        store=store, state=state)
    assert "The commit also holds 1 change(s) that were staged on main" in out
    r = Repository.open(store, state)
    assert r.status("main") == []
    assert set(_files(r, "main")) == {"mine", *(f"raw/d{i}/f{i:05d}" for i in range(4))}
    # a file written and removed again is nothing to commit: no refusal
    r.write_file("main", "scratch", b"x")
    r.remove("main", "scratch")
    r.close()
    _, out, _ = run_cli("import", "-q", str(tmp_path / "src"), "main:raw2", store=store,
                        state=state)
    r = Repository.open(store, state)
    assert "raw2/d0/f00000" in _files(r, "main") and r.status("main") == []
    r.close()


@pytest.mark.parametrize("point", ["commit:applied", "commit:object-written",
                                   "commit:pending-recorded", "commit:head-moved", "sst:written"])
def test_import_killed_while_committing(env, tmp_path, point):
    """The branch is at the old commit or holds the whole import; its staging never
    shows the import; the next run lands it (or finds it landed)."""
    store, state = env
    want = _tree(str(tmp_path / "src"), 50)
    r = Repository.open(store, state)
    old = r.head("main")
    r.close()
    p = _import_proc(store, state, str(tmp_path / "src"), "main:raw", crash=point)
    assert p.returncode == CRASH_EXIT_CODE, p.stderr
    r = Repository.open(store, state)
    landed = r.head("main") != old
    assert landed == (point == "commit:head-moved")
    assert _files(r, "main") == ({f"raw/{k}": v for k, v in want.items()} if landed else {})
    assert r.status("main") == []
    r.close()
    rc, out, err = run_cli("import", "-q", str(tmp_path / "src"), "main:raw", store=store,
                           state=state, check=False)
    if landed:
        assert rc == 1 and "nothing to commit" in err
    else:
        assert rc == 0 and "Resumed an interrupted import: 50 file(s)" in out, err
    r = Repository.open(store, state)
    assert _files(r, "main") == {f"raw/{k}": v for k, v in want.items()}
    assert r.status("main") == []
    r.close()
    assert _import_records(store, state) == {}
    _, out, _ = run_cli("fsck", store=store, state=state)
    assert "clean" in out


def test_import_replaces_the_prefix(env, tmp_path):
    """What the branch holds under PREFIX and the source lacks is removed in the import's
    commit (a file at PREFIX itself too); paths outside PREFIX stay."""
    store, state = env
    old = _tree(str(tmp_path / "old"), 12, "old")
    new = _tree(str(tmp_path / "new"), 5, "new")
    run_cli("import", "-q", str(tmp_path / "old"), "main:raw", store=store, state=state)
    run_cli("import", "-q", str(tmp_path / "old"), "main:raw2", store=store, state=state)
    (tmp_path / "x").write_bytes(b"a file where the import's directory goes\n")
    run_cli("put", str(tmp_path / "x"), "main:raw2/sub", store=store, state=state)
    run_cli("commit", "main", "-m", "file", store=store, state=state)
    run_cli("import", "-q", str(tmp_path / "new"), "main:raw", store=store, state=state)
    run_cli("import", "-q", str(tmp_path / "new"), "main:raw2/sub", store=store, state=state)
    r = Repository.open(store, state)
    try:
        assert _files(r, "main", "raw") == {f"raw/{k}": v for k, v in new.items()}
        # raw2/sub was a file: replaced by the imported directory; raw2's other files stay
        assert _files(r, "main", "raw2") == {**{f"raw2/{k}": v for k, v in old.items()},
                                             **{f"raw2/sub/{k}": v for k, v in new.items()}}
    finally:
        r.close()
    # into the root: the whole branch becomes the source
    run_cli("import", "-q", str(tmp_path / "new"), "main", store=store, state=state)
    r = Repository.open(store, state)
    try:
        assert _files(r, "main") == new
    finally:
        r.close()
    # an empty source is refused, not an order to empty the prefix
    (tmp_path / "empty").mkdir()
    rc, out, err = run_cli("import", "-q", str(tmp_path / "empty"), "main", store=store,
                           state=state, check=False)
    assert rc == 1 and "is empty" in err


def test_import_syncs_each_directory_once_per_batch_before_staging(env, tmp_path, monkeypatch):
    """On a local store an object's bytes are fsynced before its rename (never torn),
    but the directory fsync of every write is batched: the directories a batch
    wrote are synced once, before the batch is staged."""
    import gravfs.fs.importer as importer
    import gravfs.store.local as local

    store, state = env
    src = str(tmp_path / "src")
    want = _tree(src, 1500)
    monkeypatch.setattr(importer, "BATCH", 750)  # two batches
    monkeypatch.setattr(importer, "BATCH_SECONDS", 1e9)
    monkeypatch.setattr(local, "_syncfs", lambda root: False)  # the per-directory fallback
    events = []
    real_fsync = os.fsync

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(os.path.join(store, "data")):
            events.append(("dir" if os.path.isdir(path) else "file", path))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    r = Repository.open(store, state)
    real_put = r.staging.put_token

    def put_token(token, items):
        events.append(("stage", [k for k, _ in items]))
        return real_put(token, items)

    monkeypatch.setattr(r.staging, "put_token", put_token)
    try:
        importer.import_tree(r, src, "main", "raw", progress=False)
        entries = {k.decode()[len("raw/"):]: r.stat("main", k.decode()).entry
                   for k in (f"raw/{p}".encode() for p in want)}
    finally:
        r.close()
    files = [p for kind, p in events if kind == "file"]
    dirs = [p for kind, p in events if kind == "dir"]
    assert len(files) == len({e.address for e in entries.values()})  # one fsync an object
    stages = sum(1 for kind, _ in events if kind == "stage")
    assert stages == 2  # two batches
    assert len(dirs) <= 2 * (256 + 1)  # data/ and its subdirectories once a batch, not per write
    synced = set()
    for kind, what in events:
        if kind == "dir":
            synced.add(what)
        elif kind == "stage":
            for k in what:
                if k.startswith(b"raw/") and not k.endswith(b"/"):
                    obj = os.path.join(store, entries[k.decode()[4:]].address)
                    assert os.path.dirname(obj) in synced, k  # durable before it is staged


def test_import_by_reference_copies_nothing_and_reads_the_source(env, tmp_path):
    """``gravfs import --by-reference``: file:// entries with size, mtime and tag, no data
    object; reads come from the source, and a changed source is a clear error."""
    from gravfs.fs.entry import ADDRESS_FULL

    store, state = env
    src = str(tmp_path / "src")
    want = _tree(src, 40)
    os.symlink("f00000", os.path.join(src, "d0", "latest"))
    rc, out, err = run_cli("import", "-q", "--by-reference", src, "main:ref", store=store,
                           state=state)
    assert "by reference" in out
    with Repository.open(store, state) as r:
        assert not list(r.store.list("data/"))
        assert _files(r, "main", "ref") == {f"ref/{p}": d for p, d in want.items()}
        e = r.stat("main", "ref/d3/f00013").entry
        path = os.path.join(src, "d3", "f00013")
        st = os.stat(path)
        assert e.address_type == ADDRESS_FULL and e.address == "file://" + path
        assert e.e_tag == f"{st.st_mtime_ns:x}-{st.st_size:x}"
        assert r.stat("main", "ref/d0/latest").entry.symlink_target == "f00000"
        assert r.commits.get(r.head("main")).metadata["import_by_reference"] == "true"
    with open(path, "ab") as f:
        f.write(b"changed")
    rc, out, err = run_cli("cat", "main:ref/d3/f00013", store=store, state=state, check=False)
    assert rc != 0 and "changed" in err and "Traceback" not in err, (rc, err)


def test_a_file_written_while_it_is_read_is_read_again(env, tmp_path, monkeypatch, caplog):
    """A writer at work on a source file: a read that saw the file change (its size,
    mtime or ctime moved) is done again, so the commit holds one whole version with its
    own size and mtime; a file that changes at every read is kept as last read, with a
    warning naming it."""
    import logging

    import gravfs.data.steady as steady
    import gravfs.fs.importer as importer

    store, state = env
    src = tmp_path / "src"
    src.mkdir()
    (src / "log.txt").write_bytes(b"first version\n")
    (src / "busy.txt").write_bytes(b"0\n")
    (src / "quiet.txt").write_bytes(b"quiet\n")
    real_put = steady.put_file
    reads: dict = {}

    def put_file(data, path, st, f, small=steady.SMALL_FILE):  # a writer appends meanwhile
        got = real_put(data, path, st, f, small)
        name = os.path.basename(path)
        reads[name] = reads.get(name, 0) + 1
        if name == "busy.txt" or (name == "log.txt" and reads[name] == 1):
            with open(path, "ab") as f:
                f.write(b"appended %d\n" % reads[name])
        return got

    monkeypatch.setattr(steady, "put_file", put_file)
    r = Repository.open(store, state)
    try:
        with caplog.at_level(logging.INFO, logger="gravfs.data.steady"):
            importer.import_tree(r, str(src), "main", "raw", progress=False)
        assert reads == {"log.txt": 2, "busy.txt": steady.READ_TRIES, "quiet.txt": 1}
        got = _files(r, "main", "raw")
        assert got["raw/log.txt"] == b"first version\nappended 1\n"
        st = os.stat(src / "log.txt")
        entry = r.stat("main", "raw/log.txt").entry
        assert (entry.size, entry.mtime_ns) == (st.st_size, st.st_mtime_ns)
        # kept changing: the last read (before its last append) is committed
        assert got["raw/busy.txt"] == b"0\nappended 1\nappended 2\n"
        assert got["raw/quiet.txt"] == b"quiet\n"
    finally:
        r.close()
    warned = [m.getMessage() for m in caplog.records if m.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"{src / 'busy.txt'} kept changing")


def test_the_repositorys_own_directories_are_left_out(tmp_path):
    """``gravfs init`` in the data's own directory, then an import of '.': the store and
    the state directory are left out with a warning each (before, they were imported,
    the store into itself); an import from inside the store or the workspace is refused."""
    data = tmp_path / "lake"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "a.csv").write_bytes(b"a\n")
    store, state = str(data / "store"), str(data / "state")
    Repository.init(store, state, settings=small_settings()).close()
    rc, out, err = run_cli("import", "-q", str(data), "main:", store=store, state=state)
    assert "Imported 1 file(s)" in out
    assert f"leaving out {data / 'store'}: it is this repository's store" in err
    assert f"leaving out {data / 'state'}: it is gravfs's state directory" in err
    rc, out, err = run_cli("ls", "main:", store=store, state=state)
    assert out.split() == ["dir", "raw/"]
    rc, out, err = run_cli("import", "-q", str(data / "store" / "data"), "main:x", store=store,
                           state=state, check=False)
    assert rc == 1 and err == (f"gravfs: cannot import {data / 'store' / 'data'}: it is in "
                               f"this repository's store ({store})\n")
    rc, out, err = run_cli("import", "-q", str(data / "state" / "repos"), "main:x", store=store,
                           state=state, check=False)
    assert rc == 1 and err == (f"gravfs: cannot import {data / 'state' / 'repos'}: it is in "
                               f"gravfs's state directory ({state})\n")


def test_an_import_below_a_file_is_refused(env, tmp_path, monkeypatch):
    """A file at an ancestor of PREFIX: refused before anything is read (the file at
    PREFIX itself is replaced, above it is not); a file committed there while the
    import runs makes its commit a conflict, and nothing lands."""
    from gravfs.errors import ConflictError, PathTypeError
    from gravfs.fs import importer

    store, state = env
    _tree(str(tmp_path / "src"), 3)
    (tmp_path / "x").write_bytes(b"a file\n")
    run_cli("put", str(tmp_path / "x"), "main:in", store=store, state=state)
    run_cli("commit", "main", "-m", "file", store=store, state=state)
    rc, _, err = run_cli("import", "-q", str(tmp_path / "src"), "main:in/deep", store=store,
                         state=state, check=False)
    assert rc == PathTypeError.exit_code and "in: not a directory" in err
    r = Repository.open(store, state)
    try:
        real = importer._stage_removals

        def meanwhile(*a, **kw):
            r.write_file("main", "late", b"a file where the import goes\n")
            r.commit("main", "committed meanwhile")
            return real(*a, **kw)

        monkeypatch.setattr(importer, "_stage_removals", meanwhile)
        with pytest.raises(ConflictError, match=r"both a file and a directory: late \(and "
                                                r"late/deeper/d0/f00000\)"):
            importer.import_tree(r, str(tmp_path / "src"), "main", "late/deeper", progress=False)
        assert r.commits.get(r.head("main", fresh=True)).message == "committed meanwhile"
        assert _files(r, "main") == {"in": b"a file\n", "late": b"a file where the import goes\n"}
    finally:
        r.close()


def test_include_staged_replaces_what_was_staged_at_the_prefix(env, tmp_path):
    """--include-staged: a file staged at PREFIX, and files staged under it that the
    source lacks, are replaced as committed ones are (the staged file stayed beside
    the imported directory: a name both a file and a directory)."""
    store, state = env
    new = _tree(str(tmp_path / "src"), 3)
    r = Repository.open(store, state)
    try:
        r.write_file("main", "keep", b"k")
        r.commit("main", "base")
        r.write_file("main", "zz", b"a staged file where the import goes")
        r.write_file("main", "other/x", b"staged elsewhere")
        from gravfs.fs.importer import import_tree
        res = import_tree(r, str(tmp_path / "src"), "main", "zz", progress=False,
                          include_staged=True)
        assert res.staged == 2
        assert _files(r, "main") == {"keep": b"k", "other/x": b"staged elsewhere",
                                     **{f"zz/{k}": v for k, v in new.items()}}
        r.write_file("main", "zz/d0/staged", b"s")  # replaced: the head holds the result
        from gravfs.version.committer import NothingToCommitError
        with pytest.raises(NothingToCommitError):
            import_tree(r, str(tmp_path / "src"), "main", "zz", progress=False,
                        include_staged=True)
        assert "zz/d0/staged" not in _files(r, "main") and r.status("main") == []
    finally:
        r.close()


def test_a_file_with_an_mtime_past_2262_is_imported_with_the_nearest(env, tmp_path, caplog):
    """ext4 keeps mtimes to 2446: the import failed with "int too large to convert"."""
    from gravfs.fs.entry import TIME_NS_MAX
    from gravfs.fs.importer import import_tree

    store, state = env
    src = tmp_path / "src"
    src.mkdir()
    (src / "future").write_bytes(b"f")
    (src / "old").write_bytes(b"o")
    os.utime(src / "future", ns=(0, 15032385535 * 10**9))
    os.utime(src / "old", ns=(0, -315619200 * 10**9 + 123))  # 1960: in range, kept
    r = Repository.open(store, state)
    try:
        import_tree(r, str(src), "main", progress=False)
        assert r.stat("main", "future").entry.mtime_ns == TIME_NS_MAX
        assert r.stat("main", "old").entry.mtime_ns == -315619200 * 10**9 + 123
        assert "future: its mtime (15032385535 s since 1970) is outside" in caplog.text
    finally:
        r.close()


def test_a_file_replaced_by_a_fifo_after_the_listing_fails_the_import_without_hanging(
        env, tmp_path, monkeypatch):
    """Opening a FIFO for reading waits for a writer: the import checks what it opens is
    still a regular file, fails naming it, commits nothing, and the next run (which lists
    the FIFO as a special file and passes over it) commits the rest."""
    import gravfs.fs.importer as importer

    store, state = env
    src = tmp_path / "src"
    want = _tree(str(src), 20)
    real_scan = importer.scan

    def scan(root, leave_out=None):
        items = list(real_scan(root, leave_out))
        os.unlink(src / "d3/f00003")
        os.mkfifo(src / "d3/f00003")
        return iter(items)

    monkeypatch.setattr(importer, "scan", scan)
    r = Repository.open(store, state)
    try:
        head = r.head("main")
        with pytest.raises(GravfsError, match=r"d3/f00003: no longer a regular file.*"
                                               r"nothing was committed"):
            importer.import_tree(r, str(src), "main", "raw", progress=False)
        assert r.head("main") == head and _files(r, "main") == {}
        monkeypatch.setattr(importer, "scan", real_scan)
        importer.import_tree(r, str(src), "main", "raw", progress=False)
        del want["d3/f00003"]
        assert _files(r, "main") == {f"raw/{k}": v for k, v in want.items()}
    finally:
        r.close()


def test_a_big_file_changed_after_the_import_named_it_leaves_no_damaged_object(
        env, tmp_path, monkeypatch):
    """A writer rewrites a 1 MiB file just after the import named its bytes: the import
    reads it again and commits the new version, and the store holds no object whose
    bytes are not its address's (the import used to upload the file again after naming
    it, publishing the new bytes under the old address; a later file of the old bytes
    then took that object by deduplication and could not be read)."""
    import gravfs.data.objects as objects
    import gravfs.fs.importer as importer
    from gravfs import hashing

    store, state = env
    src = tmp_path / "src"
    src.mkdir()
    first, second = os.urandom(1 << 20), os.urandom(1 << 20)
    (src / "big.bin").write_bytes(first)
    real_plan = objects.plan_storage
    planned = []

    def plan_then_rewrite(fd, passed=None):
        plan = real_plan(fd, passed)
        if not planned:
            planned.append(plan)
            (src / "big.bin").write_bytes(second)
        return plan

    monkeypatch.setattr(objects, "plan_storage", plan_then_rewrite)
    r = Repository.open(store, state)
    try:
        importer.import_tree(r, str(src), "main", progress=False)
        assert planned and _files(r, "main") == {"big.bin": second}
        for key in r.store.list(objects.PREFIX):
            assert hashing.hexdigest(r.store.get(key)) == objects.digest_of(key), key
        (tmp_path / "again.bin").write_bytes(first)
        r.write_file("main", "again.bin", str(tmp_path / "again.bin"))
        assert r.read(r.stat("main", "again.bin")) == first
    finally:
        r.close()
