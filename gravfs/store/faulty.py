"""A store that fails or hangs on purpose (tests, fault drills).

``GRAVFS_STORE_FAULT=op=OPS,key=GLOB,mode=MODE[,after=N][,secs=S][,when=W]``
(rules separated by ``;``) makes open_store wrap the store in a FaultyStore:
calls of an op in OPS (``|``-separated names of STORE_OPS, or ``read``,
``write``, ``*``) on a key matching GLOB raise StoreUnavailableError, after
the first N such calls of the process went through. MODE ``fail`` fails every
later call, ``fail-once`` one call, ``hang`` waits S seconds (default 5) and
then fails like a timeout. ``when=after`` runs the call first and then fails
(the store did it, the reply was lost). Tests use FaultyStore directly too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Optional, TypeVar

from gravfs.errors import GravfsError, StoreUnavailableError
from gravfs.store.base import ObjectStore

log = logging.getLogger(__name__)

STORE_FAULT_ENV = "GRAVFS_STORE_FAULT"

STORE_OPS = ("get", "get_range", "download", "size", "read_versioned", "list",
             "put", "upload", "put_if_absent", "put_file_if_absent", "cas", "delete",
             "stat", "touch", "delete_many")
OP_GROUPS = {
    "read": ("get", "get_range", "download", "size", "read_versioned", "list", "stat"),
    "write": ("put", "upload", "put_if_absent", "put_file_if_absent", "cas", "delete",
              "touch", "delete_many"),
    "*": STORE_OPS,
}
MODES = ("fail", "fail-once", "hang")
_READS = frozenset(("get", "get_range", "download"))

T = TypeVar("T")


@dataclass
class StoreFault:
    """One rule: which calls fail, how, and from which matching call on."""

    ops: frozenset[str]
    key: str = "*"
    mode: str = "fail"
    after: int = 0  # matching calls let through first
    secs: float = 5.0  # hang: how long a call waits before it fails
    when: str = "before"  # "after": the call runs, then fails (its reply lost)
    seen: int = field(default=0, compare=False)
    fired: int = field(default=0, compare=False)

    def matches(self, op: str, key: str) -> bool:
        return op in self.ops and fnmatchcase(key, self.key)

    def trips(self, op: str, key: str) -> bool:
        """Count a matching call; True when this one fails (caller holds the lock)."""
        if not self.matches(op, key):
            return False
        self.seen += 1
        if self.seen <= self.after or (self.mode == "fail-once" and self.fired):
            return False
        self.fired += 1
        return True


def parse_store_faults(spec: str) -> list[StoreFault]:
    """Rules of a ``GRAVFS_STORE_FAULT`` value; GravfsError names what is wrong."""
    faults = []
    for rule in filter(None, (r.strip() for r in spec.split(";"))):
        kw: dict[str, Any] = {}
        for part in rule.split(","):
            k, eq, v = part.strip().partition("=")
            if not eq:
                raise _bad(spec, f"{part!r} is not NAME=VALUE")
            kw[k] = v
        ops: set[str] = set()
        for op in kw.pop("op", "*").split("|"):
            if op in OP_GROUPS:
                ops.update(OP_GROUPS[op])
            elif op in STORE_OPS:
                ops.add(op)
            else:
                raise _bad(spec, f"unknown op {op!r} (one of {', '.join(STORE_OPS)}, read, write, *)")
        f = StoreFault(frozenset(ops), kw.pop("key", "*"), kw.pop("mode", "fail"))
        if f.mode not in MODES:
            raise _bad(spec, f"unknown mode {f.mode!r} (one of {', '.join(MODES)})")
        f.when = kw.pop("when", "before")
        if f.when not in ("before", "after"):
            raise _bad(spec, f"when must be before or after, not {f.when!r}")
        try:
            f.after = int(kw.pop("after", 0))
            f.secs = float(kw.pop("secs", 5.0))
        except ValueError as exc:
            raise _bad(spec, str(exc)) from None
        if kw:
            raise _bad(spec, f"unknown setting(s) {', '.join(sorted(kw))}")
        faults.append(f)
    if not faults:
        raise _bad(spec, "no rule")
    return faults


def _bad(spec: str, why: str) -> GravfsError:
    return GravfsError(f"bad {STORE_FAULT_ENV} {spec!r}: {why}")


class FaultyStore(ObjectStore):
    """Any ObjectStore whose calls fail or hang as its rules say (``faults`` may be
    changed at any time; an empty list passes every call through)."""

    def __init__(self, inner: ObjectStore, faults: list[StoreFault]):
        self.inner = inner
        self.url = inner.url
        self.conditions_are_own = inner.conditions_are_own
        self.faults = list(faults)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # backend extras (root, client, ...)
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _fault(self, op: str, key: str) -> Optional[StoreFault]:
        with self._lock:
            for f in self.faults:
                if f.trips(op, key):
                    return f
        return None

    def _fail(self, f: StoreFault, op: str, key: str) -> StoreUnavailableError:
        if f.mode == "hang":
            log.info("injected hang: %s %s waits %.1fs", op, key, f.secs)
            time.sleep(f.secs)
            return StoreUnavailableError(f"store {self.url}: {op} {key} timed out after "
                                         f"{f.secs:g}s (injected by {STORE_FAULT_ENV})")
        return StoreUnavailableError(f"store {self.url}: {op} {key} failed "
                                     f"(injected by {STORE_FAULT_ENV})")

    def _call(self, op: str, key: str, fn: Callable[..., T], *args: Any) -> T:
        f = self._fault(op, key)
        if f is None:
            return fn(*args)
        if f.when == "after":
            fn(*args)
        raise self._fail(f, op, key)

    def get(self, key: str) -> bytes:
        return self._call("get", key, self.inner.get, key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self._call("get_range", key, self.inner.get_range, key, offset, length)

    def where(self) -> str:
        return self.inner.where()

    def local_path(self, key: str) -> str | None:
        # reads in place would bypass get_range: refuse them where a read may fail
        if any(f.ops & _READS and fnmatchcase(key, f.key) for f in self.faults):
            return None
        return self.inner.local_path(key)

    def download(self, key: str, dest_path: str) -> int:
        return self._call("download", key, self.inner.download, key, dest_path)

    def put(self, key: str, data: bytes) -> None:
        self._call("put", key, self.inner.put, key, data)

    def upload(self, key: str, src_path: str) -> None:
        self._call("upload", key, self.inner.upload, key, src_path)

    def take_file(self, key: str, src_path: str) -> None:
        self._call("upload", key, self.inner.take_file, key, src_path)

    def scratch_file(self, prefix: str):
        return self.inner.scratch_file(prefix)

    def upload_stream(self, key: str, reader, size: int) -> None:
        self._call("upload", key, self.inner.upload_stream, key, reader, size)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._call("put_if_absent", key, self.inner.put_if_absent, key, data)

    def put_file_if_absent(self, key: str, src_path: str) -> bool:
        return self._call("put_file_if_absent", key, self.inner.put_file_if_absent, key, src_path)

    def read_versioned(self, key: str) -> tuple[bytes, str]:
        return self._call("read_versioned", key, self.inner.read_versioned, key)

    def compare_and_swap(self, key: str, expected_version: str | None, data: bytes | None) -> str | None:
        return self._call("cas", key, self.inner.compare_and_swap, key, expected_version, data)

    def delete(self, key: str) -> None:
        self._call("delete", key, self.inner.delete, key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[str]:
        f = self._fault("list", prefix)
        if f is not None:
            raise self._fail(f, "list", prefix)
        return self.inner.list(prefix, start_after)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        f = self._fault("list", prefix)
        if f is not None:
            raise self._fail(f, "list", prefix)
        return self.inner.list_dirs(prefix)

    def size(self, key: str) -> int | None:
        return self._call("size", key, self.inner.size, key)

    def stat(self, key: str):
        return self._call("stat", key, self.inner.stat, key)

    def list_info(self, prefix: str = ""):
        f = self._fault("list", prefix)
        if f is not None:
            raise self._fail(f, "list", prefix)
        return self.inner.list_info(prefix)

    def touch(self, key: str) -> bool:
        return self._call("touch", key, self.inner.touch, key)

    def delete_many(self, keys: list[str]) -> int:
        return self._call("delete_many", keys[0] if keys else "", self.inner.delete_many, keys)

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, {len(self.faults)} rule(s))"


def faulty_from_env(store: ObjectStore) -> ObjectStore:
    """``store`` wrapped by the rules of ``GRAVFS_STORE_FAULT`` (itself when unset)."""
    spec = os.environ.get(STORE_FAULT_ENV)
    if not spec:
        return store
    log.info("store faults injected into %s: %s", store.url, spec)
    return FaultyStore(store, parse_store_faults(spec))
