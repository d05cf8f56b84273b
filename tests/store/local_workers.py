"""Child-process bodies for the multi-process LocalStore tests (no tests here).

Kept apart from test_base.py so that spawned children import only
gravfs.store.local, not boto3 and pytest: about 50 ms instead of 300 ms each.
"""

from __future__ import annotations

from gravfs.errors import PreconditionFailedError
from gravfs.store.local import LocalStore


def increment(store, key: str, times: int) -> int:
    """Read-modify-CAS loop; returns how many CAS attempts lost."""
    lost = 0
    done = 0
    while done < times:
        data, version = store.read_versioned(key)
        try:
            store.compare_and_swap(key, version, str(int(data) + 1).encode())
            done += 1
        except PreconditionFailedError:
            lost += 1
    return lost


def race_proc(root, key, base, i, barrier, out):
    store = LocalStore(root)
    barrier.wait()
    try:
        out.put((i, store.compare_and_swap(key, base, b"proc%d" % i)))
    except PreconditionFailedError:
        out.put((i, None))


def counter_proc(root, key, times, barrier):
    store = LocalStore(root)
    barrier.wait()
    increment(store, key, times)
