"""Query helpers that need no index files: which refs contain a commit."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gravfs.provenance.queries import RefHead, ref_bits


class Commits:
    """What ref_bits reads of IndexedCommits: get() and a memo."""

    def __init__(self, parents: dict[str, tuple[str, ...]]):
        self.memo: dict = {}
        self._c = {}
        for cid in sorted(parents, key=lambda c: int(c[1:])):  # parents come first
            gen = 1 + max((self._c[p].generation for p in parents[cid]), default=0)
            self._c[cid] = SimpleNamespace(parents=parents[cid], generation=gen)

    def get(self, cid: str):
        return self._c[cid]


def _ancestors(parents, cid) -> set[str]:
    seen, todo = set(), [cid]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo += parents[c]
    return seen


@st.composite
def histories(draw):
    n = draw(st.integers(1, 40))
    parents = {}
    for i in range(n):
        k = draw(st.integers(0, min(i, 2)))
        parents[f"c{i}"] = tuple(sorted({f"c{draw(st.integers(0, i - 1))}" for _ in range(k)}))
    refs = [RefHead(f"r{j}", draw(st.sampled_from(["branch", "tag"])),
                    f"c{draw(st.integers(0, n - 1))}") for j in range(draw(st.integers(0, 5)))]
    asks = draw(st.lists(st.sets(st.sampled_from(sorted(parents)), min_size=1), max_size=6))
    return parents, refs, asks


@settings(max_examples=300, deadline=None)
@example(({"c0": (), "c1": ("c0",), "c2": ("c1",)}, [RefHead("main", "branch", "c2")],
          [{"c2"}, {"c0"}]))  # the second query resumes the walk below the first's floor
@given(histories())
def test_refs_containing_each_commit_across_queries_of_one_reader(history):
    """One walk serves every query of a reader, resumed further down when a later
    query's oldest target is older; the answers equal a walk from each ref."""
    parents, refs, asks = history
    commits = Commits(parents)
    reach = {r: _ancestors(parents, r.commit) for r in refs}

    def containing(refs, targets):
        bits = ref_bits(commits, refs, set(targets))
        return {t: [r for i, r in enumerate(refs) if bits[t] >> i & 1] for t in targets}

    for targets in asks:
        assert containing(refs, targets) == {t: [r for r in refs if t in reach[r]]
                                             for t in targets}
    moved = refs[1:] + refs[:1]  # refs changed: the old walk must not answer
    for targets in asks:
        assert containing(moved, targets) == {t: [r for r in moved if t in reach[r]]
                                              for t in targets}
