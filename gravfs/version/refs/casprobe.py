"""Whether a store honours the conditions branch heads are moved under.

A head moves by compare-and-swap (a PUT with If-Match, a create with If-None-Match: *,
a DELETE with If-Match). An S3-compatible server that ignores those headers answers
every such request with success: two hosts committing at once would both "win", and one
commit would be lost without a word. A probe key is written under each condition once
(when a repository is made, and before a host first moves a head through another
endpoint) and a server that lets a stale or clashing PUT through is refused. One that
ignores If-Match only on DELETE (AWS honours it since 2025-09; some servers parse it
and do not) is warned of: only a branch deleted while another host commits to it is
at stake, and refusing such a server would leave its users without gravfs.
"""

from __future__ import annotations

import logging
import uuid

from gravfs.errors import GravfsError, PreconditionFailedError

log = logging.getLogger(__name__)

PROBES = "_gravfs/probe/"


class ConditionsIgnoredError(GravfsError):
    """The store let through a write its condition should have refused."""


def check_conditional_writes(store) -> None:
    """Raise ConditionsIgnoredError if ``store`` lets through a write its condition
    should refuse; a store whose conditions are gravfs's own (a local directory) is not
    probed. Leaves no probe key behind unless a request fails midway."""
    if store.conditions_are_own:
        return
    key = f"{PROBES}{uuid.uuid4().hex}"
    ignored = []

    def refused(expected, data) -> bool:
        try:
            store.compare_and_swap(key, expected, data)
        except PreconditionFailedError:
            return True
        return False

    try:
        first = store.compare_and_swap(key, None, b"first")
        if not refused(None, b"clash"):
            ignored.append("If-None-Match: * on a PUT (create only if absent)")
        store.compare_and_swap(key, store.read_versioned(key)[1], b"second")
        if not refused(first, b"stale"):  # the version of "first" is stale now
            ignored.append("If-Match on a PUT (replace only that version)")
        if not refused(first, None):
            log.warning("%s ignores If-Match on a DELETE: a branch deleted while another "
                        "host commits to it loses that commit", store.where())
    finally:
        try:
            store.delete(key)
        except GravfsError as exc:  # (the store failing: what raised first is said)
            log.debug("probe key %s left: %s", key, exc)
    if ignored:
        raise ConditionsIgnoredError(
            f"{store.where()} ignores conditional writes ({'; '.join(ignored)}): gravfs "
            "moves branch heads by compare-and-swap, and there two hosts committing at once "
            "could both move one and lose a commit; use a server that honours If-Match and "
            "If-None-Match (AWS S3 and SeaweedFS do)")
    log.info("%s honours conditional writes", store.where())
