"""By-reference (ADDRESS_FULL) entries for tests, staged directly (no importer needed):
their sources as local files or objects in a second bucket of the test SeaweedFS."""

from __future__ import annotations

import os

from gravfs.data.external import Source, file_tag
from gravfs.fs.entry import ADDRESS_FULL, KIND_FILE, EntryInfo
from gravfs.fs.repository import Repository

SOURCE_BUCKET = "gravfs-source"


def write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def file_source(path: str) -> Source:
    st = os.stat(path)
    return Source(f"file://{path}", st.st_size, file_tag(st))


def ensure_source_bucket(server):
    """A boto3 client of the test server, with the source bucket created."""
    client = server.client()
    try:
        client.create_bucket(Bucket=SOURCE_BUCKET)
    except client.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("BucketAlreadyExists",
                                                           "BucketAlreadyOwnedByYou"):
            raise
    return client


def put_source(client, key: str, data: bytes) -> Source:
    etag = client.put_object(Bucket=SOURCE_BUCKET, Key=key, Body=data)["ETag"]
    return Source(f"s3://{SOURCE_BUCKET}/{key}", len(data), etag.strip('"'))


def byref_entry(src: Source, mtime_ns: int = 1_700_000_000_123_456_789) -> EntryInfo:
    """The entry an import by reference makes for a source (as the contract says)."""
    return EntryInfo(address=src.url, size=src.size, mtime_ns=mtime_ns, e_tag=src.e_tag,
                     address_type=ADDRESS_FULL, kind=KIND_FILE)


def commit_byref(store, state_dir: str, files: dict[str, Source], branch: str = "main",
                 message: str = "by reference") -> None:
    """Stage by-reference entries at the given paths and commit them."""
    repo = Repository.open(store, state_dir)
    try:
        repo.stage(branch, [(path.encode(), byref_entry(src)) for path, src in files.items()])
        repo.commit(branch, message)
    finally:
        repo.close()
