"""Bulk import on Spark, as one commit: the job, and the local-tree source.

A source (a directory tree here; an S3 prefix, gravfs.spark.s3source; an
inventory manifest, gravfs.spark.manifest) checks its input before Spark
starts and makes an RDD of (key, encoded entry) records: executors list
their part of it and, in copy mode, upload contents as content-addressed
data objects (gravfs's data plane, dedup as everywhere); with
``by_reference`` the entries carry the source's full address instead
(/work/notes/byref.md). gravfs.spark.treejob turns the records into one tree
(sorted range partitions written by the tasks, seams stitched by the driver)
and makes it the content of BRANCH:PREFIX, as ``gravfs import`` does (what
the prefix held and the source lacks is removed), moving the head by
compare-and-swap. Until that swap nothing is visible: a killed import leaves
only unreferenced objects, and running it again completes it.

For a directory tree the driver lists the top and splits it into units
(directories scanned by one task each, plus the loose files of the
directories above them); the entries are exactly those ``gravfs import``
stages.
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
from gravfs.fs.entry import encode_entry, entry_identity
from gravfs.fs.importer import SPECIAL, check_source, entry_of, own_dirs_under, scan, \
    skip_special
from gravfs.fs.paths import show, to_key
from gravfs.fs.repository import Repository
from gravfs.spark import leftout
from gravfs.spark.progress import counter
from gravfs.spark.runtime import job_failed
from gravfs.spark.taskstore import task_store
from gravfs.spark.treejob import even_bounds, land_tree, write_tree
from gravfs.threadmap import ordered_map
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
    file_dirs: int = 0     # keys that are both a file and a directory (object stores)
    file_dirs_shown: tuple = ()  # the first few of them
    left_out: int = 0      # source paths not imported (special files, folder markers with bytes)
    left_out_shown: tuple = ()  # the first few of them
    left_out_as: str = ""  # why (the source's left_out_as)


# --- listing (driver) -------------------------------------------------------------

def split_units(src: str, target: int, leave_out: Optional[dict[str, str]] = None
                ) -> list[tuple[str, bool]]:
    """(relative dir, recursive) units covering the tree under src.

    A non-recursive unit stands for a directory's own files and symlinks (and
    the directory itself when it is empty); its subdirectories are units of
    their own. Directories are split breadth first until there are at least
    ``target`` units or MAX_SPLIT_DEPTH is reached. The directories ``leave_out``
    names (see gravfs.fs.importer.own_dirs_under) are in none.
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
                    r = f"{d}/{e.name}" if d else e.name
                    if leave_out and r in leave_out:
                        log.warning("leaving out %s: it is %s", e.path, leave_out[r])
                        continue
                    nxt.append(r)
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

