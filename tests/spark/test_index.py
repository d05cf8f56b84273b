"""gravfs spark index: provenance and path history from the index equal a brute-force scan
of every commit, on random histories with branches, tags and merges; an incremental
index answers exactly as a full rebuild."""

from __future__ import annotations

import io
import tempfile

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from gravfs.errors import GravfsError
from gravfs.fs.entry import decode_entry
from gravfs.fs.repository import Repository
from gravfs.provenance import bruteforce, queries
from gravfs.provenance import manifest as manifests
from gravfs.provenance.layout import CONTENTS, PATHS, RANGES_IN_COMMITS, key_column
from gravfs.provenance.reader import IndexReader
from gravfs.spark.index import build_index
from tests.repo_util import small_settings

pytestmark = pytest.mark.spark

PATHS_POOL = [f"d{i % 3}/f{i}" for i in range(12)] + ["é/ü", "top", "z/\u4e2d"]
CONTENTS_POOL = [f"content {i}".encode() for i in range(6)]

BRANCHES = ["main", "b1", "b2"]
change = st.one_of(st.tuples(st.just("put"), st.sampled_from(PATHS_POOL),
                             st.sampled_from(CONTENTS_POOL)),
                   st.tuples(st.just("rm"), st.sampled_from(PATHS_POOL)))
step = st.one_of(
    st.tuples(st.just("work"), st.sampled_from(BRANCHES), st.lists(change, min_size=1, max_size=5)),
    st.tuples(st.just("merge"), st.sampled_from(BRANCHES), st.sampled_from(BRANCHES)),
    st.tuples(st.just("tag"), st.sampled_from(BRANCHES)),
    st.tuples(st.just("index"),),
)


def play(repo: Repository, steps, index) -> None:
    """Apply random steps on three branches (main, and b1, b2 forked after a first
    commit); ``index()`` runs an incremental index build (at most once midway)."""
    repo.write_file("main", "top", io.BytesIO(CONTENTS_POOL[0]))
    repo.commit("main", "first")
    for b in BRANCHES[1:]:
        repo.create_branch(b, "main")
    tags = 0
    indexed = False
    for s in steps:
        if s[0] == "work":
            branch = s[1]
            for c in s[2]:
                if c[0] == "put":
                    repo.write_file(branch, c[1], io.BytesIO(c[2]))
                else:
                    try:
                        repo.remove(branch, c[1])
                    except GravfsError:  # not there
                        pass
            try:
                repo.commit(branch, f"work on {branch}")
            except GravfsError:  # nothing to commit
                pass
        elif s[0] == "merge" and s[1] != s[2]:
            try:
                repo.merge(s[1], s[2], strategy="source-wins", message=f"{s[1]} into {s[2]}")
                event("merged")
            except GravfsError:  # already merged
                pass
        elif s[0] == "tag":
            tags += 1
            repo.create_tag(f"t{tags}", s[1])
        elif s[0] == "index" and not indexed:
            indexed = True
            index()
            event("indexed midway")


def _covered(commit) -> None:
    """The lookup of commits the index does not cover: none here, it covers them all."""
    pytest.fail(f"commit {commit.id} is not in the index")


def answers(repo: Repository, reader: IndexReader) -> dict:
    """Every question the index answers about this repository, from the index."""
    out = {}
    addresses = set(reader.read_all(CONTENTS, ["address"]).column("address").to_pylist())
    for a in sorted(addresses):
        p = queries.provenance(reader, repo.commits, repo.heads, a.decode())
        out[("prov", a)] = [(h.commit.id, h.path, h.branches, h.tags) for h in p.holders]
    refs = [n for n, _ in repo.list_branches()] + [n for n, _ in repo.list_tags()]
    for ref in refs:
        start = repo.resolve(ref).commit.id
        for path in PATHS_POOL:
            key = path.encode()
            h = queries.path_history(reader, repo.commits, repo.heads, start, key, _covered)
            out[("log", ref, key)] = [(c.commit.id, c.kind) for c in h.changes]
    return out


