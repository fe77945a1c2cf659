"""The `fgram` command through click's CliRunner, error cases included."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import result, said, write_parquet
from oracle import select

from fgram.cli import cli

ECHO_ = "fgram.pipeline.models:echo"

pytestmark = pytest.mark.spark


@pytest.fixture()
def runner(spark):  # the session fixture makes build reuse the live SparkSession
    return CliRunner()


def _err(res):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in said(res.output) if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fgram: error:"), res.output
    return lines[0]


def test_synth_build_show(runner, tmp_path):
    corpus, out = tmp_path / "c", tmp_path / "o"
    res = runner.invoke(
        cli, ["synth", "-o", str(corpus), "--tokens", "20000", "--vocab", "300", "--format", "bin"]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        cli,
        [
            "build",
            str(out),
            str(corpus),
            "--dtype",
            "uint16",
            "--doc-sep",
            "0",
            "-S",
            "50",
            "-K",
            "4",
            "--engine",
            "local",  # the command's path, not Spark's (a JVM of this file may be up)
        ],
    )
    assert res.exit_code == 0, res.output
    flat = np.fromfile(corpus / "part-00000.bin", dtype=np.uint16).tolist()
    from oracle import split_flat

    assert result(out) == select(split_flat(flat, 0), 4, 5, 50)
    res = runner.invoke(cli, ["show", str(out), "--top", "3"])
    assert res.exit_code == 0 and "cutoff count" in res.output and "top 3" in res.output
    # the same corpus as text, built in one command, shown as words
    text = tmp_path / "t"
    res = runner.invoke(
        cli, ["synth", "-o", str(text), "--tokens", "20000", "--vocab", "300", "--format", "text"]
    )
    assert res.exit_code == 0 and "--tokenizer" in res.output, res.output
    tok = str(text / "tokenizer.json")
    local = ["--engine", "local"]
    res = runner.invoke(cli, ["build", str(tmp_path / "o2"), str(text), "--tokenizer", tok, *local])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["build", str(tmp_path / "o3"), str(text), "-S", "50", "-K", "4"])
    assert "it holds text: build with --tokenizer" in _err(res)  # no --tokenizer
    res = runner.invoke(
        cli,
        [
            "build",
            str(tmp_path / "o3"),
            str(text),
            "-S",
            "50",
            "-K",
            "4",
            "--tokenizer",
            tok,
            *local,
        ],
    )
    assert res.exit_code == 0 and result(tmp_path / "o3") == result(out), res.output
    res = runner.invoke(cli, ["show", str(tmp_path / "o3"), "--top", "3"])
    top = res.output.split("top 3:")[1]
    assert res.exit_code == 0 and top.count("'") >= 6 and "ba" not in top.split("'")[0], top


def test_synth_is_heavy_tailed(tmp_path):
    from fgram.pipeline.formats.synth import generate

    generate(str(tmp_path), 200_000, vocab=5000, fmt="bin")
    flat = np.fromfile(tmp_path / "part-00000.bin", dtype=np.uint16)
    ok = (flat[:-4] != 0) & (flat[1:-3] != 0) & (flat[2:-2] != 0) & (flat[3:-1] != 0)
    keys = (
        flat[:-4].astype(np.uint64) << 48
        | flat[1:-3].astype(np.uint64) << 32
        | flat[2:-2].astype(np.uint64) << 16
        | flat[3:-1].astype(np.uint64)
    )[ok]
    _, counts = np.unique(keys, return_counts=True)
    # frequent 4-token phrases exist, and most 4-grams are rare: a long tail
    assert counts.max() > 200 and np.median(counts) <= 2


def test_synth_book_seed_draws_new_text_from_the_same_phrases(tmp_path):
    from fgram.pipeline.formats.synth import generate

    def top_4grams(seed, book_seed):
        d = tmp_path / f"{seed}-{book_seed}"
        generate(str(d), 100_000, vocab=5000, seed=seed, book_seed=book_seed, fmt="bin")
        f = np.fromfile(d / "part-00000.bin", dtype=np.uint16).astype(np.uint64)
        keys = f[:-3] << 48 | f[1:-2] << 32 | f[2:-1] << 16 | f[3:]
        keys, counts = np.unique(keys, return_counts=True)
        return set(keys[np.argsort(-counts)[:200]].tolist()), f

    base, text = top_4grams(0, None)
    same, same_text = top_4grams(5, 0)
    other, _ = top_4grams(5, None)
    assert not np.array_equal(text, same_text)
    assert len(base & same) > 100 > len(base & other)


def test_existing_output_refused_then_overwrite(runner, tmp_path):
    write_parquet(str(tmp_path / "a.parquet"), [[1, 2, 1, 2, 1, 2]] * 3)
    out = tmp_path / "o"
    assert runner.invoke(cli, ["build", str(out), str(tmp_path / "a.parquet")]).exit_code == 0
    first = json.loads((out / "manifest.json").read_text())
    line = _err(runner.invoke(cli, ["build", str(out), str(tmp_path / "a.parquet")]))
    assert "exists" in line and "--overwrite" in line
    res = runner.invoke(
        cli, ["build", str(out), str(tmp_path / "a.parquet"), "--overwrite", "--min-count", "2"]
    )
    assert res.exit_code == 0, res.output
    again = json.loads((out / "manifest.json").read_text())
    assert (first["config"]["min_count"], again["config"]["min_count"]) == (5, 2)


def test_overwrite_never_replaces_what_fgram_did_not_write(runner, tmp_path):
    """--overwrite replaces an fgram output or an empty folder, never a corpus (say, given
    in the table's place); a TABLE that is an input says the table comes first."""
    from fgram.pipeline.errors import OutputError
    from fgram.pipeline.io.publish import check_output

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_parquet(str(corpus / "a.parquet"), [[1, 2, 1, 2, 1, 2]] * 3)
    for args in ([str(corpus), str(tmp_path / "o")], [str(corpus / "a.parquet"), str(corpus)]):
        line = _err(runner.invoke(cli, ["build", *args, "--overwrite"]))
        assert "is not an fgram table; the table comes first" in line, line
    assert os.listdir(corpus) == ["a.parquet"] and not (tmp_path / "o").exists()
    with pytest.raises(OutputError, match="is not an fgram output"):
        check_output(str(corpus), overwrite=True)  # every writer's check (annotate -o)
    (tmp_path / "empty").mkdir()
    assert check_output(str(tmp_path / "empty"), overwrite=True).path == str(tmp_path / "empty")


def test_the_table_comes_first(runner, tmp_path):
    write_parquet(str(tmp_path / "a.parquet"), [[1, 2, 1, 2, 1, 2]] * 3)
    res = runner.invoke(
        cli, ["build", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "o"), "--min-count", "2"]
    )
    assert res.exit_code == 2 and "No such option '-o'" in res.output  # the old order, gone
    assert not (tmp_path / "o").exists()
    line = _err(runner.invoke(cli, ["build", str(tmp_path / "o2")]))
    assert "give the table, then the inputs" in line


