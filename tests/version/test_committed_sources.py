"""Change sets as override entries (gravfs.version.committed.sources): converted
exactly, and refused when a reader hands keys out of order (a bad tree must never
be written from them)."""

from __future__ import annotations

import pytest

from gravfs.version.committed.record import encode_value
from gravfs.version.committed.sources import as_overrides, chained, overrides_of

IDENT = b"\x07" * 32


def test_puts_keep_their_encoded_value_deletions_carry_none():
    enc = encode_value(IDENT, b"data")
    changes = [(b"a", IDENT, b"data"), (b"b", None, None), (b"c", IDENT, None, enc)]
    assert overrides_of(changes) == [(b"a", IDENT, enc, 1), (b"b", None, None, 1),
                                     (b"c", IDENT, enc, 1)]
    assert as_overrides(changes) == overrides_of(changes)


@pytest.mark.parametrize("keys", [[b"b", b"a"], [b"a", b"a"], [b"a", b"c", b"b"]])
def test_overrides_of_refuses_keys_out_of_order(keys):
    with pytest.raises(ValueError, match="not in strictly ascending key order"):
        overrides_of([(k, None, None) for k in keys])


def entries(*keys: bytes) -> list[tuple]:
    return [(k, None, None, 1) for k in keys]


def test_chained_streams_the_chunks_in_order_and_skips_empty_ones():
    chunks = [entries(b"a", b"b"), [], entries(b"c"), entries(b"d", b"e")]
    assert [e[0] for e in chained(iter(chunks))] == [b"a", b"b", b"c", b"d", b"e"]


@pytest.mark.parametrize("chunks, bad, before", [
    ([entries(b"a", b"c", b"b")], b"b", []),  # within a chunk
    ([entries(b"a", b"b"), entries(b"b")], b"b", [b"a", b"b"]),  # repeated across chunks
    ([entries(b"a", b"d"), [], entries(b"c", b"e")], b"c", [b"a", b"d"]),  # across an empty one
])
def test_chained_refuses_keys_out_of_order_within_and_across_chunks(chunks, bad, before):
    """No entry of a chunk out of order reaches the stitcher: the chunk is checked whole."""
    got = []
    with pytest.raises(ValueError, match="not in strictly ascending key order") as err:
        for e in chained(iter(chunks)):
            got.append(e[0])
    assert repr(bad) in str(err.value)
    assert got == before
