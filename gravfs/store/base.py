"""The object-store contract every backend (local directory, S3) fulfils.

Keys are '/'-separated strings relative to the repository root, e.g.
``_gravfs/ranges/<id>`` or ``data/ab/<hash>``. Everything but refs is immutable
and content-addressed, so plain ``put`` is enough for it; refs change only
through ``compare_and_swap``, which is what lets several hosts share one
repository without a database.

A key must not also be a "directory" of other keys (``a`` and ``a/b`` cannot
both exist): neither a local directory nor SeaweedFS's filer can hold both.
"""

from __future__ import annotations

import abc
import heapq
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, NamedTuple

from gravfs.errors import BadNameError
from gravfs.threadmap import ordered_map

log = logging.getLogger(__name__)

#: Names with this prefix are the local store's own temp and lock files; no key
#: component may start with it.
RESERVED_PREFIX = ".gravfs-"

# --- garbage collection's contract with writers (see README, "Garbage collection") ---
#
# GC deletes unreferenced content-addressed objects under these prefixes that are
# older than its mark's start minus a minimum age. A writer that reuses such an
# object instead of writing it (dedup) claims it first (``claim_existing``): an
# object older than REFRESH_AGE gets its last-modified refreshed, and while a
# sweep is running (SWEEP_FENCE exists) the writer waits SWEEP_LEASE and looks
# again, since a sweep deletes only what it listed less than SWEEP_LEASE ago.

#: Content-addressed objects GC may delete; reusing one refreshes it.
COLLECTABLE_PREFIXES = ("data/", "sparse/", "_gravfs/ranges/", "_gravfs/metaranges/")
#: Exists while a GC sweep may be deleting (gravfs.spark.gc writes and removes it).
SWEEP_FENCE = "_gravfs/gc/sweeping"


def fence_holder(body: bytes) -> dict:
    """What a sweep fence says of the run holding it ({} when it does not parse)."""
    try:
        out = json.loads(body)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}
#: A reused object older than this (seconds) is refreshed before it is referenced.
REFRESH_AGE = 3600.0


#: The shortest lease: a sweep sends a batch only within 0.8 of the lease after its
#: listing, so a lease near 0 would have it list again forever and never delete.
MIN_LEASE = 1.0


def sweep_lease() -> float:
    """Seconds a sweep may act on a listing (``GRAVFS_GC_LEASE``, default 30, at least
    MIN_LEASE)."""
    try:
        return max(MIN_LEASE, float(os.environ.get("GRAVFS_GC_LEASE", "") or 30.0))
    except ValueError:
        return 30.0


def is_collectable(key: str) -> bool:
    return key.startswith(COLLECTABLE_PREFIXES)


class ObjectInfo(NamedTuple):
    """A stored object as a listing shows it; ``mtime``: last-modified, seconds since
    the epoch by the store's clock."""

    key: str
    size: int
    mtime: float


def check_key(key: str) -> str:
    """Reject keys that would escape the root or collide with store internals."""
    if not isinstance(key, str) or not key:
        raise BadNameError(f"invalid object key {key!r}: must be a non-empty string")
    if key.startswith("/") or key.endswith("/"):
        raise BadNameError(f"invalid object key {key!r}: no leading or trailing '/'")
    if "\x00" in key:
        raise BadNameError(f"invalid object key {key!r}: NUL byte")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise BadNameError(f"invalid object key {key!r}: empty, '.' or '..' component")
        if part.startswith(RESERVED_PREFIX):
            raise BadNameError(f"invalid object key {key!r}: component starts with {RESERVED_PREFIX!r}")
    return key


