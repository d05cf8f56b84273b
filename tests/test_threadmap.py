"""InOrder and ordered_map: results in order, a bounded number in flight, the rest cancelled."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gravfs.threadmap import InOrder, ordered_map


def test_results_in_order_with_at_most_ahead_submitted():
    started = []
    lock = threading.Lock()

    def slow(i):
        with lock:
            started.append(i)
        time.sleep(0.001 * (i % 3))  # finishing out of order
        return i * i

    taken = 0
    with ThreadPoolExecutor(4) as pool:
        for i, r in enumerate(ordered_map(pool, slow, range(200), ahead=8)):
            assert r == i * i
            with lock:
                assert len(started) <= taken + 8  # nothing runs far ahead of its consumer
            taken += 1
    assert taken == 200


def test_a_consumer_that_stops_cancels_the_queue_and_errors_reach_it():
    ran = []

    def f(i):
        ran.append(i)
        if i == 5:
            raise ValueError("five")
        return i

    with ThreadPoolExecutor(1) as pool:
        it = ordered_map(pool, f, range(10_000), ahead=4)
        assert [next(it) for _ in range(3)] == [0, 1, 2]
        it.close()
    assert len(ran) <= 3 + 4
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(ValueError, match="five"):
            list(ordered_map(pool, f, range(100), ahead=4))


def test_no_call_starts_after_one_raised_and_the_consumer_gets_that_error():
    """A store that stopped answering fails each call after its whole timeout: the
    workers freed by the failed calls must not start the queued ones (a commit's
    uploads took two timeouts to fail)."""
    started = []
    both_running = threading.Barrier(2)

    def f(i):
        started.append(i)
        if i < 2:
            both_running.wait(5)  # the first wave: two calls in flight together
            time.sleep(0.05 * i)
            raise TimeoutError(f"call {i} timed out")
        return i

    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(TimeoutError, match="call 0 timed out"):
            list(ordered_map(pool, f, range(100), ahead=32))
    assert sorted(started) == [0, 1]

    # an item still running when a later one failed yields its result first; the
    # error then reaches the consumer with the cause it was raised from
    def g(i):
        if i == 0:
            time.sleep(0.1)  # still running when item 1 fails; items 2.. never start
            return 0
        try:
            raise OSError("connection reset")
        except OSError as exc:
            raise ValueError(f"item {i}") from exc

    with ThreadPoolExecutor(2) as pool:
        it = ordered_map(pool, g, range(50), ahead=8)
        assert next(it) == 0
        with pytest.raises(ValueError, match="item 1") as got:
            next(it)
    assert str(got.value.__cause__) == "connection reset"


def test_pushed_calls_give_their_results_in_order_within_the_bound():
    """InOrder is what the range writer hands each closed range to: at most `ahead`
    pushed and not taken, the results oldest first, whatever order they finish in."""
    got = []
    with ThreadPoolExecutor(3) as pool:
        calls = InOrder(pool, ahead=4)
        for i in range(50):
            got += calls.push(lambda i: (time.sleep(0.001 * (i % 3)), i)[1], i)
            assert len(got) >= i + 1 - 4  # never more than `ahead` untaken
        got += calls.drain()
    assert got == list(range(50))


def test_cancel_with_wait_starts_no_queued_call_and_waits_for_the_running_ones():
    """A failed commit's abort: the uploads queued are dropped, the running one
    finishes (its temporary file removed) before abort returns."""
    started, finished = [], []
    running = threading.Event()
    release = threading.Event()

    def f(i):
        started.append(i)
        if i == 0:
            running.set()
            release.wait(5)
        finished.append(i)
        return i

    with ThreadPoolExecutor(1) as pool:
        calls = InOrder(pool, ahead=8)
        for i in range(5):
            assert calls.push(f, i) == []
        assert running.wait(5)
        threading.Timer(0.1, release.set).start()
        calls.cancel(wait=True)
        assert finished == [0]  # waited for the running call
    assert started == [0]


def test_a_bound_under_one_still_runs_every_call():
    with ThreadPoolExecutor(1) as pool:
        assert list(ordered_map(pool, lambda i: -i, range(5), ahead=0)) == [0, -1, -2, -3, -4]
        calls = InOrder(pool, ahead=0)
        got = [r for i in range(3) for r in calls.push(abs, -i)] + list(calls.drain())
    assert got == [0, 1, 2]
