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
the URI and the problem, never a secret (`redact`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs

from .errors import ConfigError, FgramError, InputError, OutputError, StorageUnavailable

SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file")
# bounded: a dead endpoint fails in seconds, not minutes (the SDK's own retries, 3 tries)
S3_DEFAULTS = {"connect_timeout": 5.0, "request_timeout": 60.0}
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
SECRET_WORDS = ("secret", "token", "password", "key", "credential", "sas", "sig")


def parse_options(pairs) -> dict[str, str]:
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


def public_options(options: dict | None) -> dict:
    """Storage options as a manifest or a log may show them: secrets masked."""
    return {k: ("***" if is_secret(k) else v) for k, v in sorted((options or {}).items())}


def _secrets(options: dict | None) -> list[str]:
    found = [str(v) for k, v in (options or {}).items() if is_secret(k) and v]
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY"):
        if os.environ.get(name):
            found.append(os.environ[name])
    return [s for s in found if len(s) >= 3]


def redact(text: str, options: dict | None = None) -> str:
    for secret in _secrets(options):
        text = text.replace(secret, "***")
    return text


def scheme_of(uri: str) -> str | None:
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", uri)
    return m.group(1).lower() if m else None


def is_remote(uri: str) -> bool:
    return scheme_of(uri) not in (None, "file")


def _coerce(value: str):
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(value) if "." in value else int(value)
    except ValueError:
        return value


_FILESYSTEMS: dict[tuple, pafs.FileSystem] = {}
_LOCAL = pafs.LocalFileSystem()
# a forked process makes its own: an inherited one shares the parent's open connections, and
# two processes reading through one get each other's bytes
os.register_at_fork(after_in_child=_FILESYSTEMS.clear)
_USED = [False]  # whether this process has made an object-store filesystem


def object_store_used() -> bool:
    """Whether this process has talked to an object store: then it must not fork workers
    (Arrow's S3 client is not fork-safe; see `executors.LocalExecutor`)."""
    return _USED[0]


def _s3(options: dict) -> pafs.FileSystem:
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
        kw["scheme"], kw["endpoint_override"] = endpoint.split("://", 1)
        kw["endpoint_override"] = kw["endpoint_override"].rstrip("/")
    kw.setdefault("retry_strategy", pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS))
    return pafs.S3FileSystem(**kw)


def filesystem(uri: str, options: dict | None = None) -> tuple[pafs.FileSystem, str]:
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


def first_line(exc: BaseException, options: dict | None = None, limit: int = 300) -> str:
    """An exception's first line, cut to ``limit`` characters, secrets redacted."""
    text = str(exc).strip()
    return redact(text.splitlines()[0][:limit] if text else type(exc).__name__, options)


def json_bytes(obj) -> bytes:
    """JSON as fgram writes it everywhere: indented, keys sorted, a final newline."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def explain(exc: BaseException, options: dict | None = None) -> tuple[str, bool]:
    """(one-line cause of a storage failure, whether it may pass: an endpoint down)."""
    text = str(exc)
    where = _endpoint(options)
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


def _endpoint(options: dict | None) -> str:
    """' at ENDPOINT' for messages, from the options or the environment ('' if neither)."""
    end = (
        (options or {}).get("endpoint_override")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    return f" at {end}" if end else ""


def failure(
    uri: str, exc: BaseException, options: dict | None = None, reading: bool = False
) -> FgramError:
    """The error to raise for a storage call on ``uri`` that failed with ``exc``."""
    if isinstance(exc, FgramError):
        return exc
    cause, passing = explain(exc, options)
    if passing:
        return StorageUnavailable(f"{uri}: {cause}")
    return InputError(uri, cause) if reading else OutputError(f"{uri}: {cause}")


@dataclass(frozen=True)
class Location:
    """A path on a filesystem, with the URI to show. It holds no filesystem object, only
    what makes one (`filesystem`, one per process): a task carries plain strings, and a
    forked process never shares its parent's connections."""

    path: str
    uri: str
    options: tuple = ()  # (key, value) storage options

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

    def parent(self) -> Location:
        cut = lambda s: s.rstrip("/").rsplit("/", 1)[0]  # noqa: E731
        if self.local:
            return Location(os.path.dirname(self.path), os.path.dirname(self.uri), self.options)
        return Location(cut(self.path), cut(self.uri), self.options)

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
        return self.info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

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
                return f.read()
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, reading=True) from None

    def read_json(self):
        try:
            return json.loads(self.read_bytes())
        except ValueError as exc:
            raise InputError(self.uri, f"not valid JSON ({exc})") from None

    def write_bytes(self, data: bytes) -> None:
        """Whole or not at all: locally aside, then renamed; on an object store one PUT
        (an object appears only when its upload completes)."""
        try:
            if self.local:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.path)
                return
            with self.fs.open_output_stream(self.path) as f:
                f.write(data)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None

    def write_json(self, obj) -> None:
        self.write_bytes(json_bytes(obj))

    def upload(self, source) -> None:
        """Copy a local file (a path), or another `Location` of the same store, here (the
        object appears only once complete; a copy on the store moves no byte through
        this machine)."""
        if isinstance(source, Location):
            try:
                self.fs.copy_file(source.path, self.path)
            except Exception as exc:  # noqa: BLE001
                raise self._fail(exc) from None
            return
        local_path = source
        try:
            if self.local:
                import shutil

                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
                shutil.copyfile(local_path, tmp)
                os.replace(tmp, self.path)
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
        tmp = f"{local_path}.{uuid.uuid4().hex}.tmp"
        try:
            os.makedirs(os.path.dirname(local_path), exist_ok=True)
            pafs.copy_files(
                self.path, tmp, source_filesystem=self.fs, chunk_size=8 << 20, use_threads=True
            )
            os.replace(tmp, local_path)
        except Exception as exc:  # noqa: BLE001
            if os.path.exists(tmp):
                os.remove(tmp)
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

                shutil.rmtree(self.path, ignore_errors=True)
            elif self.exists():
                self.fs.delete_dir_contents(self.path, missing_dir_ok=True)
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.fs.delete_dir(self.path)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None

    def dataset(self, files: list[str] | None = None):
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


