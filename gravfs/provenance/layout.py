"""The index tables on disk: schemas, sort keys, Parquet settings and sidecars.

Every table is a set of Parquet files, each sorted by the table's key (and
the columns after it) and holding a disjoint key span within one index run.
Point queries read one row group, so row groups are small (ROW_GROUP_ROWS,
chosen by measurement: scripts/bench_spark_index.py --sweep; 8,192 rows made a
warm query 2x slower, for an index 1.7x smaller) and files hold at most
FILE_ROWS rows (128 row groups) so a footer stays small to parse. Statistics, the
page index and page checksums are written (DuckDB and other readers use the
first two; the checksums turn a damaged page into an error, not a wrong row).

Sidecar (``<file>.fences``, JSON): the first and last key and the row count
of each row group, so a lookup picks its row group(s) without parsing the
footer's statistics of every row group and column, and the manifest keeps
each file's key span so a lookup opens only the files that can hold its key.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from gravfs.errors import CorruptDataError

INDEX_PREFIX = "_gravfs/index/"
ROW_GROUP_ROWS = 2048
FILE_ROWS = 1 << 18
PAGE_BYTES = 64 << 10
COMPRESSION = "zstd"

CONTENTS = "contents_in_ranges"
RANGES_IN_COMMITS = "ranges_in_commits"
PATHS = "paths_in_ranges"
COMMITS = "commits"
RANGES = "ranges"  # internal: the ranges indexed so far (what an incremental run skips)

SCHEMAS: dict[str, pa.Schema] = {
    CONTENTS: pa.schema([("address", pa.binary()), ("range_id", pa.binary()),
                         ("path", pa.binary())]),
    RANGES_IN_COMMITS: pa.schema([("range_id", pa.binary()), ("commit_id", pa.binary())]),
    PATHS: pa.schema([("path", pa.binary()), ("range_id", pa.binary()),
                      ("identity", pa.binary())]),
    COMMITS: pa.schema([("id", pa.binary()), ("parents", pa.list_(pa.binary())),
                        ("time_ns", pa.int64()), ("generation", pa.int64()),
                        ("author", pa.string()), ("message", pa.string()),
                        ("metadata", pa.string()), ("metarange", pa.binary())]),
    RANGES: pa.schema([("range_id", pa.binary())]),
}
# sort order of each table; the first column is its key
SORT: dict[str, tuple[str, ...]] = {
    CONTENTS: ("address", "range_id", "path"),
    RANGES_IN_COMMITS: ("range_id", "commit_id"),
    PATHS: ("path", "range_id"),
    COMMITS: ("id",),
    RANGES: ("range_id",),
}
TABLES = (CONTENTS, RANGES_IN_COMMITS, PATHS, COMMITS, RANGES)


def key_column(table: str) -> str:
    return SORT[table][0]


def table_prefix(table: str) -> str:
    return f"{INDEX_PREFIX}{table}/"


@dataclass(frozen=True)
class FileInfo:
    """One Parquet file of a table, as the manifest lists it (keys as hex)."""

    key: str
    sidecar: str
    rows: int
    bytes: int
    min: str
    max: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "FileInfo":
        return cls(str(d["key"]), str(d["sidecar"]), int(d["rows"]), int(d["bytes"]),
                   str(d["min"]), str(d["max"]))

    @property
    def min_key(self) -> bytes:
        return bytes.fromhex(self.min)

    @property
    def max_key(self) -> bytes:
        return bytes.fromhex(self.max)


@dataclass(frozen=True)
class Fences:
    """Sidecar of one file: per row group, its first and last key and its rows."""

    first: list[bytes]
    last: list[bytes]
    rows: list[int]

    def encode(self) -> bytes:
        return json.dumps({"format": 1, "groups": [[f.hex(), l.hex(), n] for f, l, n in
                                                   zip(self.first, self.last, self.rows)]},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes, where: str) -> "Fences":
        try:
            d = json.loads(raw)
            groups = d["groups"]
            first = [bytes.fromhex(g[0]) for g in groups]
            last = [bytes.fromhex(g[1]) for g in groups]
            rows = [int(g[2]) for g in groups]
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CorruptDataError(f"sidecar does not parse: {exc}", path=where) from None
        return cls(first, last, rows)

    def groups_between(self, lo: bytes, hi: Optional[bytes]) -> list[int]:
        """Row groups that may hold a key k with lo <= k < hi (hi None: no upper end)."""
        return [i for i, (f, l) in enumerate(zip(self.first, self.last))
                if l >= lo and (hi is None or f < hi)]


def _writer(path: str, table: str) -> pq.ParquetWriter:
    schema = SCHEMAS[table]
    return pq.ParquetWriter(
        path, schema, compression=COMPRESSION, write_statistics=True,
        write_page_index=True, write_page_checksum=True, data_page_size=PAGE_BYTES,
        sorting_columns=[pq.SortingColumn(schema.get_field_index(c)) for c in SORT[table]])


@dataclass
class WrittenFile:
    """A finished local file and its sidecar, before it is uploaded."""

    path: str
    fences: Fences
    rows: int


def write_sorted(table: str, batches: Iterable[pa.RecordBatch], dest_dir: str, name: str,
                 row_group_rows: int = ROW_GROUP_ROWS, file_rows: int = FILE_ROWS
                 ) -> Iterator[WrittenFile]:
    """Write batches already sorted by the table's key as Parquet files of at most
    ``file_rows`` rows (``<dest_dir>/<name>-NNN.parquet``) with row groups of
    ``row_group_rows``; yields each file when it is closed."""
    schema = SCHEMAS[table]
    keycol = key_column(table)
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    seq = 0
    writer = None
    path = ""
    fences = Fences([], [], [])
    file_count = 0

    def flush_group(tbl: pa.Table):
        nonlocal writer, path, fences, file_count, seq
        if writer is None:
            path = os.path.join(dest_dir, f"{name}-{seq:03d}.parquet")
            seq += 1
            writer = _writer(path, table)
            fences = Fences([], [], [])
            file_count = 0
        keys = tbl.column(keycol)
        writer.write_table(tbl, row_group_size=tbl.num_rows)
        fences.first.append(keys[0].as_py())
        fences.last.append(keys[-1].as_py())
        fences.rows.append(tbl.num_rows)
        file_count += tbl.num_rows
        if file_count >= file_rows:
            writer.close()
            writer = None
            return WrittenFile(path, fences, file_count)
        return None

    for batch in batches:
        if batch.num_rows == 0:
            continue
        if batch.schema != schema:
            batch = pa.RecordBatch.from_arrays([batch.column(n).cast(schema.field(n).type)
                                                for n in schema.names], schema=schema)
        pending.append(batch)
        pending_rows += batch.num_rows
        while pending_rows >= row_group_rows:
            tbl = pa.Table.from_batches(pending, schema)
            done = flush_group(tbl.slice(0, row_group_rows).combine_chunks())
            rest = tbl.slice(row_group_rows)
            pending = rest.to_batches()
            pending_rows = rest.num_rows
            if done is not None:
                yield done
    if pending_rows:
        done = flush_group(pa.Table.from_batches(pending, schema).combine_chunks())
        if done is not None:
            yield done
    if writer is not None:
        writer.close()
        yield WrittenFile(path, fences, file_count)


def upload_file(store, table: str, run_id: str, written: WrittenFile) -> FileInfo:
    """Put a written file and its sidecar into the store; its manifest entry."""
    base = os.path.basename(written.path)
    key = f"{table_prefix(table)}{run_id}/{base}"
    sidecar = key + ".fences"
    size = os.path.getsize(written.path)
    store.upload(key, written.path)
    store.put(sidecar, written.fences.encode())
    return FileInfo(key, sidecar, written.rows, size, written.fences.first[0].hex(),
                    written.fences.last[-1].hex())


def sort_table(table: str, data: pa.Table) -> pa.Table:
    """A table's rows in its sort order (the driver's small tables)."""
    return data.sort_by([(c, "ascending") for c in SORT[table]])
