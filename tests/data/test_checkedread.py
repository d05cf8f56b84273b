"""gravfs.data.checkedread: an upload's reader that refuses to hand over the last bytes
of a file whose bytes are no longer those its address names."""

from __future__ import annotations

import os

import pytest

from gravfs import hashing
from gravfs.data.checkedread import ChangedWhileRead, CheckedReader


@pytest.fixture
def opened(tmp_path):
    """opened(data): a descriptor of a file holding data (closed after the test)."""
    fds = []

    def make(data: bytes) -> int:
        path = tmp_path / f"f{len(fds)}"
        path.write_bytes(data)
        fds.append(os.open(path, os.O_RDWR))
        return fds[-1]

    yield make
    for fd in fds:
        os.close(fd)


def test_the_file_is_handed_out_once_in_order(opened):
    data = os.urandom(300_001)
    fd = opened(data)
    r = CheckedReader(fd, len(data), hashing.hexdigest(data), "f")
    got = [r.read(100_000) for _ in range(4)]
    assert b"".join(got) == data and got[3] == data[-1:] and r.read() == b""
    assert CheckedReader(fd, len(data), hashing.hexdigest(data)).read() == data


def test_a_change_before_the_last_bytes_stops_the_read(opened):
    data = os.urandom(300_000)
    fd = opened(data)
    r = CheckedReader(fd, len(data), hashing.hexdigest(data), "f")
    assert r.read(100_000) == data[:100_000]
    os.pwrite(fd, b"changed", 200_000)
    assert r.read(100_000) == data[100_000:200_000]
    with pytest.raises(ChangedWhileRead, match="f changed while it was uploaded"):
        r.read(100_000)
    os.pwrite(fd, data[200_000:200_007], 200_000)  # the same bytes again: fine
    assert CheckedReader(fd, len(data), hashing.hexdigest(data)).read() == data
    os.ftruncate(fd, 250_000)
    with pytest.raises(ChangedWhileRead, match="shrank"):
        CheckedReader(fd, len(data), hashing.hexdigest(data), "f").read()


def test_bytes_appended_after_the_named_size_are_not_read(opened):
    """A file a writer appends to: its first ``size`` bytes are what was named."""
    data = os.urandom(5000)
    fd = opened(data)
    os.pwrite(fd, b"more", 5000)
    assert CheckedReader(fd, 5000, hashing.hexdigest(data)).read() == data
