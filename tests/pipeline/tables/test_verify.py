"""Published files checked: `fgram verify` finds any changed byte of a table, its index
or its embeddings; an index or store with a damaged file is an error naming it, on open
or at the lookup that meets the damage, never a crash or a silent wrong answer past
what the checks can see."""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import build, write_bin

import fgram
from fgram.pipeline.errors import FgramError
from fgram.pipeline.kernels.keys import EMPTY

FGRAM = os.path.join(os.path.dirname(sys.executable), "fgram")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A table with its index and embeddings, and tokens to look up."""
    root = tmp_path_factory.mktemp("verify")
    rng = np.random.default_rng(0)
    docs = [list(rng.integers(1, 40, int(rng.integers(20, 200)))) for _ in range(60)]
    write_bin(str(root / "c.bin"), docs, sep=0)
    build(None, [root / "c.bin"], root / "t", doc_sep=0, min_count=2, max_len=4, engine="local")
    fgram.index(root / "t")
    fgram.embed(root / "t", model="fgram.pipeline.models:echo", engine="local")
    tokens = np.concatenate([np.asarray(d) for d in docs])
    return root / "t", tokens


def _copy(src, dst):
    """A copy of a table to damage (the module's table stays whole)."""
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return dst


def _flip(path, at: int, bit: int = 0) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ (1 << bit)]))


def _data_files(root) -> list[str]:
    """Every file but the manifests and metadata (which name the others)."""
    every = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    return sorted(p for p in every if not p.endswith((".json", "_SUCCESS")))


