"""The event loop's busy-poll (gravfs.fuse.spin): it polls while requests come
and sleeps once they stop, so an idle mount burns no CPU."""

from __future__ import annotations

import os
import time

import pytest
import trio

from gravfs import threadwork
from gravfs.fuse.spin import Activity
from tests.fuse_util import gravfs_mount  # noqa: F401 (fixture)


def test_polls_while_requests_come_and_sleeps_after_the_window():
    act = Activity()
    window = 0.3
    seen = {}

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(act.run, window)
            await trio.sleep(3 * window)  # no request yet: the first window ran out
            seen["idle at start"] = act.polling
            act.note()
            await trio.sleep(0.01)  # (trio runs a batch of tasks in random order)
            seen["woken"] = act.polling
            polled = True
            for _ in range(20):  # 1 s of requests 50 ms apart: three windows and more
                act.note()
                await trio.sleep(0.05)
                polled = polled and act.polling
            seen["while requests come"] = polled
            await trio.sleep(3 * window)
            seen["after they stop"] = act.polling
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen == {"idle at start": False, "woken": True, "while requests come": True,
                    "after they stop": False}
    assert act.count == 21


def test_other_tasks_run_while_it_polls():
    act = Activity()
    ticks = []

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(act.run, 10.0)
            act.note()
            for _ in range(5):
                await trio.sleep(0.01)
                ticks.append(act.polling)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert ticks == [True] * 5


def test_it_stands_aside_while_work_runs_on_threads():
    act = Activity()
    seen = {}

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(act.run, 10.0)
            act.note()
            await trio.sleep(0.01)
            seen["before"] = act.polling
            with threadwork.working():  # e.g. a worker's pread that a read waits for
                for _ in range(5):  # requests still coming do not keep it polling
                    act.note()
                    await trio.sleep(0.01)
                seen["while it runs"] = act.polling
            act.note()  # the next request: polling again
            await trio.sleep(0.01)
            seen["after"] = act.polling
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen == {"before": True, "while it runs": False, "after": True}


def _busy_loop_and_a_thread(act: Activity) -> tuple[bool, int]:
    """A task that keeps the loop from ever blocking (1 ms of work a request, as many
    clients would) while a worker makes 20 short system calls, each of which takes the
    GIL back after: did the worker finish before the task gave up (after ~3 s)?"""
    state = {"busy": 0}

    async def busy(done: trio.Event) -> None:
        while not done.is_set() and state["busy"] < 3000:
            t = time.perf_counter()
            while time.perf_counter() - t < 0.001:
                pass
            act.note()
            state["busy"] += 1
            await trio.lowlevel.checkpoint()

    def work() -> None:
        for _ in range(20):
            os.stat("/")

    async def main():
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy, done)
            await trio.lowlevel.checkpoint()
            with threadwork.working():
                await trio.to_thread.run_sync(work)
            done.set()

    trio.run(main)
    return state["busy"] < 3000, state["busy"]


def test_a_thread_gets_the_gil_while_requests_keep_the_loop_busy():
    """CPython hands the GIL to a waiting thread only when its holder leaves it for a
    while or keeps it a whole switch interval; a loop kept busy by requests does
    neither, so the loop leaves it now and then while threads work (a worker gets
    its turns in about a millisecond: it used to wait for seconds)."""
    finished, requests = _busy_loop_and_a_thread(Activity())
    assert finished, f"the worker still waited for the GIL after {requests} requests"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_idle_mount_does_not_poll(gravfs_mount):
    m = gravfs_mount
    pid = m.pid()
    for i in range(200):  # requests: the loop polls while they come
        os.stat(m.mnt)
        os.listdir(m.branch_path(""))
    time.sleep(0.5)  # a thousand windows of the default 100 us
    cpu = _cpu_seconds(pid)
    time.sleep(2.0)
    used = _cpu_seconds(pid) - cpu
    assert used < 0.5, f"an idle daemon used {used:.2f} s of CPU in 2 s"


