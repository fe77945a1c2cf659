"""`--json`: every command that runs a job ends with one JSON object on stdout, valid
against the documented schema (fgram/cli/result.schema.json, docs/formats.md), for a
success, an unchanged refresh, bad input, a usage error and a killed task; the closing
lines and progress go to stderr."""

import json
import math
import os
import subprocess
import sys

import jsonschema
import pytest
from click.testing import CliRunner
from helpers import REPO, SUPPORT, manifest, write_bin
from helpers import SMALL_DOCS as DOCS

from fgram.cli import cli
from fgram.jobs.budget import WORK_BYTES_PER_TOKEN

HERE = SUPPORT  # slow_models
SCHEMA = json.load(open(os.path.join(REPO, "fgram", "cli", "result.schema.json"), encoding="utf-8"))
FLAT = ["--dtype", "uint16", "--doc-sep", "0"]
LOCAL = [*FLAT, "--engine", "local", "--min-count", "2"]


def run_json(args: list[str], code: int = 0) -> dict:
    """The command's result: exactly one JSON object on stdout, valid, its exit code."""
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    out = json.loads(lines[0])
    jsonschema.validate(out, SCHEMA)
    assert out["exit_code"] == code
    return out


def test_build_refresh_index_and_the_readers_say_what_they_made(corpus):
    t = str(corpus / "t")
    built = run_json(["build", t, str(corpus / "c"), *LOCAL])
    m = manifest(t)
    assert built["status"] == "built" and built["command"] == "build"
    # the schema's own version is named as such, apart from a refresh's version_id
    assert built["schema_version"] == 2 and "version" not in built and built["version_id"] is None
    assert built["output"] == t and built["fingerprint"] == m["run_fingerprint"]
    assert built["counts"]["fgrams"] == m["fgrams"] > 0
    assert built["counts"]["tokens"] == m["totals"]["tokens"]
    assert set(built["seconds"]["passes"]) == {str(p["length"]) for p in m["passes"]}
    res = CliRunner().invoke(cli, ["build", t, str(corpus / "c"), *FLAT, "--min-count", "2",
                                   "--engine", "local", "--overwrite"])  # fmt: skip
    assert res.stdout.startswith(f"{m['fgrams']} f-grams")  # without --json: the line, stdout

    indexed = run_json(["index", t])
    assert indexed["counts"] == {"fgrams": m["fgrams"]} and indexed["output"].endswith("index")
    cov = run_json(["coverage", t, str(corpus / "c"), *FLAT, "--engine", "local"])
    assert cov["details"]["coverage"]["positions"] == cov["counts"]["positions"] > 0
    tags = run_json(
        ["annotate", t, str(corpus / "c"), *FLAT, "--engine", "local", "-o", str(corpus / "g")]
    )
    assert tags["output"] == str(corpus / "g") and tags["counts"] == cov["counts"]
    emb = run_json(["embed", t, "--model", "fgram.pipeline.models:hashed", "--engine", "local"])
    assert emb["counts"]["rows"] == m["fgrams"] and len(emb["fingerprint"]) == 64
    page = run_json(["report", t, "-o", str(corpus / "r.html")])
    assert page["output"] == str(corpus / "r.html") and os.path.exists(page["output"])
    listed = run_json(["clean", str(corpus), "--no-cache"])
    assert listed["status"] == "unchanged" and listed["counts"]["entries"] == 0


def test_refresh_says_built_then_unchanged_with_its_versions(corpus):
    root = str(corpus / "r")
    first = run_json(["refresh", root, str(corpus / "c"), *LOCAL])
    assert first["status"] == "built" and first["previous_version_id"] is None
    assert first["output"] == f"{root}/versions/{first['version_id']}"
    again = run_json(["refresh", root, str(corpus / "c"), *LOCAL])
    assert again["status"] == "unchanged" and again["exit_code"] == 0
    assert again["version_id"] == first["version_id"] == again["previous_version_id"]
    assert again["fingerprint"] == first["fingerprint"] and again["counts"] == first["counts"]
    write_bin(str(corpus / "c" / "b.bin"), DOCS[:3], sep=0)
    second = run_json(["refresh", root, str(corpus / "c"), *LOCAL])
    assert second["status"] == "built" and second["previous_version_id"] == first["version_id"]
    assert second["counts"]["tokens"] > first["counts"]["tokens"]
    assert second["fingerprint"] != first["fingerprint"]


def test_refresh_line_names_the_first_version_without_python_none(corpus):
    res = CliRunner().invoke(
        cli, ["refresh", str(corpus / "r"), str(corpus / "c"), *FLAT, "--engine", "local"]
    )
    assert res.exit_code == 0 and "(the first version)" in res.stdout
    assert "None" not in res.stdout


def test_bad_input_and_usage_errors_are_failed_results(corpus):
    bad = run_json(["build", str(corpus / "t"), str(corpus / "missing"), *FLAT], code=2)
    assert bad["status"] == "failed" and bad["error"]["class"] == "InputError"
    assert "missing" in bad["error"]["message"] and bad["output"] == str(corpus / "t")
    assert not os.path.exists(corpus / "t")
    usage = subprocess.run(
        [sys.executable, "-m", "fgram", "build", "--json"], capture_output=True, text=True
    )
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
    out = json.loads(usage.stdout)
    jsonschema.validate(out, SCHEMA)
    assert out["status"] == "failed" and "TABLE" in out["error"]["message"]
    (corpus / "c" / "a.bin").write_bytes(b"\x01")  # an odd byte count for uint16
    odd = run_json(["build", str(corpus / "t"), str(corpus / "c"), *FLAT, "--engine", "local"], 2)
    assert odd["error"]["class"] == "InputError" and "a.bin" in odd["error"]["message"]


