"""Sparse files in the data plane: holes are not stored, equal bytes get one address,
reads fill holes with zeros, and fsck checks manifests and extents (local store and
SeaweedFS)."""

from __future__ import annotations

import io
import os

import pytest

from gravfs.data import sparse
from gravfs.errors import CorruptDataError
from gravfs.fs.fsck import fsck
from gravfs.fs.repository import Repository
from tests.repo_util import repo, store_target  # noqa: F401  (fixtures)

MiB = 1 << 20


def _holey(path, size: int, pieces: dict[int, bytes]) -> bytes:
    """Write a file with holes (seeks over them); returns its content."""
    content = bytearray(size)
    with open(path, "wb") as f:
        for off, data in pieces.items():
            f.seek(off)
            f.write(data)
            content[off:off + len(data)] = data
        f.truncate(size)
    return bytes(content)


def _stored(repo) -> set[str]:
    return {k for top in ("data/", "sparse/") for k in repo.store.list(top)}


def test_holes_are_not_stored_and_equal_bytes_share_an_address(repo, tmp_path):
    pieces = {0: os.urandom(5000), 30 * MiB: os.urandom(3 * MiB + 7)}
    content = _holey(tmp_path / "holes", 64 * MiB, pieces)
    (tmp_path / "dense").write_bytes(content)  # the same bytes, zeros written out
    before = _stored(repo)
    a_holes, size = repo.data.put_path(str(tmp_path / "holes"))
    assert size == len(content) and a_holes.startswith("sparse/")
    new = _stored(repo) - before
    # one manifest and one object per extent: 1 MiB at 0, 4 MiB at 30 MiB (grid chunks)
    assert len(new) == 3
    assert sum(repo.store.size(k) for k in new) < 6 * MiB
    a_dense, _ = repo.data.put_path(str(tmp_path / "dense"))
    a_bytes, _ = repo.data.put_bytes(content)
    assert a_dense == a_bytes == a_holes
    assert _stored(repo) - before == new
    m = repo.data.manifest(a_holes)
    assert [(o, n) for o, n, _ in m.extents] == [(0, MiB), (30 * MiB, 4 * MiB)]
    assert repo.data.read(a_holes) == content
    for off, n in [(0, 5000), (4990, 20), (MiB - 3, 10), (30 * MiB - 5, 11),
                   (34 * MiB - 2, 4 * MiB), (64 * MiB - 1, 10), (64 * MiB, 5)]:
        assert repo.data.read(a_holes, off, n) == content[off:off + n]
    out = io.BytesIO()
    assert repo.data.copy_to(a_holes, out) == len(content)
    assert out.getvalue() == content


def test_zeros_cost_no_object_and_short_runs_stay_dense(repo, tmp_path):
    before = _stored(repo)
    with open(tmp_path / "zeros", "wb") as f:
        f.truncate(1 << 30)
    address, size = repo.data.put_path(str(tmp_path / "zeros"))
    assert address == sparse.zeros_address(1 << 30) and size == 1 << 30
    assert _stored(repo) == before
    assert repo.data.read(address, (1 << 30) - 10, 100) == bytes(10)
    # zero runs under MIN_HOLE, and small all-zero files, are ordinary objects
    short = os.urandom(MiB) + bytes(sparse.MIN_HOLE - MiB) + os.urandom(10)
    for data in (short, bytes(4 * MiB)):
        a, _ = repo.data.put_bytes(data)
        assert a.startswith("data/")
        assert repo.data.read(a) == data


def test_files_with_holes_through_the_repository_and_fsck(repo, store_target, tmp_path):
    content = _holey(tmp_path / "f", 40 * MiB, {12 * MiB: b"x" * 100})
    repo.write_file("main", "f", str(tmp_path / "f"))
    repo.write_file("main", "z", bytes(16 * MiB))
    c = repo.commit("main", "sparse")
    assert repo.read(c.id, "f") == content
    assert repo.read(c.id, "z") == bytes(16 * MiB)
    rep = fsck(repo, check_data=True, progress=False)
    assert rep.problems == [] and rep.data_objects == 1
    address = repo.stat(c.id, "f").entry.address
    extent = repo.data.manifest(address).extents[0][2]
    # a damaged extent is found by fsck --data; a missing manifest by plain fsck (from a
    # workspace whose tier has no verified copies yet)
    repo.store.put(extent, b"y" * MiB)
    other = Repository.open(store_target, str(tmp_path / "other-state"))
    try:
        rep = fsck(other, check_data=True, progress=False)
        assert any(extent in p for p in rep.problems), rep.problems
        other.store.delete(address)
        rep = fsck(other, check_data=False, progress=False)
        assert any(address in p for p in rep.problems), rep.problems
    finally:
        other.close()


def test_bad_manifests_are_refused():
    good = sparse.Manifest(10 * MiB, ((0, MiB, "data/ab/" + "ab" * 32),))
    assert sparse.Manifest.decode(good.encode(), "x") == good
    for doc in (b"not json", b'{"format": 2, "size": 1, "extents": []}',
                b'{"format": 1, "size": 10, "extents": [[5, 10, "data/aa/x"]]}',
                b'{"format": 1, "size": 10, "extents": [[0, 4, "data/a"], [2, 4, "data/b"]]}',
                b'{"format": 1, "size": 10, "extents": [[0, 4, "sparse/zeros/4"]]}'):
        with pytest.raises(CorruptDataError):
            sparse.Manifest.decode(doc, "x")
