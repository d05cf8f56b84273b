"""gravfs provenance FILE: the address a local file gets is the one gravfs stores it under,
plain or sparse, computed without storing anything."""

from __future__ import annotations

import os

from gravfs.data import sparse
from gravfs.fs.repository import Repository
from gravfs.provenance.address import file_address


def test_file_address_is_the_stored_address(tmp_path):
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    try:
        files = {"plain": b"hello world\n" * 100, "empty": b"",
                 "zeros": b"\0" * (2 * sparse.MIN_HOLE),
                 "mixed": b"x" * sparse.GRID + b"\0" * (2 * sparse.MIN_HOLE) + b"y"}
        kinds = set()
        for name, data in files.items():
            path = tmp_path / name
            path.write_bytes(data)
            before = _files(tmp_path / "store")
            address = file_address(str(path), str(tmp_path))
            assert _files(tmp_path / "store") == before  # nothing stored
            kinds.add(address.split("/")[0] + ("/zeros" if "zeros" in address else ""))
            repo.write_file("main", name, str(path))
            assert repo.stat("main", name).entry.address == address, name
        assert kinds == {"data", "sparse", "sparse/zeros"}
    finally:
        repo.close()


def _files(root) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
