"""Marking work that runs on threads (gravfs.threadwork): counted while it runs,
from any thread, also when it fails."""

from __future__ import annotations

import threading

import pytest

from gravfs import threadwork


def test_work_counts_while_it_runs_on_any_thread():
    inside, release = threading.Event(), threading.Event()
    seen = []

    @threadwork.marked
    def work(x):
        inside.set()
        release.wait(10)
        return x * 2

    t = threading.Thread(target=lambda: seen.append(work(21)))
    assert threadwork.idle()
    t.start()
    assert inside.wait(10)
    assert not threadwork.idle()
    with threadwork.working():  # a second piece of work, on this thread
        release.set()
        t.join(10)
        assert not threadwork.idle()
    assert threadwork.idle() and seen == [42]


def test_failed_work_is_not_counted_after():
    @threadwork.marked
    def fails():
        raise OSError("disk gone")

    with pytest.raises(OSError):
        fails()
    assert threadwork.idle()
