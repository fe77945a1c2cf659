"""`fgram tokenize` against `encode_batch` alone on the same documents, in one run,
alternated; a task's peak memory; and `fgram build --tokenizer` against tokenize then
build.

    python bench/bench_tokenize.py ../shared/corpora/english-dev [--rounds 2]
        [--parts speed memory build]

The corpus's Parquet token shards are decoded back to text with its tokenizer and
written once as `.jsonl.zst` (one file, and 4), and as Parquet (`bench/out/english-text/`).
The baseline reads nothing: the texts are in memory and `Tokenizer.encode_batch`
(batches of 1024, the tokenizer's own threads on every core) encodes them. fgram
reads, decompresses, parses, encodes and writes flat shards.

- speed: tokens/s, MB/s and the ratio to the baseline, for Spark on 4 files (4 tasks:
  a tokenizer thread each, and with --threads 0 a thread per core each), on 1 file (one
  task: every core, and with --threads 1), Parquet, and --engine local.
- memory: the peak resident memory of any task's process, over one file 1x and 4x as
  large (a compressed file is one task): bounded by the batch, not the file.
- build: `fgram build TABLE TEXT --tokenizer` against `fgram tokenize` + `fgram build`
  (two commands), alternated, -S 1M.
- backend: the corpus ``--copies`` times over (4 files): `encode_batch` alone against
  `fgram tokenize` with the fast backend (auto) and with `--tokenizer-backend
  tokenizers`, their shards compared byte for byte; each stage of one task alone; and
  `fgram build --tokenizer` of the text against `fgram build` of the same tokens.

Records go to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

import psutil
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


def run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds of a command, and the peak resident memory of any one of its Python
    workers (a task's process: the JVM and the driver left out), sampled every 0.1 s."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd="/tmp")
    top, me = 0, psutil.Process(proc.pid)
    while proc.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            for p in me.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if "python" in p.name() or "fgram" in p.name():  # not the JVM
                        top = max(top, p.memory_info().rss)
        time.sleep(0.1)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}")
    return time.perf_counter() - t0, top


FGRAM = [os.path.join(os.path.dirname(sys.executable), "fgram"), "-q"]


def tokenize(inputs: str, out: str, tok_path: str, *extra: str) -> list[str]:
    """The command (its output replaced: --overwrite)."""
    return [
        *FGRAM,
        "tokenize",
        inputs,
        "-o",
        out,
        "--tokenizer",
        tok_path,
        "--format",
        "bin",
        "--unit-bytes",
        "16M",
        "--overwrite",
        *extra,
    ]


def split(texts: list[str], folder: str, parts: int, copies: int = 1) -> str:
    """The texts as ``parts`` .jsonl.zst files (each text ``copies`` times), made once."""
    import zstandard

    if not os.path.isdir(folder):
        os.makedirs(folder + ".tmp", exist_ok=True)
        for i in range(parts):
            body = "".join(json.dumps({"text": t}) + "\n" for t in texts[i::parts]).encode()
            with open(os.path.join(folder + ".tmp", f"part-{i}.jsonl.zst"), "wb") as f:
                f.write(zstandard.ZstdCompressor(level=3).compress(body * copies))
        os.replace(folder + ".tmp", folder)
    return folder


def speed(texts, folder, tok_path, rounds) -> list[dict]:
    mb = sum(len(t.encode()) for t in texts) / 2**20
    four = split(texts, os.path.join(folder, "jsonl-4"), 4)
    one, par = os.path.join(folder, "jsonl"), os.path.join(folder, "parquet")
    out = os.path.join(folder, "tokens")
    cases = [
        ("encode_batch alone", None),
        ("Spark, 4 jsonl.zst", tokenize(four, out, tok_path)),
        ("Spark, 4 jsonl.zst, --threads 0", tokenize(four, out, tok_path, "--threads", "0")),
        ("Spark, 1 jsonl.zst (one task)", tokenize(one, out, tok_path)),
        ("Spark, 1 jsonl.zst, --threads 1", tokenize(one, out, tok_path, "--threads", "1")),
        ("Spark, Parquet", tokenize(par, out, tok_path)),
        ("local, 4 jsonl.zst", tokenize(four, out, tok_path, "--engine", "local")),
    ]
    rows = []
    for r in range(rounds):
        for name, cmd in cases if r % 2 == 0 else cases[::-1]:
            if cmd is None:
                wall, tokens = baseline(texts, tok_path)
                peak = psutil.Process().memory_info().rss
            else:
                wall, peak = run(cmd)
                with open(os.path.join(out, "manifest.json")) as f:
                    tokens = json.load(f)["tokens"]
            rows.append(
                {
                    "case": name,
                    "round": r,
                    "wall": wall,
                    "tokens": tokens,
                    "tokens_per_s": tokens / wall,
                    "mb_per_s": mb / wall,
                    "peak_task_rss": peak,
                }
            )
            print(
                f"{name:34s} {wall:7.2f} s {tokens / wall / 1e6:6.2f} M tokens/s "
                f"{mb / wall:6.1f} MB/s  task peak {peak / 2**20:5.0f} MiB",
                flush=True,
            )
    base = {r["round"]: r["tokens_per_s"] for r in rows if r["case"] == "encode_batch alone"}
    for row in rows:
        row["ratio"] = row["tokens_per_s"] / base[row["round"]]
    return rows


def memory(texts, folder, tok_path) -> list[dict]:
    """One task over one file (a compressed file is one task), the file 1x and 4x as big:
    the task's peak memory follows its batch, not its file."""
    rows = []
    for copies in (1, 4):
        src = split(texts, os.path.join(folder, f"jsonl-1x{copies}"), 1, copies)
        out = os.path.join(folder, "tokens")
        wall, peak = run(tokenize(src, out, tok_path))
        size = os.path.getsize(os.path.join(src, "part-0.jsonl.zst"))
        rows.append(
            {
                "case": f"one file, text x{copies}",
                "wall": wall,
                "file_bytes": size,
                "peak_task_rss": peak,
            }
        )
        print(
            f"one file x{copies} ({size / 2**20:.0f} MiB zst): {wall:.1f} s, "
            f"task peak {peak / 2**20:.0f} MiB",
            flush=True,
        )
    return rows


