"""Moving branch heads: commit, merge, revert, reset, and status.

Commit protocol (crash-safe at every step):
1. seal the staging token (new writes go to a fresh one);
2. collect the sealed changes (and the compacted metarange, if any);
3. read the head; if it moved since our base, rebase when the change sets do
   not overlap, otherwise raise ConflictError with staging untouched;
4. apply the changes onto the head's metarange, write the commit object,
   record it as ``pending`` in LMDB, then compare-and-swap the head;
5. drop the sealed tokens. A crash before (5) is repaired on the next
   operation: if the pending commit reached the head, its tokens are dropped,
   otherwise they simply stay sealed and are committed next time.

Between (2) and (4) the repository stores what the collected changes reference
(``store_staged``: the catalog uploads the mount's pending objects among them), so
no commit references an object the store lacks; uploads of other branches' or of
since-replaced content are left to the mount's uploader.

Staging older than an hour (``BranchState.since_ns``) is claimed before (4): every
object it references is looked up and refreshed as a deduplicating writer does
(gravfs.store.base), because garbage collection sees only its own host's staging
and, run elsewhere, deletes what was staged here longer than its minimum age ago
and never committed. A data object gone is written again from this host's cache
when it holds a copy; otherwise the commit is refused, naming the files, rather
than landing a tree that references nothing.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from bisect import bisect_left
from contextlib import contextmanager
from operator import itemgetter
from typing import Iterator, Optional

from gravfs.errors import (ConflictError, CorruptDataError, GravfsError, NotFoundError,
                           PathTypeError, PreconditionFailedError)
from gravfs.faults import crash_point
from gravfs.keyrange import outermost
from gravfs.store.base import REFRESH_AGE
from gravfs.version import collisions
from gravfs.version.committed.manager import EMPTY_METARANGE_ID
from gravfs.version.committed.reader import METARANGES_PREFIX, RANGES_PREFIX
from gravfs.version.committed.record import decode_identity, decode_value, encode_value
from gravfs.version.committed.results import Change
from gravfs.version.history import change_parent, is_ancestor, merge_base
from gravfs.version.refs.commits import Commit, commit_time_ns
from gravfs.version.committed.sources import SlicedChanges
from gravfs.version.staging import feed, view
from gravfs.version.staging.feed import CHUNK
from gravfs.version.strategies import COMMIT_STRATEGIES, MERGE_STRATEGIES
from gravfs.version.staging.area import TOMBSTONE, BranchState, new_token, put_raw

log = logging.getLogger(__name__)

CAS_RETRIES = 20


def _resolve(branch: str) -> str:
    """How a commit's conflict is resolved (the end of its error line)."""
    return (f"'gravfs commit {branch} --strategy staged-wins' keeps yours, 'head-wins' the "
            f"head's; 'gravfs reset {branch} -- PATH' drops one of yours")


class StagedContentGoneError(CorruptDataError):
    """Staged changes reference objects no longer in the store (see module doc)."""


class NothingToCommitError(GravfsError):
    exit_code = 1


def diff_as_changes(diffs) -> Iterator[Change]:
    """Turn a committed diff (left -> right) into the changes that produce right."""
    for d in diffs:
        if d.right is None:
            yield Change(d.key, None, b"")
        else:
            yield Change(d.key, d.right[1], d.right[2])


def overlay(older: list[Change], newer: list[Change]) -> list[Change]:
    """Sorted union of two change lists; newer wins on equal keys."""
    if not older:
        return newer
    if not newer:
        return older
    return list(view.merged([view.FuncLayer(lambda s, x=newer: x),
                             view.FuncLayer(lambda s, x=older: x)]))


