"""OpenLineage: the real client (openlineage-python) sends a START and a COMPLETE or FAIL
event per command, with the inputs and outputs and the result's counts, to a real
receiver: its file transport, and its HTTP transport to a small server on 127.0.0.1."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import manifest

from fgram.lineage import dataset_name, wanted

LOCAL = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local", "--min-count", "2"]
PARENT = "airflow-prod/daily_fgrams.refresh/01932f5e-7c1a-7d3e-9b1a-0a1b2c3d4e5f"


def _env(**settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    return {**env, **settings}


def _fgram(args, env):
    return subprocess.run(
        [sys.executable, "-m", "fgram", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_build_sends_start_and_complete_through_the_file_transport(corpus):
    events = corpus / "events.jsonl"
    config = corpus / "openlineage.yml"
    config.write_text(f"transport:\n  type: file\n  log_file_path: {events}\n  append: true\n")
    out = str(corpus / "t")
    env = _env(OPENLINEAGE_CONFIG=str(config), OPENLINEAGE_PARENT_ID=PARENT)
    res = _fgram(["build", out, str(corpus / "c"), *LOCAL, "--json"], env)
    assert res.returncode == 0, res.stderr
    start, complete = [json.loads(line) for line in events.read_text().splitlines()]
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert complete["job"] == {"namespace": "fgram", "name": "fgram.build.t", "facets": {}}
    (read,) = complete["inputs"]
    assert (read["namespace"], read["name"]) == ("file", str(corpus / "c"))
    assert read["inputFacets"]["inputStatistics"]["size"] == os.path.getsize(corpus / "c" / "a.bin")
    (wrote,) = complete["outputs"]
    m = manifest(out)
    assert (wrote["namespace"], wrote["name"]) == ("file", out)
    assert wrote["outputFacets"]["outputStatistics"]["rowCount"] == m["fgrams"]
    assert wrote["facets"]["version"]["datasetVersion"] == m["run_fingerprint"]
    assert wrote["facets"]["fgram"]["counts"]["tokens"] == m["totals"]["tokens"]
    assert wrote["facets"]["fgram"] == {**wrote["facets"]["fgram"], "status": "built"}
    parent = complete["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == (
        "airflow-prod",
        "daily_fgrams.refresh",
    )
    assert parent["run"]["runId"] == PARENT.rsplit("/", 1)[1]
    assert json.loads(res.stdout)["status"] == "built"  # --json unchanged beside it


class _Receiver(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, json.loads(body)))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.got
    server.shutdown()


def test_http_transport_gets_the_reads_of_a_reader_and_a_failure(corpus, receiver):
    url, got = receiver
    env = _env(OPENLINEAGE_URL=url, OPENLINEAGE_NAMESPACE="team-lm")
    t = str(corpus / "t")
    assert _fgram(["build", t, str(corpus / "c"), *LOCAL], env).returncode == 0
    assert _fgram(["index", t], env).returncode == 0
    del got[:]
    tags = str(corpus / "g")
    res = _fgram(["annotate", t, str(corpus / "c"), *LOCAL[:-2], "-o", tags], env)
    assert res.returncode == 0, res.stderr
    assert [p for p, _ in got] == ["/api/v1/lineage"] * 2
    done = got[-1][1]
    assert done["eventType"] == "COMPLETE" and done["job"]["namespace"] == "team-lm"
    assert [i["name"] for i in done["inputs"]] == [t, str(corpus / "c")]  # the table, the shards
    assert [o["name"] for o in done["outputs"]] == [tags]

    del got[:]
    bad = _fgram(["build", str(corpus / "u"), str(corpus / "missing"), *LOCAL], env)
    assert bad.returncode == 2
    assert [e["eventType"] for _, e in got] == ["START", "FAIL"]
    error = got[-1][1]["run"]["facets"]["errorMessage"]
    assert error["message"].startswith("InputError: ") and "missing" in error["message"]


def test_a_receiver_that_is_down_is_one_warning_not_a_failure(corpus):
    env = _env(  # the discard port: nothing listens; no retries (the client's own policy)
        OPENLINEAGE__TRANSPORT__TYPE="http",
        OPENLINEAGE__TRANSPORT__URL="http://127.0.0.1:9",
        OPENLINEAGE__TRANSPORT__RETRY='{"total": 0}',
    )
    res = _fgram(["build", str(corpus / "t"), str(corpus / "c"), *LOCAL], env)
    assert res.returncode == 0, res.stderr
    assert os.path.exists(corpus / "t" / "_SUCCESS")
    warned = [line for line in res.stderr.splitlines() if "OpenLineage" in line]
    assert len(warned) == 1 and warned[0].startswith("fgram: warning: OpenLineage events")


def test_events_only_when_asked_and_names_as_openlineage_spells_them(monkeypatch):
    for k in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(k)
    assert wanted(False) is False and wanted(True) is True
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:5000")
    assert wanted(False) is True
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    assert wanted(False) is False
    assert dataset_name("s3://bucket/tables/t") == ("s3://bucket", "/tables/t")
    assert dataset_name("/data/t/") == ("file", "/data/t")