class ObjectStore(abc.ABC):
    """A flat key/value object store with conditional writes.

    Implementations are thread-safe: one instance is shared by all threads.
    """

    url: str
    # compare_and_swap's conditions are enforced by gravfs itself (a local directory),
    # not by a server that might ignore them (see gravfs.version.refs.casprobe)
    conditions_are_own = False

    def where(self) -> str:
        """The store as messages name it (an S3 store adds the endpoint it is reached at)."""
        return self.url

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Whole object; NotFoundError when missing."""

    @abc.abstractmethod
    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset``; short (possibly empty) at EOF."""

    def local_path(self, key: str) -> str | None:
        """The file holding ``key`` when the store is a local directory (None: not local).

        Lets readers use the file in place instead of copying it into the tier;
        the file may be missing, like any key.
        """
        return None

    @abc.abstractmethod
    def download(self, key: str, dest_path: str) -> int:
        """Stream the object into ``dest_path`` (written in place) and return its size."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Create or overwrite; readers never see a partial object."""

    @abc.abstractmethod
    def upload(self, key: str, src_path: str) -> None:
        """Stream a local file into the store (multipart for large files on S3)."""

    def take_file(self, key: str, src_path: str) -> None:
        """upload() of a complete scratch file the caller gives up (it may be gone
        afterwards): a local store renames it into place instead of copying it."""
        self.upload(key, src_path)

    def scratch_file(self, prefix: str) -> tuple[int, str] | None:
        """(descriptor, path) of a new scratch file on the store's own file system,
        under ``prefix``, for take_file (a crash leaves it to the temp-file sweep);
        None where the store is not a local directory."""
        return None

    def upload_stream(self, key: str, reader: BinaryIO, size: int) -> None:
        """upload() of ``size`` bytes read once, in order, from ``reader``, which may
        raise to stop the upload: nothing is published then."""
        self.put(key, reader.read())

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create only if missing; True if this call created it."""

    def put_file_if_absent(self, key: str, src_path: str) -> bool:
        """put_if_absent with the bytes of a complete local file (left in place).

        A store may take the file itself instead of copying it (LocalStore
        hard-links it), so the caller must not modify the file afterwards.
        """
        with open(src_path, "rb") as f:
            return self.put_if_absent(key, f.read())

    @abc.abstractmethod
    def read_versioned(self, key: str) -> tuple[bytes, str]:
        """Content plus an opaque version token for ``compare_and_swap``."""

    @abc.abstractmethod
    def compare_and_swap(self, key: str, expected_version: str | None, data: bytes | None) -> str | None:
        """Replace (or delete when ``data`` is None) only if the version is still ``expected_version``.

        ``expected_version`` None means the key must not exist. Returns the new
        version token (None after a delete); PreconditionFailedError otherwise.
        """

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove; a missing key is not an error."""

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[str]:
        """Keys starting with ``prefix`` and greater than ``start_after``, in lexicographic order."""

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """The sub-directories (``prefix + name + '/'``) directly under ``prefix`` (which
        ends with '/'), in no set order, without listing what they hold: on S3 one
        request a thousand, where ``list`` asks one a directory it descends into."""
        for _files, dirs in self._level(prefix, None):
            yield from dirs

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """Size in bytes, None when missing."""

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    # --- metadata, batch delete and reuse (garbage collection) -------------------

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """Size and last-modified of ``key``; None when missing."""

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, with its size and
        last-modified, in no particular order (a listing page at a time)."""
        for key in self.list(prefix):
            info = self.stat(key)
            if info is not None:
                yield info

    @abc.abstractmethod
    def touch(self, key: str) -> bool:
        """Set the object's last-modified to now; False when it is missing."""

    def delete_many(self, keys: list[str]) -> int:
        """Delete ``keys`` (missing ones are not errors) in as few requests as the
        backend allows; returns how many were asked for."""
        for key in keys:
            self.delete(key)
        return len(keys)

    def claim_existing(self, key: str) -> bool:
        """Whether ``key`` is stored and may be referenced anew without writing it
        (dedup), refreshing it as GC's contract says (module notes above); False:
        the caller must write it."""
        info = self.stat(key)
        if info is None:
            return False
        if not is_collectable(key) or time.time() - info.mtime < REFRESH_AGE:
            return True
        if not self.touch(key):
            return False
        started = time.monotonic()
        log.debug("refreshed %s (last modified %.0fs ago) before reusing it", key,
                  time.time() - info.mtime)
        if self.size(SWEEP_FENCE) is None:
            return True
        # a sweep may have listed the object before the touch: it deletes within the
        # lease of its listing, so what still exists after it is safe
        time.sleep(max(0.0, sweep_lease() - (time.monotonic() - started)))
        return self.size(key) is not None

    def claim_many(self, keys: Iterable[str], threads: int = 16) -> set[str]:
        """``claim_existing`` of many keys at once (writers that reference what they
        staged long ago); the keys that are not stored."""
        def claim(key: str) -> tuple[str, bool]:
            return key, self.claim_existing(key)

        with ThreadPoolExecutor(threads) as pool:
            return {k for k, ok in ordered_map(pool, claim, keys, 16 * threads) if not ok}

    def create_claiming(self, key: str, create: Callable[[], bool]) -> bool:
        """``create()`` (a put-if-absent: True when it created ``key``); when the
        object existed already, claim it (``claim_existing``) and create it again
        if it vanished meanwhile (a sweep took it)."""
        for _ in range(3):
            if create():
                return True
            if not is_collectable(key) or self.claim_existing(key):
                return False
        return create()

    def remove_stale_temp_files(self, max_age_s: float = 3600.0) -> int:
        """Delete what writers killed mid-upload left behind; returns how many.
        Object stores whose uploads are atomic leave nothing."""
        return 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