def _no_leftovers(tmp_path):
    return [p for p in os.listdir(tmp_path) if "fgram-staging" in p or p == "o"] == []


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "unknown_ext",
        "bad_bin_size",
        "corrupt_parquet",
        "float_column",
        "negative",
        "no_column",
        "empty",
        "big_token",
        "big_token_sep",
        "negative_flat_sep",
    ],
)
def test_bad_input_one_line_and_nothing_left(runner, tmp_path, case):
    p = tmp_path / "in"
    p.mkdir()
    args, expect = [], ""
    if case == "missing":
        args, expect = [str(p / "nope.parquet")], "no such file"
    elif case == "unknown_ext":
        (p / "x.txt").write_text("hello")
        args, expect = [str(p / "x.txt")], "unknown format"
    elif case == "bad_bin_size":
        (p / "x.bin").write_bytes(b"\x01\x00\x02")
        args, expect = [str(p / "x.bin")], "not a multiple"
    elif case == "corrupt_parquet":
        (p / "x.parquet").write_bytes(b"PAR1 this is not parquet")
        args, expect = [str(p / "x.parquet")], "not a readable Parquet"
    elif case == "float_column":
        pq.write_table(
            pa.table({"tokens": pa.array([[1.0, 2.0]], pa.list_(pa.float32()))}), p / "x.parquet"
        )
        args, expect = [str(p / "x.parquet")], "expected a list of integers"
    elif case == "negative":
        write_parquet(str(p / "x.parquet"), [[1, -3, 2]])
        args, expect = [str(p / "x.parquet")], "negative token id"
    elif case == "no_column":
        write_parquet(str(p / "x.parquet"), [[1, 2]], column="ids")
        args, expect = [str(p / "x.parquet")], "no column 'tokens'"
    elif case == "empty":
        write_parquet(str(p / "x.parquet"), [])
        args, expect = [str(p / "x.parquet")], "no tokens"
    elif case == "big_token":
        np.array([1, 2**31, 3], dtype=np.uint32).tofile(p / "x.bin")
        args, expect = [str(p / "x.bin"), "--dtype", "uint32"], "exceeds"
    elif case == "big_token_sep":  # the separator path checks only non-separator values
        np.array([1, 0, 2**31, 0, 3], dtype=np.uint32).tofile(p / "x.bin")
        args, expect = (
            [str(p / "x.bin"), "--dtype", "uint32", "--doc-sep", "0"],
            "token id 2147483648",
        )
    elif case == "negative_flat_sep":
        np.array([1, 0, 4, -7, 3], dtype=np.int32).tofile(p / "x.bin")
        args, expect = (
            [str(p / "x.bin"), "--dtype", "int32", "--doc-sep", "0"],
            "negative token id -7",
        )
    line = _err(runner.invoke(cli, ["build", str(tmp_path / "o"), *args]))
    assert expect in line, line
    assert _no_leftovers(tmp_path)


