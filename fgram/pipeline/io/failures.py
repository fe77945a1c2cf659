"""Storage options and their secrets, and what a failed storage call means: one line
that names the URI and the cause, never a secret (`redact`), and the error class
that says whether a retry may pass (`failure`)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from fgram.pipeline.errors import (
    ConfigError,
    FgramError,
    InputError,
    NoSpace,
    OutputError,
    StorageUnavailable,
)

SECRET_WORDS = ("secret", "token", "password", "key", "credential", "sas", "sig")


def parse_options(pairs: Iterable[str] | None) -> dict[str, str]:
    """``("k=v", ...)`` -> ``{"k": "v"}`` (the CLI's ``--storage-option``)."""
    out = {}
    for item in pairs or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--storage-option: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def is_secret(key: str) -> bool:
    low = key.lower()
    return any(w in low for w in SECRET_WORDS) and "endpoint" not in low


def public_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Storage options as a manifest or a log may show them: secrets masked."""
    return {k: ("***" if is_secret(k) else v) for k, v in sorted((options or {}).items())}


def _secrets(options: dict[str, Any] | None) -> list[str]:
    found = [str(v) for k, v in (options or {}).items() if is_secret(k) and v]
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY"):
        if os.environ.get(name):
            found.append(os.environ[name])
    return [s for s in found if len(s) >= 3]


def redact(text: str, options: dict[str, Any] | None = None) -> str:
    for secret in _secrets(options):
        text = text.replace(secret, "***")
    return text


def first_line(exc: BaseException, options: dict[str, Any] | None = None, limit: int = 300) -> str:
    """An exception's first line, cut to ``limit`` characters, secrets redacted."""
    text = str(exc).strip()
    return redact(text.splitlines()[0][:limit] if text else type(exc).__name__, options)


def explain(exc: BaseException, options: dict[str, Any] | None = None) -> tuple[str, bool]:
    """(one-line cause of a storage failure, whether it may pass: an endpoint down)."""
    text = str(exc)
    where = endpoint_of(options)
    if "curlCode: 6," in text or "resolve host" in text:
        return f"cannot reach the object store{where} (host name not found)", True
    if "curlCode: 28" in text or "imed out" in text:
        return f"the object store{where} did not answer in time", True
    if (
        "NETWORK_CONNECTION" in text
        or "curlCode: 7" in text
        or "Could not connect" in text
        or "Connection refused" in text
    ):
        return f"cannot reach the object store{where} (connection refused)", True
    if (
        "ACCESS_DENIED" in text
        or "SIGNATURE_DOES_NOT_MATCH" in text
        or "InvalidAccessKeyId" in text
        or "INVALID_ACCESS_KEY_ID" in text
        or "403" in text
    ):
        return (
            "access denied (check the credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
            "the AWS config, or --storage-option)"
        ), False
    if "NoSuchBucket" in text or "NO_SUCH_BUCKET" in text or "bucket does not exist" in text:
        return "no such bucket", False
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory", False
    return first_line(exc, options), False


def endpoint_of(options: dict[str, Any] | None) -> str:
    """' at ENDPOINT' for messages, from the options or the environment ('' if neither)."""
    end = (
        (options or {}).get("endpoint_override")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    return f" at {end}" if end else ""


def no_space(exc: BaseException) -> bool:
    """Whether a write failed for lack of space: ENOSPC, pyarrow's words for it, or
    numpy's short write (``N requested and M written``, which carries no errno)."""
    text = str(exc)
    return (
        isinstance(exc, OSError)
        and exc.errno == errno.ENOSPC
        or "No space left" in text
        or re.search(r"\d+ requested and \d+ written", text) is not None
    )


def full(path: str) -> NoSpace:
    """The one line for a write to a local ``path`` that found its device full."""
    free = "?"
    with contextlib.suppress(OSError):
        free = f"{shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free:,}"
    return NoSpace(
        f"{path}: no space left on the device ({free} bytes free); free some, or give "
        f"another --work-dir or output, and run again"
    )


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """A local write: the device full is one `NoSpace` naming ``path`` (`full`);
    other failures pass as they are."""
    try:
        yield
    except OSError as exc:
        if no_space(exc):
            raise full(path) from None
        raise


@contextlib.contextmanager
def aside(path: str) -> Iterator[str]:
    """A local file written whole or not at all: the block writes the name given (beside
    ``path``, ending ``.tmp``: `workdir.remove_partial` knows them), renamed over
    ``path`` when the block ends. A failed write leaves neither, and the device full is
    one line naming ``path`` (`writing`)."""
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with writing(path):
            yield tmp
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def failure(
    uri: str, exc: BaseException, options: dict[str, Any] | None = None, reading: bool = False
) -> FgramError:
    """The error to raise for a storage call on ``uri`` that failed with ``exc``."""
    if isinstance(exc, FgramError):
        return exc
    if not reading and no_space(exc):
        return full(uri)
    cause, passing = explain(exc, options)
    if passing:
        return StorageUnavailable(f"{uri}: {cause}")
    return InputError(uri, cause) if reading else OutputError(f"{uri}: {cause}")
