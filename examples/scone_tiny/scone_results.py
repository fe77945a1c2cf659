"""A finished run's record (kept beside the example, refused when made with other
settings), and the results made from the records: the table, the verdict in words and
the plot of the loss curves."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from scone_data import KINDS, read_json

# ---- 6. results ---------------------------------------------------------------------

# what a run's numbers depend on besides its arm and seed: a record made with other
# settings is never mixed into the results
CONFIG = ("vocab", "max_len", "layers", "dim", "heads", "seq_len", "batch", "steps", "lr",
          "engram_heads", "engram_memory", "eval_every", "probe", "device")  # fmt: skip
# settings added since records were first kept: a record without one was made at its default
DEFAULTS = {"engram_memory": 1.0}


def config_of(args, size: int) -> dict:
    return {"size": size, **{k: getattr(args, k) for k in CONFIG}}


def recorded(records: str, config: dict, kind: str, seed: int) -> dict | None:
    """The run's record when it is kept, or None; one made with other settings stops the
    run, naming the file and the settings that differ."""
    path = os.path.join(records, f"{kind}-seed{seed}.json")
    if not os.path.exists(path):
        return None
    rec = read_json(path)
    kept = {**DEFAULTS, **rec["config"]}
    differ = sorted(k for k in config.keys() | kept.keys() if config.get(k) != kept.get(k))
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


def summarize(
    args,
    out: str,
    fg_info: dict,
    data: dict,
    runs: list[dict],
    engram=None,
    audit=None,
    counted=None,
) -> dict:
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
            **described(engram),
            "audit": audit,
            "counted": None
            if counted is None
            else {**described(counted), "exact": counted["exact"]},
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


def described(setup: dict) -> dict:
    """An Engram arm's setup as results.json keeps it: its configuration and table."""
    config = dataclasses.asdict(setup["config"])
    return {"config": config, "rows": setup["rows"], "values": setup["values"]}


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
    if "engram_counted" in m and "engram" in m:
        out.append(compare("engram_counted", "engram", "exact rows for the counted n-grams "
                           "(counted Engram) against hashed buckets (Engram)"))  # fmt: skip
    return out


NAMES = {"baseline": "baseline", "baseline_x2": "baseline x2", "scone": "SCONE",
         "engram": "Engram", "engram_counted": "counted Engram"}  # fmt: skip


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
    audit = (res["engram"] or {}).get("audit")
    if audit:
        orders = ", ".join(audit)

        def pct(key: str) -> str:
            return ", ".join(f"{100 * a[key]:.2f}%" for a in audit.values())

        lines.append(
            f"\nEngram's buckets (`fgram engram-audit` of its configuration over the training "
            f"text's canonical n-grams at fgram's cutoff, {pct('coverage')} of the positions "
            f"of orders {orders}): per head {pct('collided_share')} of their occurrences "
            f"share a bucket with a more frequent n-gram; in every head at once "
            f"{pct('all_heads_share')}."
        )
    counted = (res["engram"] or {}).get("counted")
    if counted:
        ex = counted["exact"]
        heads = counted["config"]["n_head_per_ngram"]
        own = sum(e["ngrams"] for e in ex.values()) * heads
        lines.append(
            "\nThe counted Engram's rows of their own: "
            + ", ".join(f"{e['ngrams']:,} of the {e['of']:,} {n}-grams" for n, e in ex.items())
            + " counted ("
            + ", ".join(f"{100 * e['positions_share']:.1f}%" for e in ex.values())
            + " of the training text's positions of each order), "
            f"{100 * own / counted['rows']:.1f}% of its table's rows; every other n-gram in "
            f"buckets of {min(counted['config']['engram_vocab_size']):,} a head (the prime "
            "above)."
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
              "engram": "#8172b2", "engram_counted": "#dd8452"}  # fmt: skip
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
    whole.set_title(", ".join(NAMES[k] for k in KINDS if any(r["kind"] == k for r in drawn)),
                    fontsize=9)  # fmt: skip
    fig.legend(loc="outside right upper", fontsize=7)
    fig.savefig(path)
