"""``gravfs spark export REF DEST [--since REF2]``: a commit's files, copied by the executors.

Full export: one task per range of REF; each reads its range with gravfs's SST
reader, copies the range's entries to DEST (gravfs.spark.exportdest: verified
copies, a few threads a task) and writes its report part. Incremental export
(``--since REF2``, DEST holding a finished export of REF2): the ranges that
differ between REF2 and REF are diffed by the tasks (gravfs.spark.treediff, equal
ranges never read), kept, then what was removed is deleted (one stage), the
directories that left empty are removed (driver), and what was added or
changed is copied (second stage).

DEST's own files: ``_gravfs_export/export.json`` (which commit is being
exported, written first), ``_gravfs_export/report-<commit>[-since-<commit>]/``
(a Parquet part per task: path, action, size, checksum... of every entry) and
``_SUCCESS`` (JSON summary), written last. A re-run of the same command
resumes: a task whose report part exists is not run again, and a file whose
verified copy is already at its path is not copied again (action "present").
A commit holding top-level ``_SUCCESS`` or ``_gravfs_export`` is refused.

Paths in DEST are the paths ``gravfs ls`` shows (foreign names escaped).
Contents are read through the data plane (verified against their address);
by-reference entries from their source (gravfs.data.external: checked against
their size and e_tag).
"""

from __future__ import annotations

import bisect
import io
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator, Optional

from gravfs.data.objects import digest_of
from gravfs.data.sparse import is_sparse
from gravfs.errors import GravfsError
from gravfs.fs.entry import ADDRESS_FULL, EntryInfo, decode_entry
from gravfs.fs.ownpaths import owner_of
from gravfs.fs.paths import escape_key, show, split_last
from gravfs.fs.repository import KIND_NAMES
from gravfs.spark.treediff import DiffPlan, Segment, plan, segment_diffs
from gravfs.spark.tables import task_ranges, tree_of
from gravfs.spark.exportdest import (COPIED, DELETED, NOT_UTF8, PRESENT, RESERVED, SKIPPED,
                                     SPECIAL, STATE_DIR, SUCCESS, TOO_LONG, Copy, open_dest)
from gravfs.spark.runtime import job_failed
from gravfs.spark.taskstore import task_store
from gravfs.version.committed.record import decode_value, encode_value
from gravfs.version.committed.results import ADDED, CHANGED, REMOVED

log = logging.getLogger(__name__)

STATE = f"{STATE_DIR}/export.json"
COPY_THREADS = 4   # per task: reads and writes release the GIL
CHUNK = 8 << 20
REPORT_COLUMNS = [("path", "string"), ("key", "binary"), ("action", "string"),
                  ("kind", "string"), ("size", "int64"), ("address", "string"),
                  ("sha256", "string"), ("mtime_ns", "int64"), ("mode", "int32"),
                  ("reason", "string")]
ACTIONS = (COPIED, PRESENT, DELETED, SKIPPED)


@dataclass
class ExportJob:
    """An export checked against DEST's state (check_export), ready to run."""

    ref: str
    commit: str
    dest: str
    since: Optional[str] = None      # commit of --since
    resume: bool = False             # DEST holds an unfinished run of this same export
    done: bool = False               # DEST already holds this export: nothing to do
    previous: dict = field(default_factory=dict)  # DEST's _SUCCESS when done

    @property
    def report_dir(self) -> str:
        name = f"report-{self.commit}" + (f"-since-{self.since}" if self.since else "")
        return f"{STATE_DIR}/{name}"

    def state(self) -> dict:
        return {"commit": self.commit, "since": self.since, "ref": self.ref,
                "report": self.report_dir}

    def summary(self) -> dict:
        return dict(self.previous)


# --- checks (driver, before Spark starts) --------------------------------------------------

