"""ordered_map: results in order, a bounded number in flight, the rest cancelled."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gravfs.threadmap import ordered_map


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
