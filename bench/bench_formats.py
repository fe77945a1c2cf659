"""Reading speed of each token format: the same documents written as a flat ``.bin``
(separator 0), a Megatron indexed dataset (sequences of at most 2048 tokens, documents
in its index), a datatrove ``.ds``, a Hugging Face ``save_to_disk`` Arrow stream and an
MDS dataset (llm-foundry's windows of 2048, EOS 0 in the stream), built in alternated
rounds; each format's time
as a ratio to the flat build of the same round.

    python bench/bench_formats.py /tmp/bench/c100/part-00000.bin --rounds 2

The corpus: a uint16 ``.bin`` whose documents are separated by token 0 (``fgram synth``
or english-dev's ``tokens.bin``). Checks that every format's table equals the flat
one's, prints a markdown table and appends the records to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402

SEQUENCE = 2048  # Megatron: a document cut into sequences of at most this many tokens


def documents(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the tokens without separators, each document's length)."""
    seps = np.flatnonzero(tokens == 0)
    bounds = np.concatenate([[-1], seps, [len(tokens)]])
    return tokens[tokens != 0], np.diff(bounds) - 1


def write_megatron(folder: str, body: np.ndarray, lengths: np.ndarray) -> None:
    per_doc = np.maximum(-(-lengths // SEQUENCE), 1)
    seq_doc = np.repeat(np.arange(len(lengths)), per_doc)
    first = np.concatenate([[0], np.cumsum(per_doc)[:-1]])
    within = np.arange(len(seq_doc)) - first[seq_doc]
    seq_len = np.minimum(lengths[seq_doc] - within * SEQUENCE, SEQUENCE).clip(0)
    pointers = np.concatenate([[0], np.cumsum(seq_len)[:-1]]) * 2
    doc_index = np.concatenate([[0], np.cumsum(per_doc)])
    body.astype("<u2").tofile(os.path.join(folder, "corpus_text_document.bin"))
    with open(os.path.join(folder, "corpus_text_document.idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(seq_len), len(doc_index)))
        for arr, dt in ((seq_len, "<i4"), (pointers, "<i8"), (doc_index, "<i8")):
            f.write(arr.astype(dt).tobytes())


def write_datatrove(folder: str, body: np.ndarray, lengths: np.ndarray) -> None:
    path = os.path.join(folder, "00000_tokens.ds")
    body.astype("<u2").tofile(path)
    np.cumsum(lengths).astype("<u8").tofile(path + ".index")
    with open(path + ".metadata", "w") as f:
        f.write(f"bench|2\n{len(body)}")


def write_arrow(folder: str, body: np.ndarray, lengths: np.ndarray) -> None:
    """As ``datasets``' ``save_to_disk`` writes it: an Arrow stream of 1,000-row record
    batches, ``input_ids`` list<int32> (shards of at most 500 MB)."""
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(body.astype(np.int32)))
    table = pa.table({"input_ids": ids})
    shards = max(1, -(-len(body) * 4 // 500_000_000))
    cuts = np.linspace(0, len(lengths), shards + 1).astype(int)
    for i in range(shards):
        name = os.path.join(folder, f"data-{i:05d}-of-{shards:05d}.arrow")
        part = table.slice(cuts[i], cuts[i + 1] - cuts[i])
        with pa.OSFile(name, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for batch in part.to_batches(max_chunksize=1000):
                w.write_batch(batch)


MDS_WINDOW = 2048  # llm-foundry's concat_tokens windows
MDS_LIMIT = 1 << 26  # MDSWriter's default size_limit (64 MB)


def write_mds(folder: str, tokens: np.ndarray) -> None:
    """As llm-foundry's ``concat_tokens`` writes it: the stream (EOS 0 in place) in
    windows of 2048 as ``ndarray:int32`` (a size, the shape byte and uint16 shape, the
    values), shards of at most 64 MB; the last window shorter (theirs drops it)."""
    n = len(tokens) // MDS_WINDOW * MDS_WINDOW
    row = np.dtype([("size", "<u4"), ("shape", "u1"), ("n", "<u2"), ("v", "<i4", MDS_WINDOW)])
    rows = np.zeros(n // MDS_WINDOW, row)
    rows["size"], rows["shape"], rows["n"] = 3 + 4 * MDS_WINDOW, (1 << 2) | 1, MDS_WINDOW
    rows["v"] = tokens[:n].reshape(-1, MDS_WINDOW)
    samples = [r.tobytes() for r in np.array_split(rows, max(1, -(-rows.nbytes // MDS_LIMIT)))]
    rest = tokens[n:].astype("<i4")
    if len(rest):
        shape = np.asarray([len(rest)], "<u2").tobytes()
        samples.append(np.uint32(3 + rest.nbytes).tobytes() + bytes([5]) + shape + rest.tobytes())
    enc = {"column_encodings": ["ndarray:int32"], "column_names": ["tokens"]}
    config = enc | {"column_sizes": [None], "compression": None, "format": "mds"}
    config |= {"hashes": [], "size_limit": MDS_LIMIT, "version": 2}
    blob = json.dumps(config, sort_keys=True).encode()
    shards = []
    for i, data in enumerate(samples):
        count = len(data) // row.itemsize if i < len(samples) - 1 or not len(rest) else 1
        size = row.itemsize if count * row.itemsize == len(data) else len(data)
        offsets = np.arange(count + 1, dtype=np.int64) * size + 4 + 4 * (count + 1) + len(blob)
        raw = np.uint32(count).tobytes() + offsets.astype("<u4").tobytes() + blob + data
        name = f"shard.{i:05d}.mds"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(raw)
        entry = {"raw_data": {"basename": name, "bytes": len(raw), "hashes": {}}}
        shards.append(config | entry | {"samples": count, "zip_data": None})
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)


WRITERS = {"megatron": write_megatron, "datatrove": write_datatrove, "arrow": write_arrow}


def build(fgram: str, out: str, inputs: list[str], size: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run([fgram, "build", out, *inputs, "--size", str(size), "-q"], check=True)
    return time.perf_counter() - t0


def table_bytes(out: str) -> bytes:
    import pyarrow.dataset as ds

    t = ds.dataset(os.path.join(out, "fgrams"), format="parquet").to_table()
    return t.sort_by("fgram_id").select(["tokens", "count"]).to_string().encode()


def ratio(times: list[float], flat: list[float]) -> list[float]:
    return [t / f for t, f in zip(times, flat, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="a uint16 .bin with separator 0")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--work", default=os.path.join(HERE, "out", "formats"))
    args = ap.parse_args()
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    os.makedirs(args.work, exist_ok=True)
    body, lengths = documents(np.fromfile(args.corpus, np.uint16))
    inputs = {"flat": [args.corpus, "--dtype", "uint16", "--doc-sep", "0"]}
    for name, write in WRITERS.items():
        folder = os.path.join(args.work, name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        write(folder, body, lengths)
        inputs[name] = [folder]
    folder = os.path.join(args.work, "mds")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    write_mds(folder, np.fromfile(args.corpus, np.uint16))
    inputs["mds"] = [folder, "--doc-sep", "0"]
    build(fgram, os.path.join(args.work, "warm"), inputs["flat"], 1000)  # numba's cache
    times: dict[str, list[float]] = {name: [] for name in inputs}
    names = list(inputs)
    for r in range(args.rounds):  # alternated: each round in another order
        for name in names if r % 2 == 0 else names[::-1]:
            out = os.path.join(args.work, f"t-{name}")
            times[name].append(build(fgram, out, inputs[name], args.size))
    same = {name: table_bytes(os.path.join(args.work, f"t-{name}")) for name in names}
    assert all(v == same["flat"] for v in same.values()), "a format's table differs"
    print(f"{len(body):,} tokens, {len(lengths):,} documents; rounds {args.rounds}")
    print("| format | seconds (each round) | ratio to flat (each round) |\n|---|---|---|")
    for name in names:
        ratios = ratio(times[name], times["flat"])
        print(f"| {name} | {', '.join(f'{t:.1f}' for t in times[name])} | "
              f"{', '.join(f'{x:.2f}' for x in ratios)} |")  # fmt: skip
    record = {
        "bench": "formats",
        "machine": machine(),
        "tokens": int(len(body)),
        "times": times,
        "median_ratio": {n: statistics.median(ratio(times[n], times["flat"])) for n in names},
    }
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
