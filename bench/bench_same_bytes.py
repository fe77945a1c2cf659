"""Every command's outputs, byte for byte, from this checkout and from another `fgram`
(an older checkout): a re-layout of the code must change no output.

    cd /tmp && python CHECKOUT/bench/bench_same_bytes.py --against OLD --tokens 5000000

``OLD`` runs another checkout (e.g. a script: ``PYTHONPATH=OLDTREE exec python -m fgram
"$@"``; run from outside any checkout, or ``python -m`` imports the current folder's).
On one generated corpus of text (its words, its tokenizer.json) each side runs: tokenize
(flat and Parquet shards), build, index, coverage --sizes, annotate (flat tags, and
OLMo's layout; Parquet tags, and Hugging Face's), embed (the deterministic hashed
model), two refresh versions (the second with one more shard), report and engram-audit.
Every data file is compared byte for byte; every JSON file (manifests, records) after
dropping what differs by nature: times, the run's own folder, versions' ids. Prints each
difference and the two sides' seconds per command; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

BIN = os.path.join(os.path.dirname(sys.executable), "fgram")
# JSON keys whose values differ between two runs of the same code
VOLATILE = {
    "seconds", "started", "finished", "created", "time", "timestamp", "wall", "elapsed",
    "stages", "warm", "made", "host", "pid", "run_id", "version_id", "id", "current",
    "previous", "versions", "fgram_version", "uri", "path", "where", "output", "table",
    "inputs", "reused_from", "staging", "generation", "files", "store", "mtime",
    "engine", "work_dir", "head_start", "run_fingerprint", "fingerprint", "timing",
    "unit_bytes",  # what a pass's work files took: a measure, as its seconds are
}  # fmt: skip
OBJECT = r"[0-9a-f]{32}\.(\d+)\.x([0-9a-f]+)\.npy"  # a store object: uuid.size.xhash.npy


def steps(fgram: str, root: str, corpus: str) -> list[tuple[str, list[str]]]:
    """The commands, each with its outputs under ``root``."""
    tok = os.path.join(corpus, "text", "tokenizer.json")
    text, more = os.path.join(corpus, "text"), os.path.join(corpus, "more")
    flat, parq = os.path.join(root, "flat"), os.path.join(root, "parq")
    t, r = os.path.join(root, "t"), os.path.join(root, "r")
    engram = os.path.join(root, "engram.json")
    with open(engram, "w") as f:
        json.dump({"max_ngram_size": 3, "n_head_per_ngram": 2, "layer_ids": [1],
                   "engram_vocab_size": [5000, 5000], "pad_id": 0, "seed": 0}, f)  # fmt: skip
    eng = ["--engine", "local"]
    return [
        ("tokenize bin", [fgram, "tokenize", text, "-o", flat, "--tokenizer", tok, "--format",
                          "bin", *eng]),
        ("tokenize parquet", [fgram, "tokenize", text, "-o", parq, "--tokenizer", tok,
                              "--format", "parquet", *eng]),
        ("build", [fgram, "build", t, flat, "-S", "200K", *eng]),
        ("index", [fgram, "index", t]),
        ("coverage", [fgram, "coverage", t, parq, "--sizes", "1K,10K,100K", "--json", *eng]),
        ("annotate", [fgram, "annotate", t, flat, "-o", os.path.join(root, "tags"), *eng]),
        ("annotate olmo", [fgram, "annotate", t, flat, "-o", os.path.join(root, "olmo"),
                           "--layout", "olmo", *eng]),
        ("annotate parquet", [fgram, "annotate", t, parq, "-o", os.path.join(root, "ptags"),
                              *eng]),
        ("annotate hf", [fgram, "annotate", t, parq, "-o", os.path.join(root, "hf"), "--layout",
                         "hf", *eng]),
        ("embed", [fgram, "embed", t, "--model", "fgram.pipeline.models:hashed", *eng]),
        ("refresh 1", [fgram, "refresh", r, os.path.join(flat, "shards"), "-S", "200K",
                       "--dtype", "uint16", "--doc-sep", "0", *eng]),
        ("tokenize more", [fgram, "tokenize", more, "-o", os.path.join(root, "flat2"),
                           "--tokenizer", tok, "--format", "bin", *eng]),
        ("refresh 2", [fgram, "refresh", r, os.path.join(flat, "shards"),
                       os.path.join(root, "flat2", "shards"), *eng]),
        ("build canonical", [fgram, "build", os.path.join(root, "c"), flat, "-K", "3",
                             "--canonical", *eng]),
        ("engram-audit", [fgram, "engram-audit", os.path.join(root, "c"), "--engram", engram,
                          "--json"]),
    ]  # fmt: skip


def stable(obj):
    if isinstance(obj, dict) and obj and all(re.fullmatch("[0-9a-f]{32}", k) for k in obj):
        # keyed by a hash of a path (a refresh store's shards): the values, in order
        return sorted((stable(v) for v in obj.values()), key=lambda v: json.dumps(v))
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if not k.endswith("store.json")}  # names paths
        return {
            k: stable(v)
            for k, v in sorted(obj.items())
            if k not in VOLATILE and not k.endswith("seconds")
        }
    if isinstance(obj, str):
        return re.sub(OBJECT, r"\1.x\2.npy", obj)
    if isinstance(obj, list):
        return [stable(v) for v in obj]
    return obj


def files(root: str) -> dict[str, str]:
    found = {}
    for folder, _, names in os.walk(root):
        for n in names:
            path = os.path.join(folder, n)
            rel = os.path.relpath(path, root)
            # a version's id is in its path: name it by its place in the list instead
            parts = rel.split(os.sep)
            if "versions" in parts:
                i = parts.index("versions")
                ids = sorted(os.listdir(os.path.join(root, *parts[: i + 1])))
                parts[i + 1] = f"v{ids.index(parts[i + 1])}" if parts[i + 1] in ids else "?"
            found[os.sep.join(parts)] = path
    return found


def generation_free(rel: str) -> str:
    """A published file's name without its generation (``part-00000-g1a2b.parquet``) or a
    store object's random prefix."""
    return re.sub(OBJECT, r"\1.x\2.npy", re.sub(r"-g[0-9a-f]{6,}(?=\.)", "", rel))