def list_unit(src: str, rel: str, recursive: bool, leave_out: Optional[dict[str, str]] = None,
              skipped: Optional[list[str]] = None) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, kind, stat) of a unit, as gravfs.fs.importer.scan yields them (and
    the special files it passes over added to ``skipped``)."""
    full = os.path.join(src, rel) if rel else src
    if recursive:
        found = False
        inner = {k[len(rel) + 1:] if rel else k: v for k, v in (leave_out or {}).items()
                 if not rel or k.startswith(rel + "/")}
        inside: list[str] = []
        for r, kind, st in scan(full, inner, inside):
            found = True
            yield (f"{rel}/{r}" if rel else r), kind, st
        if skipped is not None:
            skipped += (f"{rel}/{r}" if rel else r for r in inside)
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
            skip_special(r, skipped)


def import_unit(store_url: str, src: str, base: bytes, unit: tuple[str, bool],
                by_reference: bool = False, leave_out: Optional[dict[str, str]] = None,
                left_out=None) -> Iterator[tuple[bytes, bytes]]:
    """(key, encoded value) records of one unit, contents uploaded unless
    ``by_reference`` (runs on an executor); the special files it passes over go to
    the accumulator ``left_out`` (gravfs.spark.leftout)."""
    data = None if by_reference else task_store(store_url).bulk_data()[0]
    skipped: list[str] = []
    items = list(list_unit(src, *unit, leave_out, skipped))
    if left_out is not None:
        leftout.note(left_out, unit, skipped)

    def record(item) -> tuple[bytes, bytes]:
        rel, kind, st = item
        e = entry_of(data, src, rel, kind, st)
        key = base + to_key(rel) + (b"/" if kind == "dir" else b"")
        return key, encode_value(entry_identity(e), encode_entry(e))

    if by_reference:
        yield from map(record, items)
        return
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        yield from ordered_map(pool, record, items, 16 * UPLOAD_THREADS)


class TreeSource:
    """A local or shared directory (every executor reads it at the same path)."""

    kind = "tree"
    left_out_as = SPECIAL  # what its executors pass over (gravfs.spark.leftout)

    def __init__(self, src: str):
        self.src = src
        self.name = os.path.abspath(src)
        self._listed: Optional[list[tuple[str, bool]]] = None
        self.leave_out: dict[str, str] = {}  # the repository's own directories (check_inputs)

    def check(self) -> None:
        check_source(self.src)

    def _units(self, sc) -> list[tuple[str, bool]]:
        if self._listed is None:
            self._listed = split_units(self.name, UNITS_PER_CORE * sc.defaultParallelism,
                                       self.leave_out)
        return self._listed

    def sample_bounds(self, sc, base: bytes, partitions: int) -> Optional[list[bytes]]:
        """Split keys from the units the driver listed (no pass over the records: they
        are computed once, uploads included, and shuffled straight into sorted
        partitions). Units hold similar shares of a partitioned table's files; a
        skewed tree gives uneven partitions, never a different tree."""
        keys = sorted({base + to_key(rel) for rel, _ in self._units(sc) if rel})
        return even_bounds(keys, partitions)

    def records(self, sc, store_url: str, base: bytes, by_reference: bool, rows, left_out):
        source = self.name
        slices = UNITS_PER_CORE * sc.defaultParallelism
        units = self._units(sc)
        leave_out = self.leave_out

        def part_records(units):
            for u in units:
                n = 0
                for rec in import_unit(store_url, source, base, u, by_reference, leave_out,
                                       left_out):
                    n += 1
                    yield rec
                rows.add(n)
            bulk = None if by_reference else task_store(store_url).bulk_data()[1]
            if bulk is not None:
                bulk.publish()  # the task's objects are durable before it can succeed

        # a few tasks per core, each listing several units: every stage over these
        # partitions (sortByKey counts and samples them) costs a few tasks, not one a unit
        return sc.parallelize(units, min(len(units), slices)).mapPartitions(part_records)


def open_source(src: str, manifest: bool = False, **manifest_opts):
    """The source SOURCE names: an inventory manifest when ``manifest`` (or a file
    named like one), an S3 prefix for ``s3://``, else a directory tree."""
    from gravfs.spark import manifest as mf

    if manifest or mf.looks_like_manifest(src):
        return mf.ManifestSource(src, **manifest_opts)
    if manifest_opts and any(v is not None for v in manifest_opts.values()):
        raise GravfsError("--manifest-columns and --key-prefix apply to a manifest only")
    if src.startswith("s3://"):
        from gravfs.spark.s3source import S3PrefixSource
        return S3PrefixSource(src)
    return TreeSource(src)


# --- the job (driver) ----------------------------------------------------------------

def check_inputs(repo, source, branch: str, prefix: str = "") -> Commit:
    """What an import refuses, checked before any Spark work (the CLI calls it before
    the JVM starts): the branch's head commit, or one clear error. ``source``: a
    source object or a directory."""
    if isinstance(source, str):
        source = TreeSource(source)
    to_key(prefix)  # a bad name ('..', NUL, over-long)
    source.check()
    if isinstance(source, TreeSource):
        source.leave_out = own_dirs_under(repo, source.name)
    elif source.kind == "s3":
        from gravfs.spark.s3source import store_prefixes
        source.leave_out = store_prefixes(repo.store.url, source.bucket, source.prefix)
    repo.writable_head(branch)  # a missing branch, a tag or a commit: one line, early
    head = repo.commits.get(repo.head(branch, fresh=True))
    committer = Committer(repo)
    with committer.branch_lock(branch):
        clean = committer.is_clean(branch, settle=True)
    if not clean:
        raise GravfsError(f"branch {branch!r} has uncommitted changes; commit or reset them "
                          "first")
    repo.check_parents(branch, to_key(prefix))
    return head


