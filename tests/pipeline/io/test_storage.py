"""The I/O layer without a server: URIs, options, what a manifest or a message may show."""

from types import SimpleNamespace

import pytest

from fgram.jobs.runs import check_work_reach
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError, OutputError, StorageUnavailable
from fgram.pipeline.io.failures import explain, failure, parse_options, public_options, redact
from fgram.pipeline.io.publish import data_files, generation_name, here
from fgram.pipeline.io.storage import is_remote, locate


def test_plain_paths_and_file_uris_are_local(tmp_path):
    for uri in (str(tmp_path / "x"), f"file://{tmp_path}/x"):
        loc = locate(uri)
        assert loc.local and loc.path == str(tmp_path / "x") and loc.uri == loc.path
        assert loc.child("a", "b.json").path == str(tmp_path / "x" / "a" / "b.json")
        assert loc.child("a").parent().path == loc.path
    assert not is_remote("rel/path") and not is_remote("file:///x") and is_remote("s3://b/k")


def test_unknown_scheme_and_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="unknown storage scheme 'foo'"):
        locate("foo://bucket/x")
    with pytest.raises(ConfigError, match="no bucket"):
        locate("s3:///x")
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_options(["endpoint_override"])
    assert parse_options(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="--storage-option"):
        locate("s3://bucket/x", {"no_such_setting": "1"})


def test_secrets_are_masked_in_records_and_messages(monkeypatch):
    opts = {
        "endpoint_override": "http://127.0.0.1:9",
        "access_key": "AKIAX",
        "secret_key": "s3cr3t-value",
        "session_token": "tok-value",
        "region": "eu",
    }
    shown = public_options(opts)
    assert shown == {
        "access_key": "***",
        "endpoint_override": "http://127.0.0.1:9",
        "region": "eu",
        "secret_key": "***",
        "session_token": "***",
    }
    cfg = BuildConfig(inputs=["x"], output="s3://b/out", storage=opts)
    rec = repr(cfg.record())
    assert "s3cr3t-value" not in rec and "tok-value" not in rec and "s3://b/out" in rec
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-9")
    assert redact("key s3cr3t-value and env-secret-9", opts) == "key *** and ***"


def test_failures_are_classified_by_what_they_allow():
    refused = OSError(
        "When getting information for key 'k' in bucket 'b': AWS Error "
        "NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not "
        "connect to server"
    )
    denied = OSError("AWS Error ACCESS_DENIED during HeadObject operation: No response body.")
    err = failure("s3://b/k", refused, {"endpoint_override": "http://h:1"})
    assert isinstance(err, StorageUnavailable)
    assert str(err) == "s3://b/k: cannot reach the object store at http://h:1 (connection refused)"
    err = failure("s3://b/k", denied)
    assert isinstance(err, OutputError) and "access denied" in str(err)
    assert not explain(denied)[1] and explain(refused)[1]


def test_generation_names_and_data_files(tmp_path):
    assert generation_name("fgrams/part-00001.parquet", "g1") == "fgrams/part-00001-g1.parquet"
    assert generation_name("index/suffix.npy", "g1") == "index/suffix-g1.npy"
    assert generation_name("a.dir/noext", "g1") == "a.dir/noext-g1"
    (tmp_path / "fgrams").mkdir()
    (tmp_path / "_work").mkdir()
    for name in ("fgrams/part-00000.parquet", "manifest.json", "_SUCCESS", "_work/state.json"):
        (tmp_path / name).write_text("x")
    assert data_files(here(str(tmp_path))) == ["fgrams/part-00000.parquet"]


def test_a_cluster_never_gets_tasks_for_work_files_on_the_driver():
    remote = BuildConfig(inputs=["x"], output="s3://b/out")
    master = SimpleNamespace(master="spark://10.0.0.1:7077")
    cluster = SimpleNamespace(remote=True, sc=master)  # executors on other machines
    with pytest.raises(ConfigError, match="cannot reach"):
        check_work_reach(remote, cluster)
    check_work_reach(remote, SimpleNamespace(remote=False))  # local mode, local processes
    check_work_reach(BuildConfig(inputs=["x"], output="/shared/out"), cluster)
