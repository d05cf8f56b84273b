"""An inventory manifest as an import source (S3 Inventory's CSV or Parquet files).

How lakes of 100M+ objects are listed in practice: S3 Inventory writes the
bucket's listing as data files and a ``manifest.json`` naming them. SOURCE is
one of (a local/shared path or an ``s3://`` URL):

- a ``manifest.json`` of S3 Inventory: its ``fileFormat``, ``fileSchema`` (the
  CSV columns) and ``files`` (in its ``destinationBucket``);
- a data file (``.csv``, ``.csv.gz``, ``.parquet``), or a directory (an S3
  prefix ending in '/') of them.

Columns ``bucket, key, size, last_modified_date, e_tag`` are needed; names are
compared without case, '_' or spaces, so S3 Inventory's ``Bucket, Key, Size,
LastModifiedDate, ETag`` match; other columns are ignored. Parquet files carry
their names. CSV files have no header: their columns are ``fileSchema``'s,
else ``columns`` (``--manifest-columns``), else S3 Inventory's default order
``bucket,key,size,last_modified_date,e_tag``; a CSV key is URL-encoded (as
S3 Inventory writes it) and decoded here, a Parquet key is not.

Executors read the files with pyarrow, one task per file (per row group of a
local Parquet file): measured faster here than Spark's own readers, which
would also need Hadoop's S3 connector for ``s3://`` files. A row that does not
parse (a missing field, a size or date that is not one) fails the import with
the file named. ``key_prefix`` (a folder: '/' is added) keeps the rows whose
key starts with it, their paths relative to it. Keys ending in '/' (folder
objects) are skipped; one that holds bytes is named in a warning and in the
import's summary.

The inventory of a versioned bucket lists every version of a key and its delete
markers, with columns ``is_latest`` and ``is_delete_marker``: where they are,
only a key's latest version is imported, and a key whose latest version is a
delete marker not at all (its older versions are not the bucket's content). A
key listed twice otherwise (two inventories of one bucket side by side) fails
the import naming it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Optional
from urllib.parse import unquote_plus

from gravfs.errors import GravfsError
from gravfs.fs.entry import ADDRESS_FULL, KIND_FILE, EntryInfo, encode_entry, entry_identity
from gravfs.spark import leftout
from gravfs.spark.s3source import COPY_THREADS, MARKER_WITH_BYTES, S3Object, entry_of_object, \
    folder_marker, parse_s3_url, source_store
from gravfs.threadmap import ordered_map
from gravfs.version.committed.record import encode_value

log = logging.getLogger(__name__)

NEEDED = ("bucket", "key", "size", "lastmodifieddate", "etag")
VERSIONS = ("islatest", "isdeletemarker")  # a versioned bucket's inventory (module doc)
DEFAULT_COLUMNS = "bucket,key,size,last_modified_date,e_tag"
_SUFFIXES = (".csv", ".csv.gz", ".parquet")
BATCH_ROWS = 65536
SAMPLE_EVERY = 1000  # rows per sampled key when choosing the sorted partitions' bounds


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


def looks_like_manifest(src: str) -> bool:
    """A SOURCE named like a manifest or one of its data files."""
    return src.endswith("manifest.json") or src.endswith(_SUFFIXES)


def _fmt(path: str) -> str:
    return "parquet" if path.endswith(".parquet") else "csv"


# --- files, local or on S3 -------------------------------------------------------------

def _read_bytes(url: str) -> bytes:
    if url.startswith("s3://"):
        bucket, key = parse_s3_url(url)
        return source_store(bucket).get(key.rstrip("/"))
    with open(url, "rb") as f:
        return f.read()


def _local_copy(url: str, tmp_dir: Optional[str]) -> tuple[str, bool]:
    """(local path of the file, whether it is a temporary copy)."""
    if not url.startswith("s3://"):
        return url, False
    bucket, key = parse_s3_url(url)
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix="manifest-", suffix=os.path.basename(url))
    os.close(fd)
    try:
        source_store(bucket).download(key.rstrip("/"), tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, True


def _list_files(src: str) -> list[str]:
    """The data files of a directory or an S3 prefix, sorted."""
    if src.startswith("s3://"):
        from gravfs.spark.s3source import list_pages
        bucket, prefix = parse_s3_url(src)
        return sorted(f"s3://{bucket}/{o.key}" for objs, _ in list_pages(bucket, prefix)
                      for o in objs if o.key.endswith(_SUFFIXES))
    out = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(_SUFFIXES)]
    return out


# --- reading rows (executors) ------------------------------------------------------------

class _Columns:
    """Which position of a file's columns holds each needed one."""

    def __init__(self, names: list[str], where: str):
        normed = [_norm(n) for n in names]
        missing = [n for n in NEEDED if n not in normed]
        if missing:
            raise GravfsError(f"{where}: the manifest lacks column(s) {', '.join(missing)} "
                              f"(it has: {', '.join(names)})")
        self.names = names
        self.pick = {n: names[normed.index(n)] for n in NEEDED}
        self.versions = {n: names[normed.index(n)] for n in VERSIONS if n in normed}

    def read(self, *needed: str) -> list[str]:
        """The file's names of ``needed`` (default: all NEEDED) and the version columns."""
        return [self.pick[n] for n in needed or NEEDED] + list(self.versions.values())

    def csv_types(self) -> dict:
        import pyarrow as pa
        types = {self.pick["size"]: pa.int64(),
                 self.pick["lastmodifieddate"]: pa.timestamp("ns", "UTC")}
        for n in ("bucket", "key", "etag"):
            types[self.pick[n]] = pa.string()
        for name in self.versions.values():
            types[name] = pa.bool_()
        return types

    def current(self, table, where: str):
        """The mask of rows that are a key's current content, or None when the file
        lists no versions: not an older version, not a delete marker."""
        import pyarrow as pa
        import pyarrow.compute as pc
        mask = None
        for n, name in self.versions.items():
            col = table.column(table.schema.get_field_index(name))
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                col = pc.equal(pc.utf8_lower(col), "true")
            elif not pa.types.is_boolean(col.type):
                raise GravfsError(f"{where}: column {name} is not true or false")
            flag = pc.fill_null(col, n == "islatest")  # absent: latest, not a marker
            keep = flag if n == "islatest" else pc.invert(flag)
            mask = keep if mask is None else pc.and_(mask, keep)
        return mask


