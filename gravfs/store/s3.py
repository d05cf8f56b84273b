"""Object store on S3 (AWS or a compatible server such as SeaweedFS), via boto3.

Refs are updated with conditional PUT/DELETE (``If-Match`` / ``If-None-Match: *``),
which AWS S3 and SeaweedFS enforce atomically. The version token is the ETag;
S3 ETags of single-part objects are the MD5 of the content, so a ref rewritten
with identical bytes keeps its token (compare-and-swap is by value, as in
lakeFS). One boto3 client is shared by all threads (clients are thread-safe,
sessions are not, so the session is used only in the constructor).

SeaweedFS (4.x, ``weed mini``) as seen from here:
- PutObject If-Match / If-None-Match: * and DeleteObject If-Match are enforced
  atomically (412 PreconditionFailed); If-Match on a missing key is also 412
  (AWS says 404, handled too). Contended conditional writes on one key are
  serialised server-side with waits of about 1 s per loser.
- ETag: quoted MD5 of the content; multipart uploads give "<md5>-<parts>".
- Listing walks filer directories, so "a/b" comes before "a-c"; ``list`` reads
  one level at a time (Delimiter="/") and restores byte order (base.ordered_walk).
  StartAfter compares bare names there, so it is only used as a safe skip-ahead.
- A Range starting at or past EOF answers 416 InvalidRange: ``get_range`` returns b"".
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import boto3
import botocore.exceptions as bce
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from gravfs.errors import GravfsError, NotFoundError, PreconditionFailedError, StoreUnavailableError
from gravfs.store import s3timeouts
from gravfs.store.endpoint import resolve_endpoint
from gravfs.store.base import ObjectInfo, ObjectStore, check_key, ordered_walk
from gravfs.store.s3timeouts import Deadline, DeadlineExceeded, S3Timeouts

log = logging.getLogger(__name__)

MiB = 1 << 20
READ_WHOLE = 4 * MiB  # a GET body up to this size (a reader's chunk) is read in one call
DELETE_BATCH = 1000  # keys per DeleteObjects request (the S3 limit)
SINGLE_PUT_MAX = 8 * MiB  # files below this (and the multipart threshold) upload in one PUT

_BUCKET_NAME = re.compile(r"[a-zA-Z0-9._-]{1,255}")  # what botocore accepts (ARNs aside)
# Operations sent as HEAD: S3 answers them with no body, so a bare status is all they say.
_HEAD_OPS = frozenset({"size", "head", "stat"})

# Failures of the transport (server down, connection reset, timeouts).
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    bce.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError, ...
    bce.HTTPClientError,  # ReadTimeoutError, ConnectionClosedError, ResponseStreamingError
    bce.IncompleteReadError,
    ConnectionError,  # socket-level errors leaking from a streaming body
)
_UNAVAILABLE_CODES = s3timeouts.TRANSIENT_CODES


def check_key_prefix(bucket: str, prefix: str) -> None:
    """A key prefix with an empty, '.' or '..' segment is refused: AWS keeps such keys as
    they are, other servers refuse them (SeaweedFS: "Invalid Request" on every write) or
    may clean the HTTP path (b/../x as bucket x); and pre//fix and pre/fix would be two
    stores."""
    segments = prefix.strip("/").split("/") if prefix.strip("/") else []
    bad = next((seg for seg in segments if seg in ("", ".", "..")), None)
    if bad is not None:
        what = "an empty" if bad == "" else f"a {bad!r}"
        raise GravfsError(f"s3://{bucket}/{prefix.lstrip('/')}: the prefix has {what} "
                          "segment; name the prefix it means")


class S3Store(ObjectStore):
    """Objects under ``s3://bucket/prefix``.

    Credentials come from the arguments or the usual AWS chain (environment,
    profile, instance role). The endpoint comes from ``endpoint_url``, else
    ``$GRAVFS_S3_ENDPOINT``, else ``$AWS_ENDPOINT_URL``; with an explicit
    endpoint, path-style addressing is used.

    Time limits (``s3timeouts``): ``connect_timeout``, ``read_timeout``,
    ``max_attempts`` per request (botocore's retries, exponential backoff) and
    ``timeout``, the deadline of one operation; each unset one comes from
    ``$GRAVFS_S3_CONNECT_TIMEOUT``, ``$GRAVFS_S3_READ_TIMEOUT``,
    ``$GRAVFS_S3_MAX_ATTEMPTS`` and ``$GRAVFS_S3_TIMEOUT``, else 5 s, 30 s, 5
    and 60 s. Failures left after them raise StoreUnavailableError.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        max_attempts: int | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        timeout: float | None = None,
        multipart_threshold: int = 64 * MiB,
        multipart_chunksize: int = 64 * MiB,
        max_concurrency: int = 8,
        max_pool_connections: int = 32,
    ):
        if not bucket:
            raise GravfsError("S3 store needs a bucket name")
        if not _BUCKET_NAME.fullmatch(bucket):  # boto3 would refuse it as an internal error
            raise GravfsError(f"{bucket!r} is not an S3 bucket name (letters, digits, '.', "
                              "'-' and '_', at most 255)")
        check_key_prefix(bucket, prefix)
        self._args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.endpoint_url = resolve_endpoint(endpoint_url)
        self.timeouts = S3Timeouts.resolve(connect=connect_timeout, read=read_timeout,
                                           operation=timeout, max_attempts=max_attempts)
        self.max_attempts = self.timeouts.max_attempts
        session = boto3.session.Session(
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            aws_session_token=session_token,
            region_name=region,
        )
        config = Config(
            retries={"total_max_attempts": self.max_attempts, "mode": "standard"},
            connect_timeout=self.timeouts.connect,
            read_timeout=self.timeouts.read,
            max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path"} if self.endpoint_url else {},
        )
        self._client = session.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=session.region_name or "us-east-1",
            config=config,
        )
        s3timeouts.install(self._client, self.timeouts.operation)
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
            use_threads=max_concurrency > 1,
        )

    # Spark ships stores to executors: rebuild the client there.
    def __getstate__(self) -> dict[str, Any]:
        return dict(self._args)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # --- error mapping -------------------------------------------------------

    def _full(self, key: str) -> str:
        return self.prefix + check_key(key)

    def where(self) -> str:
        return f"{self.url}" + (f" at {self.endpoint_url}" if self.endpoint_url else "")

    def _unavailable(self, op: str, key: str, err: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"object store {self.where()} unavailable: {op} {key} failed after "
            f"{self.max_attempts} attempt(s): {err}"
        )

    def _timed_out(self, op: str, key: str, e: DeadlineExceeded) -> StoreUnavailableError:
        last = " ".join(str(e.last).split()) if e.last is not None else ""
        return StoreUnavailableError(
            f"object store {self.where()} unavailable: {op} {key} timed out after {e.seconds:g} s "
            f"(GRAVFS_S3_TIMEOUT" + (f"; last error: {last})" if last else ")")
        )

    def _operation(self):
        """The deadline of one operation for the calling thread (see s3timeouts)."""
        return s3timeouts.operation(self.timeouts.operation)

    @contextmanager
    def _errors(self, op: str, key: str) -> Iterator[None]:
        """Translate boto errors into gravfs errors with a message a user can act on."""
        try:
            yield
        except DeadlineExceeded as e:
            raise self._timed_out(op, key, e) from e
        except bce.ClientError as e:
            raise self._client_error(op, key, e) from e
        except S3UploadFailedError as e:
            cause = e.__cause__ or e.__context__
            if isinstance(cause, bce.ClientError):
                raise self._client_error(op, key, cause) from e
            raise GravfsError(f"{op} {key} to {self.where()} failed: {e}") from e
        except _CONNECTION_ERRORS as e:
            raise self._unavailable(op, key, e) from e
        except bce.NoCredentialsError as e:
            raise GravfsError(
                f"no AWS credentials for {self.where()}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile"
            ) from e

    def _not_s3(self, op: str, key: str, answer: str) -> StoreUnavailableError:
        """A web server, a proxy or a wrong port answering in S3's place: said as such,
        never taken for an absent object (a deleted branch, "run 'gravfs init'")."""
        return StoreUnavailableError(
            f"{self.where()} answered {op} {key} with {answer}, which no S3 server sends: "
            f"is {self.endpoint_url or 'the endpoint'} an S3 endpoint (its host, port and "
            "scheme), or is something else answering for it?")

    def _client_error(self, op: str, key: str, e: bce.ClientError) -> GravfsError:
        err = e.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        msg = err.get("Message", "") or code
        bare = code in ("", str(status))  # botocore's stand-ins when no S3 error came back
        if code in ("NoSuchKey", "NotFound") or (bare and status == 404 and op in _HEAD_OPS):
            return NotFoundError(f"object {key} not found in {self.url}")
        if code == "NoSuchBucket":  # not "not found": the mount would take every branch for deleted
            return StoreUnavailableError(f"bucket {self.bucket} does not exist at "
                                         f"{self.endpoint_url or 'AWS S3'} (deleted, or a typo?)")
        if status == 412 or code == "PreconditionFailed":
            return PreconditionFailedError(f"object {key} in {self.url} changed (conditional {op} failed)")
        if status >= 500 or code in _UNAVAILABLE_CODES:
            return self._unavailable(op, key, e)
        if bare and op not in _HEAD_OPS:
            return self._not_s3(op, key, f"HTTP {status} and no S3 error"
                                + _content_type(e.response))
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
            return GravfsError(f"access denied by {self.where()} for {op} {key}: {msg} (check credentials)")
        return GravfsError(f"{op} {key} on {self.where()} failed: {code}: {msg}")

    def _call(self, op: str, key: str, fn: Callable[..., Any], **kw: Any) -> Any:
        with self._operation(), self._errors(op, key):
            return fn(Bucket=self.bucket, **kw)

    def _etag(self, op: str, key: str, resp: Any) -> str:
        """The ETag every S3 PutObject answer carries."""
        etag = resp.get("ETag")
        if not etag:
            raise self._not_s3(op, key, "a success that has no ETag" + _content_type(resp))
        return etag

    def _listed(self, prefix: str, **kw: Any) -> Any:
        """A ListObjectsV2 page, which must be S3's (IsTruncated is in every one)."""
        resp = self._call("list", prefix or "/", self._client.list_objects_v2, Prefix=self.prefix + prefix, **kw)
        if "IsTruncated" not in resp:
            raise self._not_s3("list", prefix or "/", "a success that is no listing" + _content_type(resp))
        return resp

    # --- reads ---------------------------------------------------------------

    def _body(self, op: str, key: str, resp: Any, deadline: Deadline,
              consume: Callable[[Any, Deadline], Any]) -> Any:
        """Consume a GET's body; a read still running at the deadline is cut."""
        with self._errors(op, key), s3timeouts.watched(deadline, resp["Body"]) as watch:
            try:
                return consume(resp, deadline)
            except BaseException as e:
                resp["Body"].close()  # never hand a half-read connection back to the pool
                deadline.last = e
                if watch.fired and isinstance(e, _CONNECTION_ERRORS):
                    raise DeadlineExceeded(deadline.seconds, e) from e
                raise

    def _streamed(self, op: str, key: str, consume: Callable[[Any, Deadline], Any], **kw: Any) -> Any:
        """GET and consume the body, retrying when the stream breaks midway."""
        with self._operation() as deadline:
            for attempt in itertools.count(1):
                resp = self._call(op, key, self._client.get_object, Key=self._full(key), **kw)
                try:
                    return self._body(op, key, resp, deadline, consume)
                except StoreUnavailableError:
                    if attempt >= self.max_attempts or deadline.passed():
                        raise
                    log.warning("%s %s: body stream broke (attempt %d), retrying", op, key, attempt)
                    _backoff(attempt)
        raise AssertionError("unreachable")

    def get(self, key: str) -> bytes:
        return self._streamed("get", key, _read_all)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError("offset and length must be >= 0")
        if length == 0:
            if self.size(key) is None:
                raise NotFoundError(f"object {key} not found in {self.url}")
            return b""
        try:
            return self._streamed("get_range", key, _read_all, Range=f"bytes={offset}-{offset + length - 1}")
        except GravfsError as e:
            if isinstance(e.__cause__, bce.ClientError) and e.__cause__.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # offset at or past EOF
            raise

    def download(self, key: str, dest_path: str) -> int:
        written = 0

        def consume(resp: Any, deadline: Deadline) -> int:
            nonlocal written
            for chunk in resp["Body"].iter_chunks(MiB):
                f.write(chunk)
                written += len(chunk)
                deadline.renew()  # progress: the deadline bounds stalls, not the size
            return written

        with open(dest_path, "wb") as f, self._operation() as deadline:
            etag: str | None = None
            for attempt in itertools.count(1):
                kw: dict[str, Any] = {}
                if written:  # resume the same object version where the stream broke
                    kw = {"Range": f"bytes={written}-", "IfMatch": etag}
                resp = self._call("download", key, self._client.get_object, Key=self._full(key), **kw)
                etag = resp.get("ETag")
                try:
                    return self._body("download", key, resp, deadline, consume)
                except StoreUnavailableError:
                    if attempt >= self.max_attempts or deadline.passed():
                        raise
                    log.warning("download %s: stream broke at byte %d (attempt %d), resuming", key, written, attempt)
                    _backoff(attempt)
        raise AssertionError("unreachable")

    def size(self, key: str) -> int | None:
        try:
            return int(self._call("size", key, self._client.head_object, Key=self._full(key))["ContentLength"])
        except NotFoundError:
            return None

    def read_versioned(self, key: str) -> tuple[bytes, str]:
        return self._streamed("read", key, lambda r, d: (_read_all(r, d), r["ETag"]))

    # --- writes --------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        self._etag("put", key, self._call("put", key, self._client.put_object, Key=self._full(key), Body=data))

    def _one_put(self, size: int) -> bool:
        """A file this small goes up in one PUT from memory (see upload)."""
        return size < min(self._transfer.multipart_threshold, SINGLE_PUT_MAX)

    def upload_stream(self, key: str, reader: BinaryIO, size: int) -> None:
        if self._one_put(size):
            self.put(key, reader.read())
            return
        # a reader without seek is read in order, a part at a time; an exception it
        # raises ends the transfer, which aborts the multipart upload (nothing shows)
        with self._errors("upload", key):
            self._client.upload_fileobj(reader, self.bucket, self._full(key),
                                        Config=self._transfer)

    def upload(self, key: str, src_path: str) -> None:
        if self._one_put(os.path.getsize(src_path)):
            # one PUT: the transfer manager's threads and futures cost more than the
            # request itself for a small file (4 KiB: 2.9 -> 1.9 ms against SeaweedFS)
            with open(src_path, "rb") as f:
                self.put(key, f.read())
            return
        # No operation deadline here: each request (each part of a multipart
        # upload, sent from the transfer manager's threads) gets its own.
        with self._errors("upload", key):
            self._client.upload_file(src_path, self.bucket, self._full(key), Config=self._transfer)

    def _conditional_put(self, op: str, key: str, data: bytes, **cond: str) -> str:
        """PUT with a precondition; 409 (concurrent conditional write in flight) is retried."""
        with self._operation() as deadline:
            return self._conditional_put_within(deadline, op, key, data, **cond)

    def _conditional_put_within(self, deadline: Deadline, op: str, key: str, data: bytes, **cond: str) -> str:
        for attempt in itertools.count(1):
            try:
                with self._errors(op, key):
                    resp = self._client.put_object(Bucket=self.bucket, Key=self._full(key), Body=data, **cond)
                return self._etag(op, key, resp)
            except PreconditionFailedError as e:
                # A retried request may have lost the answer to an attempt that
                # did land: if the object now holds exactly our bytes, we won.
                if _was_retried(e) and self._current_etag(key) == _md5_etag(data):
                    log.info("%s %s: precondition failed on a retry but our write is in place", op, key)
                    return _md5_etag(data)
                raise
            except GravfsError as e:
                if _status(e) == 409 and attempt < self.max_attempts and not deadline.passed():
                    _backoff(attempt)
                    continue
                raise
        raise AssertionError("unreachable")

    def _current_etag(self, key: str) -> str | None:
        try:
            return self._call("head", key, self._client.head_object, Key=self._full(key))["ETag"]
        except NotFoundError:
            return None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.create_claiming(key, lambda: self._put_if_absent(key, data))

    def put_file_if_absent(self, key: str, src_path: str) -> bool:
        """A file past one PUT's size goes up by ``upload`` (streamed from the file, in
        parts past the multipart threshold; never whole in memory) unless the store has
        it: such an upload has no create-only condition on every server, and keys stored
        this way are content-addressed (a second upload writes the same bytes)."""
        if self._one_put(os.path.getsize(src_path)):
            return super().put_file_if_absent(key, src_path)
        if self.claim_existing(key):
            return False
        self.upload(key, src_path)
        return True

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self._conditional_put("put_if_absent", key, data, IfNoneMatch="*")
            return True
        except PreconditionFailedError:
            return False

    def compare_and_swap(self, key: str, expected_version: str | None, data: bytes | None) -> str | None:
        with self._operation():  # one deadline for its requests
            return self._compare_and_swap(key, expected_version, data)

    def _compare_and_swap(self, key: str, expected_version: str | None, data: bytes | None) -> str | None:
        if data is not None:
            cond = {"IfNoneMatch": "*"} if expected_version is None else {"IfMatch": expected_version}
            try:
                return self._conditional_put("compare_and_swap", key, data, **cond)
            except NotFoundError:  # AWS answers 404 to If-Match on a missing key
                raise PreconditionFailedError(f"object {key} in {self.url} no longer exists") from None
        if expected_version is None:
            # "delete if absent": succeed only if it really is absent.
            if self._current_etag(key) is not None:
                raise PreconditionFailedError(f"object {key} in {self.url} exists (expected absent)")
            return None
        # Conditional delete: SeaweedFS and AWS S3 honour If-Match on DeleteObject.
        try:
            self._call("compare_and_swap", key, self._client.delete_object, Key=self._full(key), IfMatch=expected_version)
        except NotFoundError:
            raise PreconditionFailedError(f"object {key} in {self.url} no longer exists") from None
        except PreconditionFailedError as e:
            if _was_retried(e) and self._current_etag(key) is None:
                return None  # our first attempt deleted it
            raise
        return None

    def delete(self, key: str) -> None:
        try:
            self._call("delete", key, self._client.delete_object, Key=self._full(key))
        except NotFoundError:
            pass

    def delete_many(self, keys: list[str]) -> int:
        """DeleteObjects, 1,000 keys a request; keys the server refuses with a
        transient code (SlowDown, InternalError, ...) are sent again with backoff."""
        for i in range(0, len(keys), DELETE_BATCH):
            self._delete_batch(keys[i:i + DELETE_BATCH])
        return len(keys)

    def _delete_batch(self, keys: list[str]) -> None:
        todo = keys
        for attempt in itertools.count(1):
            objects = [{"Key": self._full(k)} for k in todo]
            resp = self._call("delete_many", todo[0], self._client.delete_objects,
                              Delete={"Objects": objects, "Quiet": True})
            errors = [e for e in resp.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
            if not errors:
                return
            transient = [e for e in errors if e.get("Code") in _UNAVAILABLE_CODES]
            if len(transient) < len(errors) or attempt >= self.max_attempts:
                e = errors[0]
                raise GravfsError(f"delete of {len(errors)} object(s) on {self.where()} failed: "
                                  f"{e.get('Key')}: {e.get('Code')}: {e.get('Message', '')}")
            n = len(self.prefix)
            todo = [e["Key"][n:] for e in transient]
            log.info("delete_many: %d key(s) throttled (%s), retrying", len(todo),
                     transient[0].get("Code"))
            _backoff(attempt)

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            r = self._call("stat", key, self._client.head_object, Key=self._full(key))
        except NotFoundError:
            return None
        return ObjectInfo(key, int(r["ContentLength"]), r["LastModified"].timestamp())

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        n = len(self.prefix)
        kw: dict[str, Any] = {}
        while True:
            resp = self._listed(prefix, **kw)
            for o in resp.get("Contents", ()):
                if not o["Key"].endswith("/"):
                    yield ObjectInfo(o["Key"][n:], int(o["Size"]), o["LastModified"].timestamp())
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return
            kw["ContinuationToken"] = token

    def touch(self, key: str) -> bool:
        """A copy onto itself (server-side, no bytes sent) sets a new last-modified."""
        full = self._full(key)
        try:
            self._call("touch", key, self._client.copy_object, Key=full,
                       CopySource={"Bucket": self.bucket, "Key": full},
                       MetadataDirective="REPLACE")
        except NotFoundError:
            return False
        return True

    # --- listing -------------------------------------------------------------

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[str]:
        # One directory level at a time: SeaweedFS lists in filer-walk order
        # ("a/b" before "a-c"), which ordered_walk corrects.
        return ordered_walk(self._level, prefix, start_after)

    def _level(self, prefix: str, hint: str | None):
        n = len(self.prefix)
        kw: dict[str, Any] = {"Delimiter": "/"}
        if hint:
            kw["StartAfter"] = self.prefix + hint
        while True:
            resp = self._listed(prefix, **kw)
            files = [o["Key"][n:] for o in resp.get("Contents", ()) if not o["Key"].endswith("/")]
            dirs = [p["Prefix"][n:] for p in resp.get("CommonPrefixes", ())]
            yield files, dirs
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return
            kw["ContinuationToken"] = token


def _content_type(resp: Any) -> str:
    """ (text/html) from an answer's headers, to say what came back instead."""
    ctype = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("content-type", "")
    return f" ({ctype.split(';')[0]})" if ctype else ""


def _read_all(resp: Any, deadline: Deadline) -> bytes:
    """The whole body, read by MiB so that each MiB renews the deadline; a body of
    at most READ_WHOLE bytes in one read, its deadline covering all of it (one
    buffer: reading by MiB copies each byte twice more, in urllib3's buffer and in
    the join, and a cold read of a large file moves every byte through here)."""
    body = resp["Body"]
    if resp.get("ContentLength", READ_WHOLE + 1) <= READ_WHOLE:
        return body.read()
    parts = []
    while True:
        chunk = body.read(MiB)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        deadline.renew()


def _md5_etag(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def _cause_response(e: BaseException) -> dict[str, Any]:
    cause = e.__cause__
    return cause.response if isinstance(cause, bce.ClientError) else {}


def _was_retried(e: BaseException) -> bool:
    return _cause_response(e).get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0


def _status(e: BaseException) -> int:
    return _cause_response(e).get("ResponseMetadata", {}).get("HTTPStatusCode", 0)


def _backoff(attempt: int) -> None:
    time.sleep(min(2.0, 0.05 * (2**attempt)) * random.uniform(0.5, 1.0))
