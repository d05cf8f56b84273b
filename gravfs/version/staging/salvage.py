"""Repairing a damaged staging database: set it aside, keep what can still be read.

``repair(path)`` (``gravfs fsck --repair-staging``) refuses while another process
has the database open (LMDB's readers hold a lock on ``lock.mdb``). A database
that passes the checks of gravfs.version.staging.lmdbcheck and whose every page reads
is left alone. Otherwise the staging directory is renamed to
``<path>.damaged-<time>``, a fresh database is created in its place, and every
branch state, interrupted import and staged entry that can still be read and
decoded is copied into it.

Reading uses gravfs.version.staging.lmdbread (plain reads, damaged subtrees skipped),
never LMDB itself, which faults on a truncated file and aborts on a damaged
page. It reads the newest snapshot, or the one before it (the other meta page)
when that one reads with fewer losses. LMDB writes copy-on-write, so the pages
a truncation cuts off are often the newest ones, roots included: then nothing
can be read, and the report says so.

A staged value's data is opaque here: ``check_data`` (the catalog passes its
entry decoder) says which data is damage.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from gravfs.errors import GravfsError
from gravfs.version.committed.record import decode_value, encode_value
from gravfs.version.staging import lmdbcheck
from gravfs.version.staging.area import (MAX_PLAIN_PATH, PUT, PUT_ID, TOMBSTONE, BranchState,
                                         StagingArea, entry_key, staged_value)
from gravfs.version.staging.lmdbread import SnapshotReader

log = logging.getLogger(__name__)

_DBS = ("branches", "imports", "entries")
_OPTIONAL_DBS = ("long_paths", "since")  # absent from databases written before them
_BATCH = 10_000

# raises on data that does not decode (its result is ignored)
DataCheck = Callable[[bytes], object]


def _any_data(data: bytes) -> None:
    """The default check: any data of a well-formed value is accepted."""


@dataclass
class RepairReport:
    path: str  # the staging directory
    problem: str = ""  # "" when the database is healthy (then nothing was done)
    aside: Optional[str] = None  # where the damaged database was moved
    branches: int = 0
    imports: int = 0
    entries: int = 0
    losses: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        data = os.path.join(self.path, lmdbcheck.DATA_FILE)
        if not self.problem:
            return [f"staging database {data} is healthy; nothing to repair"]
        out = [f"staging database {data} was damaged ({self.problem}); moved to {self.aside}",
               f"kept {self.entries} staged entries of {self.branches} branch(es) and "
               f"{self.imports} interrupted import(s) in a fresh staging database"]
        return out + self.losses


@dataclass
class _Snapshot:
    """Records of one snapshot, by database, and what could not be read."""

    txnid: int
    records: dict[str, list[tuple[bytes, bytes]]]
    lost: int
    problems: list[str]
    missing: list[str]  # databases whose root could not be found

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.records.values())


def read_snapshots(data: str) -> list[_Snapshot]:
    """Every snapshot (meta page) of an LMDB file as far as it reads, newest first."""
    out = []
    for meta in lmdbcheck.read_metas(data):
        with SnapshotReader(data, meta) as reader:
            roots = reader.named_dbs()
            records = {db: [(k, v) for k, _f, v in reader.items(roots[db.encode()])]
                       if db.encode() in roots else [] for db in _DBS + _OPTIONAL_DBS}
            missing = [db for db in _DBS if db.encode() not in roots]
            out.append(_Snapshot(meta.txnid, records, reader.lost, reader.problems, missing))
    return out


def repair(path: str, check_data: DataCheck = _any_data) -> RepairReport:
    """Check the staging database in directory ``path``; if damaged, replace it by a
    fresh one holding what can be salvaged (see module doc). Run it from a process
    that has not opened that database."""
    report = RepairReport(path)
    lock_fd = _lock_exclusive(path)
    try:
        report.problem = lmdbcheck.check_data_file(path) or _read_problem(path, check_data)
        if not report.problem:
            return report
        report.aside = f"{path}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
        os.rename(path, report.aside)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    log.info("staging database %s is damaged (%s); moved to %s", path, report.problem,
                report.aside)
    fresh = StagingArea(path)
    try:
        _salvage(report, fresh, check_data)
    finally:
        fresh.close()
    return report


def repair_workspace(store_url: str, state_dir: Optional[str],
                     check_data: DataCheck = _any_data) -> RepairReport:
    """repair() of the staging database of a store's workspace in a state dir."""
    from gravfs.version.config import Workspace, default_state_dir
    from gravfs.store import open_store
    ws = Workspace.for_store(state_dir or default_state_dir(), open_store(store_url).url)
    return repair(ws.staging, check_data)


