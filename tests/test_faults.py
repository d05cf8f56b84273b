"""The fault-injection layer, walked systematically (gravfs/faults.py).

* Every ``crash_point("...")`` in the source is listed in CRASH_POINTS and every
  listed point is called somewhere.
* The crash walk: a scenario of commands on a local-directory store (a put,
  an rm, a compaction, a put, a commit, an import staged in three batches,
  write-back as the mount does it, a commit that uploads what it left, a read)
  runs in subprocesses with GRAVFS_CRASH_AT set, once per registered point
  (and targeted hits, some in one step only). The first process that
  reaches the point dies (exit 99); the walk fails if none does. Then the next
  commands recover: everything acknowledged before the crash is there, the
  crashed command took effect wholly or not at all (write-back: per file), a
  commit lands it and ``gravfs fsck --data`` is clean.
* Store faults: puts, commits, listings and reads while the store fails or
  hangs on one kind of call answer one clear line and a non-zero exit, lose
  nothing acknowledged, and succeed when retried after the fault clears.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from gravfs import faults, hashing
from gravfs.fs.entry import KIND_FILE, EntryInfo
from gravfs.data.objects import address_of
from gravfs.errors import GravfsError, StoreUnavailableError
from gravfs.faults import CRASH_EXIT_CODE, CRASH_POINTS
from gravfs.store import faulty
from gravfs.store.faulty import FaultyStore, StoreFault, parse_store_faults
from gravfs.fs.repository import Repository
from gravfs.store import open_store
from gravfs.store.local import LocalStore
from tests.repo_util import small_settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAVFS_SRC = os.path.join(ROOT, "gravfs")
TIMEOUT = 120

# -- the repository every case starts from -------------------------------------------

BASE = {f"base/{i:02d}": b"base %d\n" % i for i in range(30)}


def _base_repo(tmp_path) -> tuple[str, str]:
    """A committed base tree; the tier cache is emptied so later reads fetch."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    r = Repository.init(store, state, settings=small_settings())
    for path, data in BASE.items():
        r.write_file("main", path, data)
    r.commit("main", "base")
    cache = r.workspace.cache
    r.close()
    shutil.rmtree(cache)
    return store, state


def _tree(repo: Repository, ref: str) -> dict[str, object]:
    """Files (content) and symlinks ("-> target") of a tree."""
    out: dict[str, object] = {}
    for n in repo.walk(ref):
        if n.kind == "file":
            out[n.path] = repo.read(n)
        elif n.kind == "symlink":
            out[n.path] = "-> " + n.entry.symlink_target
    return out


def _env(store: str, state: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, **extra)
    for name in ("GRAVFS_DEBUG", faults.CRASH_ENV, faulty.STORE_FAULT_ENV):
        if name not in extra:
            env.pop(name, None)
    return env


def _gravfs(*args: str, store: str, state: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=_env(store, state, **extra),
                          capture_output=True, text=True, timeout=TIMEOUT)


def _fsck_clean(store: str, state: str) -> None:
    p = _gravfs("fsck", "--data", "-q", store=store, state=state)
    assert p.returncode == 0 and "fsck: clean" in p.stdout, p.stdout + p.stderr


def _commit_all(store: str, state: str) -> None:
    """Commit whatever is staged (nothing staged is fine)."""
    p = _gravfs("commit", "main", "-m", "recover", store=store, state=state)
    assert p.returncode == 0 or (p.returncode == 1 and "nothing to commit" in p.stderr), p.stderr


def _head_tree(store: str, state: str) -> dict[str, object]:
    """The head's tree, after checking that nothing is left uncommitted."""
    r = Repository.open(store, state)
    try:
        assert r.status("main") == []
        return _tree(r, r.head("main"))
    finally:
        r.close()


# -- registry ---------------------------------------------------------------------------

_CALL = re.compile(r"""crash_point\(\s*["']([^"']+)["']\s*(,?)""")


def test_every_crash_point_in_the_source_is_registered():
    called: dict[str, list[str]] = {}
    with_subject = set()
    for d, _dirs, files in os.walk(GRAVFS_SRC):
        for name in files:
            if name.endswith(".py") and name != "faults.py":
                path = os.path.join(d, name)
                with open(path, encoding="utf-8") as f:
                    for point, comma in _CALL.findall(f.read()):
                        called.setdefault(point, []).append(os.path.relpath(path, ROOT))
                        if comma:
                            with_subject.add(point)
    unlisted = {p: w for p, w in called.items() if p not in CRASH_POINTS}
    assert not unlisted, f"add these crash points to gravfs.faults.CRASH_POINTS: {unlisted}"
    assert set(CRASH_POINTS) == set(called), \
        f"registered but never called: {sorted(set(CRASH_POINTS) - set(called))}"
    assert faults.SUBJECT_POINTS == with_subject, "the points that pass a subject"


