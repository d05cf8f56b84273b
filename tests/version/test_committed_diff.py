"""diff against a dict model on trees with big ranges: long equal runs and many
differences inside one range (exercises diff._equal_run's galloping)."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from gravfs.version.committed import ADDED, CHANGED, REMOVED, BreakPolicy, CommittedManager, Record
from gravfs.version.committed.diff import _equal_run
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier

BIG = BreakPolicy(64 << 10, 256 << 10, 4096, seed=3)   # ranges of ~1-2k records here


def make_manager(root) -> CommittedManager:
    store = LocalStore(os.path.join(root, "store"), fsync=False)
    tier = LocalTier(store, os.path.join(root, "cache"), 1 << 30, fsync=False)
    return CommittedManager(store, tier, BIG)


def rec(i: int, ver: int = 0) -> Record:
    key = b"tables/t/part-%07d.parquet" % i
    return Record(key, hashlib.sha256(key + b"%d" % ver).digest(), b"v%d-" % ver + key)


def model_diff(a: dict, b: dict) -> list[tuple]:
    out = []
    for k in sorted(a.keys() | b.keys()):
        if k not in b:
            out.append((k, REMOVED, a[k], None))
        elif k not in a:
            out.append((k, ADDED, None, b[k]))
        elif a[k].identity != b[k].identity:
            out.append((k, CHANGED, a[k], b[k]))
    return out


@pytest.mark.parametrize("seed,pattern", [(1, "sparse"), (2, "dense"), (3, "runs"), (4, "edges")])
def test_diff_matches_dict_model(tmp_path, seed, pattern):
    rnd = random.Random(seed)
    n = 12000
    base = {r.key: r for r in (rec(i) for i in range(0, 2 * n, 2))}
    m = make_manager(str(tmp_path))
    left = m.write_metarange(sorted(base.values()))
    assert len(m.iter_ranges(left)) >= 3
    other = dict(base)
    idx = list(range(0, 2 * n, 2))
    if pattern == "sparse":
        picks = rnd.sample(idx, 40)
    elif pattern == "dense":      # every 3rd record of one stretch: many diffs per range
        picks = idx[2000:6000:3]
    elif pattern == "runs":       # long equal runs between blocks of changes
        picks = [i for s in range(0, len(idx), 1500) for i in idx[s:s + 7]]
    else:                         # first and last records, and added keys around them
        picks = idx[:3] + idx[-3:]
    for i in picks:
        op = rnd.random()
        k = rec(i).key
        if op < 0.4:
            other[k] = rec(i, 1)
        elif op < 0.7:
            del other[k]
        else:
            r = rec(i + 1, 2)       # a key between two existing ones
            other[r.key] = r
    if pattern == "edges":
        for r in (Record(b"a-first", b"i" * 32, b"d"), Record(b"z-last", b"j" * 32, b"e")):
            other[r.key] = r
    right = m.write_metarange(sorted(other.values()))
    want = model_diff(base, other)
    got = [(d.key, d.kind, d.left, d.right) for d in m.diff(left, right)]
    assert got == want
    back = [(d.key, d.kind) for d in m.diff(right, left)]
    assert back == [(k, {ADDED: REMOVED, REMOVED: ADDED, CHANGED: CHANGED}[kind]) for k, kind, _, _ in want]
    m.close()


def test_diff_under_paths_is_the_full_diff_filtered_and_reads_only_their_ranges(tmp_path):
    """``gravfs diff A B -- PATH``: changes at PATH and under PATH/, none of a sibling
    whose name PATH begins (p.txt, p0), from one walk that starts at PATH's range."""
    def r(key: bytes, ver: int = 0) -> Record:
        return Record(key, hashlib.sha256(key + b"%d" % ver).digest(), b"v%d" % ver)

    keys = [b"d%03d/f%04d" % (d, f) for d in range(40) for f in range(300)]
    keys += [b"d020", b"d020.txt", b"d0200/x", b"d020/"]  # a file, siblings, its marker
    base = {k: r(k) for k in keys}
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    m = CommittedManager(store, LocalTier(store, str(tmp_path / "cache"), 1 << 30, fsync=False),
                         BreakPolicy(4 << 10, 16 << 10, 64, seed=3))  # ranges of ~100
    left = m.write_metarange(sorted(base.values()))
    assert len(m.iter_ranges(left)) > 40
    other = dict(base)
    for k in (b"d020", b"d020.txt", b"d0200/x", b"d020/", b"d020/f0000", b"d020/f0299",
              b"d001/f0005", b"d039/f0299"):
        other[k] = r(k, 1)
    del other[b"d020/f0150"]
    other[b"d020/new"] = r(b"d020/new")
    right = m.write_metarange(sorted(other.values()))
    full = [(d.key, d.kind) for d in m.diff(left, right)]
    for under in ([b"d020"], [b"d020/f0150"], [b"d039", b"d001/f0005"], [b"d020", b"d020/f0000"],
                  [b"nosuch"], [b"d"]):
        it = m.diff(left, right, under)
        got = [(d.key, d.kind) for d in it]
        want = [(k, kind) for k, kind in full
                if any(k == u or k.startswith(u + b"/") for u in under)]
        assert sorted(got) == sorted(want) and len(got) == len(set(got)), under
        if under == [b"d020"]:
            assert {k for k, _ in got} == {b"d020", b"d020/", b"d020/f0000", b"d020/f0299",
                                           b"d020/f0150", b"d020/new"}
            assert it.stats.ranges_read < len(m.iter_ranges(left)) / 4, it.stats.ranges_read
    m.close()


class _Cur:
    def __init__(self, keys, values, pos=0):
        self.keys, self.values, self.pos = keys, values, pos


def _naive_run(L, R) -> int:
    n = 0
    while (L.pos + n < len(L.keys) and R.pos + n < len(R.keys)
           and L.keys[L.pos + n] == R.keys[R.pos + n] and L.values[L.pos + n] == R.values[R.pos + n]):
        n += 1
    return n


def test_equal_run_matches_naive_scan():
    rnd = random.Random(7)
    for _ in range(1500):
        length = rnd.choice([0, 1, 2, 7, 8, 9, 15, 16, 17, 24, 25, 100, 1000, 4097])
        keys = [b"k%06d" % i for i in range(length)]
        vals = [b"v%d" % i for i in range(length)]
        tail = rnd.choice(["none", "left", "right", "key", "value", "same"])
        lk, lv, rk, rv = list(keys), list(vals), list(keys), list(vals)
        if tail in ("left", "key", "value", "same"):
            lk.append(b"x"); lv.append(b"1")
        if tail in ("right", "key", "value", "same"):
            rk.append(b"y" if tail == "key" else b"x"); rv.append(b"2" if tail == "value" else b"1")
        if length and rnd.random() < 0.3:      # a mismatch somewhere inside the run
            p = rnd.randrange(length)
            rv[p] = b"changed"
        lp, rp = rnd.randrange(3), rnd.randrange(3)
        L = _Cur([b"<"] * lp + lk, [b"."] * lp + lv, lp)
        R = _Cur([b"<"] * rp + rk, [b"."] * rp + rv, rp)
        assert _equal_run(L, R) == _naive_run(L, R), (length, tail)
