"""A token format is one object behind `ShardFormat`: a new one is a subclass and a
line in the registry, and build, coverage and annotate (and the tags reader) take its
files with no other change."""

import os
import re

import numpy as np
import pyarrow.fs as pafs
import pytest
from helpers import result
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from oracle import select

import fgram
from fgram.pipeline.errors import InputError
from fgram.pipeline.formats import registry
from fgram.pipeline.formats.base import digest, mtime
from fgram.pipeline.formats.flat import FlatFormat, flat_blocks
from fgram.pipeline.formats.reading import ReadOptions, Shard, Unit


class OneDocumentU32(FlatFormat):
    """Raw little-endian uint32 tokens, one document per ``.u32`` file (no separator, no
    --dtype): the flat format's units, reading and tags, its own name and description."""

    name = "u32"
    extensions = (".u32",)

    def describe(self, fs, path, uri, info, opts):
        blocks = flat_blocks(fs, path, info.size)
        return Shard(
            uri=uri,
            format=self.name,
            size=info.size,
            mtime=mtime(info),
            dtype="<u4",
            n_items=info.size // 4,
            checksum=digest(info.size, blocks),
        )

    def read(self, shard, unit, opts, overlap, scratch=None):
        return super().read(shard, unit, ReadOptions(storage=opts.storage), overlap, scratch)


def _registered(monkeypatch):
    """The registry's one line, made in this process: the local engine's workers forked
    from it have it too (its clean workers, used once an object store has been, start
    from the registry file itself, so they are kept out here)."""
    import fgram.jobs.executors as executors

    fmt = OneDocumentU32()
    formats = (*registry.FORMATS, fmt)
    monkeypatch.setattr(registry, "FORMATS", formats)
    monkeypatch.setattr(registry, "BY_NAME", {f.name: f for f in formats})
    monkeypatch.setattr(executors, "object_store_used", lambda: False)
    return fmt


def test_the_registry_finds_formats_by_name_and_file_name(monkeypatch):
    assert registry.format_for("x/a.parquet").name == "parquet"
    assert registry.format_for("A.BIN").name == registry.format_for("a.npy").name == "flat"
    assert registry.format_for("a.u32") is None and not registry.token_file("a.u32")
    fmt = _registered(monkeypatch)
    assert registry.format_for("d/a.u32") is fmt and registry.token_file("d/a.u32")
    assert registry.format_of(Shard("a.u32", "u32", 8, None)) is fmt
    assert (
        registry.KNOWN == ".parquet, .arrow, .idx, .ds, .mds, .bin or .npy"
    )  # what an unknown file is told


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(st.lists(st.integers(1, 6), max_size=40), min_size=1, max_size=5),
    unit=st.integers(3, 50),
)
def test_a_new_format_builds_and_tags_like_the_oracle(tmp_path_factory, monkeypatch, docs, unit):
    assume(any(docs))  # an input without tokens is refused, as for every format
    _registered(monkeypatch)
    d = tmp_path_factory.mktemp("u32")
    (d / "corpus").mkdir()
    for i, doc in enumerate(docs):
        np.asarray(doc, "<u4").tofile(d / "corpus" / f"doc-{i}.u32")
    opts = dict(max_len=4, min_count=2, engine="local", unit_tokens=unit)
    fgram.build(d / "t", [d / "corpus"], **opts)
    rows = [(tuple(r["tokens"]), r["count"]) for r in fgram.show(d / "t", top=10**6)["top_fgrams"]]
    names = sorted(f"doc-{i}.u32" for i in range(len(docs)))  # the files in name order
    ordered = [docs[int(n[4:-4])] for n in names]
    assert rows == select(ordered, 4, 2, None)
    if not rows:
        return
    fgram.index(d / "t")
    m = fgram.annotate(d / "t", [d / "corpus"], d / "tags", engine="local", unit_tokens=unit)
    assert m["layout"]["u32"] == OneDocumentU32.tag_layout
    n = sum(map(len, ordered))
    (tokens, fid, mlen), *rest = fgram.training_sequences(d / "tags", n, drop_last=False)
    assert rest == [] and tokens.tolist() == [t for doc in ordered for t in doc]
    ids = {g: i for i, (g, _) in enumerate(rows)}
    want_len, want_id = [], []
    for doc in ordered:  # each position's longest f-gram ending there, inside its document
        for i in range(len(doc)):
            n_best = max((k for k in range(2, 5) if tuple(doc[max(i + 1 - k, 0) : i + 1]) in ids
                          and i + 1 >= k), default=1)  # fmt: skip
            want_len.append(n_best)
            want_id.append(ids[tuple(doc[i + 1 - n_best : i + 1])] if n_best > 1 else -1)
    assert mlen.tolist() == want_len and fid.tolist() == want_id