@pytest.mark.parametrize(
    "opts,expect",
    [
        (["-K", "1"], "--max-len"),
        (["-K", "9"], "--max-len"),
        (["-S", "0"], "--size"),
        (["--min-count", "0"], "--min-count"),
        (["--broadcast-budget", "lots"], "not a size"),
    ],
)
def test_bad_options(runner, tmp_path, opts, expect):
    write_parquet(str(tmp_path / "a.parquet"), [[1, 2]])
    line = _err(
        runner.invoke(cli, ["build", str(tmp_path / "o"), str(tmp_path / "a.parquet"), *opts])
    )
    assert expect in line
    assert _no_leftovers(tmp_path)


def test_help_lists_every_subcommand(runner):
    res = runner.invoke(cli, ["--help"])
    for name in (
        "build",
        "synth",
        "show",
        "index",
        "annotate",
        "coverage",
        "embed",
        "lookup",
        "refresh",
        "diff",
        "report",
    ):
        assert name in res.output
        sub = runner.invoke(cli, [name, "--help"])
        assert sub.exit_code == 0 and "Usage:" in sub.output, name
    res = runner.invoke(cli, ["build", "--help"])
    assert "--broadcast-budget" in res.output and "--doc-sep" in res.output
    assert "--resume" in res.output
    res = runner.invoke(cli, ["refresh", "--help"])
    assert "--keep" in res.output and "--size" in res.output


