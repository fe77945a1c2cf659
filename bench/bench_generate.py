"""`model.generate` with the store's input rows (`fgram.hf.scone_embeddings`) against
the same model with its own token embedding, in alternated rounds.

    python bench/bench_generate.py TABLE CORPUS.bin [--new 128] [--rounds 3]

TABLE: a build with an index and embeddings (d = 256: `fgram embed TABLE --model
fgram.pipeline.models:hashed`); CORPUS.bin: uint16 tokens, the prompts (64 tokens
each) are slices of it. The model: a randomly initialised GPT-2 of 4 layers, width
256 (the store's), the corpus's vocabulary; greedy, KV cache, one thread per core,
at batch 1 and 16. Prints generated tokens/s both ways and the time ratio; appends
to bench/results.jsonl. Needs torch and transformers (``pip install 'fgram[hf]'``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("corpus")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from fgram.hf import scone_embeddings
    from fgram.pipeline.tables.embed import FgramStore

    store = FgramStore.open(args.table, mode="mmap")
    tokens = np.memmap(args.corpus, np.uint16, mode="r")
    torch.manual_seed(0)
    vocab = int(tokens[:10_000_000].max()) + 1
    cfg = GPT2Config(
        vocab_size=vocab, n_embd=store.dim, n_layer=4, n_head=4, n_positions=1024, eos_token_id=None
    )
    plain = GPT2LMHeadModel(cfg).eval()
    scone = copy.deepcopy(plain)
    scone_embeddings(scone, store)
    rng = np.random.default_rng(0)
    times: dict[str, dict[int, list[float]]] = {"own": {}, "store": {}}
    for batch in (1, 16):
        for r in range(args.rounds + 1):  # round 0: warm-up (compiling, the pages mapped)
            starts = rng.integers(0, len(tokens) - args.prompt, batch)
            prompt = torch.from_numpy(
                np.stack([tokens[s : s + args.prompt] for s in starts]).astype(np.int64)
            )
            for name in ("own", "store") if r % 2 else ("store", "own"):
                model = plain if name == "own" else scone
                t0 = time.perf_counter()
                with torch.inference_mode():
                    out = model.generate(
                        prompt,
                        attention_mask=torch.ones_like(prompt),
                        max_new_tokens=args.new,
                        min_new_tokens=args.new,
                        do_sample=False,
                        pad_token_id=0,
                    )
                took = time.perf_counter() - t0
                assert out.shape == (batch, args.prompt + args.new)
                if r:
                    times[name].setdefault(batch, []).append(took)
    print(f"GPT-2, 4 layers, d = {store.dim}, vocab {vocab}; {args.prompt}-token prompts, ")
    print(f"{args.new} new tokens, greedy, KV cache; torch threads: {torch.get_num_threads()}")
    print("| batch | own embedding: tokens/s | store rows: tokens/s | time ratio |")
    print("|---|---|---|---|")
    record: dict = {"bench": "generate", "machine": machine(), "new": args.new, "rows": []}
    for batch in (1, 16):
        own, st = times["own"][batch], times["store"][batch]
        ratios = [a / b for a, b in zip(st, own, strict=True)]
        rate = [batch * args.new / t for t in own], [batch * args.new / t for t in st]
        print(
            f"| {batch} | {', '.join(f'{x:.0f}' for x in rate[0])} | "
            f"{', '.join(f'{x:.0f}' for x in rate[1])} | "
            f"{', '.join(f'{x:.2f}' for x in ratios)} |"
        )
        record["rows"].append(
            {"batch": batch, "own": own, "store": st, "median_ratio": statistics.median(ratios)}
        )
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