def compare(a: str, b: str) -> list[str]:
    fa = {generation_free(k): v for k, v in files(a).items()}
    fb = {generation_free(k): v for k, v in files(b).items()}
    out = [f"only in one: {k}" for k in sorted(set(fa) ^ set(fb))]
    for rel in sorted(set(fa) & set(fb)):
        if rel.endswith((".lock", ".log", "live.lock")) or "/_work/" in rel:
            continue
        x, y = open(fa[rel], "rb").read(), open(fb[rel], "rb").read()
        if x == y:
            continue
        if rel.endswith(".json"):
            try:
                if stable(json.loads(x)) == stable(json.loads(y)):
                    continue
            except ValueError:
                pass
        out.append(f"differs: {rel}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, help="the other fgram executable")
    ap.add_argument("--tokens", type=int, default=5_000_000)
    ap.add_argument("--out", default="/tmp/same-bytes")
    args = ap.parse_args()
    corpus = os.path.join(args.out, f"corpus-{args.tokens}")
    if not os.path.exists(os.path.join(corpus, "more")):
        for name, seed in (("text", 0), ("more", 1)):
            tokens = args.tokens if name == "text" else args.tokens // 20
            subprocess.run([BIN, "synth", "-o", os.path.join(corpus, name), "--format", "text",
                            "--tokens", str(tokens), "--vocab", "5000", "--seed", str(seed),
                            "--book-seed", "0", "--overwrite"], check=True)  # fmt: skip
    sides = {"new": BIN, "old": args.against}
    roots = {}
    for side in sides:
        root = os.path.join(args.out, f"{side}-{args.tokens}")
        subprocess.run(["rm", "-rf", root], check=True)
        os.makedirs(root)
        roots[side] = root
    times: dict[str, dict[str, float]] = {side: {} for side in sides}
    for i, (name, _) in enumerate(steps(BIN, roots["new"], corpus)):
        for side in ("new", "old") if i % 2 else ("old", "new"):  # order flipped
            cmd = steps(sides[side], roots[side], corpus)[i][1]
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True)
            times[side][name] = time.perf_counter() - t0
            if res.returncode:
                sys.exit(f"{side}: {name}: {res.stderr[-2000:]}")
        print(f"{name:18s} new {times['new'][name]:7.2f} s  old {times['old'][name]:7.2f} s")
    diffs = compare(roots["new"], roots["old"])
    for line in diffs:
        print(line)
    total = {s: sum(t.values()) for s, t in times.items()}
    print(f"total new {total['new']:.1f} s, old {total['old']:.1f} s: "
          f"{total['new'] / total['old']:.2f}; {len(diffs)} difference(s)")  # fmt: skip
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
