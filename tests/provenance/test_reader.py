"""The index layout and reader without Spark: files written by layout.write_sorted, a
manifest, and lookups that open only the files and row groups that can hold a key."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest

from gravfs.errors import AmbiguousRefError
from gravfs.provenance import layout
from gravfs.provenance import manifest as manifests
from gravfs.provenance.queries import resolve_address
from gravfs.provenance.reader import IndexMissingError, IndexReader
from gravfs.store import open_store
from gravfs.store.tier import LocalTier


def _rows(n: int, seed: int = 1) -> list[tuple[bytes, bytes, bytes]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        h = rnd.randbytes(32).hex()
        for j in range(rnd.choice([1, 1, 2, 3])):  # a content in several ranges
            out.append((f"data/{h[:2]}/{h}".encode(), rnd.randbytes(32), f"p/{i}/{j}".encode()))
    return sorted(out)


def _index(tmp_path, runs: list[list[tuple]], row_group_rows=16, file_rows=64):
    store = open_store(str(tmp_path / "store"))
    m = manifests.Manifest()
    for r, rows in enumerate(runs):
        t = pa.table({"address": [a for a, _, _ in rows], "range_id": [b for _, b, _ in rows],
                      "path": [p for _, _, p in rows]}, schema=layout.SCHEMAS[layout.CONTENTS])
        d = tmp_path / f"w{r}"
        os.makedirs(d)
        files = [layout.upload_file(store, layout.CONTENTS, f"run{r}", w)
                 for w in layout.write_sorted(layout.CONTENTS, t.to_batches(max_chunksize=7),
                                              str(d), "part", row_group_rows, file_rows)]
        m.runs.append(manifests.Run(f"run{r}", r, 0, 0, {layout.CONTENTS: files}))
    manifests.save(store, m)
    return store, LocalTier(store, str(tmp_path / "cache"), 1 << 30)


def test_point_lookups_read_one_row_group_of_one_file(tmp_path):
    rows = _rows(300)
    store, tier = _index(tmp_path, [rows])
    reader = IndexReader(store, tier)
    files = reader.files(layout.CONTENTS)
    assert len(files) == -(-len(rows) // 64) and sum(f.rows for f in files) == len(rows)
    for f in files:  # full row groups except each file's last
        fe = reader.fences(f)
        assert all(n == 16 for n in fe.rows[:-1]) and fe.first == sorted(fe.first)
    for addr in random.Random(2).sample(sorted({a for a, _, _ in rows}), 40):
        r = IndexReader(store, tier)
        got = r.get(layout.CONTENTS, addr)
        want = [(a, b, p) for a, b, p in rows if a == addr]
        assert sorted(zip(*[got.column(c).to_pylist() for c in got.column_names])) == want
        assert r.files_opened <= 2 and r.groups_read <= 2  # a key may straddle a boundary
    assert len(reader.get(layout.CONTENTS, b"data/zz")) == 0
    assert len(reader.get(layout.CONTENTS, b"")) == 0


def test_a_reader_decodes_a_row_group_once_within_its_budget(tmp_path):
    """Repeated lookups through one reader (a server's, a notebook's) answer from the
    decoded row groups it keeps, the same rows; the budget bounds what it keeps."""
    rows = _rows(300)
    store, tier = _index(tmp_path, [rows])
    reader = IndexReader(store, tier)
    addrs = sorted({a for a, _, _ in rows})[:50]
    first = [reader.get(layout.CONTENTS, a).to_pylist() for a in addrs]
    read = reader.groups_read
    assert read > 0
    assert [reader.get(layout.CONTENTS, a).to_pylist() for a in addrs] == first
    assert reader.groups_read == read
    many = reader.get_many(layout.CONTENTS, addrs)
    assert reader.groups_read == read
    assert sorted(many.to_pylist(), key=lambda r: (r["address"], r["path"])) == \
        sorted((r for rs in first for r in rs), key=lambda r: (r["address"], r["path"]))
    small = IndexReader(store, tier)
    small.max_group_bytes = 1  # keeps none: every lookup decodes again
    for a in addrs[:5]:
        small.get(layout.CONTENTS, a)
        small.get(layout.CONTENTS, a)
    assert small.groups_read >= 10


def test_get_many_and_scan_across_runs(tmp_path):
    a, b = _rows(100, seed=3), _rows(100, seed=4)
    store, tier = _index(tmp_path, [a, b])
    reader = IndexReader(store, tier)
    every = sorted(a + b)
    keys = [r[0] for r in random.Random(5).sample(every, 30)]
    got = reader.get_many(layout.CONTENTS, keys + [b"data/none"], ["path"])
    assert sorted(got.column("path").to_pylist()) == sorted(p for k, _, p in every if k in keys)
    lo, hi = b"data/4", b"data/8"
    got = reader.scan(layout.CONTENTS, lo, hi)
    assert sorted(got.column("address").to_pylist()) == [k for k, _, _ in every if lo <= k < hi]
    assert len(reader.read_all(layout.CONTENTS)) == len(every)


def test_resolve_address_by_digest_prefix(tmp_path):
    rows = [(b"data/ab/abcdef00" + b"0" * 56, b"r" * 32, b"x"),
            (b"data/ab/abcdef11" + b"0" * 56, b"r" * 32, b"y"),
            (b"sparse/cd/cd0123" + b"0" * 58, b"r" * 32, b"z")]
    store, tier = _index(tmp_path, [rows])
    reader = IndexReader(store, tier)
    assert resolve_address(reader, "abcdef00") == "data/ab/abcdef00" + "0" * 56
    assert resolve_address(reader, "cd0123") == "sparse/cd/cd0123" + "0" * 58
    assert resolve_address(reader, "data/anything") == "data/anything"  # taken as given
    assert resolve_address(reader, "ffffff") is None
    with pytest.raises(AmbiguousRefError):
        resolve_address(reader, "abcdef")


def test_no_manifest_means_no_index(tmp_path):
    store = open_store(str(tmp_path / "store"))
    with pytest.raises(IndexMissingError, match="gravfs spark index"):
        IndexReader(store, LocalTier(store, str(tmp_path / "cache"), 1 << 20))
