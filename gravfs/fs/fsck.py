"""Store consistency check: everything reachable from a ref exists and verifies.

Walks refs -> commits -> metaranges -> ranges -> data objects. Commit objects
are re-hashed, SSTs are checksum-verified as they are read, data objects are
checked for presence and size (re-hashed with ``check_data``); a sparse file's
manifest is read and verified, and its extents are checked as data objects. Each
object is visited once however many commits share it.

A by-reference entry's content is a source object outside the store (ADDRESS_FULL,
gravfs.data.external): it is no data object, so it is never looked for under
``data/``; its source is checked instead (present, same size and version tag: a
HEAD or a stat, not a read) and a changed or vanished one is reported as its own
kind of finding, ``source ...`` (exit 1: the entry cannot be read).

Commits the last garbage collection expired (gravfs.version.retention.last_sweep:
not kept by its mark, and older than the mark) may have lost their trees: they are
counted, their trees are not checked.

Keys gravfs could not have written (another writer's: a leading '/', ``a//b``,
``.``/``..``, NUL, a name over 255 bytes, a file at ``name/``) are warnings,
not damage: the store is sound and they are readable under escaped names. So is a
file hidden by a directory of its name (gravfs.fs.shadows).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from concurrent.futures import ThreadPoolExecutor

from gravfs.data import sparse
from gravfs.data.external import Source, is_external, source_of
from gravfs.fs.entry import KIND_DIRECTORY, KIND_FILE, decode_entry
from gravfs.errors import CorruptDataError, GravfsError
from gravfs.fs.paths import key_problem, show
from gravfs.fs.shadows import RangeShadows, ShadowScan, tree_shadows
from gravfs.progress import progress_bar
from gravfs.threadmap import ordered_map
from gravfs.version.refs.casprobe import PROBES
from gravfs.version.retention import last_sweep

log = logging.getLogger(__name__)

SOURCE_CHECKERS = 16  # by-reference sources checked at once


@dataclass
class FsckReport:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # foreign keys
    sources: list[str] = field(default_factory=list)  # by-reference sources changed or gone
    refs: int = 0
    commits: int = 0
    metaranges: int = 0
    ranges: int = 0
    entries: int = 0
    data_objects: int = 0
    source_objects: int = 0  # distinct sources of by-reference entries checked
    expired: int = 0  # commits the last garbage collection expired: trees not checked
    gc_run: str = ""
    temp_files_removed: int = 0  # left in the store by writers killed mid-upload
    probes_removed: int = 0  # conditional-write probe keys a failed probe left

    @property
    def exit_code(self) -> int:
        """0 clean, 1 damage (missing or corrupt objects), 3 only warnings."""
        return 1 if self.problems or self.sources else 3 if self.warnings else 0

    def summary(self) -> str:
        found = []
        if self.problems:
            found.append(f"{len(self.problems)} problem(s)")
        if self.sources:
            found.append(f"{len(self.sources)} by-reference source(s) changed or missing")
        if self.warnings:
            found.append(f"{len(self.warnings)} warning(s)")
        state = ", ".join(found) or "clean"
        removed = (f"; removed {self.temp_files_removed} temporary file(s) of killed writers"
                   if self.temp_files_removed else "")
        if self.probes_removed:
            removed += f"; removed {self.probes_removed} probe key(s) of failed probes"
        return (f"fsck: {state}: {self.refs} refs, {self.commits} commits, {self.metaranges} "
                f"metaranges, {self.ranges} ranges, {self.entries} entries, "
                f"{self.data_objects} data objects"
                + (f", {self.source_objects} by-reference sources" if self.source_objects else "")
                + (f", {self.expired} commits expired by gc run {self.gc_run} (trees not "
                   "checked)" if self.expired else "")
                + removed)


def fsck(repo, check_data: bool = False, progress: bool = True) -> FsckReport:
    rep = FsckReport()
    starts: list[tuple[str, str]] = []
    damaged: list[str] = []
    for name, cid in repo.heads.branches(damaged):
        starts.append((f"branch {name}", cid))
    for name, cid in repo.heads.tags(damaged):
        starts.append((f"tag {name}", cid))
    rep.problems.extend(damaged)
    rep.refs = len(starts) + len(damaged)
    # commits the last garbage collection expired may have lost their trees
    try:
        swept = last_sweep(repo.store)
    except CorruptDataError as exc:  # a damaged run's record: reported, the check goes on
        rep.problems.append(str(exc))
        swept = None
    rep.gc_run = swept.run_id if swept else ""

    seen_commits: set[str] = set()
    metaranges: dict[str, tuple[int, str]] = {}  # metarange -> (generation, oldest commit)
    stack = [(label, cid) for label, cid in starts]
    while stack:
        label, cid = stack.pop()
        if cid in seen_commits:
            continue
        seen_commits.add(cid)
        try:
            c = repo.commits.get(cid)
        except GravfsError as exc:
            rep.problems.append(f"commit {cid} (reached from {label}): {exc}")
            continue
        if swept is not None and swept.expired(c):
            rep.expired += 1
        else:
            metaranges[c.metarange] = min(metaranges.get(c.metarange, (c.generation, cid)),
                                          (c.generation, cid))
        stack.extend((f"parent of {cid[:12]}", p) for p in c.parents)
    rep.commits = len(seen_commits)

    seen_ranges: set[str] = set()
    foreign: set[bytes] = set()
    shadow_scans: dict[str, RangeShadows] = {}  # ranges with a hidden file or an open span
    shadowed: set[bytes] = set()  # hidden files reported
    data: dict[str, int] = {}
    sources: set[Source] = set()
    with progress_bar("checking metaranges", total=len(metaranges), enabled=progress) as bar:
        # oldest commits first: a foreign key is reported with the oldest commit found
        for mr in sorted(metaranges, key=lambda m: (metaranges[m], m)):
            bar.advance()
            try:
                infos = list(repo.committed.iter_ranges(mr))
            except GravfsError as exc:
                rep.problems.append(f"metarange {mr}: {exc}")
                continue
            rep.metaranges += 1
            for info in infos:
                if info.id in seen_ranges:
                    continue
                seen_ranges.add(info.id)
                scan = ShadowScan()
                try:
                    for rec in repo.committed.range_records(info.id):
                        rep.entries += 1
                        e = decode_entry(rec[2])
                        is_dir = e.kind == KIND_DIRECTORY
                        scan.add(rec[0], is_dir)
                        why = key_problem(rec[0], is_dir)
                        if why is not None and rec[0] not in foreign:
                            foreign.add(rec[0])
                            rep.warnings.append(
                                f"foreign key {show(rec[0], is_dir)} ({why}; stored as "
                                f"{rec[0]!r}) in range {info.id[:12]} of commit "
                                f"{metaranges[mr][1][:12]}")
                        if e.kind == KIND_FILE and is_external(e.address_type):
                            sources.add(source_of(e))
                        elif e.kind == KIND_FILE and e.size > 0 and e.address:
                            data[e.address] = e.size
                except GravfsError as exc:
                    rep.problems.append(f"range {info.id} (in metarange {mr[:12]}): {exc}")
                found = scan.done()
                if found.found or found.open_files:
                    shadow_scans[info.id] = found
            _report_shadows(repo, [(i.id, i.min_key) for i in infos], shadow_scans, shadowed,
                            metaranges[mr][1], rep)
    rep.ranges = len(seen_ranges)
    _expand_sparse(repo, data, rep)

    with progress_bar("checking data objects", total=len(data), enabled=progress) as bar:
        for address, size in sorted(data.items()):
            bar.advance()
            got = repo.store.size(address)
            if got is None:
                rep.problems.append(f"data object {address}: missing")
            elif got != size:
                rep.problems.append(f"data object {address}: {got} bytes, entries say {size}")
            elif check_data:
                try:
                    with repo.data.acquire(address):
                        pass
                except GravfsError as exc:
                    rep.problems.append(f"data object {address}: {exc}")
    rep.data_objects = len(data)
    _check_sources(repo, sources, rep, progress)
    # by age, not by pid: a local store may be shared by several hosts
    rep.temp_files_removed = repo.store.remove_stale_temp_files()
    rep.probes_removed = _remove_stale_probes(repo)
    log.info(rep.summary())
    return rep


def _remove_stale_probes(repo, max_age_s: float = 3600.0) -> int:
    """Delete the conditional-write probe keys a probe failing midway left (a probe takes
    well under a second: one an hour old is no live host's)."""
    cutoff = time.time() - max_age_s
    stale = [o.key for o in repo.store.list_info(PROBES) if o.mtime < cutoff]
    if stale:
        repo.store.delete_many(stale)
        log.info("removed %d probe key(s) left under %s", len(stale), PROBES)
    return len(stale)


def _report_shadows(repo, ranges: list[tuple[str, bytes]], scans: dict[str, RangeShadows],
                    reported: set[bytes], commit: str, rep: FsckReport) -> None:
    """Warn of each file of a tree hidden by a directory of its name, once per file."""
    def keys(range_id: str) -> list[bytes]:
        try:
            return [rec[0] for rec in repo.committed.range_records(range_id)]
        except GravfsError:  # reported as a problem already
            return []

    empty = RangeShadows()
    summaries = {rid: scans.get(rid, empty) for rid, _ in ranges}
    for f, under in tree_shadows(ranges, summaries, keys):
        if f not in reported:
            reported.add(f)
            rep.warnings.append(
                f"file {show(f, False)} is hidden by a directory of its name (holding "
                f"{show(under, under.endswith(b'/'))}) in commit {commit[:12]}: the mount "
                "and gravfs ls show the directory, gravfs cat reads the file")


def _check_sources(repo, sources: set[Source], rep: FsckReport, progress: bool) -> None:
    """Each by-reference source present as its entries recorded it (in parallel: a
    request or a stat each)."""
    def check(src: Source) -> str | None:
        try:
            repo.external.check(src)
        except GravfsError as exc:
            return f"source {src.url}: {exc}"
        return None

    with progress_bar("checking by-reference sources", total=len(sources),
                      enabled=progress and bool(sources)) as bar, \
            ThreadPoolExecutor(SOURCE_CHECKERS, thread_name_prefix="gravfs-fsck") as pool:
        ordered = sorted(sources, key=lambda s: (s.url, s.e_tag, s.size))
        for found in ordered_map(pool, check, ordered, 16 * SOURCE_CHECKERS):
            bar.advance()
            if found is not None:
                rep.sources.append(found)
    rep.source_objects = len(sources)


def _expand_sparse(repo, data: dict[str, int], rep: FsckReport) -> None:
    """Replace each sparse file's address by its extents, checked as data objects then;
    its manifest is read (so verified against its name), a file of zeros has none."""
    for address in [a for a in data if sparse.is_sparse(a)]:
        size = data.pop(address)
        try:
            if sparse.zeros_manifest(address) is None and repo.store.size(address) is None:
                rep.problems.append(f"sparse manifest {address}: missing")
                continue
            m = repo.data.manifest(address)
        except GravfsError as exc:
            rep.problems.append(f"sparse manifest {address}: {exc}")
            continue
        if m.size != size:
            rep.problems.append(f"sparse manifest {address}: {m.size} bytes, entries say {size}")
        for _, n, extent in m.extents:
            data[extent] = n
