"""fgram tokenize: every format and split gives exactly the tokens the tokenizer gives
each document, in input order, with dense ids and the documents' rows; the outputs are
read by `fgram build` without options."""

import dataclasses
import gzip
import itertools
import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import zstandard
from click.testing import CliRunner
from helpers import manifest, result, said
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fgram.api import annotate, build, coverage, index
from fgram.cli import cli
from fgram.jobs.tokenize import run_tokenize, task_threads
from fgram.pipeline.config.commands import TokenizeConfig
from fgram.pipeline.errors import ConfigError, InputError, OutputError

SENTENCE = "the cat sat on a mat and then the dog ran off to see a cat on the mat"
WORDS = SENTENCE.split()


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory):
    """A small BPE tokenizer trained here, with an end-of-text special token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(  # every byte in its alphabet: the fast backend proves it
        vocab_size=400,
        special_tokens=["<|endoftext|>", "[UNK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, 12)) for _ in range(300)] + ["héllo wörld ☃ 123"]
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def oracle(tok_path, texts):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tok_path)
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def rows_of(out):
    t = ds.dataset(os.path.join(out, "shards"), format="parquet").to_table().sort_by("doc_id")
    return t.to_pydict()


def run(tok_path, inputs, out, **kw):
    kw.setdefault("engine", "local")
    return run_tokenize(
        TokenizeConfig(inputs=[str(i) for i in inputs], output=str(out), tokenizer=tok_path, **kw)
    )


def write_jsonl(path, records, compression=None):
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    if compression == "gzip":
        data = gzip.compress(data)
    elif compression == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


LONG = " ".join(WORDS * 3000)  # about 60 kB: a document across many byte ranges
texts_st = st.lists(
    st.one_of(
        st.lists(st.sampled_from(WORDS + ["☃", "é", "", "\u2028", "\\n"]), max_size=12).map(
            " ".join
        ),
        st.text(max_size=20),
    ),
    min_size=0,
    max_size=25,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=texts_st, unit=st.integers(1, 200), blank=st.booleans())
def test_jsonl_split_anywhere_gives_each_documents_tokens(
    tok_path, tmp_path_factory, texts, unit, blank
):
    """Byte ranges cut lines anywhere (``unit`` bytes a task): every non-blank line is one
    document, once, in order, its tokens exactly the tokenizer's."""
    d = tmp_path_factory.mktemp("j")
    records = [{"text": t, "n": i} for i, t in enumerate(texts)]
    body = "".join(
        json.dumps(r) + "\n" + ("\n  \n" if blank and i % 3 == 0 else "")
        for i, r in enumerate(records)
    )
    (d / "a.jsonl").write_text(body)
    m = run(tok_path, [d / "a.jsonl"], d / "out", unit_bytes=unit, id_field="n")
    got = rows_of(d / "out") if texts else {"tokens": [], "doc_id": [], "row": [], "id": []}
    assert got["tokens"] == oracle(tok_path, texts)
    assert got["doc_id"] == list(range(len(texts))) and got["row"] == list(range(len(texts)))
    assert got["id"] == [str(i) for i in range(len(texts))]
    assert m["documents"] == len(texts) and m["tokens"] == sum(map(len, got["tokens"]))
    assert os.path.exists(d / "out" / "_SUCCESS") and not os.path.exists(d / "out" / "_work")


def test_long_documents_across_many_byte_ranges(tok_path, tmp_path):
    docs = ["the cat", LONG, "a dog", LONG + " ☃", ""]
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in docs])
    m = run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "out", unit_bytes=5000)
    assert m["units"] > 20 and rows_of(tmp_path / "out")["tokens"] == oracle(tok_path, docs)


