"""Retention rules and the commits they keep (garbage collection's selection).

The rules live in the repository (``_gravfs/gc/rules.json``) so every host and
job sees the same ones: a default window in days and windows for named
branches. What a rule keeps of a branch:

- its head, always;
- every commit on its **first-parent chain** dated within the window, plus the
  first commit of that chain older than the window (the branch's state when
  the window opened), and nothing further down;
- tags keep their commit (only that commit).

First parents only: a branch's first-parent chain is exactly the sequence of
states the branch itself had (every commit or merge onto a branch has the
branch's previous head as its first parent). A commit reached only through a
merge's second parent was a state of another branch; its own branch's rule
decides it. Walking all parents would let one merge of an old branch keep that
branch's whole dated history under the destination's window.

A commit on the chains of several branches is kept when any of them keeps it,
so the longest window wins. Walks go longest window first and stop at a
commit an earlier walk passed with a window at least as long (the chain below
it is the same chain, already kept as far as this window reaches), so shared
history is read once. Commits are read one at a time and not cached: memory
holds the kept commits' ids and metaranges, never the commit graph.

Runs of the collector record here what ``gravfs fsck`` needs to know about them
(``last_sweep``): the mark's start and the commits it kept.
"""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional

from gravfs.errors import CorruptDataError, GravfsError, NotFoundError
from gravfs.store.base import SWEEP_FENCE, fence_holder
from gravfs.version.committed.manager import EMPTY_METARANGE_ID
from gravfs.version.committed.reader import METARANGES_PREFIX
from gravfs.version.refs.commits import COMMITS_PREFIX, Commit
from gravfs.version.refs.heads import Heads

log = logging.getLogger(__name__)

GC_PREFIX = "_gravfs/gc/"
RULES_KEY = GC_PREFIX + "rules.json"
#: Names the run whose sweep started last ({"run": id}), so that finding it reads one
#: run's records, not every run's (a run a day is hundreds of statuses in a year).
LAST_SWEEP_KEY = GC_PREFIX + "last-sweep.json"
DAY_NS = 86_400 * 10**9
#: Run ids start with their UTC start time (YYYYMMDDTHHMMSSZ-xxxxxx): each run is a
#: directory of that name under _gravfs/gc/.
RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
SWEPT_STATES = ("sweeping", "done")


class RetentionError(GravfsError):
    """A retention rule that cannot be accepted (negative days, unknown branch...)."""

    exit_code = 4