def test_a_units_tokens_come_from_its_format(tmp_path, monkeypatch):
    fmt = _registered(monkeypatch)
    path = tmp_path / "a.u32"
    np.asarray([5, 6, 7, 8, 9], "<u4").tofile(path)
    fs = pafs.LocalFileSystem()
    shard = fmt.describe(fs, str(path), str(path), fs.get_file_info(str(path)), ReadOptions())
    assert (shard.n_items, shard.dtype, shard.format) == (5, "<u4", "u32")
    stream = registry.read_unit(shard, Unit(0, 1, 3), ReadOptions(doc_sep=7), overlap=1)
    assert stream.tokens.tolist() == [6, 7, 8] and stream.limit == 2  # no separator here
    assert os.path.getsize(path) == shard.size


def _llmc_shard(path, docs, eot=50256, magic=20240520, version=None, count=None):
    """An llm.c / modded-nanogpt shard as their writers make it (dev/data/data_common.py
    write_datafile): 256 int32 of header (magic, version, token count), then the tokens;
    fineweb.py starts each document with the end-of-text token."""
    dtype = np.uint16 if magic == 20240520 else np.uint32
    toks = np.array([t for d in docs for t in [eot, *d]], dtype=dtype)
    header = np.zeros(256, np.int32)
    version = version or {20240520: 1, 20240801: 7}[magic]  # GPT-2's; Llama 3's
    header[:3] = magic, version, len(toks) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
    return str(path)


@pytest.mark.parametrize("magic", [20240520, 20240801])
def test_an_llmc_shard_is_read_past_its_header_in_its_width(tmp_path, magic):
    """The 1 KiB header is skipped and its magic names the width whatever --dtype says
    (read as tokens it would be 512 of them, silently); units split anywhere."""
    from helpers import build

    rng = np.random.default_rng(magic)
    docs = [list(rng.integers(0, 300, int(rng.integers(0, 60)))) for _ in range(40)]
    src = _llmc_shard(tmp_path / "fineweb_train_000001.bin", docs, eot=299, magic=magic)
    for dtype, unit in (("uint16", 97), ("uint32", 10**6)):
        out = tmp_path / f"t-{dtype}-{unit}"
        build(None, [src], out, dtype=dtype, doc_sep=299, min_count=2, max_len=4,
              unit_tokens=unit, engine="local")  # fmt: skip
        assert result(out) == select(docs, 4, 2, None)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (dict(version=3), "an llm.c shard header (magic 20240520) of version 3; known: 1"),
        (dict(count=999), "its llm.c header says 999 tokens"),
    ],
)
def test_an_llmc_header_that_does_not_parse_is_one_line_naming_the_file(tmp_path, change, says):
    from helpers import build

    src = _llmc_shard(tmp_path / "s.bin", [[1, 2, 3]] * 5, **change)
    with pytest.raises(InputError, match=re.escape(f"{src}: {says}")):
        build(None, [src], tmp_path / "t", doc_sep=50256, engine="local")
    assert not (tmp_path / "t").exists()


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), max_size=40), most=st.integers(1, 120))
def test_groups_are_cut_into_few_even_units_of_at_most_most(sizes, most):
    """Runs of row groups (record batches) cover every group once, in order, as many as
    ``most`` needs; each holds at most ``most`` items and one group more; 100M tokens of
    0.5M batches in 16M units: 6, not 7."""
    from fgram.pipeline.formats.base import group_ranges

    runs = group_ranges(sizes, most)
    assert [g for a, b in runs for g in range(a, b)] == list(range(len(sizes)))
    assert all(sum(sizes[a:b]) <= most + max(sizes[a:b]) for a, b in runs)
    assert len(runs) <= max(1, -(-sum(sizes) // most)) and bool(runs) == bool(sizes)
    assert len(group_ranges([512_000] * 196, 16 * 2**20)) == 6
