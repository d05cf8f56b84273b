"""One contract suite run against LocalStore and S3Store (real SeaweedFS)."""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from gravfs.data.objects import address_of
from gravfs.errors import BadNameError, GravfsError, NotFoundError, PreconditionFailedError
from gravfs.store import open_store
from gravfs.store.local import LocalStore
from gravfs.store.s3 import S3Store
from tests.store.local_workers import counter_proc, increment, race_proc

MiB = 1 << 20


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    return request.getfixturevalue("s3_store")


def run_threads(n: int, fn) -> list:
    """Run fn(i) in n threads released together; results in order."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def body(i):
        barrier.wait()
        results[i] = fn(i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# --- plain objects ---------------------------------------------------------------


def test_put_get_overwrite_size(store):
    store.put("data/ab/obj", b"hello")
    assert store.get("data/ab/obj") == b"hello"
    assert store.size("data/ab/obj") == 5
    assert store.exists("data/ab/obj")
    store.put("data/ab/obj", b"hello world")
    assert store.get("data/ab/obj") == b"hello world"
    assert store.size("data/ab/obj") == 11
    store.put("empty", b"")
    assert store.get("empty") == b""
    assert store.size("empty") == 0


def test_missing_objects(store, tmp_path):
    with pytest.raises(NotFoundError):
        store.get("nope/x")
    with pytest.raises(NotFoundError):
        store.get_range("nope/x", 0, 10)
    with pytest.raises(NotFoundError):
        store.read_versioned("nope/x")
    with pytest.raises(NotFoundError):
        store.download("nope/x", str(tmp_path / "dl"))
    assert store.size("nope/x") is None
    assert not store.exists("nope/x")
    store.delete("nope/x")  # missing is fine
    store.put("dir/child", b"c")
    with pytest.raises(NotFoundError):
        store.get("dir")  # a "directory" is not an object
    assert store.size("dir") is None
    store.put("k", b"v")
    store.delete("k")
    store.delete("k")
    assert store.size("k") is None
    with pytest.raises(NotFoundError):
        store.get("k")


def test_get_range(store):
    data = bytes(range(256)) * 4
    store.put("r", data)
    assert store.get_range("r", 0, 10) == data[:10]
    assert store.get_range("r", 100, 300) == data[100:400]
    assert store.get_range("r", 1000, 100) == data[1000:]  # short at EOF
    assert store.get_range("r", 1024, 10) == b""
    assert store.get_range("r", 5000, 10) == b""
    assert store.get_range("r", 7, 0) == b""


def test_bad_keys(store):
    for key in ["", "/abs", "a//b", "../up", "a/./b", "trailing/", "x/.gravfs-tmp.y"]:
        with pytest.raises(BadNameError):
            store.put(key, b"x")


def test_download_and_upload(store, tmp_path):
    src = tmp_path / "src.bin"
    payload = os.urandom(3 * MiB + 17)
    src.write_bytes(payload)
    store.upload("big/one", str(src))
    assert store.size("big/one") == len(payload)
    dest = tmp_path / "dest.bin"
    assert store.download("big/one", str(dest)) == len(payload)
    assert dest.read_bytes() == payload


def test_multipart_upload_path(s3_server, tmp_path):
    store = s3_server.make_store(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    src = tmp_path / "src.bin"
    payload = os.urandom(12 * MiB + 5)
    src.write_bytes(payload)
    store.upload("big/multi", str(src))
    data, version = store.read_versioned("big/multi")
    assert data == payload
    assert version.strip('"').endswith("-3"), f"expected a 3-part multipart ETag, got {version}"
    dest = tmp_path / "d.bin"
    assert store.download("big/multi", str(dest)) == len(payload)
    assert dest.read_bytes() == payload


@pytest.mark.parametrize("size", [1 * MiB, 12 * MiB + 5], ids=["one-put", "multipart"])
def test_an_upload_stream_its_reader_stops_publishes_nothing(s3_server, tmp_path, size):
    """upload_stream: a reader that raises at its last bytes (a CheckedReader whose file
    changed) stops the upload before the object exists, in one PUT or in parts (the
    multipart upload is aborted, none is left open); a good reader's bytes are stored."""
    from gravfs.data.checkedread import ChangedWhileRead, CheckedReader

    store = s3_server.make_store(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    src = tmp_path / "src.bin"
    payload = os.urandom(size)
    src.write_bytes(payload)
    fd = os.open(src, os.O_RDONLY)
    try:
        with pytest.raises(ChangedWhileRead):
            store.upload_stream("big/stopped", CheckedReader(fd, size, "0" * 64), size)
        assert store.size("big/stopped") is None
        ups = store._client.list_multipart_uploads(Bucket=store.bucket,
                                                   Prefix=store._full("big/stopped"))
        assert not ups.get("Uploads"), ups.get("Uploads")
        digest = hashlib.sha256(payload).hexdigest()
        store.upload_stream("big/good", CheckedReader(fd, size, digest), size)
        data, version = store.read_versioned("big/good")
        assert data == payload
        assert version.strip('"').endswith("-3") == (size > 5 * MiB), version
    finally:
        os.close(fd)


def test_a_big_file_put_if_absent_goes_up_in_parts(s3_server, tmp_path):
    """put_file_if_absent of a file past one PUT's size uploads it in parts (a pending
    big object of the mount), never whole in memory; False when the store has it."""
    store = s3_server.make_store(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    src = tmp_path / "big.bin"
    payload = os.urandom(11 * MiB + 3)
    src.write_bytes(payload)
    key = address_of(hashlib.sha256(payload).hexdigest())
    assert store.put_file_if_absent(key, str(src))
    data, version = store.read_versioned(key)
    assert data == payload
    assert version.strip('"').endswith("-3"), f"expected a 3-part multipart ETag, got {version}"
    assert not store.put_file_if_absent(key, str(src))
    assert store.read_versioned(key)[1] == version  # not written again


def test_a_small_upload_is_one_put_and_a_missing_file_says_so(s3_server, tmp_path):
    """A file below the multipart threshold goes up in one PUT (its ETag is the plain
    MD5, no part count); a source that vanished raises FileNotFoundError, which a
    drain of pending uploads takes as "another process uploaded it"."""
    store = s3_server.make_store()
    src = tmp_path / "small.bin"
    payload = os.urandom(4096)
    src.write_bytes(payload)
    store.upload("small/one", str(src))
    data, version = store.read_versioned("small/one")
    assert data == payload
    assert version.strip('"') == hashlib.md5(payload).hexdigest()
    with pytest.raises(FileNotFoundError):
        store.upload("small/two", str(tmp_path / "gone.bin"))
    assert store.size("small/two") is None


# --- listing ---------------------------------------------------------------------

TRICKY = ["a/b", "a-c", "a.b", "a0", "ab/c", "b", "a-d/x", "a/b2/c", "\u00e9t\u00e9", "z/y/x", "a/b-1", "a/b.c/d"]


def test_list_order_is_lexicographic(store):
    for k in TRICKY:
        store.put("lst/" + k, b"1")
    keys = sorted("lst/" + k for k in TRICKY)
    assert list(store.list("lst/")) == keys
    assert list(store.list("")) == keys
    for prefix in ["lst/a", "lst/a/", "lst/a-", "lst/a/b", "lst/ab", "lst/\u00e9", "lst/q", "nothing"]:
        assert list(store.list(prefix)) == [k for k in keys if k.startswith(prefix)], prefix


def test_list_start_after(store):
    for k in TRICKY:
        store.put("lst/" + k, b"1")
    keys = sorted("lst/" + k for k in TRICKY)
    probes = keys + ["", "lst/", "lst/a", "lst/a/", "lst/a/b/", "lst/a-", "lst/a/b0", "lst/zz", "zzz", "a", "lst/a-d/", "lst/ab/"]
    for sa in probes:
        want = [k for k in keys if k > sa]
        assert list(store.list("lst/", start_after=sa)) == want, sa
        assert list(store.list("lst/a", start_after=sa)) == [k for k in want if k.startswith("lst/a")], sa


def test_list_dirs_names_one_level(store):
    for k in ("gc/run1/status.json", "gc/run1/report/p0", "gc/run1/report/p1",
              "gc/run2/status.json", "gc/rules.json", "gc/sp ace/x", "gcx/run3/y"):
        store.put(k, b"1")
    assert sorted(store.list_dirs("gc/")) == ["gc/run1/", "gc/run2/", "gc/sp ace/"]
    assert sorted(store.list_dirs("gc/run1/")) == ["gc/run1/report/"]
    assert list(store.list_dirs("gc/run2/")) == [] and list(store.list_dirs("none/")) == []


def test_list_skips_internal_and_is_resumable(store):
    store.put("_gravfs/refs/branches/main", b"c1")
    store.compare_and_swap("_gravfs/refs/branches/dev", None, b"c2")  # creates a lock file locally
    assert list(store.list("_gravfs/refs/")) == ["_gravfs/refs/branches/dev", "_gravfs/refs/branches/main"]
    it = store.list("_gravfs/")
    first = next(it)
    assert list(store.list("_gravfs/", start_after=first)) == ["_gravfs/refs/branches/main"]


def test_list_pagination_many_keys(store):
    n = 1100
    keys = [f"many/{i:05d}-{'x' * (i % 3)}" for i in range(n)] + [f"many/sub/{i:04d}" for i in range(30)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, b"."), keys))
    want = sorted(keys)
    got = list(store.list("many/"))
    assert len(got) == len(want)
    assert got == want
    assert list(store.list("many/", start_after=want[1049])) == want[1050:]
    # a start_after the backend may use to skip ahead (no character below '/')
    assert list(store.list("many/", start_after="many/00700")) == [k for k in want if k > "many/00700"]
    assert list(store.list("many/s", start_after="many/sub/0012")) == [k for k in want if k > "many/sub/0012"]


