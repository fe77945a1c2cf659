"""The one I/O layer: local paths and object stores, through `pyarrow.fs`.

A `Location` is a filesystem and a path inside it, with the URI a user wrote
(plain paths, ``file://``, ``s3://``, ``gs://``, ``hdfs://``, ``abfs://``).
Everything that reads or writes an output goes through one, so the same code
serves a laptop's disk and a cluster's object store.

Credentials and endpoints come the standard ways (for S3: the AWS environment
variables and config files, ``AWS_ENDPOINT_URL``), plus storage options
(``--storage-option KEY=VALUE``: the keyword arguments of the scheme's pyarrow
filesystem, e.g. ``endpoint_override=http://127.0.0.1:8333``). Retries and
time-outs are bounded (`S3_DEFAULTS`). Errors come back as one line that names
the URI and the problem, never a secret (`failures.redact`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from fgram.pipeline.errors import ConfigError, FgramError, InputError, OutputError
from fgram.pipeline.io.failures import aside, failure, first_line, redact

SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file")
# bounded: a dead endpoint fails in seconds, one that takes connections and never answers
# (a frozen server) in about half a minute, not minutes (the SDK's own retries, 3 tries).
# request_timeout is curl's low-speed time: seconds with no bytes moving, not a cap on a
# transfer, so a large object streams for as long as it flows
S3_DEFAULTS = {"connect_timeout": 5.0, "request_timeout": 10.0}
S3_ATTEMPTS = 3
# what the SDKs read from the environment: a filesystem made under other values is another one
ENV_SETTINGS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
)


def scheme_of(uri: str) -> str | None:
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", uri)
    return m.group(1).lower() if m else None


def is_remote(uri: str) -> bool:
    return scheme_of(uri) not in (None, "file")


def _coerce(value: str) -> bool | float | int | str:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(value) if "." in value else int(value)
    except ValueError:
        return value


_FILESYSTEMS: dict[tuple[Any, ...], pafs.FileSystem] = {}
_LOCAL = pafs.LocalFileSystem()
# a forked process makes its own: an inherited one shares the parent's open connections, and
# two processes reading through one get each other's bytes
os.register_at_fork(after_in_child=_FILESYSTEMS.clear)
_USED = [False]  # whether this process has made an object-store filesystem


def object_store_used() -> bool:
    """Whether this process has talked to an object store: then it must not fork workers
    (Arrow's S3 client is not fork-safe; see `executors.LocalExecutor`)."""
    return _USED[0]


def _s3(options: dict[str, Any]) -> pafs.FileSystem:
    kw = {
        **S3_DEFAULTS,
        **{
            k: _coerce(v)
            if k not in ("access_key", "secret_key", "session_token", "region", "endpoint_override")
            else v
            for k, v in options.items()
        },
    }
    if "endpoint_override" not in kw:  # the AWS SDKs' variables (pyarrow's from_uri reads them)
        env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if env:
            kw["endpoint_override"] = env
    endpoint = kw.get("endpoint_override")
    if isinstance(endpoint, str) and "://" in endpoint:  # http://host:port -> scheme + host
        scheme, host = endpoint.split("://", 1)
        kw["scheme"], kw["endpoint_override"] = scheme, host.rstrip("/")
    kw.setdefault("retry_strategy", pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS))
    return pafs.S3FileSystem(**kw)