def _read_json(dest, rel: str) -> Optional[dict]:
    data = dest.get_bytes(rel)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def check_export(repo, ref: str, dest_url: str, since: Optional[str] = None) -> ExportJob:
    """What exporting ``ref`` to ``dest_url`` means given DEST's state, or one GravfsError:
    a missing ref, a DEST that cannot be written, a DEST that is not empty and holds no
    export of this ref (or, with ``since``, no finished export of that ref)."""
    commit, mr = tree_of(repo, ref)
    since_id = tree_of(repo, since)[0] if since is not None else None
    for name in RESERVED:
        key = name.encode()
        if repo.committed.get(mr.id, key) is not None or any(
                True for _ in _under(repo, mr.id, key + b"/")):
            raise GravfsError(f"{ref} holds a top-level {name!r}, a name the export uses for "
                              "its own files")
    dest = open_dest(dest_url)
    what = owner_of(repo.store.url, repo.workspace.state_dir, dest_url)
    if what is not None:
        raise GravfsError(f"cannot export into {dest.root if dest.kind == 'dir' else dest_url}: "
                          f"it is in {what}")
    dest.check()
    job = ExportJob(ref, commit, dest_url, since_id)
    success = _read_json(dest, SUCCESS)
    state = _read_json(dest, STATE)
    if success is not None and success.get("commit") == commit:
        job.done, job.previous = True, success
        return job
    if since_id is None:
        if state is not None and state.get("commit") == commit and not state.get("since"):
            job.resume = True
        elif not _empty_but_ours(dest):
            what = _holds(success, state)
            raise GravfsError(f"{dest_url} is not empty and {what}: export into an empty "
                              f"destination, or use --since")
        return job
    if success is not None and success.get("commit") == since_id:
        return job
    if state is not None and state.get("commit") == commit and state.get("since") == since_id:
        job.resume = True
        return job
    raise GravfsError(f"{dest_url} holds no finished export of {since} "
                      f"({_holds(success, state)})")


def _under(repo, mr_id: str, prefix: bytes) -> Iterator:
    for rec in repo.committed.iter(mr_id, prefix):
        if rec.key.startswith(prefix):
            yield rec
        return


def _empty_but_ours(dest) -> bool:
    """DEST is empty, or holds only the state directory of a run that wrote nothing."""
    if dest.is_empty():
        return True
    if dest.kind == "dir":
        names = os.listdir(dest.root)
        if names == [STATE_DIR]:
            return set(os.listdir(f"{dest.root}/{STATE_DIR}")) <= {"tmp"}
    return False


def _holds(success: Optional[dict], state: Optional[dict]) -> str:
    if success:
        return f"holds the export of commit {str(success.get('commit'))[:12]}"
    if state:
        return f"holds an unfinished export of commit {str(state.get('commit'))[:12]}"
    return "is not a gravfs export"


# --- copying one entry (executors) ----------------------------------------------------------

def _kind(e: EntryInfo) -> str:
    """The entry's kind as ``gravfs ls`` names it (exportdest.SPECIAL: the special files)."""
    return KIND_NAMES.get(e.kind, "file")


def _chunks(ts, e: EntryInfo) -> Iterator[bytes]:
    """The entry's content by chunks, each verified before it is yielded."""
    if e.address_type == ADDRESS_FULL:
        from gravfs.data.external import source_of
        yield from ts.data.external.iter(source_of(e), CHUNK)
        return
    if e.size == 0:
        return
    with ts.data.acquire(e.address, chunk_checked=True) as h:
        pos = 0
        while pos < h.size:
            buf = h.read(pos, min(CHUNK, h.size - pos))
            if not buf:
                break
            pos += len(buf)
            yield buf


def _known_sha(e: EntryInfo) -> Optional[str]:
    """The SHA-256 of a content known without reading it (a plain data object's name)."""
    if e.size == 0:
        return "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    if e.address_type == ADDRESS_FULL or is_sparse(e.address):
        return None
    return digest_of(e.address)