def test_every_format_in_one_run_in_input_order(tok_path, tmp_path):
    docs = [f"{' '.join(WORDS[i : i + 5])} ☃" for i in range(10)]
    src = tmp_path / "in"
    src.mkdir()
    write_jsonl(src / "a.jsonl.gz", [{"meta": {"body": t}} for t in docs[:2]], "gzip")
    write_jsonl(src / "b.jsonl.zst", [{"meta": {"body": t}} for t in docs[2:4]], "zstd")
    pq.write_table(pa.table({"meta.body": docs[4:6]}), src / "c.parquet")
    (src / "d.txt").write_text(docs[6])
    write_jsonl(src / "e.zst", [{"meta": {"body": t}} for t in docs[7:10]], "zstd")
    (src / "_ignored.jsonl").write_text("not json\n")
    m = run(tok_path, [src], tmp_path / "out", text_field="meta.body")
    got = rows_of(tmp_path / "out")
    assert got["tokens"] == oracle(tok_path, docs)
    assert [os.path.basename(s) for s in got["source"]] == (
        ["a.jsonl.gz"] * 2 + ["b.jsonl.zst"] * 2 + ["c.parquet"] * 2 + ["d.txt"] + ["e.zst"] * 3
    )
    assert got["row"] == [0, 1, 0, 1, 0, 1, 0, 0, 1, 2]
    assert m["tokenizer"]["vocab_size"] <= 400 and len(m["tokenizer"]["sha256"]) == 64
    assert m["tokenizer"]["backend"] == "fastokens"  # proven (auto), the text extra has it
    assert [i["uri"] for i in m["inputs"]] == sorted(
        str(p) for p in src.iterdir() if p.name[0] != "_"
    )


def test_text_lines_and_shards_of_a_given_size(tok_path, tmp_path):
    lines = [" ".join(WORDS[i % 7 : i % 7 + 6]) for i in range(40)]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n\n")
    m = run(tok_path, [tmp_path / "a.txt"], tmp_path / "out", doc_per_line=True, shard_tokens=50)
    assert rows_of(tmp_path / "out")["tokens"] == oracle(tok_path, lines)
    sizes = [s["tokens"] for s in m["shards"]]
    assert len(sizes) > 3 and all(s >= 50 for s in sizes[:-1])  # cut once past 50 tokens
    assert sum(sizes) == m["tokens"]


def test_bin_output_is_read_by_build_without_options(tok_path, tmp_path):
    """Flat shards: uint16, each document followed by the tokenizer's end-of-text id;
    `fgram build` takes dtype and separator from the manifest and gives the table that
    the Parquet output gives."""
    rng = np.random.default_rng(1)
    docs = [" ".join(rng.choice(WORDS[:8], 30)) for _ in range(60)]
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in docs])
    m = run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "bin", format="bin", unit_bytes=500)
    run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "pq")
    assert m["dtype"] == "uint16" and m["doc_sep"] == 0  # <|endoftext|> is id 0
    flat = np.concatenate(
        [np.fromfile(tmp_path / "bin" / s["name"], np.uint16) for s in m["shards"]]
    )
    want = [t + [0] for t in oracle(tok_path, docs)]
    assert flat.tolist() == [x for d in want for x in d]
    a = build(tmp_path / "ta", [tmp_path / "bin"], max_len=4, min_count=3, engine="local")
    b = build(tmp_path / "tb", [tmp_path / "pq"], max_len=4, min_count=3, engine="local")
    assert result(tmp_path / "ta") == result(tmp_path / "tb") and a["fgrams"] > 10
    assert a["tokenizer"]["sha256"] == m["tokenizer"]["sha256"] == b["tokenizer"]["sha256"]
    assert manifest(tmp_path / "ta")["config"]["doc_sep"] == 0


