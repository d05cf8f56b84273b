"""Names gravfs did not write: the splitting grammar, escaped names and their inverse."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gravfs.fs.paths import (MAX_NAME_BYTES, escape_key, escape_name, hashed_head, key_problem,
                          name_problem, split_last, split_names, unescape_name)
from gravfs.version.staging import view


def test_split_grammar_keeps_extra_slashes_with_the_next_name():
    assert split_names(b"a//b") == [b"a", b"/b"]
    assert split_names(b"/abs/x") == [b"/abs", b"x"]
    assert split_names(b"x//") == [b"x", b"/"]
    assert split_last(b"a//b") == (b"a", b"/b")
    assert split_last(b"/abs") == (b"", b"/abs")
    assert split_last(b"d/../up") == (b"d/..", b"up")


def test_key_problems():
    assert key_problem(b"a/b.txt") is None and key_problem(b"dir/", directory=True) is None
    assert key_problem(b"line\nbreak") is None and key_problem(b"bad\xff") is None  # POSIX names
    for key in [b"/abs", b"a//b", b"d/../x", b"./x", b"a\x00b", b"n" * 256, b"file/", b""]:
        assert key_problem(key) is not None, key


def test_escaped_names():
    cases = {b"/abs": b"%2Fabs", b".": b"%2E", b"..": b"%2E%2E", b"a\x00%b": b"a%00%25b",
             b"trail/": b"trail%2F", b"/.": b"%2F."}
    for raw, shown in cases.items():
        assert escape_name(raw) == shown and unescape_name(shown) == raw
    # legal names are themselves, even with '%', and never decode
    for legal in [b"100%", b"%2Fabs", b"a%2E", b"%41"]:
        assert escape_name(legal) == legal
    assert unescape_name(b"%41") is None  # decodes to a legal name: not an escape
    assert unescape_name(b"%2e") is None  # not the canonical (upper-case) form
    assert unescape_name(b"%2") is None


def test_over_long_names_keep_a_head_and_a_hash():
    raw = "é".encode() * 200
    shown = escape_name(raw)
    assert len(shown) <= MAX_NAME_BYTES and shown.decode("utf-8")  # not cut inside a character
    assert unescape_name(shown) is None and raw.startswith(hashed_head(shown))
    assert escape_name(raw + b"x") != shown


def test_escape_key_shows_each_name():
    assert escape_key(b"d/../up") == b"d/%2E%2E/up"
    assert escape_key(b"dir/") == b"dir/"
    assert escape_key(b"trail/", directory=False) == b"trail%2F"
    assert escape_key(b"a/trail/", directory=False) == b"a/trail%2F"


names = st.binary(min_size=1, max_size=300).filter(lambda b: name_problem(b) is not None)


@settings(max_examples=300, deadline=None)
@given(names)
def test_escaped_names_are_posix_names_and_reverse(raw):
    shown = escape_name(raw)
    assert name_problem(shown) is None
    if b"%~" not in shown:  # '%' itself is always escaped, so only a hash adds "%~"
        assert unescape_name(shown) == raw
    else:
        assert len(raw) > MAX_NAME_BYTES // 3 and raw.startswith(hashed_head(shown))


def test_view_lists_leading_slashes_as_part_of_the_name():
    items = sorted({b"/abs": b"1", b"/dir/x": b"1", b"a//b": b"1", b"a/c": b"1", b"b": b"1"}.items())
    lay = view.FuncLayer(lambda start: [(k, i, b"") for k, i in items if k >= start])
    assert [(n, it is None) for n, it, _ in view.list_dir([lay], b"")] == [
        (b"/abs", False), (b"/dir", True), (b"a", True), (b"b", False)]
    assert [n for n, *_ in view.list_dir([lay], b"a/")] == [b"/b", b"c"]
    assert [n for n, *_ in view.list_dir([lay], b"", b"/abs")] == [b"/dir", b"a", b"b"]
    assert [n for n, *_ in view.list_dir([lay], b"", b"/dir/")] == [b"a", b"b"]


def test_quote_like_git():
    from gravfs.fs.paths import show
    from gravfs.quoting import quote
    assert quote(b"plain name") == "plain name" and quote("héllo".encode()) == "héllo"
    assert quote(b"a\nb") == '"a\\nb"' and quote(b"t\tx") == '"t\\tx"'
    assert quote(b'q"') == '"q\\""' and quote(b"b\\") == '"b\\\\"'
    assert quote(b"esc\x1b") == '"esc\\033"' and quote(b"del\x7f") == '"del\\177"'
    assert quote(b"bad\xff") == '"bad\\377"'  # invalid UTF-8, byte by byte
    assert quote("\u202e".encode()) == '"\\342\\200\\256"'  # bidi override
    assert quote("\x85".encode()) == '"\\302\\205"'  # C1 control (NEL)
    assert show(b"d/../a\nb") == '"d/%2E%2E/a\\nb"'
