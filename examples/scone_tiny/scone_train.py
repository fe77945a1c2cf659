"""The arms' models and their training: a main GPT of the arm's size (baseline x2 as deep
as doubles the baseline's computed FLOPs), Engram's configuration in the demo's terms,
the optimizers, and a training loop that continues from its last checkpoint."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time

import numpy as np
from scone_data import EOS, canonical_table, log, read_json

ENGRAMS = ("engram", "engram_counted")  # the arms with an Engram module

# ---- models and training ------------------------------------------------------------


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
    if kind in ENGRAMS and engram is not None:
        size.update(engram["model"])
    return Config(vocab=vocab, seq_len=args.seq_len, max_len=args.max_len, **size)


def engram_setup(args, tok_path: str, table_rows: int) -> dict:
    """The Engram arm's configuration, in the demo's terms: orders 2..K, ``--engram-heads``
    heads, each order's concatenated width the model's d, before block 1 (the demo's
    first Engram layer: early, where a memory of local n-grams spares the blocks the
    work of composing them), pad id the end of text; the per-head table size chosen so
    that every table's rows x width together hold as many values as SCONE's store (its
    f-grams x d; times ``--engram-memory``). Returns the config, its hashing and the
    model's fields."""
    from tokenizers import Tokenizer

    from fgram.engram import EngramConfig, EngramHashing, table_sizes

    main = model_config(args, 1)
    d, block = main.dim, min(1, main.layers - 1)
    orders, heads = args.max_len - 1, args.engram_heads
    rows = int(table_rows * args.engram_memory)  # full rows of d, as SCONE's store's
    per_head = max(2, rows // orders)  # orders x heads x per_head rows of d / heads
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


class CountedRows:
    """The counted Engram's rows: an n-gram of ``exact`` (canonical ids, per order n an
    array [R_n, n], text order) has rows of its own, one per head, after the buckets
    (orders in turn, then the n-grams in the given order); any other n-gram its buckets,
    as ``hashing`` (`fgram.engram.EngramHashing` of one layer) hashes it, each head's
    table (``sizes``) after the one before. An n-gram reaching before the window's start
    holds the canonical pad id there, as in the hash. ``rows(tokens [B, T])`` -> int64
    [B, T, (N-1) * heads]."""

    def __init__(self, hashing, exact: dict[int, np.ndarray]):
        (self.layer,) = hashing.config.layer_ids
        self.sizes = [p for order in hashing.table_sizes[self.layer] for p in order]
        self.hashing, self.heads = hashing, hashing.config.n_head_per_ngram
        self.offsets = np.cumsum([0, *self.sizes[:-1]]).astype(np.int64)
        self.bits = max(1, int(hashing.size).bit_length())  # a canonical id's bits
        orders = range(2, hashing.config.max_ngram_size + 1)
        if len(orders) * self.bits > 63:
            raise ValueError(f"{hashing.size} canonical ids: {len(orders)}-grams do not "
                             "fit a 63-bit key")  # fmt: skip
        self.keys, self.index = {}, {}
        first = sum(self.sizes)  # the first exact row
        for n in orders:
            grams = np.asarray(exact.get(n, np.zeros((0, n))), np.int64).reshape(-1, n)
            keys = self._pack([grams[:, k] for k in range(n)])
            order = np.argsort(keys, kind="stable")
            if len(keys) and (np.diff(keys[order]) == 0).any():
                raise ValueError(f"an {n}-gram is given twice")
            self.keys[n] = keys[order]
            self.index[n] = first + order.astype(np.int64) * self.heads
            first += len(keys) * self.heads
        self.total = first  # the table's rows

    def _pack(self, columns: list[np.ndarray]) -> np.ndarray:
        key = np.zeros(np.shape(columns[0]), np.int64)
        for c in columns:
            key = (key << self.bits) | c
        return key

    def rows(self, tokens: np.ndarray) -> np.ndarray:
        out = self.hashing.hash(tokens)[self.layer] + self.offsets
        canon = self.hashing.canonical(tokens)
        b, t = canon.shape
        for i, (n, keys) in enumerate(self.keys.items()):
            if not len(keys):
                continue
            padded = np.concatenate([np.full((b, n - 1), self.hashing.pad), canon], axis=1)
            key = self._pack([padded[:, k : k + t] for k in range(n)])
            at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
            hit = keys[at] == key
            cols = slice(i * self.heads, (i + 1) * self.heads)
            own = self.index[n][at][..., None] + np.arange(self.heads)
            out[..., cols] = np.where(hit[..., None], own, out[..., cols])
        return out


def counted_setup(args, out: str, engram: dict) -> dict:
    """The counted Engram: the Engram arm's configuration and total of values (as many as
    SCONE's store), the training text's canonical n-grams of fgram's table
    (`scone_data.canonical_table`, count 5 or more) each given rows of its own (a full
    row of d: one per head): all of them where the total holds them while leaving a row
    of values per order, else the most frequent that fill half of it; the values left
    hold the buckets of every other n-gram, each head's table the prime above their
    share, as Engram sizes its tables."""
    from fgram import open_table, table_dataset
    from fgram.audit import read_orders
    from fgram.engram import EngramHashing

    cfg, d = engram["config"], engram["model"]["engram_dim"]
    heads, orders = cfg.n_head_per_ngram, cfg.max_ngram_size - 1
    loc, manifest = open_table(canonical_table(args, out))
    grams = read_orders(table_dataset(loc, manifest), cfg.max_ngram_size)
    counts = np.concatenate([g.counts for g in grams.values()])
    rank = np.argsort(-counts, kind="stable")  # shorter n-grams first among equals
    full = engram["values"] // d - orders  # full rows, leaving a row's values an order
    exact = len(rank) if len(rank) <= full else max(0, full // 2)
    taken = np.zeros(len(rank), bool)
    taken[rank[:exact]] = True
    bounds = np.cumsum([0, *(len(g.counts) for g in grams.values())])
    mine = {n: taken[a:b] for n, a, b in zip(grams, bounds[:-1], bounds[1:], strict=True)}
    kept = {n: g.tokens[mine[n]] for n, g in grams.items()}
    per_head = max(2, (engram["values"] - exact * d) // (orders * d))
    counted = dataclasses.replace(cfg, engram_vocab_size=[per_head] * orders)
    hashing = EngramHashing(counted, lookup=(engram["hashing"].lookup, engram["hashing"].size))
    rows = CountedRows(hashing, kept)
    positions = manifest.get("positions") or {}
    return {
        "config": counted,
        "hashing": rows,
        "model": {**engram["model"], "engram_sizes": tuple(rows.sizes), "engram_exact": exact},
        "values": rows.total * (d // heads),
        "rows": rows.total,
        "exact": {
            str(n): {
                "ngrams": int(len(kept[n])),
                "of": int(len(g.counts)),
                "positions_share": float(g.counts[mine[n]].sum())
                / max(1, int(positions.get(str(n), 0))),
            }
            for n, g in grams.items()
        },
    }


def make_model(kind: str, cfg, fg, engram=None):
    import torch
    from scone_model import GPT, EngramGPT, Scone

    if kind in ("baseline", "baseline_x2"):
        return GPT(cfg)
    if kind in ENGRAMS:
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
    elif kind in ENGRAMS:
        rows, values = engram["rows"], table
    return {
        "params_main": on,
        "params_fgram_model": training_only,
        "rows_off": rows,
        "values_off": values,
    }
