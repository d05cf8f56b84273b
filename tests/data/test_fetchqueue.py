"""The chunk-fetch queue: a read's fetch before queued read-ahead, each job run once."""

from __future__ import annotations

import threading

import pytest

from gravfs.data.fetchqueue import FetchQueue


class _Recorder:
    """Jobs that log their key; the first one holds the single worker until released."""

    def __init__(self):
        self.order: list[str] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()

    def job(self, key: str, last: bool = False):
        def run():
            if key == "running":
                self.holding.set()
                assert self.release.wait(10)
            self.order.append(key)
            if last:
                self.done.set()
        return run


def _held(q: FetchQueue, rec: _Recorder) -> None:
    q.submit("running", rec.job("running"), demand=True)
    assert rec.holding.wait(10)  # the only worker is busy: what follows stays queued


def test_a_reads_fetch_goes_before_queued_read_ahead():
    q, rec = FetchQueue(1, "test-fetch"), _Recorder()
    try:
        _held(q, rec)
        for k in ("ahead-1", "ahead-2"):
            q.submit(k, rec.job(k), demand=False)
        q.submit("ahead-3", rec.job("ahead-3", last=True), demand=False)
        q.submit("read", rec.job("read"), demand=True)
        rec.release.set()
        assert rec.done.wait(10)
        assert rec.order == ["running", "read", "ahead-1", "ahead-2", "ahead-3"]
    finally:
        q.close()


def test_a_queued_read_ahead_fetch_a_read_needs_moves_up_and_runs_once():
    q, rec = FetchQueue(1, "test-fetch"), _Recorder()
    try:
        _held(q, rec)
        q.submit("ahead-1", rec.job("ahead-1", last=True), demand=False)
        q.submit("ahead-2", rec.job("ahead-2"), demand=False)
        q.promote("ahead-2")
        q.promote("running")  # started already: nothing to move
        rec.release.set()
        assert rec.done.wait(10)
        assert rec.order == ["running", "ahead-2", "ahead-1"]
    finally:
        q.close()


def test_closing_drops_queued_fetches_and_refuses_new_ones():
    q, rec = FetchQueue(1, "test-fetch"), _Recorder()
    _held(q, rec)
    q.submit("ahead-1", rec.job("ahead-1"), demand=False)
    q.close()
    rec.release.set()
    with pytest.raises(RuntimeError):
        q.submit("late", rec.job("late"), demand=True)
    for t in q._threads:
        t.join(10)
        assert not t.is_alive()
    assert rec.order == ["running"]


def test_read_ahead_leaves_a_worker_for_reads_and_threads_start_as_work_comes():
    q = FetchQueue(3, "test-fetch", reserve=1)
    gate = threading.Event()
    started: list[str] = []
    ran = threading.Semaphore(0)

    def job(name):
        def run():
            started.append(name)
            ran.release()
            assert gate.wait(10)
        return run

    try:
        assert q._threads == []
        for i in range(6):
            q.submit(i, job(f"ahead-{i}"), demand=False)
        for _ in range(2):
            assert ran.acquire(timeout=10)
        assert not ran.acquire(timeout=0.2)  # two of three workers at most for read-ahead
        q.submit("read", job("read"), demand=True)
        assert ran.acquire(timeout=10)  # the third takes the read at once
        assert started == ["ahead-0", "ahead-1", "read"]
        assert len(q._threads) == 3
    finally:
        gate.set()
        q.close()


def test_a_job_that_raises_leaves_its_worker_running(caplog):
    q = FetchQueue(1, "test-fetch")
    done = threading.Event()

    def broken():
        raise ValueError("a bug in a fetch")

    try:
        q.submit("broken", broken, demand=True)
        q.submit("next", done.set, demand=False)
        assert done.wait(10)  # the only worker survived the first job
        assert "a fetch failed outside" in caplog.text
    finally:
        q.close()