def _csv_batches(path: str, names: list[str], where: str):
    from pyarrow import csv

    cols = _Columns(names, where)
    reader = csv.open_csv(path, read_options=csv.ReadOptions(column_names=names,
                                                             block_size=8 << 20),
                          convert_options=csv.ConvertOptions(
                              column_types=cols.csv_types(), include_columns=cols.read()))
    for batch in reader:
        yield cols, batch


def _parquet_batches(path: str, where: str, row_group: Optional[int]):
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    cols = _Columns(f.schema_arrow.names, where)
    groups = range(f.num_row_groups) if row_group is None else [row_group]
    for g in groups:
        for batch in f.iter_batches(BATCH_ROWS, row_groups=[g], columns=cols.read()):
            yield cols, batch


def read_rows(url: str, fmt: str, names: Optional[list[str]], row_group: Optional[int] = None,
              tmp_dir: Optional[str] = None) -> Iterator[tuple[str, str, int, int, str]]:
    """(bucket, key, size, mtime_ns, etag) of every row of one data file (or row group).
    A file that cannot be read or parsed is a GravfsError naming it."""
    import pyarrow as pa

    path, temp = _local_copy(url, tmp_dir)
    try:
        batches = (_parquet_batches(path, url, row_group) if fmt == "parquet"
                   else _csv_batches(path, names, url))
        try:
            for cols, batch in batches:
                current = cols.current(batch, url)
                if current is not None:
                    batch = batch.filter(current)
                t = {n: batch.column(batch.schema.get_field_index(cols.pick[n])) for n in NEEDED}
                lm = t["lastmodifieddate"]
                if pa.types.is_timestamp(lm.type):
                    lm = lm.cast(pa.timestamp("ns", lm.type.tz)).cast(pa.int64())
                else:
                    raise GravfsError(f"{url}: column {cols.pick['lastmodifieddate']} is not a "
                                      "timestamp")
                columns = [t["bucket"].to_pylist(), t["key"].to_pylist(),
                           t["size"].cast(pa.int64()).to_pylist(), lm.to_pylist(),
                           t["etag"].to_pylist()]
                for i, row in enumerate(zip(*columns)):
                    if None in row[:4]:
                        raise GravfsError(f"{url}: a row lacks its bucket, key, size or "
                                          f"last-modified date (row {i + 1} of a batch)")
                    yield row
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise GravfsError(f"cannot read manifest file {url}: {first[:300]}") from None
    finally:
        if temp:
            os.unlink(path)


