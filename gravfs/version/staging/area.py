"""LMDB staging area: uncommitted writes of every branch of one repository.

Layout (one LMDB environment per repository and workspace):

- db ``branches``: branch name -> JSON ``BranchState`` (staging token, sealed tokens
  newest first, base commit, compacted metarange, pending commit, counters).
- db ``imports``: token -> JSON ``ImportRecord`` of an import staging into a token of
  its own, outside every branch's layers until the import commits (gravfs.fs.importer).
- db ``since``: branch name -> when its oldest uncommitted change was staged (decimal
  ns; ``BranchState.since_ns``), apart from the JSON so that earlier versions read it.
- db ``entries``: ``token (8 bytes) || path`` -> ``0x03 || valueRecordID || lakeFS
  value`` for a put, ``0x00`` for a tombstone, or ``0x02 || lakeFS value`` for a
  provisional put: read like a put, committed (and compacted) as a deletion, and
  carried into the fresh token when its sealed token is dropped, until a newer write
  replaces it (the mount stages a file created and not yet closed this way). A put
  keeps the 32-byte valueRecordID of its record (lakeFS's h(h(path) || h(identity)),
  from which range IDs are built), hashed as the write arrives: a commit of a million
  staged puts would otherwise spend a third of its CPU on those three SHA-256 each.
  ``0x01 || lakeFS value`` is a put without it (written by earlier versions, and by
  a salvage, which cannot check the ones it reads): a commit hashes those itself.

Tokens are never reused, so dropping a sealed token is a prefix delete (or,
when the dropped tokens hold nearly the whole table, emptying it and putting
the rest back) and a token's entries never change once sealed: a commit can
read them while new writes go to the fresh staging token.

Long paths: LMDB's compiled key limit is 511 bytes. A path of up to
MAX_PLAIN_PATH bytes is its own key; a longer one (up to MAX_PATH_BYTES) is
stored under ``token || its first LONG_HEAD bytes || 0x00 || BLAKE2b-128 of the
path`` (511 bytes), and db ``long_paths`` maps that key to the path. The 0x00
sorts those keys after the plain key equal to the head and before every plain
key extending it, so the keys sharing a LONG_HEAD-byte head are adjacent:
iteration reads such a run whole and sorts it by path.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import lmdb

from gravfs.errors import BadNameError, CorruptDataError, GravfsError
from gravfs.faults import crash_point
from gravfs.keyrange import prefix_end
from gravfs.version.committed.record import decode_identity, value_record_id
from gravfs.version.staging import lmdbcheck

log = logging.getLogger(__name__)

TOKEN_LEN = 8
TOMBSTONE = b"\x00"
PUT = b"\x01"
PROVISIONAL = b"\x02"
PUT_ID = b"\x03"
PUTS = (PUT, PUT_ID)
RECORD_ID = 32  # bytes of a put's valueRecordID (PUT_ID)
# LMDB's compiled key limit is 511 bytes; the token takes 8 (see the module doc).
MAX_PLAIN_PATH = 500
LONG_HEAD = 486  # 8 + 486 + 1 + 16 = 511
# Linux has no limit on a whole path inside a filesystem (PATH_MAX, 4096, bounds one
# system call's argument, relative to any directory): four times that.
MAX_PATH_BYTES = 16384
# The map is address space, not memory or disk: reserve room for billions of entries
# up front.  A map is never resized while in use by choice: when one process grows the
# file past another's map, every transaction of the other fails (MDB_MAP_RESIZED), and
# adopting the new size remaps under any thread still reading.
_INITIAL_MAP = 1 << 38
_MAX_MAP = 1 << 40
# dropping tokens: a table of at least EMPTY_AT entries is emptied and the rest put back
# when the rest is at most 1/KEEP_RATIO of what is dropped (see drop_tokens)
EMPTY_AT = 10_000
KEEP_RATIO = 8


def put_raw(path: bytes, value: bytes) -> bytes:
    """The stored form of a put of the lakeFS ``value`` at ``path`` (with its record ID;
    a value whose identity does not decode is stored as it was before record IDs, and
    the commit that reads it reports it)."""
    try:
        ident = decode_identity(value)
    except CorruptDataError:
        return PUT + value
    return PUT_ID + value_record_id(path, ident) + value


def staged_value(raw: bytes) -> bytes:
    """The lakeFS value of a stored put, provisional or not (not of a tombstone)."""
    return raw[1 + RECORD_ID:] if raw[:1] == PUT_ID else raw[1:]


# the records this module stores as JSON (branch states, imports), keys sorted, through
# one encoder: json.dumps(sort_keys=True) builds a new one on every call
_JSON = json.JSONEncoder(sort_keys=True)


@dataclass
class BranchState:
    """Staging bookkeeping of one branch in this workspace."""

    staging: str
    sealed: list[str] = field(default_factory=list)  # newest first
    base: Optional[str] = None  # head commit the staged changes were made against
    compacted: Optional[dict] = None  # {"metarange": id, "base": commit id}
    pending: Optional[dict] = None  # {"commit": id, "tokens": [...]} while committing
    puts: int = 0  # counters for the compaction sensor (approximate: per write)
    tombstones: int = 0
    # provisional puts in the staging token (at least: one replaced in a sealed token
    # is still counted), and so whether a commit has any to carry (see carry_provisional)
    provisional: int = 0
    # when the oldest uncommitted change was staged here (ns, this host's clock; None:
    # nothing staged): a commit of old staging claims what it references (committer).
    # Kept in db ``since``, not in the JSON: a daemon of an earlier gravfs still running
    # beside a newer command reads the state it knows (see load).
    since_ns: Optional[int] = None

    def copy(self) -> "BranchState":
        """A copy sharing nothing mutable (cheaper than a JSON round trip)."""
        return BranchState(self.staging, list(self.sealed), self.base,
                           None if self.compacted is None else dict(self.compacted),
                           None if self.pending is None else copy.deepcopy(self.pending),
                           self.puts, self.tombstones, self.provisional, self.since_ns)

    def tokens(self) -> list[str]:
        """Every token whose entries are visible, newest first."""
        return [self.staging, *self.sealed]

    @classmethod
    def load(cls, raw: bytes) -> "BranchState":
        """The state a JSON record holds; fields this version does not know (a later
        gravfs wrote them) are left out rather than failing every read of the branch."""
        d = json.loads(raw)
        if not d.keys() <= _STORED:
            d = {k: v for k, v in d.items() if k in _STORED}
        return cls(**d)

    def dump(self) -> bytes:
        # vars(), not asdict(): the fields are plain JSON values, and asdict's deep
        # copy doubled the cost of every staging write
        d = dict(vars(self))
        del d["since_ns"]  # (its own table: see the field)
        return _JSON.encode(d).encode()


_STORED = frozenset(BranchState.__dataclass_fields__) - {"since_ns"}
_UNKNOWN = object()


def new_token() -> str:
    return secrets.token_hex(TOKEN_LEN)


def check_path(path: bytes) -> None:
    if len(path) > MAX_PATH_BYTES:
        raise BadNameError(f"path is {len(path)} bytes; staging accepts at most {MAX_PATH_BYTES}")


def entry_key(tok: bytes, path: bytes) -> bytes:
    """The LMDB key of path in token tok (see the module doc for long paths)."""
    if len(path) <= MAX_PLAIN_PATH:
        return tok + path
    return tok + path[:LONG_HEAD] + b"\x00" + hashlib.blake2b(path, digest_size=16).digest()


class StagingArea:
    """The per-workspace LMDB environment; safe to share between threads and processes.

    ``readonly``: only read (another process's staged changes: a worker of a
    parallel commit); the database must exist.

    ``sync=False`` (the mount daemon) commits without fsync (MDB_NOSYNC): a process
    crash loses nothing and the database stays consistent, an OS crash may lose
    the last transactions; the owner calls ``sync()`` on fsync and periodically.
    """

    def __init__(self, path: str, sync: bool = True, readonly: bool = False):
        if not readonly:
            os.makedirs(path, exist_ok=True)
        self.path = path
        self.synchronous = sync
        self._resize_lock = threading.Lock()
        # branch -> (stored bytes, state): the state this process last read or wrote
        self._last_state: dict[str, tuple[bytes, BranchState]] = {}
        # branch -> the staging token of its fresh state while none is stored: a read
        # of a branch with nothing staged costs no random token (an urandom call) each
        # time; dropped when a state is saved, so a token once stored is never fresh again
        self._fresh: dict[str, str] = {}
        # each branch's age as state() last read it: a save that keeps it writes nothing
        self._since_read: dict[str, Optional[int]] = {}
        # called with each write transaction's number (the change_counter() it commits
        # as; a retried try keeps it) inside the transaction, on the writing thread
        self.on_write: Optional[Callable[[int], None]] = None
        if not readonly:  # (a reader's database was made by a writer, which checked)
            lmdbcheck.check_disk(path)
        problem = lmdbcheck.check_data_file(path)  # before LMDB maps a file cut short
        if problem:
            raise lmdbcheck.damaged(path, problem)
        try:
            self.env = lmdb.open(path, map_size=_INITIAL_MAP, max_dbs=5, max_readers=256,
                                 subdir=True, lock=True, sync=sync, mode=0o600,  # files only: path exists
                                 readonly=readonly, create=not readonly)
            if not readonly:
                lmdbcheck.mark(path)
                if self.env.info()["map_size"] < _INITIAL_MAP:
                    self.env.set_mapsize(_INITIAL_MAP)
            # a reader of a database a writer opened: its tables already exist
            self.branches_db = self.env.open_db(b"branches", create=not readonly)
            self.entries_db = self.env.open_db(b"entries", create=not readonly)
            self.imports_db = self.env.open_db(b"imports", create=not readonly)
            self.long_db = self.env.open_db(b"long_paths", create=not readonly)
            self.since_db = self._optional_db(b"since", readonly)
        except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError) as exc:
            raise lmdbcheck.damaged(path, str(exc).rstrip(".")) from exc
        except lmdb.Error as exc:
            raise GravfsError(f"cannot open staging database {path}: {exc}") from exc

    def _optional_db(self, name: bytes, readonly: bool):
        """A table an earlier gravfs did not make: None when reading such a database."""
        try:
            return self.env.open_db(name, create=not readonly)
        except lmdb.NotFoundError:
            return None

    def close(self) -> None:
        if not self.synchronous:
            self.sync()
        self.env.close()

    def sync(self) -> None:
        """Flush committed transactions to disk (a no-op cost when already synced)."""
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise GravfsError(f"staging database {self.path}: cannot sync: {exc}") from exc

    # -- transactions -------------------------------------------------------------

    def write(self, fn, *args):
        """Run fn(txn, *args) in a write transaction, growing the map when it fills."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    if self.on_write is not None:
                        self.on_write(txn.id())
                    result = fn(txn, *args)
                    crash_point("staging:in-txn")
                crash_point("staging:written")
                return result
            except lmdb.MapFullError:
                self._grow()
            except lmdb.MapResizedError as exc:
                raise self._outgrown() from exc
            except lmdb.DiskError as exc:  # e.g. ENOSPC while writing pages
                raise GravfsError(f"staging database {self.path}: disk error: {exc}") from exc

    def _outgrown(self) -> GravfsError:
        return GravfsError(
            f"staging database {self.path} grew past this process's map of "
            f"{self.env.info()['map_size']} bytes (another process grew it); nothing is "
            "lost: restart this process (remount) to go on")

    def _grow(self) -> None:
        with self._resize_lock:
            size = self.env.info()["map_size"]
            if size >= _MAX_MAP:
                raise GravfsError(f"staging database {self.path} reached {size} bytes")
            log.info("growing staging map of %s to %d bytes", self.path, size * 2)
            self.env.set_mapsize(size * 2)

    def read_txn(self):
        try:
            return self.env.begin(write=False, buffers=False)
        except lmdb.MapResizedError as exc:
            raise self._outgrown() from exc

    def change_counter(self) -> int:
        """Grows with every write transaction committed by any process (LMDB's last
        transaction id): watchers compare it to see whether anything changed.

        Read as the id of a fresh read transaction's snapshot: a quarter of the cost
        of ``env.info()``, which builds a dict (the mount asks twice a lookup)."""
        txn = self.read_txn()
        try:
            return txn.id()
        finally:
            txn.abort()

    # -- branch state -------------------------------------------------------------

    def state(self, txn, branch: str) -> BranchState:
        name = branch.encode()
        raw = txn.get(name, db=self.branches_db)
        if raw is None:
            token = self._fresh.get(branch)
            if token is None:
                token = self._fresh[branch] = new_token()
            st = BranchState(staging=token)
        else:
            last = self._last_state.get(branch)
            if last is not None and last[0] == raw:  # unchanged since this process saw it
                st = last[1].copy()
            else:
                st = BranchState.load(raw)
                self._last_state[branch] = (raw, st.copy())
        if self.since_db is not None:
            since = txn.get(name, db=self.since_db)
            st.since_ns = None if since is None else int(since)
            self._since_read[branch] = st.since_ns
        return st

    def save_state(self, txn, branch: str, st: BranchState) -> None:
        name = branch.encode()
        raw = st.dump()
        txn.put(name, raw, db=self.branches_db)
        if self._since_read.get(branch, _UNKNOWN) != st.since_ns:  # (most saves keep it)
            if st.since_ns is None:
                txn.delete(name, db=self.since_db)
            else:
                txn.put(name, b"%d" % st.since_ns, db=self.since_db)
            self._since_read[branch] = st.since_ns
        self._fresh.pop(branch, None)
        # kept even if the transaction aborts: state() compares the stored bytes
        self._last_state[branch] = (raw, st.copy())

    def stored_state(self, branch: str) -> Optional[BranchState]:
        """The branch's state as stored, None when nothing was ever staged on it
        (get_state() returns a fresh state then)."""
        with self.read_txn() as txn:
            raw = txn.get(branch.encode(), db=self.branches_db)
        return None if raw is None else BranchState.load(raw)

    def get_state(self, branch: str) -> BranchState:
        with self.read_txn() as txn:
            return self.state(txn, branch)

    def update_state(self, branch: str, fn) -> BranchState:
        """Apply fn(state) (mutating it) atomically and return the new state."""

        def run(txn):
            st = self.state(txn, branch)
            fn(st)
            self.save_state(txn, branch, st)
            return st

        return self.write(run)

    def branch_names(self) -> list[str]:
        with self.read_txn() as txn:
            return [k.decode() for k, _ in txn.cursor(db=self.branches_db)]

    # -- entries --------------------------------------------------------------------

    def put_many(self, branch: str, items, base: Optional[str],
                 same_base: bool = False, provisional: frozenset = frozenset()
                 ) -> Optional[BranchState]:
        """Stage puts (value bytes) and tombstones (value None) in one transaction;
        returns the branch state after it (its counters feed the compaction sensor).

        ``base`` is the head commit the caller sees; it becomes the branch's base
        when staging was empty, so a later commit can detect concurrent changes.
        ``same_base``: stage nothing and return None when staging is based on another
        commit (checked in the same transaction). ``provisional``: paths whose puts are
        provisional (see the module doc).
        """
        items = list(items)
        for path, _ in items:
            check_path(path)

        def run(txn):
            st = self.state(txn, branch)
            if same_base and st.base and st.base != base:
                return None
            if st.base != base and (st.base is None or self._is_clean(txn, st)):
                st.base = base
            tok = bytes.fromhex(st.staging)
            cur = txn.cursor(db=self.entries_db)
            puts = tombs = 0
            for path, value in items:
                key = entry_key(tok, path)
                if len(key) > len(tok) + MAX_PLAIN_PATH:
                    txn.put(key, path, db=self.long_db)
                if st.provisional and cur.set_key(key) and cur.value()[:1] == PROVISIONAL:
                    st.provisional -= 1  # replaced (a created file's first close)
                if value is None:
                    cur.put(key, TOMBSTONE)
                    tombs += 1
                elif path in provisional:
                    cur.put(key, PROVISIONAL + value)
                    st.provisional += 1
                    puts += 1
                else:
                    cur.put(key, put_raw(path, value))
                    puts += 1
            st.puts += puts
            st.tombstones += tombs
            if st.since_ns is None and items:
                st.since_ns = time.time_ns()
            self.save_state(txn, branch, st)
            return st

        return self.write(run)

    def _is_clean(self, txn, st: BranchState) -> bool:
        if st.sealed or st.compacted:
            return False
        tok = bytes.fromhex(st.staging)
        cur = txn.cursor(db=self.entries_db)
        return not (cur.set_range(tok) and cur.key().startswith(tok))

    def lookup(self, txn, tokens: list[str], path: bytes) -> Optional[bytes]:
        """First hit of path in tokens (newest first): raw stored value or None."""
        for t in tokens:
            v = self.get_entry(txn, bytes.fromhex(t), path)
            if v is not None:
                return v
        return None

    def get_entry(self, txn, tok: bytes, path: bytes) -> Optional[bytes]:
        """The raw stored value of path in token tok (bytes), or None."""
        key = entry_key(tok, path)
        v = txn.get(key, db=self.entries_db)
        if v is not None and len(key) > len(tok) + MAX_PLAIN_PATH:
            if txn.get(key, db=self.long_db) != path:
                return None  # another path with the same head and hash: not stored
        return v

    def put_entry(self, txn, tok: bytes, path: bytes, raw: bytes) -> None:
        """Store a raw value (put_raw, PROVISIONAL + value, or TOMBSTONE) inside a write txn."""
        key = entry_key(tok, path)
        if len(key) > len(tok) + MAX_PLAIN_PATH:
            txn.put(key, path, db=self.long_db)
        txn.put(key, raw, db=self.entries_db)

    def delete_entry(self, txn, tok: bytes, path: bytes) -> bool:
        """Remove path's value from token tok inside a write txn; whether it was there."""
        key = entry_key(tok, path)
        if len(key) > len(tok) + MAX_PLAIN_PATH:
            txn.delete(key, db=self.long_db)
        return txn.delete(key, db=self.entries_db)

    def iter_token(self, txn, token: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """(path, raw stored value) of one token in path order from start."""
        tok = bytes.fromhex(token)
        n = len(tok)
        cur = txn.cursor(db=self.entries_db)
        if not cur.set_range(tok + start[:LONG_HEAD]):
            return
        more = True
        while more:
            k = cur.key()
            if not k.startswith(tok):
                return
            if len(k) - n <= LONG_HEAD:
                if k[n:] >= start:
                    yield k[n:], cur.value()
                more = cur.next()
                continue
            # the run of keys sharing this head (long ones and plain ones extending it)
            head = k[:n + LONG_HEAD]
            run = []
            while more and k.startswith(head):
                if len(k) - n > MAX_PLAIN_PATH:
                    path = txn.get(k, db=self.long_db)
                    if path is None:
                        log.warning("staged entry %s: its long path is missing; skipped",
                                    k[:n + 40].hex())
                    else:
                        run.append((bytes(path), cur.value()))
                else:
                    run.append((k[n:], cur.value()))
                more = cur.next()
                k = cur.key() if more else b""
            run.sort()
            for path, v in run:
                if path >= start:
                    yield path, v

    def token_is_empty(self, txn, token: str) -> bool:
        for _ in self.iter_token(txn, token):
            return False
        return True

    def carry_provisional(self, txn, st: BranchState, tokens: list[str]) -> int:
        """Copy the provisional puts that are the newest value of their path among
        ``tokens`` (newest first) into ``st``'s staging token, unless it holds that
        path: called before a commit or compaction drops the tokens it consumed.
        Scans the tokens only when the branch's count says there may be some."""
        if not st.provisional:
            return 0
        dest = bytes.fromhex(st.staging)
        seen: set[bytes] = set()
        carried = 0
        for t in tokens:
            for path, raw in self.iter_token(txn, t):
                if path in seen:
                    continue
                seen.add(path)
                if raw[:1] == PROVISIONAL and self.get_entry(txn, dest, path) is None:
                    self.put_entry(txn, dest, path, raw)
                    carried += 1
        # what the staging token holds now (written since the seal, or carried)
        st.provisional = sum(1 for _, raw in self.iter_token(txn, st.staging)
                             if raw[:1] == PROVISIONAL)
        return carried

    def put_token(self, token: str, items) -> int:
        """Stage puts (value bytes) and tombstones (None) into one token that no branch
        state lists (an import's); returns how many."""
        items = list(items)
        for path, _ in items:
            check_path(path)

        def run(txn):
            tok = bytes.fromhex(token)
            for path, value in items:
                self.put_entry(txn, tok, path, TOMBSTONE if value is None else put_raw(path, value))
            return len(items)

        return self.write(run)

    def delete_from_token(self, txn, token: str, paths) -> int:
        """Remove entries of one token (inside the caller's write txn)."""
        tok = bytes.fromhex(token)
        return sum(1 for p in paths if self.delete_entry(txn, tok, p))

    # -- imports ------------------------------------------------------------------

    def import_records(self, txn, branch: Optional[str] = None) -> dict[str, dict]:
        """token -> record of the imports staging outside their branch (of one branch)."""
        out = {}
        for k, v in txn.cursor(db=self.imports_db):
            rec = json.loads(v)
            if branch is None or rec.get("branch") == branch:
                out[k.hex()] = rec
        return out

    def get_import(self, txn, token: str) -> Optional[dict]:
        raw = txn.get(bytes.fromhex(token), db=self.imports_db)
        return None if raw is None else json.loads(raw)

    def put_import(self, txn, token: str, record: dict) -> None:
        txn.put(bytes.fromhex(token), _JSON.encode(record).encode(),
                db=self.imports_db)

    def drop_provisional(self) -> int:
        """Delete every provisional put that is still its path's newest value, in
        every branch (a tombstone in the staging token): for a mount starting after
        the one that created those files died before closing them."""

        def run(txn):
            n = 0
            for name in [k.decode() for k, _ in txn.cursor(db=self.branches_db)]:
                st = self.state(txn, name)
                if not st.provisional:
                    continue
                seen: set[bytes] = set()
                doomed = []
                for t in st.tokens():
                    for path, raw in self.iter_token(txn, t):
                        if path not in seen:
                            seen.add(path)
                            if raw[:1] == PROVISIONAL:
                                doomed.append(path)
                tok = bytes.fromhex(st.staging)
                for path in doomed:
                    self.put_entry(txn, tok, path, TOMBSTONE)
                st.provisional = 0
                st.tombstones += len(doomed)
                self.save_state(txn, name, st)
                n += len(doomed)
            return n

        return self.write(run)

    def drop_tokens(self, txn, tokens: list[str], expected: int = 0) -> int:
        """Delete every entry of the given tokens, and their import records (inside
        the caller's write txn). ``expected``: about how many entries they hold (the
        branch's write counters), which says whether emptying the table may pay."""
        toks = sorted(bytes.fromhex(t) for t in tokens)
        for tok in toks:
            txn.delete(tok, db=self.imports_db)
        dropped = self._drop_by_emptying(txn, toks, expected)
        if dropped is None:
            dropped = sum(_delete_prefix(txn, self.entries_db, tok) for tok in toks)
        for tok in toks:
            _delete_prefix(txn, self.long_db, tok)
        return dropped

    def _drop_by_emptying(self, txn, toks: list[bytes], expected: int) -> Optional[int]:
        """When the tokens hold nearly all of the entries table (the commit of a bulk
        load), empty the table in one LMDB call and put the other entries back: a
        cursor delete per key cost a 1M-entry commit 0.5 s, all of it serial. None
        (nothing done) when the rest is, or is expected to be, more than
        1/KEEP_RATIO of what goes: collecting it is then given up early."""
        total = txn.stat(self.entries_db)["entries"]
        if total < EMPTY_AT or (total - expected) * KEEP_RATIO > expected:
            return None
        limit = total // (KEEP_RATIO + 1)
        kept: list[tuple[bytes, bytes]] = []
        cur = txn.cursor(db=self.entries_db)
        on = cur.first()
        for tok in [*toks, None]:  # the entries between the tokens' key ranges
            while on and (tok is None or cur.key() < tok):
                kept.append(cur.item())
                if len(kept) > limit:
                    return None
                on = cur.next()
            if tok is not None:
                after = prefix_end(tok)
                on = on and after is not None and cur.set_range(after)
        txn.drop(self.entries_db, delete=False)
        if kept:
            txn.cursor(db=self.entries_db).putmulti(kept, append=True)
        log.debug("dropped %d staged entries by emptying the table (%d put back)",
                  total - len(kept), len(kept))
        return total - len(kept)

    def drop_branch(self, txn, branch: str) -> None:
        st = self.state(txn, branch)
        self.drop_tokens(txn, st.tokens() + list(self.import_records(txn, branch)))
        txn.delete(branch.encode(), db=self.branches_db)
        txn.delete(branch.encode(), db=self.since_db)
        self._since_read.pop(branch, None)


def _delete_prefix(txn, db, prefix: bytes) -> int:
    """Delete the keys of ``db`` starting with ``prefix``; how many."""
    n = 0
    cur = txn.cursor(db=db)
    if cur.set_range(prefix):
        while cur.key().startswith(prefix):
            if not cur.delete():
                break
            n += 1
    return n
