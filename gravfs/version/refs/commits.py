"""Commit objects: immutable JSON, content-addressed by SHA-256 of its canonical form."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime
from dataclasses import dataclass, field
from typing import Optional

from gravfs import hashing
from gravfs.errors import AmbiguousRefError, CorruptDataError, GravfsError, NotFoundError
from gravfs.waits import may_wait

COMMITS_PREFIX = "_gravfs/commits/"
#: A fixed date for new commits (seconds since the epoch, or ISO 8601), as git's
#: GIT_COMMITTER_DATE: histories dated in the past for tests and migrations.
COMMIT_DATE_ENV = "GRAVFS_COMMIT_DATE"


def commit_time_ns() -> int:
    """The time of a new commit: now, or ``$GRAVFS_COMMIT_DATE``."""
    raw = os.environ.get(COMMIT_DATE_ENV, "").strip()
    if not raw:
        return time.time_ns()
    try:
        return int(float(raw) * 1e9)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise GravfsError(f"{COMMIT_DATE_ENV}={raw!r}: not seconds since the epoch or an "
                          "ISO 8601 date") from None
    return int(when.timestamp() * 1e9)


@dataclass(frozen=True)
class Commit:
    metarange: str
    parents: tuple[str, ...]
    message: str
    author: str
    time_ns: int
    generation: int
    metadata: dict = field(default_factory=dict)
    id: str = ""

    def canonical(self) -> bytes:
        body = {
            "format": 1,
            "metarange": self.metarange,
            "parents": list(self.parents),
            "message": self.message,
            "author": self.author,
            "time_ns": self.time_ns,
            "generation": self.generation,
            "metadata": self.metadata,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def with_id(self) -> "Commit":
        return Commit(self.metarange, tuple(self.parents), self.message, self.author,
                      self.time_ns, self.generation, dict(self.metadata),
                      hashing.hexdigest(self.canonical()))

    @classmethod
    def parse(cls, commit_id: str, raw: bytes) -> "Commit":
        if hashing.hexdigest(raw) != commit_id:
            raise CorruptDataError("commit object does not hash to its id",
                                   path=COMMITS_PREFIX + commit_id)
        try:
            d = json.loads(raw)
            c = cls(d["metarange"], tuple(d["parents"]), d["message"], d["author"],
                    int(d["time_ns"]), int(d["generation"]), dict(d.get("metadata") or {}),
                    commit_id)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptDataError(f"commit object does not parse: {exc}",
                                   path=COMMITS_PREFIX + commit_id) from exc
        return c

    def to_json(self) -> dict:
        return {"id": self.id, "metarange": self.metarange, "parents": list(self.parents),
                "message": self.message, "author": self.author, "time_ns": self.time_ns,
                "generation": self.generation, "metadata": self.metadata}


class CommitStore:
    """Reads and writes commit objects; caches them forever (they are immutable)."""

    def __init__(self, store):
        self.store = store
        self._cache: dict[str, Commit] = {}
        self._lock = threading.Lock()

    def put(self, commit: Commit) -> Commit:
        c = commit.with_id()
        self.store.put_if_absent(COMMITS_PREFIX + c.id, c.canonical())
        with self._lock:
            self._cache[c.id] = c
        return c

    def get(self, commit_id: str) -> Commit:
        c = self._cache.get(commit_id)
        if c is not None:
            return c
        may_wait(f"commit {commit_id}")
        try:
            raw = self.store.get(COMMITS_PREFIX + commit_id)
        except NotFoundError:
            raise NotFoundError(f"commit {commit_id} not found") from None
        c = Commit.parse(commit_id, raw)
        with self._lock:
            self._cache[commit_id] = c
        return c

    def exists(self, commit_id: str) -> bool:
        return commit_id in self._cache or self.store.size(COMMITS_PREFIX + commit_id) is not None

    def expand(self, prefix: str) -> Optional[str]:
        """Full id for a unique prefix (>= 6 hex chars); None if nothing matches."""
        if len(prefix) == 2 * hashing.DIGEST_SIZE:
            return prefix if self.exists(prefix) else None
        found = []
        for key in self.store.list(COMMITS_PREFIX + prefix):
            found.append(key[len(COMMITS_PREFIX):])
            if len(found) > 1:
                raise AmbiguousRefError(f"commit prefix {prefix!r} is ambiguous "
                                        f"({found[0][:12]}, {found[1][:12]}, ...)")
        return found[0] if found else None

    def all_ids(self):
        for key in self.store.list(COMMITS_PREFIX):
            yield key[len(COMMITS_PREFIX):]
