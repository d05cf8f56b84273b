"""gravfs spark import of an S3 prefix (the suite's SeaweedFS), by copy and by reference.

The objects of a prefix, downloaded into a directory with their last-modified
as mtime and mode 0644, are the same tree to ``gravfs import``: a copy import
of the prefix must give the same metarange ID. A by-reference import carries
each object's s3:// address, size, last-modified and ETag (byref.md).
"""

from __future__ import annotations

import logging
import os
import random
import uuid

import pytest

from gravfs.errors import GravfsError
from gravfs.fs.entry import ADDRESS_FULL, ADDRESS_RELATIVE
from gravfs.fs.importer import import_tree as local_import
from gravfs.spark.importer import import_s3
from gravfs.spark.s3source import S3Object, _ns, object_records
from tests.fuse_util import s3_env
from tests.repo_util import head_metarange
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def s3spark(s3_server):
    """A local[2] session whose driver and workers reach the SeaweedFS of the suite
    (the JVM may be an earlier module's: the workers get the S3 environment
    through spark.executorEnv)."""
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    saved = dict(os.environ)
    env = s3_env(s3_server)
    os.environ.update(env)
    from gravfs.spark.runtime import start_session

    s = start_session("local[2]", [("spark.ui.enabled", "false"),
                                   ("spark.driver.memory", "1g"),
                                   *((f"spark.executorEnv.{k}", v) for k, v in env.items())])
    try:
        yield s
    finally:
        s.stop()
        os.environ.clear()
        os.environ.update(saved)


def put_objects(server, prefix: str, dirs: int = 6, files: int = 40, seed: int = 1) -> dict:
    """Objects under prefix (nested "directories", duplicate contents, a folder object,
    a non-ASCII key); returns {relative key: bytes} of the files."""
    rnd = random.Random(seed)
    c = server.client()
    want = {}
    for d in range(dirs):
        for f in range(files):
            rel = f"date=2026-01-{d + 1:02d}/h{f % 3}/part-{f:05d}.json"
            want[rel] = b"same" if f % 7 == 0 else rnd.randbytes(rnd.randrange(1, 300))
    want["top.txt"] = b"top level\n"
    want["caf\u00e9 r\u00e9sum\u00e9+plus.txt"] = b"non-ascii key\n"
    for rel, data in want.items():
        c.put_object(Bucket=server.bucket, Key=prefix + rel, Body=data)
    c.put_object(Bucket=server.bucket, Key=prefix + "date=2026-01-01/folder/", Body=b"")
    return want