def filesystem(uri: str, options: dict[str, Any] | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) of a URI or a plain path; one filesystem object per
    scheme, authority and options in a process."""
    options = options or {}
    scheme = scheme_of(uri)
    if scheme is None:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if scheme not in SCHEMES:
        raise ConfigError(
            f"{uri}: unknown storage scheme {scheme!r} "
            f"(known: s3, gs, hdfs, abfs, file, or a plain path)"
        )
    rest = uri.split("://", 1)[1]
    if scheme == "file":
        return pafs.LocalFileSystem(), os.path.abspath("/" + rest.lstrip("/"))
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise ConfigError(f"{uri}: no bucket or host in the URI")
    path = rest.rstrip("/")
    key = (
        scheme,
        bucket if scheme in ("hdfs", "viewfs") else "",
        tuple(sorted(options.items())),
        tuple(os.environ.get(v) for v in ENV_SETTINGS),
    )
    try:
        if key not in _FILESYSTEMS:
            _USED[0] = True
            if scheme == "s3":
                _FILESYSTEMS[key] = _s3(options)
            elif scheme in ("gs", "gcs"):
                _FILESYSTEMS[key] = pafs.GcsFileSystem(
                    **{k: _coerce(v) for k, v in options.items()}
                )
            elif scheme in ("abfs", "abfss") and options:
                _FILESYSTEMS[key] = pafs.AzureFileSystem(
                    **{k: _coerce(v) for k, v in options.items()}
                )
            else:
                if options:
                    raise ConfigError(
                        f"{uri}: --storage-option is not supported for {scheme}:// "
                        f"(give the settings in the URI)"
                    )
                fs, _ = pafs.FileSystem.from_uri(uri)
                _FILESYSTEMS[key] = fs
        fs = _FILESYSTEMS[key]
    except FgramError:
        raise
    except TypeError as exc:
        raise ConfigError(
            f"--storage-option for {scheme}://: {redact(str(exc), options)}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - one line, naming the URI
        raise ConfigError(
            f"{uri}: cannot open the filesystem ({first_line(exc, options)})"
        ) from None
    if scheme in ("hdfs", "viewfs", "abfs", "abfss"):  # their paths drop the host part
        with contextlib.suppress(Exception):  # noqa: BLE001 - keep the plain path
            _, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def json_bytes(obj: Any) -> bytes:
    """JSON as fgram writes it everywhere: indented, keys sorted, a final newline."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class Location:
    """A path on a filesystem, with the URI to show. It holds no filesystem object, only
    what makes one (`filesystem`, one per process): a task carries plain strings, and a
    forked process never shares its parent's connections."""

    path: str
    uri: str
    options: tuple[tuple[str, Any], ...] = ()  # (key, value) storage options

    def __str__(self) -> str:  # as messages show it
        return self.uri

    @property
    def local(self) -> bool:
        return not is_remote(self.uri)

    @property
    def fs(self) -> pafs.FileSystem:
        return _LOCAL if self.local else filesystem(self.uri, dict(self.options))[0]

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def child(self, *names: str) -> Location:
        rel = "/".join(n.strip("/") for n in names if n)
        if not rel:
            return self
        join = os.path.join if self.local else (lambda a, b: f"{a.rstrip('/')}/{b}")
        return Location(join(self.path, rel), join(self.uri, rel), self.options)

    def inside(self, rel: str) -> Location:
        """``child(rel)`` for a name a data file gave (a manifest's, a store's): refused,
        naming this folder, unless it stays inside it (relative, no ``..``, no empty or
        ``.`` part, no backslash; locally, no link on the way that leaves it)."""
        parts = rel.split("/") if isinstance(rel, str) else []
        if (
            not parts
            or rel.startswith("/")
            or "\\" in rel
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise InputError(self.uri, f"names {rel!r}, a path out of it (a data file altered?)")
        out = self.child(rel)
        if self.local:
            top = os.path.realpath(self.path)
            real = os.path.realpath(out.path)
            if real != top and not real.startswith(top + os.sep):
                raise InputError(self.uri, f"{rel}: a link out of it (to {real})")
        return out

    def parent(self) -> Location:
        if self.local:
            return Location(os.path.dirname(self.path), os.path.dirname(self.uri), self.options)
        return Location(_cut(self.path), _cut(self.uri), self.options)

    def sibling(self, name: str) -> Location:
        return self.parent().child(name)

    def _fail(self, exc: BaseException, reading: bool = False) -> FgramError:
        return failure(self.uri, exc, dict(self.options), reading)

    def info(self) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.path)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None

    def exists(self) -> bool:
        there: bool = self.info().type != pafs.FileType.NotFound
        return there

    def is_file(self) -> bool:
        a_file: bool = self.info().type == pafs.FileType.File
        return a_file

    def files(self) -> list[str]:
        """Paths of every file below this folder, relative to it, sorted ([] if absent)."""
        try:
            infos = self.fs.get_file_info(
                pafs.FileSelector(self.path, recursive=True, allow_not_found=True)
            )
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None
        base = self.path.rstrip("/") + "/"
        return sorted(
            i.path[len(base) :]
            for i in infos
            if i.type == pafs.FileType.File and i.path.startswith(base)
        )

    def names(self) -> list[str]:
        """Names of the entries right below this folder, files and folders ([] if absent):
        one listing."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None
        return sorted(
            i.path.rstrip("/").rsplit("/", 1)[-1] for i in infos if i.type != pafs.FileType.NotFound
        )

    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.path) as f:
                data: bytes = f.read()
                return data
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None

    def read_json(self) -> Any:
        try:
            return json.loads(self.read_bytes())
        except ValueError as exc:
            raise InputError(self.uri, f"not valid JSON ({exc})") from None

    def write_bytes(self, data: bytes | memoryview) -> None:
        """Whole or not at all: locally aside, then renamed; on an object store one PUT
        (an object appears only when its upload completes)."""
        try:
            if self.local:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                with aside(self.path) as tmp, open(tmp, "wb") as f:
                    f.write(data)
                return
            with self.fs.open_output_stream(self.path) as f:
                f.write(data)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None

    def write_json(self, obj: Any) -> None:
        self.write_bytes(json_bytes(obj))

    def upload(self, source: str | Location) -> None:
        """Copy a file of this machine (its path, or its `Location`), or another object of
        the same store, here (the object appears only once complete; a copy on the store
        moves no byte through this machine)."""
        if isinstance(source, Location) and not source.local:
            try:
                self.fs.copy_file(source.path, self.path)
            except Exception as exc:  # noqa: BLE001
                raise self._fail(exc) from None
            return
        local_path = source.path if isinstance(source, Location) else source
        try:
            if self.local:
                import shutil

                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                with aside(self.path) as tmp:
                    shutil.copyfile(local_path, tmp)
                return
            pafs.copy_files(
                local_path,
                self.path,
                destination_filesystem=self.fs,
                chunk_size=8 << 20,
                use_threads=True,
            )
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None

    def download(self, local_path: str) -> None:
        """Copy this file to a local path (aside, then renamed)."""
        try:
            os.makedirs(os.path.dirname(local_path), exist_ok=True)
            with aside(local_path) as tmp:
                pafs.copy_files(
                    self.path, tmp, source_filesystem=self.fs, chunk_size=8 << 20, use_threads=True
                )
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None

    def remove(self) -> None:
        """Delete this file (no error if it is gone)."""
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001
            if self.exists():
                raise self._fail(exc) from None

    def remove_tree(self) -> None:
        """Delete this folder and everything below it (no error if it is gone)."""
        try:
            if self.local:
                import shutil

                if os.path.islink(self.path):  # the link goes, never what it points at
                    os.unlink(self.path)
                    return
                shutil.rmtree(self.path, ignore_errors=True)
            elif self.exists():
                self.fs.delete_dir_contents(self.path, missing_dir_ok=True)
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.fs.delete_dir(self.path)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None

    def dataset(self, files: list[str] | None = None) -> Any:
        """A pyarrow Parquet dataset of this folder (or of ``files`` below it)."""
        import pyarrow.dataset as ds

        try:
            if files is not None:
                return ds.dataset(
                    [self.child(f).path for f in files], filesystem=self.fs, format="parquet"
                )
            return ds.dataset(self.path, filesystem=self.fs, format="parquet")
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None


def _cut(path: str) -> str:
    """A path on an object store without its last part."""
    return path.rstrip("/").rsplit("/", 1)[0]


def locate(uri: str, options: dict[str, Any] | None = None) -> Location:
    """The `Location` of a URI or plain path (plain paths made absolute)."""
    fs, path = filesystem(str(uri), options)
    shown = path if isinstance(fs, pafs.LocalFileSystem) else str(uri).rstrip("/")
    return Location(path, shown, tuple(sorted((options or {}).items())))


def check_bucket(loc: Location) -> None:
    """An object store's bucket must exist (and answer): a missing one, wrong
    credentials or a dead endpoint fail here, before any work, in one line."""
    if loc.local:
        return
    bucket = loc.path.split("/", 1)[0]
    try:
        info = loc.fs.get_file_info(bucket)
    except Exception as exc:  # noqa: BLE001
        raise failure(loc.uri, exc, dict(loc.options)) from None
    if info.type == pafs.FileType.NotFound:
        raise OutputError(f"{loc.uri}: no such bucket {bucket!r}")
    # a HEAD of a bucket can pass where the credentials cannot list or write: probe a read
    try:
        loc.fs.get_file_info(pafs.FileSelector(bucket, allow_not_found=True))
    except Exception as exc:  # noqa: BLE001
        raise failure(loc.uri, exc, dict(loc.options)) from None
