"""gravfs spark import of an inventory manifest (S3 Inventory's CSV and Parquet layouts).

A manifest written from a prefix's listing names the same objects with the
same size, last-modified and ETag, so its by-reference import must give the
same metarange ID as the by-reference import of the prefix itself; its copy
import the same as the prefix's copy import.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import re
import uuid
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gravfs.errors import GravfsError
from gravfs.fs.repository import Repository
from gravfs.spark.importer import import_manifest, import_s3
from gravfs.spark.runtime import SparkJobError
from tests.fuse_util import s3_env
from tests.repo_util import head_metarange, small_settings
from tests.spark.test_runtime import SPARK_CONF, run_cli
from tests.spark.test_s3source import put_objects, s3spark  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark


def listing(server, prefix: str) -> list[dict]:
    """Rows as S3 Inventory writes them: bucket, key, size, last_modified_date, e_tag."""
    c = server.client()
    rows = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix):
        for o in page.get("Contents", ()):
            rows.append({"bucket": server.bucket, "key": o["Key"], "size": o["Size"],
                         "last_modified_date": o["LastModified"].astimezone(datetime.timezone.utc),
                         "e_tag": o["ETag"].strip('"')})
    return rows


def write_csv(path: str, rows: list[dict], gz: bool = False, extra: bool = False) -> None:
    """Headerless CSV, keys URL-encoded, dates ISO 8601 with milliseconds and Z."""
    lines = []
    for r in rows:
        fields = [r["bucket"], quote_plus(r["key"], safe="/"), str(r["size"]),
                  r["last_modified_date"].strftime("%Y-%m-%dT%H:%M:%S.000Z"), r["e_tag"]]
        if extra:
            fields.append("STANDARD")
        lines.append(",".join(f'"{f}"' for f in fields))
    data = ("\n".join(lines) + "\n").encode()
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(data)


def write_parquet(path: str, rows: list[dict], row_group_size: int = 50) -> None:
    table = pa.table({"bucket": [r["bucket"] for r in rows], "key": [r["key"] for r in rows],
                      "size": pa.array([r["size"] for r in rows], pa.int64()),
                      "last_modified_date": pa.array([r["last_modified_date"] for r in rows],
                                                     pa.timestamp("ms", "UTC")),
                      "e_tag": [r["e_tag"] for r in rows],
                      "storage_class": ["STANDARD"] * len(rows)})
    pq.write_table(table, path, row_group_size=row_group_size)


@pytest.fixture(scope="module")
def lake(s3spark, s3_server, tmp_path_factory):
    """Objects under a prefix, other objects beside it, and the bucket's listing."""
    run = uuid.uuid4().hex[:8]
    prefix = f"man-{run}/lake/"
    want = put_objects(s3_server, prefix, dirs=5, files=30)
    put_objects(s3_server, f"man-{run}/other/", dirs=1, files=5, seed=2)
    rows = listing(s3_server, f"man-{run}/")
    d = tmp_path_factory.mktemp("manifests")
    return prefix, want, rows, d


def test_csv_and_parquet_by_reference_equal_the_prefix_import(s3spark, s3_server, lake, repo):
    prefix, want, rows, d = lake
    half = len(rows) // 2
    os.makedirs(d / "csv", exist_ok=True)
    write_csv(str(d / "csv" / "a.csv"), rows[:half], extra=True)
    write_csv(str(d / "csv" / "b.csv.gz"), rows[half:], gz=True, extra=True)
    pdir = d / "parquet"
    os.makedirs(pdir, exist_ok=True)
    write_parquet(str(pdir / "a.parquet"), rows[:half])
    write_parquet(str(pdir / "b.parquet"), rows[half:])
    repo.create_branch("prefix", "main")
    import_s3(s3spark, repo, f"s3://{s3_server.bucket}/{prefix}", "prefix", "x",
              by_reference=True, partitions=2)
    for branch, src, cols in (("csv", str(d / "csv"),
                               "Bucket, Key, Size, LastModifiedDate, ETag, StorageClass"),
                              ("parquet", str(pdir), None)):
        repo.create_branch(branch, "main")
        res = import_manifest(s3spark, repo, src, branch, "x", columns=cols, key_prefix=prefix,
                              partitions=3)
        assert res.files == len(want), branch
        assert head_metarange(repo, branch) == head_metarange(repo, "prefix"), branch
    e = repo.stat("csv", "x/caf\u00e9 r\u00e9sum\u00e9+plus.txt").entry  # decoded from the CSV
    assert e.address == f"s3://{s3_server.bucket}/{prefix}caf\u00e9 r\u00e9sum\u00e9+plus.txt"