def test_crash_spec_counts_hits_of_the_named_point_and_subject():
    assert faults.parse_crash_spec("commit:sealed") == ("commit:sealed", 1, None)
    assert faults.parse_crash_spec("import:batch-staged:3") == ("import:batch-staged", 3, None)
    assert faults.parse_crash_spec("local:publish:2@data/*") == ("local:publish", 2, "data/*")
    script = ("import sys; from gravfs.faults import crash_point\n"
              "for i in range(5):\n"
              "    crash_point('local:publish', '_gravfs/ranges/%d' % i)\n"
              "    crash_point('other')\n"
              "    crash_point('local:publish', 'data/ab/%d' % i)\n"
              "    print(i, flush=True)\n")
    env = dict(os.environ, GRAVFS_CRASH_AT="local:publish:3@data/*")
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == CRASH_EXIT_CODE
    assert p.stdout.split() == ["0", "1"]  # died at the third data key, before printing 2
    assert p.stderr == ("gravfs: crashed at local:publish (data/ab/2) "
                        "(GRAVFS_CRASH_AT=local:publish:3@data/*)\n")


@pytest.mark.parametrize("spec, why", [
    ("commit:seald", "no crash point is named 'commit:seald'"),
    ("staging:in-txn:abc", "no crash point is named 'staging:in-txn:abc'"),
    ("staging:written:0", "the hit to crash at counts from 1"),
    ("commit:sealed@data/*", "commit:sealed passes no subject for the glob 'data/*' to match"),
])
def test_a_crash_spec_that_can_never_crash_says_so_at_start(spec, why):
    """A misspelt point would let a crash test pass without crashing: one line on
    stderr when the process starts, and the process runs on."""
    script = "from gravfs.faults import crash_point\ncrash_point('commit:sealed'); print('ran')"
    p = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, GRAVFS_CRASH_AT=spec),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0 and p.stdout == "ran\n"
    assert p.stderr.startswith(f"gravfs: GRAVFS_CRASH_AT={spec} never crashes: {why}")
    assert faults.spec_problem("local:publish:2@data/*") is None


# -- the crash walk -----------------------------------------------------------------------

TREE_FILES = {f"{d}/{i}": f"tree {d} {i}\n".encode() for d in "ab" for i in range(5)}
IMPORT_BATCH = 4  # 10 files, a symlink and an empty directory: three batches
WRITEBACK = {f"wb/{i}": b"written back %d\n" % i for i in range(3)}

# A CLI process whose import stages small batches (so a walk can crash between them).
CLI = ("import sys, gravfs.fs.importer; gravfs.fs.importer.BATCH = %d\n"
       "from gravfs.cli import main; sys.exit(main(sys.argv[1:]))" % IMPORT_BATCH)

# What the mount does when files are closed: each file moves into pending uploads
# and is staged (then acknowledged); background uploaders store them. The last
# file's upload is paused, and the process then dies as a killed daemon would
# (exit 0: the step is over), so the next commit uploads it.
WRITEBACK_DRIVER = """
import os, sys, time
from gravfs.fs.entry import KIND_FILE, EntryInfo
from gravfs.data.objects import PAUSE_ENV
from gravfs.fs.repository import Repository
store, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
repo = Repository.open(store, state, staging_sync=False)
pause = os.environ[PAUSE_ENV] = os.path.join(state, "pause-uploads")
repo.data.start_uploader(2)
deadline = time.monotonic() + 60
for i in range(n):
    if i == n - 1:
        while repo.data.pending_addresses():
            assert time.monotonic() < deadline, "pending uploads did not finish"
            time.sleep(0.01)
        open(pause, "w").close()
    path = os.path.join(repo.workspace.tmp, "wb-%d" % i)
    with open(path, "wb") as f:
        f.write(b"written back %d\\n" % i)
    address, size = repo.data.put_pending(path)
    repo.stage("main", [(b"wb/%d" % i, EntryInfo(address=address, size=size, mtime_ns=time.time_ns(),
                                                 mode=0o100644, kind=KIND_FILE))])
    repo.staging.sync()
    print("ack", i, flush=True)
os._exit(0)
"""


