"""TablePatch: a table rebuilt from an old one plus edits reads (with our reader, with
RocksDB and with sst_dump) exactly as the old table with the edits applied, and the
data blocks no edit falls in are the old table's bytes."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gravfs.sstable import SSTReader, write_sst
from gravfs.sstable.patch import TablePatch
from tests.sstable.support import rocksdb_items, rocksdict_sst, sst_dump

PROPS = {"type": b"ranges", "count": b"0"}


def _items(n: int, step: int = 3) -> list[tuple[bytes, bytes]]:
    return [(b"dir/part-%06d" % (i * step), b"v%d-" % i + bytes(120)) for i in range(n)]


def _apply(items, edits):
    d = dict(items)
    for k, v in edits:
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return sorted(d.items())


def _patched(tmp_path, items, edits, compression="snappy", **kw):
    src = str(tmp_path / "old.sst")
    write_sst(src, items, PROPS, compression=compression, **kw)
    out = str(tmp_path / "new.sst")
    with SSTReader(src) as r:
        plan = TablePatch(r, edits)
        assert plan.ok
        info = plan.write(out, {"type": b"ranges", "count": b"7"}, compression=compression)
        old = dict(items)
        assert plan.old_values == [old.get(k) for k, _ in edits]
        images = {img for _, img in r.block_images()}
    return out, info, images


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_patched_table_reads_as_the_edits_applied(tmp_path, data):
    items = _items(data.draw(st.integers(1, 400)))
    keys = sorted({b"dir/part-%06d" % data.draw(st.integers(0, 1300))
                   for _ in range(data.draw(st.integers(1, 12)))})
    edits = [(k, data.draw(st.sampled_from([None, b"new", b"x" * 300]))) for k in keys]
    want = _apply(items, edits)
    if not want:
        return
    out, info, _ = _patched(tmp_path, items, edits)
    with SSTReader(out) as r:
        r.verify()
        assert list(r) == want
        assert all(r.get(k) == v for k, v in want)
        assert r.num_entries == len(want) == info.count
        assert (info.first_key, info.last_key) == (want[0][0], want[-1][0])
        assert r.user_properties == {"type": b"ranges", "count": b"7"}
        assert r.table_properties.raw_key_size == sum(len(k) + 8 for k, _ in want)
        assert r.table_properties.raw_value_size == sum(len(v) for _, v in want)
    assert rocksdb_items(out) == want


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_untouched_blocks_are_copied_and_rocksdb_tools_accept_the_table(tmp_path, compression):
    items = _items(3000)
    edits = [(b"dir/part-001501", b"inserted"), (items[1500][0], b"changed"), (items[2900][0], None)]
    out, info, old_images = _patched(tmp_path, items, edits, compression)
    with SSTReader(out) as r:
        new_images = [img for _, img in r.block_images()]
        assert list(r) == _apply(items, edits)
    # three blocks changed; every other block is the old
    # table's, byte for byte
    assert len(old_images - set(new_images)) == 3
    assert len(new_images) == len(old_images)
    assert rocksdb_items(out) == _apply(items, edits)
    res = sst_dump(out, "--command=verify")
    assert res.returncode == 0 and "corrupt" not in (res.stdout + res.stderr).lower(), res.stderr
    assert sorted(os.listdir(tmp_path)) == ["new.sst", "old.sst"]  # no temp file left behind


def test_a_block_that_grows_is_split_and_one_emptied_is_dropped(tmp_path):
    items = _items(200)
    inserts = [(b"dir/part-000100" + b"%03d" % i, b"y" * 200) for i in range(60)]
    deletes = [(k, None) for k, _ in items[150:200]]  # the last blocks, whole
    edits = sorted(inserts + deletes)
    out, info, _ = _patched(tmp_path, items, edits)
    with SSTReader(out) as r:
        assert list(r) == _apply(items, edits)
        assert max(s for _, s in r.block_handles()) < 4 * 4096
    assert rocksdb_items(out) == _apply(items, edits)


def test_tables_not_written_by_sst_file_writer_alone_are_refused(tmp_path):
    path = rocksdict_sst(str(tmp_path / "d.sst"), _items(50), deletes=[b"dir/part-000001"])
    with SSTReader(path) as r:
        assert not TablePatch(r, [(b"dir/part-000003", b"x")]).ok
    path = rocksdict_sst(str(tmp_path / "t.sst"), _items(500), index="two_level_index_search",
                         metadata_block_size=256)
    with SSTReader(path) as r:
        assert not TablePatch(r, [(b"dir/part-000003", b"x")]).ok


def test_deleting_everything_is_an_error_not_an_empty_table(tmp_path):
    items = _items(5)
    src = str(tmp_path / "old.sst")
    write_sst(src, items, PROPS)
    with SSTReader(src) as r:
        plan = TablePatch(r, [(k, None) for k, _ in items])
        assert plan.first_key() is None
        with pytest.raises(ValueError, match="empty"):
            plan.write(str(tmp_path / "new.sst"))
    assert os.listdir(tmp_path) == ["old.sst"]
