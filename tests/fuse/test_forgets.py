"""Big FORGET batches are forgotten in chunks, other requests served between them."""

from __future__ import annotations

import logging
import time

import trio

from gravfs import threadwork
from gravfs.fuse.forgets import CHUNK, ForgetQueue


class Counts:
    """What a forget lowers: lookups per inode."""

    def __init__(self, n: int):
        self.lookups = {ino: 2 for ino in range(1, n + 1)}
        self.calls = 0

    def forget(self, pairs) -> None:
        self.calls += 1
        for ino, n in pairs:
            self.lookups[ino] -= n
            if self.lookups[ino] <= 0:
                del self.lookups[ino]


def test_a_small_batch_or_one_without_a_nursery_is_forgotten_at_once():
    c = Counts(3 * CHUNK)
    q = ForgetQueue(c.forget)
    q.take([(1, 1), (2, 2)], nursery=None)
    assert c.lookups[1] == 1 and 2 not in c.lookups
    q.take([(ino, 2) for ino in range(3, 3 * CHUNK + 1)], nursery=None)  # big, no nursery
    assert c.lookups == {1: 1} and q.pending == 0


def test_a_big_batch_goes_in_chunks_with_other_tasks_running_between_them():
    n = 5 * CHUNK + 7
    chunks = (n + CHUNK - 1) // CHUNK + (n - CHUNK + CHUNK - 1) // CHUNK
    c = Counts(n)
    q = ForgetQueue(c.forget)
    seen: list[int] = []  # the lookups another task saw left each time it ran

    async def other(done: trio.Event) -> None:
        while not done.is_set():
            seen.append(sum(c.lookups.values()))
            await trio.lowlevel.checkpoint()

    async def main() -> None:
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other, done)
            q.take([(ino, 1) for ino in range(1, n + 1)], nursery)  # every inode once
            q.take([(ino, 1) for ino in range(1, CHUNK + 1)], nursery)  # small: now
            assert q.pending == n and c.lookups[1] == 1 and c.lookups[n] == 2
            q.take([(ino, 1) for ino in range(CHUNK + 1, n + 1)], nursery)  # queued behind
            assert q.pending == 2 * n - CHUNK
            left = []
            with trio.fail_after(30):
                while q.pending:
                    left.append(q.pending)
                    await trio.sleep(0)
            done.set()
            assert len(set(left)) >= chunks // 2  # counted down chunk by chunk

    trio.run(main)
    assert c.lookups == {} and q.pending == 0
    assert c.calls == 1 + chunks  # the small batch at once, the big ones chunk by chunk
    # the other task ran in every turn while chunks were left (trio runs each ready task
    # once a turn, in any order; the background task does one chunk a turn)
    between = [x for x in seen if 0 < x < 2 * n - CHUNK]
    assert len(between) >= chunks - 2, seen


def test_a_failing_chunk_is_logged_and_the_rest_still_go(caplog):
    n = 3 * CHUNK
    done: list[int] = []

    def forget(pairs) -> None:
        pairs = list(pairs)
        if pairs[0][0] == CHUNK + 1:
            raise RuntimeError("a bug")
        done.extend(ino for ino, _ in pairs)

    q = ForgetQueue(forget)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            q.take([(ino, 1) for ino in range(1, n + 1)], nursery)

    with caplog.at_level(logging.ERROR, logger="gravfs.fuse.forgets"):
        trio.run(main)
    assert done == list(range(1, CHUNK + 1)) + list(range(2 * CHUNK + 1, n + 1))
    assert f"forgetting {CHUNK} inodes failed" in caplog.text and q.pending == 0


def test_a_worker_thread_call_is_answered_while_a_big_batch_is_forgotten():
    """A handler's call on a worker thread (statfs's, a cold read's) comes back during
    the forgetting, not after it: a loop that only checkpointed between chunks let go of
    the GIL for microseconds at a time, too short for the worker to take it, and the
    call waited for the whole queue."""
    chunks = 1000
    done = [0]

    def forget(pairs) -> None:  # ~1 ms of the GIL a chunk, as 256 inodes take
        until = time.perf_counter() + 0.001
        while time.perf_counter() < until:
            pass
        done[0] += 1

    q = ForgetQueue(forget)
    answered_at: list[int] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            q.take([(ino, 1) for ino in range(chunks * CHUNK)], nursery)
            with threadwork.working():
                await trio.to_thread.run_sync(lambda: None)
            answered_at.append(done[0])

    trio.run(main)
    assert done[0] == chunks
    assert answered_at[0] < chunks // 2, answered_at  # (~1-3 chunks in when it works)


def test_a_drain_cancelled_midway_goes_on_where_it_stopped():
    """The mount's nursery cancelled (unmount) while inodes wait: a later drain (in
    another nursery) forgets the rest, none of them twice."""
    n = 4 * CHUNK
    c = Counts(n)
    q = ForgetQueue(c.forget)

    async def cut_short() -> None:
        async with trio.open_nursery() as nursery:
            q.take([(ino, 1) for ino in range(1, n + 1)], nursery)
            with trio.fail_after(30):
                while q.pending > 2 * CHUNK:
                    await trio.sleep(0)
            nursery.cancel_scope.cancel()

    async def go_on() -> None:
        async with trio.open_nursery() as nursery:
            q.take([(ino, 1) for ino in range(1, 2 * CHUNK)], nursery)  # starts a drain

    trio.run(cut_short)
    assert 0 < q.pending <= 2 * CHUNK
    trio.run(go_on)
    assert q.pending == 0
    # once each: the first batch took every inode from 2 to 1, the second 1..2*CHUNK-1 to 0
    assert c.lookups == {ino: 1 for ino in range(2 * CHUNK, n + 1)}
