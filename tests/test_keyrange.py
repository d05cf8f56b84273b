"""Byte-key ranges."""

from __future__ import annotations

from gravfs.keyrange import prefix_end


def test_prefix_end():
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None