@dataclass
class Step:
    name: str
    args: list[str]  # CLI arguments ({src} replaced); empty: the write-back driver
    units: list[dict[str, object]] = field(default_factory=lambda: [{}])  # None: removed
    # each unit takes effect wholly or not at all; a unit is acknowledged when the
    # process exits 0, or (write-back) when it prints its "ack" line


def _scenario() -> list[Step]:
    imported: dict[str, object] = {f"imp/{k}": v for k, v in TREE_FILES.items()}
    imported["imp/link"] = "-> a/0"
    return [
        Step("put", ["put", "{src}/one", "main:p/one"], [{"p/one": b"one\n"}]),
        Step("rm", ["rm", "main:base/05"], [{"base/05": None}]),
        Step("compact", ["compact", "main"]),
        Step("put-over", ["put", "{src}/two", "main:base/03"], [{"base/03": b"two\n"}]),
        Step("commit", ["commit", "main", "-m", "puts"]),
        Step("import", ["import", "-q", "{src}/tree", "main:imp", "-m", "import"], [imported]),
        Step("writeback", [], [{k: v} for k, v in WRITEBACK.items()]),
        Step("commit-wb", ["commit", "main", "-m", "write-back"]),
        Step("cat", ["cat", "main:imp/a/0"]),
    ]


def _sources(tmp_path) -> str:
    src = tmp_path / "src"
    (src / "tree" / "empty").mkdir(parents=True)
    (src / "one").write_bytes(b"one\n")
    (src / "two").write_bytes(b"two\n")
    for k, v in TREE_FILES.items():
        (src / "tree" / k).parent.mkdir(exist_ok=True)
        (src / "tree" / k).write_bytes(v)
    os.symlink("a/0", src / "tree" / "link")
    return str(src)


def _run_step(step: Step, src: str, store: str, state: str, env: dict) -> subprocess.CompletedProcess:
    if step.args:
        cmd = [sys.executable, "-c", CLI, *(a.format(src=src) for a in step.args)]
    else:
        cmd = [sys.executable, "-c", WRITEBACK_DRIVER, store, state, str(len(step.units))]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def _applied(model: dict, units: list[dict]) -> dict:
    out = dict(model)
    for unit in units:
        for k, v in unit.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
    return out


def _differences(got: dict, want: dict) -> str:
    keys = sorted(set(got) | set(want))
    return ", ".join(f"{k}: {got.get(k)!r} (want {want.get(k)!r})"
                     for k in keys if got.get(k) != want.get(k))


CASES = [pytest.param(p, None, id=p) for p in sorted(CRASH_POINTS)] + [
    pytest.param("import:batch-staged:2", None),
    pytest.param("local:publish@_gravfs/ranges/*", None),
    pytest.param("local:publish@_gravfs/metaranges/*", None),
    pytest.param("local:publish@_gravfs/commits/*", None),
    pytest.param("local:publish@_gravfs/refs/*", None),
    pytest.param("tier:fetched@data/*", None),
    pytest.param("writeback:pending-moved:2", None),
    pytest.param("writeback:uploaded:2", None),
    # compaction's staging transaction; a commit's metarange
    pytest.param("staging:in-txn:2", "compact"),
    pytest.param("local:publish@_gravfs/metaranges/*", "commit"),
    # the import's own commit
    pytest.param("commit:pending-recorded", "import"),
    pytest.param("commit:head-moved", "import"),
    # a commit of write-back entries: the upload it drains, its pending record, and
    # its cleanup after the head moved
    pytest.param("writeback:before-upload", "commit-wb"),
    pytest.param("writeback:uploaded", "commit-wb"),
    pytest.param("staging:in-txn:2", "commit-wb"),
    pytest.param("staging:in-txn:3", "commit-wb"),
    pytest.param("commit:head-moved", "commit-wb"),
]


