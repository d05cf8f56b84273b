"""What ``gravfs provenance`` is asked about: FILE, ADDRESS or REF:PATH -> an address.

Tried in this order: an existing local file (its address as gravfs would
store it); an address (``data/...``, ``sparse/...``, a URL of a
by-reference entry) or a hex digest, possibly a unique prefix of at least 6
characters, of a content the index holds; REF:PATH (the address of that
file in that ref). ``./main:x`` names a local file called ``main:x``.
"""

from __future__ import annotations

import errno
import os

from gravfs.errors import GravfsError, NotFoundError, PathTypeError
from gravfs.provenance.address import file_address
from gravfs.provenance.queries import looks_like_address, resolve_address
from gravfs.provenance.reader import IndexReader


def content_address(repo, reader: IndexReader, text: str) -> str:
    """The content address ``text`` names (see the module doc)."""
    if os.path.isfile(text):
        return file_address(text, repo.workspace.tmp)
    if os.path.isdir(text):
        raise PathTypeError(f"{text}: is a directory (provenance takes a file)", errno.EISDIR)
    if looks_like_address(text):
        address = resolve_address(reader, text)
        if address is None:
            raise NotFoundError(f"no indexed commit holds a content whose address starts "
                                f"with {text!r}")
        return address
    if ":" not in text or text.startswith(":"):
        raise GravfsError(f"{text!r} is not a local file, a content address or REF:PATH")
    ref, path = text.split(":", 1)
    node = repo.stat(ref, path)
    if node.kind == "dir":
        raise PathTypeError(f"{node.shown}: is a directory in {ref} (provenance "
                            f"takes a file)", errno.EISDIR)
    if not node.entry.address:
        raise GravfsError(f"{node.shown}: has no content in {ref} (a {node.kind})")
    return node.entry.address