def test_manifest_json_copy_mode_equals_prefix_copy(s3spark, s3_server, lake, repo):
    """An S3 Inventory manifest.json on S3 naming CSV files on S3; copy mode reads the
    objects from S3."""
    prefix, want, rows, d = lake
    c = s3_server.client()
    inv = f"inventory-{uuid.uuid4().hex[:8]}/"
    local = str(d / "part.csv.gz")
    write_csv(local, rows, gz=True)
    with open(local, "rb") as f:
        c.put_object(Bucket=s3_server.bucket, Key=inv + "data/part.csv.gz", Body=f.read())
    manifest = {"sourceBucket": s3_server.bucket,
                "destinationBucket": f"arn:aws:s3:::{s3_server.bucket}",
                "fileFormat": "CSV", "fileSchema": "Bucket, Key, Size, LastModifiedDate, ETag",
                "files": [{"key": inv + "data/part.csv.gz", "size": 1, "MD5checksum": "x"}]}
    c.put_object(Bucket=s3_server.bucket, Key=inv + "manifest.json",
                 Body=json.dumps(manifest).encode())
    repo.create_branch("prefix", "main")
    import_s3(s3spark, repo, f"s3://{s3_server.bucket}/{prefix}", "prefix", partitions=2)
    res = import_manifest(s3spark, repo, f"s3://{s3_server.bucket}/{inv}manifest.json", "main",
                          key_prefix=prefix, by_reference=False, partitions=2)
    assert res.files == len(want)
    assert head_metarange(repo, "main") == head_metarange(repo, "prefix")
    e = repo.stat("main", "top.txt").entry
    assert repo.data.read(e.address) == want["top.txt"]


