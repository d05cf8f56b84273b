"""gravfs.version.refs.casprobe: a store that ignores the conditions of its writes is
refused before a branch head moves through it."""

from __future__ import annotations

import pytest

from gravfs.errors import PreconditionFailedError
from gravfs.store.local import LocalStore
from gravfs.version.refs.casprobe import PROBES, ConditionsIgnoredError, check_conditional_writes
from gravfs.fs.repository import Repository
from gravfs.version.repository import VersionRepository


class Ignoring(LocalStore):
    """A server that answers conditional writes as plain ones (an S3-compatible one
    that does not know If-Match / If-None-Match), for ``ignores`` of "create",
    "replace", "delete"."""

    conditions_are_own = False

    def __init__(self, root: str, ignores: frozenset = frozenset({"create", "replace", "delete"})):
        super().__init__(root)
        self.ignores = ignores

    def compare_and_swap(self, key, expected_version, data):
        what = "delete" if data is None else "create" if expected_version is None else "replace"
        try:
            return super().compare_and_swap(key, expected_version, data)
        except PreconditionFailedError:
            if what not in self.ignores:
                raise
        if data is None:
            self.delete(key)
            return None
        self.put(key, data)
        return self.read_versioned(key)[1]


@pytest.mark.s3
def test_a_server_that_honours_the_conditions_passes_and_keeps_nothing(s3_store):
    check_conditional_writes(s3_store)
    assert list(s3_store.list(PROBES)) == []


@pytest.mark.parametrize("ignores,named", [
    ({"create", "replace", "delete"}, "If-None-Match: * on a PUT (create only if absent); "
                                      "If-Match on a PUT (replace only that version)"),
    ({"replace"}, "If-Match on a PUT (replace only that version)"),
])
def test_each_ignored_condition_is_named(tmp_path, ignores, named):
    store = Ignoring(str(tmp_path / "store"), frozenset(ignores))
    with pytest.raises(ConditionsIgnoredError) as got:
        check_conditional_writes(store)
    assert f"ignores conditional writes ({named}): " in str(got.value)
    assert list(store.list("")) == []


def test_a_delete_that_ignores_its_condition_is_warned_of(tmp_path, caplog):
    """Only a branch deleted during another host's commit is at stake: said, not refused."""
    store = Ignoring(str(tmp_path / "store"), frozenset({"delete"}))
    check_conditional_writes(store)
    assert "ignores If-Match on a DELETE" in caplog.text
    assert list(store.list("")) == []


def test_init_on_such_a_store_writes_nothing(tmp_path):
    store = Ignoring(str(tmp_path / "store"))
    with pytest.raises(ConditionsIgnoredError, match="two hosts committing at once"):
        VersionRepository.init(store, str(tmp_path / "state"))
    assert list(store.list("")) == []


def test_a_probe_key_left_behind_does_not_make_the_store_taken(tmp_path):
    """An init whose probe failed midway (the store went away) may leave its key: the
    next init is not refused as "not empty"."""
    store = LocalStore(str(tmp_path / "store"))
    store.put(f"{PROBES}0123abcd", b"first")
    VersionRepository.init(store, str(tmp_path / "state")).close()


def test_a_host_reaching_a_repository_through_such_an_endpoint_moves_no_head(tmp_path):
    """A repository made where conditions held, then written through an endpoint that
    ignores them (another gateway, a migrated bucket): the first head write of that
    host and endpoint is refused; the change stays staged. One that passed is
    remembered in the workspace (no probe at each commit)."""
    root = str(tmp_path / "store")
    VersionRepository.init(root, str(tmp_path / "state-a")).close()
    bad = Repository.open(Ignoring(root), str(tmp_path / "state-b"))
    bad.write_file("main", "k", b"v")
    head = bad.heads.branch("main")[0]
    with pytest.raises(ConditionsIgnoredError):
        bad.commit("main", "through the gateway")
    assert bad.heads.branch("main")[0] == head
    assert bad.status("main") == [("added", b"k")]
    bad.close()

    good = Ignoring(root, frozenset())
    probes = []
    real = good.compare_and_swap
    good.compare_and_swap = lambda k, *a: (probes.append(k), real(k, *a))[1]
    for state in ("state-c", "state-c"):  # the second open finds it recorded
        repo = VersionRepository.open(good, str(tmp_path / state))
        repo.heads.create_branch(f"b{len(probes)}", head)
        repo.close()
    assert len({k for k in probes if k.startswith(PROBES)}) == 1  # one probe: the first open's
