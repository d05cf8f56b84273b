"""The content address a local file would get, computed by the data plane itself.

``gravfs provenance FILE`` looks a local file up by the address gravfs gives
its bytes. That address is not always the plain hash: a file with holes or
long zero runs is stored as a sparse manifest (gravfs.data.sparse). Rather
than restate those rules, the data plane's own ``put_path`` runs against a
store that keeps nothing, so it computes the address and stores nothing.
"""

from __future__ import annotations

from gravfs.data.objects import DataObjects


class _KeepsNothing:
    """A store that accepts every write and keeps nothing: put_path only names."""

    url = "nothing:"

    def size(self, key: str) -> None:
        return None

    def claim_existing(self, key: str) -> bool:
        return False

    def put(self, key: str, data: bytes) -> None:
        pass

    def upload(self, key: str, src_path: str) -> None:
        pass

    def take_file(self, key: str, src_path: str) -> None:
        pass  # (a sparse file's extents are taken: see DataObjects._put_range)


def file_address(path: str, tmp_dir: str) -> str:
    """The address ``gravfs put``/``import`` would give the file at ``path``."""
    address, _ = DataObjects(_KeepsNothing(), None, tmp_dir).put_path(path)
    return address