def download_tree(server, prefix: str, dest: str) -> None:
    """The prefix's objects as local files (mtime = last-modified, mode 0644)."""
    c = server.client()
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix):
        for o in page.get("Contents", ()):
            if o["Key"].endswith("/"):
                continue
            path = os.path.join(dest, o["Key"][len(prefix):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(c.get_object(Bucket=server.bucket, Key=o["Key"])["Body"].read())
            os.chmod(path, 0o644)
            ns = _ns(o["LastModified"])
            os.utime(path, ns=(ns, ns))


@pytest.fixture(scope="module")
def objects(s3spark, s3_server):
    prefix = f"src-{uuid.uuid4().hex[:8]}/lake/"
    return prefix, put_objects(s3_server, prefix)


def test_copy_import_equals_gravfs_import_of_the_downloaded_prefix(s3spark, s3_server, objects,
                                                                    repo, tmp_path):
    prefix, want = objects
    local = str(tmp_path / "download")
    download_tree(s3_server, prefix, local)
    repo.create_branch("single", "main")
    local_import(repo, local, "single", "in", progress=False)
    url = f"s3://{s3_server.bucket}/{prefix}"
    res = import_s3(s3spark, repo, url, "main", "in", partitions=3)
    assert res.partitions == 3  # split at the common prefixes the driver listed
    assert res.files == len(want)
    assert (res.left_out, res.left_out_shown) == (0, ())  # an empty folder marker: no loss
    assert res.ranges > 10
    assert head_metarange(repo, "main") == head_metarange(repo, "single")
    for rel in ("top.txt", "caf\u00e9 r\u00e9sum\u00e9+plus.txt", "date=2026-01-03/h1/part-00004.json"):
        e = repo.stat("main", f"in/{rel}").entry
        assert e.address_type == ADDRESS_RELATIVE
        assert repo.data.read(e.address) == want[rel]
    assert res.commit.metadata["import_source"] == url


def test_by_reference_entries_carry_the_objects(s3spark, s3_server, objects, repo):
    prefix, want = objects
    c = s3_server.client()
    url = f"s3://{s3_server.bucket}/{prefix.rstrip('/')}"  # a prefix without its slash
    data_before = sum(1 for _ in repo.store.list("data/"))
    res = import_s3(s3spark, repo, url, "main", partitions=2, by_reference=True)
    assert res.files == len(want)
    assert sum(1 for _ in repo.store.list("data/")) == data_before  # nothing copied
    assert res.commit.metadata["import_by_reference"] == "true"
    for rel in ("top.txt", "caf\u00e9 r\u00e9sum\u00e9+plus.txt", "date=2026-01-06/h2/part-00005.json"):
        e = repo.stat("main", rel).entry
        head = c.head_object(Bucket=s3_server.bucket, Key=prefix + rel)
        assert e.address_type == ADDRESS_FULL
        assert e.address == f"s3://{s3_server.bucket}/{prefix}{rel}"
        assert e.size == len(want[rel])
        assert e.e_tag == head["ETag"].strip('"') and '"' not in e.e_tag
        assert e.mtime_ns == _ns(head["LastModified"])
    # folder objects are skipped
    assert repo.committed.get(head_metarange(repo, "main"), b"date=2026-01-01/folder/") is None


def test_s3_prefix_bad_input_commits_nothing(s3spark, s3_server, repo, objects):
    head = repo.head("main", fresh=True)
    with pytest.raises(GravfsError, match="bucket no-such-bucket does not exist"):
        import_s3(s3spark, repo, "s3://no-such-bucket/x/", "main")
    with pytest.raises(GravfsError, match="no objects under this prefix"):
        import_s3(s3spark, repo, f"s3://{s3_server.bucket}/nothing-here-{uuid.uuid4().hex}/",
                  "main")
    with pytest.raises(GravfsError, match="the prefix has a '..' segment"):
        import_s3(s3spark, repo, f"s3://{s3_server.bucket}/x/../y/", "main")
    assert repo.head("main", fresh=True) == head


def test_cli_by_reference_and_missing_bucket(s3_server, objects, tmp_path):
    prefix, want = objects
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    env = s3_env(s3_server)
    run_cli("init", store=store, state=state)
    rc, out, err = run_cli("spark", "import", f"s3://{s3_server.bucket}/{prefix}", "main:raw",
                           "--by-reference", "--master", "local[2]", *SPARK_CONF,
                           store=store, state=state, **env)
    assert f"Imported {len(want)} entries (by reference) into main:raw" in out
    rc, out, err = run_cli("spark", "import", "s3://no-such-bucket/p/", "main:raw",
                           *SPARK_CONF, store=store, state=state, check=False, **env)
    assert rc == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gravfs: cannot list s3://no-such-bucket/p/"), err
    assert "bucket no-such-bucket does not exist" in lines[0]


def test_the_repositorys_own_store_is_left_out(s3spark, s3_server, tmp_path, monkeypatch):
    """A source prefix holding the repository's own S3 store imports the other objects
    only, whether the driver's split meets the store's prefixes or an executor lists
    them in full; a source inside the store is refused."""
    import io

    from gravfs.fs.repository import Repository
    from gravfs.spark import s3source
    from tests.repo_util import small_settings

    base = f"mixed-{uuid.uuid4().hex[:8]}/"
    store = s3_server.make_store(prefix=base + "lake")
    repo = Repository.init(store, str(tmp_path / "state"), settings=small_settings())
    try:
        repo.write_file("main", "kept", io.BytesIO(b"in the store's data/"))
        repo.commit("main", "one object in data/")
        c = s3_server.client()
        raw = {f"raw/part-{i}.csv": b"%d\n" % i for i in range(3)}
        for rel, body in raw.items():
            c.put_object(Bucket=s3_server.bucket, Key=base + rel, Body=body)
        url = f"s3://{s3_server.bucket}/{base}"
        for depth, dest in ((s3source.MAX_SPLIT_DEPTH, "driver"), (1, "executor")):
            monkeypatch.setattr(s3source, "MAX_SPLIT_DEPTH", depth)
            res = import_s3(s3spark, repo, url, "main", dest)
            assert res.files == len(raw), dest
            keys = {rec.key for rec in repo.committed.iter(head_metarange(repo, "main"))}
            assert {k for k in keys if k.startswith(dest.encode() + b"/")} == {
                f"{dest}/{rel}".encode() for rel in raw}, dest
        with pytest.raises(GravfsError, match="it is in this repository's store"):
            import_s3(s3spark, repo, f"{url}lake/data/", "main", "x")
    finally:
        repo.close()


def test_a_folder_marker_holding_bytes_is_named_in_a_warning(caplog):
    """Keys ending in '/' are left out; one that holds bytes is not a console's empty
    folder marker, and its content would otherwise go unseen."""
    empty = S3Object("d/folder/", 0, "etag", 1)
    full = S3Object("d/notes/", 12, "etag", 1)
    skipped: list[str] = []
    with caplog.at_level(logging.WARNING, logger="gravfs.spark.s3source"):
        got = list(object_records("bkt", 2, b"", [empty, full], skipped=skipped))
    assert got == []
    assert [r.getMessage() for r in caplog.records] == [
        "s3://bkt/d/notes/: not imported: its key ends in '/' (a folder marker), yet it "
        "holds 12 bytes"]
    assert skipped == ["notes/"]  # for the summary, relative to the source's prefix
