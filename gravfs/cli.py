"""Command line: parses arguments and calls the repository; nothing else.

Errors are one line on stderr and a non-zero exit code, never a traceback
(set GRAVFS_DEBUG=1 to see one). Paths are printed quoted as git quotes them
(gravfs.fs.paths.show), raw with ``-z`` and as JSON strings with ``--json``, so
no file name can forge a line of output.
"""

from __future__ import annotations

import argparse
import base64
import errno
import json
import io
import logging
import os
import stat
import sys
from datetime import datetime, timezone
from typing import BinaryIO, Callable, Optional, TypeVar

from gravfs import __version__
from gravfs.data.external import is_external
from gravfs.errors import ConflictError, CorruptDataError, GravfsError, NotFoundError, PathTypeError
from gravfs.fs.paths import display, escape_key, show, to_key
from gravfs.keyvalue import parse_pairs
from gravfs.loglevel import env_log_level
from gravfs.quoting import printable, quote
from gravfs.stdfds import hold_standard_fds
from gravfs.version.strategies import COMMIT_STRATEGIES, MERGE_STRATEGIES

log = logging.getLogger("gravfs.cli")
T = TypeVar("T")


def _store_url(args) -> str:
    url = args.store or os.environ.get("GRAVFS_STORE")
    if not url:
        raise GravfsError("no store given: use -s/--store URL or set GRAVFS_STORE")
    return url


def _repo(args):
    from gravfs.fs.repository import Repository
    return Repository.open(_store_url(args), args.state_dir)


def _split_ref_path(spec: str, what: str = "REF:PATH") -> tuple[str, str]:
    if ":" not in spec:
        return spec, ""
    ref, path = spec.split(":", 1)
    if not ref:
        raise GravfsError(f"missing ref in {spec!r} (expected {what})")
    return ref, path


def _short(cid: str) -> str:
    return cid[:12]


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=None, sort_keys=True))


def _path_json(key: bytes, field: str = "path") -> dict:
    """A key as JSON: text (invalid UTF-8 as lone surrogates, which Python's
    ``encode("utf-8", "surrogateescape")`` turns back into the bytes) and, only
    then, the exact bytes in base64 under ``<field>_b64`` for other readers."""
    d = {field: display(key)}
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        d[field + "_b64"] = base64.b64encode(key).decode()
    return d


def _typed(path: str) -> str:
    """A path as the user typed it, quoted for messages."""
    return quote(path.encode("utf-8", "surrogateescape"))


def _binary(stream, what: str) -> BinaryIO:
    """The bytes of standard input or output; a closed one (``<&-``, ``>&-``: Python
    has no stream then) is an error saying so, not an internal one."""
    if stream is None or getattr(stream.buffer, "was_closed", False):  # (_StdoutFd)
        raise GravfsError(f"standard {what} is closed")
    return stream.buffer


def _write_z(records) -> None:
    """``-z`` output: each record (bytes) ends with a NUL, names are not quoted."""
    out = _binary(sys.stdout, "output")
    for r in records:
        out.write(r + b"\0")
    out.flush()


class _IntermixedParser(argparse.ArgumentParser):
    """A subcommand parser taking options between and after positionals
    (``gravfs log REF -n 3 -- PATH``), which plain argparse refuses."""

    def parse_known_args(self, args=None, namespace=None):
        if getattr(self, "_mixing", False):
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


# -- commands ----------------------------------------------------------------------


def cmd_init(args) -> int:
    from gravfs.fs.repository import Repository
    url = args.url or _store_url(args)
    repo = Repository.init(url, args.state_dir)
    print(f"Initialized gravfs repository at {repo.store.url} (branch {repo.settings.default_branch})")
    return 0


def cmd_branch(args) -> int:
    repo = _repo(args)
    return _ref_command(args, "branch", lambda: repo.create_branch(args.name, args.source),
                        lambda name: repo.delete_branch(name, args.force), repo.list_branches)


def cmd_tag(args) -> int:
    repo = _repo(args)
    return _ref_command(args, "tag", lambda: repo.create_tag(args.name, args.ref),
                        repo.delete_tag, repo.list_tags)


def _ref_command(args, kind: str, create, delete, listing) -> int:
    """create / delete / list, shared by `branch` and `tag`."""
    if args.action == "create":
        c = create()
        print(f"Created {kind} {_typed(args.name)} at {_short(c.id)}")
    elif args.action == "delete":
        delete(args.name)
        print(f"Deleted {kind} {_typed(args.name)}")  # (one an older gravfs let through)
    else:
        damaged: list[str] = []
        rows = listing(damaged)
        if args.json:
            _print_json([{"name": n, "commit": c} for n, c in rows])
        else:
            for n, c in rows:
                print(f"{_typed(n)}\t{_short(c)}")
        for why in damaged:  # the others are listed all the same
            print(f"gravfs: {why}", file=sys.stderr)
        if damaged:
            return CorruptDataError.exit_code
    return 0


