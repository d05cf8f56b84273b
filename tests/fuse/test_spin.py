"""The event loop's busy-poll (gravfs.fuse.spin): it polls while requests come
and sleeps once they stop, so an idle mount burns no CPU."""

from __future__ import annotations

import os
import time

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
