"""FORGET batches: small ones applied on arrival, big ones between requests, the table
shrunk once they stop (gravfs.fuse.forgets)."""

import trio

from gravfs.fuse.forgets import SLICE, Forgets
from gravfs.fuse.inodes import InodeTable
from gravfs.fuse.trees import Tree


def _table(n: int, lookups: int = 1):
    table = InodeTable()
    tree = Tree("branch", "main", writable=True)
    nodes = [table.ensure(tree, b"f%05d" % i, "file", 1, b"f%05d" % i) for i in range(n)]
    for node in nodes:
        node.lookups = lookups
    return table, tree, nodes


def test_a_small_batch_goes_at_once_a_large_one_in_slices():
    """A late FORGET lowers the count to what the kernel holds: an inode looked up
    again after its FORGET was noted stays, with the new lookup's count."""
    n = 2 * SLICE + 10
    table, tree, nodes = _table(n + 5, lookups=2)
    forgets = Forgets(table)
    forgets.add([(node.ino, 2) for node in nodes[n:]])  # small: applied on arrival
    assert forgets.pending == 0 and len(table) == n
    forgets.add([(node.ino, 2) for node in nodes[:SLICE + 5]])
    forgets.add([(node.ino, 2) for node in nodes[SLICE + 5:n]])
    assert forgets.pending == n and len(table) == n  # noted, nothing applied
    forgets.apply(SLICE)
    assert forgets.pending == n - SLICE and len(table) == n - SLICE
    assert table.get(nodes[SLICE - 1].ino) is None and table.get(nodes[SLICE].ino)
    nodes[SLICE + 7].lookups += 1  # the kernel looked it up again meanwhile
    forgets.apply(10)  # the first batch's last 5 pairs and the second's first 5
    assert table.get(nodes[SLICE + 9].ino) is None and table.get(nodes[SLICE + 10].ino)
    assert forgets.pending == n - SLICE - 10
    forgets.apply()
    assert forgets.pending == 0
    assert [node.ino for node in table.all()] == [nodes[SLICE + 7].ino]
    assert nodes[SLICE + 7].lookups == 1
    assert table.find(tree, b"f%05d" % (SLICE + 7), "file") is nodes[SLICE + 7]
    forgets.apply()  # nothing left: nothing happens
    assert len(table) == 1


def test_settle_applies_everything_and_shrinks_once():
    table, _, nodes = _table(8000)
    forgets = Forgets(table)
    for i in range(0, 8000, 2000):
        forgets.add([(n.ino, 1) for n in nodes[i:i + 2000]])
    assert forgets.pending == 8000
    assert forgets.settle() is True
    assert len(table) == 0 and forgets.pending == 0
    assert forgets.settle() is False  # no new fall


def test_run_applies_a_backlog_while_another_task_never_lets_the_loop_idle():
    """Slices wait for an idle loop, but not forever: a stream of requests that keeps
    the loop busy still sees the backlog applied (BUSY_WAIT_S), and the caches are
    told once, after the last slice."""
    n = 5 * SLICE + 5  # past 4,096: a table that small never shrinks
    table, _, nodes = _table(n)
    forgets = Forgets(table)
    told: list[int] = []

    async def main():
        busy = trio.Event()

        async def spin():  # always runnable, as a loop serving back-to-back requests
            while not busy.is_set():
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(spin)
            nursery.start_soon(forgets.run, lambda: told.append(len(table)))
            forgets.add([(node.ino, 1) for node in nodes])
            with trio.fail_after(10):
                while told == []:
                    await trio.lowlevel.checkpoint()
            busy.set()
            assert forgets.pending == 0
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert told == [0] and len(table) == 0


def test_run_applies_batches_when_the_loop_idles():
    table, _, nodes = _table(5000)
    forgets = Forgets(table)
    told: list[int] = []

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(forgets.run, lambda: told.append(len(table)))
            forgets.add([(node.ino, 1) for node in nodes[:2000]])
            assert forgets.pending == 2000
            await _until(lambda: forgets.pending == 0)
            await trio.sleep(0.05)
            assert len(table) == 3000 and told == []  # not a quarter of the peak
            forgets.add([(node.ino, 1) for node in nodes[2000:]])
            await _until(lambda: told != [])
            assert told == [0] and forgets.pending == 0
            nursery.cancel_scope.cancel()

    trio.run(main)


async def _until(done) -> None:
    with trio.fail_after(10):
        while not done():
            await trio.sleep(0.01)  # (asleep: the loop idles, as between requests)