def test_show_with_tokenizer_prints_text(runner, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    write_parquet(str(tmp_path / "a.parquet"), [[1, 2, 3]] * 5)
    out = tmp_path / "o"
    assert runner.invoke(cli, ["build", str(out), str(tmp_path / "a.parquet")]).exit_code == 0
    res = runner.invoke(cli, ["show", str(out), "--tokenizer", str(tmp_path / "tokenizer.json")])
    assert res.exit_code == 0, res.output
    assert "'the cat sat'" in res.output and "'the cat'" in res.output
    folder = runner.invoke(cli, ["show", str(out), "--tokenizer", str(tmp_path)])  # its folder
    assert folder.exit_code == 0 and folder.output == res.output
    assert runner.invoke(cli, ["index", str(out)]).exit_code == 0
    look = ["lookup", str(out), "--tokenizer", str(tmp_path), "--tokens"]
    assert runner.invoke(cli, [*look, "1,2,3"]).exit_code == 0
    res = runner.invoke(cli, [*look, "1,2,9"])  # 4 words in its vocabulary
    assert (
        res.exit_code == 2 and "9 is not a token id of the table's vocabulary (0..3)" in res.output
    )


def _listening(pids: set[int]) -> set[str]:
    """Local addresses of the TCP sockets that processes `pids` listen on (from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    found.add(cols[1].split(":")[0])
    return found


def _tree(pid: int) -> set[int]:
    pids, todo = set(), [pid]
    while todo:
        p = todo.pop()
        pids.add(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pids


LOOPBACK = {
    "0100007F",
    "00000000000000000000000001000000",  # 127.0.0.1, ::1
    "0000000000000000FFFF00000100007F",
}  # ::ffff:127.0.0.1


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc")
def test_local_mode_listens_on_loopback_only(tmp_path):
    """A build on Spark in local mode (driver, JVM, Python workers) opens no socket beyond
    127.0.0.1."""
    import subprocess
    import sys
    import time

    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    subprocess.run(
        [fgram, "synth", "-o", str(tmp_path / "syn"), "--tokens", "200000", "--format", "bin"],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP",)}
    seen = set()
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(
            [
                fgram,
                "build",
                str(tmp_path / "o"),
                str(tmp_path / "syn"),
                "--dtype",
                "uint16",
                "--doc-sep",
                "0",
                "--unit-tokens",
                "20000",
                "--engine",
                "spark",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        while proc.poll() is None:
            seen |= _listening(_tree(proc.pid))
            time.sleep(0.05)
    assert proc.returncode == 0
    # quiet: no JVM start-up lines, nothing logged (e.g. by the warm-up job cancelled at the
    # end of the run)
    err = (tmp_path / "stderr.txt").read_text()
    assert said(err) == [] and err.startswith("fgram: [pass 2/5: count] "), err  # stages only
    assert seen, "no listening socket seen: the check itself is broken"
    assert seen <= LOOPBACK, f"listening beyond loopback: {seen - LOOPBACK}"
    # --log-level reaches the JVM's log4j
    res = subprocess.run(
        [
            fgram,
            "--log-level",
            "info",
            "build",
            str(tmp_path / "o2"),
            str(tmp_path / "syn"),
            "--dtype",
            "uint16",
            "--doc-sep",
            "0",
            "--engine",
            "spark",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and " INFO Executor: " in res.stderr, res.stderr[-2000:]


@pytest.mark.slow
def test_a_build_run_from_the_folder_above_a_checkout_named_fgram(tmp_path):
    """The workers import the installed fgram, not the working directory's folder `fgram`
    (a checkout, seen from its parent: for an editable install it would become an empty
    namespace package in every worker). A fresh cache; enough units that the workers, not
    only the driver's head start, count."""
    import subprocess
    import sys

    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    (tmp_path / "fgram" / "fgram").mkdir(parents=True)
    (tmp_path / "fgram" / "fgram" / "__init__.py").write_text("raise ImportError('wrong fgram')\n")
    subprocess.run(
        [fgram, "synth", "-o", "syn", "--tokens", "12000000", "--format", "bin"],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    env = {**os.environ, "FGRAM_CACHE_DIR": str(tmp_path / "cache")}
    for _ in ("a fresh cache", "the JVM's class archive made: workers up sooner"):
        res = subprocess.run(
            [
                fgram,
                "build",
                "out",
                "syn",
                "--dtype",
                "uint16",
                "--doc-sep",
                "0",
                "--unit-tokens",
                "1000000",
                "--overwrite",
                "--engine",
                "spark",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        assert res.returncode == 0 and said(res.stderr) == [], res.stderr[-3000:]
    manifest = json.load(open(tmp_path / "out" / "manifest.json"))
    # the executor was up well before the end: the later passes' tasks ran in its workers
    assert manifest["executor_start_seconds"]["made"] < manifest["seconds"] - 2


def test_clean_lists_then_removes_leftovers_and_the_cache_never_an_output(tmp_path, monkeypatch):
    import json as js
    import socket

    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "remote").mkdir(parents=True)
    (tmp_path / "cache" / "remote" / "abc.npy").write_bytes(b"x" * 1000)
    (tmp_path / "cache" / "spark-classes-0123.jsa").write_bytes(b"y" * 10)
    runs = tmp_path / "runs"
    (runs / "out").mkdir(parents=True)  # an output: kept
    (runs / "out" / "_SUCCESS").write_text("")
    (runs / ".dead.fgram-staging" / "_work").mkdir(parents=True)  # a killed run's work
    (runs / ".dead.fgram-lock").write_text(
        js.dumps({"host": socket.gethostname(), "pid": 2**22 + 7})
    )
    (runs / ".live.fgram-staging").mkdir()  # a live run's: kept
    (runs / ".live.fgram-lock").write_text(
        js.dumps({"host": socket.gethostname(), "pid": os.getpid()})
    )
    res = CliRunner().invoke(cli, ["clean", str(runs)])
    assert res.exit_code == 0, res.output
    listed = res.output
    for gone in (".dead.fgram-staging", ".dead.fgram-lock", "remote", "spark-classes-0123.jsa"):
        assert gone in listed
    assert ".live.fgram" not in listed and "/out" not in listed and "4 entries" in listed
    assert (runs / ".dead.fgram-staging").exists()  # listing removes nothing
    res = CliRunner().invoke(cli, ["clean", str(runs), "--remove"])
    assert res.exit_code == 0 and "removed 4 entries" in res.output
    assert sorted(os.listdir(runs)) == [".live.fgram-lock", ".live.fgram-staging", "out"]
    assert os.listdir(tmp_path / "cache") == []
    assert "nothing to clean" in CliRunner().invoke(cli, ["clean", "--no-cache"]).output


def test_every_command_has_help_for_each_option_an_example_and_a_short_summary():
    import click

    for name, cmd in cli.commands.items():
        bare = [
            p.opts[0]
            for p in cmd.params
            if isinstance(p, click.Option) and not p.hidden and not p.help
        ]
        assert bare == [], (name, bare)
        assert "\b\n    fgram " in cmd.help, name  # an example, kept as written
        assert cmd.short_help and len(cmd.short_help) <= 55, name
        args = [p.human_readable_name for p in cmd.params if isinstance(p, click.Argument)]
        if name in (
            "build", "show", "index", "annotate", "coverage", "embed", "lookup", "refresh",
            "report",
        ):  # fmt: skip
            assert args[0] == "TABLE", (name, args)  # the table: one name, first
            assert "TABLE" in cmd.help and not any(
                word in cmd.help.replace("OUTPUTS", "") for word in ("OUTPUT", " OUT/", " OUT ")
            ), name


def test_the_top_level_help_s_example_runs_without_a_warning_and_its_lookup_matches(tmp_path):
    """`fgram --help`'s example, as written but on a smaller corpus (the phrase book is
    the same): no warning, and the ids of its lookup are an f-gram of that table."""
    import shlex
    import subprocess
    import sys

    text = cli.help
    steps = [
        shlex.split(line.split("#")[0])
        for line in text.split("\b\n", 1)[1].splitlines()
        if line.strip().startswith("fgram ")
    ]
    assert [s[1] for s in steps] == ["synth", "build", "show", "index", "lookup"], steps
    steps[0][steps[0].index("--tokens") + 1] = "300000"
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    for step in steps:
        res = subprocess.run([fgram, *step[1:]], cwd=tmp_path, capture_output=True, text=True)
        assert res.returncode == 0 and "warning" not in res.stderr, (step, res.stderr)
    rows = [line.split() for line in res.stdout.splitlines() if line.split()[0].isdigit()]
    last = rows[-1]  # pos token fgram_id len match
    ids = steps[-1][steps[-1].index("--tokens") + 1].split(",")
    assert int(last[3]) == len(ids) and int(last[2]) >= 0, res.stdout
    lookup_help = cli.commands["lookup"].help
    assert f"--tokens {','.join(ids)}" in lookup_help  # the command's own example, the same


def test_a_table_short_of_its_size_says_why(runner, tmp_path):
    write_parquet(str(tmp_path / "a.parquet"), [[1, 2, 1, 2, 1, 2, 3]] * 3)
    args = ["build", str(tmp_path / "t"), str(tmp_path / "a.parquet"), "--min-count", "2"]
    res = runner.invoke(cli, [*args, "-S", "10M", "--engine", "local"])
    n = len(result(tmp_path / "t"))
    assert res.exit_code == 0 and 0 < n < 10**7, res.output
    assert f"{n} f-grams (all n-grams with count >= 2: fewer than -S 10M) from" in res.output
    res = runner.invoke(cli, [*args, "-S", str(n), "--engine", "local", "--overwrite"])
    assert res.exit_code == 0 and "fewer than" not in res.output, res.output


def test_show_of_another_output_or_of_nothing_says_which(runner, tmp_path):
    """show (and every reader of a table) given token shards, tags or no such path: one
    line naming what is there, not a KeyError or "not a finished table"."""
    import fgram

    fgram.synth(tmp_path / "text", tokens=5000, vocab=200, format="text")
    tok = str(tmp_path / "text" / "tokenizer.json")
    fgram.tokenize([tmp_path / "text"], tmp_path / "shards", tok, format="bin", engine="local")
    fgram.build(tmp_path / "t", [tmp_path / "shards"], min_count=2, engine="local")
    fgram.index(tmp_path / "t")
    fgram.annotate(tmp_path / "t", [tmp_path / "shards"], tmp_path / "tags", engine="local")
    for path, said_ in (
        ("shards", "token shards (an `fgram tokenize` output), not an f-gram table"),
        ("tags", "tags (an `fgram annotate` output), not an f-gram table"),
        ("nothing", "no such file or folder"),
    ):
        for command in (["show"], ["lookup", "--tokens", "1,2"], ["embed", "--model", ECHO_]):
            res = runner.invoke(cli, [command[0], str(tmp_path / path), *command[1:]])
            assert res.exit_code == 2, (command, path, res.output)
            assert _err(res).startswith(f"fgram: error: {tmp_path / path}: {said_}"), res.output


def test_index_and_embed_replace_only_with_overwrite(tmp_path):
    from helpers import build

    write_parquet(str(tmp_path / "a.parquet"), [[1, 2, 3, 1, 2, 3]] * 3)
    build(None, [tmp_path / "a.parquet"], tmp_path / "t", min_count=2, engine="local")
    runner = CliRunner()
    assert runner.invoke(cli, ["index", str(tmp_path / "t")]).exit_code == 0
    assert "exists; pass --overwrite" in _err(runner.invoke(cli, ["index", str(tmp_path / "t")]))
    assert runner.invoke(cli, ["index", str(tmp_path / "t"), "--overwrite"]).exit_code == 0
    embed = [
        "embed",
        str(tmp_path / "t"),
        "--model",
        "fgram.pipeline.models:echo",
        "--engine",
        "local",
    ]
    assert runner.invoke(cli, embed).exit_code == 0
    assert "exists; pass --overwrite" in _err(runner.invoke(cli, embed))
    assert runner.invoke(cli, [*embed, "--overwrite"]).exit_code == 0


def test_synth_refuses_an_existing_corpus_without_overwrite(tmp_path):
    runner = CliRunner()
    args = ["synth", "-o", str(tmp_path / "c"), "--tokens", "5000", "--format", "bin"]
    assert runner.invoke(cli, [*args, "--files", "3"]).exit_code == 0
    assert "exists; pass --overwrite" in _err(runner.invoke(cli, args))
    assert runner.invoke(cli, [*args, "--files", "1", "--overwrite"]).exit_code == 0
    assert len(os.listdir(tmp_path / "c")) == 2  # one shard and its meta: no old shard left


_RACE = """
import os, signal, sys
import click
from fgram.cli import cli, main
from fgram.pipeline.errors import FgramError

@cli.command("race")
def race():
    # a worker of the process group hit by the same Ctrl-C fails its task, and that
    # failure reaches the driver before the driver's own KeyboardInterrupt does
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        exc = {cls}("worker: expected str, bytes or os.PathLike object")
        exc.fgram_kept = "the completed passes are kept in X"
        raise exc from None

sys.argv = ["fgram", "race"]
main()
"""


@pytest.mark.parametrize("cls", ["FgramError", "RuntimeError"])
def test_ctrl_c_whose_task_failure_comes_back_first_is_still_interrupted(cls):
    """Ctrl-C reaches every process of the group: whichever ending comes back first, the
    run ends as interrupted (exit 130, what is kept), never as the worker's error."""
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", _RACE.format(cls=cls)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 130, res.stderr
    assert said(res.stderr) == ["fgram: interrupted; the completed passes are kept in X"]


def test_a_name_with_a_line_break_is_still_one_line(runner, tmp_path):
    """A file whose name holds a newline: the error line writes it escaped (one line on
    stderr, as every error is), and the file is still named."""
    folder = tmp_path / "a\nb"
    folder.mkdir()
    (folder / "x.bin").write_bytes(b"\x01")  # an odd byte count for uint16
    res = runner.invoke(cli, ["build", str(tmp_path / "t"), str(folder / "x.bin")])
    line = _err(res)
    assert "a\\nb" in line and "x.bin" in line, line


def test_annotate_of_text_says_to_tokenize_it_first(runner, tmp_path):
    import fgram

    fgram.synth(tmp_path / "text", tokens=2000, vocab=100, format="text")
    fgram.synth(tmp_path / "bin", tokens=2000, vocab=100, format="bin")
    fgram.build(tmp_path / "t", [tmp_path / "bin"], doc_sep=0, min_count=2, engine="local")
    fgram.index(tmp_path / "t")
    res = runner.invoke(cli, ["annotate", str(tmp_path / "t"), str(tmp_path / "text"), "-o", "x"])
    line = _err(res)
    assert "tokenize it first" in line and "build with" not in line, line


def test_help_and_show_import_nothing_heavy(tmp_path):
    """`fgram --help` (and a command's) and `fgram show` answer without importing numba,
    Spark, pyarrow's datasets (pandas), matplotlib or torch: the command table and its
    options are light, and show reads the table's first rows with Parquet's reader."""
    import fgram

    fgram.synth(tmp_path / "c", tokens=5000, vocab=100, format="bin")
    fgram.build(tmp_path / "t", [tmp_path / "c"], doc_sep=0, min_count=2, engine="local")
    show = ["fgram", "show", str(tmp_path / "t"), "--top", "3"]
    code = (
        "import sys\n"
        "from fgram.cli import main\n"
        f"for argv in (['fgram', '--help'], ['fgram', 'build', '--help'], {show!r}):\n"
        "    sys.argv = argv\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('numba', 'pyspark', 'pyarrow.dataset', 'pandas', 'matplotlib', 'torch')\n"
        "print(','.join(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr
    assert "top 3:" in res.stdout  # show listed the table's rows


def test_help_imports_not_even_numpy():
    """`fgram --help` is click and the option tables alone (numpy is ~0.1 s of a start);
    the tokenizer backends the options name are the backends module's own."""
    from fgram.pipeline.config.options import TOKENIZER_BACKENDS
    from fgram.pipeline.text.backends import CHOICES

    assert TOKENIZER_BACKENDS == CHOICES
    code = (
        "import sys\nfrom fgram.cli import main\nsys.argv = ['fgram', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(','.join(m for m in ('numpy', 'numba', 'pyarrow') if m in sys.modules), "
        "file=sys.stderr)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr
    assert "Commands:" in res.stdout
