"""Text to tokens and text to table at scale, on a folder of `.jsonl.zst` files (a
document per line, its text in ``"text"``), such as the Debian source corpus's text
(`python bench/debian_corpus.py bench/out/debian` makes ``bench/out/debian/text``).

    python bench/bench_tokenize_text.py bench/out/debian/text [--rounds 2] [--size 10000000]
        [--parts tokenize build]

In one run, alternated (the order flipped every round):

- tokenize: `encode_batch` alone (the texts in memory, `Tokenizer.encode_batch` in
  batches of 1024, its threads on every core; only the encode calls are timed)
  against `fgram tokenize --format bin` (auto backend: reads, decompresses, parses,
  proves the backend, encodes, writes; the JVM's start included). The shards' bytes
  must equal the baseline's ids, each document followed by the separator.
- build: `fgram build TABLE TEXT --tokenizer` against `fgram build TABLE TOKENS` of
  the shards that tokenize wrote, the same options (``-S``, K = 5, min-count 5).
- stages: each stage of one file's task alone, one process (read and decompress,
  parse JSON with orjson, encode with the fast backend, write the shard).

Records go to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402
from bench_tokenize import FGRAM, run, stage_times, tokenize  # noqa: E402

TOKENIZER = os.path.join(HERE, "..", "..", "shared", "corpora", "tokenizer.json")


def read_texts(files: list[str]) -> list[str]:
    """Every document's text, in the order fgram numbers them (files sorted, lines)."""
    import orjson
    import zstandard

    texts: list[str] = []
    for path in files:
        with open(path, "rb") as f:
            body = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
        texts += [orjson.loads(line)["text"] for line in body.splitlines() if line.strip()]
    return texts


def baseline(texts: list[str], tok_path: str, sep: int) -> tuple[float, int, str]:
    """Seconds in `encode_batch` calls, tokens, and the sha256 of the ids as flat uint16
    shards hold them (each document followed by ``sep``; made outside the clock)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tok_path)
    digest = hashlib.sha256()
    spent, n = 0.0, 0
    for at in range(0, len(texts), 1024):
        t0 = time.perf_counter()
        encoded = tok.encode_batch(texts[at : at + 1024], add_special_tokens=False)
        spent += time.perf_counter() - t0
        for e in encoded:
            ids = np.asarray(e.ids + [sep], np.uint16)
            n += len(ids) - 1
            digest.update(ids.tobytes())
    return spent, n, digest.hexdigest()


def shards_digest(out: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(out, "shards", "*.bin"))):
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("text", help="a folder of .jsonl.zst files")
    ap.add_argument("--tokenizer", default=TOKENIZER)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", default="10000000", help="the builds' -S")
    ap.add_argument("--engine", default="spark", help="the builds' --engine (default: spark)")
    ap.add_argument("--work", default=os.path.join(HERE, "out", "tokenize-text"))
    ap.add_argument(
        "--parts", nargs="+", default=["tokenize", "build"], choices=["tokenize", "build"]
    )
    args = ap.parse_args()
    tok_path = os.path.abspath(args.tokenizer)
    args.text, args.work = os.path.abspath(args.text), os.path.abspath(args.work)
    files = sorted(glob.glob(os.path.join(args.text, "*.jsonl.zst")))
    out, table = os.path.join(args.work, "tokens"), os.path.join(args.work, "table")
    fgram_tokenize = tokenize(args.text, out, tok_path)
    rows: list[dict] = []
    if "tokenize" in args.parts:
        rows += tokenize_part(args, files, tok_path, fgram_tokenize, out)
    elif not os.path.exists(os.path.join(out, "_SUCCESS")):
        run(fgram_tokenize)  # the shards the build from tokens reads
    if "build" in args.parts:
        rows += build_part(args, tok_path, out, table)
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        for x in rows:
            f.write(json.dumps({"bench": "tokenize_text", "machine": machine(), **x}) + "\n")


def tokenize_part(args, files: list[str], tok_path: str, fgram_tokenize, out: str) -> list[dict]:
    """`fgram tokenize` against `encode_batch` alone, alternated; then one file's stages."""
    from fgram.pipeline.text.tokenizer import load_spec

    rows: list[dict] = []
    texts = read_texts(files)
    sep = load_spec(tok_path).eos_id  # the separator of flat shards (tokenize's default)
    for r in range(args.rounds):
        for case in ("fgram tokenize", "encode_batch alone")[:: 1 if r % 2 == 0 else -1]:
            if case == "fgram tokenize":
                wall, peak = run(fgram_tokenize)
                with open(os.path.join(out, "manifest.json")) as f:
                    m = json.load(f)
                tokens, digest = m["tokens"], shards_digest(out)
                assert m["doc_sep"] == sep, m["doc_sep"]
                rows.append(
                    {
                        "case": case,
                        "round": r,
                        "wall": wall,
                        "tokens": tokens,
                        "backend": m["tokenizer"].get("backend"),
                        "peak_task_rss": peak,
                        "sha256": digest,
                    }
                )
            else:
                wall, tokens, digest = baseline(texts, tok_path, sep)
                rows.append(
                    {"case": case, "round": r, "wall": wall, "tokens": tokens, "sha256": digest}
                )
            print(f"{case:22s} {wall:7.2f} s {tokens / wall / 1e6:6.2f} M tokens/s", flush=True)
    base = {x["round"]: x for x in rows if x["case"] == "encode_batch alone"}
    for x in rows:
        if x["case"] == "fgram tokenize" and x["round"] in base:
            b = base[x["round"]]
            x["speedup"] = b["wall"] / x["wall"]
            x["identical"] = b["sha256"] == x["sha256"]
            print(f"round {x['round']}: {x['speedup']:.2f}x, ids identical: {x['identical']}")
    del texts
    import orjson

    stages = stage_times(files[0], tok_path, orjson.loads, ("fastokens",))
    print("stages of one file alone:", {k: round(v, 3) for k, v in stages.items()})
    rows.append({"case": "stages", "file": files[0], "stages": stages})
    return rows


def build_part(args, tok_path: str, out: str, table: str) -> list[dict]:
    """`fgram build` from the text against from its tokens, alternated."""
    rows: list[dict] = []
    build = [*FGRAM, "build", table, "-S", args.size, "--overwrite", "--engine", args.engine]
    for r in range(args.rounds):
        for how in ("text", "tokens")[:: 1 if r % 2 == 0 else -1]:
            src = [args.text, "--tokenizer", tok_path] if how == "text" else [out]
            wall, _ = run([*build, *src])
            rows.append({"case": f"build from {how}", "round": r, "wall": wall})
            print(f"build from {how}: {wall:.1f} s", flush=True)
    for r in range(args.rounds):
        walls = {x["case"]: x["wall"] for x in rows if x.get("round") == r}
        print(
            f"round {r}: build from text / from tokens "
            f"{walls['build from text'] / walls['build from tokens']:.3f}"
        )
    return rows


if __name__ == "__main__":
    main()
