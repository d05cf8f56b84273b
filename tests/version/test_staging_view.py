"""Merged layer views: precedence, tombstones, directory listing with seeks."""

import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from gravfs.version.staging import view
from gravfs.version.staging.area import StagingArea

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def layer(items):
    """A FuncLayer over {key: identity-or-None}; counts how many items it yields."""
    srt = sorted(items.items())
    counter = {"yielded": 0}

    def fn(start):
        for k, ident in srt:
            if k >= start:
                counter["yielded"] += 1
                yield k, ident, b"d:" + (ident or b"")

    lay = view.FuncLayer(fn)
    lay.counter = counter
    return lay


def model_view(layers_dicts):
    out = {}
    for d in reversed(layers_dicts):  # oldest first, newer overwrite
        out.update(d)
    return {k: v for k, v in out.items() if v is not None}


def model_list(live, prefix):
    """A name that is both a file and a directory (possible in object stores) is
    listed twice, file first; the filesystem layer decides which one to show."""
    names = {}
    for k in live:
        if not k.startswith(prefix) or k == prefix:
            continue
        rest = k[len(prefix):]
        if b"/" in rest:
            names[rest.split(b"/", 1)[0] + b"/"] = None
        else:
            names[rest] = k
    return [(n.rstrip(b"/"), v) for n, v in sorted(names.items())]


def test_newest_layer_wins_and_tombstones_hide():
    top = layer({b"a": b"2", b"b": None})
    bottom = layer({b"a": b"1", b"b": b"1", b"c": b"1"})
    got = [(k, i) for k, i, _ in view.live([top, bottom])]
    assert got == [(b"a", b"2"), (b"c", b"1")]
    merged = [(k, i) for k, i, _ in view.merged([top, bottom])]
    assert merged == [(b"a", b"2"), (b"b", None), (b"c", b"1")]


def test_list_dir_skips_subtrees_with_one_seek():
    big = {b"d/%06d" % i: b"x" for i in range(5000)}
    big[b"a"] = b"x"
    big[b"z"] = b"x"
    lay = layer(big)
    got = list(view.list_dir([lay], b""))
    assert [n for n, *_ in got] == [b"a", b"d", b"z"]
    assert got[1][1] is None and got[1][2][0] == b"d/000000"  # a directory, its first key
    # the 5000 keys under d/ were not scanned: only the first is read before the seek
    assert lay.counter["yielded"] < 10


def test_list_dir_hides_dirs_whose_children_are_all_deleted():
    top = layer({b"d/x": None, b"d/y": None})
    bottom = layer({b"d/x": b"1", b"d/y": b"1", b"e": b"1"})
    assert [n for n, *_ in view.list_dir([top, bottom], b"")] == [b"e"]


def test_marker_keeps_empty_directory_and_is_not_its_own_child():
    lay = layer({b"empty/": b"m", b"f": b"1"})
    assert list(view.list_dir([lay], b"")) == [
        (b"empty", None, (b"empty/", b"m", b"d:m")), (b"f", (b"f", b"1", b"d:1"), None)]
    assert list(view.list_dir([lay], b"empty/")) == []
    assert view.first_live_under([lay], b"empty/")[0] == b"empty/"


def test_list_dir_start_after_continues_by_name():
    lay = layer({b"p/a": b"1", b"p/b/x": b"1", b"p/b.c": b"1", b"p/c": b"1"})
    assert [n for n, *_ in view.list_dir([lay], b"p/")] == [b"a", b"b.c", b"b", b"c"]
    assert [n for n, *_ in view.list_dir([lay], b"p/", start_after=b"a")] == [b"b.c", b"b", b"c"]
    assert [n for n, *_ in view.list_dir([lay], b"p/", start_after=b"b/")] == [b"c"]
    assert [n for n, *_ in view.list_dir([lay], b"p/", start_after=b"b.c")] == [b"b", b"c"]


names = st.sampled_from([b"a", b"b", b"c", b"a0", b"a.b", b"ab"])
keys = st.lists(names, min_size=1, max_size=3).map(lambda parts: b"/".join(parts))
layer_dict = st.dictionaries(keys, st.one_of(st.none(), st.sampled_from([b"1", b"2"])), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(layer_dict, min_size=1, max_size=4), st.sampled_from([b"", b"a/", b"b/", b"a/b/"]))
def test_views_match_model(dicts, prefix):
    layers = [layer(d) for d in dicts]
    live = model_view(dicts)
    assert [(k, i) for k, i, _ in view.live(layers)] == sorted(live.items())
    listed = list(view.list_dir(layers, prefix))
    got = [(n, item[0] if item else None) for n, item, _ in listed]
    assert got == model_list(live, prefix)
    for n, item, first in listed:  # a directory comes with its first live key (a marker)
        under = sorted(k for k in live if k.startswith(prefix + n + b"/"))
        assert (first is None) if item is not None else (first[:2] == (under[0], live[under[0]]))
    # resuming after any child gives the rest of the listing
    for i, (n, item, _) in enumerate(listed):
        rest = [(m, it[0] if it else None)
                for m, it, _ in view.list_dir(layers, prefix, view.listing_key(n, item))]
        assert rest == got[i + 1:]


def test_lmdb_tokens_round_trip(tmp_path):
    area = StagingArea(str(tmp_path / "lmdb"))
    area.put_many("main", [(b"x", b"\x02i\x02d"), (b"y", None)], base="c0")
    st0 = area.get_state("main")
    assert st0.base == "c0" and st0.puts == 1 and st0.tombstones == 1
    with area.read_txn() as txn:
        items = list(area.iter_token(txn, st0.staging))
        assert [k for k, _ in items] == [b"x", b"y"]
        lay = view.TokenLayer(area, txn, st0.staging)
        assert [(k, i) for k, i, _ in lay.open(b"")] == [(b"x", b"i"), (b"y", None)]
    # another branch's token is invisible
    with area.read_txn() as txn:
        other = area.state(txn, "dev")
        assert list(area.iter_token(txn, other.staging)) == []
    with area.env.begin(write=True) as txn:
        assert area.drop_tokens(txn, [st0.staging]) == 2
    with area.read_txn() as txn:
        assert area.token_is_empty(txn, st0.staging)


def test_branch_state_memo_follows_writes_of_other_processes(tmp_path):
    """state() reuses what this process saved last only while those are the stored
    bytes: a write through another environment handle (another process) wins."""
    path = str(tmp_path / "s")
    ours = StagingArea(path)
    st = ours.put_many("main", [(b"a", b"1")], "c1")
    assert st.base == "c1" and st.puts == 1
    mine = ours.get_state("main")
    mine.sealed.append("x" * 16)  # callers mutate what they get: not the memo
    assert ours.get_state("main").sealed == []
    code = ("import sys; from gravfs.version.staging.area import StagingArea; a = StagingArea(sys.argv[1]); "
            "a.update_state('main', lambda s: s.sealed.append('f' * 16)); a.close()")
    subprocess.run([sys.executable, "-c", code, path], check=True, cwd=ROOT)
    assert ours.get_state("main").sealed == ["f" * 16]
    assert ours.put_many("main", [(b"b", b"2")], "c2", same_base=True) is None  # based on c1
    assert ours.put_many("main", [(b"b", b"2")], "c1", same_base=True).puts == 2
    ours.close()