def manifest_records(unit, names, base: bytes, key_prefix: str, by_reference: bool,
                     data=None, tmp_dir: Optional[str] = None,
                     skipped: Optional[list[str]] = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, encoded value) of one unit's rows (see the module doc); folder markers that
    hold bytes are named in ``skipped``."""
    url, fmt, group = unit
    strip = len(key_prefix)
    decode = fmt == "csv"
    rows = read_rows(url, fmt, names, group, tmp_dir)

    def wanted():
        for bucket, key, size, mtime, etag in rows:
            if decode and ("%" in key or "+" in key):
                key = unquote_plus(key)
            if not key.startswith(key_prefix):
                continue
            o = S3Object(key, size, (etag or "").strip('"'), mtime)
            if not folder_marker(bucket, o, strip, skipped):
                yield bucket, o

    if by_reference:
        for bucket, o in wanted():
            e = EntryInfo(address=f"s3://{bucket}/{o.key}", size=o.size, mtime_ns=o.mtime_ns,
                          kind=KIND_FILE, e_tag=o.etag, address_type=ADDRESS_FULL)
            yield (base + o.key[strip:].encode("utf-8"),
                   encode_value(entry_identity(e), encode_entry(e)))
        return

    def copied(item):
        bucket, o = item
        e = entry_of_object(bucket, o, data, tmp_dir)
        return base + o.key[strip:].encode("utf-8"), encode_value(entry_identity(e),
                                                                  encode_entry(e))

    with ThreadPoolExecutor(COPY_THREADS) as pool:
        yield from ordered_map(pool, copied, wanted(), 16 * COPY_THREADS)


def unit_keys(unit, names, key_prefix: str) -> dict:
    """What choosing the sorted partitions needs of a unit, from its key column only:
    every SAMPLE_EVERY-th path, the first and last, and whether its rows are sorted
    (CSV keys that need URL-decoding count as unsorted: their order may change)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyarrow import csv

    url, fmt, group = unit
    path, temp = _local_copy(url, None)
    try:
        if fmt == "parquet":
            f = pq.ParquetFile(path)
            cols = _Columns(f.schema_arrow.names, url)
            groups = range(f.num_row_groups) if group is None else [group]
            table = f.read_row_groups(list(groups), columns=cols.read("key"))
        else:
            cols = _Columns(names, url)
            # typed as the rows are read: keys that look like numbers stay strings
            table = csv.read_csv(path, read_options=csv.ReadOptions(column_names=names),
                                 convert_options=csv.ConvertOptions(
                                     column_types=cols.csv_types(),
                                     include_columns=cols.read("key")))
        current = cols.current(table, url)
        if current is not None:
            table = table.filter(current)
        keys = table.column(cols.pick["key"])
        if key_prefix:
            keys = keys.filter(pc.starts_with(keys, key_prefix))
        n = len(keys)
        ordered = n < 2 or pc.all(pc.less(keys.slice(0, n - 1), keys.slice(1))).as_py()
        if fmt == "csv" and n and (pc.any(pc.match_substring(keys, "%")).as_py()
                                   or pc.any(pc.match_substring(keys, "+")).as_py()):
            ordered = False
        picks = keys.take(list(range(0, n, SAMPLE_EVERY))).to_pylist() if n else []
        if fmt == "csv":
            picks = [unquote_plus(k) for k in picks]
        strip = len(key_prefix)
        out = {"sample": [k[strip:].encode("utf-8") for k in picks], "sorted": bool(ordered),
               "first": None, "last": None}
        if n:
            out["first"], out["last"] = (keys[0].as_py()[strip:].encode("utf-8"),
                                         keys[n - 1].as_py()[strip:].encode("utf-8"))
        return out
    except GravfsError:
        raise
    except Exception as exc:  # pyarrow's errors, OSError
        raise GravfsError(f"cannot read manifest file {url}: {exc}") from None
    finally:
        if temp:
            os.unlink(path)


# --- the source (driver) -----------------------------------------------------------------