def copy_entry(ts, dest, key: bytes, e: EntryInfo) -> Copy:
    """Copy one entry to DEST unless a verified copy is there already."""
    kind = _kind(e)
    if dest.kind == "s3":
        if kind != "file":
            what = "a directory" if kind == "dir" else f"a {kind}"
            return Copy(SKIPPED, reason=f"{what}: S3 has none")
        rel = escape_key(key, directory=False)
        unfit = dest.unfit(rel)
        if unfit is not None:
            return Copy(SKIPPED, reason=unfit)
        meta = dest.metadata(e.address, e.e_tag, e.mode, e.mtime_ns)
        if dest.present(rel, e.size, meta):
            return Copy(PRESENT, _known_sha(e))
        return dest.write_file(rel, _chunks(ts, e), e.size, meta)
    rel = escape_key(key, directory=kind == "dir")
    sha = _known_sha(e) if kind == "file" else None
    if dest.present(rel, kind, e.size, sha, e.symlink_target, e.mode, e.mtime_ns, e.rdev):
        return Copy(PRESENT, sha)
    if kind == "dir":
        return dest.write_dir(rel, e.mode)
    if kind == "symlink":
        return dest.write_symlink(rel, e.symlink_target, e.mtime_ns)
    if kind in SPECIAL:
        return dest.write_special(rel, kind, e.rdev, e.mode, e.mtime_ns)
    copied = dest.write_file(rel, _chunks(ts, e), e.size, e.mode, e.mtime_ns,
                             sparse=is_sparse(e.address))
    if sha is not None and copied.sha256 != sha:
        raise GravfsError(f"{show(key)}: copied content hashes to {copied.sha256[:16]}..., "
                          f"its address is {sha[:16]}...")
    return copied


def _row(key: bytes, e: Optional[EntryInfo], c: Copy) -> dict:
    kind = _kind(e) if e is not None else None
    return {"path": show(key, directory=kind == "dir"), "key": key, "action": c.action,
            "kind": kind, "size": e.size if e else None,
            "address": (e.address or None) if e else None, "sha256": c.sha256,
            "mtime_ns": e.mtime_ns if e else None, "mode": e.mode if e else None,
            "reason": c.reason}