def import_source(spark, repo, source, branch: str, prefix: str = "",
                  message: Optional[str] = None, partitions: Optional[int] = None,
                  by_reference: bool = False) -> SparkImportResult:
    """Import ``source`` (see open_source) into ``branch:prefix`` as one commit that
    replaces what the prefix held (see the module doc).

    Executors open the store from its URL, so it must name the same store for
    them (S3, or a path every worker sees). ``partitions``: how many sorted
    partitions write ranges (default: Spark's default parallelism); the
    resulting tree does not depend on it.
    """
    head = check_inputs(repo, source, branch, prefix)
    pfx = to_key(prefix)
    base = pfx + b"/" if pfx else b""
    sc = spark.sparkContext
    nparts = partitions or sc.defaultParallelism
    t0 = time.monotonic()
    from pyspark import StorageLevel
    rows = counter(sc, "listed")
    what = f"importing {source.name}"
    sample = getattr(source, "sample_bounds", None)
    bounds = None
    if sample is not None:  # a cheap sample of the keys: records computed once, not kept
        try:
            bounds = sample(sc, base, nparts)
        except Exception as exc:  # a task failed after its retries
            raise job_failed(exc, what) from exc
    passed_over = leftout.accumulator(sc)
    records = source.records(sc, repo.store.url, base, by_reference, rows, passed_over)
    if bounds is None:
        records = records.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        written = write_tree(repo, records, nparts, what, bounds)
    finally:
        try:
            records.unpersist()
        except Exception:  # the context may be gone with a failure
            pass
    tree, files = written.tree, written.records
    log.info("imported %d entries in %.1fs", files, time.monotonic() - t0)
    clash = written.file_dirs
    if clash.count:  # (the CLI's summary notes it at the terminal: info, not said twice)
        log.info("%d key%s of %s %s both a file and a directory (%s%s): both are imported; "
                 "the mount shows the directory, gravfs cat reads the file",
                 clash.count, "" if clash.count == 1 else "s", source.name,
                 "is" if clash.count == 1 else "are", ", ".join(map(show, clash.shown)),
                 ", ..." if clash.count > len(clash.shown) else "")
    skipped, skipped_shown = leftout.total(passed_over)
    if skipped:  # (the CLI's summary says it at the terminal: info, not said twice)
        log.info("%d path%s of %s left out (%s): %s%s; each is named in the executors' log",
                 skipped, "" if skipped == 1 else "s", source.name, source.left_out_as,
                 ", ".join(skipped_shown), ", ..." if skipped > len(skipped_shown) else "")
    if tree is None:
        paths = f"{skipped:,} path{'' if skipped == 1 else 's'}"
        why = f"holds only what an import leaves out ({paths}: {source.left_out_as})" \
            if skipped else "is empty"
        raise NothingToCommitError(f"nothing to commit on branch {branch!r}: {source.name} {why}")
    meta = {"import_source": source.name}
    if by_reference:
        meta["import_by_reference"] = "true"
    commit = land_tree(repo, branch, head, tree, message or f"Import {source.name}", meta, pfx)
    return SparkImportResult(commit, files, written.partitions, len(tree.ranges),
                             written.rewritten, clash.count, tuple(clash.shown), skipped,
                             skipped_shown, source.left_out_as)


def _with_repo(fn, spark, repo, state_dir, *args, **kw):
    if isinstance(repo, str):
        with Repository.open(repo, state_dir) as r:
            return fn(spark, r, *args, **kw)
    return fn(spark, repo, *args, **kw)


def import_tree(spark, repo, src: str, branch: str, prefix: str = "",
                message: Optional[str] = None, state_dir: Optional[str] = None,
                partitions: Optional[int] = None, by_reference: bool = False
                ) -> SparkImportResult:
    """Import the directory tree ``src`` into ``branch:prefix`` as one commit.

    ``repo``: a Repository, or a store URL (opened with ``state_dir`` and closed
    again); see import_source for the rest."""
    return _with_repo(import_source, spark, repo, state_dir, TreeSource(src), branch, prefix,
                      message, partitions=partitions, by_reference=by_reference)


def import_s3(spark, repo, url: str, branch: str, prefix: str = "",
              message: Optional[str] = None, state_dir: Optional[str] = None,
              partitions: Optional[int] = None, by_reference: bool = False
              ) -> SparkImportResult:
    """Import the objects under ``s3://bucket/prefix`` (see gravfs.spark.s3source)."""
    from gravfs.spark.s3source import S3PrefixSource
    return _with_repo(import_source, spark, repo, state_dir, S3PrefixSource(url), branch,
                      prefix, message, partitions=partitions, by_reference=by_reference)


def import_manifest(spark, repo, src: str, branch: str, prefix: str = "",
                    message: Optional[str] = None, state_dir: Optional[str] = None,
                    partitions: Optional[int] = None, by_reference: bool = True,
                    columns: Optional[str] = None, key_prefix: Optional[str] = None
                    ) -> SparkImportResult:
    """Import the objects an inventory manifest lists (see gravfs.spark.manifest),
    by reference unless ``by_reference`` is False."""
    from gravfs.spark.manifest import ManifestSource
    source = ManifestSource(src, columns=columns, key_prefix=key_prefix)
    return _with_repo(import_source, spark, repo, state_dir, source, branch, prefix, message,
                      partitions=partitions, by_reference=by_reference)