# --- ordered listing over a directory-shaped namespace -------------------------
#
# Both backends are trees: a local directory, and SeaweedFS, whose S3 listing
# walks its filer directories and so returns "a/b" before "a-c" although
# '-' < '/'. Listing one level at a time and ordering a sub-directory "a" by
# "a/" gives true lexicographic order on any backend.

Level = Callable[[str, str | None], Iterable[tuple[list[str], list[str]]]]


def ordered_walk(level: Level, prefix: str, start_after: str | None) -> Iterator[str]:
    """Yield keys under ``prefix`` in lexicographic order.

    ``level(prefix, hint)`` yields pages of (file keys, sub-directory prefixes
    ending in '/') directly under ``prefix`` (which may end mid-name), in the
    backend's name order: either true key order, or bare-name order where a
    directory "a/" is placed as "a". ``hint`` is a key the backend may skip up
    to (everything with a bare name <= hint may be omitted); it is only a
    speed-up, results are filtered here.
    """
    if start_after is not None and start_after < prefix:
        start_after = None
    if start_after is not None and not start_after.startswith(prefix):
        return  # every key under prefix is <= start_after
    yield from _walk_level(level, prefix, start_after)


def _server_hint(prefix: str, start_after: str | None) -> str | None:
    """A start-after bound safe under both backend orders (see ordered_walk)."""
    if start_after is None or not start_after.startswith(prefix):
        return None
    base = prefix[: prefix.rfind("/") + 1]
    comp = start_after[len(base):].split("/", 1)[0]
    # Only names made of characters > '/' keep "a" < "a/" < "a<anything>" simple.
    if not comp or any(ch < "/" for ch in comp):
        return None
    hint = base + comp[:-1]
    return hint if len(hint) > len(base) else None


def _walk_level(level: Level, prefix: str, start_after: str | None) -> Iterator[str]:
    pending: list[tuple[str, bool]] = []  # (sort key, is_dir) min-heap
    bound = ""  # every future entry of this level sorts above this

    def drain(limit: str | None) -> Iterator[str]:
        while pending and (limit is None or pending[0][0] <= limit):
            key, is_dir = heapq.heappop(pending)
            if is_dir:
                yield from _walk_level(level, key, start_after)
            elif start_after is None or key > start_after:
                yield key

    for files, dirs in level(prefix, _server_hint(prefix, start_after)):
        for key in files:
            heapq.heappush(pending, (key, False))
            bound = max(bound, key)
        for d in dirs:
            bare = d[:-1]
            bound = max(bound, bare)
            if start_after is not None and start_after >= d and not start_after.startswith(d):
                continue  # the whole sub-tree is <= start_after
            heapq.heappush(pending, (d, True))
        yield from drain(bound)
    yield from drain(None)
