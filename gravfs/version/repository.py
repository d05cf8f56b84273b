"""The version layer's repository: refs, commits, staging and the commit protocol
of one repository on one store, seen from one workspace.

Values are opaque here (encoded records of identity and data under byte keys):
gravfs.fs.repository builds the catalog of files on it. Branches read as
staging over their head commit; commits and tags are immutable. Anything that
changes a branch head goes through the committer (compare-and-swap on the
store), so many workspaces can share a store.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, TypeVar

from gravfs import hashing
from gravfs.errors import (AlreadyExistsError, AmbiguousRefError, BadNameError,
                           CorruptDataError, GravfsError, NotFoundError, ReadOnlyError,
                           StoreUnavailableError, TreeGoneError)
from gravfs.quoting import quote
from gravfs.waits import may_wait
from gravfs.store import open_store
from gravfs.store.tier import LocalTier
from gravfs.version.committed.manager import EMPTY_METARANGE_ID, CommittedManager
from gravfs.version.committer import Committer
from gravfs.version.compaction import CompactionPolicy, compact
from gravfs.version.config import REPO_JSON, RepoSettings, Workspace, default_state_dir
from gravfs.version.history import change_parent, dir_changes, path_changes, walk
from gravfs.version.outage import StoreOutage
from gravfs.version.refs import casprobe
from gravfs.version.refs.commits import Commit, CommitStore
from gravfs.version.refs.heads import Heads
from gravfs.version.refs.names import check_ref_name
from gravfs.version.retention import ExpiredCommitError, check_not_expired
from gravfs.version.staging.area import StagingArea
from gravfs.version.staging.branchview import BranchLayers, branch_layers, committed_layers

log = logging.getLogger(__name__)
T = TypeVar("T")

_ANCESTRY = re.compile(r"^(.*?)((?:[~^]\d*)+)$")  # REF~N, REF^, REF^N, chained
DEFAULT_TIER_BYTES = 10 << 30
CONDITIONS_FILE = "conditions-held"  # endpoints seen honouring conditional writes (casprobe)
# While the store cannot be reached, a repository with a head cache (the mount)
# reads each branch at the head it read last, and asks the store again at most
# this often (an unreachable endpoint may take its whole timeout to fail).
HEAD_RETRY = 5.0


@dataclass(frozen=True)
class RefTarget:
    """A resolved ref: the commit, and the branch name when it is a branch."""

    commit: Commit
    branch: Optional[str] = None

    def __str__(self) -> str:
        return self.branch or self.commit.id[:12]


def _no_repository(url: str, state_dir: Optional[str]) -> GravfsError:
    """No repository at url: never made (run init), or gone from where this host's
    workspace saw it (moved, deleted, a disk not mounted), where init would make a new,
    empty one under the old staging."""
    ws = Workspace.find(state_dir or default_state_dir(), url)
    if ws is None:
        return NotFoundError(f"no gravfs repository at {url} (run 'gravfs init')")
    return StoreUnavailableError(
        f"no gravfs repository at {url}, where this host had one (its workspace {ws.root} "
        "is kept): was the store moved or deleted, or is the disk it is on not mounted? "
        "Make it reachable again; 'gravfs init' would start a new, empty repository")


class VersionRepository:
    def __init__(self, store, state_dir: Optional[str] = None,
                 tier_bytes: int = DEFAULT_TIER_BYTES, head_ttl: float = 0.0,
                 staging_sync: bool = True, show_key: Callable[[bytes], str] = quote):
        """``staging_sync=False`` (the mount daemon): LMDB commits skip fsync; the
        caller syncs (``self.staging.sync()``) on fsync and periodically.
        ``show_key`` prints keys in messages (conflicts)."""
        self.store = store
        try:
            raw = store.get(REPO_JSON)
        except NotFoundError:
            raise _no_repository(store.url, state_dir) from None
        self.settings = RepoSettings.from_json(raw)
        self.workspace = Workspace.for_store(state_dir or default_state_dir(), store.url)
        self.workspace.claim(hashing.hexdigest(raw)[:32], store.url)  # (repo.json never changes)
        self.tier = LocalTier(store, self.workspace.cache, tier_bytes)
        self.committed = CommittedManager(store, self.tier, self.settings.ranges.policy(),
                                          compression=self.settings.compression,
                                          tmp_dir=self.workspace.sub("sst-tmp"), show_key=show_key)
        self.commits = CommitStore(store)
        self.heads = Heads(store, before_write=self._check_conditions)
        self._conditions_checked = store.conditions_are_own
        self.staging = StagingArea(self.workspace.staging, sync=staging_sync)
        self.head_ttl = head_ttl
        self.compaction: Optional[CompactionPolicy] = CompactionPolicy()
        self._heads_cache: dict[str, tuple[float, str]] = {}
        # the last head read of each branch (kept through cache clears and deletions) and
        # the branches a read found moved since: see take_moved_heads
        self._heads_read: dict[str, str] = {}
        self._heads_moved: set[str] = set()
        self._outage = StoreOutage(HEAD_RETRY)  # while the store fails: heads as last read
        self._lock = threading.Lock()

    # -- opening ------------------------------------------------------------------

    @classmethod
    def open(cls, target, state_dir: Optional[str] = None, **kw) -> "VersionRepository":
        """Open the repository on a store URL or ObjectStore."""
        return cls(open_store(target) if isinstance(target, str) else target, state_dir, **kw)

    @classmethod
    def init(cls, target, state_dir: Optional[str] = None,
             settings: Optional[RepoSettings] = None, **kw) -> "VersionRepository":
        """Create a repository on a store URL or ObjectStore: settings, an empty root
        commit, and the default branch."""
        store = open_store(target) if isinstance(target, str) else target
        settings = settings or RepoSettings.new()
        Workspace.prepare(state_dir or default_state_dir(), store.url)  # before any write
        # (a probe key an init that failed midway left is no one else's file)
        first = next((k for k in store.list("") if not k.startswith(casprobe.PROBES)), None)
        if first is not None and not store.exists(REPO_JSON):
            # gravfs owns what it finds under data/ and _gravfs/: garbage collection
            # would delete another program's files there
            raise GravfsError(f"{store.url} is not empty (it holds {first}): a repository "
                              "needs a directory or S3 prefix of its own")
        casprobe.check_conditional_writes(store)  # before the first conditional write
        if not store.put_if_absent(REPO_JSON, settings.to_json()):
            repo = cls(store, state_dir, **kw)
            if next(repo.heads.branches([]), None) is None and next(repo.heads.tags([]), None) is None:
                # settings and no ref: an init that stopped there (the store failed)
                log.warning("finishing the repository an earlier init left at %s without "
                            "its first branch", store.url)
                repo._first_branch()
                return repo
            repo.close()
            raise AlreadyExistsError(f"a gravfs repository already exists at {store.url}")
        aside = Workspace.set_aside(state_dir or default_state_dir(), store.url)
        if aside is not None:
            log.warning("this host's workspace for %s held an earlier repository's state "
                        "there (staged changes, cache); it is kept as %s", store.url, aside)
        repo = cls(store, state_dir, **kw)
        repo._conditions_held()
        repo._first_branch()
        log.info("initialized repository at %s", store.url)
        return repo

    def _check_conditions(self) -> None:
        """Before this host first writes a ref through this endpoint: that the store
        honours conditional writes (casprobe); remembered in the workspace."""
        if self._conditions_checked:
            return
        path = os.path.join(self.workspace.root, CONDITIONS_FILE)
        try:
            with open(path) as f:
                known = f.read().splitlines()
        except OSError:
            known = []
        if self.store.where() not in known:
            casprobe.check_conditional_writes(self.store)
            self._conditions_held()
        self._conditions_checked = True

    def _conditions_held(self) -> None:
        """Record that this endpoint honoured the conditions (checked just now)."""
        self._conditions_checked = True
        if self.store.conditions_are_own:
            return
        try:  # one short append: whole, whoever else appends
            fd = os.open(os.path.join(self.workspace.root, CONDITIONS_FILE),
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, (self.store.where() + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:  # checked again next time
            log.debug("conditional writes of %s not recorded: %s", self.store.url, exc)

    def _first_branch(self) -> None:
        """The root commit and the default branch (once: a concurrent init may win)."""
        root = self.commits.put(Commit(EMPTY_METARANGE_ID, (), "Repository created",
                                       default_author(), time.time_ns(), 0, {}))
        try:
            self.heads.create_branch(self.settings.default_branch, root.id)
        except AlreadyExistsError:
            pass

    def close(self) -> None:
        self.committed.close()
        self.staging.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- refs ---------------------------------------------------------------------

    def head(self, branch: str, fresh: bool = False) -> str:
        """Head commit id of a branch (cached for head_ttl seconds). With a head cache,
        while the store cannot be reached, the head read last (unless ``fresh``):
        the branch stays readable and writable in the workspace, as it was when the
        store last answered; commits wait for the store (see gravfs.version.outage)."""
        now = time.monotonic()
        hit = self._heads_cache.get(branch) if self.head_ttl > 0 else None
        if not fresh and hit and (now - hit[0] < self.head_ttl or not self._outage.may_ask()):
            return hit[1]
        may_wait(f"head of {branch}")
        try:
            cid = self._ask_store(self.heads.branch, branch)[0]
        except StoreUnavailableError:
            if fresh or not hit:
                raise
            return hit[1]
        except NotFoundError:  # deleted: no write may go on from the cached head
            self._heads_cache.pop(branch, None)
            raise
        self._heads_cache[branch] = (now, cid)
        last = self._heads_read.get(branch)
        if last != cid:
            if last is not None:
                self._heads_moved.add(branch)
            self._heads_read[branch] = cid
        return cid

    def take_moved_heads(self) -> set[str]:
        """Branches whose head moved between two reads of it in this process since the
        last call. A cache built on the first read (the mount's kernel caches) must hear
        of a move that happened before its watcher's first look: that look's read alone
        sees only the new head."""
        moved: set[str] = set()
        while True:  # pop, not swap: a read on another thread may be adding right now
            try:
                moved.add(self._heads_moved.pop())
            except KeyError:
                return moved

    def _ask_store(self, read: Callable[[str], T], name: str) -> T:
        """read(name) of a ref, telling the outage tracker how the store did."""
        sent = time.monotonic()
        try:
            got = read(name)
        except StoreUnavailableError as exc:
            if self.head_ttl > 0:
                self._outage.failed(exc, sent)
            raise
        except NotFoundError:
            self._outage.answered()
            raise
        except BaseException:
            self._outage.gave_up()
            raise
        self._outage.answered()
        return got

    def forget_head(self, branch: str) -> None:
        self._heads_cache.pop(branch, None)

    def resolve(self, ref: str) -> RefTarget:
        """Branch, tag, commit id or unique prefix, each optionally followed by ~N (N first
        parents back), ^ (the first parent) or ^N (the N-th parent; ^0 the commit), as
        in git, chained."""
        m = _ANCESTRY.match(ref)
        whole = ref
        if m:
            ref = m.group(1)
        target = self._resolve_plain(ref)
        if not m:
            return target
        c = target.commit
        walked = 0  # first parents from ref, while only ~ and ^ were taken
        for op, num in re.findall(r"([~^])(\d*)", m.group(2)):
            n = int(num) if num else 1
            if op == "^" and n != 1:
                if n == 0:
                    continue
                if len(c.parents) < n:
                    raise NotFoundError(f"{whole}: commit {c.id[:12]} has "
                                        f"{len(c.parents)} parent(s), not {n}")
                c = self.commits.get(c.parents[n - 1])
                walked = None
                continue
            for _ in range(n):
                if not c.parents:
                    if walked is None:
                        raise NotFoundError(f"{whole}: commit {c.id[:12]} has no parent")
                    # ~N follows first parents: walked + 1 commits on that line
                    raise NotFoundError(f"{whole}: history of {ref} has only {walked + 1} "
                                        f"commit{'s' if walked else ''}")
                c = self.commits.get(c.parents[0])
                if walked is not None:
                    walked += 1
        return RefTarget(c)

    def _resolve_plain(self, ref: str) -> RefTarget:
        if not ref:
            raise BadNameError("empty ref")
        cid = None
        if hashing.is_hex_id(ref, min_len=2 * hashing.DIGEST_SIZE) and self.commits.exists(ref):
            return RefTarget(self.commits.get(ref))  # a whole id: never a ref of that name
        if "/" not in ref:
            try:
                head = self.head(ref)
            except NotFoundError:
                pass
            else:  # a head whose commit is missing says so, not "ref not found"
                return RefTarget(self.commits.get(head), ref)
            cid = self.heads.tag(ref)
        if cid is None and hashing.is_hex_id(ref):
            cid = self.commits.expand(ref)
        if cid is None:
            raise NotFoundError(f"ref {ref!r} not found (not a branch, tag or commit id)")
        return RefTarget(self.commits.get(cid))

    def branch_exists(self, name: str) -> bool:
        """Whether the branch exists (with a head cache, while the store cannot be
        reached: whether its head was read, as ``head`` answers then)."""
        known = self.head_ttl > 0 and name in self._heads_cache
        if known and not self._outage.may_ask():
            return True
        try:
            return self._ask_store(self.heads.branch_or_none, name) is not None
        except StoreUnavailableError:
            if not known:
                raise
            return True

    def create_branch(self, name: str, from_ref: Optional[str] = None) -> Commit:
        check_ref_name(name, "branch")
        self._check_hides_no_ref(name, "branch")
        source = self._resolve_fresh(from_ref or self.settings.default_branch).commit
        self._ref_unexpired(source, lambda: self.heads.create_branch(name, source.id),
                            lambda: self.heads.delete_branch(name))
        self.forget_head(name)
        self._start_unstaged(name)
        return source

    def _start_unstaged(self, name: str) -> None:
        """A new branch starts with nothing staged: what this host staged on an earlier
        branch of that name (deleted on another host) goes."""
        self.staging.write(lambda txn: self.staging.drop_branch(txn, name))

    def _check_hides_no_ref(self, name: str, kind: str) -> None:
        """A ref is named by a branch first, then a tag, then a commit id prefix
        (_resolve_plain): a new name that another ref already answers to would make a
        tag unreachable, or turn every later use of a tag or commit prefix into the
        branch (a pipeline pinned to tag v2 would read a moving branch)."""
        if kind == "branch" and self.heads.tag(name) is not None:
            raise AlreadyExistsError(f"a tag named {name!r} exists: a branch of that name "
                                     "would take its place wherever a ref is named")
        if kind == "tag" and self.heads.branch_or_none(name) is not None:
            raise AlreadyExistsError(f"a branch named {name!r} exists: refs name the branch "
                                     "first, so a tag of that name could not be named")
        if hashing.is_hex_id(name):
            try:
                cid = self.commits.expand(name)
            except AmbiguousRefError:
                cid = name
            if cid is not None:
                raise AlreadyExistsError(f"{name!r} starts the id of commit {cid[:12]}: a {kind} "
                                         "of that name would take its place wherever a ref is named")

    def _resolve_fresh(self, ref: str) -> RefTarget:
        """resolve() past the head cache: a new ref starts where its source is now,
        not where this process last looked (another process may just have committed)."""
        self._heads_cache.clear()
        return self.resolve(ref)

    def delete_branch(self, name: str, force: bool = False) -> None:
        """Refused while this host stages uncommitted changes to the branch, unless
        ``force``: its commits stay readable by id until collected, its staging
        would be gone at once."""
        if name == self.settings.default_branch:
            raise GravfsError(f"refusing to delete the default branch {name!r}")
        if not force:
            try:
                changed = Committer(self).has_changes(name)
            except (CorruptDataError, TreeGoneError) as exc:  # a damaged head: no status
                raise GravfsError(f"branch {name!r} has changes staged on this host that "
                                  f"cannot be compared with its head ({exc}): delete with "
                                  "--force, which drops them") from exc
            if changed:
                raise GravfsError(f"branch {name!r} has uncommitted changes on this host "
                                  f"('gravfs status {name}'): commit them or reset them "
                                  "first, or delete with --force, which drops them")
        self.heads.delete_branch(name)
        self.staging.write(lambda txn: self.staging.drop_branch(txn, name))
        self.forget_head(name)

    def list_branches(self, damaged: Optional[list[str]] = None) -> list[tuple[str, str]]:
        """(name, head) sorted; a damaged head raises, or with ``damaged`` is listed
        there (see Heads.branches)."""
        return sorted(self.heads.branches(damaged))

    def create_tag(self, name: str, ref: str) -> Commit:
        check_ref_name(name, "tag")
        self._check_hides_no_ref(name, "tag")
        c = self._resolve_fresh(ref).commit
        self._ref_unexpired(c, lambda: self.heads.create_tag(name, c.id),
                            lambda: self.heads.delete_tag(name))
        return c

    def _ref_unexpired(self, c: Commit, create: Callable[[], None],
                       undo: Callable[[], None]) -> None:
        """``create`` a ref at ``c`` unless garbage collection expired ``c``, checked
        again once it is made (a sweep that started meanwhile): then ``undo``."""
        check_not_expired(self.store, c)
        create()
        try:
            check_not_expired(self.store, c)
        except ExpiredCommitError:
            undo()
            raise

    def delete_tag(self, name: str) -> None:
        self.heads.delete_tag(name)

    def list_tags(self, damaged: Optional[list[str]] = None) -> list[tuple[str, str]]:
        return sorted(self.heads.tags(damaged))

    def log(self, ref: str, limit: Optional[int] = None) -> Iterator[Commit]:
        return walk(self.commits, [self.resolve(ref).commit.id], limit)

    def path_history(self, ref: str, key: bytes, limit: Optional[int] = None,
                     seen: Optional[Callable[[], None]] = None,
                     ends: Optional[list[Commit]] = None) -> Iterator[tuple[Commit, str]]:
        """(commit, added|modified|removed) of ref's history that changed the entry at
        ``key``, newest first: one lookup in each commit's tree (the provenance index
        answers without them); ``seen()`` is called after each (progress). ``ends``:
        see history.path_changes."""
        return path_changes(self.commits, self.resolve(ref).commit.id,
                            self.entry_identity(key, seen), limit, ends)

    def dir_history(self, ref: str, key: bytes, limit: Optional[int] = None,
                    seen: Optional[Callable[[], None]] = None,
                    ends: Optional[list[Commit]] = None) -> Iterator[tuple[Commit, str]]:
        """(commit, added|modified|removed) of ref's history that changed anything under
        the directory ``key``: a diff with each parent limited to it (equal ranges
        skipped, so a commit costs the change there); ``seen()`` after each commit;
        ``ends``: see history.dir_changes."""
        prefix = key + b"/"

        def differs(left: str, right: str) -> bool:
            return any(True for _ in self.committed.diff(left, right, [key]))

        def holds(mr: str) -> bool:
            if seen is not None:
                seen()
            return any(rec.key.startswith(prefix) for rec in
                       itertools.islice(self.committed.iter(mr, prefix), 1))
        return dir_changes(self.commits, self.resolve(ref).commit.id, differs, holds, limit,
                           ends)

    def entry_identity(self, key: bytes, seen: Optional[Callable[[], None]] = None
                       ) -> Callable[[Commit], Optional[bytes]]:
        """commit -> identity of its committed entry at ``key`` (None: none there)."""
        def identity(c: Commit) -> Optional[bytes]:
            rec = self.committed.get(c.metarange, key)
            if seen is not None:
                seen()
            return rec.identity if rec is not None else None
        return identity

    # -- reading ------------------------------------------------------------------

    def layers(self, ref: "str | RefTarget", txn=None) -> BranchLayers:
        """Read layers of a ref. For branches the caller must hold ``txn`` (LMDB read).

        ``ref`` may be an already resolved RefTarget (the mount pins commit trees
        this way, so reading them costs no ref lookups on the store).
        """
        target = ref if isinstance(ref, RefTarget) else self.resolve(ref)
        if target.branch is None:
            return committed_layers(self.committed, target.commit.metarange)
        if txn is None:
            raise GravfsError("internal: reading a branch needs a staging transaction")
        st = self.staging.state(txn, target.branch)
        if self.head_ttl > 0 and st.base and st.base != target.commit.id:
            target = self._recheck_head(target, st.base)
        mr = target.commit.metarange
        if st.compacted:
            mr = st.compacted["metarange"]
        return branch_layers(self.staging, txn, self.committed, target.branch, mr, st)

    def _recheck_head(self, target: RefTarget, base: str) -> RefTarget:
        """With a head cache (head_ttl > 0): staging based on a commit at least as new
        as the cached head means a commit of this workspace landed since the cache was
        filled (its tokens may be gone already), so read the head again."""
        try:
            stale = self.commits.get(base).generation >= target.commit.generation
        except NotFoundError:
            stale = True
        if not stale:
            return target  # another host moved the head past our base: the cache is newer
        return RefTarget(self.commits.get(self.head(target.branch, fresh=True)), target.branch)

    # -- writing ------------------------------------------------------------------

    # what the layers above know of staged values (the committer claims old staging's)
    def staged_objects(self, data: bytes) -> list[str]:
        """Store objects a staged value's data references (values are opaque here)."""
        return []

    def store_staged(self, values: Callable[[], Iterator[bytes]]) -> None:
        """Make sure every object the staged values about to be committed reference is in
        the store (the catalog's mount writes back: its pending uploads). ``values``
        iterates their data."""

    def restore_object(self, key: str) -> bool:
        """Write ``key``, gone from the store, again from a copy on this host; whether
        it did (none here: the layers above keep content)."""
        return False

    def writable_head(self, branch: str, fresh: bool = False) -> str:
        """Head id of a branch we may write (``fresh``: read from the store, not the head
        cache); refuses commits and tags (ReadOnlyError), as every command that writes or
        reads the staging of a branch does."""
        try:
            return self.head(branch, fresh=fresh)
        except NotFoundError:
            if not self._names_a_commit(branch):
                raise
        raise ReadOnlyError(f"{branch!r} is not a branch; commits and tags are read-only")

    def _names_a_commit(self, ref: str) -> bool:
        """Does ``ref`` resolve to a commit (a tag, an id or prefix, main~1)?"""
        try:
            self.resolve(ref)
        except GravfsError:
            return False
        return True

    def stage_values(self, branch: str, items: list[tuple[bytes, Optional[bytes]]],
                     provisional: frozenset = frozenset()) -> int:
        """Stage (key, encoded value) items (None = delete) atomically; the low-level
        write used by all (values: record.encode_value of identity and data).
        ``provisional``: keys staged as provisional puts (read, never committed: see
        gravfs.version.staging.area).

        Returns how many entries were staged. When the branch's staging passes
        the compaction policy's thresholds it is compacted here (synchronously:
        set ``compaction = None`` and call compact() yourself to do it elsewhere).
        """
        base = self.writable_head(branch)
        if self.head_ttl > 0:  # never record a stale cached head as the staging base
            st = self.staging.get_state(branch)
            if st.base and st.base != base:
                base = self._recheck_head(RefTarget(self.commits.get(base), branch), st.base).commit.id
        st = self.staging.put_many(branch, items, base, provisional=provisional)
        if self.compaction is not None and self.compaction.due(st):
            compact(self, branch)
        return len(items)

    def stage_values_cached(self, branch: str, items: list[tuple[bytes, Optional[bytes]]],
                            provisional: frozenset = frozenset()):
        """stage_values() when it needs nothing but the local staging database: the branch
        head is in the head cache and the staged changes are based on it. Returns
        the branch state after the write, or None when that does not hold (nothing
        is staged then: call stage_values()). Never compacts: when ``compaction.due`` the
        state returned says so, and the caller compacts where it may block.

        The mount calls this on its event-loop thread, where a store read or a
        compaction must not happen.
        """
        hit = self._heads_cache.get(branch)
        if self.head_ttl <= 0 or not hit or time.monotonic() - hit[0] >= self.head_ttl:
            return None
        # another base: stage_values() checks whether the cached head is stale
        return self.staging.put_many(branch, items, hit[1], same_base=True,
                                     provisional=provisional)

    # -- committing, diff, merge --------------------------------------------------

    def commit(self, branch: str, message: str, author: Optional[str] = None,
               metadata: Optional[dict] = None, strategy: str = "fail") -> Commit:
        with self._saying_what_a_gone_branch_left(branch):
            self.writable_head(branch)
        c = Committer(self).commit(branch, message, author or default_author(), metadata or {},
                                   strategy)
        self.forget_head(branch)
        return c

    def status(self, branch: str, under: Optional[list[bytes]] = None):
        with self._saying_what_a_gone_branch_left(branch):
            return Committer(self).status(branch, under)

    @contextmanager
    def _saying_what_a_gone_branch_left(self, branch: str) -> Iterator[None]:
        """A bare "branch not found", for a branch another host deleted under this
        host's uncommitted changes, reads as if they were gone: they are not."""
        try:
            yield
        except NotFoundError as exc:
            try:
                left = (self.heads.branch_or_none(branch) is None
                        and not Committer(self).is_clean(branch))
            except GravfsError:
                left = False
            if not left:
                raise
            raise NotFoundError(f"{exc} (deleted, perhaps on another host); this host still "
                                f"holds uncommitted changes staged on it: 'gravfs branch "
                                f"create {branch}' saves their files in lost+found") from None

    def reset(self, branch: str, prefix: Optional[bytes] = None) -> int:
        """Drop the branch's uncommitted changes, or those at and under key ``prefix``."""
        self.writable_head(branch)
        return Committer(self).reset(branch, prefix)

    def diff(self, left: str, right: str, under: Optional[list[bytes]] = None):
        """Changes from left to right (committed trees; staging is not included); with
        ``under``, only at and under those keys."""
        a, b = self.resolve(left).commit, self.resolve(right).commit
        return self.committed.diff(a.metarange, b.metarange, under)

    def merge(self, source: str, dest: str, strategy: str = "fail",
              message: Optional[str] = None, author: Optional[str] = None) -> Commit:
        self.writable_head(dest)
        if source == dest:
            raise GravfsError(f"cannot merge branch {dest!r} into itself")
        taken = self._resolve_fresh(source).commit
        return self._taking([taken], dest, lambda: Committer(self).merge(
            source, dest, strategy, message, author or default_author()))

    def revert(self, branch: str, ref: str, author: Optional[str] = None,
               parent: Optional[int] = None) -> Commit:
        """Commit the inverse of ref's change against its parent number ``parent`` (from
        1; needed for a merge commit, as git's -m and lakeFS's parent number)."""
        self.writable_head(branch)
        target = self._resolve_fresh(ref).commit
        taken = [target, self.commits.get(change_parent(target, parent, "revert"))]
        return self._taking(taken, branch, lambda: Committer(self).revert(
            branch, ref, author or default_author(), parent))

    def cherry_pick(self, branch: str, ref: str, author: Optional[str] = None,
                    parent: Optional[int] = None) -> Commit:
        """Commit ref's change (against its parent, as ``revert``) on ``branch``."""
        self.writable_head(branch)
        target = self._resolve_fresh(ref).commit
        taken = [target, self.commits.get(change_parent(target, parent, "cherry-pick"))]
        return self._taking(taken, branch, lambda: Committer(self).cherry_pick(
            branch, ref, author or default_author(), parent))

    def _taking(self, taken: list[Commit], branch: str, land: Callable[[], Commit]) -> Commit:
        """Land a commit on ``branch`` built from the trees of ``taken`` commits, which
        garbage collection must not have expired (see check_not_expired); a sweep that
        began meanwhile has the new commit undone unless the branch moved on since."""
        for c in taken:
            check_not_expired(self.store, c)
        before = self.heads.branch(branch)[0]
        new = land()
        self.forget_head(branch)
        try:
            for c in taken:
                check_not_expired(self.store, c)
        except ExpiredCommitError:
            head, version = self.heads.branch(branch)
            if head == new.id:
                self.heads.move_branch(branch, version, before)
                self.forget_head(branch)
            raise
        return new


def default_author() -> str:
    """user@host, the default author of commits."""
    import getpass
    import socket
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in containers
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
