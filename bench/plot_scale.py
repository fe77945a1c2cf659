"""Plot the scale records of bench/results.jsonl (tags scale-tokens, scale-size) to bench/scale.png
and print them as markdown tables. Needs matplotlib (pip install 'fgram[bench]')."""

from __future__ import annotations

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load(tag: str) -> list[dict]:
    recs = {}
    with open(os.path.join(HERE, "results.jsonl")) as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("tag") == tag:
                key = (r["tokens"], r["command"])
                recs[key] = r  # the latest record of each command wins
    return sorted(recs.values(), key=lambda r: (r["tokens"], r["command"]))


def size_of(r: dict) -> int:
    parts = r["command"].split()
    return int(parts[parts.index("--size") + 1])


def table(recs: list[dict]) -> str:
    rows = [
        "| tokens | S | f-grams | cutoff | wall (s) | tokens/s | per core | peak RSS (GiB) | "
        "passes 2/3/4/5 (s) | thresholds 2/3/4/5 | select (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        passes = " / ".join(f"{v:.1f}" for v in r["passes_s"].values())
        thr = " / ".join(str(v) for v in r.get("thresholds", {}).values())
        rows.append(
            f"| {r['tokens'] / 1e6:.0f}M | {size_of(r) / 1e6:g}M | {r['fgrams']:,} | "
            f"{r['cutoff']} | {r['wall_s']} | {r['tokens_per_s'] / 1e6:.2f}M | "
            f"{r['tokens_per_s_per_core'] / 1e6:.2f}M | {r['peak_rss_gib']} | {passes} | "
            f"{thr} | {r['select_s']:.1f} |"
        )
    return "\n".join(rows)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_tokens, by_size = load("scale-tokens"), load("scale-size")
    print(table(by_tokens))
    print()
    print(table(by_size))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    x = [r["tokens"] / 1e6 for r in by_tokens]
    ax.plot(x, [r["wall_s"] for r in by_tokens], "o-", label="wall time (s)")
    ax.set_xlabel("corpus tokens (millions), S = 10M, K = 5")
    ax.set_ylabel("seconds")
    ax2 = ax.twinx()
    ax2.plot(
        x, [r["peak_rss_gib"] for r in by_tokens], "s--", color="tab:red", label="peak RSS (GiB)"
    )
    ax2.set_ylabel("peak RSS, all processes (GiB)")
    ax2.set_ylim(0, 8.5)
    ax2.axhline(8, color="tab:red", lw=0.8, ls=":")
    ax.set_title("fgram build vs corpus size")
    ax.legend(loc="upper left")
    ax2.legend(loc="center right")
    ax = axes[1]
    pts = sorted(
        ([size_of(r), r] for r in by_size + [r for r in by_tokens if r["tokens"] == 500_000_000]),
        key=lambda p: p[0],
    )
    ax.plot([p[0] / 1e6 for p in pts], [p[1]["wall_s"] for p in pts], "o-", label="wall time (s)")
    ax.set_xscale("log")
    ax.set_xlabel("S (millions), 500M tokens, K = 5")
    ax.set_ylabel("seconds")
    ax2 = ax.twinx()
    ax2.plot(
        [p[0] / 1e6 for p in pts],
        [p[1]["peak_rss_gib"] for p in pts],
        "s--",
        color="tab:red",
        label="peak RSS (GiB)",
    )
    ax2.set_ylabel("peak RSS (GiB)")
    ax2.set_ylim(0, 8.5)
    ax.set_title("fgram build vs S")
    ax.legend(loc="upper left")
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "scale.png"), dpi=110)
    print(f"wrote {os.path.join(HERE, 'scale.png')}")


if __name__ == "__main__":
    main()
