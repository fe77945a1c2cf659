"""`--config FILE` (TOML, YAML) gives any command's options, the command line winning;
an unknown key is one line naming the file and the key; `--log-file` keeps every
stderr line of a run."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from helpers import SMALL_DOCS as DOCS
from helpers import manifest, result
from oracle import select

from fgram.cli import cli

TOML = """
engine = "local"
dtype = "uint16"
doc-sep = 0

[refresh]
size = 6
min_count = 3
conf = { "spark.fgram.test" = "1" }
"""

YAML = """
engine: local
dtype: uint16
doc_sep: 0
refresh:
  size: 6
  min-count: 3
  conf:
    spark.fgram.test: "1"
"""


@pytest.mark.parametrize("kind", ["toml", "yaml"])
def test_a_config_file_gives_the_options_and_the_command_line_wins(corpus, kind):
    config = corpus / f"fgram.{kind}"
    config.write_text(TOML if kind == "toml" else YAML)
    root = str(corpus / "r")
    res = CliRunner().invoke(cli, ["--config", str(config), "refresh", root, str(corpus / "c")])
    assert res.exit_code == 0, res.output
    m = manifest(os.path.join(root, "current"))
    assert (m["config"]["size"], m["config"]["min_count"], m["config"]["engine"]) == (6, 3, "local")
    assert m["config"]["conf"] == {"spark.fgram.test": "1"}
    assert result(os.path.join(root, "current")) == select(DOCS, 5, 3, 6)
    t = str(corpus / "t")  # build: the top-level keys only; the command line's -S wins
    res = CliRunner().invoke(
        cli, ["build", t, str(corpus / "c"), "-S", "4", "--config", str(config)]
    )
    assert res.exit_code == 0, res.output
    assert result(t) == select(DOCS, 5, 5, 4) and manifest(t)["config"]["engine"] == "local"


@pytest.mark.parametrize(
    "text, said",
    [
        ("bogus = 1\n", "'bogus': no command has such an option"),
        ("[build]\nkeep = 1\n", "[build] 'keep': `fgram build` has no such option"),
        ("size = [\n", "not valid TOML"),
    ],
)
def test_an_unknown_key_is_one_line_naming_the_file(corpus, text, said):
    config = corpus / "bad.toml"
    config.write_text(text)
    res = CliRunner().invoke(cli, ["--config", str(config), "build", str(corpus / "t"), "x"])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"fgram: error: {config}: ") and said in line
    assert not os.path.exists(corpus / "t")


def test_a_log_file_keeps_the_stderr_of_each_run(corpus):
    log = corpus / "logs" / "fgram.log"
    run = [sys.executable, "-m", "fgram", "--log-file", str(log)]
    flat = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local"]
    ok = subprocess.run([*run, "build", str(corpus / "t"), str(corpus / "c"), *flat],
                        capture_output=True, text=True)  # fmt: skip
    bad = subprocess.run([*run, "build", str(corpus / "u"), str(corpus / "nope"), *flat, "--json"],
                         capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0 and bad.returncode == 2
    kept = log.read_text()
    for line in ok.stderr.splitlines() + bad.stderr.splitlines():
        assert line in kept
    assert kept.count("fgram: run started ") == 2 and "[select] done" in kept
    assert f"fgram: error: {corpus / 'nope'}: no such file or directory" in kept
    assert json.loads(bad.stdout)["status"] == "failed"  # stdout stays the result's
    spark = subprocess.run(
        [*run, "--log-level", "info", "build", str(corpus / "s"), str(corpus / "c"),
         *flat[:-1], "spark"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert spark.returncode == 0, spark.stderr
    jvm = [line for line in spark.stderr.splitlines() if " INFO " in line]
    assert jvm and all(line in log.read_text() for line in jvm)  # the JVM's lines too