# --- conditional writes ------------------------------------------------------------


def test_put_if_absent(store):
    assert store.put_if_absent("_gravfs/refs/tags/v1", b"c1") is True
    assert store.put_if_absent("_gravfs/refs/tags/v1", b"c2") is False
    assert store.get("_gravfs/refs/tags/v1") == b"c1"


def test_put_if_absent_race_threads(store):
    for r in range(3):  # SeaweedFS serialises contended conditional writes with ~1 s waits
        wins = run_threads(6, lambda i: store.put_if_absent(f"tag/{r}", b"w%d" % i))
        assert wins.count(True) == 1, wins
        assert store.get(f"tag/{r}") == b"w%d" % wins.index(True)


def test_compare_and_swap_semantics(store):
    key = "_gravfs/refs/branches/main"
    v1 = store.compare_and_swap(key, None, b"c1")
    assert isinstance(v1, str) and v1
    data, v = store.read_versioned(key)
    assert (data, v) == (b"c1", v1)
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap(key, None, b"cX")  # must not exist, but does
    v2 = store.compare_and_swap(key, v1, b"c2")
    assert v2 != v1
    assert store.read_versioned(key) == (b"c2", v2)
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap(key, v1, b"c3")  # stale
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap(key, v1, None)  # stale delete
    assert store.get(key) == b"c2"
    assert store.compare_and_swap(key, v2, None) is None
    assert store.size(key) is None
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap(key, v2, b"c4")  # expected a version, key is gone
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap(key, v2, None)
    assert store.compare_and_swap(key, None, None) is None  # absent and expected absent
    store.put(key, b"p")
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap(key, None, None)


