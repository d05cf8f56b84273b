"""Hypothesis state machine: random put/rm/commit/branch/merge/revert/cherry-pick/reset/
compact against a dict model; the views, listings and status must match it after every
step."""

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule)

from gravfs.version.committer import NothingToCommitError
from gravfs.version.compaction import compact
from gravfs.errors import ConflictError, GravfsError, PathTypeError
from gravfs.fs.repository import Repository
from tests.repo_util import small_settings

# "a/x" is a file on some branches and a directory on others: merges may join them
PATHS = [f"{d}/{f}" for d in ("a", "b", "a/x") for f in ("1", "2", "3")] + ["top", "a/x"]
CONTENT = st.sampled_from([b"", b"one", b"two", b"three" * 50])
BRANCHES = ["main", "dev", "feat", "fix"]  # dev and feat from the start, fix when drawn


class RepoMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="gravfs-model-")
        self.repo = Repository.init(self.dir + "/store", self.dir + "/state", settings=small_settings())
        # model: per branch committed dict and working dict; per commit id its tree
        self.committed = {"main": {}}
        self.working = {"main": {}}
        self.trees = {self.repo.head("main"): {}}
        # branches with staged writes since their last commit/reset: rewriting a file with
        # the same bytes still changes its mtime, so such a commit may land
        self.touched = set()
        self.written = {"main": set()}  # paths put or removed since the last commit/reset
        self.writes = 0

    @initialize()
    def two_branches(self):
        """Branches to merge from the first steps (drawn branch rules were mostly no-ops)."""
        for b in ("dev", "feat"):
            self.branch(b, "main")

    def teardown(self):
        self.repo.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def branches(self):
        return sorted(self.working)

    @rule(b=st.sampled_from(BRANCHES), path=st.sampled_from(PATHS), data=CONTENT)
    def put(self, b, path, data):
        if b not in self.working:
            return
        if any(_collide(path, k) for k in self.working[b]):
            with pytest.raises(PathTypeError):  # a file where a directory is, or under a file
                self.repo.write_file(b, path, data)
            return
        self.repo.write_file(b, path, data)
        # (bytes, which write): an entry holds its write's time, so a merge takes a
        # rewrite of the same bytes for a change (it differs from both sides only where
        # the other side wrote other bytes: a conflict)
        self.writes += 1
        self.working[b][path] = (data, self.writes)
        self.touched.add(b)
        self.written[b].add(path)

    @rule(b=st.sampled_from(BRANCHES), path=st.sampled_from(PATHS))
    def rm(self, b, path):
        if b not in self.working or path not in self.working[b]:
            return
        self.repo.remove(b, path)
        del self.working[b][path]
        self.touched.add(b)
        self.written[b].add(path)

    @rule(b=st.sampled_from(BRANCHES))
    def commit(self, b):
        if b not in self.working:
            return
        if b not in self.touched:
            with pytest.raises(NothingToCommitError):
                self.repo.commit(b, "nothing")
            return
        self.touched.discard(b)
        self.written[b] = set()
        try:
            c = self.repo.commit(b, "c")
        except NothingToCommitError:
            assert _data(self.working[b]) == _data(self.committed[b])
            return
        self.committed[b] = dict(self.working[b])
        self.trees[c.id] = dict(self.working[b])

    @rule(b=st.sampled_from(BRANCHES), src=st.sampled_from(BRANCHES))
    def branch(self, b, src):
        if b in self.working or src not in self.working:
            return
        self.repo.create_branch(b, src)
        self.committed[b] = dict(self.committed[src])
        self.working[b] = dict(self.committed[src])
        self.written[b] = set()

    @rule(b=st.sampled_from(BRANCHES))
    def reset(self, b):
        if b not in self.working:
            return
        self.repo.reset(b)
        self.working[b] = dict(self.committed[b])
        self.touched.discard(b)
        self.written[b] = set()

    @rule(b=st.sampled_from(BRANCHES))
    def compact(self, b):
        """Compaction changes how staging is kept, never what a branch shows."""
        if b in self.working:
            compact(self.repo, b)

    @rule(src=st.sampled_from(BRANCHES), dst=st.sampled_from(BRANCHES),
          strategy=st.sampled_from(["fail", "source-wins", "dest-wins"]),
          tidy=st.booleans())
    def merge(self, src, dst, strategy, tidy):
        """``tidy``: commit the destination first (most steps leave it dirty)."""
        if src == dst or src not in self.working or dst not in self.working:
            return
        if tidy and dst in self.touched:
            self.commit(dst)
        if dst in self.touched and self.working[dst] != self.committed[dst]:
            with pytest.raises(GravfsError, match="has uncommitted changes"):
                self.repo.merge(src, dst, strategy=strategy)
            return
        from gravfs.version.history import merge_base
        base_id = merge_base(self.repo.commits, self.repo.head(src), self.repo.head(dst))
        base = self.trees[base_id]
        if base_id == self.repo.head(src):
            return
        result, conflicts = _three_way(base, self.committed[src], self.committed[dst], strategy)
        if _refused(result, conflicts, strategy,
                    lambda: self.repo.merge(src, dst, strategy=strategy)):
            return
        c = self.repo.merge(src, dst, strategy=strategy)
        # staged changes that left the head as it was (written and removed) are dropped
        self.touched.discard(dst)
        self.written[dst] = set()
        self.committed[dst] = result
        self.working[dst] = dict(result)
        self.trees[c.id] = dict(result)

    @precondition(lambda self: len(self.trees) > 1)
    @rule(b=st.sampled_from(BRANCHES), pick=st.integers(0, 1000),
          parent=st.sampled_from([None, None, 1, 2]),
          op=st.sampled_from(["revert", "cherry-pick"]), tidy=st.booleans())
    def replay(self, b, pick, parent, op, tidy):
        """Revert or cherry-pick any commit made so far: a three-way merge of its change
        (against the parent asked for) into the branch's head. ``tidy``: as merge's."""
        if b not in self.working:
            return
        if tidy and b in self.touched:
            self.commit(b)
        ids = list(self.trees)  # the first is the root commit
        cid = ids[0] if pick == 0 else ids[1 + pick % (len(ids) - 1)]
        parents = self.repo.commits.get(cid).parents
        fn = self.repo.revert if op == "revert" else self.repo.cherry_pick
        refused = ("has no parent" if not parents
                   else "is a merge commit" if parent is None and len(parents) > 1
                   else "against parent" if parent is not None and parent > len(parents)
                   else "has uncommitted changes" if (b in self.touched and
                                                      self.working[b] != self.committed[b])
                   else None)
        if refused:
            with pytest.raises(GravfsError, match=refused):
                fn(b, cid, parent=parent)
            return
        before, after = self.trees[parents[(parent or 1) - 1]], self.trees[cid]
        if op == "revert":
            before, after = after, before
        d = self.committed[b]
        result, conflicts = _three_way(before, after, d, "fail")
        if _refused(result, conflicts, "fail", lambda: fn(b, cid, parent=parent)):
            return
        if result == d:
            with pytest.raises(GravfsError, match="nothing to commit"):
                fn(b, cid, parent=parent)
            return
        c = fn(b, cid, parent=parent)
        self.touched.discard(b)
        self.written[b] = set()
        self.committed[b] = result
        self.working[b] = dict(result)
        self.trees[c.id] = dict(result)

    @invariant()
    def views_match(self):
        for b in self.working:
            got = {n.path: self.repo.read(n) for n in self.repo.walk(b) if n.kind == "file"}
            assert got == _data(self.working[b]), b
            head = self.repo.head(b)
            got = {n.path: self.repo.read(n) for n in self.repo.walk(head) if n.kind == "file"}
            assert got == _data(self.committed[b]), b

    @invariant()
    def status_matches(self):
        """Every path whose content or presence differs from the head, with its kind;
        perhaps also one rewritten with the same bytes (its mtime changed)."""
        for b in self.working:
            w, c = _data(self.working[b]), _data(self.committed[b])
            must = {k: "added" if k not in c else "removed" if k not in w else "changed"
                    for k in set(w) | set(c) if w.get(k) != c.get(k)}
            got = {k.decode(): kind for kind, k in self.repo.status(b)}
            assert {k: got.get(k) for k in must} == must, b
            assert set(got) <= set(must) | {k for k in self.written[b] if k in w and k in c}, b
            under = self.repo.status(b, [b"a"])
            assert under == [(kind, k) for kind, k in self.repo.status(b)
                             if k.startswith(b"a/")], b

    @precondition(lambda self: "main" in self.working)
    @invariant()
    def listing_matches(self):
        top = sorted({p.split("/")[0] + ("/" if "/" in p else "") for p in self.working["main"]},
                     key=lambda n: n.encode())
        got = [n.name + ("/" if n.kind == "dir" else "") for n in self.repo.list_dir("main")]
        assert got == top


