"""A progress line per Spark stage (tasks done/total, rows), for the CLI on a terminal.

Polls the SparkContext's status tracker from a thread while a job runs: the
line of the running stage is redrawn in place and left on screen, final, when
the stage ends. Stages Spark skipped (their output was already there) are not
shown. Jobs count rows with ``counter(sc, name)`` (a Spark accumulator their
tasks add to); a stage's line shows how many each counter grew since the stage
before it ended (accumulators reach the driver as tasks finish, so an ended
stage's line is left final a poll later, or at once when another stage's line
goes below it).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator, Optional, TextIO

_counters: dict[str, dict[str, object]] = {}  # application id -> name -> accumulator


def counter(sc, name: str):
    """A row counter (an int accumulator) shown on the progress lines as ``N rows NAME``."""
    acc = sc.accumulator(0)
    _counters.setdefault(sc.applicationId, {})[name] = acc
    return acc


def counts(sc) -> dict[str, int]:
    """The current values of the application's counters."""
    return {k: a.value for k, a in _counters.get(sc.applicationId, {}).items()}


class StageProgress:
    def __init__(self, sc, stream: TextIO, interval: float = 0.5):
        self.sc, self.stream, self.interval = sc, stream, interval
        self._before = set(sc.statusTracker().getJobIdsForGroup())
        self._done: set[int] = set()
        self._open: Optional[int] = None  # stage whose line is drawn, not ended
        self._drawn = ""
        self._at_start: dict[int, dict[str, int]] = {}  # counters a stage's rows count from
        self._base = counts(sc)  # counters when the last stage ended (or at the start)
        self._ending: set[int] = set()  # stages seen ended, their lines not yet final
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gravfs-spark-progress",
                                        daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # the context stopping under us: the last poll tells
                return

    def poll(self, final: bool = False) -> None:
        """Draw what changed; an ended stage's line is left final one poll later (its
        tasks' row counts reach the driver after the tasks end), at once when another
        stage's line is drawn below it in the same poll, or at ``final``."""
        st = self.sc.statusTracker()
        seen = []
        for jid in sorted(set(st.getJobIdsForGroup()) - self._before):
            job = st.getJobInfo(jid)
            for sid in sorted(job.stageIds) if job is not None else ():
                if sid in self._done:
                    continue
                info = st.getStageInfo(sid)
                if info is None or info.numCompletedTasks + info.numActiveTasks == 0:
                    continue
                done = info.numActiveTasks == 0 and \
                    info.numCompletedTasks + info.numFailedTasks >= info.numTasks
                seen.append((sid, info, done))
        running = any(not done for _, _, done in seen)
        for i, (sid, info, done) in enumerate(seen):
            later = i + 1 < len(seen)  # another stage's line follows in this poll
            if later and not done:
                continue  # stages running side by side: one line redrawn, the last's
            name = info.name.split(" at ", 1)[0]
            # final once the next stage runs or is drawn below it (the screen keeps it
            # as it is then), a poll after it ended, or at the end
            ended = done and (final or running or later or sid in self._ending)
            if done:
                self._ending.add(sid)
            failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
            now = counts(self.sc)
            start = self._at_start.setdefault(sid, self._base)
            rows = "".join(f", {now[k] - start.get(k, 0):,} rows {k}" for k in sorted(now)
                           if now[k] - start.get(k, 0))
            line = (f"stage {sid} ({name}): {info.numCompletedTasks}/{info.numTasks} "
                    f"tasks{failed}{rows}")
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
                self._base = now  # the next stage's rows count from here
            self.stream.flush()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.poll(final=True)
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