def _report(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    schema = pa.schema([(n, getattr(pa, t)()) for n, t in REPORT_COLUMNS])
    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _counts(rows: list[dict]) -> dict:
    out = {a: 0 for a in ACTIONS}
    out["bytes_copied"] = 0
    for r in rows:
        out[r["action"]] += 1
        if r["action"] == COPIED and r["kind"] == "file":
            out["bytes_copied"] += r["size"] or 0
    return out


def _done_part(dest, part: str) -> Optional[dict]:
    """The counts of a report part an earlier run wrote (None: not written)."""
    data = dest.get_bytes(part)
    if data is None:
        return None
    import pyarrow.parquet as pq
    return _counts(pq.read_table(io.BytesIO(data)).to_pylist())


SHADOWED = ("a directory of the tree has the same name (its keys under it are exported; "
            "the mount shows the directory too)")


def shadowed_files(rs, metarange_id: str, keys: list[bytes], whole_range: bool) -> set[bytes]:
    """Keys among ``keys`` (sorted) that name a file or symlink while the tree also holds
    keys under them (imported from an object store): a directory can hold only one.
    ``whole_range``: the keys are a whole range of the tree, so a key under one of them
    is found among them unless it lies past their end (then, as for keys that are
    only some of the tree's, one seek in the tree)."""
    out, mr = set(), None
    for k in keys:
        if k.endswith(b"/"):
            continue  # a directory's own marker
        under = k + b"/"
        if whole_range:
            i = bisect.bisect_left(keys, under)
            if i < len(keys):
                if keys[i].startswith(under):
                    out.add(k)
                continue
        if mr is None:
            mr = rs.metarange(metarange_id)
        nxt = rs.first_key_from(mr, under)
        if nxt is not None and nxt.startswith(under):
            out.add(k)
    return out


def copy_items(store_url: str, dest_url: str, part: str, items: Iterator[tuple[bytes, bytes]],
               metarange_id: str, whole_range: bool) -> dict:
    """Copy (key, encoded value) items of the tree ``metarange_id``, write the report
    part; returns the counts. In a directory, a file whose name a directory of the
    tree takes is skipped (see shadowed_files; the report gives the reason)."""
    dest = open_dest(dest_url)
    done = _done_part(dest, part)
    if done is not None:
        return done
    ts = task_store(store_url)
    items = list(items)
    shadowed = shadowed_files(task_ranges(store_url), metarange_id, sorted(k for k, _ in items),
                              whole_range) if dest.kind == "dir" else set()
    if shadowed:
        log.warning("%d file(s) not exported: a directory of the tree has the same name "
                    "(%s)", len(shadowed), ", ".join(show(k) for k in sorted(shadowed)[:5]))

    def one(kv):
        key, value = kv
        e = decode_entry(decode_value(value)[1])
        if key in shadowed:
            return _row(key, e, Copy(SKIPPED, reason=SHADOWED))
        return _row(key, e, copy_entry(ts, dest, key, e))

    with ThreadPoolExecutor(COPY_THREADS) as pool:
        rows = list(pool.map(one, items))
    unfit = [r["path"] for r in rows if r["reason"] in (NOT_UTF8, TOO_LONG)]
    if unfit:
        log.warning("%d file(s) not exported: S3 cannot hold their keys (%s)",
                    len(unfit), ", ".join(unfit[:5]))
    dest.put_bytes(part, _report(rows))
    return _counts(rows)


def export_range(store_url: str, dest_url: str, report_dir: str, metarange_id: str,
                 range_id: str) -> dict:
    """A full export's task: the entries of one range of the tree ``metarange_id``."""
    part = f"{report_dir}/part-{range_id}.parquet"
    return copy_items(store_url, dest_url, part,
                      task_ranges(store_url).range_items(range_id, fill_cache=False),
                      metarange_id, whole_range=True)


def delete_items(dest_url: str, part: str, items: list[tuple[bytes, bytes]]) -> dict:
    """An incremental export's deletions (key, encoded left value); returns the counts and
    the parent directories that may have been left empty."""
    dest = open_dest(dest_url)
    parents = set()
    rows = []
    for key, value in items:
        e = decode_entry(decode_value(value)[1])
        kind = _kind(e)
        own = key[:-1] if kind == "dir" and key.endswith(b"/") else key
        rel = escape_key(key, directory=False)
        unfit = dest.unfit(rel) if dest.kind == "s3" and kind == "file" else None
        if kind == "dir":
            parents.add(own)  # removed once empty, unless REF still has it
        elif unfit is None and (dest.kind == "dir" or kind == "file"):  # (S3 holds no other)
            dest.delete_entry(rel)
        parents.add(split_last(own)[0])
        # a key S3 cannot hold was never exported: nothing to delete
        rows.append(_row(key, e, Copy(SKIPPED, reason=unfit) if unfit else Copy(DELETED)))
    if dest.get_bytes(part) is None:
        dest.put_bytes(part, _report(rows))
    out = _counts(rows)
    out["parents"] = sorted(p for p in parents if p)
    return out


# --- the job (driver) ----------------------------------------------------------------------

def _total(results: list[dict]) -> dict:
    out = {a: 0 for a in ACTIONS}
    out["bytes_copied"] = 0
    for r in results:
        for k in out:
            out[k] += r.get(k, 0)
    return out


def _begin(dest, job: ExportJob) -> None:
    """Record the run in DEST (first), then drop the _SUCCESS of the export it replaces."""
    dest.put_bytes(STATE, json.dumps(job.state(), sort_keys=True).encode())
    if job.since is not None:
        dest.remove(SUCCESS)


def _finish(dest, job: ExportJob, res: dict) -> dict:
    summary = {**job.state(), **res, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime())}
    dest.put_bytes(SUCCESS, (json.dumps(summary, sort_keys=True) + "\n").encode())
    dest.cleanup()  # after: _SUCCESS is staged there too (a kill between leaves it for prepare)
    return summary