def test_commands_take_dtype_and_separator_from_the_manifest_and_refuse_others_alike(
    tok_path, tmp_path
):
    """build, annotate and coverage read a tokenize output's dtype and separator from its
    manifest; the same options given agree, another dtype or separator is refused by each
    in one line naming the option, the shards and what they hold (one rule for both)."""
    rng = np.random.default_rng(2)
    write_jsonl(
        tmp_path / "a.jsonl", [{"text": " ".join(rng.choice(WORDS, 30))} for _ in range(40)]
    )
    run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "bin", format="bin")
    shards = [tmp_path / "bin"]
    same = dict(dtype="uint16", doc_sep=0, engine="local", max_len=3)
    build(tmp_path / "t", shards, **same)  # the manifest's own values: accepted
    index(tmp_path / "t")
    annotate(tmp_path / "t", shards, tmp_path / "tags", dtype="uint16", doc_sep=0, engine="local")
    for wrong, said_ in (
        (dict(dtype="uint32"), "--dtype uint32"),
        (dict(doc_sep=5), "--doc-sep 5"),
    ):
        held = "holds tokens as uint16" if "dtype" in wrong else "is separated by 0"
        for call, args in (
            (build, (tmp_path / "t2", shards)),
            (annotate, (tmp_path / "t", shards, tmp_path / "tags2")),
            (coverage, (tmp_path / "t", shards)),
        ):
            with pytest.raises(ConfigError) as err:
                call(*args, engine="local", **wrong)
            assert said_ in str(err.value) and held in str(err.value), str(err.value)
    r = CliRunner().invoke(
        cli, ["build", str(tmp_path / "t3"), str(tmp_path / "bin"), "--dtype", "uint32"]
    )
    assert r.exit_code == 2 and "--dtype uint32" in r.output and "manifest" in r.output, r.output
    assert not os.path.exists(tmp_path / "t3")


def test_a_record_past_max_record_bytes_is_a_bad_record(tok_path, tmp_path):
    """A huge record (one JSON line of hundreds of MB held ~77x by a tokenizer) is refused
    past --max-record-bytes, naming its file and line; --skip-bad-records counts it."""
    records = [{"text": "the cat sat"}, {"text": "a dog " * 40}, {"text": "on a mat"}]
    write_jsonl(tmp_path / "a.jsonl", records)
    with pytest.raises(InputError, match=r"a.jsonl:2: a record of \d+ bytes, over --max-rec"):
        run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "o", max_record_bytes=100)
    assert not os.path.exists(tmp_path / "o")
    m = run(
        tok_path, [tmp_path / "a.jsonl"], tmp_path / "o", max_record_bytes=100,
        skip_bad_records=True,
    )  # fmt: skip
    assert m["documents"] == 2 and list(m["skipped_records"].values()) == [1]


