"""Bulk import of a directory tree on Spark, as one commit.

The driver lists the top of the tree and splits it into units (directories
scanned by one task each, plus the loose files of the directories above
them). Executors list their units, stat, hash and upload contents as
content-addressed data objects (gravfs's data plane, dedup as everywhere)
and emit (key, encoded entry) records exactly as ``gravfs import`` stages
them. gravfs.spark.treejob turns the records into one tree (sorted range
partitions written by the tasks, seams stitched by the driver) and commits
it onto the branch head as the single-process import commits its staged
token (puts over the head: files already under the prefix and absent from
the source stay), moving the head by compare-and-swap. Until that swap
nothing is visible: a killed import leaves only unreferenced objects, and
running it again completes it.
"""

from __future__ import annotations

import logging
import os
import stat as statmod
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Optional

from gravfs.errors import GravfsError
from gravfs.fs.entry import (KIND_DIRECTORY, KIND_FILE, KIND_SYMLINK, EntryInfo, encode_entry,
                             entry_identity)
from gravfs.fs.importer import scan
from gravfs.fs.paths import to_key
from gravfs.fs.repository import Repository
from gravfs.spark.taskstore import task_store
from gravfs.spark.treejob import land_tree, write_tree
from gravfs.version.committed.record import encode_value
from gravfs.version.committer import Committer, NothingToCommitError
from gravfs.version.refs.commits import Commit

log = logging.getLogger(__name__)

UNITS_PER_CORE = 4   # listing tasks per default-parallelism slot (smooths skew)
MAX_SPLIT_DEPTH = 3  # directories below this depth are always listed by one task
UPLOAD_THREADS = 4   # per task: hashlib and boto3 release the GIL


@dataclass
class SparkImportResult:
    commit: Commit
    files: int        # entries imported: files, symlinks, empty directories
    partitions: int
    ranges: int       # ranges of the imported tree
    ranges_rewritten: int  # by the driver at the seams


# --- listing (driver) -------------------------------------------------------------

def split_units(src: str, target: int) -> list[tuple[str, bool]]:
    """(relative dir, recursive) units covering the tree under src.

    A non-recursive unit stands for a directory's own files and symlinks (and
    the directory itself when it is empty); its subdirectories are units of
    their own. Directories are split breadth first until there are at least
    ``target`` units or MAX_SPLIT_DEPTH is reached.
    """
    units: list[tuple[str, bool]] = []
    frontier = [""]
    depth = 0
    while frontier:
        if depth >= MAX_SPLIT_DEPTH or len(units) + len(frontier) >= target:
            units += [(d, True) for d in frontier]
            break
        nxt = []
        for d in frontier:
            units.append((d, False))
            for e in _scandir(src, d):
                if e.is_dir(follow_symlinks=False):
                    nxt.append(f"{d}/{e.name}" if d else e.name)
        frontier = nxt
        depth += 1
    return units


def _scandir(src: str, rel: str) -> list:
    full = os.path.join(src, rel) if rel else src
    try:
        return sorted(os.scandir(full), key=lambda e: e.name)
    except OSError as exc:
        raise GravfsError(f"cannot read directory {full}: {exc.strerror}") from exc


# --- listing, hashing, uploading (executors) ----------------------------------------

