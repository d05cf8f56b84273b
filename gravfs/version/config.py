"""Repository settings (``_gravfs/repo.json``, fixed at init) and workspace paths.

A workspace is the local state of one repository on one host: LMDB staging,
the disk tier of immutable objects, and scratch files. It lives in the state
dir under a name derived from the store URL, so one state dir serves many
repositories and two state dirs on one store behave like two hosts. Its
directories are its owner's only (0700, see gravfs.store.modes): they hold
copies of files whose owner may have made them unreadable to others.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

from gravfs import hashing
from gravfs.errors import CorruptDataError, GravfsError
from gravfs.store import local_path
from gravfs.store.modes import PRIVATE_FILE, make_dir, private_dir

log = logging.getLogger(__name__)

REPO_JSON = "_gravfs/repo.json"
REPO_ID_FILE = "repo-id"  # in a workspace: the repository it holds the state of
FORMAT_VERSION = 1


@dataclass(frozen=True)
class RangeParams:
    """Range break policy (gravfs.version.committed.breaks); defaults chosen by
    scripts/bench_committed.py, see docs/benchmarks-committed.md.

    kind "lakefs": break at max_size, or past min_size when hash % raggedness == 0;
    kind "size-aware": past min_size, break with probability record size / target_size.
    """

    kind: str = "lakefs"
    min_size: int = 256 * 1024
    max_size: int = 2 * 1024 * 1024
    raggedness: int = 2048
    target_size: int = 0
    seed: int = 0

    def policy(self):
        from gravfs.version.committed.breaks import policy_from_dict
        return policy_from_dict(asdict(self))


@dataclass(frozen=True)
class RepoSettings:
    format: int = FORMAT_VERSION
    hash: str = hashing.HASH_NAME
    compression: str = "snappy"
    default_branch: str = "main"
    ranges: RangeParams = field(default_factory=RangeParams)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "RepoSettings":
        try:
            d = json.loads(raw)
            ranges = RangeParams(**d.pop("ranges"))
            ranges.policy()  # validates kind and sizes
            s = cls(ranges=ranges, **d)
        except (ValueError, TypeError, KeyError) as exc:
            # what they begin with tells a damaged file from another server's answer (a
            # web page where an S3 endpoint was expected)
            raise CorruptDataError(f"repository settings do not parse (they begin "
                                   f"{bytes(raw[:48])!r}): {exc}", path=REPO_JSON) from exc
        if s.format != FORMAT_VERSION:
            raise GravfsError(f"repository format {s.format} is not supported "
                              f"(this gravfs reads format {FORMAT_VERSION})")
        if s.hash != hashing.HASH_NAME:
            raise GravfsError(f"repository hash {s.hash!r} is not supported")
        return s

    @classmethod
    def new(cls, **ranges) -> "RepoSettings":
        """Fresh settings with a random per-repository break seed."""
        params = RangeParams(**{**asdict(RangeParams()), "seed": secrets.randbits(63), **ranges})
        return cls(ranges=params)


def default_state_dir() -> str:
    env = os.environ.get("GRAVFS_STATE_DIR")
    if env:
        return env
    if os.geteuid() == 0:
        return "/var/lib/gravfs"
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "gravfs")


def _check_outside_store(state_dir: str, store_url: str) -> None:
    """A state directory inside a local store would be walked and listed as the store's
    own files (its staging and cache taken for objects)."""
    store = local_path(store_url)
    if store is None:
        return
    store, state = os.path.realpath(store), os.path.realpath(state_dir)
    if os.path.commonpath([store, state]) == store:
        raise GravfsError(f"the state directory {state_dir} is inside the store {store}: "
                          "its staging and cache would be taken for the store's files; use "
                          "one outside it (--state-dir, GRAVFS_STATE_DIR)")


def _workspace_name(store_url: str) -> str:
    return hashing.hexdigest(store_url.encode())[:16]


def _same_local_store(repos: str, store_url: str) -> str | None:
    """A workspace in ``repos`` whose store-url marker names the same local store by
    another path; with several, the first by name, and a warning naming the others (their
    staged changes show only when the store is opened by the URL each was made for)."""
    try:
        path = local_path(store_url)
        names = sorted(os.listdir(repos))
    except (GravfsError, OSError):
        return None
    if path is None:
        return None
    real = os.path.realpath(path)
    hits = []
    for name in names:
        if "." in name:  # set aside (Workspace.set_aside): an earlier repository's
            continue
        try:
            with open(os.path.join(repos, name, "store-url")) as f:
                other = local_path(f.read().strip())
        except (GravfsError, OSError, UnicodeDecodeError):
            continue
        if other is not None and os.path.realpath(other) == real:
            hits.append(os.path.join(repos, name))
    if len(hits) > 1:
        log.warning("workspaces %s all belong to the store %s; using %s (the others' staged "
                    "changes show only through the URL in their store-url file)",
                    ", ".join(hits), real, hits[0])
    return hits[0] if hits else None


@dataclass(frozen=True)
class Workspace:
    """Paths of one repository's local state inside a state dir."""

    root: str

    @classmethod
    def for_store(cls, state_dir: str, store_url: str) -> "Workspace":
        """The workspace of the store ``store_url`` names (a local store's URL is its real
        path: see LocalStore), made on first use; or the one made for the same local
        store under another URL (a path through a symlink, before URLs were real paths),
        so every name of a store shares one staging."""
        repos = cls.prepare(state_dir, store_url)
        found = cls.find(state_dir, store_url)
        root = private_dir(found.root if found else os.path.join(repos, _workspace_name(store_url)))
        marker = os.path.join(root, "store-url")
        if not os.path.exists(marker):
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
            with open(fd, "w") as f:
                f.write(store_url + "\n")
        return cls(root)

    @staticmethod
    def prepare(state_dir: str, store_url: str) -> str:
        """Check and make the state directory (outside a local store) and its ``repos``;
        returns that. ``init`` calls it before it writes the store: a state directory it
        cannot use would otherwise leave a repository without its first commit."""
        state_dir = os.path.abspath(state_dir)
        _check_outside_store(state_dir, store_url)
        make_dir(state_dir)  # a new state dir is private; an existing one is left as it is
        return private_dir(os.path.join(state_dir, "repos"))

    @classmethod
    def find(cls, state_dir: str, store_url: str) -> Optional["Workspace"]:
        """The workspace of ``store_url`` if this host has one (nothing is made): a
        repository was opened there before."""
        repos = os.path.join(os.path.abspath(state_dir), "repos")
        root = os.path.join(repos, _workspace_name(store_url))
        if os.path.isdir(root):
            return cls(root)
        other = _same_local_store(repos, store_url)
        return None if other is None else cls(other)

    @classmethod
    def set_aside(cls, state_dir: str, store_url: str) -> Optional[str]:
        """Rename this host's workspace of ``store_url``, if it has one, out of the way of
        a new repository there (init): its staging and cache are an earlier
        repository's, whose commits the new one does not have. Returns the new name."""
        ws = cls.find(state_dir, store_url)
        if ws is None:
            return None
        aside = "%s.earlier-%s" % (ws.root, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        n = 1
        while os.path.lexists(aside + ("" if n == 1 else f".{n}")):
            n += 1
        aside += "" if n == 1 else f".{n}"
        os.rename(ws.root, aside)
        return aside

    def claim(self, repo_id: str, store_url: str) -> None:
        """Record which repository this workspace holds the state of (a workspace made
        before this was recorded is taken to be the store's); refuse one whose
        repository was replaced by a new one at the same URL meanwhile."""
        path = os.path.join(self.root, REPO_ID_FILE)
        try:
            with open(path) as f:
                held = f.read().strip()
        except FileNotFoundError:
            held = None
        if held is None:  # written whole under its name (processes opening it at once)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                             PRIVATE_FILE)
                with open(fd, "w") as f:
                    f.write(repo_id + "\n")
                os.replace(tmp, path)
            except OSError as exc:  # (a read-only state dir: the next writable open records it)
                log.debug("workspace %s: repository not recorded: %s", self.root, exc)
            return
        if held != repo_id:
            raise GravfsError(
                f"this host's workspace {self.root} holds the state of an earlier repository "
                f"at {store_url} (a new one was made there since, by 'gravfs init'); its "
                "staged changes do not apply to this one: move it away (it is kept for "
                "you to copy from) and run the command again")

    @property
    def state_dir(self) -> str:
        """The state directory holding this workspace (``<state>/repos/<id>``)."""
        return os.path.dirname(os.path.dirname(self.root))

    def sub(self, name: str) -> str:
        """The workspace directory ``name``, created (or tightened) 0700."""
        return private_dir(os.path.join(self.root, name))

    @property
    def staging(self) -> str:
        return self.sub("staging")

    @property
    def cache(self) -> str:
        return self.sub("cache")

    @property
    def tmp(self) -> str:
        return self.sub("tmp")

    @property
    def locks(self) -> str:
        return self.sub("locks")