def test_version_changes_on_plain_put(store):
    store.put("ref", b"a")
    _, v1 = store.read_versioned("ref")
    store.put("ref", b"b")
    _, v2 = store.read_versioned("ref")
    assert v1 != v2
    with pytest.raises(PreconditionFailedError):
        store.compare_and_swap("ref", v1, b"c")


def test_cas_race_threads_exactly_one_wins(store):
    key = "_gravfs/refs/branches/race"
    for r in range(3):
        store.put(key, b"base%d" % r)
        _, base = store.read_versioned(key)

        def attempt(i):
            try:
                return store.compare_and_swap(key, base, b"w%d-%d" % (r, i))
            except PreconditionFailedError:
                return None

        results = run_threads(6, attempt)
        winners = [i for i, v in enumerate(results) if v is not None]
        assert len(winners) == 1, results
        assert store.read_versioned(key) == (b"w%d-%d" % (r, winners[0]), results[winners[0]])


def test_cas_counter_threads_no_lost_update(store):
    store.put("counter", b"0")
    lost = run_threads(4, lambda i: increment(store, "counter", 15))
    assert store.get("counter") == b"60"
    assert sum(lost) >= 0


def test_local_cas_race_processes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    root = str(tmp_path / "store")
    store = LocalStore(root)
    key = "_gravfs/refs/branches/main"
    n = 6
    for r in range(3):
        store.put(key, b"base%d" % r)
        _, base = store.read_versioned(key)
        barrier, out = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=race_proc, args=(root, key, base, i, barrier, out)) for i in range(n)]
        for p in procs:
            p.start()
        results = dict(out.get(timeout=60) for _ in range(n))
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        winners = [i for i, v in results.items() if v is not None]
        assert len(winners) == 1, results
        assert store.read_versioned(key) == (b"proc%d" % winners[0], results[winners[0]])


