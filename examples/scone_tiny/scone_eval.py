"""Evaluation of a trained run: the validation loss by the training path, and for SCONE
the store that `fgram embed` fills with the trained f-gram model, read as served
(`FgramStore.embed_sequence`, and greedy decoding through `fgram.hf.SconeEmbedding`)."""

from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np
from scone_data import HERE, fgram, log, read_json
from scone_train import loss_of

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