def cmd_import(args) -> int:
    from gravfs.fs.importer import import_tree
    repo = _repo(args)
    branch, prefix = _split_ref_path(args.dest, "BRANCH[:PREFIX]")
    res = import_tree(repo, args.src, branch, prefix, args.message, progress=not args.quiet,
                      include_staged=args.include_staged, by_reference=args.by_reference)
    if res.dropped:
        print(f"Dropped {res.dropped} staged entries of an interrupted import of another "
              f"source into {branch}")
    if res.reused:
        print(f"Resumed an interrupted import: {res.reused} file(s) were uploaded already")
    how = " by reference" if args.by_reference else ""
    print(f"Imported {res.files} file(s){how} into {branch}:{_typed(prefix) or '/'} as commit "
          f"{_short(res.commit.id)}")
    if res.staged:
        print(f"The commit also holds {res.staged} change(s) that were staged on {branch}")
    return 0


def cmd_put(args) -> int:
    repo = _repo(args)
    branch, path = _split_ref_path(args.dest, "BRANCH:PATH")
    if not path:
        # `put main:f.csv f.csv` (the order of cp reversed) is the likely slip
        swapped = ":" in args.local and not os.path.lexists(args.local)
        raise GravfsError(f"put needs BRANCH:PATH as its destination, got {args.dest!r}"
                          + (" (usage: gravfs put LOCAL BRANCH:PATH; the arguments look "
                             "swapped)" if swapped else ""))
    if path.endswith("/"):  # into that directory under LOCAL's name (as cp, aws s3 cp)
        if args.local == "-":
            raise GravfsError("put - needs a file name: BRANCH:DIR/NAME")
        if path.strip("/"):
            try:
                there = repo.stat(branch, path).kind
            except NotFoundError:
                there = "dir"  # made by the file in it, as in an object store
            if there != "dir":
                raise PathTypeError(f"{_typed(path)}: not a directory", errno.ENOTDIR)
        path += os.path.basename(os.path.abspath(args.local))
    if args.local == "-":
        e = repo.write_file(branch, path, _binary(sys.stdin, "input"))
    else:
        try:  # (a dangling link is missing too, as open(2) finds it)
            st = os.stat(args.local)
        except FileNotFoundError:
            raise NotFoundError(f"{_typed(args.local)}: no such file or directory") from None
        if stat.S_ISREG(st.st_mode):
            e = repo.write_file(branch, path, args.local, mode=st.st_mode)
        elif stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            # a pipe (<(zcat x.gz), /dev/stdin) or a character device (/dev/null): read
            # to its end as `-` is, as cp does; the content gets a file's default mode
            with open(args.local, "rb") as f:
                e = repo.write_file(branch, path, f)
        elif stat.S_ISDIR(st.st_mode):
            raise GravfsError(f"{_typed(args.local)}: is a directory (gravfs import stages a "
                              "directory tree)")
        else:
            raise GravfsError(f"{_typed(args.local)}: not a regular file, pipe or character "
                              "device")
    # the key as stored: "a//b" and "/a" name a/b and a
    print(f"Staged {branch}:{show(to_key(path), directory=False)} ({e.size} bytes)")
    return 0


def cmd_rm(args) -> int:
    repo = _repo(args)
    branch, path = _split_ref_path(args.target, "BRANCH:PATH")
    if not path:
        raise GravfsError("rm needs BRANCH:PATH")
    n = repo.remove(branch, path, recursive=args.recursive)
    print(f"Removed {branch}:{_typed(path)} ({n} entr{'y' if n == 1 else 'ies'} staged for deletion)")
    return 0


def cmd_cat(args) -> int:
    repo = _repo(args)
    ref, path = _split_ref_path(args.target)
    node = repo.stat(ref, path)
    if node.kind == "dir":
        raise GravfsError(f"{node.shown}: is a directory")
    if node.kind == "symlink":
        raise GravfsError(f"{node.shown}: is a symbolic link to "
                          f"{_typed(node.entry.symlink_target)}")
    out = _binary(sys.stdout, "output")
    repo.copy_out(node, out)
    out.flush()
    return 0


