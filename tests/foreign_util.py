"""Commits another writer could make: keys gravfs itself refuses, written with the
version layer (which takes opaque keys), a commit object and a head move."""

from __future__ import annotations

import time

from gravfs.fs.entry import KIND_DIRECTORY, EntryInfo, encode_entry, entry_identity
from gravfs.version.refs.commits import Commit

# keys the CLI refuses but a lakeFS writer or a hand-made range can hold
FOREIGN_KEYS = {
    b"/abs": b"leading slash",
    b"a//b": b"empty component",
    b"d/../up": b"dot-dot",
    b"d/./dot": b"dot",
    b"nul\x00x": b"nul byte",
    b"long" + b"x" * 300: b"long name",
    b"trail/": b"file at a trailing slash",
}


def commit_keys(repo, branch: str, files: dict, message: str = "foreign writer",
                dirs: tuple = ()) -> Commit:
    """Commit the branch's head tree plus ``files`` ({key: content}) and directory
    markers ``dirs`` (keys ending in '/'), keys taken as they are."""
    head, version = repo.heads.branch(branch)
    parent = repo.commits.get(head)
    records = {rec[0]: (rec[1], rec[2]) for rec in repo.committed.iter(parent.metarange)}
    now = time.time_ns()
    for key, content in files.items():
        address, size = repo.data.put_bytes(content)
        e = EntryInfo(address=address, size=size, mtime_ns=now)
        records[key] = (entry_identity(e), encode_entry(e))
    for key in dirs:
        e = EntryInfo(mtime_ns=now, kind=KIND_DIRECTORY)
        records[key] = (entry_identity(e), encode_entry(e))
    mr = repo.committed.write_metarange((k, *records[k]) for k in sorted(records))
    c = repo.commits.put(Commit(mr, (head,), message, "other-writer", now,
                                parent.generation + 1, {}))
    repo.heads.move_branch(branch, version, c.id)
    repo.forget_head(branch)
    return c