class ManifestSource:
    """An inventory manifest as an import source (see the module doc)."""

    kind = "manifest"
    left_out_as = MARKER_WITH_BYTES  # (gravfs.spark.leftout)

    def __init__(self, src: str, columns: Optional[str] = None,
                 key_prefix: Optional[str] = None):
        self.src = src
        self.name = src if src.startswith("s3://") else os.path.abspath(src)
        self.columns = columns
        # a folder, as an S3 prefix source's: "lake" keeps lake/x, not lakehouse/y
        self.key_prefix = key_prefix + "/" if key_prefix and not key_prefix.endswith("/") \
            else key_prefix or ""
        self._files: Optional[list[tuple[str, str]]] = None
        self._names: Optional[list[str]] = None
        self._order: Optional[list] = None  # units in key order, when they are presorted

    def _resolve(self) -> None:
        """Find the data files and the CSV columns (reads manifest.json, lists a directory)."""
        src = self.src
        names = self.columns
        if src.endswith("manifest.json"):
            try:
                doc = json.loads(_read_bytes(src))
                fmt = str(doc["fileFormat"]).lower()
                dest = str(doc["destinationBucket"]).rsplit(":", 1)[-1]
                files = [f"s3://{dest}/{f['key']}" for f in doc["files"]]
            except GravfsError as exc:
                raise GravfsError(f"cannot read manifest {src}: {exc}") from None
            except OSError as exc:
                raise GravfsError(f"cannot read manifest {src}: {exc.strerror or exc}") from None
            except (ValueError, KeyError, TypeError) as exc:
                raise GravfsError(f"{src}: not an S3 Inventory manifest.json ({exc})") from None
            if fmt not in ("csv", "parquet"):
                raise GravfsError(f"{src}: file format {doc['fileFormat']} is not supported "
                                  "(CSV or Parquet)")
            if fmt == "csv" and names is None and doc.get("fileSchema"):
                names = doc["fileSchema"]
            self._files = [(f, fmt) for f in files]
        elif src.endswith(_SUFFIXES):
            if not src.startswith("s3://") and not os.path.isfile(src):
                raise GravfsError(f"{src}: no such manifest file")
            self._files = [(src, _fmt(src))]
        else:
            if not src.startswith("s3://") and not os.path.isdir(src):
                raise GravfsError(f"{src}: no such manifest file or directory")
            try:
                self._files = [(f, _fmt(f)) for f in _list_files(src)]
            except GravfsError as exc:
                raise GravfsError(f"cannot list manifest files under {src}: {exc}") from None
        if not self._files:
            raise GravfsError(f"{src}: no manifest data files (.csv, .csv.gz, .parquet)")
        self._names = [n.strip() for n in (names or DEFAULT_COLUMNS).split(",")]

    def check(self) -> None:
        """Bad input before Spark starts: missing or unreadable files, missing columns,
        a first row that does not parse."""
        self._resolve()
        url, fmt = self._files[0]
        if fmt == "csv":
            _Columns(self._names, url)
        for _ in zip(range(1), read_rows(url, fmt, self._names)):
            pass

    def units(self) -> list[tuple[str, str, Optional[int]]]:
        """(file, format, row group or None): one task each."""
        if self._files is None:
            self._resolve()
        out = []
        for url, fmt in self._files:
            if fmt == "parquet" and not url.startswith("s3://"):
                import pyarrow.parquet as pq
                try:
                    n = pq.ParquetFile(url).num_row_groups
                except Exception as exc:  # pyarrow's errors, OSError
                    raise GravfsError(f"cannot read manifest file {url}: {exc}") from None
                out += [(url, fmt, g) for g in range(n)]
            else:
                out.append((url, fmt, None))
        return out

    def sample_bounds(self, sc, base: bytes, partitions: int):
        """How the records reach sorted partitions (see treejob.write_tree), from a pass
        over the units' key columns: PRESORTED when every unit's rows are sorted and
        the units' key ranges do not overlap (as S3 Inventory writes them: each unit
        is then a partition, in key order, and nothing is shuffled); else
        ``partitions - 1`` keys splitting the rows evenly."""
        from gravfs.spark.treejob import PRESORTED

        units = self.units()
        names, kp = self._names, self.key_prefix
        got = (sc.parallelize(list(enumerate(units)), len(units))
               .map(lambda iu: (iu[0], unit_keys(iu[1], names, kp))).collect())
        full = sorted(((i, u) for i, u in got if u["first"] is not None),
                      key=lambda iu: iu[1]["first"])
        if full and all(u["sorted"] for _, u in full) and all(
                a["last"] < b["first"] for (_, a), (_, b) in zip(full, full[1:])):
            self._order = [units[i] for i, _ in full]
            return PRESORTED
        sample = sorted(base + k for _, u in got for k in u["sample"])
        if partitions <= 1 or not sample:
            return []
        step = len(sample) / partitions
        return sorted({sample[min(len(sample) - 1, int(step * i))] for i in range(1, partitions)})

    def records(self, sc, store_url: str, base: bytes, by_reference: bool, rows, left_out):
        from gravfs.spark.taskstore import task_store

        units = self._order if self._order is not None else self.units()
        names, key_prefix = self._names, self.key_prefix

        def part_records(it):
            ts = task_store(store_url)
            data, bulk = (None, None) if by_reference else ts.bulk_data()
            for unit in it:
                n = 0
                skipped: list[str] = []
                for rec in manifest_records(unit, names, base, key_prefix, by_reference, data,
                                            ts.data.tmp_dir, skipped):
                    n += 1
                    yield rec
                rows.add(n)
                leftout.note(left_out, unit, skipped)
            if bulk is not None:
                bulk.publish()  # the copies are durable before the task can succeed

        return sc.parallelize(units, len(units)).mapPartitions(part_records)