class _StdoutFd(io.RawIOBase):
    """Standard output's descriptor under sys.stdout, so that a write error of any
    command (a full disk, a closed socket) says where it happened: a bare "No space
    left on device" read as the repository's. ``closed``: the command started with
    it closed (``>&-``), and what it prints is an error, as ``ls >&-``'s is."""

    def __init__(self, fd: int, closed: bool = False):
        super().__init__()
        self.fd = fd
        self.was_closed = closed
        self.failed = False  # after a failed write the rest is dropped: said once, at exit too

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data) -> Optional[int]:
        if self.failed or not data:
            return len(data)
        if self.was_closed:
            self.failed = True
            raise GravfsError("standard output is closed")
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return None  # a non-blocking descriptor: BufferedWriter's own case
        except OSError as exc:
            self.failed = True
            if isinstance(exc, BrokenPipeError):
                raise  # the reader went away (head): quietly done
            raise GravfsError(f"writing to standard output: {exc.strerror or exc}") from None


LS_PAGE = 10_000  # entries listed at a time: a flat prefix of millions stays in bounds


def _listing(repo, ref: str, path: str):
    """The directory's nodes, a page at a time (one list held 245 MB for 300k names). A
    name that is a file and a directory lists once, as the directory, also when a page
    ends between the two."""
    after, held = None, None
    while True:
        page = repo.list_dir(ref, path, after, LS_PAGE)
        if not page:
            break
        after = page[-1].listing_key
        first = page[0]
        if held is not None and not (first.kind == "dir" and first.key[:-1] == held.key):
            yield held
        held = page.pop() if page[-1].kind != "dir" else None
        yield from page
    if held is not None:
        yield held


def cmd_ls(args) -> int:
    repo = _repo(args)
    ref, path = _split_ref_path(args.target)
    node = repo.stat(ref, path) if path else None
    nodes = [node] if node is not None and node.kind != "dir" else _listing(repo, ref, path)
    if args.json:
        for n in nodes:
            _print_json(_node_json(n))
        return 0
    if args.z:  # the names the mount shows (a key's NUL byte cannot be written raw here)
        _write_z(n.fs_name + (b"/" if n.kind == "dir" else b"") for n in nodes)
        return 0
    for n in nodes:
        if n.kind == "dir":
            print(f"{'dir':>4} {'':>12} {'':>23}  {quote(n.fs_name + b'/')}")
        else:
            e = n.entry
            suffix = f" -> {_typed(e.symlink_target)}" if n.kind == "symlink" else ""
            suffix += _special_suffix(n)
            print(f"{oct(e.mode & 0o7777)[2:]:>4} {e.size:>12} {_when(e.mtime_ns)}  "
                  f"{quote(n.fs_name)}{suffix}")
    return 0


def _special_suffix(n) -> str:
    """What ``gravfs ls`` adds for special files and hard links: the kind and device
    number (``(char device 1,3)``), the link count (``(2 links)``)."""
    e, out = n.entry, ""
    if n.kind in ("chardev", "blockdev"):
        what = "char device" if n.kind == "chardev" else "block device"
        out += f" ({what} {os.major(e.rdev)},{os.minor(e.rdev)})"
    elif n.kind in ("fifo", "socket"):
        out += f" ({n.kind})"
    if e.link_group and len(e.links) > 1:
        out += f" ({len(e.links)} links)"
    return out


def _node_json(n) -> dict:
    own = n.key[:-1] if n.kind == "dir" and n.key.endswith(b"/") else n.key
    d = {**_path_json(own), "type": n.kind}
    if n.foreign:  # a key gravfs would not write: why, and the name it is shown under
        d.update(foreign=n.foreign, shown=display(n.fs_name))
    if n.entry is not None:
        e = n.entry
        d.update(size=e.size, mode=e.mode, mtime_ns=e.mtime_ns, address=e.address)
        if is_external(e.address_type):  # by reference: address is the source's URL
            d.update(by_reference=True, e_tag=e.e_tag)
        if n.kind == "symlink":
            d["target"] = e.symlink_target
        if n.kind in ("chardev", "blockdev"):
            d.update(rdev_major=os.major(e.rdev), rdev_minor=os.minor(e.rdev))
        if e.link_group:  # a hard link: every name of its group
            d["links"] = [display(k) for k in e.links]
    return d


def cmd_status(args) -> int:
    repo = _repo(args)
    keys = [to_key(p) for p in args.paths]
    rows = repo.status(args.branch, None if not keys or b"" in keys else keys)
    if args.json:
        _print_json([{"type": k, **_path_json(p)} for k, p in rows])
        return 0
    if args.z:
        _write_z(k.encode() + b"\t" + escape_key(p) for k, p in rows)
        return 0
    if not rows:
        print(f"On branch {args.branch}: nothing to commit")
    for kind, key in rows:
        print(f"{kind:>8}  {show(key)}")
    return 0


