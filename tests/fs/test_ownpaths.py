"""gravfs.fs.ownpaths: which paths and keys are the repository's own."""

from __future__ import annotations

import os

from gravfs.fs.ownpaths import in_s3_store, own_dirs, s3_store_keys, within


def test_within_compares_whole_path_components():
    assert within("/a/b", "/a/b") and within("/a/b/c", "/a/b") and within("/a", "/")
    assert not within("/a/bc", "/a/b") and not within("/a", "/a/b")


def test_own_dirs_of_local_and_s3_stores(tmp_path):
    link = tmp_path / "link"
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", link)
    got = own_dirs(f"file://{link}/store", str(tmp_path / "state"))
    assert got == [(str(tmp_path / "real" / "store"), f"this repository's store ({link}/store)"),
                   (str(tmp_path / "state"), f"gravfs's state directory ({tmp_path / 'state'})")]
    assert [p for p, _ in own_dirs("s3://b/lake", "/s")] == ["/s"]  # no local store


def test_an_s3_stores_own_keys():
    """Only _gravfs/, data/ and sparse/ under the store's prefix: data may share its
    bucket, even its prefix."""
    assert s3_store_keys("s3://b/lake/") == ("b", ("lake/_gravfs/", "lake/data/", "lake/sparse/"))
    assert s3_store_keys("s3://b") == ("b", ("_gravfs/", "data/", "sparse/"))
    assert s3_store_keys("/local/path") is None
    assert in_s3_store("s3://b/lake", "b", "lake/data/out/")
    assert in_s3_store("s3://b", "b", "_gravfs/x")
    assert not in_s3_store("s3://b/lake", "b", "lake/raw/")
    assert not in_s3_store("s3://b/lake", "other", "lake/data/")
    assert not in_s3_store("s3://b/lake", "b", "")