def list_unit(src: str, rel: str, recursive: bool) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, kind, stat) of a unit, as gravfs.fs.importer.scan yields them."""
    full = os.path.join(src, rel) if rel else src
    if recursive:
        found = False
        for r, kind, st in scan(full):
            found = True
            yield (f"{rel}/{r}" if rel else r), kind, st
        if not found and rel and not os.listdir(full):
            yield rel, "dir", os.stat(full)
        return
    entries = _scandir(src, rel)
    if rel and not entries:
        yield rel, "dir", os.stat(full)
    for e in entries:
        st = e.stat(follow_symlinks=False)
        r = f"{rel}/{e.name}" if rel else e.name
        if statmod.S_ISLNK(st.st_mode):
            yield r, "symlink", st
        elif statmod.S_ISREG(st.st_mode):
            yield r, "file", st
        elif not statmod.S_ISDIR(st.st_mode):
            log.warning("skipping %s: not a regular file, directory or symlink", r)


def entry_of(data, src: str, rel: str, kind: str, st: os.stat_result) -> EntryInfo:
    """The entry ``gravfs import`` stages for one listed item (uploading a file's content)."""
    if kind == "file":
        address, size = data.put_path(os.path.join(src, rel))
        return EntryInfo(address=address, size=size, mtime_ns=st.st_mtime_ns, mode=st.st_mode,
                         kind=KIND_FILE)
    if kind == "symlink":
        target = os.readlink(os.path.join(src, rel))
        return EntryInfo(address="", size=len(target.encode()), mtime_ns=st.st_mtime_ns,
                         mode=st.st_mode, kind=KIND_SYMLINK, symlink_target=target)
    return EntryInfo(address="", size=0, mtime_ns=st.st_mtime_ns, mode=st.st_mode,
                     kind=KIND_DIRECTORY)


def import_unit(store_url: str, src: str, base: bytes, unit: tuple[str, bool]
                ) -> Iterator[tuple[bytes, bytes]]:
    """(key, encoded value) records of one unit, contents uploaded (runs on an executor)."""
    data = task_store(store_url).data
    items = list(list_unit(src, *unit))

    def record(item) -> tuple[bytes, bytes]:
        rel, kind, st = item
        e = entry_of(data, src, rel, kind, st)
        key = base + to_key(rel) + (b"/" if kind == "dir" else b"")
        return key, encode_value(entry_identity(e), encode_entry(e))

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        yield from pool.map(record, items)


# --- the job (driver) ----------------------------------------------------------------

def check_inputs(repo, src: str, branch: str) -> Commit:
    """What an import refuses, checked before any Spark work (the CLI calls it before
    the JVM starts): the branch's head commit, or one clear error."""
    if not os.path.isdir(src):
        raise GravfsError(f"{src}: not a directory")
    head = repo.commits.get(repo.head(branch, fresh=True))
    if not Committer(repo).is_clean(branch):
        raise GravfsError(f"branch {branch!r} has uncommitted changes; commit or reset them "
                          "first")
    return head


def import_tree(spark, repo, src: str, branch: str, prefix: str = "",
                message: Optional[str] = None, state_dir: Optional[str] = None,
                partitions: Optional[int] = None) -> SparkImportResult:
    """Import the directory tree ``src`` into ``branch:prefix`` as one commit.

    ``repo``: a Repository, or a store URL (opened with ``state_dir`` and closed
    again). Executors open the store from its URL, so it must name the same
    store for them (S3, or a path every worker sees). ``partitions``: how many
    sorted partitions write ranges (default: Spark's default parallelism); the
    resulting tree does not depend on it.
    """
    if isinstance(repo, str):
        with Repository.open(repo, state_dir) as r:
            return import_tree(spark, r, src, branch, prefix, message, partitions=partitions)
    head = check_inputs(repo, src, branch)
    source = os.path.abspath(src)
    pfx = to_key(prefix)
    base = pfx + b"/" if pfx else b""
    store_url = repo.store.url
    sc = spark.sparkContext
    nparts = partitions or sc.defaultParallelism
    slices = UNITS_PER_CORE * sc.defaultParallelism
    units = split_units(source, slices)
    t0 = time.monotonic()
    from pyspark import StorageLevel
    # a few tasks per core, each listing several units: every stage over these
    # partitions (sortByKey counts and samples them) costs a few tasks, not one a unit
    records = (sc.parallelize(units, min(len(units), slices))
               .flatMap(lambda u: import_unit(store_url, source, base, u))
               .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        tree, files, used, rewritten = write_tree(repo, records, nparts, f"importing {src}")
    finally:
        try:
            records.unpersist()
        except Exception:  # the context may be gone with a failure
            pass
    log.info("imported %d entries in %.1fs", files, time.monotonic() - t0)
    if tree is None:
        raise NothingToCommitError(f"nothing to commit on branch {branch!r}: {src} is empty")
    commit = land_tree(repo, branch, head, tree, message or f"Import {source}",
                       {"import_source": source})
    return SparkImportResult(commit, files, used, len(tree.ranges), rewritten)