def cmd_commit(args) -> int:
    if not args.message.strip() and not args.allow_empty_message:
        raise GravfsError("empty commit message: say what the commit changes (-m MESSAGE), "
                          "or pass --allow-empty-message")
    repo = _repo(args)
    meta = dict(parse_pairs(args.meta or [], "--meta", unique=True))
    c = _listing_conflicts(lambda: repo.commit(args.branch, args.message, author=args.author,
                                               metadata=meta, strategy=args.strategy))
    title = c.message.partition("\n")[0]
    print(f"Committed {_short(c.id)} on {args.branch}: {printable(title)}")
    return 0


def cmd_log(args) -> int:
    if args.n is not None and args.n < 0:
        raise GravfsError(f"-n must not be negative, got {args.n}")
    repo = _repo(args)
    if args.paths:
        return _log_path(args, repo)
    for c in repo.log(args.ref, args.n):
        if args.json:
            _print_json(c.to_json())
            continue
        print(f"commit {c.id}")
        if len(c.parents) > 1:
            print("Merge:  " + " ".join(_short(p) for p in c.parents))
        print(f"Author: {printable(c.author)}\nDate:   {_when(c.time_ns)}\n\n{_body(c.message)}\n")
    return 0


def _body(message: str) -> str:
    """A commit message as log shows it: each line indented, as git does, and printable."""
    return "\n".join("    " + printable(line) for line in message.split("\n"))


def _open_index(repo, missing_ok: bool = False):
    """The repository's provenance index (one clear line when pyarrow is missing); with
    ``missing_ok``, None when there is none or no reader (callers that can answer
    without it)."""
    try:
        from gravfs.provenance.reader import IndexMissingError, open_index
    except ImportError as exc:
        if missing_ok:
            log.info("no provenance index reader (%s)", exc)
            return None
        raise GravfsError(f"the provenance index needs pyarrow ({exc}): "
                          "pip install 'gravfs[index]'") from None
    try:
        return open_index(repo.store, repo.tier)
    except IndexMissingError:
        if not missing_ok:
            raise
        log.info("this repository has no provenance index")
        return None


def _kind_at(repo, ref: str, key: bytes) -> Optional[str]:
    """What ``key`` is in ``ref`` (file, dir, ...), None when nothing is there."""
    try:
        return repo.stat(ref, key).kind
    except NotFoundError:
        return None


def _log_path(args, repo) -> int:
    """``gravfs log REF -- PATH``: the commits that changed PATH. The provenance index
    answers for the commits it covers; the others (all, without an index) are looked up
    in their trees, one lookup a commit."""
    from gravfs.progress import progress_bar
    if len(args.paths) > 1:
        raise GravfsError("log takes one PATH after --")
    key = to_key(args.paths[0])
    if not key:
        raise GravfsError("log -- PATH needs a path")
    kind = _kind_at(repo, args.ref, key)
    ends: list = []  # where the history ends because older trees are gone
    with progress_bar(f"log -- {show(key)}: commits looked up", None) as bar:
        reader = None if kind == "dir" else _open_index(repo, missing_ok=True)
        if kind == "dir":
            log.info("diffing %s with its parents in every commit of %s", show(key), args.ref)
            changes = list(repo.dir_history(args.ref, key, args.n, bar.advance, ends))
        elif reader is None:
            log.info("looking %s up in every commit of %s", show(key), args.ref)
            changes = list(repo.path_history(args.ref, key, args.n, bar.advance, ends))
        else:
            from gravfs.provenance.queries import path_history
            start = repo.resolve(args.ref).commit.id
            hist = path_history(reader, repo.commits, repo.heads, start, key,
                                repo.entry_identity(key, bar.advance), args.n, ends)
            changes = [(ch.commit, ch.kind) for ch in hist.changes]
            if hist.looked_up:
                log.info("%d commit(s) of %s are not in the provenance index: looked up "
                         "in their trees", hist.looked_up, args.ref)
        if not changes and kind is None and not ends:  # no file there ever: a directory
            kind = "dir"                                  # removed since?
            changes = list(repo.dir_history(args.ref, key, args.n, bar.advance, ends))
    for c, change in changes:
        if args.json:
            _print_json({**c.to_json(), "change": change, **_path_json(key)})
            continue
        print(f"commit {c.id}")
        if len(c.parents) > 1:
            print("Merge:  " + " ".join(_short(p) for p in c.parents))
        print(f"Author: {printable(c.author)}\nDate:   {_when(c.time_ns)}\n\n{_body(c.message)}\n\n"
              f"    {change}: {show(key)}{'/' if kind == 'dir' else ''}\n")
    if ends:
        print(f"gravfs: note: {_history_end(repo, ends[0])}", file=sys.stderr)
    return 0