BAD = {
    "json": (b'{"text": "the cat"}\n\n{"text": "a dog"}\n{oops\n', 4, "not JSON"),
    "field": (b'{"text": "the cat"}\n{"body": "x"}\n', 2, "no field 'text'"),
    "type": (b'{"text": "the cat"}\n{"text": 7}\n', 2, "a non-string field 'text'"),
    "utf8": (b'{"text": "the cat"}\n\n\n{"text": "\xff\xfe"}\n', 4, "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_record_names_its_file_and_line_and_nothing_is_published(tok_path, tmp_path, case):
    data, line, problem = BAD[case]
    (tmp_path / "a.jsonl").write_bytes(data + b'{"text": "then"}\n' * 3)
    # one task, or a task per few bytes: the same line number; flat shards, which keep no
    # document ids, count only the units that lines follow in their file
    for unit, fmt in itertools.product((1 << 20, 7), ("parquet", "bin")):
        with pytest.raises(InputError, match=rf"a\.jsonl:{line}: {problem}"):
            run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "out", unit_bytes=unit, format=fmt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]  # nothing left
    m = run(tok_path, [tmp_path / "a.jsonl"], tmp_path / "out", skip_bad_records=True)
    assert m["skipped_records"] == {str(tmp_path / "a.jsonl"): 1}
    lines = (data + b'{"text": "then"}\n' * 3).split(b"\n")
    rows = [i for i, text in enumerate(x for x in lines if x.strip())]
    bad = sum(1 for x in lines[: line - 1] if x.strip())  # the bad record's row
    got = rows_of(tmp_path / "out")
    assert m["documents"] == len(rows) - 1 and got["row"] == [r for r in rows if r != bad]
    assert got["doc_id"] == got["row"]  # a skipped record leaves its id unused
    assert got["tokens"][0] == oracle(tok_path, ["the cat"])[0]


def test_broken_archives_parquet_and_tokenizers_are_one_line(tok_path, tmp_path):
    whole = zstandard.ZstdCompressor().compress(b'{"text": "the cat sat"}\n' * 500)
    (tmp_path / "a.jsonl.zst").write_bytes(whole[: len(whole) // 2])
    gz = gzip.compress(b'{"text": "the cat sat"}\n' * 500)
    (tmp_path / "b.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    (tmp_path / "c.parquet").write_bytes(b"PAR1 not really")
    for name in ("a.jsonl.zst", "b.jsonl.gz", "c.parquet"):
        with pytest.raises(InputError, match=rf"{name}: "):
            run(tok_path, [tmp_path / name], tmp_path / "out")
    (tmp_path / "tok.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(ConfigError, match="tok.json: not a tokenizer.json"):
        run(str(tmp_path / "tok.json"), [tmp_path / "b.jsonl.gz"], tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


def test_special_tokens_and_a_dtype_too_narrow(tok_path, tmp_path):
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_file(tok_path)
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", eos)]
    )
    tok.save(str(tmp_path / "t.json"))
    write_jsonl(tmp_path / "a.jsonl", [{"text": "the cat"}, {"text": ""}])
    m = run(str(tmp_path / "t.json"), [tmp_path / "a.jsonl"], tmp_path / "o1")
    assert rows_of(tmp_path / "o1")["tokens"] == oracle(tok_path, ["the cat", ""])
    run(str(tmp_path / "t.json"), [tmp_path / "a.jsonl"], tmp_path / "o2", add_special_tokens=True)
    want = [e.ids for e in tok.encode_batch(["the cat", ""])]
    assert rows_of(tmp_path / "o2")["tokens"] == want and want[0][-1] == eos
    assert m["tokens"] == len(want[0]) - 1
    big = Tokenizer.from_file(tok_path)
    big.add_tokens([f"w{i}" for i in range(70_000)])
    big.save(str(tmp_path / "big.json"))
    with pytest.raises(ConfigError, match="token ids do not fit uint16; use --dtype uint32"):
        run(
            str(tmp_path / "big.json"),
            [tmp_path / "a.jsonl"],
            tmp_path / "o3",
            format="bin",
            dtype="uint16",
        )
    m = run(str(tmp_path / "big.json"), [tmp_path / "a.jsonl"], tmp_path / "o3", format="bin")
    assert m["dtype"] == "uint32"


def test_bin_needs_a_separator(tmp_path):
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.save(str(tmp_path / "tokenizer.json"))
    write_jsonl(tmp_path / "a.jsonl", [{"text": "a b"}])
    with pytest.raises(ConfigError, match="names no end-of-document token; give the separator"):
        run(str(tmp_path), [tmp_path / "a.jsonl"], tmp_path / "out", format="bin")
    m = run(str(tmp_path), [tmp_path / "a.jsonl"], tmp_path / "out", format="bin", doc_sep=2)
    assert m["doc_sep"] == 2 and m["tokenizer"]["name"] == tmp_path.name  # the folder's


def test_a_failed_run_resumes_from_its_finished_units(tok_path, tmp_path, monkeypatch):
    """A run that fails (here: in its last unit) keeps its finished units; --resume
    encodes only the others, and the output is the one a run without failure gives."""
    from fgram.jobs import tokenize as job

    docs = [" ".join(WORDS[i : i + 8]) for i in range(12)]
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in docs])
    real, log = job.encode, tmp_path / "encoded.txt"

    def logged(fail: bool):
        def encode(tok, texts, special):
            with open(log, "a") as f:
                f.write(texts[0] + "\n")
            if fail and docs[-1] in texts:
                raise RuntimeError("killed")
            return real(tok, texts, special)

        return encode

    cfg = TokenizeConfig(
        [str(tmp_path / "a.jsonl")],
        str(tmp_path / "o"),
        tok_path,
        unit_bytes=200,
        engine="local",
        resume=True,
    )
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # the local engine runs the tasks here
    monkeypatch.setattr(job, "encode", logged(True))
    with pytest.raises(RuntimeError, match="killed"):
        run_tokenize(cfg)
    assert not os.path.exists(tmp_path / "o")
    log.unlink()
    monkeypatch.setattr(job, "encode", logged(False))
    m = run_tokenize(cfg)
    assert m["resumed"] and m["units"] == 3
    assert rows_of(tmp_path / "o")["tokens"] == oracle(tok_path, docs)
    assert len(log.read_text().splitlines()) == 1  # only the unit that failed, again
    # --resume onto the work of a run with other options is refused, and the work kept
    monkeypatch.setattr(job, "encode", logged(True))
    other = dataclasses.replace(cfg, output=str(tmp_path / "p"))
    with pytest.raises(RuntimeError, match="killed"):
        run_tokenize(other)
    with pytest.raises(OutputError, match="cannot resume: .* had other options"):
        run_tokenize(dataclasses.replace(other, add_special_tokens=True))
    monkeypatch.setattr(job, "encode", real)
    assert run_tokenize(other)["resumed"]


def test_cli_tokenize_then_build(tok_path, tmp_path, spark):
    write_jsonl(tmp_path / "a.jsonl", [{"text": " ".join(WORDS)}] * 20)
    tokenize = ["tokenize", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "tok")]
    r = CliRunner().invoke(cli, [*tokenize, "--tokenizer", tok_path, "--format", "bin"])
    assert r.exit_code == 0, r.output
    assert "20 documents" in r.output and str(tmp_path / "tok") in r.output
    # what it chose, and why, said (the manifest alone used to say it)
    assert re.search(r"dtype uint16 \(\d+ ids fit 16 bits\)", r.output), r.output
    assert "separator 0 '<|endoftext|>' after each document (the tokenizer's end" in r.output
    r = CliRunner().invoke(cli, ["build", str(tmp_path / "t"), str(tmp_path / "tok"), "-K", "3"])
    assert r.exit_code == 0, r.output
    assert manifest(tmp_path / "t")["fgrams"] > 0
    # the table's manifest names the tokenizer: f-grams are shown as text without options
    r = CliRunner().invoke(cli, ["show", str(tmp_path / "t"), "--top", "3"])
    assert r.exit_code == 0 and "'" in r.output.split("top 3:")[1], r.output
    assert CliRunner().invoke(cli, ["index", str(tmp_path / "t")]).exit_code == 0
    # annotate's numbers agree with the reader's: tokens, and positions with separators
    tags = str(tmp_path / "tags")
    r = CliRunner().invoke(
        cli, ["annotate", str(tmp_path / "t"), str(tmp_path / "tok"), "-o", tags]
    )
    assert r.exit_code == 0, r.output
    from fgram import FgramTags

    n = len(FgramTags.open(tags))
    assert f"tagged 380 tokens -> {tags} ({n} positions with the 20 document separators" in r.output
    assert n == 400, r.output
    r = CliRunner().invoke(cli, ["lookup", str(tmp_path / "t"), "--text", "the cat sat on"])
    assert r.exit_code == 0 and "'the cat" in r.output, r.output
    text = CliRunner().invoke(
        cli, ["coverage", str(tmp_path / "t"), str(tmp_path / "a.jsonl"), "--tokenizer", tok_path]
    )
    tokens = CliRunner().invoke(cli, ["coverage", str(tmp_path / "t"), str(tmp_path / "tok")])
    assert text.exit_code == 0 and "tokens:" in text.output, text.output
    assert text.output.split("tokens:")[1] == tokens.output.split("tokens:")[1]
    assert said(text.output)[0] == f"coverage of {tmp_path / 't'} over 1 input:"
    r = CliRunner().invoke(cli, ["diff", str(tmp_path / "t"), str(tmp_path / "t")])
    assert r.exit_code == 0 and "+0 added" in r.output, r.output
    r = CliRunner().invoke(cli, [*tokenize, "--tokenizer", tok_path])  # exists already
    assert r.exit_code == 2 and "exists" in r.output


def test_build_from_text_in_one_command_equals_tokenize_then_build(tok_path, tmp_path):
    """`fgram build TABLE TEXT... --tokenizer TOK`: the table of tokenizing first, the text's
    inputs and the tokenizer in its manifest, and no tokens left beside it."""
    rng = np.random.default_rng(2)
    docs = [" ".join(rng.choice(WORDS[:9], 25)) for _ in range(50)]
    write_jsonl(tmp_path / "a.jsonl.zst", [{"text": t} for t in docs], "zstd")
    run(tok_path, [tmp_path / "a.jsonl.zst"], tmp_path / "tok")
    opts = {"max_len": 4, "min_count": 3, "engine": "local"}
    two = build(tmp_path / "t2", [tmp_path / "tok"], **opts)
    one = build(tmp_path / "t1", [tmp_path / "a.jsonl.zst"], tokenizer=tok_path, **opts)
    assert result(tmp_path / "t1") == result(tmp_path / "t2") and one["fgrams"] > 10
    assert one["text"]["documents"] == 50 and one["tokenizer"] == two["tokenizer"]
    assert [i["uri"] for i in one["text"]["inputs"]] == [str(tmp_path / "a.jsonl.zst")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl.zst", "t1", "t2", "tok"]
    # coverage of the text: that of its token shards, and nothing left beside the table
    index(tmp_path / "t1")
    of_tokens = coverage(tmp_path / "t1", tmp_path / "tok", engine="local")
    of_text = coverage(
        tmp_path / "t1", tmp_path / "a.jsonl.zst", engine="local", tokenizer=tok_path
    )
    assert of_text == of_tokens and of_text["positions"] == one["text"]["tokens"] > 0
    assert 0 < of_text["share_unmatched"] < 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl.zst", "t1", "t2", "tok"]
    with pytest.raises(ConfigError, match="tokenize the text first"):
        annotate(tmp_path / "t1", tmp_path / "a.jsonl.zst", tmp_path / "x", tokenizer=tok_path)


@pytest.mark.spark
def test_text_on_s3_to_tokens_on_s3_then_a_table(tok_path, tmp_path, s3, spark):
    """Byte ranges and a zstd stream read from an object store, shards written to one, and
    `fgram build` reading them there: the table the same files give on this disk."""
    from fgram.pipeline.io.storage import locate

    bucket = s3.bucket()
    rng = np.random.default_rng(3)
    docs = [" ".join(rng.choice(WORDS[:9], 20)) for _ in range(40)]
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in docs[:25]])
    write_jsonl(tmp_path / "b.jsonl.zst", [{"text": t} for t in docs[25:]], "zstd")
    for name in ("a.jsonl", "b.jsonl.zst"):
        locate(f"s3://{bucket}/text/{name}").upload(str(tmp_path / name))
    remote = f"s3://{bucket}/tokens"
    m = run_tokenize(
        TokenizeConfig(
            [f"s3://{bucket}/text"],
            remote,
            tok_path,
            format="bin",
            unit_bytes=300,
            storage=s3.options,
        ),
        spark,
    )
    assert m["documents"] == 40 and m["units"] > 3
    local = run(
        tok_path,
        [tmp_path / "a.jsonl", tmp_path / "b.jsonl.zst"],
        tmp_path / "tok",
        format="bin",
        unit_bytes=300,
    )
    assert [s["tokens"] for s in m["shards"]] == [s["tokens"] for s in local["shards"]]
    opts = {"max_len": 4, "min_count": 3, "engine": "local"}
    build(tmp_path / "t1", [remote], storage=s3.options, **opts)
    build(tmp_path / "t2", [tmp_path / "tok"], **opts)
    assert result(tmp_path / "t1") == result(tmp_path / "t2")


def test_synth_text_is_the_synthetic_corpus_as_words(tmp_path):
    """`fgram synth --format text`: its words, tokenized with the tokenizer.json beside
    them, are exactly the ids of the same corpus as flat shards, so both give one table."""
    from fgram.pipeline.formats.synth import generate, word

    assert len({word(i) for i in range(1, 20_000)}) == 19_999
    generate(str(tmp_path / "text"), 30_000, vocab=700, seed=4, fmt="text", doc_len=64)
    generate(str(tmp_path / "bin"), 30_000, vocab=700, seed=4, fmt="bin", doc_len=64)
    tok = str(tmp_path / "text" / "tokenizer.json")
    m = run(tok, [tmp_path / "text"], tmp_path / "tok", format="bin")
    assert m["doc_sep"] == 0 and m["tokens"] == 30_000
    flat = np.fromfile(tmp_path / "bin" / "part-00000.bin", np.uint16)
    (shard,) = (tmp_path / "tok" / "shards").iterdir()
    assert np.array_equal(np.fromfile(shard, np.uint16), flat)
    opts = {"max_len": 4, "min_count": 3, "engine": "local", "size": 500}
    one = build(tmp_path / "t1", [tmp_path / "text"], tokenizer=tok, **opts)
    build(tmp_path / "t2", [tmp_path / "bin"], dtype="uint16", doc_sep=0, **opts)
    assert result(tmp_path / "t1") == result(tmp_path / "t2") and one["fgrams"] == 500


def test_a_task_s_tokenizer_threads_are_twice_its_share_of_the_cores(monkeypatch):
    """Tasks side by side get two threads each; fewer units than cores share the idle
    ones; never more than the cores; a cluster's task gets twice spark.task.cpus;
    --threads overrides."""
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    cfg = TokenizeConfig(["a.jsonl"], "o", "tok.json", engine="local")
    assert [task_threads(cfg, n) for n in (1, 2, 3, 4, 8, 40)] == [8, 8, 4, 4, 2, 2]
    spark_cfg = dataclasses.replace(cfg, engine="spark", master="local[2]")
    assert [task_threads(spark_cfg, n) for n in (1, 2, 9)] == [2, 2, 2]
    cluster = dataclasses.replace(spark_cfg, master="spark://h:7077")
    assert task_threads(cluster, 1) == 2
    assert task_threads(dataclasses.replace(cluster, conf={"spark.task.cpus": "3"}), 9) == 6
    assert task_threads(dataclasses.replace(cfg, threads=0), 1) == 0
    assert task_threads(dataclasses.replace(cfg, threads=1), 40) == 1
    with pytest.raises(ConfigError, match="--threads"):
        dataclasses.replace(cfg, threads=-1).validate()


def test_read_ahead_keeps_order_raises_in_order_and_stops_with_its_consumer():
    import threading

    from fgram.pipeline.text.text import read_ahead

    assert list(read_ahead(iter(range(50)), depth=2)) == list(range(50))

    def failing():
        yield 1
        yield 2
        raise InputError("a.jsonl:3", "not JSON")

    got = []
    with pytest.raises(InputError, match="a.jsonl:3"):
        for b in read_ahead(failing()):
            got.append(b)
    assert got == [1, 2]
    before = threading.active_count()
    it = read_ahead(iter(range(1000)), depth=1)
    assert next(it) == 0
    it.close()  # the consumer goes: the reader thread ends too
    assert threading.active_count() == before


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    records=st.lists(
        st.tuples(
            st.text(),
            st.one_of(st.integers(-(2**100), 2**100), st.text(max_size=5), st.floats()),
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_documents_read_as_the_standard_library_reads_them(tmp_path_factory, records):
    """orjson (the text extra) where it reads a line as json does; json itself where
    not (lone surrogates escaped, NaN, integers past 64 bits): texts and ids as json
    gives them."""
    from fgram.pipeline.text import text as tx

    assert tx.FAST_JSON is not None, "the test extra installs orjson"
    path = tmp_path_factory.mktemp("js") / "a.jsonl"
    lines = [json.dumps({"text": t, "id": k}, ensure_ascii=True) for t, k in records]
    path.write_text("\n".join(lines) + "\n")
    opts = tx.TextOptions(id_field="id")
    (f,) = tx.plan_text([str(path)], opts)
    got = tx.Batch(ids=[])
    for unit in tx.plan_text_units([f], opts, 1 << 30):
        for batch in tx.documents(f, unit, opts, 1, tx.Skips(False)):
            got.texts += batch.texts
            got.ids += batch.ids
    want = [json.loads(line) for line in lines]
    assert got.texts == [w["text"] for w in want]
    assert got.ids == [str(w["id"]) for w in want]


def test_the_units_counted_first_are_those_whose_counts_number_a_later_one():
    from fgram.jobs.tokenize import counted
    from fgram.pipeline.text.text import TextUnit
    from fgram.pipeline.text.token_shards import WRITERS

    units = [TextUnit(0, 0, 5), TextUnit(0, 5, 9), TextUnit(1, 0, 1), TextUnit(2, 0, 4)]
    parquet, flat = WRITERS["parquet"], WRITERS["bin"]
    assert counted(units, parquet) == [0, 1, 2]  # ids run on over every file
    assert counted(units, flat) == [0]  # only unit 1's lines start after another's
    assert counted(units[2:], flat) == [] and counted([], parquet) == []


def test_tokenize_spares_the_jvm_only_where_spark_would_run_on_this_machine_alone(
    monkeypatch, tok_path, tmp_path
):
    """--engine auto (the default) in local mode with no JVM up: the tasks run in local
    processes (as --engine local); a session given or running, spark-submit, a cluster
    master, a --conf, or an engine named: Spark, or as asked."""
    from pyspark import SparkContext

    from fgram.jobs.engines import chosen_engine

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    cfg = TokenizeConfig(["a.jsonl"], "o", tok_path)
    assert cfg.engine == "auto" and chosen_engine(cfg) == "local"
    assert chosen_engine(dataclasses.replace(cfg, master="local[2]")) == "local"
    assert chosen_engine(dataclasses.replace(cfg, master="spark://h:7077")) == "spark"
    assert chosen_engine(dataclasses.replace(cfg, engine="spark")) == "spark"  # asked for
    assert chosen_engine(dataclasses.replace(cfg, engine="local", master="spark://h")) == "local"
    assert chosen_engine(dataclasses.replace(cfg, conf={"spark.executor.memory": "2g"})) == "spark"
    assert chosen_engine(cfg, spark=object()) == "spark"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://h:7077 --conf spark.master=x")
    assert chosen_engine(cfg) == "spark"
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    assert chosen_engine(cfg) == "spark"
    # the command on a local master: no JVM started, the manifest says where it ran
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(
        "fgram.jobs.engines.SparkExecutor", None
    )  # a Spark executor made would fail here
    write_jsonl(tmp_path / "a.jsonl", [{"text": " ".join(WORDS)}] * 5)
    m = run_tokenize(
        TokenizeConfig(
            [str(tmp_path / "a.jsonl")], str(tmp_path / "o"), tok_path, master="local[2]"
        )
    )
    assert m["engine"] == "local" and m["documents"] == 5
