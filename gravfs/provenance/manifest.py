"""What the index holds: ``_gravfs/index/manifest.json``, one entry per index run.

A run lists the files it added to each table with their key spans. The
manifest is the only mutable object of the index: it is read straight from
the store (never through the tier, which caches immutable objects) and
replaced by compare-and-swap, so two index runs never lose each other's
files: the second one to finish fails and is run again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from gravfs.errors import CorruptDataError, NotFoundError
from gravfs.provenance.layout import INDEX_PREFIX, TABLES, FileInfo

MANIFEST = INDEX_PREFIX + "manifest.json"
FORMAT = 1


@dataclass
class Run:
    """One ``gravfs spark index`` run: what it indexed and the files it wrote."""

    id: str
    time_ns: int
    commits: int
    ranges: int
    files: dict[str, list[FileInfo]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"id": self.id, "time_ns": self.time_ns, "commits": self.commits,
                "ranges": self.ranges,
                "files": {t: [f.to_json() for f in fs] for t, fs in sorted(self.files.items())}}

    @classmethod
    def from_json(cls, d: dict) -> "Run":
        return cls(str(d["id"]), int(d["time_ns"]), int(d["commits"]), int(d["ranges"]),
                   {t: [FileInfo.from_json(f) for f in fs] for t, fs in d["files"].items()})


@dataclass
class Manifest:
    runs: list[Run] = field(default_factory=list)
    version: Optional[str] = None  # the store's version token it was read at (None: new)

    def files(self, table: str) -> list[FileInfo]:
        return [f for r in self.runs for f in r.files.get(table, [])]

    @property
    def commits(self) -> int:
        return sum(r.commits for r in self.runs)

    def encode(self) -> bytes:
        return json.dumps({"format": FORMAT, "runs": [r.to_json() for r in self.runs]},
                          sort_keys=True, indent=1).encode()

    @classmethod
    def decode(cls, raw: bytes, version: Optional[str]) -> "Manifest":
        try:
            d = json.loads(raw)
            if d.get("format") != FORMAT:
                raise ValueError(f"format {d.get('format')!r}, this gravfs reads {FORMAT}")
            runs = [Run.from_json(r) for r in d["runs"]]
            for r in runs:
                unknown = set(r.files) - set(TABLES)
                if unknown:
                    raise ValueError(f"unknown table {sorted(unknown)[0]!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptDataError(f"index manifest does not parse: {exc}", path=MANIFEST) from None
        return cls(runs, version)


def load(store) -> Optional[Manifest]:
    """The manifest as stored now, or None when no index was built."""
    try:
        raw, version = store.read_versioned(MANIFEST)
    except NotFoundError:
        return None
    return Manifest.decode(raw, version)


def save(store, manifest: Manifest) -> str:
    """Replace the manifest read at ``manifest.version`` (CAS); PreconditionFailedError when
    another run replaced it meanwhile."""
    return store.compare_and_swap(MANIFEST, manifest.version, manifest.encode())
