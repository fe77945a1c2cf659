"""Dagster Pipes: run as a Pipes subprocess (the context and message channel that
Dagster's `PipesSubprocessClient` injects, made here with dagster-pipes' own
`encode_param`, read back as Dagster's file message reader reads them), a command
reports its table's materialization with the fingerprint as data version and its
counts as metadata; a failure closes the session with fgram's error; outside Pipes,
nothing. Where Dagster itself is installed (optional: heavy), a real asset run through
`PipesSubprocessClient` too."""

import json
import os
import subprocess
import sys

import pytest
from dagster_pipes import encode_param
from helpers import manifest

LOCAL = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local", "--min-count", "2"]


def _pipes_run(tmp_path, args, assets=("fgram_table",)):
    """(exit code, the messages the process wrote to its Pipes channel)."""
    ctx, messages = tmp_path / "context.json", tmp_path / "messages.jsonl"
    messages.unlink(missing_ok=True)
    ctx.write_text(
        json.dumps(
            {
                "asset_keys": list(assets),
                "code_version_by_asset_key": None,
                "provenance_by_asset_key": None,
                "partition_key": None,
                "partition_key_range": None,
                "partition_time_window": None,
                "run_id": "dagster-run-1",
                "job_name": "fgram_job",
                "retry_number": 0,
                "extras": {},
            }
        )
    )
    env = {
        **os.environ,
        "DAGSTER_PIPES_CONTEXT": encode_param({"path": str(ctx)}),
        "DAGSTER_PIPES_MESSAGES": encode_param({"path": str(messages)}),
    }
    res = subprocess.run(
        [sys.executable, "-m", "fgram", *args], capture_output=True, text=True, env=env, timeout=300
    )
    got = (
        [json.loads(line) for line in messages.read_text().splitlines()]
        if messages.exists()
        else []
    )
    return res, got


def test_a_refresh_reports_its_materialization_with_the_fingerprint(corpus):
    root = str(corpus / "r")
    res, got = _pipes_run(corpus, ["refresh", root, str(corpus / "c"), *LOCAL])
    assert res.returncode == 0, res.stderr
    methods = [m["method"] for m in got]
    assert methods[0] == "opened" and methods[-1] == "closed"
    (mat,) = [m["params"] for m in got if m["method"] == "report_asset_materialization"]
    m = manifest(os.path.join(root, "current"))
    assert mat["asset_key"] == "fgram_table" and mat["data_version"] == m["run_fingerprint"]
    meta = mat["metadata"]
    assert meta["fgrams"]["raw_value"] == m["fgrams"] and meta["status"]["raw_value"] == "built"
    assert meta["tokens"]["raw_value"] == m["totals"]["tokens"]
    assert meta["output"] == {"raw_value": f"{root}/versions/{meta['version_id']['raw_value']}",
                              "type": "path"}  # fmt: skip

    again, got = _pipes_run(corpus, ["refresh", root, str(corpus / "c"), *LOCAL])
    (same,) = [m["params"] for m in got if m["method"] == "report_asset_materialization"]
    assert same["data_version"] == mat["data_version"]  # unchanged: the version Dagster has
    assert same["metadata"]["status"]["raw_value"] == "unchanged"


def test_a_failure_closes_the_session_with_the_error(corpus):
    res, got = _pipes_run(corpus, ["build", str(corpus / "t"), str(corpus / "missing"), *LOCAL])
    assert res.returncode == 2
    assert "report_asset_materialization" not in [m["method"] for m in got]
    closed = got[-1]
    assert closed["method"] == "closed"
    assert "InputError" in json.dumps(closed["params"]) and "missing" in json.dumps(
        closed["params"]
    )


def test_outside_pipes_nothing_is_written(corpus):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES")}
    res = subprocess.run(
        [sys.executable, "-m", "fgram", "build", str(corpus / "t"), str(corpus / "c"), *LOCAL],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0 and "Dagster" not in res.stderr and "pipes" not in res.stderr.lower()


def test_a_dagster_asset_materializes_through_pipes(corpus):
    """With Dagster itself (not in the test extra: heavy; skipped without it): an asset
    runs `fgram refresh` through `PipesSubprocessClient`; its materialization carries the
    fingerprint as data version and the counts as metadata."""
    dagster = pytest.importorskip("dagster", reason="dagster is not installed (heavy, optional)")
    root = str(corpus / "r")
    command = [sys.executable, "-m", "fgram", "refresh", root, str(corpus / "c"), *LOCAL]

    @dagster.asset
    def fgram_table(
        context: dagster.AssetExecutionContext,
        pipes_subprocess_client: dagster.PipesSubprocessClient,
    ):
        return pipes_subprocess_client.run(
            command=command, context=context
        ).get_materialize_result()

    run = dagster.materialize(
        [fgram_table], resources={"pipes_subprocess_client": dagster.PipesSubprocessClient()}
    )
    assert run.success
    (mat,) = run.asset_materializations_for_node("fgram_table")
    m = manifest(os.path.join(root, "current"))
    assert mat.metadata["fgrams"].value == m["fgrams"]
    assert mat.metadata["status"].value == "built"
    assert mat.tags["dagster/data_version"] == m["run_fingerprint"]
