"""Where ranges end: the break policy.

After each record the range writer asks the policy whether to close the
current range.  Boundaries are content-defined (they depend on the keys and
the bytes accumulated since the range started, never on SST bytes or on the
history of edits) so that rewriting a range after a small change tends to end
at the same key as before, and the following ranges are reused by ID.

lakeFS (pkg/graveler/committed, GeneralMetaRangeWriter.shouldBreakAtKey and
pkg/config defaults) breaks when the SST writer's approximate size is
>= max_range_size_bytes, or >= min_range_size_bytes and
FNV-1a-64(key) % range_raggedness_entries == 0.  Its defaults are

    committed.permanent.min_range_size_bytes     = 0
    committed.permanent.max_range_size_bytes     = 20 MiB (20 * 1024 * 1024)
    committed.permanent.range_raggedness_entries = 50_000

gravfs keeps that rule but counts logical bytes (len(key) + len(encoded
value)) so boundaries are reproducible whatever the SST writer does, and uses
xxh3-64 keyed with a per-repository seed (only boundaries depend on it, never
identity).  ``SizeAwareBreakPolicy`` is the alternative offered for
benchmarks: its break probability is proportional to the record's size, so
the expected range size is the same in bytes whatever the records look like.
"""

from __future__ import annotations

from typing import Any, Mapping

import xxhash

_x64 = xxhash.xxh3_64_intdigest
_TWO64 = 1 << 64

LAKEFS_MIN_RANGE_SIZE = 0
LAKEFS_MAX_RANGE_SIZE = 20 * 1024 * 1024
LAKEFS_RANGE_RAGGEDNESS = 50_000


class BreakPolicy:
    """lakeFS rule: break at size >= max, or size >= min and xxh3(key, seed) % raggedness == 0."""

    kind = "lakefs"
    __slots__ = ("min_size", "max_size", "raggedness", "seed")

    def __init__(self, min_size: int, max_size: int, raggedness: int, seed: int = 0):
        if raggedness < 1 or max_size < 1 or min_size < 0 or min_size > max_size:
            raise ValueError("break policy needs 0 <= min_size <= max_size and raggedness >= 1")
        self.min_size = int(min_size)
        self.max_size = int(max_size)
        self.raggedness = int(raggedness)
        self.seed = int(seed) & (_TWO64 - 1)

    @classmethod
    def lakefs_defaults(cls, seed: int = 0) -> "BreakPolicy":
        return cls(LAKEFS_MIN_RANGE_SIZE, LAKEFS_MAX_RANGE_SIZE, LAKEFS_RANGE_RAGGEDNESS, seed)

    def hash_break(self, key: bytes, record_size: int) -> bool:
        """The content-defined part of the rule (subclasses change only this)."""
        return _x64(key, self.seed) % self.raggedness == 0

    def first_hash_break(self, keys: list[bytes], sizes: list[int], start: int, end: int) -> int:
        """Index of the first i in [start, end) with hash_break(keys[i], sizes[i]), else end.

        The writers' hot loop; subclasses may override it for speed.
        """
        x, seed, rg = _x64, self.seed, self.raggedness
        for i in range(start, end):
            if x(keys[i], seed) % rg == 0:
                return i
        return end

    def should_break(self, key: bytes, record_size: int, range_size: int) -> bool:
        """True to close the range after ``key``; ``range_size`` includes this record."""
        if range_size >= self.max_size:
            return True
        return range_size >= self.min_size and self.hash_break(key, record_size)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "min_size": self.min_size, "max_size": self.max_size,
                "raggedness": self.raggedness, "seed": self.seed}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(min_size={self.min_size}, max_size={self.max_size}, "
                f"raggedness={self.raggedness}, seed={self.seed})")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.to_dict().items())))


class SizeAwareBreakPolicy(BreakPolicy):
    """Break with probability record_size / target_size per record (plus min/max).

    Each record's decision depends only on its own key and size, so boundaries
    resynchronize right after an edit, and ranges average about
    ``min_size + target_size`` bytes for small and large records alike
    (lakeFS's entry-count raggedness gives byte sizes that scale with record
    size instead).
    """

    kind = "size-aware"
    __slots__ = ("target_size", "_scale")

    def __init__(self, min_size: int, max_size: int, target_size: int, seed: int = 0):
        super().__init__(min_size, max_size, 1, seed)
        if target_size < 1:
            raise ValueError("target_size must be >= 1")
        self.target_size = int(target_size)
        self._scale = _TWO64 // self.target_size

    def hash_break(self, key: bytes, record_size: int) -> bool:
        return _x64(key, self.seed) < record_size * self._scale

    def first_hash_break(self, keys: list[bytes], sizes: list[int], start: int, end: int) -> int:
        x, seed, scale = _x64, self.seed, self._scale
        for i in range(start, end):
            if x(keys[i], seed) < sizes[i] * scale:
                return i
        return end

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "min_size": self.min_size, "max_size": self.max_size,
                "target_size": self.target_size, "seed": self.seed}

    def __repr__(self) -> str:
        return (f"SizeAwareBreakPolicy(min_size={self.min_size}, max_size={self.max_size}, "
                f"target_size={self.target_size}, seed={self.seed})")


def policy_from_dict(d: Mapping[str, Any]) -> BreakPolicy:
    """Inverse of ``to_dict`` (for repo.json)."""
    kind = d.get("kind", "lakefs")
    if kind == "lakefs":
        return BreakPolicy(d["min_size"], d["max_size"], d["raggedness"], d.get("seed", 0))
    if kind == "size-aware":
        return SizeAwareBreakPolicy(d["min_size"], d["max_size"], d["target_size"], d.get("seed", 0))
    raise ValueError(f"unknown break policy kind {kind!r}")
