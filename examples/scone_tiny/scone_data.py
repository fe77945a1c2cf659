"""The example's data steps: the text split by document, a BPE tokenizer trained on the
training text, then fgram (tokenize, choose S, build, index, annotate), and the windows
and f-grams the models train on. Each step is skipped when its output is there."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(REPO, "..", "shared", "corpora", "english-dev")
EOS = "<|endoftext|>"
GRID = "1K,2K,5K,10K,20K,50K,100K,200K,500K,1M,2M"
KINDS = ("baseline", "baseline_x2", "scone", "engram", "engram_counted")


def read_json(path: str):
    with open(path) as f:
        return json.load(f)


def log(msg: str) -> None:
    print(f"[scone_tiny {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fgram(*args: str, env: dict | None = None) -> str:
    """The `fgram` command, as a user runs it; its output, or the run stops. Where fgram
    is not installed beside this Python (a checkout on the path), ``python -m fgram``."""
    exe = os.path.join(os.path.dirname(sys.executable), "fgram")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "fgram"]
    out = subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if out.returncode:
        sys.exit(f"fgram {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return out.stdout


# ---- 1. data: text, split by document ---------------------------------------------


def write_jsonl_zst(path: str, texts: list[str]) -> None:
    import zstandard

    tmp = path + ".tmp"
    with open(tmp, "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as fh:
        for t in texts:
            fh.write((json.dumps({"text": t}, ensure_ascii=False) + "\n").encode())
    os.replace(tmp, path)


def split_of(n: int, seed: int = 0) -> np.ndarray:
    """Each document's split, by a seeded draw: 0 train, 1 dev (5%, inside train: only
    for choosing S), 2 validation (5%)."""
    u = np.random.default_rng(seed).random(n)
    return np.where(u < 0.05, 2, np.where(u < 0.10, 1, 0))


def make_data(args, out: str) -> None:
    folder = os.path.join(out, "data")
    if os.path.exists(os.path.join(folder, "val.jsonl.zst")):
        return
    os.makedirs(folder, exist_ok=True)
    if args.smoke:
        from fgram.pipeline.formats.synth import generate

        generate(os.path.join(folder, "gen"), 60_000, vocab=300, seed=1, fmt="text", files=1)
        import zstandard

        with zstandard.open(os.path.join(folder, "gen", "part-00000.jsonl.zst"), "rt") as fh:
            texts = [json.loads(line)["text"] for line in fh]
    else:
        from tokenizers import Tokenizer

        if not os.path.exists(os.path.join(args.corpus, "tokens.bin")):
            sys.exit(f"{args.corpus}: no tokens.bin here (the english-dev corpus; --corpus)")
        olmo = Tokenizer.from_file(os.path.join(args.corpus, "..", "tokenizer.json"))
        ids = np.fromfile(os.path.join(args.corpus, "tokens.bin"), dtype=np.uint16)
        ends = np.flatnonzero(ids == 0)
        starts = np.concatenate([[0], ends[:-1] + 1])
        texts = olmo.decode_batch([ids[s:e].tolist() for s, e in zip(starts, ends, strict=True)])
    which = split_of(len(texts))
    for name, code in (("train", 0), ("dev", 1), ("val", 2)):
        write_jsonl_zst(
            os.path.join(folder, f"{name}.jsonl.zst"),
            [t for t, w in zip(texts, which, strict=True) if w == code],
        )
    log(
        f"data: {len(texts)} documents -> train {np.sum(which == 0)}, dev {np.sum(which == 1)}, "
        f"val {np.sum(which == 2)}"
    )


# ---- 2. a BPE tokenizer trained on the train text --------------------------------


def make_tokenizer(args, out: str) -> str:
    path = os.path.join(out, "tokenizer", "tokenizer.json")
    if os.path.exists(path):
        return path
    import zstandard
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    def texts():
        for name in ("train", "dev"):  # the training text (dev is part of it)
            with zstandard.open(os.path.join(out, "data", f"{name}.jsonl.zst"), "rt") as fh:
                for line in fh:
                    yield json.loads(line)["text"]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts(), trainer)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tok.save(path)
    with open(os.path.join(os.path.dirname(path), "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": EOS}, f)
    log(f"tokenizer: BPE, {tok.get_vocab_size()} tokens")
    return path


# ---- 3. fgram: tokenize, choose S, build, index, annotate -------------------------


def engine(args) -> list[str]:
    return ["--engine", "local"] if args.smoke else []


def run_fgram(args, out: str, tok: str) -> dict:
    shards = os.path.join(out, "shards")
    for name in ("train", "dev", "val"):
        if not os.path.exists(os.path.join(shards, name, "_SUCCESS")):
            fgram(
                "tokenize",
                os.path.join(out, "data", f"{name}.jsonl.zst"),
                "-o",
                os.path.join(shards, name),
                "--tokenizer",
                tok,
                "--format",
                "bin",
                *engine(args),
            )
    train = [os.path.join(shards, "train"), os.path.join(shards, "dev")]
    choice = os.path.join(out, "choose_s.json")
    if not os.path.exists(choice):
        # S from the coverage of the dev text by a table of the rest of train: every
        # size of the grid from one table (fgram coverage --sizes), never the validation
        probe = os.path.join(out, "choose_s")
        fgram("build", probe, train[0], "-K", str(args.max_len), "--overwrite", *engine(args))
        fgram("index", probe, "--overwrite")
        grid = args.grid
        curve = json.loads(
            fgram("coverage", probe, train[1], "--sizes", grid, "--json", *engine(args))
        )["details"]["coverage"]["by_size"]  # the run's result (docs/formats.md)
        fgram(
            "report",
            probe,
            "-o",
            os.path.join(out, "choose_s.html"),
            "--heldout",
            train[1],
            "--sizes",
            grid,
            "--tokenizer",
            tok,
            "--overwrite",
            *engine(args),
        )
        size = args.size or pick_size(curve, args.min_gain)
        with open(choice, "w") as f:
            json.dump({"size": size, "rule": rule(args), "curve": curve}, f, indent=2)
    size = read_json(choice)["size"]
    table = os.path.join(out, "fgrams")
    if not os.path.exists(os.path.join(table, "index", "index.json")):
        fgram(
            "build",
            table,
            *train,
            "-K",
            str(args.max_len),
            "-S",
            str(size),
            "--overwrite",
            *engine(args),
        )
        fgram("index", table, "--overwrite")
        fgram(
            "report",
            table,
            "-o",
            os.path.join(out, "fgrams.html"),
            "--tokenizer",
            tok,
            "--overwrite",
        )
    tags = {}
    for name in ("train", "dev", "val"):  # a tags folder each: their shards' names are alike
        tags[name] = os.path.join(out, "tags", name)
        if not os.path.exists(os.path.join(tags[name], "_SUCCESS")):
            fgram(
                "annotate",
                table,
                os.path.join(shards, name),
                "-o",
                tags[name],
                "--overwrite",
                *engine(args),
            )
    log(f"fgram: S = {size}, table and tags ready")
    return {"table": table, "tags": tags, "size": size}


def canonical_table(args, out: str) -> str:
    """A table of the training text's canonical n-grams of 2..K tokens at fgram's default
    cutoff (`fgram build --canonical`): the Engram audit's, and the counted Engram's exact
    rows. Made again when K changes."""
    shards = os.path.join(out, "shards")
    table = os.path.join(out, "fgrams-canonical")
    manifest = os.path.join(table, "manifest.json")
    if not os.path.exists(manifest) or read_json(manifest)["config"]["max_len"] != args.max_len:
        fgram("build", table, os.path.join(shards, "train"), os.path.join(shards, "dev"),
              "--canonical", "-K", str(args.max_len), "--overwrite", *engine(args))  # fmt: skip
    return table


def engram_audit(args, out: str, config) -> dict:
    """How the Engram arm's buckets collide on the training text (`fgram engram-audit` of
    its configuration ``config``, over a table of the text's canonical n-grams of 2..K
    tokens at fgram's default cutoff, `fgram build --canonical`): per order, the table's
    share of the positions, and the share of its occurrences whose bucket also holds a
    more frequent n-gram, in a head (mean, min, max) and in every head at once."""
    path = os.path.join(out, "engram_audit.json")
    settings = dataclasses.asdict(config)
    kept = read_json(path) if os.path.exists(path) else {}
    if kept.get("config") == settings:
        return kept["orders"]
    table = canonical_table(args, out)
    toml = os.path.join(out, "engram.toml")
    with open(toml, "w") as f:  # ints and lists of ints: JSON's spelling is TOML's
        f.writelines(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    full = json.loads(fgram("engram-audit", table, "--engram", toml, "--json"))
    (layer,) = full["layers"].values()  # the arm's one Engram layer
    res = {}
    for n, order in full["orders"].items():
        shares = [h["collided_share"] for h in layer[n]["heads"]]
        res[n] = {
            "coverage": order["coverage"],
            "collided_share": float(np.mean(shares)),
            "collided_min": min(shares),
            "collided_max": max(shares),
            "all_heads_share": layer[n]["all_heads"]["collided_share"],
        }
    with open(path + ".tmp", "w") as f:  # the settings it was made for: redone for others
        json.dump({"config": settings, "orders": res}, f, indent=2)
    os.replace(path + ".tmp", path)
    log("engram audit: " + ", ".join(f"order {n} {100 * r['collided_share']:.2f}%"
                                     for n, r in res.items()))  # fmt: skip
    return res


def rule(args) -> str:
    return (
        f"the smallest S of the grid past which doubling S adds less than {args.min_gain:g} "
        "points of matched dev positions"
    )


def pick_size(curve: list[dict], min_gain: float) -> int:
    """The smallest size after which the matched share grows by less than ``min_gain``
    percentage points per doubling of S (the knee of the coverage curve)."""
    matched = [(c["size"], 100 * (1 - c["share_unmatched"])) for c in curve]
    for (s0, m0), (s1, m1) in itertools.pairwise(matched):
        if (m1 - m0) / max(np.log2(s1 / s0), 1e-9) < min_gain:
            return s0
    return matched[-1][0]


# ---- 4. the windows and f-grams a model trains on -----------------------------------


def windows(tags: str, seq_len: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(tokens [n, seq_len + 1], f-gram ids [n, seq_len + 1]) from `training_sequences`."""
    from fgram import training_sequences

    toks, fids = [], []
    for t, f, _ in training_sequences(tags, seq_len=seq_len + 1):
        toks.append(t.astype(np.int32))
        fids.append(f.astype(np.int32))
        if limit and len(toks) >= limit:
            break
    return np.stack(toks), np.stack(fids)


def fgram_arrays(table: str, max_len: int):
    """Every f-gram's tokens [S, K] (right-padded with 0) and length [S], by id."""
    import pyarrow.compute as pc

    from fgram import open_table, table_dataset

    loc, manifest = open_table(table)
    t = table_dataset(loc, manifest).to_table(columns=["fgram_id", "tokens"]).sort_by("fgram_id")
    lengths = pc.list_value_length(t.column("tokens")).to_numpy().astype(np.int64)
    flat = pc.list_flatten(t.column("tokens")).to_numpy().astype(np.int64)
    out = np.zeros((len(lengths), max_len), np.int64)
    out[np.arange(max_len)[None, :] < lengths[:, None]] = flat
    return out, lengths