def locate(uri: str, options: dict | None = None) -> Location:
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


def cache_dir(*parts: str) -> str:
    """fgram's local cache (``$FGRAM_CACHE_DIR``, else ``~/.cache/fgram``), made on demand."""
    root = os.environ.get("FGRAM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "fgram"
    )
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path


CACHE_MAX = "FGRAM_CACHE_MAX"  # bytes of object-store copies kept (default 32G)
DEFAULT_CACHE_MAX = 32 * 2**30


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """'512M', '2G', '1048576' -> bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(f"not a size: {text!r} (examples: 512M, 2G, 1048576)")
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def cache_limit() -> int:
    return parse_size(os.environ.get(CACHE_MAX) or DEFAULT_CACHE_MAX)


def cached_copy(obj: Location, sha256: str, size: int) -> str:
    """A local copy of an object-store file, for memory mapping: kept in the cache's
    ``remote/`` folder under its sha256 (so one content is fetched once, whatever its
    URI), checked against it when downloaded. The folder holds at most `cache_limit`
    bytes: the least recently used copies are deleted first (a process that maps one
    keeps its pages)."""
    folder = cache_dir("remote")
    path = os.path.join(folder, f"{sha256}.npy")
    if os.path.exists(path) and os.path.getsize(path) == size:
        os.utime(path)  # its time is its last use
        return path
    _evict(folder, cache_limit() - size)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    obj.download(tmp)
    if file_sha256(tmp) != sha256:
        os.remove(tmp)
        raise FgramError(f"{obj.uri}: checksum mismatch (corrupt, or changed while read)")
    os.replace(tmp, path)
    return path


def immutable_copy(obj: Location) -> str:
    """A local copy of an object that never changes once written (a refresh store's
    objects, which have names of their own), in the cache's ``remote/`` folder under a
    digest of its URI: fetched once per machine (`keep_copy` spares even that for what
    this machine wrote), bounded with `cached_copy`'s copies."""
    path = _immutable_path(obj)
    if os.path.exists(path):
        os.utime(path)
        return path
    size = obj.info().size or 0
    _evict(os.path.dirname(path), cache_limit() - size)
    obj.download(path)
    return path


def local_path(loc: Location) -> str:
    """A path on this machine holding the bytes of ``loc``, a file that never changes once
    written: its own path, or its `immutable_copy`."""
    return loc.path if loc.local else immutable_copy(loc)


def keep_copy(obj: Location, local_path: str) -> None:
    """Keep ``local_path``, the file just uploaded as ``obj``, as its `immutable_copy`."""
    path = _immutable_path(obj)
    _evict(os.path.dirname(path), cache_limit() - os.path.getsize(local_path))
    os.replace(local_path, path)


def _immutable_path(obj: Location) -> str:
    # the endpoint too: one bucket name on two stores is two buckets
    digest = hashlib.sha256(f"{obj.uri}{_endpoint(dict(obj.options))}".encode()).hexdigest()[:32]
    return os.path.join(cache_dir("remote"), f"obj-{digest}-{obj.name}")


def _evict(folder: str, room: int) -> None:
    """Delete the least recently used copies until the rest take at most ``room`` bytes."""
    entries = []
    for name in os.listdir(folder):
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, name))
    total = sum(e[1] for e in entries)
    for _, size, name in sorted(entries):
        if total <= max(room, 0):
            break
        try:
            os.remove(os.path.join(folder, name))
            total -= size
        except OSError:
            pass
