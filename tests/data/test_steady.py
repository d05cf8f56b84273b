"""gravfs.data.steady: a file changed while it is read is read again."""

from __future__ import annotations

import logging
import os

import gravfs.data.steady as steady
from tests.repo_util import repo, store_target  # noqa: F401  (fixtures)


def _changing(monkeypatch, change):
    """put_file calls ``change(path, n)`` after its n-th read of a file (a writer at work)."""
    real, reads = steady.put_file, []

    def put_file(data, path, st, f, small=steady.SMALL_FILE):
        got = real(data, path, st, f, small)
        reads.append(path)
        change(path, len(reads))
        return got

    monkeypatch.setattr(steady, "put_file", put_file)
    return reads


def test_a_put_of_a_file_truncated_while_it_is_read_stages_one_whole_version(repo, tmp_path,
                                                                             monkeypatch):
    """`gravfs put` read a file once: truncated meanwhile (a log rotated), it staged the
    40 MB read before the truncation, a version the file never had (an import read
    such a file again; put did not)."""
    src = tmp_path / "app.log"
    src.write_bytes(os.urandom(1 << 20))

    def rotate(path, n):
        if n == 1:
            with open(path, "r+b") as f:
                f.truncate(1000)

    reads = _changing(monkeypatch, rotate)
    e = repo.write_file("main", "logs/app.log", str(src))
    assert len(reads) == 2
    assert (e.size, e.mtime_ns) == (1000, os.stat(src).st_mtime_ns)
    assert repo.read("main", "logs/app.log") == src.read_bytes()


def test_a_file_that_changes_at_every_read_is_kept_as_last_read_with_a_warning(
        repo, tmp_path, monkeypatch, caplog):
    src = tmp_path / "busy.log"
    src.write_bytes(b"0\n")

    def append(path, n):
        with open(path, "ab") as f:
            f.write(b"%d\n" % n)

    reads = _changing(monkeypatch, append)
    with caplog.at_level(logging.INFO, logger="gravfs.data.steady"):
        e = repo.write_file("main", "busy.log", str(src))
    assert len(reads) == steady.READ_TRIES
    assert repo.read("main", "busy.log") == b"0\n1\n2\n" and e.size == 6  # before the 3rd append
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"{src} kept changing while it was read ({steady.READ_TRIES} reads): "
                      "the last read is kept, which may mix old and new bytes"]
