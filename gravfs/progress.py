"""Progress display for long operations (rich), silent when not on a terminal."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress,
                           TextColumn, TimeRemainingColumn, TransferSpeedColumn)


class _Bar:
    def __init__(self, progress, task):
        self.progress, self.task = progress, task

    def advance(self, n: int = 1) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, n)


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "items", enabled: bool = True):
    """Yield an object with advance(n); draws on stderr only when it is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield _Bar(None, None)
        return
    counter = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    cols = [TextColumn("{task.description}"), BarColumn(), counter]
    if unit == "bytes":
        cols.append(TransferSpeedColumn())
    cols.append(TimeRemainingColumn())
    with Progress(*cols, transient=True, redirect_stdout=False) as p:
        yield _Bar(p, p.add_task(description, total=total))
