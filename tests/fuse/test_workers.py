"""The threads a request's blocking work runs on (gravfs.fuse.workers)."""

from __future__ import annotations

import random
import threading
import time
import traceback

import pytest
import trio

from gravfs.fuse.workers import WorkerPool


def _threads(pool: WorkerPool) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(pool.name + "-")]


def test_a_job_runs_on_a_worker_and_gives_its_result_or_its_exception():
    pool = WorkerPool(2, name="test-result")

    def fails():
        raise KeyError("gone")

    async def main():
        ran_on = await pool.run(lambda: threading.current_thread().name)
        assert ran_on.startswith("test-result-")
        assert ran_on != threading.current_thread().name
        assert await pool.run(lambda: 6 * 7) == 42
        with pytest.raises(KeyError) as caught:
            await pool.run(fails)
        # the job's own frame is in the traceback: a log says where it failed
        assert "fails" in [f.name for f in traceback.extract_tb(caught.value.__traceback__)]

    trio.run(main)


def test_threads_are_started_as_needed_and_kept():
    pool = WorkerPool(3, name="test-kept")

    async def main():
        for _ in range(200):  # one after another: the first thread serves them all
            await pool.run(lambda: None)
        assert len(_threads(pool)) == 1

    trio.run(main)


def test_at_most_size_jobs_run_at_once():
    pool = WorkerPool(2, name="test-bound")
    lock = threading.Lock()
    running, most, started = [0], [0], []
    release = threading.Event()

    def job(i):
        with lock:
            started.append(i)
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(10)
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return i

    async def main():
        results = {}

        async def one(i):
            results[i] = await pool.run(lambda: job(i))

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)
                await trio.sleep(0.02)  # submitted in this order
            with trio.fail_after(10):
                while len(started) < 2:
                    await trio.sleep(0.01)
            await trio.sleep(0.1)
            assert sorted(started) == [0, 1]  # two run; four wait
            release.set()
        assert results == {i: i for i in range(6)}

    trio.run(main)
    assert most[0] == 2 and sorted(started) == list(range(6))
    assert len(_threads(pool)) == 2


def test_jobs_waiting_for_a_worker_run_in_the_order_they_came():
    pool = WorkerPool(1, name="test-order")
    release = threading.Event()
    started = []

    def job(i):
        started.append(i)
        release.wait(10)

    async def main():
        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(pool.run, lambda i=i: job(i))
                await trio.sleep(0.02)  # submitted in this order
            release.set()

    trio.run(main)
    assert started == [0, 1, 2, 3, 4]


def test_a_cancelled_caller_waits_for_its_job_then_sees_the_cancellation():
    """As trio.to_thread.run_sync: the job is not abandoned (a staging write half
    done would be), and the caller's cancellation comes at its next checkpoint."""
    pool = WorkerPool(1, name="test-cancel")
    finished = threading.Event()

    def slow():
        time.sleep(0.3)
        finished.set()
        return "done"

    async def main():
        got = []
        t = trio.current_time()
        with trio.move_on_after(0.05) as scope:
            got.append(await pool.run(slow))
            await trio.sleep(0)
            got.append("after the checkpoint")
        assert scope.cancelled_caught
        assert finished.is_set() and got == ["done"]
        assert trio.current_time() - t >= 0.3

    trio.run(main)


def test_a_caller_cancelled_before_the_call_runs_no_job():
    pool = WorkerPool(1, name="test-precancel")
    ran = []

    async def main():
        with trio.CancelScope() as scope:
            scope.cancel()
            await pool.run(lambda: ran.append(1))
        assert scope.cancelled_caught

    trio.run(main)
    assert ran == []


def test_a_thread_left_idle_ends_and_the_next_job_starts_another():
    pool = WorkerPool(2, name="test-idle", idle_s=0.05)

    async def main():
        assert await pool.run(lambda: 1) == 1
        assert pool.threads() == 1
        with trio.fail_after(10):
            while pool.threads() or _threads(pool):
                await trio.sleep(0.02)
        assert await pool.run(lambda: 2) == 2  # a new thread takes it
        assert pool.threads() == 1

    trio.run(main)


def test_jobs_in_bursts_and_pauses_all_finish_never_more_than_size_at_once():
    """Threads start, end when idle and are owed to waiting jobs in every order: a
    job counted against a thread that ended would wait for ever."""
    pool = WorkerPool(3, name="test-bursts", idle_s=0.005)
    rng = random.Random(7)
    lock = threading.Lock()
    running, most = [0], [0]

    def job(i, seconds):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(seconds)
        with lock:
            running[0] -= 1
        return i

    async def main():
        done = []

        async def one(i, seconds):
            done.append(await pool.run(lambda: job(i, seconds)))

        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(one, i, rng.choice((0, 0.001, 0.004)))
                if rng.random() < 0.1:  # a pause: idle threads end
                    await trio.sleep(rng.choice((0.001, 0.01, 0.02)))
        finished.extend(done)

    # (a waiting job cannot be cancelled: the run goes on a thread of its own, and a
    # run that does not end in time is the failure)
    finished: list[int] = []
    runner = threading.Thread(target=trio.run, args=(main,), daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "a job waits with no thread to take it"
    assert sorted(finished) == list(range(300))
    assert most[0] == 3


def test_a_thread_that_cannot_start_fails_the_call_and_leaves_the_pool_whole(monkeypatch):
    """As trio's threads: the caller gets the error (a request answers EIO), and the
    pool counts no thread that is not there."""
    pool = WorkerPool(1, name="test-nothread")
    ran = []

    def refuse(self):
        raise RuntimeError("can't start new thread")

    async def main():
        with monkeypatch.context() as m:
            m.setattr(threading.Thread, "start", refuse)
            with pytest.raises(RuntimeError, match="can't start new thread"):
                await pool.run(lambda: ran.append("lost"))
        assert pool.threads() == 0
        assert await pool.run(lambda: ran.append("ran") or "ok") == "ok"

    trio.run(main)
    assert ran == ["ran"]


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError, match="at least one thread"):
        WorkerPool(0)
