"""Named crash points for crash-safety tests.

``GRAVFS_CRASH_AT=<name>`` makes the process die (os._exit, like a kill -9:
no cleanup, no flush) when it reaches that point. Unset, a point costs one
dict lookup.
"""

from __future__ import annotations

import os

CRASH_EXIT_CODE = 99


def crash_point(name: str) -> None:
    if os.environ.get("GRAVFS_CRASH_AT") == name:
        os._exit(CRASH_EXIT_CODE)
