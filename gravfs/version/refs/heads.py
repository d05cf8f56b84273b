"""Branch heads and tags, kept on the object store and moved by compare-and-swap.

Branch files hold a commit id; they change only through the store's
compare_and_swap, so concurrent writers (mounts, hosts, Spark jobs) never lose
an update silently. Tags are create-once.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator, Optional

from gravfs import hashing
from gravfs.errors import (AlreadyExistsError, CorruptDataError, NotFoundError,
                           PreconditionFailedError)
from gravfs.version.refs.names import check_ref_name

log = logging.getLogger(__name__)

BRANCHES = "_gravfs/refs/branches/"
TAGS = "_gravfs/refs/tags/"


class Heads:
    def __init__(self, store, before_write: Optional[Callable[[], None]] = None):
        """``before_write``: called before each ref write (the repository checks there,
        once, that the store honours the conditions the writes rely on: casprobe)."""
        self.store = store
        self._before_write = before_write or (lambda: None)

    # -- branches ----------------------------------------------------------------

    def branch(self, name: str) -> tuple[str, str]:
        """(commit id, version token) of a branch head; NotFoundError if absent,
        CorruptDataError if its object holds no commit id."""
        raw, version = self._branch_raw(name)
        return _commit_id(raw, f"branch {name!r}", BRANCHES + name), version

    def _branch_raw(self, name: str) -> tuple[bytes, str]:
        try:
            return self.store.read_versioned(BRANCHES + name)
        except NotFoundError:
            raise NotFoundError(f"branch {name!r} not found") from None

    def branch_or_none(self, name: str) -> Optional[str]:
        try:
            return self.branch(name)[0]
        except NotFoundError:
            return None

    def create_branch(self, name: str, commit_id: str) -> None:
        check_ref_name(name, "branch")
        self._before_write()
        try:
            self.store.compare_and_swap(BRANCHES + name, None, (commit_id + "\n").encode())
        except PreconditionFailedError:
            raise AlreadyExistsError(f"branch {name!r} already exists") from None
        log.info("created branch %s at %s", name, commit_id[:12])

    def move_branch(self, name: str, expected_version: str, commit_id: str) -> str:
        """CAS the head; PreconditionFailedError if it moved since expected_version."""
        self._before_write()
        v = self.store.compare_and_swap(BRANCHES + name, expected_version,
                                        (commit_id + "\n").encode())
        log.info("branch %s -> %s", name, commit_id[:12])
        return v

    def delete_branch(self, name: str) -> None:
        _, version = self._branch_raw(name)  # a damaged head can be deleted too
        self._before_write()
        self.store.compare_and_swap(BRANCHES + name, version, None)
        log.info("deleted branch %s", name)

    def branches(self, damaged: Optional[list[str]] = None) -> Iterator[tuple[str, str]]:
        """(name, head) of every branch. A head that holds no commit id raises
        CorruptDataError (garbage collection must not take it for absent) unless
        ``damaged`` is given: then its error is appended there and it is skipped."""
        for key in self.store.list(BRANCHES):
            name = key[len(BRANCHES):]
            try:
                yield name, self.branch(name)[0]
            except NotFoundError:
                continue  # deleted since the listing
            except CorruptDataError as exc:
                if damaged is None:
                    raise
                damaged.append(str(exc))

    # -- tags -------------------------------------------------------------------

    def tag(self, name: str) -> Optional[str]:
        """A tag's commit id; None if absent, CorruptDataError if it holds none."""
        try:
            raw = self.store.get(TAGS + name)
        except NotFoundError:
            return None
        return _commit_id(raw, f"tag {name!r}", TAGS + name)

    def create_tag(self, name: str, commit_id: str) -> None:
        check_ref_name(name, "tag")
        self._before_write()
        if not self.store.put_if_absent(TAGS + name, (commit_id + "\n").encode()):
            raise AlreadyExistsError(f"tag {name!r} already exists")
        log.info("created tag %s at %s", name, commit_id[:12])

    def delete_tag(self, name: str) -> None:
        if not self.store.exists(TAGS + name):  # a damaged tag can be deleted too
            raise NotFoundError(f"tag {name!r} not found")
        self.store.delete(TAGS + name)
        log.info("deleted tag %s", name)

    def tags(self, damaged: Optional[list[str]] = None) -> Iterator[tuple[str, str]]:
        """(name, commit id) of every tag; a damaged one as in ``branches``."""
        for key in self.store.list(TAGS):
            name = key[len(TAGS):]
            try:
                cid = self.tag(name)
            except CorruptDataError as exc:
                if damaged is None:
                    raise
                damaged.append(str(exc))
                continue
            if cid is not None:
                yield name, cid


def _commit_id(raw: bytes, what: str, key: str) -> str:
    """The commit id a ref object holds; CorruptDataError when it holds anything else
    (an empty or overwritten object must not read as a missing ref)."""
    text = raw.decode("utf-8", "replace").strip()
    if not hashing.is_hex_id(text, min_len=2 * hashing.DIGEST_SIZE):  # a whole id
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise CorruptDataError(f"{what} is damaged: its object {key} holds {shown!r}, "
                               "not a commit id")
    return text
