"""logtail: the lines a child wrote to a log since an offset."""

from __future__ import annotations

from gravfs import logtail


def test_lines_since_an_offset_and_a_missing_file(tmp_path):
    log = tmp_path / "x.log"
    assert logtail.size(str(log)) == 0 and logtail.size(None) == 0
    assert logtail.lines_since(str(log), 0) == [] and logtail.lines_since(None, 0) == []
    log.write_bytes(b"before\n")
    start = logtail.size(str(log))
    assert start == 7
    with open(log, "ab") as f:
        f.write(b"first\nnot utf-8: \xff\n")
    assert logtail.lines_since(str(log), start) == ["first", "not utf-8: \ufffd"]
    assert logtail.lines_since(str(log), logtail.size(str(log))) == []
