"""gravfs.fs.shadows: files hidden by a directory of their name, found range by range
as a scan of the whole tree finds them, spans across range ends included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gravfs.fs.shadows import ShadowScan, carry, tree_shadows


def _brute(keys: dict[bytes, bool]) -> dict[bytes, bytes]:
    """file -> the first key under it, by comparing every pair."""
    out = {}
    for f, is_dir in sorted(keys.items()):
        if is_dir or f.endswith(b"/"):
            continue
        under = sorted(k for k in keys if k.startswith(f + b"/"))
        if under:
            out[f] = under[0]
    return out


def _scan(keys: dict[bytes, bool], cuts: list[int]) -> dict[bytes, bytes]:
    ordered = sorted(keys)
    bounds = [0, *sorted(set(c % (len(ordered) + 1) for c in cuts)), len(ordered)]
    ranges = {f"r{i}": ordered[lo:hi] for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))}
    summaries = {}
    for rid, rkeys in ranges.items():
        scan = ShadowScan()
        for k in rkeys:
            scan.add(k, keys[k])
        summaries[rid] = scan.done()
    found = tree_shadows([(rid, k[0]) for rid, k in ranges.items() if k], summaries,
                         ranges.__getitem__)
    out = {}
    for f, k in found:
        assert f not in out, f  # each file once
        out[f] = k
    return out


NAMES = st.sampled_from([b"a", b"a-1", b"a.t", b"a/b", b"a/b/c", b"a/b-1", b"a/", b"b",
                         b"a-1/x", b"a0", b"b/", b"b/c", b"a/b/"])


@settings(max_examples=400, deadline=None)
@given(keys=st.dictionaries(NAMES, st.booleans(), max_size=10),
       cuts=st.lists(st.integers(0, 20), max_size=6))
def test_range_by_range_equals_every_pair(keys, cuts):
    keys = {k: k.endswith(b"/") for k in keys}  # a key ending in '/' is a directory marker
    assert _scan(keys, cuts) == _brute(keys)


def test_a_span_across_ranges_reads_the_next_ranges_keys():
    """'a' ends one range with 'a-1' and 'a.t' after it; 'a/b' starts the third."""
    ranges = {"r0": [b"0", b"a", b"a-1"], "r1": [b"a.t"], "r2": [b"a/b", b"c"], "r3": [b"d"]}
    summaries = {}
    for rid, keys in ranges.items():
        scan = ShadowScan()
        for k in keys:
            scan.add(k, False)
        summaries[rid] = scan.done()
    assert summaries["r0"].open_files == [b"a", b"a-1"] and not summaries["r0"].found
    read = []
    found = tree_shadows([(rid, keys[0]) for rid, keys in ranges.items()], summaries,
                         lambda rid: read.append(rid) or ranges[rid])
    # r3 is not read: its first key is past the spans of c, the file r2 ended with
    assert found == [(b"a", b"a/b")] and read == ["r1", "r2"]
    assert carry([b"a"], [b"b"]) == ([], [])  # closed by a key past its span