def _lock_exclusive(path: str) -> Optional[int]:
    """Take the lock every LMDB reader holds shared (byte 0 of lock.mdb), or refuse.
    The caller must not have the database open itself: a POSIX lock of its own
    would not stop it, and closing this descriptor would drop LMDB's."""
    try:
        fd = os.open(os.path.join(path, "lock.mdb"), os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        os.close(fd)
        raise GravfsError(f"staging database {path} is in use by another process (a mount, "
                          "a running command); stop it and run the repair again") from None
    return fd


def _read_problem(path: str, check_data: DataCheck) -> str:
    """What reading the whole (structurally sound) database runs into, or ""."""
    snaps = read_snapshots(os.path.join(path, lmdbcheck.DATA_FILE))
    if not snaps:
        return ""  # a new database: LMDB writes its meta pages when it opens it
    snap = snaps[0]
    if snap.lost:
        return f"{snap.lost} page(s) cannot be read: {'; '.join(snap.problems)}"
    bad = sum(1 for db, recs in snap.records.items() for k, v in recs
              if not _valid(db, k, v, check_data))
    return f"{bad} record(s) do not decode" if bad else ""


def _valid(db: str, key: bytes, value: bytes, check_data: DataCheck) -> bool:
    try:
        if db == "branches":
            key.decode()
            BranchState.load(value)
        elif db == "imports":
            return len(key) == 8 and "branch" in json.loads(value)
        elif db == "since":  # branch name -> ns (see area.BranchState.since_ns)
            key.decode()
            int(value)
        elif db == "long_paths":  # hashed entry key -> the path it stands for
            return entry_key(key[:8], value) == key and len(value) > MAX_PLAIN_PATH
        elif value != TOMBSTONE:  # a put of some kind (see staged_value)
            stored = staged_value(value)
            identity, data = decode_value(stored)
            check_data(data)
            return len(key) > 8 and encode_value(identity, data) == stored
    except Exception:  # anything that does not decode is damage
        return False
    return True


def _salvage(report: RepairReport, fresh: StagingArea, check_data: DataCheck) -> None:
    snaps = read_snapshots(os.path.join(report.aside, lmdbcheck.DATA_FILE))
    if not snaps:
        report.losses.append("nothing could be read from it: the staged changes it held are lost")
        return
    # the newest, unless the one before it reads with fewer losses
    snap = min(snaps, key=lambda s: (s.lost + len(s.missing), -s.txnid))
    if snap is not snaps[0]:
        report.losses.append("the last transaction before the damage is lost (restored the "
                             "state before it, which reads better)")
    if snap.lost or snap.missing:
        what = f"{snap.lost} page(s) could not be read" if snap.lost else \
            f"its {', '.join(snap.missing)} could not be found"
        report.losses.append(f"{what}: the staged changes they held are lost "
                             f"({'; '.join(snap.problems) or 'no root'})")
    valid = {db: [(k, v) for k, v in snap.records[db] if _valid(db, k, v, check_data)]
             for db in _DBS + _OPTIONAL_DBS}
    bad = {db: len(snap.records[db]) - len(valid[db]) for db in _DBS + _OPTIONAL_DBS}
    states = {k.decode(): BranchState.load(v) for k, v in valid["branches"]}
    imports = {k.hex(): json.loads(v) for k, v in valid["imports"]}
    owner: dict[bytes, str] = {}
    for name, st in states.items():
        for t in st.tokens() + list((st.pending or {}).get("tokens", [])):
            owner.setdefault(bytes.fromhex(t), name)
    for t, rec in imports.items():
        owner.setdefault(bytes.fromhex(t), str(rec.get("branch")))
    # a put's record ID is not checked here (a long path's is under another key): the
    # put is restored without it, and the commit that takes it hashes its record
    entries = [(k, PUT + staged_value(v) if v[:1] == PUT_ID else v)
               for k, v in valid["entries"] if k[:8] in owner]
    orphans = len(valid["entries"]) - len(entries)
    long_paths = dict(valid["long_paths"])  # an entry under a hashed key needs its path
    named = [(k, v) for k, v in entries if len(k) - 8 <= MAX_PLAIN_PATH or k in long_paths]
    unnamed = len(entries) - len(named)
    entries = named
    paths = [(k, long_paths[k]) for k, _ in entries if k in long_paths]
    dbs = {"branches": fresh.branches_db, "imports": fresh.imports_db, "entries": fresh.entries_db,
           "long_paths": fresh.long_db, "since": fresh.since_db}
    for db, recs in (("branches", valid["branches"]), ("imports", valid["imports"]),
                     ("since", [(k, v) for k, v in valid["since"] if k.decode() in states]),
                     ("long_paths", paths), ("entries", entries)):
        for i in range(0, len(recs), _BATCH):
            chunk = recs[i:i + _BATCH]

            def run(txn, chunk=chunk, db=db):
                for k, v in chunk:
                    txn.put(k, v, db=dbs[db])

            fresh.write(run)
    if bad["entries"]:
        report.losses.append(f"{bad['entries']} staged entries did not decode and were dropped")
    if bad["branches"] or bad["imports"]:
        report.losses.append(f"{bad['branches']} branch state(s) and {bad['imports']} import "
                             "record(s) did not decode and were dropped")
    if unnamed:
        report.losses.append(f"{unnamed} staged entries with long paths whose path could not "
                             "be read were dropped")
    if orphans:
        report.losses.append(f"{orphans} staged entries belong to no branch that could be read "
                             "and were dropped")
    report.branches, report.imports, report.entries = len(states), len(imports), len(entries)
    log.info("salvaged %d staged entries of %d branch(es) from %s", len(entries), len(states),
                report.aside)
