"""One source for every option: each command's options are its config's fields (their
help, defaults and parsing), and each Python function takes the same names."""

import dataclasses
import inspect
import json

import pytest

import fgram.api
from fgram.cli import cli, hoisted
from fgram.cli.make import REFRESH_TAKES_NOT
from fgram.cli.report import HELDOUT_READING
from fgram.cli.use import ANNOTATE_TAKES_NOT
from fgram.pipeline.config.commands import (
    AnnotateConfig,
    BuildConfig,
    EmbedConfig,
    ReportConfig,
    TokenizeConfig,
)
from fgram.pipeline.config.options import options_of
from fgram.pipeline.config.tools import (
    CleanConfig,
    DiffConfig,
    IndexConfig,
    LookupConfig,
    ShowConfig,
    SynthConfig,
    VerifyConfig,
)
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.io.storage import Location

# command -> (its config, the fields it leaves out, its own parameters)
# (--json, `as_json`, is every job command's: the result, not a config field)
COMMANDS = {
    "build": (BuildConfig, ("inputs", "output"), {"table", "inputs", "dry_run", "as_json", "lineage"}),  # noqa: E501
    "refresh": (BuildConfig, REFRESH_TAKES_NOT, {"table", "inputs", "keep", "rebuild", "model", "dry_run", "as_json", "lineage"}),  # noqa: E501
    "tokenize": (TokenizeConfig, ("inputs",), {"inputs", "as_json", "lineage"}),
    "annotate": (AnnotateConfig, ANNOTATE_TAKES_NOT, {"table", "inputs", "as_json", "lineage"}),
    "coverage": (AnnotateConfig, ("table", "inputs", "output", "overwrite"), {"table", "inputs", "as_json", "lineage"}),  # noqa: E501
    "embed": (EmbedConfig, ("table",), {"table", "as_json", "lineage"}),
    "report": (ReportConfig, ("table",), {"table", "as_json", "lineage", *HELDOUT_READING}),
    "show": (ShowConfig, ("table",), {"table", "as_json"}),
    "diff": (DiffConfig, ("old", "new"), {"old", "new", "as_json"}),
    "index": (IndexConfig, ("table",), {"table", "as_json", "lineage"}),
    "lookup": (LookupConfig, ("table",), {"table"}),
    "verify": (VerifyConfig, ("table",), {"table", "as_json"}),
    "synth": (SynthConfig, (), set()),
    "clean": (CleanConfig, (), {"folders", "as_json", "lineage"}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_options_are_its_configs_fields(name):
    cls, left_out, own = COMMANDS[name]
    fields = options_of(cls)
    params = {p.name: p for p in cli.commands[name].params if p.name != "help"}
    assert set(params) == (set(fields) - set(left_out)) | own
    for pname, p in params.items():
        if pname in fields and pname not in own:
            assert p.help == fields[pname][1].help  # written once, on the field
            default = fields[pname][0].default
            if not p.required and not p.multiple and isinstance(default, (int, str, bool)):
                assert p.default == default


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_function_takes_the_commands_names(name):
    """fgram.<command>(...) passes its keywords to the same config: every option of the
    command is a keyword of the function or a field of its config."""
    cls, _, own = COMMANDS[name]
    fn = getattr(fgram.api, name)
    sig = inspect.signature(fn)
    assert any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())  # **options
    keywords = set(sig.parameters) | set(options_of(cls)) | {"table", "inputs"}
    cli_only = {"help", "as_json", "lineage", "keep", "dry_run"}
    params = {p.name for p in cli.commands[name].params} - cli_only
    if name == "report":
        params -= set(HELDOUT_READING)  # they go in coverage={...}, as AnnotateConfig's
    assert params <= keywords
    assert name != "refresh" or {"keep", "rebuild", "model"} <= set(sig.parameters)


def test_a_value_parses_alike_from_the_command_line_and_from_python():
    ctx = cli.commands["build"].make_context(
        "build",
        ["t", "in/", "-S", "1M", "--broadcast-budget", "2G", "--unit-tokens", "4M",
         "--conf", "a=b", "--storage-option", "region=x", "--rank-rows", "10K"],
    )  # fmt: skip
    params = dict(ctx.params)
    assert params.pop("as_json") is params.pop("lineage") is params.pop("dry_run") is False
    from_cli = BuildConfig(inputs=list(params.pop("inputs")), output=params.pop("table"), **params)
    from_python = BuildConfig(
        inputs=["in/"],
        output="t",
        size="1M",
        broadcast_budget="2G",
        unit_tokens="4M",
        conf={"a": "b"},
        storage={"region": "x"},
        rank_rows="10K",
    )
    assert from_cli == from_python
    assert (from_cli.size, from_cli.broadcast_budget, from_cli.unit_tokens) == (
        10**6,
        2 * 2**30,
        4 * 10**6,
    )
    assert AnnotateConfig(table="t", inputs=["x"], sizes="100K, 10K").sizes == [10**4, 10**5]


def test_bad_options_are_one_config_error_naming_the_option():
    cases = [
        (lambda: BuildConfig(inputs=["x"], output="o", size="lots"), "--size: 'lots'"),
        (lambda: BuildConfig(inputs=["x"], output="o", dtype="u8").validate(), "--dtype must be"),
        (lambda: BuildConfig(inputs=["x"], output="o", engine="gpu").validate(), "--engine"),
        (lambda: BuildConfig(inputs=["x"], output="o", max_len=9).validate(), "2..8"),
        (lambda: BuildConfig(inputs=["x"], output="o", conf=("a",)), "--conf: expected KEY"),
        (lambda: EmbedConfig(table="t", model="m:f", float="f8").validate(), "--float"),
        (lambda: TokenizeConfig(["a"], "o", "t", shard_tokens=0).validate(), "--shard-tokens"),
        (lambda: ReportConfig(table="t", top=-1).validate(), "--top must be >= 0"),
    ]
    for make, message in cases:
        with pytest.raises(ConfigError, match=message):
            make()


def test_the_groups_options_go_anywhere():
    assert hoisted(["show", "t", "-q"]) == ["-q", "show", "t"]
    assert hoisted(["build", "t", "x", "--log-level", "info", "-S", "5"]) == [
        "--log-level", "info", "build", "t", "x", "-S", "5"
    ]  # fmt: skip
    assert hoisted(["build", "--log-level=debug", "t"]) == ["--log-level=debug", "build", "t"]
    assert hoisted(["lookup", "t", "--", "-q"]) == ["lookup", "t", "--", "-q"]


def test_listing_defaults_agree():
    tops = {
        name: next(p.default for p in cli.commands[name].params if p.name == "top")
        for name in ("show", "diff", "report")
    }
    assert set(tops.values()) == {10}


def test_a_config_holds_its_places_as_locations(tmp_path, monkeypatch):
    """A place given as a path (relative or not), a `pathlib.Path` or a URI is a
    `Location` from when the config is made, with the config's storage options; the
    manifest's record shows it as its URI (a local one absolute), without secrets."""
    monkeypatch.chdir(tmp_path)
    storage = {"region": "eu-west-1", "secret_key": "s3cr3t-value"}
    cfg = BuildConfig(inputs=["in"], output="table", work_dir=tmp_path / "work", storage=storage)
    assert isinstance(cfg.output, Location) and isinstance(cfg.work_dir, Location)
    assert (cfg.output.path, cfg.output.local) == (str(tmp_path / "table"), True)
    assert cfg.work_dir.uri == str(tmp_path / "work")
    assert dict(cfg.output.options) == storage
    rec = cfg.record()
    assert (rec["output"], rec["work_dir"]) == (str(tmp_path / "table"), str(tmp_path / "work"))
    assert rec["storage"] == {"region": "eu-west-1", "secret_key": "***"}
    assert "s3cr3t-value" not in json.dumps(rec)
    again = dataclasses.replace(cfg, size=10)  # made again: the places as they were
    assert again.output is cfg.output and again.size == 10
    assert str(cfg.output) == str(tmp_path / "table")  # as messages show it

    remote = AnnotateConfig(
        table="s3://bucket/fgrams/", inputs=["shards"], storage={"region": "eu-west-1"}
    )
    assert (remote.table.uri, remote.table.path, remote.table.local) == (
        "s3://bucket/fgrams", "bucket/fgrams", False,
    )  # fmt: skip
    assert remote.output is None and remote.record()["table"] == "s3://bucket/fgrams"
    assert DiffConfig(old="a", new=tmp_path / "b").new.path == str(tmp_path / "b")