def build_from_text(texts, folder, tok_path, rounds) -> list[dict]:
    """`fgram build TABLE TEXT --tokenizer` against `fgram tokenize` then `fgram build`
    (two commands), alternated; the ratio is one command's time over the two's."""
    four = split(texts, os.path.join(folder, "jsonl-4"), 4)
    tok_out, table = os.path.join(folder, "tokens"), os.path.join(folder, "table")
    build = [*FGRAM, "build", table, "-S", "1000000", "--overwrite"]
    rows = []
    for r in range(rounds):
        for how in ("two", "one") if r % 2 == 0 else ("one", "two"):
            if how == "two":
                wall_t, _ = run(tokenize(four, tok_out, tok_path))
                wall_b, _ = run([*build, tok_out])
                wall = wall_t + wall_b
            else:
                wall, _ = run([*build, four, "--tokenizer", tok_path])
            rows.append({"case": f"build from text, {how} command(s)", "round": r, "wall": wall})
            print(f"{how} command(s): {wall:.1f} s", flush=True)
    two = sum(r["wall"] for r in rows if "two" in r["case"])
    one = sum(r["wall"] for r in rows if "one" in r["case"])
    print(f"one command / tokenize + build: {one / two:.3f}")
    return rows


def stage_times(
    path: str, tok_path: str, loads=json.loads, names=("fastokens", "tokenizers")
) -> dict[str, float]:
    """Where one file's task time goes, each stage alone, one process: reading and
    decompressing, JSON parsing (``loads``), encoding with each backend of ``names``,
    writing the flat shard (of the last backend's ids)."""
    import numpy as np
    import zstandard

    from fgram.pipeline.text import backends

    t: dict[str, float] = {}
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        body = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    t["read and decompress"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    texts = [loads(line)["text"] for line in body.splitlines() if line.strip()]
    t["parse JSON"] = time.perf_counter() - t0
    tok_json = open(tok_path).read()
    for name in names:
        b = backends.BACKENDS[name]
        tok = b.load(tok_json)
        t0 = time.perf_counter()
        parts = [b.encode(tok, texts[i : i + 1024], False) for i in range(0, len(texts), 1024)]
        t[f"encode ({b.name})"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    flat = np.concatenate([p[1] for p in parts]).astype(np.uint16)
    flat.tofile(os.path.join(HERE, "out", "stage-out.bin"))
    t["write the shard"] = time.perf_counter() - t0
    t["tokens"] = float(len(flat))
    return t


def backend_part(texts, folder, tok_path, rounds, copies) -> list[dict]:
    """The fast backend against the reference on the corpus ``copies`` times over (4
    files): `encode_batch` alone (in memory), `fgram tokenize` with each backend (the
    shards' bytes compared), each stage of a task alone; then `fgram build --tokenizer`
    from the text against `fgram build` of the same tokens."""
    many = split(texts, os.path.join(folder, f"jsonl-4x{copies}"), 4, copies)
    outs = {b: os.path.join(folder, f"tokens-{b}") for b in ("fastokens", "tokenizers")}
    cases = [
        ("encode_batch alone", None),
        ("fgram tokenize (auto: fastokens)", tokenize(many, outs["fastokens"], tok_path)),
        (
            "fgram tokenize --tokenizer-backend tokenizers",
            tokenize(many, outs["tokenizers"], tok_path, "--tokenizer-backend", "tokenizers"),
        ),
    ]
    rows = []
    every = texts * copies
    for r in range(rounds):
        for name, cmd in cases if r % 2 == 0 else cases[::-1]:
            if cmd is None:
                wall, tokens = baseline(every, tok_path)
            else:
                wall, _ = run(cmd)
                out = outs["fastokens" if "fastokens" in name else "tokenizers"]
                with open(os.path.join(out, "manifest.json")) as f:
                    m = json.load(f)
                tokens = m["tokens"]
                assert name.endswith(m["tokenizer"]["backend"]) or "auto" in name, m
            rows.append({"case": name, "round": r, "wall": wall, "tokens": tokens})
            print(f"{name:46s} {wall:7.2f} s {tokens / wall / 1e6:6.2f} M tokens/s", flush=True)
    base = {r["round"]: r["wall"] for r in rows if r["case"] == "encode_batch alone"}
    for row in rows:
        row["speedup"] = base[row["round"]] / row["wall"]
    names = sorted(os.listdir(os.path.join(outs["fastokens"], "shards")))
    same = all(
        open(os.path.join(outs["fastokens"], "shards", n), "rb").read()
        == open(os.path.join(outs["tokenizers"], "shards", n), "rb").read()
        for n in names
    )
    print(f"shards identical between the backends: {same} ({len(names)} files)")
    stages = stage_times(os.path.join(many, "part-0.jsonl.zst"), tok_path)
    print("stages of one file alone:", {k: round(v, 2) for k, v in stages.items()})
    rows.append({"case": "stages", "stages": stages, "identical": same})
    table, build = os.path.join(folder, "table"), [*FGRAM, "build", "-S", "1000000"]
    for r in range(rounds):
        order = ("text", "tokens") if r % 2 == 0 else ("tokens", "text")
        for how in order:
            src = [many, "--tokenizer", tok_path] if how == "text" else [outs["fastokens"]]
            wall, _ = run([*build, table, *src, "--overwrite"])
            rows.append({"case": f"build from {how}", "round": r, "wall": wall})
            print(f"build from {how}: {wall:.1f} s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parts", nargs="+", default=["speed", "memory", "build"])
    ap.add_argument("--copies", type=int, default=7, help="backend: the corpus this many times")
    args = ap.parse_args()
    folder = os.path.join(HERE, "out", "english-text")
    tok_path = os.path.abspath(os.path.join(args.corpus, "..", "tokenizer.json"))
    texts = prepare(args.corpus, folder)
    rows = []
    if "speed" in args.parts:
        rows += speed(texts, folder, tok_path, args.rounds)
        print("\n| case | round | wall s | M tokens/s | MB/s | task peak MiB | ratio |")
        print("|---|---|---|---|---|---|---|")
        for row in rows:
            print(
                f"| {row['case']} | {row['round']} | {row['wall']:.2f} "
                f"| {row['tokens_per_s'] / 1e6:.2f} | {row['mb_per_s']:.1f} "
                f"| {row['peak_task_rss'] / 2**20:.0f} | {row['ratio']:.2f} |"
            )
    if "memory" in args.parts:
        rows += memory(texts, folder, tok_path)
    if "build" in args.parts:
        rows += build_from_text(texts, folder, tok_path, args.rounds)
    if "backend" in args.parts:
        rows += backend_part(texts, folder, tok_path, args.rounds, args.copies)
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps({"bench": "tokenize", "machine": machine(), **row}) + "\n")


if __name__ == "__main__":
    main()
