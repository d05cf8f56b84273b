"""Stat results of branch trees, kept while the branch cannot have changed.

A branch path's entry depends only on the branch head and the workspace's
staging database. The head is what ``Repository.head`` returns (itself cached
for ``head_ttl``) and every staging change, from this mount or another
process on the workspace, commits a staging write transaction and so moves the
staging area's ``change_counter()`` (LMDB's last txn id). Results are filed under that (head, txnid)
version: while both are unchanged a lookup or getattr costs two dictionary
reads and no worker thread, LMDB read transaction, JSON decode or layer walk.

The mount's own staging writes do not throw the cache away: ``OwnWrites``
notes the number of every write transaction this daemon commits (``on_write``), with the
keys it staged, and a cached version moves forward over transactions that
are all known to be ours by dropping just those keys (and ancestors whose
answer may change). Any transaction id not in that log (another process
wrote to the workspace) ends the cached version as before; the watcher uses
the same log to tell such foreign writes apart and invalidate the kernel's
caches.

A listed batch is kept as it came (``put_listed``) and filed name by name only
when a lookup or getattr asks in its directory: a traversal lists far more
names than it ever stats, and filing each one was a twentieth of its time.

The cache also knows *complete* directories: ones this mount created empty
or listed in one batch. A name missing from a complete directory is answered
"no such file" without a worker thread, which is what a shell's negative
lookup before every create needs.

The version is read *before* the stat it labels, so a result can be filed
under an older version than it reflects but never under a newer one.

The cache also tells when a branch last changed in a way the mount did not
cause (``changed_at``: its head moved, or a staging transaction that is not
ours): until the kernel's attribute timeout has passed since, an attribute
the kernel holds may describe content a name no longer has (see
gravfs.fuse.operations, open).
"""

from __future__ import annotations

import threading
import time
from itertools import islice
from typing import Iterable, Optional

MISSING = object()  # "not cached" (None is a cached "no such path")
MAX_ENTRIES = 32_768  # stat results per branch (oldest quarter evicted when full): bounded memory
# (listed batches waiting to be filed are bounded alike, apart: at most twice this in all)
MAX_LOG = 20_000  # own transactions remembered
MAX_REPLAY = 4096  # a cached version further behind than this is dropped, not replayed


def parent_of(key: bytes) -> bytes:
    i = key.rfind(b"/")
    return key[:i] if i >= 0 else b""


def ancestors(key: bytes) -> Iterable[bytes]:
    """Proper ancestors of a key, nearest first, the branch root (b"") last."""
    while key:
        key = parent_of(key)
        yield key


def _shown_key(base: bytes, n) -> bytes:
    """The key of node n under the name the mount shows; its own key when that is it
    (the one copy the node holds anyway)."""
    key = base + n.fs_name
    return n.key if key == n.key else key


