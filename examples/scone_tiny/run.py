"""SCONE at a small scale, end to end, on a CPU: fgram's outputs train a GPT with f-gram
embeddings and serve it from the f-gram store; the same GPT without them (baseline), a
deeper GPT of about twice its inference FLOPs (baseline_x2) and the same GPT with an
Engram module of as many table values as SCONE's store (engram) are trained the same
way. See README.md beside this file.

    python examples/scone_tiny/run.py                # the measured run (hours here)
    python examples/scone_tiny/run.py --smoke        # every arm on a tiny corpus, seconds
    python examples/scone_tiny/run.py --device cuda  # the same, on a GPU

Every step writes under --out and is skipped when its output is there (delete a step's
folder to redo it): data, tokenizer, shards, the choice of S, the table, tags, then per
model and seed a run folder, the embeddings, the evaluations and results.json. A finished
run (trained and evaluated) is also kept as one record in --records (for the measured
run, `results/` beside this file, committed): a run with a record is not trained again,
on this machine or another, and the results are made from the records.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(REPO, "..", "shared", "corpora", "english-dev")
EOS = "<|endoftext|>"
GRID = "1K,2K,5K,10K,20K,50K,100K,200K,500K,1M,2M"
KINDS = ("baseline", "baseline_x2", "scone", "engram")


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


# ---- 4. windows, models, training ---------------------------------------------------


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


def model_config(args, vocab: int, kind: str = "baseline", engram=None):
    """The main model of an arm (--layers, --dim, --heads): baseline_x2 is as deep as
    brings its computed inference FLOPs per token nearest twice the baseline's (10 layers
    for the default 4 at d = 256); engram carries its table sizes (`engram_setup`)."""
    from scone_model import GPT, Config

    if args.smoke:
        size = {"layers": 1, "dim": 64, "heads": 2, "fgram_layers": 1}
    else:
        size = {"layers": args.layers, "dim": args.dim, "heads": args.heads, "fgram_layers": 2}
    base = Config(vocab=vocab, seq_len=args.seq_len, max_len=args.max_len, **size)
    if kind == "baseline_x2":
        flops = GPT.flops_of(base)
        size["layers"] = min(
            range(size["layers"] + 1, 4 * size["layers"] + 2),
            key=lambda n: abs(GPT.flops_of(dataclasses.replace(base, layers=n)) - 2 * flops),
        )
    if kind == "engram" and engram is not None:
        size.update(engram["model"])
    return Config(vocab=vocab, seq_len=args.seq_len, max_len=args.max_len, **size)


def engram_setup(args, tok_path: str, table_rows: int) -> dict:
    """The Engram arm's configuration, in the demo's terms: orders 2..K, ``--engram-heads``
    heads, each order's concatenated width the model's d, before block 1 (the demo's
    first Engram layer: early, where a memory of local n-grams spares the blocks the
    work of composing them), pad id the end of text; the per-head table size chosen so
    that every table's rows x width together hold as many values as SCONE's store (its
    f-grams x d). Returns the config, its hashing and the model's fields."""
    from tokenizers import Tokenizer

    from fgram.engram import EngramConfig, EngramHashing, table_sizes

    main = model_config(args, 1)
    d, block = main.dim, min(1, main.layers - 1)
    orders, heads = args.max_len - 1, args.engram_heads
    per_head = max(2, table_rows // orders)  # orders x heads x per_head rows of d / heads
    cfg = EngramConfig(
        engram_vocab_size=[per_head] * orders,
        max_ngram_size=args.max_len,
        n_head_per_ngram=heads,
        layer_ids=[1],
        pad_id=Tokenizer.from_file(tok_path).token_to_id(EOS),
        seed=0,
    )
    sizes = tuple(p for order in table_sizes(cfg)[1] for p in order)
    return {
        "config": cfg,
        "hashing": EngramHashing(cfg, tok_path),
        "model": {
            "engram_layer": block,
            "engram_sizes": sizes,
            "engram_heads": heads,
            "engram_dim": d,
            "engram_max_n": args.max_len,
        },  # fmt: skip
        "values": sum(sizes) * (d // heads),
        "rows": sum(sizes),
    }


def make_model(kind: str, cfg, fg, engram=None):
    import torch
    from scone_model import GPT, EngramGPT, Scone

    if kind in ("baseline", "baseline_x2"):
        return GPT(cfg)
    if kind == "engram":
        return EngramGPT(cfg, engram["hashing"])
    return Scone(cfg, torch.from_numpy(fg[0]), torch.from_numpy(fg[1]))


def loss_of(model, toks: np.ndarray, fids: np.ndarray, batch: int = 32) -> float:
    """Mean next-token loss over windows, the f-gram rows from the f-gram model."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    total, n = 0.0, 0
    model.eval()
    with torch.inference_mode():
        for s in range(0, len(toks), batch):
            t = torch.from_numpy(toks[s : s + batch]).long().to(device)
            f = torch.from_numpy(fids[s : s + batch]).long().to(device)
            logits = model(t[:, :-1], f[:, :-1])
            total += F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1), reduction="sum"
            ).item()
            n += t[:, 1:].numel()
    model.train()
    return total / n


def optimizers(model, lr: float) -> list:
    """AdamW for the dense parameters; an Engram table's sparse rows by SparseAdam (only
    the rows a batch touched move, as a table held off the accelerator would)."""
    import torch

    sparse = [p for n, p in model.named_parameters() if n == "engram.table.weight"]
    dense = [p for n, p in model.named_parameters() if n != "engram.table.weight"]
    opts = [torch.optim.AdamW(dense, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)]
    if sparse:
        opts.append(torch.optim.SparseAdam(sparse, lr=lr, betas=(0.9, 0.95)))
    return opts


def save_atomically(obj, path: str) -> None:
    import torch

    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def train(args, kind: str, seed: int, data: dict, fg, folder: str, engram=None) -> dict:
    """Train one model; its checkpoint, curve and time in ``folder``. A killed run
    continues from its last checkpoint (every --checkpoint-every steps): the batches are
    the seed's, step by step, so the run is the one it would have been."""
    import torch
    import torch.nn.functional as F
    from scone_model import save

    done = os.path.join(folder, "train.json")
    if os.path.exists(done):
        return read_json(done)
    os.makedirs(folder, exist_ok=True)
    held = open(os.path.join(folder, ".lock"), "w")  # noqa: SIM115 (held while training)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"{folder}: another process is training this run") from None
    torch.manual_seed(seed)  # the same initial main model for every kind at a seed
    cfg = model_config(args, data["vocab"], kind, engram)
    model = make_model(kind, cfg, fg, engram).to(args.device)
    opts = optimizers(model, args.lr)
    dense = opts[0].param_groups[0]["params"]  # AdamW's: all but a sparse Engram table
    warm = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return args.lr * (step + 1) / warm
        return args.lr * 0.5 * (1 + np.cos(np.pi * (step - warm) / max(args.steps - warm, 1)))

    order = np.random.default_rng(seed).permutation(len(data["train"][0]))  # same for all
    tr_t, tr_f = data["train"]
    curve, t_train, first = [], 0.0, 0
    ckpt = os.path.join(folder, "checkpoint.pt")
    if os.path.exists(ckpt):  # a killed run: where it was
        state = torch.load(ckpt, map_location=args.device, weights_only=False)
        model.load_state_dict(state["model"])
        for o, s in zip(opts, state["opts"], strict=True):
            o.load_state_dict(s)
        curve, t_train, first = state["curve"], state["train_seconds"], state["step"]
        log(f"{kind} seed {seed}: continues at step {first}")
    probe = (data["val"][0][: args.probe], data["val"][1][: args.probe])
    for step in range(first, args.steps):
        if step % args.checkpoint_every == 0 and step > first:
            state = {"model": model.state_dict(), "opts": [o.state_dict() for o in opts]}
            state.update(curve=curve, train_seconds=t_train, step=step)
            save_atomically(state, ckpt)
            if step == args.stop_at:  # as a kill would, right after a checkpoint
                raise SystemExit(f"{kind} seed {seed}: stopped at step {step}")
        if step % args.eval_every == 0:
            curve.append({"step": step, "val_loss": loss_of(model, *probe)})
        t0 = time.time()
        pick = order[(step * args.batch + np.arange(args.batch)) % len(order)]
        t = torch.from_numpy(tr_t[pick]).long().to(args.device)
        f = torch.from_numpy(tr_f[pick]).long().to(args.device)
        for o in opts:
            for g in o.param_groups:
                g["lr"] = lr_at(step)
        logits = model(t[:, :-1], f[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1))
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(dense, 1.0)
        for o in opts:
            o.step()
        t_train += time.time() - t0
        if step % 50 == 0:
            log(f"{kind} seed {seed}: step {step} train loss {loss.item():.3f}")
    curve.append({"step": args.steps, "val_loss": loss_of(model, *probe)})
    save(model.cpu(), os.path.join(folder, "model.pt"))
    rec = {
        "kind": kind,
        "seed": seed,
        "steps": args.steps,
        "tokens": args.steps * args.batch * args.seq_len,
        "train_seconds": round(t_train, 1),
        "device": args.device,
        "curve": curve,
        **model_sizes(model, kind, engram, len(fg[1])),
        "inference_flops_per_token": model.flops_per_token(),
    }
    with open(done, "w") as f:
        json.dump(rec, f, indent=2)
    if os.path.exists(ckpt):
        os.remove(ckpt)
    log(f"{kind} seed {seed}: trained in {t_train:.0f} s")
    return rec


def model_sizes(model, kind: str, engram, fgrams: int) -> dict:
    """Parameters held on the accelerator at inference (the main model; Engram's
    projections, norms and convolution), those used in training only (SCONE's f-gram
    model), and the table held off it: rows and values (rows x width)."""
    names = dict(model.named_parameters())
    training_only = sum(p.numel() for n, p in names.items() if n.startswith("fgram."))
    table = sum(p.numel() for n, p in names.items() if n == "engram.table.weight")
    on = sum(p.numel() for p in names.values()) - training_only - table
    rows, values = 0, 0
    if kind == "scone":
        rows, values = fgrams, fgrams * model.cfg.dim
    elif kind == "engram":
        rows, values = engram["rows"], table
    return {
        "params_main": on,
        "params_fgram_model": training_only,
        "rows_off": rows,
        "values_off": values,
    }


# ---- 5. inference from the store ----------------------------------------------------


def store_inputs(model, store, toks: np.ndarray):
    """Input embeddings of windows [n, T] from `FgramStore.embed_sequence`: the stored
    row where a position matches, the token embedding elsewhere."""
    import torch

    n, w = toks.shape
    dev = model.tok.weight.device
    rows, _, unmatched = store.embed_sequence(toks.reshape(-1), doc_starts=np.arange(n) * w)
    emb = model.tok(torch.from_numpy(toks).long().to(dev))
    stored = torch.from_numpy(rows.astype(np.float32)).view(n, w, -1).to(dev)
    return torch.where(torch.from_numpy(unmatched).view(n, w, 1).to(dev), emb, stored)


def store_loss(model, store, toks: np.ndarray, batch: int = 32) -> float:
    import torch
    import torch.nn.functional as F

    total, n = 0.0, 0
    with torch.inference_mode():
        for s in range(0, len(toks), batch):
            t = toks[s : s + batch]
            logits = model.logits(store_inputs(model, store, t[:, :-1]))
            target = torch.from_numpy(t[:, 1:]).long().to(logits.device)
            total += F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum"
            ).item()
            n += target.numel()
    return total / n


