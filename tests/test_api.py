"""The public API at the top of the package: `import fgram` and call the jobs."""

import subprocess
import sys

import numpy as np
from helpers import result, write_bin
from oracle import select, split_flat

import fgram


def test_import_fgram_stays_light():
    """Spark's worker daemon imports fgram before it forks: nothing heavy may load."""
    code = (
        "import sys, fgram; heavy = {'numpy', 'pyarrow', 'pyspark', 'numba'} & "
        "set(m.split('.')[0] for m in sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert {"build", "FgramIndex", "training_sequences"} <= set(dir(fgram))
    assert all(getattr(fgram, name) is not None for name in fgram.__all__)  # each resolves


def test_build_index_annotate_and_read_back_through_the_api(tmp_path):
    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2], [5, 1, 2, 3]] * 3
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    opts = dict(doc_sep=0, engine="local")
    m = fgram.build(tmp_path / "t", [tmp_path / "a.bin"], min_count=2, max_len=4, **opts)
    flat = np.fromfile(tmp_path / "a.bin", dtype=np.uint16).tolist()
    assert result(tmp_path / "t") == select(split_flat(flat, 0), 4, 2, None)
    assert m["fgrams"] == len(result(tmp_path / "t"))
    assert fgram.index(tmp_path / "t")["fgrams"] == m["fgrams"]
    ids, lengths = fgram.FgramIndex.open(str(tmp_path / "t")).match([1, 2, 3])
    assert list(lengths) == [1, 2, 3] and ids[2] >= 0
    cov = fgram.coverage(tmp_path / "t", str(tmp_path / "a.bin"), **opts)
    tags = fgram.annotate(tmp_path / "t", [tmp_path / "a.bin"], tmp_path / "tags", **opts)
    assert tags["coverage"] == cov and cov["positions"] == sum(map(len, docs))  # no separator
    windows = list(fgram.training_sequences(str(tmp_path / "tags"), seq_len=8))
    assert windows and all(len(w[0]) == 8 for w in windows)
    loc, manifest = fgram.open_table(str(tmp_path / "t"))
    assert fgram.table_dataset(loc, manifest).count_rows() == m["fgrams"]


_WITHOUT_EXTRAS = """
import sys
# the optional extras' modules (s3, lineage, dagster, text, YAML configs) as absent
for name in ("attr", "attrs", "openlineage", "dagster_pipes", "botocore", "yaml", "orjson"):
    sys.modules[name] = None
sys.argv = ["fgram", *sys.argv[1:]]
from fgram.cli import main
main()
"""


def test_the_commands_run_without_the_optional_extras(tmp_path):
    """A plain install (no lineage, dagster, s3 extras): every job command's wrapper, its
    --json result and a refresh run without importing them."""
    write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2]] * 3, sep=0)
    flat = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local", "--min-count", "2"]
    for cmd in (
        ["build", str(tmp_path / "t"), str(tmp_path / "a.bin"), *flat, "--json"],
        ["refresh", str(tmp_path / "r"), str(tmp_path / "a.bin"), *flat],
        ["index", str(tmp_path / "t")],
    ):
        res = subprocess.run(
            [sys.executable, "-c", _WITHOUT_EXTRAS, *cmd], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
    assert result(tmp_path / "t") == result(tmp_path / "r" / "current")


def test_a_function_for_every_command_with_its_defaults():
    """Every command of `fgram` is a function of `fgram` by the same name, and an option
    both take has one default (the ones made from a config's fields share it by
    construction; the others are written twice and held here)."""
    import inspect

    import click

    from fgram.cli import cli

    names = {name.replace("-", "_") for name in cli.commands}
    assert names <= set(fgram.__all__), names - set(fgram.__all__)
    renamed = {"fmt": "format", "as_json": None, "config_file": None}
    checked = 0
    for name, command in cli.commands.items():
        sig = inspect.signature(getattr(fgram, name.replace("-", "_")))
        ctx = click.Context(command)
        for param in command.params:
            key = renamed.get(param.name, param.name)
            if isinstance(param, click.Option) and key in sig.parameters and not param.multiple:
                api_default = sig.parameters[key].default
                if api_default is not inspect.Parameter.empty:
                    want = param.get_default(ctx)
                    assert api_default == (False if want is None and param.is_flag else want), (
                        name, key, api_default, want
                    )  # fmt: skip
                    checked += 1
    assert checked >= 5, checked  # those written twice (e.g. refresh's keep, report's -o)


def test_show_lookup_synth_and_clean_return_what_the_commands_print(tmp_path, capsys):
    """show's top f-grams and lookup's matches as text (the table's tokenizer is known),
    synth's corpus, clean's listing; `progress` gives the stage lines as they end."""
    made = fgram.synth(tmp_path / "text", tokens=20_000, vocab=300, format="text")
    assert made["tokens"] == 20_000 and (tmp_path / "text" / "tokenizer.json").exists()
    lines: list[str] = []
    tok = str(tmp_path / "text" / "tokenizer.json")
    fgram.tokenize([tmp_path / "text"], tmp_path / "shards", tok, format="bin", engine="local")
    fgram.build(tmp_path / "t", [tmp_path / "shards"], engine="local", progress=lines.append)
    assert any(x.startswith("[pass 2/5: count]") for x in lines) and lines[-1].startswith(
        "[select]"
    ), lines
    fgram.build(tmp_path / "t2", [tmp_path / "shards"], engine="local", progress=True)
    assert "fgram: [select] done" in capsys.readouterr().err
    shown = fgram.show(tmp_path / "t", top=3)
    from tokenizers import Tokenizer

    decode = Tokenizer.from_file(tok).decode
    assert [r["text"] for r in shown["top_fgrams"]] == [
        decode(r["tokens"]) for r in shown["top_fgrams"]
    ]
    fgram.index(tmp_path / "t")
    words = decode(shown["top_fgrams"][0]["tokens"])
    found = fgram.lookup(tmp_path / "t", text=words)
    n = len(found["tokens"])
    assert found["matches"][-1] == words and found["match_len"][-1] == n
    assert found["rows"] is None  # no embeddings yet
    assert fgram.lookup(tmp_path / "t", tokens=found["tokens"])["matches"] == found["matches"]
    (tmp_path / "runs" / ".t.fgram-staging").mkdir(parents=True)  # a killed run's leftover
    listed = fgram.clean([tmp_path / "runs"], cache=False)
    assert [e["kind"] for e in listed["entries"]] and listed["removed"] is False
    assert fgram.clean([tmp_path / "runs"], cache=False, remove=True)["removed"]
    assert not (tmp_path / "runs" / ".t.fgram-staging").exists()
