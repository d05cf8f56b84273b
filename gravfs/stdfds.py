"""Descriptors 0-2 held from a gravfs process's start, whatever it was started with."""

from __future__ import annotations

import os
import sys


def hold_standard_fds() -> None:
    """Put /dev/null on each of descriptors 0-2 that the command started without
    (``>&-``, ``2>&-``). A file opened later would take the number, and what writes
    to it by number would write into that file: a foreground mount started so held
    its staging database on 1 and 2, where libfuse prints its messages, as would a
    child process. Python's stdin and stdout stay None (or say they are closed), so
    commands still report the closed stream; messages to a closed stderr go nowhere,
    as the caller chose (Python's print sends them to stdout, into the command's
    output, and code that flushes stderr failed: a mount did)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if null != fd:  # (a lower one was free: not after the loop's earlier turns)
            os.dup2(null, fd)
            os.close(null)
        else:
            os.set_inheritable(fd, True)  # a child's stdio, as any other
    if sys.stderr is None:
        sys.stderr = open(2, "w", errors="backslashreplace", closefd=False)
