"""The store objects an entry keeps alive: shared by garbage collection's mark and by
a commit that claims what old staging references (gravfs.version.committer)."""

from __future__ import annotations

import logging

from gravfs.data import sparse
from gravfs.errors import NotFoundError
from gravfs.fs.entry import ADDRESS_FULL, KIND_FILE, EntryInfo

log = logging.getLogger(__name__)


def live_addresses(entry: EntryInfo, store_url: str, data) -> list[str]:
    """The store objects one entry keeps alive: its data object, or a sparse file's
    manifest and extents. A by-reference entry (ADDRESS_FULL) keeps nothing, unless
    its URL points into this store (then the object it names)."""
    address = entry.address
    if not address or entry.kind != KIND_FILE:
        return []
    if entry.address_type == ADDRESS_FULL:
        base = store_url.rstrip("/") + "/"
        return [address[len(base):]] if address.startswith(base) else []
    if not sparse.is_sparse(address):
        return [address]
    if sparse.zeros_manifest(address) is not None:
        return []  # zeros throughout: nothing stored
    out = [address]
    try:
        out += [a for _, _, a in data.manifest(address).extents]
    except NotFoundError:
        log.warning("sparse manifest %s is missing; its extents cannot be known", address)
    return out