def _history_end(repo, c) -> str:
    """Why a path's history stops at commit ``c``: a tree it needs is gone."""
    from gravfs.version.retention import last_sweep
    try:
        swept = last_sweep(repo.store)
    except GravfsError as exc:  # (the history itself stands)
        log.warning("cannot read the last garbage collection run: %s", exc)
        swept = None
    parents = [repo.commits.get(p) for p in c.parents]
    gone = [x for x in [c, *parents] if swept is not None and swept.expired(x)]
    why = (f"garbage collection run {swept.run_id} expired "
           f"{'it' if gone[0] is c else 'what came before it'} (retention rules), and "
           "expired commits' trees are gone" if gone else
           "a tree it needs is missing from the store ('gravfs fsck' checks them)")
    return f"the history ends at commit {c.id[:12]} ({_when(c.time_ns)}): {why}"


def cmd_provenance(args) -> int:
    """Every commit and path that held a content, earliest first (provenance index)."""
    repo = _repo(args)
    reader = _open_index(repo)
    from gravfs.provenance.queries import provenance
    from gravfs.provenance.target import content_address
    address = content_address(repo, reader, args.target)
    from gravfs.version.retention import collected_commits, last_sweep
    swept = None  # the last sweep, read only when some commit holds the content

    def collected(commits) -> set[str]:
        nonlocal swept
        try:
            swept = last_sweep(repo.store)
        except GravfsError as exc:  # the answer stands; only the marks need the records
            print(f"gravfs: warning: cannot tell which commits garbage collection took, "
                  f"none is marked: {exc}", file=sys.stderr)
            return set()
        return collected_commits(repo.store, swept, commits)

    res = provenance(reader, repo.commits, repo.heads, address, collected)
    for h in res.holders:
        if args.json:
            _print_json({"commit": h.commit.id, "time_ns": h.commit.time_ns,
                         "date": _when(h.commit.time_ns), "address": address,
                         "branches": list(h.branches), "tags": list(h.tags),
                         "collected": h.collected, **_path_json(h.path)})
            continue
        refs = list(h.branches) + [f"tag: {t}" for t in h.tags]
        print(f"{_short(h.commit.id)}  {_when(h.commit.time_ns)}  {show(h.path)}"
              + (f"  ({', '.join(refs)})" if refs else "")
              + ("  [tree collected]" if h.collected else ""))
    if not res.holders and not args.json:
        print(f"No indexed commit holds {address}")
    note = res.coverage.note()
    if note:
        print(f"gravfs: note: {note}", file=sys.stderr)
    gone = len({h.commit.id for h in res.holders if h.collected})
    if gone:
        print(f"gravfs: note: garbage collection run {swept.run_id} expired {gone} of these "
              f"commit(s) after the index was built (marked 'tree collected'): their trees "
              f"are gone, and the content itself stays only while another commit or a staged "
              f"change holds it", file=sys.stderr)
    return 0


def cmd_diff(args) -> int:
    repo = _repo(args)
    keys = [to_key(p) for p in args.paths]
    n = 0
    for d in repo.diff(args.left, args.right, None if not keys or b"" in keys else keys):
        if args.json:
            _print_json({"type": d.kind, **_path_json(d.key)})
        elif args.z:
            _write_z([d.kind.encode() + b"\t" + escape_key(d.key)])
        else:
            print(f"{d.kind:>8}  {show(d.key)}")
        n += 1
    if n == 0 and not args.json and not args.z:
        print("no differences")
    return 0


def _listing_conflicts(run: Callable[[], T]) -> T:
    """``run()``; on a conflict, every conflicting path on stdout, as status prints
    paths (the error line shows ten): what a user resolves, or a script reads."""
    try:
        return run()
    except ConflictError as exc:
        for key in exc.keys:
            print(f"conflict  {show(key)}")
        raise


def cmd_merge(args) -> int:
    repo = _repo(args)
    c = _listing_conflicts(lambda: repo.merge(args.source, args.dest, strategy=args.strategy,
                                              message=args.message))
    print(f"Merged {args.source} into {args.dest}: commit {_short(c.id)}")
    return 0


def cmd_revert(args) -> int:
    repo = _repo(args)
    c = _listing_conflicts(lambda: repo.revert(args.branch, args.ref, parent=args.parent))
    print(f"Reverted {args.ref} on {args.branch}: commit {_short(c.id)}")
    return 0


