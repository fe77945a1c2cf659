from __future__ import annotations

import json
import os
import struct

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from fgram.jobs.table import run_build
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.tables.versions import open_table, table_dataset

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # what the tests share (on PYTHONPATH)
REPO = os.path.dirname(os.path.dirname(SUPPORT))


def write_parquet(
    path: str, docs: list[list[int]], rows_per_group: int = 3, column: str = "tokens"
) -> str:
    table = pa.table(
        {
            "doc_id": pa.array(range(len(docs)), pa.int64()),
            column: pa.array(docs, pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path, row_group_size=max(1, rows_per_group))
    return path


def write_bin(path: str, docs: list[list[int]], sep: int, dtype=np.uint16) -> str:
    flat: list[int] = []
    for i, d in enumerate(docs):
        if i:
            flat.append(sep)
        flat.extend(d)
    np.asarray(flat, dtype=dtype).tofile(path)
    return path


def random_corpus(path: str, tokens: int) -> tuple[str, list[list[int]]]:
    """A flat uint16 shard (separator 0) of about ``tokens`` tokens: documents of random
    ids below 60,000 (nearly every bigram distinct, so a pass writes several times the
    bytes per token of real text) with a few phrases repeated in them; (path, docs)."""
    rng = np.random.default_rng(7)
    phrases = [rng.integers(1, 60_000, size=5).tolist() for _ in range(40)]
    docs, n = [], 0
    while n < tokens:
        doc = rng.integers(1, 60_000, size=int(rng.integers(50, 400))).tolist()
        for _ in range(int(rng.integers(0, 4))):
            at = int(rng.integers(0, len(doc)))
            doc[at:at] = phrases[int(rng.integers(0, len(phrases)))]
        docs.append(doc)
        n += len(doc) + 1
    return write_bin(path, docs, 0), docs


def build(spark, inputs, out, **kw) -> dict:
    cfg = BuildConfig(inputs=[str(i) for i in inputs], output=str(out), **kw)
    return run_build(cfg, spark=spark)


def read_table(out) -> pa.Table:
    return ds.dataset(os.path.join(str(out), "fgrams"), format="parquet").to_table()


def result(out) -> list[tuple[tuple[int, ...], int]]:
    t = read_table(out)
    ids = t.column("fgram_id").to_pylist()
    assert ids == list(range(len(ids))), "fgram_id must be 0..n-1 in file order"
    return [(tuple(r["tokens"]), r["count"]) for r in t.to_pylist()]


def manifest(out) -> dict:
    with open(os.path.join(str(out), "manifest.json")) as fh:
        return json.load(fh)


def tags_read(tags, n: int) -> tuple[list, list, list]:
    """(tokens, fgram ids, match lengths) of a tags output, as `training_sequences` gives
    them in one sequence of all ``n`` tokens."""
    import fgram

    (tokens, fid, mlen), *rest = fgram.training_sequences(tags, n, drop_last=False)
    assert rest == []
    return tokens.tolist(), fid.tolist(), mlen.tolist()


def like_parquet(tmp, inputs, docs: list[list[int]], unit: int, **read) -> None:
    """The table of ``inputs`` (K = 4, count >= 2; ``read``: their reading options)
    equals the oracle's and the Parquet build's of the same ``docs`` (totals too);
    their tags (annotate, read back by training_sequences) are the Parquet input's."""
    from oracle import select

    import fgram

    kw = dict(max_len=4, min_count=2, engine="local", unit_tokens=unit)
    build(None, inputs, tmp / "t", **kw, **read)
    pq = write_parquet(str(tmp / "same.parquet"), docs, rows_per_group=2)
    build(None, [pq], tmp / "p", **kw)
    want = select(docs, 4, 2, None)
    assert result(tmp / "t") == result(tmp / "p") == want
    assert manifest(tmp / "t")["totals"] == manifest(tmp / "p")["totals"]
    if not want:
        return
    fgram.index(tmp / "t")
    fgram.annotate(tmp / "t", inputs, tmp / "tags", engine="local", unit_tokens=unit, **read)
    fgram.annotate(tmp / "t", [pq], tmp / "ptags", engine="local", unit_tokens=unit)
    n = sum(map(len, docs))
    got = tags_read(tmp / "tags", n)
    assert got == tags_read(tmp / "ptags", n)
    assert got[0] == [t for d in docs for t in d] and max(got[2]) > 1


def wait_for_files(pattern: str, proc, seconds: float, what: str) -> None:
    """Poll until a file matches ``pattern`` (a glob) while ``proc`` runs: how a test
    catches a run in the middle of a pass to kill it there."""
    import glob
    import time

    deadline = time.time() + seconds
    while not glob.glob(pattern):
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.time() < deadline, f"{what} never came"
        time.sleep(0.01)


def interrupted_run(cmd, env, pattern: str, what: str, act, seconds: float = 240, **kw):
    """Run ``cmd`` in a process group of its own, wait for a file matching ``pattern``
    (`wait_for_files`), then ``act(proc)`` (a signal to it or to one of its processes);
    returns (the process, ended, and its stderr). The group is killed if it is still
    there."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, text=True, stderr=subprocess.PIPE, **kw
    )
    try:
        wait_for_files(pattern, proc, seconds, what)
        act(proc)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, err


def said(stderr: str) -> list[str]:
    """The lines of a command's stderr that are not progress lines (`progress.PREFIX`)."""
    from fgram.jobs.progress import PREFIX

    return [line for line in stderr.splitlines() if not line.startswith(PREFIX)]


# a few documents with repeats, boundaries and a one-token document: the commands' corpus
SMALL_DOCS = [
    [1, 2, 3, 1, 2, 3, 4],
    [2, 3, 1, 2, 3],
    [5, 1, 2, 3, 1, 2],
    [7],
    [1, 2, 3, 4, 1, 2],
] * 4


def megatron(prefix, docs, dtype=np.uint16, code=8, modes=False):
    """An IndexedDataset as Megatron-core's builder writes it: ``docs`` is a list of
    documents, each a list of sequences (token lists)."""
    lengths, pointers, doc_index, at = [], [], [0], 0
    with open(f"{prefix}.bin", "wb") as f:
        for doc in docs:
            for seq in doc:
                a = np.asarray(seq, dtype)
                f.write(a.tobytes())
                lengths.append(len(a))
                pointers.append(at)
                at += a.nbytes
            doc_index.append(len(lengths))
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(doc_index)))
        f.write(np.asarray(lengths, np.int32).tobytes())
        f.write(np.asarray(pointers, np.int64).tobytes())
        f.write(np.asarray(doc_index, np.int64).tobytes())
        if modes:
            f.write(np.zeros(len(lengths), np.int8).tobytes())
    return f"{prefix}.bin"


def remote_result(uri: str, storage: dict | None = None):
    loc, manifest = open_table(uri, storage)
    t = table_dataset(loc, manifest).to_table().sort_by("fgram_id")
    assert t.column("fgram_id").to_pylist() == list(range(t.num_rows))
    return [(tuple(r["tokens"]), r["count"]) for r in t.to_pylist()]