class OwnWrites:
    """LMDB write transactions committed by this daemon: txn id -> (branch, changes).

    ``changes`` is a list of (staged key, present) for the keys written (a key
    ending in "/" is a directory marker; present False is a removal), or None
    when the writer cannot say (e.g. a rename of a whole directory). Ids are
    noted inside the transaction (``wrap``) on the writing thread, and filed
    with their changes when the caller's blocking call ends (``collect``).
    """

    def __init__(self):
        self.log: dict[int, tuple[str, Optional[list], Optional[bytes]]] = {}
        self.mine: set[int] = set()  # every write transaction of this process
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, area) -> None:
        """Note the number of each write transaction of ``area`` (for the watcher),
        and hand it to the collector of the running call, if any."""
        local = self._local
        mine = self.mine

        def note(i: int) -> None:
            if len(mine) > MAX_LOG * 8:  # no watcher pruning: it would see these as foreign
                mine.clear()
            mine.add(i)
            ids = getattr(local, "ids", None)
            if ids is not None:
                ids.append(i)

        area.on_write = note

    def foreign_since(self, after: int, upto: int) -> bool:
        """Did another process write the staging database in after+1 .. upto?
        Forgets the ids up to ``upto`` (the watcher calls this with increasing ranges)."""
        mine = self.mine
        found = upto - after > MAX_LOG or any(i not in mine for i in range(after + 1, upto + 1))
        for i in [i for i in mine if i <= upto]:
            mine.discard(i)
        return found

    def collect(self, branch: str, changes: Optional[list], fn, *args,
                fresh_dir: Optional[bytes] = None, **kw):
        """Run fn (in a worker thread) and file its staging transactions as ours.

        ``fresh_dir``: the key of a directory the call created empty (mkdir).
        """
        local = self._local
        outer = getattr(local, "ids", None)
        local.ids = []
        try:
            return fn(*args, **kw)
        finally:
            ids, local.ids = local.ids, outer
            if outer is not None:
                outer.extend(ids)
            with self._lock:
                for i in ids:
                    self.log[i] = (branch, changes, fresh_dir)
                if len(self.log) > MAX_LOG:
                    for i in sorted(self.log)[:len(self.log) - MAX_LOG // 2]:
                        del self.log[i]

    def all_ours(self, after: int, upto: int, filed: bool = True) -> bool:
        """Were transactions after+1 .. upto all committed by this daemon? ``filed``:
        and filed with their changes (for a replay); else also those noted but not
        filed yet (a call on a worker that collect has not returned from)."""
        if upto - after > (MAX_REPLAY if filed else MAX_LOG):
            return False
        log, mine = self.log, self.mine
        if filed:
            return all(i in log for i in range(after + 1, upto + 1))
        return all(i in log or i in mine for i in range(after + 1, upto + 1))


class BranchStatCache:
    def __init__(self, repo, own: Optional[OwnWrites] = None, max_entries: int = MAX_ENTRIES):
        self.repo = repo
        self.own = own or OwnWrites()
        self.max_entries = max_entries
        self._versions: dict[str, tuple] = {}
        self._nodes: dict[str, dict[bytes, object]] = {}
        self._complete: dict[str, dict[bytes, set]] = {}  # branch -> dir key -> child names
        # branch -> dir key -> [(nodes, whole)] listed there and not filed yet; names in them
        self._unfiled: dict[str, dict[bytes, list]] = {}
        self._unfiled_names: dict[str, int] = {}
        self._listed: dict[str, int] = {}  # names filed in _complete (about)
        self._latest: dict[str, tuple] = {}  # newest version filed (kept across drop)
        self._changed: dict[str, float] = {}  # branch -> monotonic time of a foreign change
        self.hits = self.misses = self.advances = 0

    def version(self, branch: str, blocking: bool) -> Optional[tuple]:
        """(head, last staging txn) of a branch; None when only a store read would tell
        (head cache expired) and ``blocking`` is false."""
        head = self._cached_head(branch)
        if head is None:
            if not blocking:
                return None
            head = self.repo.head(branch)
        return head, self.repo.staging.change_counter()

    def _cached_head(self, branch: str) -> Optional[str]:
        ttl = getattr(self.repo, "head_ttl", 0)
        hit = getattr(self.repo, "_heads_cache", {}).get(branch)
        if ttl <= 0 or not hit or time.monotonic() - hit[0] >= ttl:
            return None
        return hit[1]

    def _current(self, branch: str, version: Optional[tuple]) -> bool:
        """Is the cache of branch at ``version`` (moved forward over our own writes)?"""
        if version is None:
            return False
        have = self._versions.get(branch)
        if have == version:
            return True
        if have is None or have[0] != version[0] or have[1] > version[1]:
            return False
        if not self.own.all_ours(have[1], version[1]):
            return False
        self._replay(branch, have[1], version[1])
        self._versions[branch] = self._latest[branch] = version
        self.advances += 1
        return True

    def _replay(self, branch: str, after: int, upto: int) -> None:
        """Forget what our transactions after+1..upto changed on this branch."""
        nodes = self._nodes[branch]
        complete = self._complete.setdefault(branch, {})
        unfiled = self._unfiled.setdefault(branch, {})
        log = self.own.log
        for i in range(after + 1, upto + 1):
            b, changes, fresh = log[i]
            if b != branch:
                continue
            if changes is None:
                nodes.clear()
                complete.clear()
                unfiled.clear()
                self._unfiled_names[branch] = 0
                continue
            for staged, present in changes:
                key = staged.rstrip(b"/")
                if unfiled:  # batches of the directories below: filed, then corrected
                    for d in ancestors(key):
                        if d in unfiled:
                            self._file_listed(branch, d)
                nodes.pop(key, None)
                if not present:  # (a name may be a file and a directory at once)
                    complete.pop(parent_of(key), None)
                child = key
                for anc in ancestors(key):
                    n = nodes.get(anc, MISSING)
                    keep = (n is not MISSING and n is not None and n.kind == "dir"
                            and (present or n.entry is not None))
                    if not keep:  # a directory may appear, vanish or lose its marker
                        nodes.pop(anc, None)
                    if present and anc in complete:
                        complete[anc].add(child[child.rfind(b"/") + 1:])
                    elif not present and not keep:
                        complete.pop(anc, None)
                    child = anc
            if fresh is not None:
                complete[fresh] = set()

    def get(self, branch: str, version: Optional[tuple], key: bytes):
        if not self._current(branch, version):
            self.misses += 1
            return MISSING
        node = self._nodes[branch].get(key, MISSING)
        if node is MISSING and key:
            parent = parent_of(key)
            unfiled = self._unfiled.get(branch)
            if unfiled and parent in unfiled:
                self._file_listed(branch, parent, key)
                node = self._nodes[branch].get(key, MISSING)
            names = self._complete.get(branch, {}).get(parent)
            if names is not None and key[key.rfind(b"/") + 1:] not in names:
                node = None  # not in a directory whose every name is known
        if node is MISSING:
            self.misses += 1
        else:
            self.hits += 1
        return node

    def _at(self, branch: str, version: tuple) -> bool:
        """Bring the branch's cache to version for filing; False: version is older."""
        if self._current(branch, version):
            return True
        have = self._versions.get(branch)
        if have is not None and have[0] == version[0] and have[1] > version[1]:
            return False  # a result read before a newer version was seen: not filed
        latest = self._latest.get(branch)
        if latest is not None and latest != version and not (
                latest[0] == version[0] and self.own.all_ours(latest[1], version[1], False)):
            self._changed[branch] = time.monotonic()
        self._latest[branch] = version
        self._versions[branch] = version
        self._nodes[branch] = {}
        self._complete[branch] = {}
        self._unfiled[branch] = {}
        self._unfiled_names[branch] = 0
        return True

    def put(self, branch: str, version: tuple, key: bytes, node) -> None:
        self.put_many(branch, version, ((key, node),))

    def put_many(self, branch: str, version: tuple, items: Iterable[tuple[bytes, object]]
                 ) -> None:
        """File (key, node) results of one version (one check of the version, one dict
        update)."""
        if self._at(branch, version):
            self._add(branch, items)

    def _add(self, branch: str, items) -> None:
        """File results (an iterable of (key, node), or a dict); evict when full."""
        nodes = self._nodes[branch]
        nodes.update(items)
        if len(nodes) > self.max_entries:  # evict the oldest quarter (insertion order)
            for key in list(islice(nodes, len(nodes) - self.max_entries * 3 // 4)):
                del nodes[key]

    def put_listed(self, branch: str, version: tuple, dir_key: bytes, batch: list,
                   whole: bool = False) -> None:
        """A batch of listed nodes of directory dir_key (gravfs.fs.repository.Node:
        files and symlinks are what stat returns; not directories: a name that is both
        a file and a directory lists as the directory), filed under the names the mount
        shows when a lookup first asks in that directory. ``whole``: the batch is the
        directory's entire listing (it is then complete)."""
        if not self._at(branch, version):
            return
        unfiled = self._unfiled[branch]
        unfiled.setdefault(dir_key, []).append((batch, whole))
        count = self._unfiled_names[branch] = self._unfiled_names[branch] + len(batch)
        if count > self.max_entries:  # forget the batches listed first
            while count > self.max_entries * 3 // 4:
                first = next(iter(unfiled))
                batches = unfiled[first]
                count -= len(batches.pop(0)[0])
                if not batches:
                    del unfiled[first]
            self._unfiled_names[branch] = count

    def _file_listed(self, branch: str, dir_key: bytes, want: Optional[bytes] = None) -> None:
        """File the batches listed in dir_key (put_listed), oldest first; with ``want``,
        only until that key is filed (a directory of many batches is not filed whole on
        the loop at the first lookup in it: a scan in order files a batch a time)."""
        unfiled = self._unfiled[branch]
        batches = unfiled[dir_key]
        nodes = self._nodes[branch]
        base = dir_key + b"/" if dir_key else b""
        while batches:
            batch, whole = batches.pop(0)
            self._unfiled_names[branch] -= len(batch)
            shown = [n for n in batch if not n.shadowed]
            found = {_shown_key(base, n): n for n in shown if n.kind != "dir"}
            for k in found.keys() & nodes.keys():
                # a result filed directly (a lookup's) stays: of the same version, and
                # our own writes since were replayed over both (see _replay)
                del found[k]
            self._add(branch, found)
            if whole:
                self.put_listing(branch, self._versions[branch], dir_key,
                                 {n.fs_name for n in shown})
            if want is not None and want in nodes:
                break
        if not batches:
            del unfiled[dir_key]

    def put_listing(self, branch: str, version: tuple, key: bytes, names: set) -> None:
        """Every name in directory ``key`` (listed whole at version)."""
        if self._at(branch, version):
            complete = self._complete[branch]
            complete[key] = set(names)
            listed = self._listed[branch] = self._listed.get(branch, 0) + len(names)
            if listed > self.max_entries:  # about: forget the oldest half of the directories
                for k in list(complete)[:max(1, len(complete) // 2)]:
                    del complete[k]
                self._listed[branch] = sum(map(len, complete.values()))

    def changed_at(self, branch: str) -> float:
        """When (time.monotonic) the branch was last seen to change in a way this mount
        did not cause: its head moved or another process wrote its staging (about:
        also when the cache lost track of its own writes); 0.0 if never."""
        return self._changed.get(branch, 0.0)

    def drop(self, branch: Optional[str] = None) -> None:
        if branch is None:
            self._versions.clear()
            self._nodes.clear()
            self._complete.clear()
            self._listed.clear()
            self._unfiled.clear()
            self._unfiled_names.clear()
        else:
            self._versions.pop(branch, None)
            self._nodes.pop(branch, None)
            self._complete.pop(branch, None)
            self._listed.pop(branch, None)
            self._unfiled.pop(branch, None)
            self._unfiled_names.pop(branch, None)