def _run_choice(act, now: list, gap_of, requests: int) -> list[bool]:
    """Send ``requests`` requests to ``act`` (its clock ``now``), each after a gap whose
    length depends on the mode the loop is in; the modes they came in."""
    modes = []
    for _ in range(requests):
        modes.append(act.choice.spin)
        now[0] += gap_of(act.choice.spin)
        act.note()
    return modes


@pytest.fixture
def clocked(monkeypatch):
    """A new Activity and the clock its requests are timed by."""
    from gravfs.fuse import spin

    now = [0.0]
    monkeypatch.setattr(spin, "_clock", lambda: now[0])

    def make():
        now[0] = 0.0  # (a new Activity's last request was at 0)
        return Activity(), now

    return make


def test_the_choice_keeps_the_mode_whose_requests_come_sooner(clocked):
    from gravfs.fuse import spin

    trial = 2 * spin.TRIAL_GAPS
    act, now = clocked()  # polling faster: it stays
    modes = _run_choice(act, now, lambda polling: 60e-6 if polling else 90e-6, trial)
    assert modes.count(True) == modes.count(False) == spin.TRIAL_GAPS  # both tried
    assert modes[:spin.TRIAL_BLOCK] == [True] * spin.TRIAL_BLOCK  # in turns
    assert modes[spin.TRIAL_BLOCK:2 * spin.TRIAL_BLOCK] == [False] * spin.TRIAL_BLOCK
    assert act.choice.spin
    assert set(_run_choice(act, now, lambda polling: 60e-6, spin.KEEP_REQUESTS)) == {True}

    act, now = clocked()  # sleeping faster (the AMD host of 2026-12-04): it takes over
    _run_choice(act, now, lambda polling: 84e-6 if polling else 75e-6, trial)
    assert not act.choice.spin
    assert set(_run_choice(act, now, lambda polling: 75e-6, spin.KEEP_REQUESTS)) == {False}
    # the next trial: the workload changed and polling now pays again
    _run_choice(act, now, lambda polling: 50e-6 if polling else 90e-6, trial + 1)
    assert act.choice.spin


def test_the_choice_stays_on_a_tie_and_ignores_the_odd_slow_gap(clocked):
    from gravfs.fuse import spin

    trial = 2 * spin.TRIAL_GAPS
    act, now = clocked()  # within the margin: the kept mode stays
    _run_choice(act, now, lambda polling: 100e-6 if polling else 99e-6, trial)
    assert act.choice.spin
    act, now = clocked()
    n = [0]

    def gap(polling: bool) -> float:  # polling is faster, but one gap in ten of it is
        n[0] += 1                     # a listing's (a mean would pick sleeping)
        if polling:
            return 900e-6 if n[0] % 10 == 0 else 60e-6
        return 80e-6

    _run_choice(act, now, gap, trial)
    assert act.choice.spin


def test_the_loop_stops_polling_while_sleeping_is_faster(monkeypatch):
    from gravfs.fuse import spin

    act = Activity()
    now = [0.0]
    monkeypatch.setattr(spin, "_clock", lambda: now[0])
    seen = {}

    async def requests(n: int, polling_gap: float, sleeping_gap: float) -> None:
        for _ in range(n):
            now[0] += polling_gap if act.choice.spin else sleeping_gap
            act.note()
            await trio.lowlevel.checkpoint()

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(act.run, 10.0)
            await requests(2 * spin.TRIAL_GAPS, 90e-6, 70e-6)  # a trial: sleeping wins
            await trio.sleep(0.01)
            seen["after the trial"] = (act.choice.spin, act.polling)
            await requests(100, 90e-6, 70e-6)
            await trio.sleep(0.01)
            seen["while requests come"] = act.polling
            await requests(spin.KEEP_REQUESTS + 2 * spin.TRIAL_GAPS + 1, 40e-6, 70e-6)  # polling wins
            await trio.sleep(0.01)
            seen["after the next trial"] = (act.choice.spin, act.polling)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen == {"after the trial": (False, False), "while requests come": False,
                    "after the next trial": (True, True)}
