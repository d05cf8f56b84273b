"""Branch heads and tags, kept on the object store and moved by compare-and-swap.

Branch files hold a commit id; they change only through the store's
compare_and_swap, so concurrent writers (mounts, hosts, Spark jobs) never lose
an update silently. Tags are create-once.
"""

from __future__ import annotations

import logging
from typing import Iterator, Optional

from gravfs.errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from gravfs.version.refs.names import check_ref_name

log = logging.getLogger(__name__)

BRANCHES = "_gravfs/refs/branches/"
TAGS = "_gravfs/refs/tags/"


class Heads:
    def __init__(self, store):
        self.store = store

    # -- branches ----------------------------------------------------------------

    def branch(self, name: str) -> tuple[str, str]:
        """(commit id, version token) of a branch head; NotFoundError if absent."""
        try:
            raw, version = self.store.read_versioned(BRANCHES + name)
        except NotFoundError:
            raise NotFoundError(f"branch {name!r} not found") from None
        return raw.decode().strip(), version

    def branch_or_none(self, name: str) -> Optional[str]:
        try:
            return self.branch(name)[0]
        except NotFoundError:
            return None

    def create_branch(self, name: str, commit_id: str) -> None:
        check_ref_name(name, "branch")
        try:
            self.store.compare_and_swap(BRANCHES + name, None, (commit_id + "\n").encode())
        except PreconditionFailedError:
            raise AlreadyExistsError(f"branch {name!r} already exists") from None
        log.info("created branch %s at %s", name, commit_id[:12])

    def move_branch(self, name: str, expected_version: str, commit_id: str) -> str:
        """CAS the head; PreconditionFailedError if it moved since expected_version."""
        v = self.store.compare_and_swap(BRANCHES + name, expected_version,
                                        (commit_id + "\n").encode())
        log.info("branch %s -> %s", name, commit_id[:12])
        return v

    def delete_branch(self, name: str) -> None:
        _, version = self.branch(name)
        self.store.compare_and_swap(BRANCHES + name, version, None)
        log.info("deleted branch %s", name)

    def branches(self) -> Iterator[tuple[str, str]]:
        for key in self.store.list(BRANCHES):
            name = key[len(BRANCHES):]
            cid = self.branch_or_none(name)
            if cid:
                yield name, cid

    # -- tags -------------------------------------------------------------------

    def tag(self, name: str) -> Optional[str]:
        try:
            return self.store.get(TAGS + name).decode().strip()
        except NotFoundError:
            return None

    def create_tag(self, name: str, commit_id: str) -> None:
        check_ref_name(name, "tag")
        if not self.store.put_if_absent(TAGS + name, (commit_id + "\n").encode()):
            raise AlreadyExistsError(f"tag {name!r} already exists")
        log.info("created tag %s at %s", name, commit_id[:12])

    def delete_tag(self, name: str) -> None:
        if self.tag(name) is None:
            raise NotFoundError(f"tag {name!r} not found")
        self.store.delete(TAGS + name)
        log.info("deleted tag %s", name)

    def tags(self) -> Iterator[tuple[str, str]]:
        for key in self.store.list(TAGS):
            name = key[len(TAGS):]
            cid = self.tag(name)
            if cid:
                yield name, cid