def _staged_values(changes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value data) of each change that puts an entry (deletions have none)."""
    for c in changes:  # (key, identity, data[, encoded value]); no identity: a deletion
        if c[1] is not None:
            yield c[0], (c[2] if c[2] is not None else decode_value(c[3])[1])


class Committer:
    def __init__(self, repo):
        self.repo = repo
        self.area = repo.staging
        self.committed = repo.committed

    # -- locking ------------------------------------------------------------------

    @contextmanager
    def branch_lock(self, branch: str):
        """Serialize head-moving operations of one branch within this workspace."""
        path = os.path.join(self.repo.workspace.locks, branch.encode().hex() + ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- recovery -------------------------------------------------------------------

    def recover(self, branch: str) -> None:
        """Finish or forget a commit interrupted after its head CAS (see module doc)."""
        st = self.area.get_state(branch)
        if not st.pending:
            return
        pending = st.pending
        head = self.repo.heads.branch_or_none(branch)
        landed = head is not None and (head == pending["commit"] or self._exists_and_ancestor(
            pending["commit"], head))
        log.warning("recovering interrupted commit %s on %s: %s", pending["commit"][:12], branch,
                    "landed" if landed else "did not land")
        self._finish(branch, pending["tokens"], pending.get("compacted"),
                     landed, pending["commit"] if landed else None,
                     staging=pending.get("staging", True))

    def _store_staged(self, changes) -> None:
        """Store what ``changes`` (about to be committed) reference; entries are staged
        after their pending object exists, so after the seal this covers them all."""
        self.repo.store_staged(lambda: (data for _, data in _staged_values(changes)))

    def _exists_and_ancestor(self, cid: str, head: str) -> bool:
        try:
            return is_ancestor(self.repo.commits, cid, head)
        except NotFoundError:
            return False

    def _finish(self, branch: str, tokens: list[str], compacted: Optional[dict], landed: bool,
                new_base: Optional[str], staging: bool = True,
                sealed_ns: Optional[int] = None) -> None:
        """Drop the tokens a landed commit consumed; ``staging``: they were the branch's
        staged changes (not only an import's token), so its staging starts afresh.
        ``sealed_ns``: when the commit sealed them (what was staged since is younger)."""
        def run(txn):
            st = self.area.state(txn, branch)
            if landed:
                self._consume(txn, st, tokens)
                if compacted and st.compacted == compacted:
                    st.compacted = None
                if staging:
                    st.base = new_base
                    st.puts = st.tombstones = 0
                    if not st.sealed and not st.compacted:
                        st.since_ns = (None if self.area.token_is_empty(txn, st.staging)
                                       else sealed_ns or st.since_ns)
            st.pending = None
            self.area.save_state(txn, branch, st)

        self.area.write(run)

    def _consume(self, txn, st: BranchState, tokens: list[str]) -> None:
        """The tokens' changes are in a tree now (a landed commit, a compaction): drop
        them, keeping their provisional entries (never committed) in the live token."""
        self.area.carry_provisional(txn, st, tokens)
        self.area.drop_tokens(txn, tokens, expected=st.puts + st.tombstones)
        st.sealed = [t for t in st.sealed if t not in tokens]

    def settle_unchanged(self, branch: str, st: BranchState, head_id: str,
                         sealed_ns: Optional[int] = None) -> None:
        """The sealed changes (and compacted tree) of ``st`` leave the head as it is:
        drop them as a commit would, or the branch stays "uncommitted" to merge, revert
        and import while commit says there is nothing to commit."""
        self._finish(branch, list(st.sealed), st.compacted, True, head_id, sealed_ns=sealed_ns)

    def settle_compaction(self, branch: str, tokens: list[str], compacted: dict) -> None:
        """Record a compaction (gravfs.version.compaction) of the sealed ``tokens`` into
        ``compacted`` ({"metarange", "base"}): reads use that tree instead, and the
        branch's base moves to the head it was built on."""
        def run(txn):
            st = self.area.state(txn, branch)
            self._consume(txn, st, tokens)
            st.compacted = compacted
            st.base = compacted["base"]
            st.puts = st.tombstones = 0
            self.area.save_state(txn, branch, st)

        self.area.write(run)

    # -- commit -------------------------------------------------------------------

    def seal(self, branch: str) -> BranchState:
        """Seal the branch's staging token (new writes go to a fresh one); the state."""
        def run(txn):
            st = self.area.state(txn, branch)
            if not self.area.token_is_empty(txn, st.staging):
                st.sealed.insert(0, st.staging)
                st.staging = new_token()
            self.area.save_state(txn, branch, st)
            return st

        return self.area.write(run)

    def _token_changes(self, tokens: list[str]) -> SlicedChanges:
        """Changes of the tokens (newest first wins), values kept encoded for apply;
        read by key slices where apply runs on several processes (staging/feed.py)."""
        return feed.staged_changes(self.area, tokens)

    def staged_changes(self, st: BranchState, head: Commit) -> tuple[list[Change] | SlicedChanges, str]:
        """(changes relative to base, base commit id) of sealed tokens + compacted."""
        changes = self._token_changes(st.sealed)
        base = st.base or head.id
        if st.compacted:
            cbase = self.repo.commits.get(st.compacted["base"])
            comp = list(diff_as_changes(self.committed.diff(cbase.metarange,
                                                            st.compacted["metarange"])))
            changes = overlay(comp, changes)
            base = st.compacted["base"]
        return changes, base

    def commit(self, branch: str, message: str, author: str, metadata: dict,
               strategy: str = "fail") -> Commit:
        """``strategy``: what a path both the staging and the head changed since the
        staging's base becomes (COMMIT_STRATEGIES)."""
        if strategy not in COMMIT_STRATEGIES:
            raise GravfsError(f"unknown commit strategy {strategy!r} (one of "
                              f"{', '.join(COMMIT_STRATEGIES)})")
        with self.branch_lock(branch):
            self.recover(branch)
            sealed_ns = time.time_ns()
            st = self.seal(branch)
            crash_point("commit:sealed")
            if st.puts + st.tombstones >= self.committed.parallel_min_records:
                self.committed.start_workers()  # likely a parallel apply (counters: writes)
            head_id, _ = self.repo.heads.branch(branch)
            head = self.repo.commits.get(head_id)
            changes, base = self._staged_changes_of_old(branch, st, head)
            if not changes:  # e.g. a compaction of a file written and removed again
                self.settle_unchanged(branch, st, head.id, sealed_ns)
                raise NothingToCommitError(f"nothing to commit on branch {branch!r}")
            self._store_staged(changes)
            self.claim_if_old(branch, st, changes)

            def build(head: Commit) -> Optional[Commit]:
                mr = self._apply_rebased(base, head, changes, st, strategy, _resolve(branch))
                if mr == head.metarange:
                    return None
                return Commit(mr, (head.id,), message, author, commit_time_ns(),
                              head.generation + 1, dict(metadata))

            try:
                return self._land(branch, st, build, sealed_ns=sealed_ns)
            except NothingToCommitError:
                if strategy != "head-wins":
                    raise
                raise NothingToCommitError(
                    f"nothing to commit on branch {branch!r}: with the head's changes kept "
                    "(head-wins), yours leave it as it is; they are dropped") from None

    def commit_import(self, branch: str, token: str, base: str, message: str, author: str,
                      metadata: dict, include_staged: bool) -> tuple[Commit, int]:
        """Commit an import's own token (gravfs.fs.importer), made against commit ``base``.

        The branch's staged changes stay staged unless ``include_staged``: then they go
        into the same commit (the import wins on equal paths). Returns the commit and
        how many staged changes of the branch it took.
        """
        with self.branch_lock(branch):
            self.recover(branch)
            sealed_ns = time.time_ns()
            st = self.seal(branch) if include_staged else BranchState(staging=new_token())
            head = self.repo.commits.get(self.repo.heads.branch(branch)[0])
            staged, staged_base = self._staged_changes_of_old(branch, st, head)
            imported = self._token_changes([token])
            if not staged and not imported:
                raise NothingToCommitError(f"nothing to commit on branch {branch!r}")
            if staged:  # (an import's own objects are stored as it runs)
                self._store_staged(staged)
                self.claim_if_old(branch, st, staged)

            def build(head: Commit) -> Optional[Commit]:
                mr = self._apply_rebased(staged_base, head, staged, st) if staged else head.metarange
                if base != head.id:
                    self.check_rebase(base, head, imported, still="the import is kept and "
                                      "resumes when the same import is run again")
                mr = self.committed.apply(mr, imported).metarange_id
                if mr == head.metarange:
                    return None
                return Commit(mr, (head.id,), message, author, commit_time_ns(),
                              head.generation + 1, dict(metadata))

            c = self._land(branch, st, build, tokens=[token, *st.sealed], staging=include_staged,
                           sealed_ns=sealed_ns)
            return c, len(staged)

    def _apply_rebased(self, base_id: str, head: Commit, changes: list[Change],
                       st: BranchState, strategy: str = "fail",
                       resolve: Optional[str] = None) -> str:
        if st.compacted and st.compacted["base"] == head.id and base_id == head.id:
            # changes already include the compacted diff; applying the sealed part
            # on the compacted tree is the cheap equivalent.
            return self.committed.apply(st.compacted["metarange"],
                                        self._token_changes(st.sealed)).metarange_id
        if base_id != head.id:
            changes = self.check_rebase(base_id, head, changes, strategy=strategy,
                                        resolve=resolve)
        return self.committed.apply(head.metarange, changes).metarange_id

    def check_rebase(self, base_id: str, head: Commit, changes: list[Change],
                     still: str = "your changes are still staged",
                     strategy: str = "fail", resolve: Optional[str] = None) -> list[Change]:
        """``changes`` to apply on ``head``: a path upstream changed differently is a
        ConflictError (``still`` says what became of the changes, ``resolve`` how to
        choose), or per ``strategy`` (COMMIT_STRATEGIES) ours or left out; a file
        meeting a path under it from the other side is a conflict under every strategy,
        as in merge."""
        base = self.repo.commits.get(base_id)
        ours = {c[0]: c[1] for c in changes}
        conflicts, upstream, theirs = [], [], {}
        for d in self.committed.diff(base.metarange, head.metarange):
            if d.right is not None:
                upstream.append(d.key)
            if d.key in ours and (None if d.right is None else d.right.identity) != ours[d.key]:
                conflicts.append(d.key)
                theirs[d.key] = d.right
        # the same file but for its times on both sides is no conflict: the head keeps
        # its entry, as a merge's destination does
        agreed = self._same_files(changes, theirs) if conflicts else set()
        conflicts = [k for k in conflicts if k not in agreed]
        left_out = agreed | set(conflicts) if strategy == "head-wins" else agreed
        if left_out:
            for k in left_out:
                del ours[k]
            changes = [c for c in changes if c[0] in ours]
        if conflicts and strategy == "head-wins":
            log.info("head-wins: %d staged change(s) to paths the head changed left out",
                     len(conflicts))
        elif conflicts and strategy == "staged-wins":
            log.info("staged-wins: %d staged change(s) replace the head's", len(conflicts))
        elif conflicts:
            names = ", ".join(self.committed.show_key(k) for k in conflicts[:10])
            more = f" and {len(conflicts) - 10} more" if len(conflicts) > 10 else ""
            raise ConflictError(f"branch head moved to {head.id[:12]} and changed the same "
                                f"paths: {names}{more}; {still}"
                                + (f": {resolve}" if resolve else ""), conflicts)
        candidates = collisions.meeting(upstream, ours)
        if candidates:
            on_head = collisions.InTree(self.committed, head.metarange)
            found = collisions.new_collisions(
                candidates, collisions.WithChanges(ours, on_head), on_head,
                collisions.WithChanges(ours, collisions.InTree(self.committed, base.metarange)))
            if found:
                raise ConflictError(
                    f"branch head moved to {head.id[:12]}, and with its changes yours would "
                    f"make a path both a file and a directory: "
                    f"{collisions.describe(found, candidates, self.committed.show_key)}; "
                    f"{still}", found)
        log.info("rebasing %d staged change(s) onto %s", len(changes), head.id[:12])
        return changes

    def _same_files(self, changes: list[Change], theirs: dict) -> set[bytes]:
        """Keys of ``theirs`` (key -> the head's record, None: removed) whose staged
        change is the same file but for its times (the file layer's rule, when set)."""
        same = self.committed.same_change
        if same is None:
            return set()
        agreed = set()
        for c in changes:
            rec = theirs.get(c[0], None)
            if rec is None or c[1] is None:
                continue
            data = c[2] if len(c) < 4 or c[3] is None else decode_value(c[3])[1]
            if same(data, rec.data):
                agreed.add(c[0])
        return agreed

    def _land(self, branch: str, st: BranchState, build, tokens: Optional[list[str]] = None,
              staging: bool = True, sealed_ns: Optional[int] = None) -> Commit:
        """Write build(head)'s commit and move the head to it (retried when the head
        moves); then drop ``tokens`` (default: the sealed ones of ``st``). ``staging``,
        ``sealed_ns``: see _finish."""
        tokens = list(st.sealed) if tokens is None else tokens
        compacted = st.compacted
        for attempt in range(CAS_RETRIES):
            head_id, version = self.repo.heads.branch(branch)
            head = self.repo.commits.get(head_id)
            draft = build(head)
            crash_point("commit:applied")
            if draft is None:
                self._finish(branch, tokens, compacted, True, head.id, staging)
                raise NothingToCommitError(f"nothing to commit on branch {branch!r}: "
                                           "staged changes equal the head")
            c = self.repo.commits.put(draft)
            crash_point("commit:object-written")
            self.area.update_state(branch, lambda s: setattr(
                s, "pending", {"commit": c.id, "tokens": tokens, "compacted": compacted,
                               "staging": staging}))
            crash_point("commit:pending-recorded")
            try:
                self.repo.heads.move_branch(branch, version, c.id)
                crash_point("commit:head-moved")
            except PreconditionFailedError:
                log.info("head of %s moved during commit; retrying (%d)", branch, attempt + 1)
                self.area.update_state(branch, lambda s: setattr(s, "pending", None))
                continue
            self._finish(branch, tokens, compacted, True, c.id, staging, sealed_ns)
            log.info("committed %s on %s", c.id[:12], branch)
            return c
        raise PreconditionFailedError(f"branch {branch!r} kept moving; gave up after "
                                      f"{CAS_RETRIES} attempts (changes are still staged)")

    # -- old staging ---------------------------------------------------------------

    @staticmethod
    def _age_h(st: BranchState) -> Optional[float]:
        """Hours since the oldest staged change, when past REFRESH_AGE (else None)."""
        if st.since_ns is None or time.time_ns() - st.since_ns < REFRESH_AGE * 1e9:
            return None
        return (time.time_ns() - st.since_ns) / 3.6e12

    def _staged_changes_of_old(self, branch: str, st: BranchState, head: Commit):
        """staged_changes(), where a compacted tree that is gone says so when old."""
        try:
            return self.staged_changes(st, head)
        except NotFoundError:
            hours = self._age_h(st)
            if st.compacted and hours is not None:
                raise self._gone(branch, hours, [], True) from None
            raise

    def claim_if_old(self, branch: str, st: BranchState, changes) -> None:
        """Claim what staging older than REFRESH_AGE references (see the module doc);
        StagedContentGoneError, nothing changed, when some of it is gone for good."""
        hours = self._age_h(st)
        if hours is None:
            return
        objects: dict[str, Optional[bytes]] = {}  # object -> a key referencing it
        for key, data in _staged_values(changes):
            for obj in self.repo.staged_objects(data):
                objects.setdefault(obj, key)
        if st.compacted:  # the compacted tree's own ranges (the base's are the base's)
            base = self.repo.commits.get(st.compacted["base"]).metarange
            known = set(self.committed.ranges.metarange(base).ids)
            objects.setdefault(METARANGES_PREFIX + st.compacted["metarange"], None)
            for rid in self.committed.ranges.metarange(st.compacted["metarange"]).ids:
                if rid not in known:
                    objects.setdefault(RANGES_PREFIX + rid, None)
        log.info("staging of %s is %.1f h old: claiming the %d object(s) it references",
                 branch, hours, len(objects))
        t0 = time.monotonic()
        gone = {obj: objects[obj] for obj in self.repo.store.claim_many(objects)
                if not self.repo.restore_object(obj)}
        log.info("claimed %d object(s) of %s's staging in %.1fs; %d gone", len(objects),
                 branch, time.monotonic() - t0, len(gone))
        if gone:
            raise self._gone(branch, hours, sorted({k for k in gone.values() if k is not None}),
                             any(k is None for k in gone.values()))

    def _gone(self, branch: str, hours: float, files: list[bytes],
              tree: bool) -> StagedContentGoneError:
        what = ", ".join(self.committed.show_key(k) for k in files[:10])
        more = f" and {len(files) - 10} more" if len(files) > 10 else ""
        lost = ([f"the content of {len(files)} file(s) ({what}{more})"] if files else []) + \
            (["the tree its staging was compacted into"] if tree else [])
        drop = (f"drop them with 'gravfs reset {branch} PATH'" if not tree
                else f"drop all of it with 'gravfs reset {branch}'")
        return StagedContentGoneError(
            f"nothing committed on {branch}: it was staged {hours:.0f} h ago and never "
            f"committed, and {' and '.join(lost)} is gone from the store (garbage collection "
            "on another host removes what was staged longer than its minimum age ago and "
            f"never committed); write those files again, or {drop}")

    # -- merge / revert ----------------------------------------------------------

    def is_clean(self, branch: str, settle: bool = False) -> bool:
        """True when the branch has nothing staged (imports in progress aside).
        ``settle`` (the caller holds the branch lock): staged changes that leave the head
        as it is (a file written and removed again, which status does not list) are
        dropped first, as a commit would, instead of counting as uncommitted."""
        st = self.area.get_state(branch)
        with self.area.read_txn() as txn:
            if not (st.sealed or st.compacted or not self.area.token_is_empty(txn, st.staging)):
                return True
        if not settle:
            return False
        try:
            if next(self._status_rows(branch), None) is not None:
                return False  # (status is the quick answer; the apply below the sure one)
            st = self.seal(branch)
            head = self.repo.commits.get(self.repo.heads.branch(branch)[0])
            changes, base = self.staged_changes(st, head)
            if changes and self._apply_rebased(base, head, changes, st) != head.metarange:
                return False
        except GravfsError as exc:  # a rebase onto a moved head that conflicts, a gone tree
            log.debug("staging of %s not settled: %s", branch, exc)
            return False
        self.settle_unchanged(branch, st, head.id)
        log.info("dropped staged changes of %s that leave its head as it is", branch)
        return self.is_clean(branch)  # unless a write came meanwhile

    def has_changes(self, branch: str) -> bool:
        """True when status would list something (staged writes that leave the head
        as it is do not count); settles nothing, so no branch lock is needed."""
        return not self.is_clean(branch) and next(self._status_rows(branch), None) is not None

    def _require_clean(self, branch: str, doing: str) -> None:
        if not self.is_clean(branch, settle=True):
            raise GravfsError(f"branch {branch!r} has uncommitted changes; "
                              f"commit or reset them before {doing}")

    def merge(self, source: str, dest: str, strategy: str, message: Optional[str],
              author: str) -> Commit:
        if strategy not in MERGE_STRATEGIES:
            raise GravfsError(f"unknown merge strategy {strategy!r}")
        src = self.repo.resolve(source).commit
        with self.branch_lock(dest):
            self.recover(dest)
            self._require_clean(dest, "merging")
            st = self.area.get_state(dest)

            def build(head: Commit) -> Optional[Commit]:
                base_id = merge_base(self.repo.commits, src.id, head.id)
                if base_id == src.id:
                    raise NothingToCommitError(f"{source} is already merged into {dest}")
                base = self.repo.commits.get(base_id) if base_id else None
                base_mr = base.metarange if base else EMPTY_METARANGE_ID
                res = self.committed.merge(base_mr, src.metarange, head.metarange, strategy)
                self._check_collisions(res, src.metarange, head.metarange,
                                       f"merging {source} into {dest}")
                return Commit(res.metarange_id, (head.id, src.id),
                              message or f"Merge {source} into {dest}", author, commit_time_ns(),
                              max(head.generation, src.generation) + 1,
                              {"merge_strategy": strategy})

            return self._land(dest, st, build)

    def _check_collisions(self, res, source_mr: str, dest_mr: str, what: str) -> None:
        """Raise ConflictError when the merge result ``res`` joins a file of one side
        with a path under it from the other (gravfs.version.collisions). Every key of
        the result that is not a side's own change is in both sides, so such a pair
        is one key of each side's changes: the smaller set is walked."""
        small, big = sorted((res.from_source, res.from_dest), key=len)
        if not small:
            return  # (one side's tree, or one side's changes only: its own layout)
        candidates = collisions.meeting(small, dict.fromkeys(big, True))
        result = collisions.InTree(self.committed, res.metarange_id)
        found = collisions.new_collisions(
            candidates, result, collisions.InTree(self.committed, source_mr),
            collisions.InTree(self.committed, dest_mr))
        if found:
            raise ConflictError(
                f"{what} would make a path both a file and a directory: "
                f"{collisions.describe(found, candidates, self.committed.show_key)}; rename "
                "or remove one of them on either side, commit, and try again", found)

    def revert(self, branch: str, ref: str, author: str, parent_number: Optional[int] = None
               ) -> Commit:
        target = self.repo.resolve(ref).commit
        parent = self.repo.commits.get(change_parent(target, parent_number, "revert"))
        return self._replay(branch, target, target.metarange, parent.metarange, "reverting",
                            f"Revert {target.id[:12]}: {target.message}",
                            {"reverted": target.id}, author)

    def cherry_pick(self, branch: str, ref: str, author: str,
                    parent_number: Optional[int] = None) -> Commit:
        target = self.repo.resolve(ref).commit
        parent = self.repo.commits.get(change_parent(target, parent_number, "cherry-pick"))
        return self._replay(branch, target, parent.metarange, target.metarange, "cherry-picking",
                            f"{target.message}\n\n(cherry picked from commit {target.id})",
                            {"cherry-picked": target.id}, author)

    def _replay(self, branch: str, target: Commit, base: str, source: str, doing: str,
                message: str, metadata: dict, author: str) -> Commit:
        """Commit on ``branch`` the change from tree ``base`` to tree ``source`` (a
        three-way merge into its head: conflicts fail), or fail when it changes nothing."""
        with self.branch_lock(branch):
            self.recover(branch)
            self._require_clean(branch, doing)
            st = self.area.get_state(branch)

            def build(head: Commit) -> Optional[Commit]:
                res = self.committed.merge(base, source, head.metarange, "fail")
                self._check_collisions(res, source, head.metarange, f"{doing} {target.id[:12]}")
                if res.metarange_id == head.metarange:
                    raise GravfsError(f"nothing to commit: {doing} {target.id[:12]} leaves "
                                      f"{branch!r} as it is")
                return Commit(res.metarange_id, (head.id,), message, author, commit_time_ns(),
                              head.generation + 1, metadata)

            return self._land(branch, st, build)

    # -- status / reset -------------------------------------------------------------

    def status(self, branch: str, under: Optional[list[bytes]] = None,
               head_id: Optional[str] = None) -> list[tuple[str, bytes]]:
        """Uncommitted changes as (kind, key), kind in added/changed/removed; with
        ``under``, only those at and under these keys (the changes read from there
        on, not all of them filtered). A chunk of changes at a time is compared with
        the head (CommittedManager.values_at: dense ones by a scan of their range), or
        with the commit ``head_id`` (a deleted branch's: the one its staging began from)."""
        return list(self._status_rows(branch, under, head_id))

    def _status_rows(self, branch: str, under: Optional[list[bytes]] = None,
                     head_id: Optional[str] = None) -> Iterator[tuple[str, bytes]]:
        """status's rows a chunk of changes at a time (the first without the rest)."""
        head = self.repo.commits.get(head_id or self.repo.writable_head(branch))  # (a tag has no changes)
        st = self.area.get_state(branch)
        changes = self._token_changes(st.tokens())
        if st.compacted:
            cbase = self.repo.commits.get(st.compacted["base"])
            comp = list(diff_as_changes(self.committed.diff(cbase.metarange,
                                                            st.compacted["metarange"], under)))
            changes = overlay(comp, changes)
        for chunk in _chunks_under(changes, under):
            values = self.committed.values_at(head.metarange, [c[0] for c in chunk])
            for change, cur in zip(chunk, values):
                key, ident = change[0], change[1]
                if ident is None:
                    if cur is not None:
                        yield "removed", key
                elif cur is None:
                    yield "added", key
                elif (cur[1:33] if cur[0] == 64 and len(cur) > 33  # a 32-byte identity
                      else decode_identity(cur)) != ident:
                    yield "changed", key

    def reset(self, branch: str, key: Optional[bytes] = None) -> int:
        """Drop uncommitted changes of the branch, or only those at and under key
        (its children being the keys under ``key + b"/"``)."""
        self.repo.head(branch)  # the branch must exist
        with self.branch_lock(branch):
            self.recover(branch)
            if not key:
                def run_all(txn):
                    st = self.area.state(txn, branch)
                    n = self.area.drop_tokens(txn, st.tokens())
                    self.area.save_state(txn, branch, BranchState(staging=new_token()))
                    return n

                return self.area.write(run_all)
            head = self.repo.commits.get(self.repo.head(branch))
            self._check_reset_placement(branch, key, head)
            st = self.area.get_state(branch)
            restore: list[Change] = []
            if st.compacted:
                cbase = self.repo.commits.get(st.compacted["base"])
                for d in self.committed.diff(cbase.metarange, st.compacted["metarange"],
                                             [key]):
                    if _under(d.key, key):
                        rec = self.committed.get(head.metarange, d.key)
                        restore.append(Change(d.key, None, b"") if rec is None
                                       else Change(d.key, rec[1], rec[2]))

            def run(txn):
                st = self.area.state(txn, branch)
                n = 0
                for t in st.tokens():
                    doomed = []
                    for k, _ in self.area.iter_token(txn, t, key):
                        if not k.startswith(key):
                            break
                        if _under(k, key):
                            doomed.append(k)
                    for k in doomed:
                        self.area.delete_entry(txn, bytes.fromhex(t), k)
                    n += len(doomed)
                tok = bytes.fromhex(st.staging)
                for k, ident, data, _ in restore:
                    self.area.put_entry(txn, tok, k, TOMBSTONE if ident is None
                                        else put_raw(k, encode_value(ident, data)))
                return n + len(restore)

            return self.area.write(run)

    def _check_reset_placement(self, branch: str, key: bytes, head: Commit) -> None:
        """Refuse a reset of ``key`` that brings the head's entries there back under a
        file staged above it since (the file "a" staged after "a/b" was removed): the
        branch would hold both, and the mount could show only one."""
        at = collisions.InTree(self.committed, head.metarange)
        if not (at.has(key) or at.any_under(key)):
            return  # nothing of the head's comes back
        with self.area.read_txn() as txn:
            lay = self.repo.layers(branch, txn)
            above = collisions.file_above(key, lambda k: not at.has(k) and lay.get(
                k, self.area, txn, self.committed) is not None)
        if above is not None:
            raise PathTypeError(
                f"resetting {self.committed.show_key(key)} would bring it back under the "
                f"file {self.committed.show_key(above)} staged since; reset "
                f"{self.committed.show_key(above)} with it, or remove that file first",
                errno.ENOTDIR)


def _chunks_under(changes: list[Change] | SlicedChanges, under: Optional[list[bytes]]
                  ) -> Iterator[list[Change]]:
    """Sorted changes in chunks; with ``under``, only those at and under these keys,
    each read from its place on and up to the first key past its subtree."""
    if under is None:
        if isinstance(changes, SlicedChanges):
            yield from changes.read(None)
        else:
            yield from (changes[i:i + CHUNK] for i in range(0, len(changes), CHUNK))
        return
    for top in outermost(under):
        past = view.after_subtree(top + b"/")
        if isinstance(changes, SlicedChanges):
            chunks = changes.read(top[:-1] or None)  # every key > top[:-1], top's from there
        else:
            i = bisect_left(changes, top, key=itemgetter(0))
            chunks = (changes[j:j + CHUNK] for j in range(i, len(changes), CHUNK))
        for chunk in chunks:
            got = [c for c in chunk if _under(c[0], top)]
            if got:
                yield got
            if chunk[-1][0] >= past:
                break


def _under(k: bytes, key: bytes) -> bool:
    return k == key or k.startswith(key + b"/") or k == key + b"/"
