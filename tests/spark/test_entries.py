"""gravfs.spark.entries (gravfs/spark/tables.py) and ``gravfs spark entries``: every entry of a commit, one row each,
as ``gravfs ls`` lists them (foreign names escaped), read one task per range."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from gravfs.fs.entry import KIND_CHAR_DEVICE, KIND_FIFO, KIND_FILE, EntryInfo
from gravfs.fs.importer import import_tree as local_import
from gravfs.fs.repository import Repository
from gravfs.spark import entries
from gravfs.version.committed.record import encode_value
from gravfs.fs.entry import encode_entry, entry_identity
from gravfs.quoting import quote
from tests.fuse_util import s3_env
from tests.repo_util import small_settings
from tests.spark.test_import import make_tree
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


def ls_recursive(repo, ref: str, shown: bytes = b"") -> dict[str, tuple]:
    """What ``gravfs ls REF:DIR`` prints, directory by directory (each listed by the path
    ls shows it under): shown path -> (kind, size, mode, mtime_ns, address); a directory
    is a row when it has a marker entry."""
    out = {}
    for n in repo.list_dir(ref, shown):
        name = shown + n.fs_name
        if n.kind == "dir":
            if n.entry is not None:
                e = n.entry
                out[quote(name + b"/")] = ("dir", e.size, e.mode, e.mtime_ns, e.address or None)
            out.update(ls_recursive(repo, ref, name + b"/"))
        else:
            e = n.entry
            out[quote(name)] = (n.kind, e.size, e.mode, e.mtime_ns, e.address or None)
    return out


def rows_of(df) -> dict[str, tuple]:
    return {r["path"]: (r["kind"], r["size"], r["mode"], r["mtime_ns"], r["address"])
            for r in df.collect()}


def test_entries_equal_ls(spark, repo, tmp_path):
    """Every entry once, as gravfs ls shows it, with the range holding it; a task reads
    several ranges here (more ranges than four tasks per core)."""
    from gravfs.spark.tables import task_count
    src = str(tmp_path / "src")
    os.makedirs(src)
    n = make_tree(src, dirs=6, files=30)
    local_import(repo, src, "main", progress=False)
    mr = repo.committed.metarange(repo.commits.get(repo.head("main", fresh=True)).metarange)
    assert len(mr) > 10
    df = entries(spark, repo, "main")
    tasks = df.rdd.getNumPartitions()
    assert tasks == task_count(len(mr), spark.sparkContext.defaultParallelism) < len(mr)
    got = rows_of(df)
    assert len(got) == n
    assert got == ls_recursive(repo, "main")
    # range ids and identities: each row names the range holding it
    rows = df.select("key", "range_id", "identity").collect()
    by_range = {}
    for r in rows:
        by_range.setdefault(r["range_id"], []).append(bytes(r["key"]))
    assert set(by_range) == set(mr.ids)
    for info in mr.ranges:
        assert sorted(by_range[info.id]) == [k for k, _ in
                                            repo.committed.ranges.range_items(info.id)]


def test_foreign_keys_are_shown_escaped(spark, repo):
    """Keys another writer made (a leading '/', '..', a NUL, invalid UTF-8) are shown as
    ``gravfs ls`` shows them; ``key`` keeps the bytes."""
    e = EntryInfo(address="", size=0, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    keys = [b"ok/plain", b"a//b", b"x/../y", b"nul\x00name", b"bad\xffutf8", b"quote\"d"]
    repo.stage_values("main", [(k, encode_value(entry_identity(e), encode_entry(e)))
                               for k in keys])
    repo.commit("main", "foreign")
    got = rows_of(entries(spark, repo, "main"))
    assert got == ls_recursive(repo, "main")
    keys_back = {bytes(r["key"]) for r in entries(spark, repo, "main").collect()}
    assert keys_back == set(keys)


def test_special_files_have_the_kind_ls_shows(spark, repo):
    """A FIFO or a device is "fifo", "chardev"... as in ``gravfs ls`` (it was "file")."""
    items = [(b"pipe", EntryInfo(address="", size=0, mtime_ns=1, mode=0o644, kind=KIND_FIFO)),
             (b"dev/null", EntryInfo(address="", size=0, mtime_ns=1, mode=0o666,
                                     kind=KIND_CHAR_DEVICE, rdev=os.makedev(1, 3)))]
    repo.stage("main", items)
    repo.commit("main", "special")
    got = rows_of(entries(spark, repo, "main"))
    assert got == ls_recursive(repo, "main")
    assert got["pipe"][0] == "fifo" and got["dev/null"][0] == "chardev"


def test_entries_of_an_empty_commit(spark, repo):
    assert entries(spark, repo, "main").count() == 0


def test_cli_entries_writes_parquet(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    src = str(tmp_path / "src")
    os.makedirs(src)
    n = make_tree(src, dirs=3, files=10)
    run_cli("import", "-q", src, "main", store=store, state=state)
    out = str(tmp_path / "out")
    rc, so, err = run_cli("spark", "entries", "main", "--out", out, "--master", "local[2]",
                          "--json", *SPARK_CONF, store=store, state=state)
    summary = json.loads(so)
    assert summary["entries"] == n
    table = pq.read_table(out)
    assert table.num_rows == n
    with Repository.open(store, state) as repo:
        want = ls_recursive(repo, "main")
    got = {r["path"]: (r["kind"], r["size"], r["mode"], r["mtime_ns"], r["address"])
           for r in table.to_pylist()}
    assert got == want
    # the output exists now: a second run refuses it, one line, before Spark starts
    rc, so, err = run_cli("spark", "entries", "main", "--out", out, store=store, state=state,
                          check=False)
    assert rc != 0 and err.strip().count("\n") == 0 and "not an empty directory" in err
    # nor into the repository's own directories, nor nowhere
    for bad, msg in ((os.path.join(store, "_gravfs", "t"), "it is in this repository's store"),
                     (os.path.join(store, "t"), "it is in this repository's store"),
                     (os.path.join(state, "t"), "it is in gravfs's state directory"),
                     ("", "no output directory given")):
        rc, so, err = run_cli("spark", "entries", "main", "--out", bad, store=store,
                              state=state, check=False)
        assert rc == 1 and err.strip().count("\n") == 0 and msg in err, err
        assert not os.path.exists(bad or "_")


@pytest.mark.s3
def test_cli_entries_not_into_an_s3_stores_own_keys(s3_server, tmp_path):
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    store, state = s3_server.make_store().url, str(tmp_path / "state")
    env = s3_env(s3_server)
    run_cli("init", store=store, state=state, **env)
    for bad in (f"{store}/data/t", store.replace("s3://", "s3a://") + "/_gravfs/t"):
        rc, so, err = run_cli("spark", "entries", "main", "--out", bad, store=store,
                              state=state, check=False, **env)
        assert rc == 1 and err.strip() == f"gravfs: cannot write entries into {bad}: it is " \
            f"in this repository's store ({store})", err


@pytest.mark.s3
def test_cli_entries_to_an_s3_prefix(s3_server, tmp_path):
    """Written with gravfs's S3 code (Spark here has no S3 file system): the same rows as
    a local output, parts named by partition, _SUCCESS last; a prefix that holds objects
    is refused before Spark starts, as is a missing bucket."""
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    env = s3_env(s3_server)
    Repository.init(store, state, settings=small_settings()).close()
    src = str(tmp_path / "src")
    os.makedirs(src)
    n = make_tree(src, dirs=3, files=10)
    run_cli("import", "-q", src, "main", store=store, state=state)
    run_cli("spark", "entries", "main", "--out", str(tmp_path / "local"), "--master",
            "local[2]", *SPARK_CONF, store=store, state=state)
    prefix = f"entries-{tmp_path.name}"
    out = f"s3://{s3_server.bucket}/{prefix}"
    rc, so, err = run_cli("spark", "entries", "main", "--out", out, "--master", "local[2]",
                          "--json", *SPARK_CONF, store=store, state=state, **env)
    assert json.loads(so)["entries"] == n
    c = s3_server.client()
    keys = sorted(o["Key"] for o in c.list_objects_v2(Bucket=s3_server.bucket,
                                                      Prefix=prefix + "/")["Contents"])
    assert keys[0] == f"{prefix}/_SUCCESS" and len(keys) > 2, keys
    got = tmp_path / "got"
    got.mkdir()
    for k in keys[1:]:
        assert k.endswith(".snappy.parquet")
        c.download_file(s3_server.bucket, k, str(got / os.path.basename(k)))
    table, want = pq.read_table(str(got)), pq.read_table(str(tmp_path / "local"))
    assert table.schema.names == want.schema.names
    # Spark writes its timestamps as INT96 (read back without a zone), these in UTC
    assert table.schema.field("mtime").type.tz in ("UTC", "Etc/UTC")
    rows = table.sort_by("path").to_pylist()
    for r in rows:
        r["mtime"] = r["mtime"].replace(tzinfo=None)
    assert rows == want.sort_by("path").to_pylist()
    # an empty commit: one part with the columns and no rows
    empty = str(tmp_path / "empty")
    Repository.init(empty, state, settings=small_settings()).close()
    run_cli("spark", "entries", "main", "--out", out + "-empty", "--master", "local[2]",
            *SPARK_CONF, store=empty, state=state, **env)
    c.download_file(s3_server.bucket, f"{prefix}-empty/part-00000.snappy.parquet",
                    str(tmp_path / "empty.parquet"))
    nothing = pq.read_table(str(tmp_path / "empty.parquet"))
    assert nothing.num_rows == 0 and nothing.schema.names == want.schema.names
    for bad, msg in ((out, "holds objects already"),
                     ("s3://no-such-bucket-here/x", "no-such-bucket-here")):
        rc, so, err = run_cli("spark", "entries", "main", "--out", bad, store=store,
                              state=state, check=False, **env)
        assert rc != 0 and err.strip().count("\n") == 0 and msg in err, err


def test_cli_entries_missing_ref(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    rc, so, err = run_cli("spark", "entries", "nosuch", "--out", str(tmp_path / "o"),
                          store=store, state=state, check=False)
    assert rc != 0 and err.strip().count("\n") == 0 and "nosuch" in err
    assert "Traceback" not in err


def test_shown_path_equals_show():
    """The fast path of the path column prints every key exactly as show() does."""
    import random as _r
    from gravfs.fs.paths import show
    from gravfs.spark.tables import shown_path
    rnd = _r.Random(11)
    alphabet = [b"a", b"Z", b"0", b" ", b".", b"..", b"/", b"//", b"\"", b"\\", b"%", b"~",
                b"\x00", b"\x7f", b"\xff", "é".encode(), b"\n", b"-", b"_"]
    keys = [b"plain/key.txt", b"dir/", b"a" * 256, b"d/" + b"b" * 255, b".hidden", b"x/..",
            b"x/./y", b"/lead", b"trail/", b"a//b", b"..", b"."]
    for _ in range(20000):
        keys.append(b"".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 12))))
    for k in keys:
        for directory in (False, True):
            assert shown_path(k, directory) == show(k, directory=directory), (k, directory)


def test_task_count_groups_ranges_and_keeps_the_cores_busy():
    from gravfs.spark.tables import RANGES_PER_TASK, task_count
    assert task_count(1, 2) == 1
    assert task_count(5, 2) == 5                   # fewer ranges than 4 tasks per core
    assert task_count(300, 2) == 10                # 32 ranges a task at most
    assert task_count(3000, 100) == 400            # a cluster: 4 tasks per core
    for ranges in (1, 7, 33, 1000, 12345):
        for cores in (1, 2, 16):
            t = task_count(ranges, cores)
            assert 1 <= t <= ranges and -(-ranges // t) <= RANGES_PER_TASK
