"""Paths longer than LMDB's key limit in staging (gravfs.version.staging.area, long paths).

A path of up to MAX_PLAIN_PATH bytes is its own LMDB key; longer ones live under a
hashed key beside their head. Reads, listings (path order, mixed with plain keys
that share the head), deletes, commits and dropped tokens all see them as paths.
"""

import os

from gravfs.fs.entry import EntryInfo
from gravfs.fs.repository import Repository
from gravfs.version.staging.area import LONG_HEAD, MAX_PATH_BYTES, MAX_PLAIN_PATH, StagingArea
from tests.repo_util import small_settings


def _paths() -> list[bytes]:
    head = b"d/" + b"h" * (LONG_HEAD - 2)
    assert len(head) == LONG_HEAD
    return sorted([
        b"a", head, head + b"\x01", head + b"a", head + b"a" * (MAX_PLAIN_PATH - LONG_HEAD - 1),
        head + b"a" * (MAX_PLAIN_PATH - LONG_HEAD), head + b"a" * 40, head + b"b" * 3000,
        head + b"/x/" + b"y" * 600, head[:-1] + b"i" + b"z" * 900, b"z" * 700, b"zz",
    ])


def test_long_paths_read_list_and_delete_in_path_order(tmp_path):
    area = StagingArea(str(tmp_path / "lmdb"))
    try:
        paths = _paths()
        assert max(map(len, paths)) <= MAX_PATH_BYTES and max(map(len, paths)) > 511
        area.put_many("main", [(p, b"v" + p[-3:]) for p in reversed(paths)], None)
        tok = area.get_state("main").staging
        with area.read_txn() as txn:
            assert [p for p, _ in area.iter_token(txn, tok)] == paths
            for i, p in enumerate(paths):  # every start: what follows it, in order
                assert [q for q, _ in area.iter_token(txn, tok, p)] == paths[i:]
                assert area.lookup(txn, [tok], p) == b"\x01v" + p[-3:]
            assert area.lookup(txn, [tok], paths[7] + b"q") is None
        area.put_many("main", [(paths[7], None)], None)
        with area.read_txn() as txn:
            assert area.lookup(txn, [tok], paths[7]) == b"\x00"

        def drop(txn):
            return area.drop_tokens(txn, [tok])

        assert area.write(lambda txn: area.delete_from_token(txn, tok, [paths[8]])) == 1
        with area.read_txn() as txn:
            assert [p for p, _ in area.iter_token(txn, tok)] == paths[:8] + paths[9:]
        assert area.write(drop) == len(paths) - 1
        with area.read_txn() as txn:
            assert list(area.iter_token(txn, tok)) == []
            assert list(txn.cursor(db=area.long_db)) == []
    finally:
        area.close()


def test_long_paths_are_staged_committed_and_read_back(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    r = Repository.init(store, state, settings=small_settings())
    try:
        deep = "/".join(["d" * 200] * 15) + "/file"  # 3019 bytes
        short = "d" * 200 + "/near"
        r.write_file("main", deep, b"deep content")
        r.write_file("main", short, b"near")
        assert r.read("main", deep) == b"deep content"
        assert [n.path for n in r.walk("main") if n.kind == "file"] == sorted([deep, short])
        r.commit("main", "long paths")
        assert r.read("main", deep) == b"deep content"
        assert [n.name for n in r.list_dir("main", os.path.dirname(deep))] == ["file"]
        r.remove("main", deep)
        r.commit("main", "gone")
        assert [n.path for n in r.walk("main") if n.kind == "file"] == [short]
    finally:
        r.close()
