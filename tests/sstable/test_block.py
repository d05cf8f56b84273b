"""gravfs.sstable.block: the raw block search a cold lookup runs."""

from __future__ import annotations

from bisect import bisect_left

from gravfs.sstable import BlockCache, SSTReader
from gravfs.sstable.block import decode_index_block, restart_array, restart_offsets, scan_start
from tests.sstable.support import make_items, rocksdict_sst


def test_restart_offsets_read_any_buffer_and_the_search_finds_the_restart_before_the_key(
        tmp_path):
    """A raw index keeps its restart offsets unpacked: from bytes, a memoryview (a
    mapped table's slice) or a bytearray alike; a search given them starts at the
    last restart point whose key sorts before the one asked (the decoded index says
    which: every index entry is a restart point here)."""
    items = make_items(3000, value_size=60)
    path = rocksdict_sst(str(tmp_path / "t.sst"), items, compression="none",
                         index_restart_interval=1, block_size=512)
    with SSTReader(path, cache=BlockCache()) as r:
        raw, strip = r._top._raw, r._top._strip
    limit, restarts = restart_array(raw)
    assert restarts > 100
    want = [int.from_bytes(raw[limit + 4 * i:limit + 4 * i + 4], "little") for i in range(restarts)]
    for buf in (raw, memoryview(raw), bytearray(raw)):
        assert list(restart_offsets(buf, limit, restarts)) == want
    keys = decode_index_block(raw, not strip, False)[0]
    assert len(keys) == restarts
    offsets = restart_offsets(raw, limit, restarts)
    probes = [b"", b"dir/", b"\xff"] + [k for k, _ in items[::97]] + [k + b"\x00" for k, _ in items[::89]]
    for key in probes:
        i = bisect_left(keys, key)
        assert scan_start(raw, limit, offsets, key, strip) == (want[i - 1] if i else 0)
