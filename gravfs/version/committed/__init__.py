"""Committed metadata: immutable trees of range SSTs indexed by metarange SSTs.

Public API (see each module for details):

- record.py   Record, encode_value/decode_value, value_record_id, range_id,
              metarange_id, EMPTY_ID
- breaks.py   BreakPolicy (lakeFS rule), SizeAwareBreakPolicy, policy_from_dict
- manager.py  CommittedManager: write_metarange/write_tree, get, iter,
              iter_ranges, range_records, apply, diff, merge
- reader.py   RangeStore (tier-backed SST opening, caches), MetaRange, RangeInfo
- writer.py / stitch.py / diff.py / merge.py  the algorithms behind the manager
- results.py  Change, Diff, Stats, ApplyResult, MergeResult
"""

from gravfs.version.committed.breaks import BreakPolicy, SizeAwareBreakPolicy, policy_from_dict
from gravfs.version.committed.manager import EMPTY_METARANGE_ID, CommittedManager, DiffIterator
from gravfs.version.committed.merge import STRATEGIES
from gravfs.version.committed.reader import (
    METARANGES_PREFIX, RANGES_PREFIX, MetaRange, RangeInfo, RangeStore, metarange_key, range_key)
from gravfs.version.committed.record import (
    EMPTY_ID, IDBuilder, Record, decode_value, encode_value, metarange_id, range_id,
    value_record_id)
from gravfs.version.committed.results import (
    ADDED, CHANGED, REMOVED, ApplyResult, Change, Diff, MergeResult, Stats)

__all__ = [
    "ADDED", "EMPTY_METARANGE_ID", "STRATEGIES", "CHANGED", "EMPTY_ID",
    "METARANGES_PREFIX", "RANGES_PREFIX", "REMOVED",
    "ApplyResult", "BreakPolicy", "Change", "CommittedManager", "Diff", "DiffIterator",
    "IDBuilder", "MergeResult", "MetaRange", "RangeInfo", "RangeStore", "Record",
    "SizeAwareBreakPolicy", "Stats", "decode_value",
    "encode_value", "metarange_id", "metarange_key",
    "policy_from_dict", "range_id", "range_key", "value_record_id",
]
