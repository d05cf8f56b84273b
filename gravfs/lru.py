"""A map kept in order of use, for the bounded caches (chunks, tier files, SST readers, blocks).

``LRU`` remembers use order (least recently used first) and, given ``weigh``,
the total weight of its values (bytes, usually). It has no lock and no limits
of its own: each cache holds its own lock (it guards more than the map) and
says at eviction what its limits are now (tests and tuning change them). The
eviction policies the caches need are options of ``evict``: pinned items
skipped (the tier), a second chance for items used since the last pass (CLOCK:
the SST block cache, whose hits set a flag without a lock), room for an item
about to be added (the open SST readers).

``peek`` is the underlying dict's ``get`` (no Python call on the hot path);
``get`` also marks the item used and tolerates a concurrent removal, so
lock-free hits stay correct.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, Optional, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_NONE = object()


class LRU(Generic[K, V]):
    """Ordered map, least recently used first; ``weight``: the sum of ``weigh(value)``
    (a value's weight must not change while it is in the map)."""

    __slots__ = ("_items", "_weigh", "weight", "peek")

    def __init__(self, weigh: Optional[Callable[[V], int]] = None):
        self._items: OrderedDict[K, V] = OrderedDict()
        self._weigh = weigh
        self.weight = 0
        self.peek = self._items.get  # (key, default=None): the value, use order untouched

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def keys(self):
        return self._items.keys()

    def values(self):
        return self._items.values()

    def items(self):
        return self._items.items()

    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """The value, now the most recently used (``default`` if absent)."""
        v = self._items.get(key, _NONE)
        if v is _NONE:
            return default
        try:
            self._items.move_to_end(key)
        except KeyError:  # removed by another thread meanwhile: the value is still good
            pass
        return v

    def touch(self, key: K) -> bool:
        """Mark ``key`` most recently used; False if it is not in the map."""
        try:
            self._items.move_to_end(key)
        except KeyError:
            return False
        return True

    def put(self, key: K, value: V) -> None:
        """Add or replace, as the most recently used (no eviction: see ``evict``)."""
        items = self._items
        old = items.get(key, _NONE)
        items[key] = value
        if old is not _NONE:
            items.move_to_end(key)
        if self._weigh is not None:
            if old is not _NONE:
                self.weight -= self._weigh(old)
            self.weight += self._weigh(value)

    def pop(self, key: K, default: Optional[V] = None) -> Optional[V]:
        v = self._items.pop(key, _NONE)
        if v is _NONE:
            return default
        if self._weigh is not None:
            self.weight -= self._weigh(v)
        return v

    def clear(self) -> None:
        self._items.clear()
        self.weight = 0

    def evict(self, max_items: Optional[int] = None, max_weight: Optional[int] = None, *,
              adding: Optional[int] = None,
              skip: Optional[Callable[[K, V], bool]] = None,
              second_chance: Optional[Callable[[K, V], bool]] = None) -> list[tuple[K, V]]:
        """Remove least recently used items while over a limit; returns them, oldest first.

        ``adding``: the weight of an item about to be put: room is made for it (and
        for one more item). ``skip(key, value)``: the item stays where it is (pinned).
        ``second_chance(key, value)``: True moves the item to the most recent end
        instead (the predicate clears what made it true); after one pass over the
        map items go whatever it says.
        """
        items = self._items
        weigh = self._weigh
        n_cap = len(items) if max_items is None else max_items - (adding is not None)
        if max_weight is None or weigh is None:
            w_cap = self.weight
        else:
            w_cap = max_weight - (adding or 0)
        out: list[tuple[K, V]] = []
        if len(items) <= n_cap and self.weight <= w_cap:
            return out
        if skip is not None:
            for k, v in list(items.items()):
                if skip(k, v):
                    continue
                self.pop(k)
                out.append((k, v))
                if len(items) <= n_cap and self.weight <= w_cap:
                    break
            return out
        chances = len(items) if second_chance is not None else 0
        popitem = items.popitem
        while items and (len(items) > n_cap or self.weight > w_cap):
            k, v = popitem(False)
            if chances and second_chance(k, v):
                chances -= 1
                items[k] = v  # weight unchanged
                continue
            if weigh is not None:
                self.weight -= weigh(v)
            out.append((k, v))
        return out
