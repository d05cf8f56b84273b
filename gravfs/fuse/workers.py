"""The worker threads a request's blocking work runs on.

``trio.to_thread.run_sync`` (with a capacity limiter) took 65-70 µs a call with
nothing to do on this project's 2-vCPU host, against 35-38 µs for a job handed to
a waiting thread whose result comes back through the loop's token, as here; in the
daemon a random read of a small file not in the page cache went 379-397 -> 319-364
µs. A read the cache cannot answer, a listing batch not at hand and a staging write
that is not a local one each pay one such trip. The pool keeps trio's semantics where the daemon relies on them: at most
``size`` jobs run at once (the others wait in order), a job is not abandoned when
its caller is cancelled (the caller waits for it, then sees the cancellation at
its next checkpoint), and the job's exception is the caller's. The mount's start and
stop and the watcher's notices to the kernel (rare, and the watcher's limiter is
held to hold them back) stay on trio's threads.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, TypeVar

import outcome
import trio

log = logging.getLogger(__name__)

T = TypeVar("T")


def _not_abandoned(_raise_cancel) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # the job runs on: its caller waits for it


class WorkerPool:
    """Up to ``size`` threads, started as jobs need them and kept for the mount's
    life (daemon threads: a job stuck on the store does not hold the exit)."""

    def __init__(self, size: int, name: str = "gravfs-worker"):
        if size < 1:
            raise ValueError(f"a worker pool needs at least one thread, not {size}")
        self.size = size
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a job (or about to take one queued)

    async def run(self, fn: Callable[[], T]) -> T:
        """fn() on a worker thread; its result or its exception."""
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        await trio.lowlevel.checkpoint_if_cancelled()

        def deliver(result: outcome.Outcome) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        self._jobs.put((fn, deliver))
        with self._lock:
            if self._idle:
                self._idle -= 1  # that thread takes this job
                start = False
            else:
                start = self._threads < self.size
                if start:
                    self._threads += 1
        if start:
            threading.Thread(target=self._work, name=f"{self.name}-{self._threads}",
                             daemon=True).start()
        return await trio.lowlevel.wait_task_rescheduled(_not_abandoned)  # (unwrapped)

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            fn, deliver = jobs.get()
            result = outcome.capture(fn)
            with self._lock:  # free before its caller hears: its next job needs no thread
                self._idle += 1
            try:
                deliver(result)
            except trio.RunFinishedError:
                log.debug("a worker's job finished after the event loop did")
            del fn, deliver, result  # (a finished job's frames are not kept alive here)
