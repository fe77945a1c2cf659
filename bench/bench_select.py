"""`fgram build` within the broadcast budget against `--broadcast-budget 0` (every pass's
lookup a distributed join, the select decoded by key range), side by side, alternated.

    python bench/bench_select.py CORPUS [--size 10000000] [--rounds 2] [--extra ...]

CORPUS: token shards (`fgram tokenize` output, or flat uint16 files with separator 0).
Prints wall time, peak memory (the process tree's, as bench_build measures it), the
time of each pass and of the select's decode and rank, and the ratio of budget 0 to
the default; checks that the two tables are equal, file by file. Records go to
bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine, run  # noqa: E402


def table_digest(out: str) -> str:
    """sha256 of the table's rows in fgram_id order (files may be cut differently)."""
    h = hashlib.sha256()
    folder = os.path.join(out, "fgrams")
    for name in sorted(os.listdir(folder)):
        t = pq.read_table(os.path.join(folder, name))
        for column in ("fgram_id", "length", "count"):
            h.update(t.column(column).to_numpy().tobytes())
        h.update(t.column("tokens").combine_chunks().values.to_numpy().tobytes())
    return h.hexdigest()


def stages(m: dict) -> dict:
    out = {f"pass{p['length']}": p["seconds"] for p in m["passes"]}
    sel = m["select"]
    out.update(
        select=sel["seconds"],
        decode=sel.get("decode_seconds"),
        rank=sel.get("rank_write_seconds"),
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus")
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--extra", nargs="*", default=[], help="more fgram build arguments")
    ap.add_argument("--tag", default="")
    ap.add_argument("--engine", default="spark", help="fgram's --engine (default: spark)")
    args, more = ap.parse_known_args()  # --extra --dtype uint16: the rest is fgram's too
    args.extra += more
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    cases = {"default": [], "budget 0": ["--broadcast-budget", "0"]}
    rows, digests = [], {}
    for r in range(args.rounds):
        for name in list(cases) if r % 2 == 0 else list(cases)[::-1]:
            out = os.path.join(HERE, "out", f"select-{name.replace(' ', '')}")
            cmd = [fgram, "-q", "build", out, args.corpus, "-S", str(args.size), "--overwrite"]
            cmd += ["--engine", args.engine]
            wall, peak, rc = run([*cmd, *cases[name], *args.extra])
            if rc:
                raise SystemExit(f"{name}: exit {rc}")
            with open(os.path.join(out, "manifest.json")) as f:
                m = json.load(f)
            digests.setdefault(name, set()).add(table_digest(out))
            row = {
                "case": name,
                "round": r,
                "wall": round(wall, 2),
                "peak_gib": round(peak / 2**30, 2),
                "decode": m["select"]["decode"],
                "lookups": sorted({p["lookup"] for p in m["passes"]}),
                "tokens": m["totals"]["tokens"],
                "fgrams": m["fgrams"],
                "stages": stages(m),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    same = len({d for ds in digests.values() for d in ds}) == 1
    print(f"\ntables identical: {same}")
    print("| case | round | wall s | peak GiB | passes s | decode s | rank s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        st = row["stages"]
        passes = sum(v for k, v in st.items() if k.startswith("pass"))
        print(
            f"| {row['case']} | {row['round']} | {row['wall']:.1f} | {row['peak_gib']:.2f} "
            f"| {passes:.1f} | {st['decode']} | {st['rank']} |"
        )
    for r in range(args.rounds):
        pair = {row["case"]: row["wall"] for row in rows if row["round"] == r}
        print(f"round {r}: budget 0 / default = {pair['budget 0'] / pair['default']:.2f}")
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        for row in rows:
            rec = {"bench": "select", "machine": machine(), "corpus": args.corpus, **row}
            f.write(json.dumps({**rec, "size": args.size, "tag": args.tag, "same": same}) + "\n")
    if not same:
        raise SystemExit("the tables differ")


if __name__ == "__main__":
    main()