def cmd_cherry_pick(args) -> int:
    repo = _repo(args)
    c = _listing_conflicts(lambda: repo.cherry_pick(args.branch, args.ref, parent=args.parent))
    print(f"Cherry-picked {args.ref} onto {args.branch}: commit {_short(c.id)}")
    return 0


def cmd_reset(args) -> int:
    repo = _repo(args)
    n = repo.reset(args.branch, args.path)
    print(f"Dropped {n} uncommitted change(s) on {args.branch}"
          + (f" under {_typed(args.path)}" if args.path else ""))
    return 0


def cmd_fsck(args) -> int:
    from gravfs.fs.fsck import fsck
    if args.repair_staging:  # before opening: a damaged staging database refuses to open
        from gravfs.fs.entry import decode_entry
        from gravfs.version.staging.salvage import repair_workspace
        for line in repair_workspace(_store_url(args), args.state_dir, decode_entry).lines():
            print(line)
    repo = _repo(args)
    report = fsck(repo, check_data=args.data, progress=not args.quiet)
    for line in report.problems + report.sources:
        print(line)
    for line in report.warnings:
        print(f"warning: {line}")
    print(report.summary())
    return report.exit_code


def cmd_compact(args) -> int:
    from gravfs.version.committer import Committer
    from gravfs.version.compaction import compact
    repo = _repo(args)
    committer = Committer(repo)
    staged = not committer.is_clean(args.branch)
    if compact(repo, args.branch):
        print(f"Compacted staging of {args.branch}")
    elif staged and committer.is_clean(args.branch):
        print(f"Dropped the staged changes of {args.branch}: they leave its head as it is "
              "(nothing to commit)")
    else:
        print(f"Nothing to compact on {args.branch}")
    return 0


def cmd_sst_dump(args) -> int:
    from gravfs.version.sstdump import dump_properties, dump_records
    if args.properties:
        dump_properties(args.file, sys.stdout, as_json=args.json)
    else:
        dump_records(args.file, sys.stdout, as_json=args.json)
    return 0


def cmd_mount(args) -> int:
    from gravfs.fuse.launch import mount
    return mount(args)


def cmd_umount(args) -> int:
    from gravfs.fuse.launch import umount
    return umount(args)