@pytest.mark.parametrize("spec,only_step", CASES)
def test_crash_walk(tmp_path, spec, only_step):
    store, state = _base_repo(tmp_path)
    src = _sources(tmp_path)
    model: dict[str, object] = dict(BASE)
    target = faults.parse_crash_spec(spec)
    for step in _scenario():
        crash = only_step in (None, step.name)
        env = _env(store, state, **({faults.CRASH_ENV: spec} if crash else {}))
        p = _run_step(step, src, store, state, env)
        if p.returncode != CRASH_EXIT_CODE:
            assert p.returncode == 0, f"{step.name}: {p.stderr}"
            model = _applied(model, step.units)
            continue
        assert crash and f"gravfs: crashed at {target.name}" in p.stderr, p.stderr
        acked = p.stdout.split().count("ack")
        print(f"{spec}: crashed in step {step.name} after {acked} ack(s): {p.stderr.strip()}")
        # the next commands recover: commit what is staged, read it all back, fsck
        _commit_all(store, state)
        got = _head_tree(store, state)
        allowed = [_applied(model, step.units[:n]) for n in range(acked, len(step.units) + 1)]
        assert got in allowed, (f"crashed in {step.name} after {acked} acknowledged unit(s): "
                                f"{_differences(got, allowed[0])}")
        _fsck_clean(store, state)
        return
    pytest.fail(f"crash point {spec} was never reached by the scenario")


# -- store faults ---------------------------------------------------------------------------

# acknowledged uncommitted changes at both ends of the tree: a commit writes several ranges
STAGED = {"base/00": b"changed first\n", "base/29": b"changed last\n", "p/staged": b"staged\n"}


def data_address(data: bytes) -> str:
    return address_of(hashing.hexdigest(data))


PENDING = b"closed in a mount, not uploaded yet\n"


def _staged_repo(tmp_path) -> tuple[str, str, dict]:
    """The base tree plus acknowledged uncommitted changes, one of them still a
    pending upload (as a mount leaves it); an empty tier."""
    store, state = _base_repo(tmp_path)
    with Repository.open(store, state) as r:
        for path, data in STAGED.items():
            r.write_file("main", path, data)
        address = data_address(PENDING)
        os.makedirs(os.path.dirname(r.data.pending_path(address)), exist_ok=True)
        with open(r.data.pending_path(address), "wb") as f:
            f.write(PENDING)
        r.stage("main", [(b"p/pending", EntryInfo(address=address, size=len(PENDING), mtime_ns=1,
                                                   mode=0o100644, kind=KIND_FILE))])
    shutil.rmtree(r.workspace.cache)
    (tmp_path / "new").write_bytes(b"new file\n")
    return store, state, dict(BASE, **STAGED, **{"p/pending": PENDING})


PUT = ["put", "{tmp}/new", "main:p/new"]
COMMIT = ["commit", "main", "-m", "during a fault"]
LS = ["ls", "main:base"]
CAT = ["cat", "main:base/01"]

STORE_CASES = [
    # put: the data object, the head, the tree read for placement checks
    ("put", PUT, "op=upload,key=data/*"),
    ("put", PUT, "op=upload,key=data/*,when=after"),
    ("put", PUT, "op=stat,key=data/*"),  # the dedup check (store.claim_existing)
    ("put", PUT, "op=read_versioned,key=_gravfs/refs/*"),
    ("put", PUT, "op=download,key=_gravfs/metaranges/*"),
    ("put", PUT, "op=upload,key=data/*,mode=hang,secs=1"),
    # commit: every write it makes (the pending upload, which a local store takes as a
    # hard link; the first and a later range...)
    ("commit", COMMIT, "op=put_file_if_absent,key=data/*"),
    ("commit", COMMIT, "op=put_file_if_absent,key=data/*,when=after"),
    ("commit", COMMIT, "op=put_file_if_absent,key=_gravfs/ranges/*"),
    ("commit", COMMIT, "op=put_file_if_absent,key=_gravfs/ranges/*,after=1"),
    ("commit", COMMIT, "op=put_file_if_absent,key=_gravfs/metaranges/*"),
    ("commit", COMMIT, "op=put_if_absent,key=_gravfs/commits/*"),
    ("commit", COMMIT, "op=put_if_absent,key=_gravfs/commits/*,when=after"),
    ("commit", COMMIT, "op=cas,key=_gravfs/refs/branches/main"),
    ("commit", COMMIT, "op=cas,key=_gravfs/refs/branches/main,when=after"),
    ("commit", COMMIT, "op=cas,mode=hang,secs=1"),
    ("commit", COMMIT, "op=get,key=_gravfs/commits/*"),
    ("commit", COMMIT, "op=download,key=_gravfs/ranges/*"),
    # reads
    ("ls", LS, "op=download,key=_gravfs/ranges/*"),
    ("ls", LS, "op=read_versioned"),
    ("ls", LS, "op=get,key=_gravfs/repo.json"),
    ("ls", LS, "op=download,mode=hang,secs=1"),
    ("cat", CAT, "op=download,key=data/*"),
    ("ls-prefix", ["ls", "{head}"], "op=list,key=_gravfs/commits/*"),
]


