"""Byte-key ranges."""

from __future__ import annotations

from gravfs.keyrange import outermost, prefix_end


def test_prefix_end():
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None


def test_outermost_keeps_one_walk_per_tree():
    assert outermost([b"d/e", b"d", b"c", b"d", b"d.x", b"d/e/f", b"de"]) == [
        b"c", b"d", b"d.x", b"de"]
    assert outermost([]) == []