def greedy(model, store, prompt: np.ndarray, new: int) -> tuple[list[int], float, float]:
    """Greedy decoding a token at a time, a KV cache in the model: its input rows from
    `fgram.hf.SconeEmbedding` (the store's row where an f-gram matches, the token
    embedding elsewhere; it keeps the last K-1 tokens). Returns the tokens, and the
    seconds of the lookups and of everything."""
    import torch

    from fgram.hf import SconeEmbedding

    embed = SconeEmbedding(model.tok, store)
    dev = model.tok.weight.device
    caches = [{} for _ in model.blocks]
    out = [int(t) for t in prompt]
    t_lookup, t0 = 0.0, time.time()
    with torch.inference_mode():
        a = time.time()
        rows = embed(torch.tensor(out, device=dev)[None], past=0)  # the prompt's rows at once
        t_lookup += time.time() - a
        logits = model.logits(rows, 0, caches)
        for i in range(new):
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            if len(prompt) + i + 1 >= model.cfg.seq_len:
                break
            a = time.time()
            row = embed(torch.tensor([[nxt]], device=dev), past=len(prompt) + i)
            t_lookup += time.time() - a
            logits = model.logits(row, len(prompt) + i, caches)
    return out, t_lookup, time.time() - t0


def evaluate(
    args, out: str, fg_info: dict, data: dict, rec: dict, folder: str, tok, engram=None
) -> dict:
    """Validation loss on every window: by the f-gram model (the training path), and for
    SCONE from the store that `fgram embed` fills with the trained f-gram model."""
    import torch
    from scone_model import load

    done = os.path.join(folder, "eval.json")
    if os.path.exists(done):
        return read_json(done)
    fg = data["fgrams"]
    model = load(
        os.path.join(folder, "model.pt"),
        torch.from_numpy(fg[0]),
        torch.from_numpy(fg[1]),
        hashing=engram["hashing"] if engram else None,
    ).to(args.device)
    val_t, val_f = data["val"]
    res = {"val_loss": loss_of(model, val_t, val_f), "val_windows": len(val_t)}
    if rec["kind"] == "scone":
        from fgram import FgramStore

        env = {
            "SCONE_TINY_CHECKPOINT": os.path.join(folder, "model.pt"),
            "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        # the run's own store: the table's files linked, the embeddings this run's (runs
        # side by side each fill theirs)
        table = os.path.join(folder, "table")
        if not os.path.exists(table):
            shutil.copytree(fg_info["table"], table + ".tmp", copy_function=os.link,
                            ignore=shutil.ignore_patterns("embeddings", ".*"))  # fmt: skip
            os.replace(table + ".tmp", table)
        t0 = time.time()
        fgram(
            "embed",
            table,
            "--model",
            "scone_model:fgram_model",
            "--engine",
            "local",
            "--float",
            "float16",
            "--device",
            args.device,
            "--overwrite",
            env=env,
        )
        res["embed_seconds"] = round(time.time() - t0, 1)
        store = FgramStore.open(table, mode="ram")
        res["store_val_loss"] = store_loss(model, store, val_t)
        # the stored rows against the f-gram model's, on the validation windows' f-grams
        ids = np.unique(val_f[val_f >= 0])[:4096]
        with torch.inference_mode():
            dev = args.device
            exact = model.fgram(
                torch.from_numpy(fg[0][ids]).to(dev), torch.from_numpy(fg[1][ids]).to(dev)
            ).cpu()
        res["row_max_abs_diff"] = float(
            np.abs(store.rows(ids).astype(np.float32) - exact.numpy()).max()
        )
        res["row_max_abs"] = float(exact.abs().max())
        samples, lookup, total, made = [], 0.0, 0.0, 0
        for w in range(args.samples):
            prompt = val_t[w * 7 % len(val_t), :32]
            toks, t_l, t_all = greedy(model, store, prompt, args.new_tokens)
            lookup, total, made = lookup + t_l, total + t_all, made + len(toks)
            samples.append(
                {
                    "prompt": tok.decode([int(x) for x in prompt]),
                    "continuation": tok.decode(toks[len(prompt) :]),
                }
            )
        res["decode"] = {
            "tokens": made,
            "seconds_per_token": total / made,
            "lookup_share": lookup / total,
            "samples": samples,
        }
    with open(done, "w") as f:
        json.dump(res, f, indent=2)
    log(
        f"{rec['kind']} seed {rec['seed']}: val loss {res['val_loss']:.4f}"
        + (f", from the store {res['store_val_loss']:.4f}" if "store_val_loss" in res else "")
    )
    return res


# ---- 6. results ---------------------------------------------------------------------

# what a run's numbers depend on besides its arm and seed: a record made with other
# settings is never mixed into the results
CONFIG = ("vocab", "max_len", "layers", "dim", "heads", "seq_len", "batch", "steps", "lr",
          "engram_heads", "eval_every", "probe", "device")  # fmt: skip


def config_of(args, size: int) -> dict:
    return {"size": size, **{k: getattr(args, k) for k in CONFIG}}


def recorded(records: str, config: dict, kind: str, seed: int) -> dict | None:
    """The run's record when it is kept, or None; one made with other settings stops the
    run, naming the file and the settings that differ."""
    path = os.path.join(records, f"{kind}-seed{seed}.json")
    if not os.path.exists(path):
        return None
    rec = read_json(path)
    differ = sorted(k for k in config.keys() | rec["config"].keys()
                    if config.get(k) != rec["config"].get(k))  # fmt: skip
    if differ:
        raise SystemExit(
            f"{path}: recorded with other settings ({', '.join(differ)}); "
            "give --records another folder"
        )
    return rec


def keep_record(records: str, config: dict, rec: dict) -> None:
    """A finished run's record, written aside and renamed: one file per arm and seed."""
    os.makedirs(records, exist_ok=True)
    path = os.path.join(records, f"{rec['kind']}-seed{rec['seed']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"config": config, **rec}, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def ppl_of(run: dict, key: str = "val") -> float:
    """A run's validation perplexity (``key`` "store_val": SCONE's, served from the store):
    from its loss, or as printed where a record keeps only that."""
    import math

    ev = run["eval"]
    return math.exp(ev[f"{key}_loss"]) if f"{key}_loss" in ev else ev[f"{key}_ppl"]


def summarize(args, out: str, fg_info: dict, data: dict, runs: list[dict], engram=None) -> dict:
    tags = read_json(os.path.join(fg_info["tags"]["val"], "manifest.json"))["coverage"]
    by_kind: dict = {}
    for r in runs:
        by_kind.setdefault(r["kind"], []).append(r)
    table = {}
    for kind, rs in by_kind.items():
        ppl = [ppl_of(r) for r in rs]
        full = next((r for r in rs if "params_main" in r), rs[0])  # a record of every figure
        row = {
            "seeds": [r["seed"] for r in rs],
            "ppl": ppl,
            "ppl_mean": float(np.mean(ppl)),
            "ppl_min": float(np.min(ppl)),
            "ppl_max": float(np.max(ppl)),
            "ppl_spread": float(np.ptp(ppl)),
            "train_seconds": [r["train_seconds"] for r in rs],
            **{k: full[k] for k in ("params_main", "params_fgram_model", "rows_off",
                                     "values_off", "inference_flops_per_token", "tokens")},
        }  # fmt: skip
        if kind == "scone":
            row["store_ppl"] = [ppl_of(r, "store_val") for r in rs]
            decoded = [r["eval"]["decode"] for r in rs if "decode" in r["eval"]]
            row["lookup_share"] = [d["lookup_share"] for d in decoded]
            row["seconds_per_token"] = [d["seconds_per_token"] for d in decoded]
        table[kind] = row
    res = {
        "size": fg_info["size"],
        "choose_s": read_json(os.path.join(out, "choose_s.json"))["rule"],
        "table_rows": int(len(data["fgrams"][1])),
        "max_len": args.max_len,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "device": args.device,
        "train_tokens_per_run": args.steps * args.batch * args.seq_len,
        "val_coverage": 1 - tags["share_unmatched"],
        "val_mean_match_length": tags["mean_match_length"],
        "engram": None
        if engram is None
        else {
            "config": dataclasses.asdict(engram["config"]),
            "rows": engram["rows"],
            "values": engram["values"],
        },  # fmt: skip
        "models": table,
        "verdict": verdict(table),
        "runs": runs,
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    plot(runs, os.path.join(out, "loss.png"))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(res))
    return res


def verdict(m: dict) -> list[str]:
    """The comparisons the example is for, in words: SCONE against the baseline of about
    twice its inference FLOPs, and exact f-grams against hashed buckets of the same
    memory; a lead counts only when the arms' seeds do not overlap."""

    def compare(a: str, b: str, what: str) -> str:
        x, y = m[a], m[b]
        gap = float(np.log(y["ppl_mean"] / x["ppl_mean"]))
        several = min(len(x["ppl"]), len(y["ppl"])) > 1  # one seed has no spread to beat
        apart = several and (x["ppl_max"] < y["ppl_min"] or y["ppl_max"] < x["ppl_min"])
        better = a if gap > 0 else b
        how = (
            "every seed of one below every seed of the other"
            if apart
            else ("seeds overlap" if several else "one seed each")
        )
        return (f"{what}: {better} by {abs(gap):.4f} nats of mean validation loss "
                f"(perplexity {x['ppl_mean']:.2f} against {y['ppl_mean']:.2f}; {how})"
                + ("" if apart else ": not a difference these seeds can tell"))  # fmt: skip

    out = []
    if "scone" in m and "baseline_x2" in m:
        out.append(compare("scone", "baseline_x2", "SCONE against the baseline x2"))
    if "scone" in m and "engram" in m:
        out.append(compare("scone", "engram", "exact f-grams (SCONE) against hashed (Engram)"))
    if "scone" in m and "baseline" in m:
        out.append(compare("scone", "baseline", "SCONE against the same-size baseline"))
    return out


NAMES = {"baseline": "baseline", "baseline_x2": "baseline x2", "scone": "SCONE",
         "engram": "Engram"}  # fmt: skip


def markdown(res: dict) -> str:
    """The results as the README shows them: a row per arm, then the verdict."""
    m = res["models"]
    kinds = [k for k in KINDS if k in m]
    lines = [
        "| arm | validation perplexity: mean (min, max) | per seed | inference FLOPs per "
        "token | parameters on the accelerator | rows (values) held off it | training "
        "tokens | training s per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in kinds:
        r = m[k]
        off = f"{r['rows_off']:,} ({r['values_off']:,})" if r["rows_off"] else "0"
        lines.append(
            f"| {NAMES[k]} | {r['ppl_mean']:.2f} ({r['ppl_min']:.2f}, {r['ppl_max']:.2f}) | "
            + ", ".join(f"{p:.2f}" for p in r["ppl"])
            + f" | {r['inference_flops_per_token'] / 1e6:.2f}M | {r['params_main']:,} | {off} "
            f"| {r['tokens']:,} | "
            + ", ".join("-" if t is None else f"{t:.0f}" for t in r["train_seconds"])
            + " |"
        )
    if "scone" in m:
        s = m["scone"]
        lines.append(
            "\nSCONE from the store (`FgramStore.embed_sequence`), per seed: "
            + ", ".join(f"{p:.4f}" for p in s["store_ppl"])
            + " (training path: "
            + ", ".join(f"{p:.4f}" for p in s["ppl"])
            + "); its "
            f"f-gram model ({s['params_fgram_model']:,} parameters) runs in training only. "
            f"Validation positions matched: {100 * res['val_coverage']:.1f}%, mean match "
            f"length {res['val_mean_match_length']:.2f}."
        )
    lines.append("")
    lines += [f"- {v}" for v in res["verdict"]]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: str) -> None:
    """The probe loss of every run with a curve: the whole run, and its second half
    closer (where the arms part and the curves flatten)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return
    drawn = [r for r in runs if r.get("curve")]  # a record of final numbers has none
    fig = Figure(figsize=(10, 4.2), dpi=110, layout="constrained")
    whole, late = fig.subplots(1, 2)
    colors = {"baseline": "#4c72b0", "baseline_x2": "#55a868", "scone": "#c44e52",
              "engram": "#8172b2"}  # fmt: skip
    seeds = sorted({r["seed"] for r in drawn})
    styles = ["-", "--", ":", "-."]
    for ax, start in ((whole, 0), (late, max((r["steps"] for r in drawn), default=0) // 2)):
        for r in drawn:
            points = [c for c in r["curve"] if c["step"] >= start]
            ax.plot(
                [c["step"] for c in points],
                [c["val_loss"] for c in points],
                color=colors[r["kind"]],
                ls=styles[seeds.index(r["seed"]) % len(styles)],
                lw=1.3,
                label=f"{NAMES[r['kind']]} seed {r['seed']}" if ax is whole else None,
            )
        ax.set_xlabel("step")
    whole.set_ylabel("validation loss (probe windows)")
    late.set_title("from half way", fontsize=9)
    whole.set_title("baseline, baseline x2, SCONE and Engram", fontsize=9)
    fig.legend(loc="outside right upper", fontsize=7)
    fig.savefig(path)


# a run's training time against the baseline's (measured on 2 cores): the longest start
# first, so that runs side by side end together
COST = {"baseline": 1.0, "engram": 1.2, "baseline_x2": 1.9, "scone": 2.0}


def side_by_side(args, todo: list[tuple[str, int]], jobs: int, records: str) -> None:
    """Train the runs without a record in ``jobs`` processes at a time (this script again,
    one arm and seed each, --threads cores / jobs unless given), the longest first; each
    writes its log to runs/ARM-seedN.log and its record as a run alone would. A failed
    run stops the others' successors, and the script, naming its log."""
    threads = args.threads or max(1, (os.cpu_count() or 1) // jobs)
    queue = sorted(todo, key=lambda ks: (-COST[ks[0]], ks[1]))
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    log(f"{len(queue)} runs, {jobs} side by side with {threads} threads each")
    t0, running, failed = time.time(), {}, []
    try:
        while queue or running:
            while queue and len(running) < jobs and not failed:
                kind, seed = queue.pop(0)
                path = os.path.join(args.out, "runs", f"{kind}-seed{seed}.log")
                cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:],
                       "--kinds", kind, "--seeds", str(seed), "--jobs", "1",
                       "--threads", str(threads), "--records", records, "--lane"]  # fmt: skip
                with open(path, "a") as f:
                    running[subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)] = path
                log(f"{kind} seed {seed}: started, its log {path}")
            if not running:
                break
            proc, path = _first_done(running)
            del running[proc]
            if proc.returncode:
                failed.append(path)
            log(f"{os.path.basename(path)[:-4]}: " + ("failed" if proc.returncode else "done"))
    finally:
        for proc in running:
            proc.terminate()
    if failed:
        with open(failed[0]) as f:
            tail = f.read()[-2000:]
        raise SystemExit(f"{', '.join(failed)}: the run failed; its log ends:\n{tail}")
    log(f"{len(todo)} runs side by side in {time.time() - t0:.0f} s")