# -- parser --------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gravfs",
        description="gravfs: a Git-like versioned filesystem for data lakes.",
        epilog="Refs are branch names, tags, commit ids or unique prefixes (>= 6 hex), "
               "optionally followed by ~N, ^ or ^N as in git. Store URLs: a local path, "
               "file://PATH, or s3://BUCKET/PREFIX.")
    p.add_argument("--version", action="version", version=f"gravfs {__version__}")

    def add_globals(parser, default):
        parser.add_argument("-s", "--store", default=default(None),
                            help="repository store URL (default: $GRAVFS_STORE)")
        parser.add_argument("--state-dir", default=default(None),
                            help="local state: staging, cache (default: $GRAVFS_STATE_DIR)")
        parser.add_argument("-v", "--verbose", action="count", default=default(0),
                            help="log more (-vv for debug)")

    add_globals(p, lambda d: d)
    # the same options after the command name (gravfs ls main -s URL) without
    # overriding what was given before it
    common = argparse.ArgumentParser(add_help=False)
    add_globals(common, lambda d: argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def cmd(name, fn, help_, **kw):
        sp = sub.add_parser(name, help=help_, description=help_, parents=[common], **kw)
        sp.set_defaults(func=fn)
        return sp

    sp = cmd("init", cmd_init, "create a repository on a store")
    sp.add_argument("url", nargs="?", help="store URL (default: -s/--store)")

    sp = cmd("branch", cmd_branch, "create, list or delete branches")
    bs = sp.add_subparsers(dest="action", metavar="ACTION")
    bs.required = True
    b = bs.add_parser("create", parents=[common], help="create a branch")
    b.add_argument("name")
    b.add_argument("--from", dest="source", metavar="REF", help="start point (default: main)")
    bs.add_parser("list", parents=[common], help="list branches").add_argument("--json", action="store_true")
    b = bs.add_parser("delete", parents=[common],
                      help="delete a branch (refused while it has uncommitted changes here)")
    b.add_argument("name")
    b.add_argument("-f", "--force", action="store_true",
                   help="delete it and drop its uncommitted changes on this host")

    sp = cmd("tag", cmd_tag, "create, list or delete tags")
    ts = sp.add_subparsers(dest="action", metavar="ACTION")
    ts.required = True
    t = ts.add_parser("create", parents=[common], help="tag a commit")
    t.add_argument("name")
    t.add_argument("ref")
    ts.add_parser("list", parents=[common], help="list tags").add_argument("--json", action="store_true")
    ts.add_parser("delete", parents=[common], help="delete a tag").add_argument("name")

    sp = cmd("import", cmd_import, "commit a local directory tree as BRANCH[:PREFIX], "
             "replacing what PREFIX held")
    sp.add_argument("src", metavar="SRC_DIR")
    sp.add_argument("dest", metavar="BRANCH[:PREFIX]")
    sp.add_argument("-m", "--message", default=None)
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--include-staged", action="store_true",
                    help="commit the branch's uncommitted changes with the import "
                         "(without it, a branch with uncommitted changes is refused)")
    sp.add_argument("--by-reference", action="store_true",
                    help="zero-copy: entries point at the source files (file:// addresses), "
                         "which must stay in place and unchanged")

    sp = cmd("put", cmd_put, "stage a local file (or - for stdin, or a pipe such as "
             "<(zcat f.gz)) at BRANCH:PATH")
    sp.add_argument("local", metavar="LOCAL")
    sp.add_argument("dest", metavar="BRANCH:PATH")

    sp = cmd("rm", cmd_rm, "stage the deletion of BRANCH:PATH")
    sp.add_argument("target", metavar="BRANCH:PATH")
    sp.add_argument("-r", "--recursive", action="store_true", help="remove a directory and its contents")

    sp = cmd("cat", cmd_cat, "print a file's content")
    sp.add_argument("target", metavar="REF:PATH")

    sp = cmd("ls", cmd_ls, "list a directory")
    sp.add_argument("target", metavar="REF[:PATH]")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("-z", dest="z", action="store_true",
                    help="NUL-terminated records with names unquoted (as the mount shows them)")

    sp = cmd("status", cmd_status, "show uncommitted changes (with -- PATH...: at and under "
             "those paths)")
    sp.add_argument("branch")
    sp.__class__ = _IntermixedParser
    sp.add_argument("paths", nargs="*", metavar="PATH", default=[],  # not "required" in usage errors
                    help="after --: only the changes at and under these paths")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("-z", dest="z", action="store_true",
                    help="NUL-terminated records with names unquoted (as the mount shows them)")

    sp = cmd("commit", cmd_commit, "commit a branch's staged changes")
    sp.add_argument("branch")
    sp.add_argument("-m", "--message", required=True)
    sp.add_argument("--allow-empty-message", action="store_true",
                    help="commit with an empty or blank message (refused without it, as git does)")
    sp.add_argument("--author")
    sp.add_argument("--meta", action="append", metavar="KEY=VALUE", help="commit metadata (repeatable)")
    sp.add_argument("--strategy", choices=COMMIT_STRATEGIES, default="fail",
                    help="a path both your staged changes and the branch head (another "
                         "host's commit) changed: fail (default; nothing lost), staged-wins "
                         "(yours replace the head's), head-wins (yours are left out and dropped)")

    sp = cmd("log", cmd_log, "show commit history (with -- PATH: the commits that changed PATH)")
    sp.add_argument("ref")
    sp.__class__ = _IntermixedParser  # subparsers share one class; log, diff, status need it
    sp.add_argument("paths", nargs="*", metavar="PATH", default=[],  # not "required" in usage errors
                    help="after --: list the commits that changed this file (the "
                         "provenance index, gravfs spark index, answers without reading "
                         "each commit's tree)")
    sp.add_argument("-n", type=int, default=None, metavar="N", help="at most N commits")
    sp.add_argument("--json", action="store_true")

    sp = cmd("provenance", cmd_provenance,
             "every commit (date, branches and tags containing it) and path that held a "
             "content, earliest first (uses the provenance index: gravfs spark index)")
    sp.add_argument("target", metavar="FILE|ADDRESS|REF:PATH",
                    help="a local file, a content address or digest (prefix), or a file "
                         "in a ref")
    sp.add_argument("--json", action="store_true")

    sp = cmd("diff", cmd_diff, "show paths that differ between two refs (with -- PATH...: "
             "at and under those paths)")
    sp.add_argument("left", metavar="REF1")
    sp.add_argument("right", metavar="REF2")
    sp.__class__ = _IntermixedParser
    sp.add_argument("paths", nargs="*", metavar="PATH", default=[],  # not "required" in usage errors
                    help="after --: only the differences at and under these paths (files "
                         "or directories)")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("-z", dest="z", action="store_true",
                    help="NUL-terminated records with names unquoted (as the mount shows them)")

    sp = cmd("merge", cmd_merge, "merge SRC into the branch DEST (three-way)")
    sp.add_argument("source", metavar="SRC")
    sp.add_argument("dest", metavar="DEST")
    sp.add_argument("--strategy", choices=MERGE_STRATEGIES, default="fail")
    sp.add_argument("-m", "--message")

    for name, fn, help_ in (("revert", cmd_revert, "commit the inverse of REF on BRANCH"),
                            ("cherry-pick", cmd_cherry_pick,
                             "commit REF's change (against its parent) on BRANCH")):
        sp = cmd(name, fn, help_)
        sp.add_argument("branch")
        sp.add_argument("ref")
        sp.add_argument("--parent", type=int, metavar="N",
                        help="for a merge commit: its change against its N-th parent (1: what "
                        "the merge brought into its first parent)")

    sp = cmd("reset", cmd_reset, "drop uncommitted changes (all, or under PATH)")
    sp.add_argument("branch")
    sp.add_argument("path", nargs="?")

    sp = cmd("fsck", cmd_fsck, "check that every reachable object exists and verifies",
             epilog="Exit status: 0 clean, 1 missing or damaged objects, 3 only warnings "
                    "(keys another writer made that gravfs would not: shown escaped).")
    sp.add_argument("--data", action="store_true", help="also re-hash every data object")
    sp.add_argument("--repair-staging", action="store_true",
                    help="first check the local staging database; if damaged, move it aside "
                         "and keep in a fresh one what can still be read")
    sp.add_argument("-q", "--quiet", action="store_true")

    sp = cmd("compact", cmd_compact, "compact a branch's staging into a metarange now")
    sp.add_argument("branch")

    sp = cmd("sst-dump", cmd_sst_dump, "print the records (or properties) of an SSTable file")
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--json", action="store_true", help="one JSON object per record (the default)")
    sp.add_argument("--properties", action="store_true", help="print the table properties")

    sp = cmd("mount", cmd_mount, "mount the repository (daemonizes unless --foreground)")
    sp.add_argument("mountpoint")
    sp.add_argument("--branch", help="mount one branch at the root")
    sp.add_argument("--foreground", "-f", action="store_true")
    sp.add_argument("-o", dest="options", action="append", default=[], metavar="OPT[,OPT]",
                    help="mount options: allow_other, ro, debug...")

    sp = cmd("umount", cmd_umount, "flush and unmount")
    sp.add_argument("mountpoint")
    sp.add_argument("--force", action="store_true",
                    help="abort the mount's connection first: for a daemon that no longer "
                         "answers (what it had not staged is lost)")
    from gravfs.spark.gccli import add_gc_parser
    add_gc_parser(sub, common, _repo)
    from gravfs.spark.cli import add_spark_parser
    add_spark_parser(sub, common, _repo, _split_ref_path)
    return p


def setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    level = env_log_level(level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _printable_stdout() -> None:
    """A name its locale's encoding cannot write (a non-UTF-8 locale, PYTHONIOENCODING)
    is printed escaped (w\\xf6rld), as stderr does, not an internal error; and write
    errors name standard output (_StdoutFd)."""
    out = sys.stdout
    if out is None:  # closed at start: what a command prints says so
        sys.stdout = io.TextIOWrapper(_StdoutFd(1, closed=True), errors="backslashreplace",
                                      write_through=True)
        return
    try:
        if not isinstance(out, io.TextIOWrapper) or out.fileno() != 1:
            return  # (a test's captured output)
    except (OSError, ValueError):
        return
    below = getattr(out.buffer, "raw", out.buffer)  # (PYTHONUNBUFFERED: no buffer)
    if isinstance(below, _StdoutFd):
        return  # done already (main called again in one process)
    out.flush()
    fd = _StdoutFd(1)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(fd) if below is not out.buffer else fd,
                                  encoding=out.encoding, errors="backslashreplace",
                                  line_buffering=out.line_buffering,
                                  write_through=out.write_through)


def main(argv: Optional[list[str]] = None) -> int:
    hold_standard_fds()
    _printable_stdout()
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        rc = args.func(args) or 0
        if sys.stdout is not None:
            sys.stdout.flush()  # here, where a write error is reported as the others are
        return rc
    except GravfsError as exc:
        if os.environ.get("GRAVFS_DEBUG"):
            raise
        print(f"gravfs: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gravfs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if os.environ.get("GRAVFS_DEBUG"):
            raise
        name = getattr(exc, "filename", None)
        if isinstance(name, (str, bytes)):
            name = os.fsdecode(name)
        where = f"{_typed(str(name))}: " if name is not None else ""
        print(f"gravfs: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: still one line, with the way to see more
        if os.environ.get("GRAVFS_DEBUG"):
            raise
        log.debug("internal error", exc_info=True)
        print(f"gravfs: internal error: {type(exc).__name__}: {exc} "
              "(set GRAVFS_DEBUG=1 for a traceback)", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
