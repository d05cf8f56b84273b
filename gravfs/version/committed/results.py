"""Change, diff and result types shared by the committed operations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from gravfs.version.committed.record import Record


class Change(NamedTuple):
    """A put (identity is not None) or a delete (identity is None) of one key.

    ``value``: the put's already encoded value (record.encode_value of identity
    and data), when the change was read encoded (staging keeps values so); data
    may then be None. A Record, or a plain tuple of these fields (the staging
    readers yield them so: no object per entry), is accepted wherever a Change is.
    """

    key: bytes
    identity: Optional[bytes] = None
    data: Optional[bytes] = None
    value: Optional[bytes] = None

    @classmethod
    def put(cls, key: bytes, identity: bytes, data: bytes) -> "Change":
        return cls(key, identity, data)

    @classmethod
    def delete(cls, key: bytes) -> "Change":
        return cls(key, None, None)


ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"


class Diff(NamedTuple):
    """One difference between a left and a right tree."""

    key: bytes
    kind: str  # "added" | "removed" | "changed"
    left: Optional[Record]
    right: Optional[Record]


@dataclass
class Stats:
    """I/O done by one committed operation (ranges counted per logical read)."""

    ranges_read: int = 0
    ranges_written: int = 0
    ranges_reused: int = 0
    metaranges_written: int = 0
    bytes_written: int = 0
    records_written: int = 0
    ranges_patched: int = 0  # of ranges_written: made by editing blocks of an old range

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class ApplyResult:
    """Outcome of write_metarange/apply: the new tree and what it cost."""

    metarange_id: str
    stats: Stats = field(default_factory=Stats)

    # Convenience pass-throughs.
    @property
    def ranges_read(self) -> int:
        return self.stats.ranges_read

    @property
    def ranges_written(self) -> int:
        return self.stats.ranges_written

    @property
    def ranges_reused(self) -> int:
        return self.stats.ranges_reused

    @property
    def metaranges_written(self) -> int:
        return self.stats.metaranges_written

    @property
    def bytes_written(self) -> int:
        return self.stats.bytes_written


@dataclass
class MergeResult(ApplyResult):
    """Outcome of a three-way merge; ``conflicts`` lists keys resolved by the strategy;
    ``from_source`` and ``from_dest``, in key order, the keys whose record in the result
    is one side's change from base (removals aside): a key no side changed, or both
    alike, is in both sides (see gravfs.version.collisions). Both are empty when the
    result is one side's tree."""

    conflicts: list[bytes] = field(default_factory=list)
    changes: int = 0
    from_source: list[bytes] = field(default_factory=list)
    from_dest: list[bytes] = field(default_factory=list)