@dataclass(frozen=True)
class RetentionRules:
    default_days: int
    branches: dict[str, int] = field(default_factory=dict)

    def days(self, branch: str) -> int:
        return self.branches.get(branch, self.default_days)

    def to_json(self) -> bytes:
        return json.dumps({"format": 1, "default_days": self.default_days,
                           "branches": dict(sorted(self.branches.items()))},
                          indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "RetentionRules":
        try:
            d = json.loads(raw)
            rules = cls(int(d["default_days"]), {str(k): int(v) for k, v in d["branches"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise GravfsError(f"retention rules {RULES_KEY} do not parse: {exc}") from None
        return rules


def parse_days(raw: str, what: str) -> int:
    """A whole number of days >= 0 (one clear error otherwise)."""
    try:
        days = int(raw)
    except (TypeError, ValueError):
        raise RetentionError(f"{what}: {raw!r} is not a whole number of days") from None
    if days < 0:
        raise RetentionError(f"{what}: {days} days is negative (0 keeps only what heads and "
                             "tags reference)")
    return days


def parse_branch_rules(items: Iterable[str]) -> dict[str, int]:
    """``NAME=DAYS`` items (as given to --branch) -> {name: days}."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, days = item.partition("=")
        if not sep or not name:
            raise RetentionError(f"--branch needs NAME=DAYS, got {item!r}")
        if name in out:  # the last would win without a word
            raise RetentionError(f"--branch {name} given twice: give each branch once")
        out[name] = parse_days(days, f"--branch {name}")
    return out


def make_rules(default_days: int, branches: dict[str, int], known: Iterable[str]) -> RetentionRules:
    """Checked rules: days >= 0, and every named branch exists."""
    if default_days < 0:
        raise RetentionError(f"--default-days: {default_days} days is negative (0 keeps only "
                             "what heads and tags reference)")
    existing = set(known)
    for name, days in branches.items():
        if days < 0:
            raise RetentionError(f"--branch {name}: {days} days is negative")
        if name not in existing:
            raise RetentionError(f"--branch {name}: no such branch")
    return RetentionRules(default_days, dict(branches))


def load_rules(store) -> Optional[RetentionRules]:
    """The repository's rules, None when none were set."""
    try:
        return RetentionRules.from_json(store.get(RULES_KEY))
    except NotFoundError:
        return None


def save_rules(store, rules: RetentionRules) -> None:
    store.put(RULES_KEY, rules.to_json())
    log.info("retention rules set: default %d days, branches %s", rules.default_days,
             rules.branches)


# --- selection -----------------------------------------------------------------------


def read_commit(store, commit_id: str) -> Commit:
    """One commit object, read and checked, not cached (see the module doc)."""
    try:
        raw = store.get(COMMITS_PREFIX + commit_id)
    except NotFoundError:
        raise NotFoundError(f"commit {commit_id} not found") from None
    return Commit.parse(commit_id, raw)


@dataclass
class Selection:
    """The commits the rules keep: id -> metarange, and how much was read."""

    kept: dict[str, str] = field(default_factory=dict)
    commits_read: int = 0
    branches: int = 0
    tags: int = 0

    @property
    def metaranges(self) -> set[str]:
        return set(self.kept.values())


def select_commits(store, rules: RetentionRules, now_ns: int,
                   read: Optional[Callable[[str], Commit]] = None) -> Selection:
    """The commits ``rules`` keep at time ``now_ns`` (see the module doc)."""
    read = read or (lambda cid: read_commit(store, cid))
    heads = Heads(store)
    sel = Selection()
    walks = []
    for name, head in heads.branches():
        walks.append((now_ns - rules.days(name) * DAY_NS, name, head))
    walks.sort()  # oldest cutoff (longest window) first
    sel.branches = len(walks)
    walked: dict[str, int] = {}  # commit -> the oldest cutoff a walk passed it with
    for cutoff, name, head in walks:
        n = 0
        for c in _first_parents(read, head, walked, cutoff):
            sel.kept[c.id] = c.metarange
            n += 1
        sel.commits_read += n
        log.info("branch %s: %d commit(s) kept by a %d-day window", name, n, rules.days(name))
    for name, cid in heads.tags():
        sel.tags += 1
        if cid not in sel.kept:
            sel.kept[cid] = read(cid).metarange
            sel.commits_read += 1
    return sel


def _first_parents(read: Callable[[str], Commit], head: str, walked: dict[str, int],
                   cutoff: int) -> Iterator[Commit]:
    """The commits one branch keeps, head first, that no earlier walk kept."""
    cid: Optional[str] = head
    while cid is not None:
        prev = walked.get(cid)
        if prev is not None and prev <= cutoff:
            return  # an earlier, longer walk kept this chain as far as we would
        c = read(cid)
        walked[cid] = cutoff
        yield c
        if c.time_ns < cutoff:
            return  # the first commit older than the window: kept, and the last
        cid = c.parents[0] if c.parents else None


# --- runs, as fsck sees them -------------------------------------------------------


def run_prefix(run_id: str) -> str:
    return f"{GC_PREFIX}{run_id}/"


def status_key(run_id: str) -> str:
    return run_prefix(run_id) + "status.json"


def kept_key(run_id: str) -> str:
    return run_prefix(run_id) + "kept-commits.json"


def run_ids(store) -> list[str]:
    """Ids of every run's directory, oldest first (one may have no status yet): listed
    one level deep, since each run holds a report of many files."""
    runs = (d[len(GC_PREFIX):-1] for d in store.list_dirs(GC_PREFIX))
    return sorted(run for run in runs if RUN_ID.match(run))


def read_status(store, run_id: str) -> Optional[dict]:
    try:
        raw = store.get(status_key(run_id))
    except NotFoundError:
        return None
    return _parsed(raw, run_id, status_key(run_id), dict)


def read_kept(store, run_id: str) -> list[str]:
    """The commits a run kept with their trees whole (NotFoundError: none written)."""
    return _parsed(store.get(kept_key(run_id)), run_id, kept_key(run_id), list)


def _parsed(raw: bytes, run_id: str, key: str, kind: type):
    """A run's JSON object; a damaged one is one clear error, not a traceback."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        value = exc
    if not isinstance(value, kind):
        why = value if isinstance(value, ValueError) else \
            f"not a JSON {'object' if kind is dict else 'array'}"
        raise CorruptDataError(
            f"garbage collection run {run_id}: {key} is damaged ({why}); if that run has "
            f"ended, removing {run_prefix(run_id)} lets gravfs go on (what it deleted "
            "stays deleted)")
    return value


@dataclass(frozen=True)
class LastSweep:
    """The run whose sweep started last: its mark's start (store clock) and the
    commits it kept with their trees whole. Others older than the mark may be gone."""

    run_id: str
    mark_started_ns: int
    kept: frozenset[str]

    def expired(self, commit: Commit) -> bool:
        return commit.id not in self.kept and commit.time_ns < self.mark_started_ns


def last_sweep(store) -> Optional[LastSweep]:
    """The run whose sweep started last (None: nothing was ever deleted): the one
    LAST_SWEEP_KEY names, when that run did start its sweep (a sweep names itself
    there before it starts), else found among every run's status."""
    named = _named_last_sweep(store)
    if named is not None:
        st = read_status(store, named)
        if st and st.get("state") in SWEPT_STATES:
            return _swept(store, named, st)
    best = None
    runs = run_ids(store)
    with ThreadPoolExecutor(16) as pool:  # a run a day is hundreds of statuses in a year
        statuses = list(pool.map(lambda run: read_status(store, run), runs))
    for run, st in zip(runs, statuses):
        if st and st.get("state") in SWEPT_STATES:
            if best is None or st.get("sweep_started_ns", 0) >= best[1].get("sweep_started_ns", 0):
                best = (run, st)
    if best is None:
        return None
    return _swept(store, *best)


def _named_last_sweep(store) -> Optional[str]:
    """The run LAST_SWEEP_KEY names (None: none, or it does not parse: then every
    run's status is read, as before there was one)."""
    try:
        raw = store.get(LAST_SWEEP_KEY)
    except NotFoundError:
        return None
    try:
        run = json.loads(raw).get("run")
    except (ValueError, AttributeError):
        run = None
    if isinstance(run, str) and RUN_ID.match(run):
        return run
    log.warning("%s does not parse; the last sweep is looked for among every run's "
                "status", LAST_SWEEP_KEY)
    return None


def name_last_sweep(store, run_id: str) -> None:
    """Record ``run_id`` as the run whose sweep started last: called before its sweep
    starts (a sweep killed before its status says so leaves the pointer to a run that
    has not swept, which last_sweep then passes over)."""
    store.put(LAST_SWEEP_KEY, json.dumps({"run": run_id}).encode())


def _swept(store, run: str, st: dict) -> LastSweep:
    try:
        kept = read_kept(store, run)
    except NotFoundError:
        raise CorruptDataError(f"garbage collection run {run} swept without its "
                               f"{kept_key(run)}; if that run has ended, removing "
                               f"{run_prefix(run)} lets gravfs go on") from None
    return LastSweep(run, int(st["mark_started_ns"]), frozenset(kept))


def tree_gone(store, commit: Commit) -> bool:
    """Whether ``commit``'s tree is missing from the store (the empty tree is never
    stored, so it is never missing)."""
    return commit.metarange != EMPTY_METARANGE_ID and \
        store.size(METARANGES_PREFIX + commit.metarange) is None


def collected_commits(store, swept: Optional[LastSweep], commits: Iterable[Commit]) -> set[str]:
    """Ids of those of ``commits`` that ``swept`` expired and whose trees are gone (a
    commit dated back after the sweep, or whose tree another commit kept, keeps its
    own); the store is asked about the expired ones only, 16 at a time."""
    expired = [c for c in commits if swept is not None and swept.expired(c)]
    if not expired:
        return set()
    with ThreadPoolExecutor(16) as pool:
        gone = pool.map(lambda c: tree_gone(store, c), expired)
        return {c.id for c, g in zip(expired, gone) if g}


class ExpiredCommitError(GravfsError):
    """A commit garbage collection expired, asked to become a ref or a merge source."""


def check_not_expired(store, commit: Commit) -> None:
    """Refuse ``commit`` as the base of a new branch or tag, or as what a merge takes,
    when garbage collection expired it: its tree is gone, or the running sweep (the
    holder of the sweep fence) is deleting it. Callers check before writing the ref
    and again after: a sweep that took the fence in between either sees the new ref
    when it reads the refs again, or is seen here."""
    try:
        run = fence_holder(store.get(SWEEP_FENCE)).get("run")
    except NotFoundError:
        run = None
    if run:
        started = (read_status(store, run) or {}).get("mark_started_ns")
        if started and commit.time_ns < started:
            try:
                kept = read_kept(store, run)
            except NotFoundError:
                kept = []
            if commit.id not in kept:
                raise ExpiredCommitError(
                    f"commit {commit.id[:12]} is expired by garbage collection run {run}, "
                    "which is deleting its tree now; it cannot become a branch, a tag or "
                    "a merge source")
    if tree_gone(store, commit):
        raise ExpiredCommitError(
            f"the tree of commit {commit.id[:12]} was deleted by garbage collection (the "
            "retention rules expired it); it cannot become a branch, a tag or a merge source")
