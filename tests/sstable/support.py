"""Helpers shared by the tests of gravfs.sstable (no tests here).

Test tables are produced with rocksdict's own SstFileWriter in every layout we
claim to read, and read back both by our reader and by RocksDB (ingested into a
scratch Rdict), so the two readers are compared on the very same bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import rocksdict

SST_DUMP = "/usr/bin/sst_dump"


def rocksdict_sst(
    path: str,
    items,
    *,
    format_version: int = 2,
    checksum: str = "crc32c",
    compression: str = "snappy",
    index: str = "binary_search",
    block_size: int = 4096,
    metadata_block_size: int | None = None,
    index_restart_interval: int | None = None,
    restart_interval: int | None = None,
    data_block_index: str | None = None,
    deletes=(),
    prefix_len: int | None = None,
) -> str:
    """Write ``items`` (sorted) plus deletion markers for ``deletes`` with rocksdict."""
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(format_version)
    table.set_checksum_type(getattr(rocksdict.ChecksumType, checksum)())
    table.set_index_type(getattr(rocksdict.BlockBasedIndexType, index)())
    table.set_block_size(block_size)
    if metadata_block_size:
        table.set_metadata_block_size(metadata_block_size)
    if index_restart_interval:
        table.set_index_block_restart_interval(index_restart_interval)
    if restart_interval:
        table.set_block_restart_interval(restart_interval)
    if data_block_index:
        table.set_data_block_index_type(getattr(rocksdict.DataBlockIndexType, data_block_index)())
    opts = rocksdict.Options(raw_mode=True)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    if prefix_len:  # the hash-search index needs a prefix extractor
        opts.set_prefix_extractor(rocksdict.SliceTransform.create_fixed_prefix(prefix_len))
    writer = rocksdict.SstFileWriter(opts)
    writer.open(path)
    merged = sorted([(k, v) for k, v in items] + [(k, None) for k in deletes], key=lambda kv: kv[0])
    for k, v in merged:
        if v is None:
            del writer[k]
        else:
            writer[k] = v
    writer.finish()
    return path


def rocksdb_items(path: str) -> list[tuple[bytes, bytes]]:
    """What RocksDB itself reads from the table at ``path`` (ingested into a scratch DB)."""
    tmp = tempfile.mkdtemp(prefix="gravfs-rdict-")
    try:
        db = rocksdict.Rdict(os.path.join(tmp, "db"), rocksdict.Options(raw_mode=True))
        try:
            copy = os.path.join(tmp, "in.sst")
            shutil.copyfile(path, copy)
            db.ingest_external_file([copy])
            return list(db.items())
        finally:
            db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sst_dump(path: str, *args: str) -> subprocess.CompletedProcess:
    # sst_dump writes some outputs next to the input; run it from a scratch cwd.
    return subprocess.run(
        [SST_DUMP, f"--file={os.path.abspath(path)}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )


def sst_dump_scan_hex(path: str) -> list[tuple[bytes, bytes]]:
    """Entries as printed by ``sst_dump --command=scan --output_hex``."""
    out = sst_dump(path, "--command=scan", "--output_hex")
    assert out.returncode == 0, out.stderr
    items = []
    for line in out.stdout.splitlines():
        if " => " not in line or not line.startswith("'"):
            continue
        left, value = line.split(" => ", 1)
        key_hex = left[1 : left.index("'", 1)]
        items.append((bytes.fromhex(key_hex), bytes.fromhex(value.strip())))
    return items


def make_items(n: int, value_size: int = 40, prefix: bytes = b"dir/file-") -> list[tuple[bytes, bytes]]:
    return [(prefix + b"%07d" % i, (b"%d:" % i) + bytes([i % 251]) * value_size) for i in range(n)]


def rewrite_block(data: bytearray, offset: int, size: int, contents: bytes, checksum_type: int = 1) -> None:
    """Replace a block's stored bytes in place (same size) and give it a valid trailer,
    so the reader gets past the checksum and must catch the damage itself."""
    from gravfs.sstable.format import block_checksum

    assert len(contents) == size
    ctype = data[offset + size]
    body = bytes(contents) + bytes([ctype])
    data[offset : offset + size + 5] = body + block_checksum(checksum_type, body).to_bytes(4, "little")
