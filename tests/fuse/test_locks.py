"""QuickLock: a free lock is taken without a pass through the scheduler; a held
one is waited for, in order, and a cancelled waiter leaves no trace; its stamp
tells a reader whether a holder came or went."""

import trio

from gravfs.fuse.locks import QuickLock


class _Steps(trio.abc.Instrument):
    """Counts the scheduler's steps of each task."""

    def __init__(self):
        self.steps = {}

    def before_task_step(self, task):
        self.steps[task] = self.steps.get(task, 0) + 1


def test_a_free_lock_is_taken_without_a_schedule_point():
    async def main():
        steps = _Steps()
        trio.lowlevel.add_instrument(steps)
        me = trio.lowlevel.current_task()
        lock = QuickLock()
        before = steps.steps.get(me, 0)
        for _ in range(3):
            async with lock:
                assert lock.locked()
        assert not lock.locked()
        assert steps.steps.get(me, 0) == before  # never left the run loop's step

    trio.run(main)


def test_a_held_lock_is_waited_for_in_order():
    async def main():
        lock = QuickLock()
        order = []

        async def waiter(name, started):
            started.set()
            async with lock:
                order.append(name)

        async with trio.open_nursery() as nursery:
            async with lock:
                for name in ("first", "second", "third"):
                    started = trio.Event()
                    nursery.start_soon(waiter, name, started)
                    await started.wait()
                await trio.sleep(0.01)
                assert order == []  # all three wait while the lock is held
        assert order == ["first", "second", "third"]
        assert not lock.locked()

    trio.run(main)


def test_a_cancelled_waiter_does_not_take_the_lock():
    async def main():
        lock = QuickLock()
        took = []

        async def waiter():
            async with lock:
                took.append(True)

        async with trio.open_nursery() as nursery:
            async with lock:
                nursery.start_soon(waiter)
                await trio.sleep(0.01)
                nursery.cancel_scope.cancel()  # the waiter is cancelled while it waits
        assert took == []
        assert not lock.locked()
        async with lock:  # still usable
            assert lock.locked()

    trio.run(main)


def test_the_stamp_tells_whether_a_holder_came_or_went():
    """None while held (by anyone); else the release count, so a reader that finds
    the same stamp after a wait knows no change of the namespace began or ended."""
    async def main():
        lock = QuickLock()
        before = lock.stamp()
        assert before is not None and not lock.held_here()
        seen = {}

        async def other():
            seen["other holds"] = lock.held_here()

        async with trio.open_nursery() as nursery:
            async with lock:
                assert lock.stamp() is None and lock.held_here()
                nursery.start_soon(other)
                await trio.sleep(0.01)
        assert seen == {"other holds": False}
        assert lock.stamp() == before + 1
        async with lock:
            pass
        assert lock.stamp() == before + 2

    trio.run(main)