def test_bad_manifests_fail_with_one_line_and_commit_nothing(s3spark, lake, repo, tmp_path):
    prefix, want, rows, d = lake
    head = repo.head("main", fresh=True)
    missing_col = tmp_path / "missing.parquet"
    pq.write_table(pa.table({"bucket": ["b"], "key": ["k"], "size": [1]}), str(missing_col))
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet at all" * 10)
    short = tmp_path / "short.csv"
    short.write_text('"b","k","1"\n')
    cases = [(str(tmp_path / "nosuch.csv"), "no such manifest file"),
             (str(missing_col), "lacks column(s) lastmodifieddate, etag"),
             (str(garbage), "cannot read manifest file"),
             (str(short), "Expected 5 columns, got 3")]
    for src, msg in cases:
        with pytest.raises(GravfsError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            import_manifest(s3spark, repo, src, "main")
    # a row that does not parse: in the first file, found before Spark runs; in a later
    # one, the job fails; either way nothing is committed
    bad = tmp_path / "bad"
    bad.mkdir()
    write_csv(str(bad / "a.csv"), rows[:20])
    write_csv(str(bad / "b.csv"), rows[20:40])
    with open(bad / "b.csv", "a") as f:
        f.write('"b","k","twelve","2026-01-01T00:00:00.000Z","e"\n')
    with pytest.raises(SparkJobError, match="b.csv: In CSV column #2: Row #21: CSV conversion "
                       "error to int64: invalid value 'twelve'"):
        import_manifest(s3spark, repo, str(bad), "main")
    with pytest.raises(GravfsError, match="b.csv: In CSV column #2"):
        import_manifest(s3spark, repo, str(bad / "b.csv"), "main")
    assert repo.head("main", fresh=True) == head


def test_cli_manifest_bad_input_before_spark(s3_server, lake, tmp_path):
    prefix, want, rows, d = lake
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    run_cli("init", store=store, state=state)
    p = tmp_path / "m.parquet"
    pq.write_table(pa.table({"key": ["k"], "size": [1]}), str(p))
    rc, out, err = run_cli("spark", "import", str(p), "main", "--by-reference", *SPARK_CONF,
                           store=store, state=state, check=False, **s3_env(s3_server))
    assert rc == 1 and out == ""
    assert err.strip().splitlines() == [
        f"gravfs: {p}: the manifest lacks column(s) bucket, lastmodifieddate, etag "
        "(it has: key, size)"], err


def test_killed_by_reference_import_commits_nothing_and_reruns(s3_server, lake, tmp_path):
    """kill -9 of the driver's process group while it writes the metarange; the re-run
    gives the tree an uninterrupted import gives, and fsck (which checks the
    referenced objects) is clean."""
    from tests.spark.killable import HANG, KillableCli, count_files

    prefix, want, rows, d = lake
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    src = str(tmp_path / "inv.parquet")
    write_parquet(src, rows, row_group_size=40)
    with Repository.init(store, state, settings=small_settings()) as repo:
        repo.create_branch("whole", "main")
        head = repo.head("main", fresh=True)
    before = count_files(store, "_gravfs/ranges")
    s3 = s3_env(s3_server)
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, **s3,
               GRAVFS_STORE_FAULT=f"op=put_file_if_absent,key=_gravfs/metaranges/*,{HANG}")
    with KillableCli(["spark", "import", src, "main", "--by-reference", "--master", "local[2]",
                      *SPARK_CONF], env, str(tmp_path / "import.err"), state) as run:
        # the driver stitches after the tasks wrote their ranges; a metarange write hangs
        run.wait_for(lambda: count_files(store, "_gravfs/ranges") > before
                     or "injected hang: put_file_if_absent _gravfs/metaranges/" in run.stderr(),
                     "writing ranges")
    with Repository.open(store, state) as repo:
        assert repo.head("main", fresh=True) == head
    for branch in ("main", "whole"):  # the re-run, and an import never interrupted
        run_cli("spark", "import", src, branch, "--by-reference", "--master", "local[2]",
                *SPARK_CONF, store=store, state=state, **s3)
    with Repository.open(store, state) as repo:
        assert head_metarange(repo, "main") == head_metarange(repo, "whole")
    rc, out, err = run_cli("fsck", "-q", store=store, state=state, check=False, **s3)
    assert rc == 0, out + err


def test_keys_both_file_and_directory_are_imported_and_reported(s3spark, s3_server, repo,
                                                                tmp_path):
    """An object store holds ``a`` beside ``a/b``; a filesystem cannot. Both keys are
    imported (nothing of the lake is lost) and the import counts and names them, also
    when the file and its ``name/`` keys fall into different partitions."""
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    keys = [f"t/d/k{i:04d}" for i in range(300)] + ["t/d/k0150/x"]
    keys += ["t/m"] + [f"t/m-{i:04d}" for i in range(300)] + ["t/m/z", "t/m0"]
    keys += ["t/n", "t/n.txt"]  # a file beside a longer name: no clash
    rows = [{"bucket": s3_server.bucket, "key": k, "size": 10, "last_modified_date": when,
             "e_tag": "0" * 32} for k in sorted(keys)]
    write_parquet(str(tmp_path / "m.parquet"), rows, row_group_size=100)
    res = import_manifest(s3spark, repo, str(tmp_path / "m.parquet"), "main", "x",
                          key_prefix="t/", partitions=3)
    assert res.files == len(keys)
    assert res.partitions > 2  # x/m and x/m/z are 300 keys apart
    assert res.file_dirs == 2
    assert sorted(res.file_dirs_shown) == [b"x/d/k0150", b"x/m"]
    mr = head_metarange(repo, "main")
    for k in (b"x/m", b"x/m/z", b"x/d/k0150", b"x/d/k0150/x"):
        assert repo.committed.get(mr, k) is not None


