"""Reading the sources of by-reference entries (gravfs.data.external): file:// sources on
local disk and s3:// sources in a bucket of the test suite's SeaweedFS, read exactly while
unchanged and refused (SourceChangedError, no bytes) once changed or gone."""

from __future__ import annotations

import io
import os
import pickle
import uuid

import pytest

from gravfs.data.external import (ExternalReader, Source, check_source, copy_source,
                                  is_external, iter_source, read_source)
from gravfs.errors import CorruptDataError, SourceChangedError, StoreUnavailableError
from gravfs.fs.entry import ADDRESS_FULL, ADDRESS_RELATIVE
from gravfs.store.local import LocalStore
from tests.byref_util import SOURCE_BUCKET, ensure_source_bucket, file_source, put_source
from tests.byref_util import write_file as _write

MiB = 1 << 20


@pytest.fixture
def store(tmp_path):
    return LocalStore(str(tmp_path / "store"))


# -- file:// ------------------------------------------------------------------------------


def test_is_external_matches_the_entry_address_type():
    assert is_external(ADDRESS_FULL) and not is_external(ADDRESS_RELATIVE)


def test_file_source_reads_back_exactly(store, tmp_path):
    data = os.urandom(3 * MiB + 5)
    path = str(tmp_path / "src.bin")
    _write(path, data)
    src = file_source(path)
    assert read_source(store, src) == data
    assert read_source(store, src, 1000, 70) == data[1000:1070]
    assert read_source(store, src, len(data) - 3, 100) == data[-3:]
    out = io.BytesIO()
    assert copy_source(store, src, out) == len(data) and out.getvalue() == data
    assert [len(c) for c in iter_source(store, src, chunk=MiB)] == [MiB, MiB, MiB, 5]
    check_source(store, src)


@pytest.mark.parametrize("change", ["other size", "same size other bytes", "vanished",
                                    "directory"])
def test_changed_file_source_is_refused(store, tmp_path, change):
    path = str(tmp_path / "src.bin")
    data = os.urandom(4096)
    _write(path, data)
    src = file_source(path)
    if change == "other size":
        _write(path, data + b"x")
    elif change == "same size other bytes":
        _write(path, bytes(reversed(data)))
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, src_mtime(src) + 1))  # a newer mtime, same size
    elif change == "vanished":
        os.unlink(path)
    elif change == "directory":
        os.unlink(path)
        os.mkdir(path)
    reader = ExternalReader(store)
    for attempt in (lambda: reader.read(src), lambda: reader.read(src, 10, 10),
                    lambda: list(reader.iter(src)), lambda: reader.check(src)):
        with pytest.raises(SourceChangedError) as info:
            attempt()
        assert src.url in str(info.value) and "\n" not in str(info.value)
        assert isinstance(info.value, CorruptDataError)  # EIO in the mount, exit 7 in the CLI
        assert info.value.vanished == (change == "vanished")


def src_mtime(src: Source) -> int:
    return int(src.e_tag.split("-")[0], 16)


def _streaming(store, tmp_path, size: int):
    """(path, its source, a stream of it by MiB whose first chunk was read)."""
    path = str(tmp_path / "src.bin")
    data = os.urandom(size)
    _write(path, data)
    src = file_source(path)
    chunks = iter_source(store, src, chunk=MiB)
    assert next(chunks) == data[:MiB]
    return path, src, chunks


def test_file_source_changed_during_a_stream_fails_at_the_next_chunk(store, tmp_path):
    path, _, chunks = _streaming(store, tmp_path, 3 * MiB)
    with open(path, "r+b") as f:  # in place: the open descriptor sees the new bytes
        f.seek(MiB)
        f.write(b"\0" * MiB)
    with pytest.raises(SourceChangedError):
        next(chunks)


def test_file_renamed_over_during_a_stream_fails_at_the_next_chunk(store, tmp_path):
    """Another file at the path, even with the same size and mtime (the tag cannot tell
    them apart), is not the file being read: the rest is not read from the old one."""
    path, src, chunks = _streaming(store, tmp_path, 2 * MiB)
    other = str(tmp_path / "other")
    _write(other, bytes(2 * MiB))
    os.utime(other, ns=(0, src_mtime(src)))
    os.rename(other, path)
    assert file_source(path) == src
    with pytest.raises(SourceChangedError, match="another file"):
        next(chunks)


def test_bad_addresses_are_one_clear_error(store):
    for url in ("http://example.com/x", "file://relative/path", "s3://bucket-only"):
        with pytest.raises(CorruptDataError) as info:
            read_source(store, Source(url, 1, "abc"))
        assert url in str(info.value)
    with pytest.raises(CorruptDataError, match="no version tag"):
        read_source(store, Source("file:///etc/hostname", 1, ""))


def test_empty_file_source_is_still_checked(store, tmp_path):
    path = str(tmp_path / "empty")
    _write(path, b"")
    src = file_source(path)
    assert read_source(store, src) == b"" and list(iter_source(store, src)) == []
    os.unlink(path)
    with pytest.raises(SourceChangedError):
        read_source(store, src)