def brute_answers(repo: Repository, addresses) -> dict:
    out = {}
    refs_of = {}
    for a in sorted(addresses):
        rows = []
        for cid, path in bruteforce.provenance(repo, a.decode()):
            if cid not in refs_of:
                b, t = bruteforce.refs_containing(repo, cid)
                refs_of[cid] = (tuple(b), tuple(t))
            rows.append((cid, path) + refs_of[cid])
        out[("prov", a)] = rows
    refs = [n for n, _ in repo.list_branches()] + [n for n, _ in repo.list_tags()]
    for ref in refs:
        for path in PATHS_POOL:
            key = path.encode()
            out[("log", ref, key)] = bruteforce.path_history(repo, ref, key)
    return out


def all_addresses(repo: Repository) -> set[bytes]:
    found = set()
    for c in bruteforce.all_commits(repo):
        for rec in repo.committed.iter(c.metarange):
            a = decode_entry(rec.data).address
            if a:
                found.add(a.encode())
    return found


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@example(steps=[("work", "b1", [("put", "d0/f0", CONTENTS_POOL[1])]),
                ("work", "main", [("put", "d1/f1", CONTENTS_POOL[1]), ("rm", "top")]),
                ("tag", "b1"), ("index",),
                ("merge", "b1", "main"),
                ("work", "b1", [("put", "d0/f0", CONTENTS_POOL[2]), ("put", "top", CONTENTS_POOL[0])]),
                ("work", "b2", [("put", "é/ü", CONTENTS_POOL[2])]),
                ("merge", "main", "b1"), ("merge", "b2", "main"),
                ("work", "main", [("rm", "d0/f0")]), ("merge", "main", "b2")])
@given(steps=st.lists(step, min_size=3, max_size=14))
def test_index_answers_equal_brute_force_and_full_rebuild(spark, steps):
    with tempfile.TemporaryDirectory() as d:
        repo = Repository.init(f"{d}/store", f"{d}/state", settings=small_settings())
        try:
            play(repo, steps, lambda: build_index(spark, repo))
            build_index(spark, repo)  # incremental: whatever the last build missed
            incremental = IndexReader(repo.store, repo.tier)
            got = answers(repo, incremental)
            assert set(all_addresses(repo)) == {k[1] for k in got if k[0] == "prov"}
            assert got == brute_answers(repo, [k[1] for k in got if k[0] == "prov"])
            runs = len(manifests.load(repo.store).runs)
            res = build_index(spark, repo, full=True)
            assert res.commits == len(bruteforce.all_commits(repo))
            full = IndexReader(repo.store, repo.tier)
            assert len(full.manifest.runs) == 1 and runs >= 1
            assert answers(repo, full) == got
            for t in (CONTENTS, PATHS, RANGES_IN_COMMITS):  # the same rows too
                assert _rows(incremental, t) == _rows(full, t), t
        finally:
            repo.close()


def _rows(reader: IndexReader, table: str) -> list:
    t = reader.read_all(table)
    return sorted(zip(*[t.column(c).to_pylist() for c in t.column_names]))


def test_files_are_sorted_with_fences_and_disjoint_within_a_run(spark, tmp_path):
    """Each file is sorted by its key, its fences match its row groups, the files of a
    run hold disjoint key spans, and a point lookup reads one row group of one file."""
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"),
                           settings=small_settings())
    try:
        for i in range(300):
            repo.write_file("main", f"p/{i:04d}", io.BytesIO(f"c{i % 50}".encode()))
        repo.commit("main", "many")
        res = build_index(spark, repo)
        assert res.rows[PATHS] == 300 and res.rows[CONTENTS] == 300
        reader = IndexReader(repo.store, repo.tier)
        for t in (CONTENTS, PATHS, RANGES_IN_COMMITS):
            spans = []
            for f in reader.files(t):
                keys = reader._open(f).read(columns=[key_column(t)]).column(0).to_pylist()
                assert keys == sorted(keys) and len(keys) == f.rows
                fe = reader.fences(f)
                assert sum(fe.rows) == f.rows
                assert (fe.first[0], fe.last[-1]) == (keys[0], keys[-1])
                spans.append((f.min_key, f.max_key))
            assert spans == sorted(spans)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        fresh = IndexReader(repo.store, repo.tier)
        assert len(fresh.get(PATHS, b"p/0123")) == 1
        assert fresh.files_opened == 1 and fresh.groups_read == 1
    finally:
        repo.close()