def test_folder_markers_holding_bytes_are_counted_and_named(s3spark, s3_server, repo,
                                                            tmp_path):
    """A key ending in '/' is not imported: an empty one (a console's folder) silently,
    one holding bytes counted and named in the result, relative to the key prefix."""
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    sizes = {"t/a": 3, "t/d/": 0, "t/d/b": 4, "t/notes/": 12, "t/x/more/": 1, "u/skip/": 9}
    rows = [{"bucket": s3_server.bucket, "key": k, "size": n, "last_modified_date": when,
             "e_tag": "2" * 32} for k, n in sorted(sizes.items())]
    write_parquet(str(tmp_path / "m.parquet"), rows)
    res = import_manifest(s3spark, repo, str(tmp_path / "m.parquet"), "main",
                          key_prefix="t/", by_reference=True, partitions=2)
    assert res.files == 2
    assert (res.left_out, res.left_out_shown) == (2, ("notes/", "x/more/"))
    assert res.left_out_as == "a key ending in '/' (a folder marker) that holds bytes"


def test_cli_names_keys_both_file_and_directory(s3_server, tmp_path):
    """The summary line says how many imported names are a file and a directory too,
    and names them, once (no warning above it says the same); ``--json`` carries it."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    run_cli("init", store=store, state=state)
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    rows = [{"bucket": s3_server.bucket, "key": k, "size": 3, "last_modified_date": when,
             "e_tag": "1" * 32} for k in ("a", "a.txt", "a/b", "c", "c/d/e", "c/d/f")]
    write_parquet(str(tmp_path / "m.parquet"), rows)
    _rc, out, err = run_cli("spark", "import", str(tmp_path / "m.parquet"), "main",
                            "--by-reference", *SPARK_CONF, store=store, state=state,
                            **s3_env(s3_server))
    assert "Note: 2 imported names are both a file and a directory (a, c): the mount " \
           "shows the directory; gravfs cat reads the file" in out, out
    assert "both a file and a directory" not in err, err
    _rc, out, _err = run_cli("spark", "import", str(tmp_path / "m.parquet"), "main:again",
                             "--by-reference", "--json", *SPARK_CONF, store=store,
                             state=state, **s3_env(s3_server))
    got = json.loads(out)
    assert got["file_and_directory"] == 2
    assert got["file_and_directory_keys"] == ["again/a", "again/c"]


def versioned(rows: list[dict]) -> list[dict]:
    """Rows as the inventory of a versioned bucket lists them: every current object,
    then (sorted with it, as S3 writes them) an older version of every third and a
    newer delete marker over an old version of a key gone since."""
    old = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    out = []
    for i, r in enumerate(rows):
        out.append(dict(r, version_id=f"v{i}", is_latest=True, is_delete_marker=False))
        if i % 3 == 0:
            out.append(dict(r, version_id=f"o{i}", is_latest=False, is_delete_marker=False,
                            size=r["size"] + 1, last_modified_date=old, e_tag="0" * 32))
            gone = r["key"] + ".gone"
            out.append(dict(r, key=gone, version_id=f"d{i}", is_latest=True,
                            is_delete_marker=True, size=None, e_tag=None))
            out.append(dict(r, key=gone, version_id=f"g{i}", is_latest=False,
                            is_delete_marker=False, last_modified_date=old))
    return out


def test_a_versioned_buckets_inventory_imports_the_current_versions(s3spark, s3_server, lake,
                                                                    repo, tmp_path):
    """Its rows list every version and delete marker (S3 Inventory's IsLatest and
    IsDeleteMarker columns): the import holds the bucket's current objects, the same
    tree as the inventory of the current versions only."""
    prefix, want, rows, d = lake
    rows = versioned(rows)
    assert len(rows) > len(want) + 20
    cols = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"
    lines = []
    for r in rows:
        fields = [r["bucket"], quote_plus(r["key"], safe="/"), r["version_id"],
                  str(r["is_latest"]).lower(), str(r["is_delete_marker"]).lower(),
                  "" if r["size"] is None else str(r["size"]),
                  r["last_modified_date"].strftime("%Y-%m-%dT%H:%M:%S.000Z"), r["e_tag"] or ""]
        lines.append(",".join(f'"{f}"' for f in fields))
    (tmp_path / "v.csv").write_text("\n".join(lines) + "\n")
    table = pa.table({"bucket": [r["bucket"] for r in rows], "key": [r["key"] for r in rows],
                      "version_id": [r["version_id"] for r in rows],
                      "is_latest": pa.array([r["is_latest"] for r in rows], pa.bool_()),
                      "is_delete_marker": pa.array([r["is_delete_marker"] for r in rows],
                                                   pa.bool_()),
                      "size": pa.array([r["size"] for r in rows], pa.int64()),
                      "last_modified_date": pa.array([r["last_modified_date"] for r in rows],
                                                     pa.timestamp("ms", "UTC")),
                      "e_tag": [r["e_tag"] for r in rows]})
    pq.write_table(table, str(tmp_path / "v.parquet"), row_group_size=40)
    repo.create_branch("prefix", "main")
    import_s3(s3spark, repo, f"s3://{s3_server.bucket}/{prefix}", "prefix", "x",
              by_reference=True, partitions=2)
    for branch, src, columns in (("csv", tmp_path / "v.csv", cols),
                                 ("parquet", tmp_path / "v.parquet", None)):
        repo.create_branch(branch, "main")
        res = import_manifest(s3spark, repo, str(src), branch, "x", columns=columns,
                              key_prefix=prefix, partitions=3)
        assert res.files == len(want), branch
        assert head_metarange(repo, branch) == head_metarange(repo, "prefix"), branch


def test_a_key_listed_twice_fails_naming_it_and_commits_nothing(s3spark, lake, repo, tmp_path):
    """Two inventories of one bucket side by side (or one of a versioned bucket without
    its version columns): the import cannot tell which row is the content."""
    prefix, want, rows, d = lake
    both = tmp_path / "both"
    both.mkdir()
    write_csv(str(both / "monday.csv"), rows)
    write_csv(str(both / "tuesday.csv"), rows[:1])
    head = repo.head("main", fresh=True)
    twice = f"the source lists x/{rows[0]['key'][len(prefix):]} more than once"
    with pytest.raises(SparkJobError, match=re.escape(twice)):
        import_manifest(s3spark, repo, str(both), "main", "x", key_prefix=prefix, partitions=2)
    assert repo.head("main", fresh=True) == head


def test_csv_keys_that_look_like_numbers_stay_names(s3spark, s3_server, repo, tmp_path):
    """A CSV whose keys are all digits: pyarrow would read them as integers."""
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    rows = [{"bucket": s3_server.bucket, "key": k, "size": 3, "last_modified_date": when,
             "e_tag": "1" * 32} for k in ("007", "10", "9")]
    write_csv(str(tmp_path / "n.csv"), rows)
    res = import_manifest(s3spark, repo, str(tmp_path / "n.csv"), "main", "n")
    assert res.files == 3
    assert [n.fs_name for n in repo.list_dir("main", "n")] == [b"007", b"10", b"9"]


def test_a_key_prefix_is_a_folder(s3spark, s3_server, repo, tmp_path):
    """``--key-prefix lake`` keeps lake/x (as x), as ``s3://bucket/lake`` would: not
    lakehouse/y (as house/y), nor the object lake itself (as the import's own folder)."""
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    rows = [{"bucket": s3_server.bucket, "key": k, "size": 3, "last_modified_date": when,
             "e_tag": "1" * 32} for k in ("lake", "lake/d/x", "lakehouse/y")]
    write_parquet(str(tmp_path / "p.parquet"), rows)
    res = import_manifest(s3spark, repo, str(tmp_path / "p.parquet"), "main", "in",
                          key_prefix="lake")
    assert res.files == 1
    assert [n.fs_name for n in repo.list_dir("main", "in")] == [b"d"]
    assert [n.fs_name for n in repo.list_dir("main", "in/d")] == [b"x"]
