"""Side by side: `fgram tokenize` (Spark and --engine local) against `encode_batch` alone
on the same documents, in one run, alternated.

    python bench/bench_tokenize.py ../shared/corpora/english-dev [--rounds 2]

The corpus's Parquet token shards are decoded back to text with its tokenizer and
written once as `.jsonl.zst` and as Parquet (`bench/out/english-text/`). The baseline
reads nothing: the texts are in memory and `Tokenizer.encode_batch` (batches of 1024,
the tokenizer's own threads on every core) encodes them. fgram reads, decompresses,
parses, encodes and writes shards. Prints tokens/s, MB/s and the ratio to the
baseline, and appends the records to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402


def texts_of(corpus: str) -> list[str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(corpus, "..", "tokenizer.json"))
    table = ds.dataset(os.path.join(corpus, "parquet"), format="parquet").to_table()
    return tok.decode_batch(table.column("tokens").to_pylist(), skip_special_tokens=False)


def prepare(corpus: str, folder: str) -> list[str]:
    """The corpus as text: english.jsonl.zst and english.parquet (made once)."""
    import zstandard

    path = os.path.join(folder, "jsonl", "english.jsonl.zst")
    if not os.path.exists(path):
        texts = texts_of(corpus)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.makedirs(os.path.join(folder, "parquet"), exist_ok=True)
        body = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
        with open(path + ".tmp", "wb") as f:
            f.write(zstandard.ZstdCompressor(level=3).compress(body))
        os.replace(path + ".tmp", path)
        pq.write_table(
            pa.table({"text": texts}),
            os.path.join(folder, "parquet", "english.parquet"),
            row_group_size=4096,
        )
    import zstandard

    with open(path, "rb") as f:
        body = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    return [json.loads(line)["text"] for line in body.splitlines() if line.strip()]


def baseline(texts: list[str], tok_path: str) -> tuple[float, int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tok_path)
    t0 = time.perf_counter()
    n = 0
    for at in range(0, len(texts), 1024):
        n += sum(
            len(e.ids) for e in tok.encode_batch(texts[at : at + 1024], add_special_tokens=False)
        )
    return time.perf_counter() - t0, n


def fgram(inputs: str, out: str, tok_path: str, engine: str, fmt: str) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "fgram"),
        "-q",
        "tokenize",
        inputs,
        "-o",
        out,
        "--tokenizer",
        tok_path,
        "--engine",
        engine,
        "--format",
        fmt,
        "--unit-bytes",
        "16M",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd="/tmp")
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "manifest.json")) as f:
        return wall, json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    folder = os.path.join(HERE, "out", "english-text")
    tok_path = os.path.abspath(os.path.join(args.corpus, "..", "tokenizer.json"))
    texts = prepare(args.corpus, folder)
    mb = sum(len(t.encode()) for t in texts) / 2**20
    rows = []
    for r in range(args.rounds):
        cases = [
            ("encode_batch alone", None, None),
            ("fgram, Spark, jsonl.zst", "spark", "jsonl"),
            ("fgram, local, jsonl.zst", "local", "jsonl"),
            ("fgram, Spark, Parquet", "spark", "parquet"),
        ]
        if r % 2:
            cases = cases[::-1]
        for name, engine, src in cases:
            if engine is None:
                wall, tokens = baseline(texts, tok_path)
            else:
                wall, m = fgram(
                    os.path.join(folder, src),
                    os.path.join(folder, "tokens-" + engine),
                    tok_path,
                    engine,
                    "bin",
                )
                tokens = m["tokens"]
            rows.append(
                {
                    "case": name,
                    "round": r,
                    "wall": wall,
                    "tokens": tokens,
                    "tokens_per_s": tokens / wall,
                    "mb_per_s": mb / wall,
                }
            )
            print(
                f"{name:28s} {wall:7.2f} s {tokens / wall / 1e6:6.2f} M tokens/s "
                f"{mb / wall:6.1f} MB/s",
                flush=True,
            )
    base = {r["round"]: r["tokens_per_s"] for r in rows if r["case"] == "encode_batch alone"}
    print("\n| case | round | wall s | M tokens/s | MB/s | ratio to encode_batch |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        row["ratio"] = row["tokens_per_s"] / base[row["round"]]
        rate = row["tokens_per_s"] / 1e6
        print(
            f"| {row['case']} | {row['round']} | {row['wall']:.2f} | {rate:.2f} "
            f"| {row['mb_per_s']:.1f} | {row['ratio']:.2f} |"
        )
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps({"bench": "tokenize", "machine": machine(), **row}) + "\n")


if __name__ == "__main__":
    main()
