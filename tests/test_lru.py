"""gravfs.lru: use order, weights, and the eviction policies the caches rely on."""

from __future__ import annotations

from gravfs.lru import LRU


def _filled(n: int, weigh=None) -> LRU:
    lru = LRU(weigh=weigh)
    for i in range(n):
        lru.put(i, b"x" * (i + 1))
    return lru


def test_get_marks_used_and_peek_does_not():
    lru = _filled(3)
    assert lru.get(0) == b"x" and list(lru) == [1, 2, 0]
    assert lru.peek(1) == b"xx" and list(lru) == [1, 2, 0]
    assert lru.get(7, "none") == "none" and lru.peek(7) is None
    assert lru.touch(1) and not lru.touch(7) and list(lru) == [2, 0, 1]


def test_weight_follows_puts_replacements_and_pops():
    lru = _filled(3, weigh=len)
    assert lru.weight == 1 + 2 + 3
    lru.put(0, b"yyyy")  # replaced: weighs 4 now, and is the most recent
    assert lru.weight == 4 + 2 + 3 and list(lru) == [1, 2, 0]
    assert lru.pop(2) == b"xxx" and lru.pop(2) is None
    assert lru.weight == 4 + 2
    lru.clear()
    assert lru.weight == 0 and len(lru) == 0


def test_evict_by_items_and_weight_oldest_first():
    lru = _filled(5, weigh=len)  # weights 1..5
    assert lru.evict(max_items=10, max_weight=15) == []
    assert [k for k, _ in lru.evict(max_weight=12)] == [0, 1]  # 15 -> 12
    assert [k for k, _ in lru.evict(max_items=2)] == [2]
    assert list(lru) == [3, 4] and lru.weight == 9


def test_evict_makes_room_for_an_item_about_to_be_added():
    lru = _filled(3, weigh=len)  # weights 1, 2, 3
    assert [k for k, _ in lru.evict(max_items=3, adding=0)] == [0]
    assert [k for k, _ in lru.evict(max_weight=6, adding=2)] == [1]
    assert [k for k, _ in lru.evict(max_weight=1, adding=5)] == [2]  # never below empty
    assert len(lru) == 0


def test_evict_skips_pinned_items():
    lru = _filled(4)
    pinned = {0, 2}
    assert [k for k, _ in lru.evict(max_items=1, skip=lambda k, v: k in pinned)] == [1, 3]
    assert list(lru) == [0, 2]  # over its limit while everything left is pinned


def test_second_chance_moves_a_used_item_back_once():
    lru = _filled(4)
    used = {0, 1}

    def referenced(k, v) -> bool:
        if k in used:
            used.discard(k)
            return True
        return False

    assert [k for k, _ in lru.evict(max_items=2, second_chance=referenced)] == [2, 3]
    assert list(lru) == [0, 1]
    assert [k for k, _ in lru.evict(max_items=0, second_chance=lambda k, v: True)] == [0, 1]
