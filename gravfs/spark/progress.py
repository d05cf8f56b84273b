"""A progress line per Spark stage (tasks done/total), for the CLI on a terminal.

Polls the SparkContext's status tracker from a thread while a job runs: the
line of the running stage is redrawn in place and left on screen, final, when
the stage ends. Stages Spark skipped (their output was already there) are not
shown.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator, Optional, TextIO


class StageProgress:
    def __init__(self, sc, stream: TextIO, interval: float = 0.5):
        self.sc, self.stream, self.interval = sc, stream, interval
        self._before = set(sc.statusTracker().getJobIdsForGroup())
        self._done: set[int] = set()
        self._open: Optional[int] = None  # stage whose line is drawn, not ended
        self._drawn = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gravfs-spark-progress",
                                        daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # the context stopping under us: the last poll tells
                return

    def poll(self) -> None:
        st = self.sc.statusTracker()
        for jid in sorted(set(st.getJobIdsForGroup()) - self._before):
            job = st.getJobInfo(jid)
            for sid in sorted(job.stageIds) if job is not None else ():
                if sid in self._done:
                    continue
                info = st.getStageInfo(sid)
                if info is None or info.numCompletedTasks + info.numActiveTasks == 0:
                    continue
                name = info.name.split(" at ", 1)[0]
                ended = info.numActiveTasks == 0 and \
                    info.numCompletedTasks + info.numFailedTasks >= info.numTasks
                failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
                line = (f"stage {sid} ({name}): {info.numCompletedTasks}/{info.numTasks} "
                        f"tasks{failed}")
                if line == self._drawn and not ended:
                    continue
                if self._open is not None and self._open != sid:
                    self.stream.write("\n")
                self.stream.write(f"\r{line}\x1b[K")
                self._drawn = line
                self._open = sid
                if ended:
                    self.stream.write("\n")
                    self._open = None
                    self._done.add(sid)
                self.stream.flush()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.poll()
        except Exception:
            pass
        if self._open is not None:
            self.stream.write("\n")
            self.stream.flush()


@contextmanager
def stage_progress(sc, enabled: bool = True, stream: Optional[TextIO] = None,
                   interval: float = 0.5) -> Iterator[None]:
    """Draw stage progress on ``stream`` (stderr, only when it is a terminal)."""
    stream = stream or sys.stderr
    if not enabled or (stream is sys.stderr and not stream.isatty()):
        yield
        return
    p = StageProgress(sc, stream, interval)
    p.start()
    try:
        yield
    finally:
        p.stop()
