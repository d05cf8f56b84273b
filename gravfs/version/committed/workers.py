"""A small pool of Python worker processes for parallel.py.

multiprocessing's spawn and forkserver start methods import the parent's
main script again in every worker, which runs a script's top-level code
twice (a user script calling commit without an ``if __name__`` guard would
commit from each worker); fork copies a possibly threaded caller (the mount
daemon) with its locks.  So the workers here are plain ``python -c``
processes that import only gravfs, with the parent's ``sys.path``.  Each
reads pickled ``(function, args)`` calls from a pipe and writes back the
result or the exception.  A worker sees end-of-file when its parent exits or
closes the pool, and exits; it ignores SIGINT (the parent handles it).  The
cyclic garbage collector is off while a call runs: calls build millions of
objects without cycles, and its passes over them cost about a tenth.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from typing import Any, Callable

from gravfs.errors import GravfsError

log = logging.getLogger(__name__)

_HEADER = 8


def _send(f, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(len(data).to_bytes(_HEADER, "little"))
    f.write(data)
    f.flush()


def _recv(f) -> Any:
    head = f.read(_HEADER)
    if len(head) < _HEADER:
        raise EOFError
    n = int.from_bytes(head, "little")
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


class WorkerError(GravfsError):
    """A worker process died, or its failure could not be sent back."""


class _Worker:
    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        to_r, to_w = os.pipe()      # parent -> worker
        from_r, from_w = os.pipe()  # worker -> parent
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        code = "from gravfs.version.committed.workers import main; main()"
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code, str(to_r), str(from_w),
                                          *preload],
                                         pass_fds=(to_r, from_w), env=env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            os.close(to_r)
            os.close(from_w)
        self.tx = os.fdopen(to_w, "wb")
        self.rx = os.fdopen(from_r, "rb")

    def call(self, fn: Callable, args: tuple) -> Any:
        try:
            _send(self.tx, (fn, args))
            status, value = _recv(self.rx)
        except (EOFError, BrokenPipeError, OSError) as e:
            raise WorkerError(f"worker process {self.proc.pid} died "
                              f"(exit status {self.proc.poll()}): {e or 'end of file'}") from None
        if status == "err":
            raise value
        return value

    def close(self) -> None:
        for f in (self.tx, self.rx):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log.warning("worker process %d did not exit; killing it", self.proc.pid)
            self.proc.kill()
            self.proc.wait()


class WorkerPool:
    """``size`` worker processes, started on first use; ``run`` maps calls over them."""

    def __init__(self, size: int, preload: tuple[str, ...] = ()):
        self.size = max(1, size)
        self.preload = preload  # modules a worker imports as it starts
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the worker processes now, without waiting for them (they start while
        the caller prepares the calls; run starts them otherwise)."""
        with self._lock:
            while len(self._workers) < self.size:
                self._workers.append(_Worker(self.preload))

    def run(self, calls: list[tuple[Callable, tuple]],
            here: Callable[[Callable, tuple], Any] | None = None) -> list:
        """Results of fn(*args) for every (fn, args), in order; the first failure is
        raised once every call has finished.

        ``here``: the calling thread takes calls too, running ``here(fn, args)``
        (it starts at once, while the worker processes are still starting).
        """
        with self._lock:  # one batch at a time: workers are not shared
            while len(self._workers) < min(self.size, len(calls) - (here is not None)):
                self._workers.append(_Worker(self.preload))
            todo: queue.SimpleQueue = queue.SimpleQueue()
            for i, call in enumerate(calls):
                todo.put((i, call))
            results: list = [None] * len(calls)
            errors: list[tuple[int, BaseException]] = []
            dead: list[_Worker] = []

            def drive(w: _Worker | None) -> None:
                """Take calls until none is left: on worker ``w``, or here (None)."""
                call = here if w is None else w.call
                # a failure a worker sends back leaves it fine; here, an interrupt stops all
                raised = Exception if w is None else BaseException
                while True:
                    try:
                        i, (fn, args) = todo.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        results[i] = call(fn, args)
                    except WorkerError as e:
                        errors.append((i, e))
                        if w is not None:
                            dead.append(w)
                            return
                    except raised as e:
                        errors.append((i, e))

            threads = [threading.Thread(target=drive, args=(w,), daemon=True)
                       for w in self._workers[:len(calls)]]
            for t in threads:
                t.start()
            try:
                if here is not None:
                    drive(None)
                for t in threads:
                    t.join()
            except BaseException:  # interrupted: replies may still come; start afresh next time
                for w in self._workers:
                    w.proc.kill()
                    w.close()
                self._workers = []
                raise
            for w in dead:
                self._workers.remove(w)
                w.close()
            if errors:
                raise min(errors, key=lambda e: e[0])[1]
            if not todo.empty():  # every worker died
                raise WorkerError("no worker process left to run the remaining calls")
            return results

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the live workers have used so far (0 without /proc)."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        for w in list(self._workers):
            try:
                with open(f"/proc/{w.proc.pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[-1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                pass
        return total

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                w.close()
            self._workers = []


def main() -> None:
    """Worker process: serve calls until end of file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rx = os.fdopen(int(sys.argv[1]), "rb")
    tx = os.fdopen(int(sys.argv[2]), "wb")
    for name in sys.argv[3:]:
        importlib.import_module(name)
    while True:
        try:
            fn, args = _recv(rx)
        except EOFError:
            return
        gc.disable()  # a call builds many objects and no cycles: no collector passes
        try:
            reply = ("ok", fn(*args))
        except BaseException as e:  # sent back and raised in the parent
            reply = ("err", e)
        finally:
            gc.enable()
        try:
            _send(tx, reply)
        except (pickle.PicklingError, TypeError, AttributeError):
            _send(tx, ("err", WorkerError(f"{type(reply[1]).__name__}: {reply[1]}")))
        except BrokenPipeError:
            return
