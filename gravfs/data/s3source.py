"""S3 source objects of by-reference entries: GETs and HEADs of one version only.

gravfs.data.external reads a source bucket through this S3Store over the whole
bucket (the store's retries, timeouts and error mapping), with two differences:
keys are used exactly as the source lists them (a source key may be anything S3
allows, not only keys gravfs writes), and every request carries ``If-Match`` with
the version the entry recorded, so a changed object answers 412
(PreconditionFailedError) and a vanished one 404 (NotFoundError). Imported only
when an S3 source is read, so boto3 is not loaded otherwise.
"""

from __future__ import annotations

from typing import Any, Optional

from gravfs.errors import GravfsError, PreconditionFailedError
from gravfs.store.s3 import S3Store, _read_all


class SourceBucket(S3Store):
    """A whole bucket of source objects (see the module doc)."""

    def _full(self, key: str) -> str:
        return key  # exactly as listed: no prefix, no store-key rules

    def get_version_range(self, key: str, offset: int, length: int,
                          e_tag: str) -> tuple[bytes, str, int]:
        """(bytes, the answer's ETag, the object's total size) of ``length`` (> 0) bytes
        at ``offset`` of the version ``e_tag``."""
        def consume(resp: Any, deadline: Any) -> tuple[bytes, str, int]:
            return _read_all(resp, deadline), resp.get("ETag", ""), _total_size(resp)

        try:
            return self._streamed("get_range", key, consume, IfMatch=_quoted(e_tag),
                                  Range=f"bytes={offset}-{offset + length - 1}")
        except GravfsError as e:
            cause = e.__cause__
            response = getattr(cause, "response", None) or {}
            if response.get("Error", {}).get("Code") == "InvalidRange":  # it shrank
                raise PreconditionFailedError(f"object {key} in {self.url} is shorter than "
                                              f"{offset + 1} bytes") from None
            raise

    def head_version(self, key: str, e_tag: str) -> tuple[str, int]:
        """(ETag, size) of the object, if it still is the version ``e_tag``."""
        resp = self._call("head", key, self._client.head_object, Key=key, IfMatch=_quoted(e_tag))
        return resp.get("ETag", ""), int(resp["ContentLength"])


def _quoted(e_tag: str) -> str:
    return e_tag if e_tag.startswith('"') else f'"{e_tag}"'


def _total_size(resp: Any) -> int:
    """The object's size from a ranged answer ("bytes 0-99/1234"), else its length."""
    rng = resp.get("ContentRange") or ""
    total = rng.rpartition("/")[2]
    if total.isdigit():
        return int(total)
    return int(resp.get("ContentLength", 0))


def source_bucket(store: Any, bucket: str, endpoint: Optional[str] = None) -> SourceBucket:
    """A SourceBucket with the S3 settings of ``store`` (looked for under wrappers such
    as gravfs.store.faulty's), else the environment's; ``endpoint`` overrides."""
    base = store
    while base is not None and not isinstance(base, S3Store):
        base = getattr(base, "inner", None)
    args = dict(base.__getstate__()) if base is not None else {}
    args.update(bucket=bucket, prefix="")
    if endpoint:
        args["endpoint_url"] = endpoint
    return SourceBucket(**args)