def test_a_whole_table_verifies_and_says_what_it_checked(made):
    table, _ = made
    found = fgram.verify(table, deep=True)
    assert found["problems"] == [] and found["unrecorded"] == []
    data = _data_files(table)
    assert {os.path.relpath(p, table).split(os.sep)[0] for p in data} == {
        "fgrams",
        "index",
        "embeddings",
    }
    assert found["files"] == len(data) and found["bytes"] == sum(map(os.path.getsize, data))
    res = subprocess.run([FGRAM, "verify", str(table), "--deep"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip().endswith("as written (sizes and sha256)")


@pytest.mark.parametrize("part", ["fgrams", "index", "embeddings"])
def test_one_flipped_bit_anywhere_is_found_by_deep_and_named(made, tmp_path, part):
    table = _copy(made[0], tmp_path / "t")
    rng = np.random.default_rng(len(part))
    for path in [p for p in _data_files(table) if f"{os.sep}{part}{os.sep}" in p]:
        at, bit = int(rng.integers(0, os.path.getsize(path))), int(rng.integers(0, 8))
        _flip(path, at, bit)
        assert fgram.verify(table)["problems"] == []  # sizes alone cannot see it
        problems = fgram.verify(table, deep=True)["problems"]
        assert problems == [f"{path}: its bytes changed since written (sha256 differs)"]
        res = subprocess.run(
            [FGRAM, "verify", str(table), "--deep"], capture_output=True, text=True
        )
        assert res.returncode == 2 and f"damaged: {path}" in res.stdout, res.stdout
        assert res.stderr.startswith("fgram: error: ") and "damaged or missing" in res.stderr
        _flip(path, at, bit)  # put back: as written again
        assert fgram.verify(table, deep=True)["problems"] == []


def test_tags_and_tokenized_shards_verify_too(made, tmp_path):
    """An annotate output (flat and Parquet tags) and a tokenize output record their
    files' sizes and sha256: a flipped bit in any is found and named."""
    table, _ = made
    root = table.parent
    fgram.annotate(table, [root / "c.bin"], tmp_path / "tags", doc_sep=0, engine="local")
    text = tmp_path / "text.jsonl"
    text.write_text("".join(f'{{"text": "a b c {i}"}}\n' for i in range(30)))
    pytest.importorskip("tokenizers", reason="tokenize needs the tokenizers package")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<|endoftext|>", "[UNK]", "a", "b", "c", *map(str, range(30))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    fgram.tokenize([text], tmp_path / "toks", tokenizer=str(tmp_path / "tokenizer.json"))
    for out in (tmp_path / "tags", tmp_path / "toks"):
        found = fgram.verify(out, deep=True)
        assert found["problems"] == [] and found["unrecorded"] == [] and found["files"] > 0
        path = _data_files(out)[0]
        _flip(path, os.path.getsize(path) // 2)
        problems = fgram.verify(out, deep=True)["problems"]
        assert problems == [f"{path}: its bytes changed since written (sha256 differs)"]


def test_a_refresh_store_object_changed_is_found_by_verify_and_by_refresh(tmp_path):
    """A refresh version's store objects carry their size and checksum in their names:
    `verify --deep` names one changed, and the next refresh that reads it stops with
    one line naming it (never a table counted from it)."""
    rng = np.random.default_rng(3)
    docs = [list(rng.integers(1, 30, int(rng.integers(20, 80)))) for _ in range(40)]
    write_bin(str(tmp_path / "a.bin"), docs[:20], sep=0)
    kw = dict(doc_sep=0, min_count=2, max_len=4, engine="local")
    fgram.refresh(tmp_path / "r", [tmp_path / "a.bin"], **kw)
    found = fgram.verify(tmp_path / "r", deep=True)
    objects = sorted((tmp_path / "r" / "store" / "objects").iterdir())
    assert found["problems"] == [] and found["unrecorded"] == [] and len(objects) > 3
    assert found["files"] >= len(objects)
    path = str(max(objects, key=os.path.getsize))
    _flip(path, os.path.getsize(path) - 1)
    problems = fgram.verify(tmp_path / "r", deep=True)["problems"]
    assert problems == [f"{path}: its bytes changed since written (checksum differs)"]
    for other in objects:  # whichever the refresh reads
        if str(other) != path:
            _flip(other, os.path.getsize(other) - 1)
    write_bin(str(tmp_path / "b.bin"), docs[20:], sep=0)
    with pytest.raises(FgramError, match="a store object not as it was written") as caught:
        fgram.refresh(tmp_path / "r", [tmp_path / "a.bin", tmp_path / "b.bin"], **kw)
    assert str(caught.value).split(":")[0] in map(str, objects)


@pytest.mark.parametrize("name", ["suffix.npy", "table-3.npy"])
def test_a_truncated_index_file_is_an_error_naming_it(made, tmp_path, name):
    table = _copy(made[0], tmp_path / "t")
    path = table / "index" / name
    os.truncate(path, os.path.getsize(path) - 8)
    with pytest.raises(FgramError, match=rf"{path}: \d+ bytes where its metadata says \d+"):
        fgram.FgramIndex.open(table)
    with pytest.raises(FgramError, match=str(path)):
        fgram.FgramStore.open(table, mode="mmap")
    problems = fgram.verify(table)["problems"]
    assert problems == [
        f"{path}: {os.path.getsize(path)} bytes where {os.path.getsize(path) + 8} were written"
    ]


def _rewrite(path, change) -> None:
    """Change an index array in place, as a damaged disk or a stray write would."""
    arr = np.load(path, mmap_mode="r+")
    change(arr)
    arr.flush()
    del arr


@pytest.mark.parametrize(
    "damage",
    [
        ("table-2.npy", lambda a: a.__setitem__((slice(None), 0), np.uint64(12345))),  # no EMPTY
        ("table-2.npy", lambda a: a.__setitem__((a[:, 0] != EMPTY, 1), np.uint64(1 << 40))),
        ("table-3.npy", lambda a: a.__setitem__((a[:, 0] != EMPTY, 1), np.uint64(1 << 63))),
        ("suffix.npy", lambda a: a.__setitem__(slice(None), 2**31 - 1)),
        ("suffix.npy", lambda a: a.__setitem__(slice(None), -7)),
    ],
    ids=["no-empty-slot", "id-too-large", "id-negative", "suffix-too-large", "suffix-negative"],
)
def test_a_damaged_index_is_an_error_at_the_lookup_never_a_crash(made, tmp_path, damage):
    """Damage that the size check cannot see: the open's XXH3 check refuses it, naming the
    file; opened without checks (check=False), the lookups that meet it stop with an
    error naming the index (bounds-checked kernels), in every reader: match, ids, the
    store's prefill, decoding step and last-token lookups; verify --deep finds it."""
    table = _copy(made[0], tmp_path / "t")
    tokens = made[1]
    name, change = damage
    _rewrite(table / "index" / name, change)
    for opener in (fgram.FgramIndex.open, fgram.FgramStore.open):
        with pytest.raises(FgramError, match=rf"{table / 'index' / name}: its bytes are not"):
            opener(table)
    for mode in ("mmap", "ram"):
        index = fgram.FgramIndex.open(table, mode=mode, check=False)
        with pytest.raises(FgramError, match=rf"{table / 'index'}: damaged"):
            index.match(tokens)
        if name.startswith("table-2"):  # the lookup of n-grams probes the tables only
            with pytest.raises(FgramError, match="damaged"):
                index.ids([list(tokens[i : i + 2]) for i in range(300)])
        store = fgram.FgramStore.open(table, mode=mode, check=False)
        with pytest.raises(FgramError, match="damaged"):
            store.embed_sequence(tokens)
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:2000], 6)
        with pytest.raises(FgramError, match="damaged"):
            store.embed_last(np.ascontiguousarray(windows))
        state = store.start(64)
        with pytest.raises(FgramError, match="damaged"):
            for j in range(60):  # 64 sequences, a token each per step
                store.step(state, tokens[j * 64 : (j + 1) * 64])
    problems = fgram.verify(table, deep=True)["problems"]
    assert any(name in p for p in problems), problems


def test_open_refuses_a_changed_byte_that_sizes_and_shapes_cannot_see(
    made, tmp_path, monkeypatch, capfd
):
    """A value flipped to another valid id: lookups would answer wrongly without a sign.
    Opening checks every byte against the XXH3 the index recorded (once per file and
    process: a second open hashes nothing) and names the file; ``check=False`` opens and
    says what is unchecked; ``open(verify=True)`` checks the sha256 of every file."""
    import fgram.pipeline.tables.index as index_module

    hashed = []
    real = index_module.file_xxh3
    monkeypatch.setattr(index_module, "file_xxh3", lambda p: hashed.append(p) or real(p))
    fresh = _copy(made[0], tmp_path / "fresh")  # files of their own: not checked yet
    fgram.FgramStore.open(fresh)
    n = len(hashed)
    fgram.FgramStore.open(fresh)
    fgram.FgramIndex.open(fresh)
    assert n == 5 and len(hashed) == n, hashed  # table-2..4, suffix, matrix: once each
    table = _copy(made[0], tmp_path / "t")
    path = table / "index" / "suffix.npy"
    _rewrite(path, lambda a: a.__setitem__(np.flatnonzero(a >= 0)[:1], 0))
    for opener in (fgram.FgramIndex.open, fgram.FgramStore.open):
        with pytest.raises(FgramError, match=rf"{path}: its bytes are not those written"):
            opener(table)
    capfd.readouterr()
    fgram.FgramIndex.open(table, check=False)  # sizes and shapes as written: opens
    assert f"{table / 'index'}: opened without checking its arrays" in capfd.readouterr().err
    matrix = table / "embeddings" / "matrix.npy"
    _flip(matrix, os.path.getsize(matrix) - 3)
    with pytest.raises(FgramError, match=rf"{matrix}: its bytes are not those written"):
        fgram.FgramStore.open(table)
    for opener in (fgram.FgramIndex.open, fgram.FgramStore.open):
        with pytest.raises(FgramError, match=rf"{path}: its bytes changed since written"):
            opener(table, verify=True)
    fgram.FgramIndex.open(made[0], verify=True)  # a whole one opens


def test_names_in_a_manifest_never_lead_out_of_the_table(made, tmp_path):
    """A manifest's entry naming a file outside the table (../../secret.txt, or another
    table's Parquet file in place of its own): verify reads neither, says each, and says
    the table's own file that the manifest no longer names; readers refuse the table."""
    import json

    table = _copy(made[0], tmp_path / "t")
    other = _copy(made[0], tmp_path / "other")
    (tmp_path / "secret.txt").write_text("not fgram's")
    m = json.loads((table / "manifest.json").read_text())
    own = [f for f in m["files"] if f.startswith("fgrams/")][0]
    _flip(table / own, os.path.getsize(table / own) // 2)  # damage the table's own file
    m["files"] = [f for f in m["files"] if f != own] + [
        f"../other/{own}",
        "../secret.txt",
    ]
    m["checksums"][f"../other/{own}"] = m["checksums"][own]
    (table / "manifest.json").write_text(json.dumps(m))
    res = subprocess.run([FGRAM, "verify", str(table), "--deep"], capture_output=True, text=True)
    assert res.returncode == 2, res.stdout
    out = res.stdout + res.stderr
    assert f"names '../other/{own}', a path out of it" in out
    assert "names '../secret.txt', a path out of it" in out
    assert f"{table / own}: not named by the manifest" in out
    assert (other / own).exists() and "as written" not in out
    res = subprocess.run([FGRAM, "show", str(table)], capture_output=True, text=True)
    assert res.returncode == 2 and "a path out of it" in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["index/table-2.npy", "embeddings/matrix.npy"])
def test_a_damaged_npy_header_is_one_line_naming_the_file(made, tmp_path, name):
    """A .npy header that no longer parses (numpy reads it with `ast`: a SyntaxError), in
    the index or in the embeddings: lookup exits 2 with one line naming the file, never
    a bare parser message, and never "no embeddings" for a matrix that is there."""
    table = _copy(made[0], tmp_path / "t")
    path = table / name
    data = bytearray(path.read_bytes())
    at = data.index(b"{")
    data[at : at + 1] = b"("  # '{' -> '(': an unclosed parenthesis, the same size
    path.write_bytes(bytes(data))
    tokens = ",".join(str(t) for t in made[1][:8])
    for extra, said in (
        ([], "its bytes are not those written"),  # the open's XXH3 check comes first
        (["--no-check"], "not a readable .npy array"),  # then the header's parse
    ):
        res = subprocess.run(
            [FGRAM, "lookup", str(table), "--tokens", tokens, *extra],
            capture_output=True,
            text=True,
        )
        lines = [x for x in res.stderr.splitlines() if x.strip() and "warning" not in x]
        assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr
        assert lines[0].startswith(f"fgram: error: {path}: {said}"), lines