def _first_done(running: dict):
    while True:
        for proc, path in running.items():
            if proc.poll() is not None:
                return proc, path
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="a tiny generated corpus, seconds")
    ap.add_argument(
        "--corpus", default=CORPUS, help="english-dev (tokens.bin; its tokenizer beside)"
    )
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument(
        "--records", default=None, help="a folder of finished runs' records (default: "
        "results/ beside this file for the measured run, else results/ under --out)",
    )  # fmt: skip
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the arms, of " + ", ".join(KINDS))
    ap.add_argument("--engram-heads", type=int, default=4, help="Engram's heads per order")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda where a GPU is at hand")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-len", type=int, default=4, help="K")
    ap.add_argument("--size", type=int, default=None, help="S (default: chosen by the rule)")
    ap.add_argument("--grid", default=GRID, help="the sizes S the choice looks at")
    ap.add_argument(
        "--min-gain",
        type=float,
        default=1.0,
        help="points of matched dev positions per doubling of S, the rule's floor",
    )
    ap.add_argument("--layers", type=int, default=4, help="the baseline's blocks")
    ap.add_argument("--dim", type=int, default=256, help="the models' width d")
    ap.add_argument("--heads", type=int, default=4, help="attention heads")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument(
        "--checkpoint-every", type=int, default=200, help="steps between a run's checkpoints"
    )
    ap.add_argument("--probe", type=int, default=64, help="validation windows of the curve")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: every core, "
                    "or cores / --jobs side by side)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=0, help="runs trained side by side, each its "
                    "own process (0: one a core on a CPU, one on a GPU)")  # fmt: skip
    ap.add_argument("--lane", action="store_true", help=argparse.SUPPRESS)  # one run of many
    ap.add_argument("--prepare-only", action="store_true", help="stop once the tags are made")
    ap.add_argument(
        "--stop-at", type=int, default=None, help="end the run after its checkpoint at this "
        "step, as a kill would (to try resuming)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.smoke:
        args.out = (
            args.out if args.out != os.path.join(HERE, "out") else os.path.join(HERE, "out-smoke")
        )
        args.vocab, args.max_len, args.seq_len, args.batch = 400, 3, 32, 8
        args.steps, args.eval_every, args.checkpoint_every, args.probe = 12, 4, 4, 8
        args.grid, args.samples, args.new_tokens = "10,20,50,100,200,500,1K", 1, 8
    import torch
    from tokenizers import Tokenizer

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    sys.path.insert(0, HERE)
    out = args.out
    os.makedirs(out, exist_ok=True)
    make_data(args, out)
    tok_path = make_tokenizer(args, out)
    fg_info = run_fgram(args, out, tok_path)
    if args.prepare_only:
        return
    parts = [windows(fg_info["tags"][name], args.seq_len) for name in ("train", "dev")]
    data = {
        "train": (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])),
        "val": windows(fg_info["tags"]["val"], args.seq_len),
        "fgrams": fgram_arrays(fg_info["table"], args.max_len),
        "vocab": Tokenizer.from_file(tok_path).get_vocab_size(),
    }
    log(
        f"windows: train {len(data['train'][0])}, val {len(data['val'][0])} of "
        f"{args.seq_len + 1} tokens; {len(data['fgrams'][1])} f-grams"
    )
    tok = Tokenizer.from_file(tok_path)
    kinds = args.kinds.split(",")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"--kinds: {', '.join(sorted(unknown))}: not one of {', '.join(KINDS)}")
    engram = engram_setup(args, tok_path, len(data["fgrams"][1])) if "engram" in kinds else None
    measured = out == os.path.join(HERE, "out") and not args.smoke
    records = args.records or os.path.join(HERE if measured else out, "results")
    config = config_of(args, fg_info["size"])
    seeds = [int(s) for s in args.seeds.split(",")]
    todo = [(k, s) for s in seeds for k in kinds if recorded(records, config, k, s) is None]
    jobs = min(args.jobs or (os.cpu_count() or 1 if args.device == "cpu" else 1), len(todo))
    if jobs > 1:
        side_by_side(args, todo, jobs, records)
    runs = []
    for seed in seeds:
        for kind in kinds:
            rec = recorded(records, config, kind, seed)
            if rec is None:
                folder = os.path.join(out, "runs", f"{kind}-seed{seed}")
                rec = train(args, kind, seed, data, data["fgrams"], folder, engram)
                rec["eval"] = evaluate(args, out, fg_info, data, rec, folder, tok, engram)
                keep_record(records, config, rec)
            else:
                log(f"{kind} seed {seed}: from its record in {records}")
            runs.append(rec)
    if args.lane:
        return
    res = summarize(args, out, fg_info, data, runs, engram)
    for kind, row in res["models"].items():
        log(
            f"{kind}: validation perplexity {row['ppl_mean']:.2f} (min {row['ppl_min']:.2f}, "
            f"max {row['ppl_max']:.2f})"
            + (f", from the store {np.mean(row['store_ppl']):.2f}" if "store_ppl" in row else "")
        )
    for line in res["verdict"]:
        log(line)
    log(f"results: {os.path.join(out, 'results.json')}")


if __name__ == "__main__":
    main()
