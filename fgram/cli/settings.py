"""``--config FILE`` and ``--log-file FILE``, the group's options for every command.

A config file (TOML, or YAML with PyYAML installed) gives options by their names (dashes
or underscores): top-level keys for every command that has them, a table per command
(``[refresh]``) for that one, which wins. What the command line gives wins over both. A
key no command knows, or one the command's table names that it has not, is an error
naming the file and the key. ``KEY=VALUE`` options (``conf``, ``storage``) take a table.

``--log-file`` appends every line fgram writes to stderr (progress, warnings, the
error line, and the JVM's log lines where fgram starts the JVM: local mode, or
``--master``) to FILE as well, after a line with the run's start and its command line;
under ``spark-submit`` the driver's log follows Spark's log4j settings."""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any, TextIO

import click

from fgram.pipeline.errors import ConfigError


def _read(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{path}: a YAML config needs PyYAML (pip install pyyaml)") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: the same module, from PyPI
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of options at the top")
    return data


def _value(param: click.Parameter, value: Any) -> Any:
    """A config value as click takes a default: ``KEY=VALUE`` options from a table."""
    if isinstance(value, dict):
        return [f"{k}={v}" for k, v in value.items()]
    if getattr(param, "multiple", False) and not isinstance(value, list):
        return [value]
    return value


def defaults_for(path: str, group: click.Group, command: str | None) -> dict[str, Any]:
    """The default map of ``command`` from the config file at ``path``."""
    data = _read(path)
    params = {
        name: {p.name: p for p in cmd.params if p.name} for name, cmd in group.commands.items()
    }
    known = {n for ps in params.values() for n in ps}

    def names(table: dict[str, Any], where: str | None, allowed: set[str]) -> dict[str, Any]:
        out = {}
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in allowed:
                whose = (
                    f"[{where}] {key!r}: `fgram {where}` has no such option"
                    if where
                    else f"{key!r}: no command has such an option"
                )
                raise ConfigError(f"{path}: {whose}")
            out[name] = value
        return out

    top = {k: v for k, v in data.items() if not (k in params and isinstance(v, dict))}
    names(top, None, known)
    mine = params.get(command or "", {})
    chosen = {k.replace("-", "_"): v for k, v in top.items() if k.replace("-", "_") in mine}
    table = data.get(command or "") if command in params else None
    if isinstance(table, dict):
        chosen.update(names(table, command, set(mine)))
    return {command: {k: _value(mine[k], v) for k, v in chosen.items()}} if command else {}


class _Tee:
    """stderr as it was, and a log file beside it."""

    def __init__(self, stream: TextIO, log: TextIO):
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.log.write(text)
        self.log.flush()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the terminal's
        return getattr(self.stream, name)


def log_to(path: str) -> None:
    """From now on, every line on stderr also goes to ``path`` (appended)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        log = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the log file ({exc.strerror})") from None
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    log.write(f"fgram: run started {started}: {' '.join(sys.argv[1:])}\n")
    sys.stderr = _Tee(sys.stderr, log)