def test_reader_pickles_as_its_store(store, tmp_path):
    path = str(tmp_path / "src.bin")
    _write(path, b"hello")
    r = pickle.loads(pickle.dumps(ExternalReader(store)))
    assert r.store.url == store.url
    assert r.read(file_source(path)) == b"hello"


# -- s3:// --------------------------------------------------------------------------------


@pytest.fixture
def source_bucket(s3_server):
    """A second bucket on the test server, holding the sources."""
    return ensure_source_bucket(s3_server)


def test_s3_source_reads_back_exactly_with_the_store_settings(s3_server, s3_store, source_bucket,
                                                               monkeypatch):
    for var in ("GRAVFS_S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)  # only the store knows the server
    data = os.urandom(9 * MiB + 7)
    key = f"src/{uuid.uuid4().hex}/a b+c//odd.bin"  # as listed: not a key gravfs would write
    src = put_source(source_bucket, key, data)
    assert read_source(s3_store, src) == data
    assert read_source(s3_store, src, 5 * MiB, 10) == data[5 * MiB:5 * MiB + 10]
    out = io.BytesIO()
    assert copy_source(s3_store, src, out) == len(data) and out.getvalue() == data
    check_source(s3_store, src)
    empty = put_source(source_bucket, f"src/{uuid.uuid4().hex}/empty", b"")
    assert read_source(s3_store, empty) == b""


@pytest.mark.parametrize("change", ["other etag same size", "other size", "vanished"])
def test_changed_s3_source_is_refused(s3_store, source_bucket, change):
    key = f"src/{uuid.uuid4().hex}"
    data = os.urandom(64 * 1024)
    src = put_source(source_bucket, key, data)
    if change == "other etag same size":
        put_source(source_bucket, key, bytes(reversed(data)))
    elif change == "other size":
        put_source(source_bucket, key, data[:100])
    else:
        source_bucket.delete_object(Bucket=SOURCE_BUCKET, Key=key)
    reader = ExternalReader(s3_store)
    for attempt in (lambda: reader.read(src), lambda: reader.read(src, 60000, 100),
                    lambda: list(reader.iter(src)), lambda: reader.check(src)):
        with pytest.raises(SourceChangedError) as info:
            attempt()
        assert src.url in str(info.value)
        assert info.value.vanished == (change == "vanished")


def test_s3_source_with_a_recorded_etag_it_never_had_is_refused(s3_store, source_bucket):
    """The answer's ETag is compared too: a wrong tag never reads."""
    src = put_source(source_bucket, f"src/{uuid.uuid4().hex}", b"payload")
    wrong = Source(src.url, src.size, "0" * 32)
    with pytest.raises(SourceChangedError):
        read_source(s3_store, wrong)
    with pytest.raises(SourceChangedError):
        check_source(s3_store, wrong)


# -- the mount's reader (gravfs.data.reader.DataReader.read_external) ----------------------


def test_data_reader_caches_a_source_by_version(tmp_path):
    from gravfs.data.reader import CHUNK, DataReader, ReadState
    from gravfs.fs.repository import Repository

    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    reader = DataReader(repo.data)
    try:
        path = str(tmp_path / "src.bin")
        data = os.urandom(2 * CHUNK + 5)
        _write(path, data)
        src = file_source(path)
        state = ReadState()
        got = b"".join(reader.read_external(state, src, off, MiB)
                       for off in range(0, len(data), MiB))
        assert got == data and reader.stats["chunk_fetches"] == 3
        assert reader.read_external(ReadState(), src, CHUNK - 2, 4) == data[CHUNK - 2:CHUNK + 2]
        assert reader.stats["chunk_fetches"] == 3  # another handle: from the cache
        assert reader.read_external(state, src, len(data), 10) == b""

        assert reader.read_external(state, src, 0, 10) == data[:10]  # same handle: cached

        new = os.urandom(len(data) + 1)
        _write(path, new)
        with pytest.raises(SourceChangedError):  # a new handle (open) asks the source
            reader.read_external(ReadState(), src, 0, 100)
        assert reader.read_external(state, src, 0, 10) == data[:10]  # checked at its start
        fresh = file_source(path)  # the same URL referenced again: another version
        assert reader.read_external(ReadState(), fresh, 0, 100) == new[:100]
    finally:
        reader.close()
        repo.close()


def test_source_endpoint_can_differ_from_the_store(s3_server, source_bucket, store, monkeypatch):
    """GRAVFS_SOURCE_S3_ENDPOINT names the sources' server when the store's is another."""
    src = put_source(source_bucket, f"src/{uuid.uuid4().hex}", b"elsewhere")
    monkeypatch.setenv("GRAVFS_S3_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("GRAVFS_S3_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("GRAVFS_SOURCE_S3_ENDPOINT", s3_server.endpoint_url)
    assert ExternalReader(store).read(src) == b"elsewhere"
    monkeypatch.delenv("GRAVFS_SOURCE_S3_ENDPOINT")
    with pytest.raises(StoreUnavailableError):  # the environment's endpoint: unreachable
        ExternalReader(store).read(src)