def run_export(spark, repo, job: ExportJob) -> dict:
    """Run a checked export (see the module doc); returns the summary written to _SUCCESS."""
    dest = open_dest(job.dest)
    dest.prepare()
    if job.resume:
        log.info("resuming the unfinished export of %s in %s", job.commit[:12], job.dest)
    _begin(dest, job)
    if job.since is None:
        res = _full(spark, repo, job)
    else:
        res = _incremental(spark, repo, job)
    return _finish(dest, job, res)


def _full(spark, repo, job: ExportJob) -> dict:
    _, mr = tree_of(repo, job.commit)
    url, dest_url, report = repo.store.url, job.dest, job.report_dir
    ids = list(mr.ids)
    t0 = time.monotonic()
    results = []
    if ids:
        rdd = spark.sparkContext.parallelize(ids, len(ids))
        try:
            results = rdd.map(lambda rid: export_range(url, dest_url, report, mr.id,
                                                       rid)).collect()
        except Exception as exc:  # a task failed after its retries
            raise job_failed(exc, f"exporting {job.ref} to {job.dest}") from exc
    res = _total(results)
    log.info("exported %d entries of %s in %d tasks (%.1fs)", mr.count, job.commit[:12],
             len(ids), time.monotonic() - t0)
    return {**res, "entries": mr.count, "ranges": len(ids), "ranges_read": len(ids)}


def _incremental(spark, repo, job: ExportJob) -> dict:
    from pyspark import StorageLevel
    p: DiffPlan = plan(repo, job.since, job.commit)
    url, dest_url, report = repo.store.url, job.dest, job.report_dir
    sc = spark.sparkContext
    res = {"entries": 0, "ranges": p.ranges_right, "ranges_read": p.ranges_read}
    if not p.segments:
        return {**_total([]), **res}
    n = max(1, min(len(p.segments), 4 * sc.defaultParallelism))

    def diffs(segs: Iterator[Segment]):
        for seg in segs:
            for d in segment_diffs(url, seg):
                rec = d.right if d.kind in (ADDED, CHANGED) else d.left
                yield d.kind, d.key, _encoded(rec)

    changes = sc.parallelize(p.segments, n).mapPartitions(diffs) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            removed = changes.filter(lambda c: c[0] == REMOVED) \
                .mapPartitionsWithIndex(lambda i, it: [delete_items(
                    dest_url, f"{report}/deleted-{i:05d}-of-{n:05d}.parquet",
                    [(k, v) for _, k, v in it])]).collect()
            _sweep(repo, job, sorted({d for r in removed for d in r["parents"]}))
            tree = repo.commits.get(job.commit).metarange
            copied = changes.filter(lambda c: c[0] != REMOVED) \
                .mapPartitionsWithIndex(lambda i, it: [copy_items(
                    url, dest_url, f"{report}/copied-{i:05d}-of-{n:05d}.parquet",
                    ((k, v) for _, k, v in it), tree, whole_range=False)]).collect()
        except Exception as exc:
            raise job_failed(exc, f"exporting {job.ref} since {job.since[:12]} to "
                             f"{job.dest}") from exc
    finally:
        try:
            changes.unpersist()
        except Exception:  # the context may be gone with a failure
            pass
    out = _total(removed + copied)
    res["entries"] = sum(out[a] for a in ACTIONS)
    return {**out, **res}


def _encoded(rec) -> bytes:
    return encode_value(rec.identity, rec.data)


def _sweep(repo, job: ExportJob, parents: list[bytes]) -> None:
    """Remove the directories of DEST that deletions left empty and REF does not hold
    (deepest first; a removed one's parent is looked at next)."""
    dest = open_dest(job.dest)
    if dest.kind != "dir" or not parents:
        return
    mr_id = repo.commits.get(job.commit).metarange
    todo = set(parents)
    removed = 0
    while todo:
        d = max(todo, key=lambda k: (k.count(b"/"), k))
        todo.discard(d)
        if any(True for _ in _under(repo, mr_id, d + b"/")):
            continue  # REF holds something under it: it stays
        if dest.remove_dir_if_empty(escape_key(d)):
            removed += 1
            up = split_last(d)[0]
            if up:
                todo.add(up)
    log.info("removed %d directories the deletions left empty", removed)