def _three_way(base: dict, s: dict, d: dict, strategy: str) -> tuple[dict, list]:
    """(d with s's changes since base, the conflicting paths) as gravfs merges trees."""
    result, conflicts = dict(d), []
    for k in sorted(set(base) | set(s) | set(d)):
        bs, ss, ds = base.get(k), s.get(k), d.get(k)
        if ss == bs:
            continue
        if ds == bs or ds == ss:
            if ss is None:
                result.pop(k, None)
            else:
                result[k] = ss
            continue
        if ss is not None and ds is not None and ss[0] == ds[0]:
            continue  # both wrote these bytes: no conflict, dest's entry stays
        conflicts.append(k)
        if strategy == "source-wins":
            if ss is None:
                result.pop(k, None)
            else:
                result[k] = ss
    return result, conflicts


def _refused(result: dict, conflicts: list, strategy: str, call) -> bool:
    """Whether the model's three-way merge ends in a conflict: then call() must raise
    it, naming the paths."""
    if conflicts and strategy == "fail":
        with pytest.raises(ConflictError) as ei:
            call()
        assert sorted(k.decode() for k in ei.value.keys) == conflicts
        return True
    joined = sorted(f for f in result if any(k.startswith(f + "/") for k in result))
    if joined:  # each side was fine alone: whatever the strategy, a conflict
        with pytest.raises(ConflictError, match="both a file and a directory") as ei:
            call()
        assert [k.decode() for k in ei.value.keys] == joined
        return True
    return False


def _data(tree: dict) -> dict:
    return {path: data for path, (data, _) in tree.items()}


def _collide(a: str, b: str) -> bool:
    """Whether a file at one path and a file at the other cannot both be."""
    return b.startswith(a + "/") or a.startswith(b + "/")


TestRepoModel = RepoMachine.TestCase
TestRepoModel.settings = settings(max_examples=200, stateful_step_count=25, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])