def test_local_cas_counter_processes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    root = str(tmp_path / "store")
    store = LocalStore(root)
    store.put("counter", b"0")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=counter_proc, args=(root, "counter", 25, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert store.get("counter") == b"100"


# --- local specifics -----------------------------------------------------------------


def test_local_writes_leave_no_temp_files(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    store.put("a/b", b"1")
    store.put_if_absent("a/b", b"2")
    store.compare_and_swap("a/c", None, b"3")
    os.makedirs(tmp_path / "s" / "a" / "dir")
    with pytest.raises(GravfsError):
        store.put("a/dir", b"x")  # a directory is in the way
    with pytest.raises(FileNotFoundError):
        store.upload("a/up", str(tmp_path / "missing-src"))
    names = sorted(os.listdir(tmp_path / "s" / "a"))
    assert [n for n in names if "tmp" in n] == []
    assert list(store.list("")) == ["a/b", "a/c"]


def test_local_stale_temp_files_removed(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    store.put("a/b", b"1")
    old = tmp_path / "s" / "a" / ".gravfs-tmp.b.1.dead"
    new = tmp_path / "s" / "a" / ".gravfs-tmp.b.2.live"
    old.write_bytes(b"partial")
    new.write_bytes(b"in progress")
    os.utime(old, (1, 1))
    assert list(store.list("")) == ["a/b"]  # temp files never show
    assert store.remove_stale_temp_files(max_age_s=600) == 1
    assert not old.exists() and new.exists()
    assert store.get("a/b") == b"1"


# --- opening by URL and shipping to workers ------------------------------------------


def test_open_store_urls(tmp_path, monkeypatch):
    s = open_store(str(tmp_path / "x"))
    assert isinstance(s, LocalStore) and s.root == str(tmp_path / "x")
    s = open_store("file://" + str(tmp_path / "y"))
    assert isinstance(s, LocalStore) and s.root == str(tmp_path / "y")
    assert s.url == "file://" + str(tmp_path / "y")
    monkeypatch.setenv("GRAVFS_S3_ENDPOINT", "http://127.0.0.1:1")
    s = open_store("s3://bucket/some/prefix/")
    assert isinstance(s, S3Store)
    assert (s.bucket, s.prefix, s.url, s.endpoint_url) == ("bucket", "some/prefix/", "s3://bucket/some/prefix", "http://127.0.0.1:1")
    assert open_store("s3://bucket").prefix == ""
    for bad in ["gs://b/p", "http://x", "s3:///p", ""]:
        with pytest.raises(GravfsError):
            open_store(bad)
    for bad in ["s3://bucket with space/p", "s3://b%C3%A9/p", "s3://b:9000/p"]:
        with pytest.raises(GravfsError, match="is not an S3 bucket name"):
            open_store(bad)  # was boto3's ParamValidationError: an internal error
    # options in the URL would be dropped, and an endpoint with them (off to AWS)
    for bad in ["s3://b/p?endpoint=http://127.0.0.1:8333", "s3://b/p#x"]:
        with pytest.raises(GravfsError, match="takes no options"):
            open_store(bad)
    # a server refuses such keys or cleans their HTTP path (b/../x as bucket x), and
    # pre//fix is not pre/fix: refused before a request is sent
    for bad, what in [("s3://b/../x", "a '..'"), ("s3://b/pre//fix", "an empty"),
                      ("s3://b/./x", "a '.'")]:
        with pytest.raises(GravfsError, match=f"the prefix has {what} segment"):
            open_store(bad)
    assert open_store("s3://b//x/").prefix == "x/"  # the ends' slashes are not segments


def test_stores_pickle(store):
    store.put("p/k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.url == store.url
    assert clone.get("p/k") == b"v"


# --- file modes (README: File modes of the store and the state dir) --------------------

from tests.modes_util import NOBODY, loose_entries, open_base, readable_by  # noqa: E402


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _write_every_way(s: LocalStore, tmp_path) -> str:
    s.put("_gravfs/repo.json", b"{}")
    s.put_if_absent("_gravfs/commits/c1", b"commit")
    v = s.compare_and_swap("_gravfs/refs/branches/main", None, b"c1")
    s.compare_and_swap("_gravfs/refs/branches/main", v, b"c2")
    src = tmp_path / "src"
    src.write_bytes(b"secret" * 100)
    s.upload("data/ab/abcd", str(src))
    sst = tmp_path / "sst"
    sst.write_bytes(b"range")
    os.chmod(sst, 0o644)  # as rocksdict writes them; put_file_if_absent links it in
    assert s.put_file_if_absent("_gravfs/ranges/r1", str(sst))
    return os.path.join(s.root, "data", "ab", "abcd")


def test_local_store_objects_are_private(tmp_path, umask022):
    """Under umask 022 every directory (the root it created too) is 0700 and every
    file (objects, refs, lock files, a hard-linked SST) 0600, so another uid reads nothing."""
    base = open_base()
    try:
        s = LocalStore(os.path.join(base, "store"))
        obj = _write_every_way(s, tmp_path)
        assert loose_entries(s.root) == []
        control = os.path.join(base, "control")
        with open(control, "w") as f:
            f.write("world-readable")
        os.chmod(control, 0o644)
        assert readable_by(NOBODY, control)  # the uid switch works: the modes decide
        assert not readable_by(NOBODY, obj)
    finally:
        import shutil
        shutil.rmtree(base)


def test_local_store_shared_with_its_group_by_a_setgid_root(tmp_path):
    """A root with the set-group-ID bit (chmod 2770) shares the store with its group:
    directories 2770, files 0660, even under umask 077; others get nothing."""
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o2770)
    old = os.umask(0o077)
    try:
        s = LocalStore(str(root))
        _write_every_way(s, tmp_path)
    finally:
        os.umask(old)
    assert loose_entries(str(root), dir_mode=0o2770, file_mode=0o660) == []


def test_local_store_of_an_older_gravfs_is_tightened_at_open(tmp_path):
    """Top directories left 0755 (objects 0644) by an older gravfs become 0700 when the
    store is opened, which hides every object in them; the root itself is the user's."""
    root = tmp_path / "old"
    for d in ("data/ab", "_gravfs/refs"):
        (root / d).mkdir(parents=True)
    (root / "data/ab/abcd").write_bytes(b"old object")
    for p in (root, root / "data", root / "data/ab", root / "_gravfs", root / "_gravfs/refs"):
        os.chmod(p, 0o755)
    LocalStore(str(root))
    assert oct(os.stat(root / "data").st_mode & 0o777) == "0o700"
    assert oct(os.stat(root / "_gravfs").st_mode & 0o777) == "0o700"
    assert oct(os.stat(root).st_mode & 0o777) == "0o755"


def test_local_store_on_a_read_only_disk_names_the_store_and_nothing_else(tmp_path, caplog):
    from tests.repo_util import read_only
    LocalStore(str(tmp_path / "store")).put("data/ab/kept", b"kept")
    src = tmp_path / "sst"
    src.write_bytes(b"range")
    with read_only(str(tmp_path / "store")) as ro:
        store = LocalStore(ro)
        assert store.get("data/ab/kept") == b"kept"
        with caplog.at_level("WARNING"):
            with pytest.raises(OSError) as put:
                store.put("data/ab/new", b"x")
            with pytest.raises(OSError) as linked:
                store.put_file_if_absent("data/ab/other", str(src))
        assert put.value.errno == linked.value.errno == errno.EROFS
        # the store's path, not the caller's own file, and no warning about a temp
        # file that could not have been made
        assert linked.value.filename == os.path.join(ro, "data", "ab", "other")
        assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert src.read_bytes() == b"range"
