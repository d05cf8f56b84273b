"""``gravfs sst-dump``: records or properties of any SSTable, gravfs's or lakeFS's."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from typing import TextIO

from gravfs.version.committed.record import decode_value
from gravfs.errors import CorruptDataError, NotFoundError
from gravfs.quoting import quote
from gravfs.sstable import SSTReader


def _open(path: str) -> SSTReader:
    shown = quote(path.encode("utf-8", "surrogateescape"))  # one line whatever the name
    try:
        return SSTReader(path)
    except FileNotFoundError:
        raise NotFoundError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise CorruptDataError("is a directory, not an SSTable", path=shown) from None


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def dump_records(path: str, out: TextIO, as_json: bool = True) -> int:
    """One JSON object per record in key order: key, identity (hex), data (base64)."""
    n = 0
    with _open(path) as r:
        for key, value in r:
            identity, data = decode_value(value)
            out.write(json.dumps({"key": _text(key), "identity": identity.hex(),
                                  "data": base64.b64encode(data).decode()}) + "\n")
            n += 1
    return n


def dump_properties(path: str, out: TextIO, as_json: bool = False) -> None:
    """User properties as text, plus the parsed table properties (numbers decoded)."""
    with _open(path) as r:
        shown: dict = {k: _text(v) for k, v in r.user_properties.items()}
        for k, v in asdict(r.table_properties).items():
            if v is not None:
                shown["rocksdb." + k] = _text(v) if isinstance(v, bytes) else v
    if as_json:
        out.write(json.dumps(shown, sort_keys=True) + "\n")
        return
    for k in sorted(shown):
        out.write(f"{k}: {shown[k]}\n")
