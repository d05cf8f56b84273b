"""A gravfs CLI run that a test waits on and then kills with its whole process group.

Its stderr goes to a file, not a pipe: nobody reads a pipe while the run hangs at an
injected fault, and a driver whose stderr fills a pipe's 64 KiB blocks before it reaches
the stage the test waits for. A wait that fails shows that stderr and Spark's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable

HANG = "mode=hang,secs=300"  # a GRAVFS_STORE_FAULT action that outlives any wait


def count_files(store: str, sub: str) -> int:
    """Objects under ``sub`` of a local store."""
    n = 0
    for _root, _dirs, files in os.walk(os.path.join(store, sub)):
        n += len(files)
    return n


def tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]
    except FileNotFoundError:
        return "(none)"


class KillableCli:
    """``python -m gravfs.cli -v ARGS`` in its own session; leaving the block kills it."""

    def __init__(self, args: list[str], env: dict[str, str], err_path: str, state: str) -> None:
        self.err_path, self.state = err_path, state
        with open(err_path, "wb") as err:  # -v: an injected hang is logged
            self.proc = subprocess.Popen([sys.executable, "-m", "gravfs.cli", "-v", *args],
                                         env=env, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)

    def stderr(self) -> str:
        return tail(self.err_path, 1 << 20)

    def wait_for(self, pred: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended ({self.proc.returncode}) before {what}: "
                                     f"{tail(self.err_path)}")
            if time.monotonic() > deadline:
                spark_log = os.path.join(self.state, "logs", "spark.log")
                raise AssertionError(f"timed out waiting for {what}; stderr: "
                                     f"{tail(self.err_path)}; spark.log: {tail(spark_log)}")
            time.sleep(0.1)

    def kill(self) -> None:
        """kill -9 of the driver, its JVM and the Python workers."""
        if self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> "KillableCli":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