@pytest.mark.parametrize("what,args,fault", [pytest.param(*c, id=f"{c[0]}-{c[2]}") for c in STORE_CASES])
def test_store_fault(tmp_path, what, args, fault):
    store, state, want = _staged_repo(tmp_path)
    with Repository.open(store, state) as r:
        head = r.head("main")
    argv = [a.format(tmp=tmp_path, head=head[:10]) for a in args]
    p = _gravfs(*argv, store=store, state=state, GRAVFS_STORE_FAULT=fault)
    assert p.returncode == StoreUnavailableError.exit_code, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gravfs: store ") and "injected by" in lines[0], \
        p.stderr
    assert ("timed out" in lines[0]) == ("mode=hang" in fault)

    # nothing acknowledged is lost, and the same command succeeds once the store is back
    p = _gravfs(*argv, store=store, state=state)
    landed_anyway = what == "commit" and "when=after" in fault and "cas" in fault
    if landed_anyway:  # the head moved; only the reply was lost: the retry finds it
        assert p.returncode == 1 and "nothing to commit" in p.stderr, p.stderr
    else:
        assert p.returncode == 0, p.stderr
    if what == "put":
        want["p/new"] = b"new file\n"
    elif what == "cat":
        assert p.stdout == BASE["base/01"].decode()
    elif what.startswith("ls"):
        assert "01" in p.stdout or "base/" in p.stdout
    _commit_all(store, state)
    assert _head_tree(store, state) == want
    _fsck_clean(store, state)


def test_bad_store_fault_setting_is_one_clear_line(tmp_path):
    store, state = _base_repo(tmp_path)
    p = _gravfs("ls", "main", store=store, state=state, GRAVFS_STORE_FAULT="op=frobnicate")
    assert p.returncode == 1
    assert p.stderr == ("gravfs: bad GRAVFS_STORE_FAULT 'op=frobnicate': unknown op 'frobnicate' "
                        "(one of get, get_range, download, size, read_versioned, list, put, upload, "
                        "put_if_absent, put_file_if_absent, cas, delete, stat, touch, delete_many, "
                        "read, write, *)\n")


def test_faulty_store_rules(tmp_path, monkeypatch):
    inner = LocalStore(str(tmp_path / "s"))
    inner.put("data/aa/1", b"one")
    store = FaultyStore(inner, parse_store_faults("op=get,key=data/*,mode=fail-once,after=1;"
                                                  "op=put,key=x/*,when=after;op=list,mode=fail"))
    assert store.get("data/aa/1") == b"one"  # after=1: the first call passes
    with pytest.raises(StoreUnavailableError, match="get data/aa/1 failed"):
        store.get("data/aa/1")
    assert store.get("data/aa/1") == b"one"  # failed once only
    assert store.local_path("data/aa/1") is None  # in-place reads would bypass the rule
    assert store.local_path("y") == inner.local_path("y")
    with pytest.raises(StoreUnavailableError):
        store.put("x/1", b"v")
    assert inner.get("x/1") == b"v"  # when=after: done, then failed
    with pytest.raises(StoreUnavailableError):
        store.list("data/")
    store.faults.clear()
    assert list(store.list("")) == ["data/aa/1", "x/1"]
    assert store.root == inner.root  # backend extras pass through

    hang = FaultyStore(inner, [StoreFault(frozenset({"size"}), mode="hang", secs=0.2)])
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="timed out after 0.2s"):
        hang.exists("data/aa/1")
    assert time.monotonic() - t0 >= 0.2

    monkeypatch.delenv(faulty.STORE_FAULT_ENV, raising=False)
    assert type(open_store(str(tmp_path / "s"))) is LocalStore
    monkeypatch.setenv(faulty.STORE_FAULT_ENV, "op=write,key=data/*,mode=fail")
    wrapped = open_store(str(tmp_path / "s"))
    assert isinstance(wrapped, FaultyStore) and wrapped.url == inner.url
    with pytest.raises(StoreUnavailableError):
        wrapped.upload("data/bb/2", str(tmp_path / "s" / "data" / "aa" / "1"))
    for bad in ("mode=sometimes", "op=get,after=x", "op=get,colour=red", "op", ";"):
        with pytest.raises(GravfsError, match="bad GRAVFS_STORE_FAULT"):
            parse_store_faults(bad)


