from __future__ import annotations

import os

from gravfs.fuse import kernel


def test_release_reads_major_and_minor_as_uname_prints_them():
    assert kernel.release("6.18.44") == (6, 18)
    assert kernel.release("5.15.0-91-generic") == (5, 15)
    assert kernel.release("6.1.0-18-amd64") == (6, 1)
    assert kernel.release("6.10-rc3") == (6, 10)  # not 6.1
    assert kernel.release("") == (0, 0)
    assert kernel.release("unknown") == (0, 0)
    assert kernel.release() == kernel.release(os.uname().release)


def test_direct_writes_from_6_6():
    assert not kernel.direct_writes("6.5.13-1-amd64")
    assert not kernel.direct_writes("5.19.0")
    assert kernel.direct_writes("6.6.0")
    assert kernel.direct_writes("6.18.44")
    assert kernel.direct_writes("7.0.1")
    assert not kernel.direct_writes("garbage")  # unknown: keep the page cache
