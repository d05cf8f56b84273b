"""Time limits of S3 calls: connect, read, attempts, and a deadline per operation.

botocore bounds each attempt (connect and read timeouts) and counts attempts,
but nothing bounds their sum: a server that accepts connections and never
answers kept a caller waiting for 5 attempts of the read timeout plus backoff,
and a body that trickles a byte now and then never times out at all. So every
store operation also has a deadline:

- Requests: a hook refuses another attempt (after a failure, or after the
  backoff sleep) once the deadline has passed, and raises DeadlineExceeded.
  The attempt in progress still ends by its own connect/read timeout, so an
  operation ends at most one attempt's wait after its deadline.
- Bodies: a watchdog thread shuts down the socket of a body read still running
  at its deadline, which wakes the blocked read at once.
- Progress renews it: each MiB of object data received restarts the deadline,
  so big transfers are bounded by their progress, not by a fixed time.

Operations made of several requests (conditional writes, reads retried after a
broken body) share one deadline, held per thread by ``operation``. Requests
issued by the transfer manager's own threads (multipart uploads) each get a
deadline of their own.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gravfs.errors import GravfsError

log = logging.getLogger(__name__)

# Error codes of answers that are worth another attempt (besides 5xx and 429).
TRANSIENT_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
                             "Throttling", "ThrottlingException"})

# Environment variables (also set by the mount options of the same name, lower case, without GRAVFS_).
ENV = {
    "connect": "GRAVFS_S3_CONNECT_TIMEOUT",
    "read": "GRAVFS_S3_READ_TIMEOUT",
    "operation": "GRAVFS_S3_TIMEOUT",
    "max_attempts": "GRAVFS_S3_MAX_ATTEMPTS",
}


@dataclass(frozen=True)
class S3Timeouts:
    """Seconds allowed to connect, to wait for any byte, and per operation; attempts per request."""

    connect: float = 5.0
    read: float = 30.0
    operation: float = 60.0
    max_attempts: int = 5

    @classmethod
    def resolve(cls, **given: float | int | None) -> "S3Timeouts":
        """Explicit values, else the environment (``ENV``), else the defaults."""
        values: dict[str, Any] = {}
        for name, var in ENV.items():
            value = given.get(name)
            if value is None and os.environ.get(var, "").strip():
                value = _parse(var, os.environ[var], int if name == "max_attempts" else float)
            if value is not None:
                values[name] = value
        t = cls(**values)
        if t.connect <= 0 or t.read <= 0 or t.operation <= 0 or t.max_attempts < 1:
            raise GravfsError(f"S3 timeouts must be positive and attempts at least 1 (got {t})")
        return t


def _parse(var: str, raw: str, kind: type) -> float | int:
    try:
        return kind(raw)
    except ValueError:
        raise GravfsError(f"{var}={raw!r}: not a {'whole ' if kind is int else ''}number") from None


class DeadlineExceeded(Exception):
    """An operation ran past its deadline; ``last`` is the failure that would have been retried."""

    def __init__(self, seconds: float, last: object = None):
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds
        self.last = last


class Deadline:
    """When one operation must give up; ``renew`` after progress (not once cut)."""

    __slots__ = ("seconds", "at", "last", "cut")

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.last: object = None  # the last failure seen (for the message)
        self.cut = False  # the watchdog ended a body read: over for good

    def renew(self) -> None:
        self.at = time.monotonic() + self.seconds

    def passed(self) -> bool:
        return self.cut or time.monotonic() >= self.at

    def check(self) -> None:
        if self.passed():
            raise DeadlineExceeded(self.seconds, self.last)


_local = threading.local()


def current() -> Deadline | None:
    return getattr(_local, "deadline", None)


@contextmanager
def operation(seconds: float) -> Iterator[Deadline]:
    """The calling thread's deadline for one operation (an enclosing one, if any, is kept)."""
    outer = current()
    if outer is not None:
        yield outer
        return
    _local.deadline = deadline = Deadline(seconds)
    try:
        yield deadline
    finally:
        _local.deadline = None


def install(client: Any, seconds: float) -> None:
    """Make every request of a boto3 S3 client respect its operation's deadline."""
    events = client.meta.events

    def before_call(context: dict, **_: Any) -> None:
        context["gravfs_deadline"] = current() or Deadline(seconds)

    def needs_retry(request_dict: dict, caught_exception: BaseException | None = None,
                    response: Any = None, **_: Any) -> None:
        deadline = request_dict.get("context", {}).get("gravfs_deadline")
        if deadline is None:
            return
        if caught_exception is not None:
            deadline.last = caught_exception
        elif response is not None:
            status = response[0].status_code
            code = str(response[1].get("Error", {}).get("Code", ""))
            if status < 500 and status != 429 and code not in TRANSIENT_CODES:
                return  # an answer botocore does not retry (2xx, 404, 412, ...)
            deadline.last = f"HTTP {status} {code}".rstrip()
        deadline.check()  # raises: no further attempt (returning None lets botocore decide)

    def request_created(request: Any, **_: Any) -> None:
        deadline = getattr(request, "context", {}).get("gravfs_deadline")
        if deadline is not None:
            deadline.check()  # e.g. passed during the backoff sleep

    events.register("before-call.s3", before_call)
    events.register_first("needs-retry.s3", needs_retry)
    events.register_first("request-created.s3", request_created)


# --- cutting stalled bodies -------------------------------------------------------------


class _Watch:
    __slots__ = ("deadline", "stream", "fired", "done")

    def __init__(self, deadline: Deadline, stream: Any):
        self.deadline = deadline
        self.stream = stream
        self.fired = False
        self.done = False


class _Watchdog:
    """One thread for the process: shuts down body streams whose deadline passed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, watch: _Watch) -> None:
        with self._cond:
            heapq.heappush(self._heap, (watch.deadline.at, next(self._seq), watch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gravfs-s3-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def finish(self, watch: _Watch) -> None:
        with self._cond:  # the watchdog fires only under this lock: never after the read ended
            watch.done = True

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                at, _, watch = self._heap[0]
                now = time.monotonic()
                if watch.deadline.at > at:  # renewed by progress: look again later
                    heapq.heapreplace(self._heap, (watch.deadline.at, next(self._seq), watch))
                    continue
                if at > now:
                    self._cond.wait(at - now)
                    continue
                heapq.heappop(self._heap)
                watch.fired = watch.deadline.cut = True
                try:
                    watch.stream.shutdown()  # wakes the reader blocked in recv
                except Exception as exc:  # already released or closed: nothing to cut
                    log.debug("could not cut a stalled S3 body: %s", exc)


_watchdog = _Watchdog()


@contextmanager
def watched(deadline: Deadline, body: Any) -> Iterator[_Watch]:
    """While reading ``body`` (a botocore StreamingBody), cut it at ``deadline``.

    Check ``fired`` on a read error: it means the deadline, not the network, ended it.
    """
    stream = getattr(body, "_raw_stream", None)  # urllib3 response (shutdown() since urllib3 2.3)
    watch = _Watch(deadline, stream)
    if stream is None or not hasattr(stream, "shutdown"):
        yield watch  # cannot cut: the read timeout still bounds each wait
        return
    _watchdog.add(watch)
    try:
        yield watch
    finally:
        _watchdog.finish(watch)