def test_a_killed_task_is_a_failed_result_on_stdout_alone(corpus):
    """A Spark task whose Python worker is killed (SIGKILL, as the OOM killer does): exit
    status 1, the result on stdout as the only line there, the one error line on stderr."""
    t = str(corpus / "t")
    run_json(["build", t, str(corpus / "c"), *LOCAL])
    run_json(["index", t])
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "fgram",
            "embed",
            t,
            "--model",
            "slow_models:killer",
            "--json",
            "--engine",
            "spark",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr
    (line,) = res.stdout.splitlines()
    out = json.loads(line)
    jsonschema.validate(out, SCHEMA)
    assert out["status"] == "failed" and out["exit_code"] == 1 and out["command"] == "embed"
    assert out["error"]["class"] == "WorkerDied" and "exited unexpectedly" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("fgram: error: ")
    assert out["error"]["message"] in res.stderr


def test_dry_runs_plan_from_metadata_and_write_nothing(corpus):
    t, root = str(corpus / "t"), str(corpus / "r")
    plan = run_json(["build", t, str(corpus / "c"), *LOCAL, "--dry-run"])
    assert plan["status"] == "planned" and not os.path.exists(t)
    assert plan["counts"]["tokens"] == sum(map(len, DOCS)) + len(DOCS) - 1  # the separators
    assert plan["counts"]["files"] == 1 and plan["details"]["passes"] == 4
    tokens = plan["counts"]["tokens"]  # what --work-budget is held to before a run
    assert plan["details"]["work_bytes_estimate"] == math.ceil(tokens * WORK_BYTES_PER_TOKEN)
    first = run_json(["refresh", root, str(corpus / "c"), *LOCAL, "--dry-run"])
    assert first["details"]["would"] == "build the first version" and not os.path.exists(root)
    run_json(["refresh", root, str(corpus / "c"), *LOCAL])
    same = run_json(["refresh", root, str(corpus / "c"), "--engine", "local", "--dry-run"])
    assert same["details"]["would"] == "nothing (unchanged)"  # its options remembered
    write_bin(str(corpus / "c" / "b.bin"), DOCS[:3], sep=0)
    grown = run_json(["refresh", root, str(corpus / "c"), "--engine", "local", "--dry-run"])
    d = grown["details"]
    assert d["would"] == "build a new version" and d["store"] == "reused"
    assert d["new"] == [str(corpus / "c" / "b.bin")] and d["kept"] == [str(corpus / "c" / "a.bin")]
    assert d["units_to_count"] == 1 and d["removed"] == 0
    versions = os.listdir(os.path.join(root, "versions"))
    other = run_json(["refresh", root, str(corpus / "c"), *LOCAL[:-1], "3", "--dry-run"], code=2)
    assert other["error"]["class"] == "ConfigError" and "--rebuild" in other["error"]["message"]
    assert os.listdir(os.path.join(root, "versions")) == versions


@pytest.mark.parametrize(
    "command",
    ["build", "refresh", "tokenize", "annotate", "coverage", "index", "embed", "report", "clean"],
)
def test_every_job_command_ends_in_a_result(corpus, command):
    """Each command, given what does not exist, ends in one failed result on stdout;
    tokenize and clean also succeed into one."""
    missing = str(corpus / "missing")
    tok = str(corpus / "tok.json")
    args = {
        "build": ["build", str(corpus / "t"), missing, *FLAT],
        "refresh": ["refresh", str(corpus / "r"), missing, *FLAT],
        "tokenize": ["tokenize", missing, "-o", str(corpus / "o"), "--tokenizer", tok],
        "annotate": ["annotate", missing, str(corpus / "c"), *FLAT, "-o", str(corpus / "g")],
        "coverage": ["coverage", missing, str(corpus / "c"), *FLAT],
        "index": ["index", missing],
        "embed": ["embed", missing, "--model", "fgram.pipeline.models:hashed"],
        "report": ["report", missing, "-o", str(corpus / "r.html")],
        "clean": ["clean", missing],
    }[command]
    if command == "tokenize":
        from tokenizers import Tokenizer, models, pre_tokenizers

        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer.save(tok)
    out = run_json(args, code=2)
    assert out["status"] == "failed" and out["command"] == command
    assert "missing" in out["error"]["message"]
    if command == "tokenize":
        (corpus / "text.jsonl").write_text('{"text": "a b a b"}\n{"text": "b a"}\n')
        made = run_json(["tokenize", str(corpus / "text.jsonl"), "-o", str(corpus / "o"),
                         "--tokenizer", tok, "--engine", "local"])  # fmt: skip
        assert made["status"] == "built" and made["counts"]["tokens"] == 6
        assert made["counts"]["documents"] == 2 and made["output"] == str(corpus / "o")
