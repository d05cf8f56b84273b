"""When a reader going through a directory in name order gets files loaded ahead
(gravfs.fuse.inorder)."""

from __future__ import annotations

from gravfs.fuse.inorder import InOrderReads


def _name(i: int) -> bytes:
    return b"f%03d" % i


def _begun(first: int, batch: int, names: list[bytes]) -> InOrderReads:
    """A follower (run 1) whose reader opened names[0] and names[1]: the first batch,
    after names[1], has been asked for."""
    r = InOrderReads(run=1, first=first, batch=batch)
    r.opened("d", names[0])
    assert r.opened("d", names[1]) == (names[1], first)
    return r


def _scan(r: InOrderReads, names: list[bytes], where="d") -> list[tuple[int, bytes, int]]:
    """Open ``names`` in turn; each batch asked for is listed at once from ``names``
    (the directory). (index of the open, after, count) of each batch asked for."""
    asked = []
    for i, name in enumerate(names):
        got = r.opened(where, name)
        if got is not None:
            after, count = got
            asked.append((i, after, count))
            listing = [n for n in names if n > after][:count]
            r.loaded(where, listing, len(listing) < count)
    return asked


def test_a_scan_gets_batches_growing_to_the_largest_half_a_batch_ahead():
    r = InOrderReads(run=3, first=4, batch=16)
    names = [_name(i) for i in range(100)]
    asked = _scan(r, names)
    # the fourth open in a row asks for 4; then each batch when the reader is half-way
    # through what was loaded and not yet opened, after the last name loaded, twice as
    # long as the last, up to 16; the directory's end stops it
    assert asked[:3] == [(3, b"f003", 4), (5, b"f007", 8), (10, b"f015", 16)]
    assert {c for _, _, c in asked[2:]} == {16}
    for j, after, count in asked[1:]:  # each asked for before the reader got to it
        assert names[j] < after
    assert asked[-1][1] < b"f099"
    listed = {n for _, after, c in asked for n in [n for n in names if n > after][:c]}
    assert listed == set(names[4:])  # each name after the run loaded, once


def test_opens_in_random_order_load_little():
    import random

    r = InOrderReads(run=3, first=4, batch=32)
    names = [_name(i) for i in range(1000)]
    order = names[:]
    random.Random(7).shuffle(order)
    asked = _scan(r, order)
    loaded = sum(c for _, _, c in asked)
    assert loaded < len(order) // 4  # (about 4 in 24 opens in a random order)
    assert all(c == 4 for _, _, c in asked)  # never past the first batch: none was followed


def test_a_reader_may_skip_names_but_any_other_open_starts_over():
    names = [_name(i) for i in range(40)]
    r = _begun(4, 8, names)
    r.loaded("d", names[2:6], False)
    # f002 skipped (a directory, say): half-way, the next batch, twice as long
    assert r.opened("d", names[3]) == (names[5], 8)
    r.loaded("d", names[6:14], False)
    assert r.opened("d", names[4]) is None
    assert r.opened("d", names[30]) is None  # a jump forward: starts over
    assert r.opened("d", names[31]) == (names[31], 4)  # its own run of two
    r.loaded("d", names[32:36], False)
    assert r.opened("d", names[2]) is None  # back: starts over
    assert r.opened("d", names[1]) is None


def test_a_reader_ahead_of_a_batch_being_listed_is_followed():
    names = [_name(i) for i in range(20)]
    r = _begun(2, 8, names)
    r.loaded("d", names[2:4], False)
    assert r.opened("d", names[2]) == (names[3], 4)
    assert r.opened("d", names[3]) is None
    assert r.opened("d", names[4]) is None  # past what was loaded, the next batch coming
    r.loaded("d", names[4:8], False)
    assert r.opened("d", names[5]) == (names[7], 8)  # followed: f004 was in that batch


def test_the_directory_end_or_a_failed_listing_stops_the_batches():
    names = [_name(i) for i in range(7)]
    r = _begun(4, 8, names)
    r.loaded("d", names[2:6], False)
    assert r.opened("d", names[2]) is None
    assert r.opened("d", names[3]) == (names[5], 8)
    r.loaded("d", names[6:], True)  # one name: the end
    assert [r.opened("d", n) for n in names[4:]] == [None, None, None]
    r2 = _begun(4, 8, [b"a", b"b"])
    r2.loaded("d", [], True)  # the listing failed
    assert r2.opened("d", b"c") is None  # a new run first
    assert r2.opened("d", b"d") == (b"d", 4)


def test_directories_are_followed_apart_and_the_oldest_forgotten():
    r = InOrderReads(run=1, first=2, batch=4, dirs=2)
    r.opened("a", b"1")
    r.opened("b", b"1")
    assert r.opened("a", b"2") == (b"2", 2)  # a's run went on between b's opens
    r.opened("c", b"1")  # a third directory: b, opened in longest ago, is forgotten
    assert r.opened("b", b"2") is None  # b starts over (and a, oldest now, is forgotten)
    r.loaded("a", [b"3", b"4"], False)  # forgotten meanwhile: ignored
    assert r.opened("a", b"3") is None


def test_a_batch_the_loader_cut_short_is_followed_by_one_after_its_last_name():
    r = _begun(4, 8, [b"a", b"b"])
    r.loaded("d", [b"c", b"d"], False)  # 2 of the 4: the loader's budget ran out
    assert r.opened("d", b"c") == (b"d", 8)