def test_every_store_call_can_fail(tmp_path):
    inner = LocalStore(str(tmp_path / "s"))
    inner.put("k/a", b"a")
    src = tmp_path / "src"
    src.write_bytes(b"x")
    calls = {
        "get": lambda s: s.get("k/a"),
        "get_range": lambda s: s.get_range("k/a", 0, 1),
        "download": lambda s: s.download("k/a", str(tmp_path / "dl")),
        "size": lambda s: s.size("k/a"),
        "read_versioned": lambda s: s.read_versioned("k/a"),
        "list": lambda s: list(s.list("k/")),
        "put": lambda s: s.put("k/b", b"b"),
        "upload": lambda s: s.upload("k/b", str(src)),
        "put_if_absent": lambda s: s.put_if_absent("k/c", b"c"),
        "put_file_if_absent": lambda s: s.put_file_if_absent("k/d", str(src)),
        "cas": lambda s: s.compare_and_swap("k/a", inner.read_versioned("k/a")[1], b"a2"),
        "delete": lambda s: s.delete("k/a"),
        "stat": lambda s: s.stat("k/a"),
        "touch": lambda s: s.touch("k/a"),
        "delete_many": lambda s: s.delete_many(["k/gone"]),
    }
    assert set(calls) == set(faulty.STORE_OPS)
    for op, call in calls.items():
        store = FaultyStore(inner, parse_store_faults(f"op={op},key=k/*"))
        with pytest.raises(StoreUnavailableError, match=f"{op} k/"):
            call(store)
        for other in set(calls) - {op}:  # the rule touches no other call
            if other not in ("delete", "cas", "delete_many"):
                calls[other](store)
    assert inner.get("k/a") == b"a"  # no failed write went through


def test_background_upload_failing_once_stays_pending_and_is_retried(tmp_path):
    """The mount's write-back: an upload that fails keeps the file pending (still
    readable, committed after a later upload), never loses it."""
    store_dir, state = _base_repo(tmp_path)
    # (a local store takes a pending file as a hard link: put_file_if_absent)
    faulty = FaultyStore(LocalStore(store_dir),
                         parse_store_faults("op=put_file_if_absent,key=data/*,mode=fail-once"))
    r = Repository.open(faulty, state)
    try:
        r.data.start_uploader(1)
        path = os.path.join(r.workspace.tmp, "closed")
        with open(path, "wb") as f:
            f.write(b"kept while the store fails\n")
        address, size = r.data.put_pending(path)
        r.stage("main", [(b"p/wb", EntryInfo(address=address, size=size, mtime_ns=1, mode=0o100644,
                                              kind=KIND_FILE))])
        deadline = time.monotonic() + 30
        while faulty.faults[0].fired == 0:  # the worker took it off its queue before trying
            assert time.monotonic() < deadline, "the upload was never tried"
            time.sleep(0.01)
        assert faulty.inner.size(address) is None and r.data.pending_addresses() == [address]
        assert r.read("main", "p/wb") == b"kept while the store fails\n"
        while not r.data.retry_due():  # what the daemon's loop waits for before requeueing
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r.data.requeue_pending()
        while r.data.pending_addresses():
            assert time.monotonic() < deadline, "the retried upload did not finish"
            time.sleep(0.01)
        assert faulty.inner.size(address) == size
        c = r.commit("main", "after a failed upload")
        assert _tree(r, c.id)["p/wb"] == b"kept while the store fails\n"
    finally:
        r.close()
    _fsck_clean(store_dir, state)


def test_commit_whose_head_move_reply_is_lost_on_s3(s3_server, tmp_path):
    """SeaweedFS moves the head but the reply is lost: the commit fails with a clear
    error, and the next command finds it landed (nothing lost, nothing twice)."""
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    faulty = FaultyStore(s3_server.make_store(), [])
    r = Repository.init(faulty, str(tmp_path / "state"), settings=small_settings())
    try:
        for i in range(20):
            r.write_file("main", f"f/{i:02d}", b"v%d" % i)
        want = _tree(r, "main")
        old = r.head("main")
        faulty.faults = parse_store_faults("op=cas,key=_gravfs/refs/branches/*,when=after")
        with pytest.raises(StoreUnavailableError, match="cas _gravfs/refs/branches/main failed"):
            r.commit("main", "reply lost")
        faulty.faults.clear()
        assert r.head("main", fresh=True) != old  # it did land
        with pytest.raises(GravfsError, match="nothing to commit"):
            r.commit("main", "again")
        assert _tree(r, r.head("main", fresh=True)) == want and r.status("main") == []
        assert [c.message for c in r.log("main")][:2] == ["reply lost", "Repository created"]
    finally:
        r.close()
