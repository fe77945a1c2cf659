"""Conditional writes on an S3 store: create an object only if it is absent
(``If-None-Match: *``), replace one only if it is still the version read (``If-Match:
ETAG``). pyarrow's S3 client sends neither header, so they go through botocore (the
AWS SDK's core, the ``s3`` extra), with the same endpoint, credentials and bounded
time-outs as the pyarrow filesystem.

`conditional_writes(loc)` is None where they cannot be had: another scheme, botocore
not installed, storage options botocore is not given here, or a store that ignores the
headers (a probe creates one object twice and must be refused the second time; stores
that predate conditional writes answer 200 to both). The lease then falls back to its
claim protocol (`locks.LeaseLock`)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from fgram.pipeline.io.failures import failure
from fgram.pipeline.io.storage import S3_ATTEMPTS, S3_DEFAULTS, Location, scheme_of

# the storage options that map onto botocore's client; any other (a role to assume, an
# anonymous client, a proxy) is pyarrow's alone, and the lease keeps to its claims
_KEYS = {
    "access_key": "aws_access_key_id",
    "secret_key": "aws_secret_access_key",
    "session_token": "aws_session_token",
    "region": "region_name",
}
_TIMING = ("connect_timeout", "request_timeout", "scheme", "endpoint_override")
_PROBED: dict[tuple[Any, ...], bool] = {}
_CLIENTS: dict[tuple[Any, ...], Any] = {}  # one client per settings (thread-safe; ~0.1 s to make)
os.register_at_fork(after_in_child=_CLIENTS.clear)  # a child makes its own connections


class NotSupported(Exception):
    """The store answered that it has no conditional writes (501 NotImplemented)."""


@dataclass(frozen=True)
class Version:
    """One object's version as the store reports it: its ETag, when the store wrote it,
    and the store's own time as it answered (its ``Date`` header)."""

    etag: str
    written: datetime
    now: datetime


class ConditionalWrites:
    """Conditional writes below one S3 location's bucket (see the module)."""

    def __init__(self, client: Any, bucket: str, uri: str, options: dict[str, Any]):
        self.client, self.bucket, self.uri, self.options = client, bucket, uri, options

    def _key(self, loc: Location) -> str:
        return loc.path.split("/", 1)[1]

    def _put(self, loc: Location, data: bytes, **condition: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            answer = self.client.put_object(
                Bucket=self.bucket, Key=self._key(loc), Body=data, **condition
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return None  # it exists (create), or it changed or went (replace)
            if code in ("NotImplemented", "501"):
                raise NotSupported(code) from None
            raise failure(loc.uri, exc, self.options) from None
        except Exception as exc:  # noqa: BLE001 - one line, naming the object
            raise failure(loc.uri, exc, self.options) from None
        etag: str = answer["ETag"]
        return etag

    def create(self, loc: Location, data: bytes) -> str | None:
        """Write ``loc`` only if no object is there: its ETag, or None."""
        return self._put(loc, data, IfNoneMatch="*")

    def replace(self, loc: Location, data: bytes, etag: str) -> str | None:
        """Overwrite ``loc`` only if it is still version ``etag``: the new ETag, or None
        (another writer changed or deleted it first)."""
        return self._put(loc, data, IfMatch=etag)

    def version(self, loc: Location) -> Version | None:
        """The version of ``loc`` now (None: no such object)."""
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(loc))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise failure(loc.uri, exc, self.options, reading=True) from None
        except Exception as exc:  # noqa: BLE001
            raise failure(loc.uri, exc, self.options, reading=True) from None
        date = head.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        written = head["LastModified"]
        return Version(head["ETag"], written, parsedate_to_datetime(date) if date else written)

    def delete(self, loc: Location) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(loc))
        except Exception as exc:  # noqa: BLE001
            raise failure(loc.uri, exc, self.options) from None


def _client(options: dict[str, Any]) -> Any:
    import botocore.session
    from botocore.config import Config

    timing = {**S3_DEFAULTS, **{k: float(v) for k, v in options.items() if k.endswith("timeout")}}
    endpoint = options.get("endpoint_override") or (
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint and "://" not in endpoint:
        endpoint = f"{options.get('scheme', 'https')}://{endpoint}"
    config = Config(
        connect_timeout=timing["connect_timeout"],
        read_timeout=timing["request_timeout"],
        retries={"max_attempts": S3_ATTEMPTS, "mode": "standard"},
        s3={"addressing_style": "path"} if endpoint else {},
    )
    kw = {_KEYS[k]: v for k, v in options.items() if k in _KEYS}
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint or None, config=config, **kw
    )


def conditional_writes(loc: Location) -> ConditionalWrites | None:
    """Conditional writes for objects below ``loc``, or None (see the module)."""
    options = dict(loc.options)
    if scheme_of(loc.uri) != "s3" or any(k not in _KEYS and k not in _TIMING for k in options):
        return None
    try:
        import botocore  # noqa: F401 - the s3 extra
    except ImportError:
        return None
    key = (
        tuple(sorted(options.items())),
        os.environ.get("AWS_ENDPOINT_URL_S3"),
        os.environ.get("AWS_ENDPOINT_URL"),
        os.environ.get("AWS_ACCESS_KEY_ID"),
        os.environ.get("AWS_PROFILE"),
    )
    if key not in _CLIENTS:
        _CLIENTS[key] = _client(options)
    client = _CLIENTS[key]
    cond = ConditionalWrites(client, loc.path.split("/", 1)[0], loc.uri, options)
    where = (cond.bucket, client.meta.endpoint_url, tuple(sorted(options.items())))
    if where not in _PROBED:
        _PROBED[where] = _probe(cond, loc)
    return cond if _PROBED[where] else None


def _probe(cond: ConditionalWrites, loc: Location) -> bool:
    """Whether the store refuses a second create of one object (it honours the header)."""
    probe = loc.child(f".fgram-probe-{uuid.uuid4().hex[:12]}")
    try:
        if cond.create(probe, b"") is None:
            return False
        return cond.create(probe, b"") is None
    except NotSupported:
        return False  # the claims serve
    finally:
        cond.delete(probe)
