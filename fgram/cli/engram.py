"""`fgram engram-audit`: how an Engram configuration's hashed tables collide on a corpus."""

from __future__ import annotations

import json
from typing import Any

import click

from fgram.cli.options import config_options
from fgram.pipeline.config.audit import EngramAuditConfig


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or 100 * x >= 0.01:
        return f"{100 * x:.2f}%"
    return f"{100 * x:.1e}%"


def audit_lines(rep: dict[str, Any]) -> list[str]:
    """The audit as a person reads it."""
    cfg, can = rep["config"], rep["canonical"]
    lines = [
        f"engram audit of {rep['table']} (canonical ids: {can['size']} of "
        f"{can['vocab_size']} token ids)",
        f"  orders 2..{cfg['max_ngram_size']}, {cfg['n_head_per_ngram']} heads, layers "
        f"{cfg['layer_ids']}, buckets per head from {cfg['engram_vocab_size']}",
        f"  {'order':>5} {'n-grams':>12} {'occurrences':>14} {'coverage':>9}",
    ]
    for n, o in rep["orders"].items():
        cov = "-" if o["coverage"] is None else f"{100 * o['coverage']:.4g}%"
        lines.append(f"  {n:>5} {o['ngrams']:>12} {o['occurrences']:>14} {cov:>9}")
    lines.append(
        f"  {'layer':>5} {'order':>5} {'buckets used':>13} {'sharing':>10}  "
        "collided share: heads' mean [min, max], every head"
    )
    for layer, per in rep["layers"].items():
        for n, o in per.items():
            heads = o["heads"]
            shares = [h["collided_share"] for h in heads]
            used = sum(h["buckets_used"] for h in heads) // len(heads)
            sharing = sum(h["sharing"] for h in heads) // len(heads)
            lines.append(
                f"  {layer:>5} {n:>5} {used:>13} {sharing:>10}  {_pct(sum(shares) / len(shares))}"
                f" [{_pct(min(shares))}, {_pct(max(shares))}], "
                f"{_pct(o['all_heads']['collided_share'])}"
            )
    if rep["sizes"]:
        orders = list(rep["orders"])
        lines.append(
            "  size curve (buckets per head; collided share, mean of layers and heads; "
            "every head in brackets):"
        )
        lines.append(f"  {'size':>12} " + " ".join(f"{'order ' + n:>20}" for n in orders))
        for row in rep["sizes"]:
            cells = [
                f"{_pct(row['orders'][n]['collided_share'])} "
                f"({_pct(row['orders'][n]['all_heads_share'])})"
                for n in orders
            ]
            lines.append(f"  {row['size']:>12} " + " ".join(f"{c:>20}" for c in cells))
        for t, mark in (("0.01", "1%"), ("0.001", "0.1%")):
            at = [f"order {n} at {u[t] or 'none of these sizes'}" for n, u in rep["under"].items()]
            lines.append(f"  under {mark}: " + ", ".join(at))
    lines.append(
        "  (exact for the table's n-grams: those it left out are rarer than any it holds; "
        "coverage: its occurrences of the corpus's positions)"
    )
    return lines


@click.command("engram-audit", short_help="How an Engram config's hashed tables collide.")
@click.argument("table", metavar="TABLE")
@config_options(EngramAuditConfig, exclude=("table",))
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def engram_audit_command(table, as_json, **opts):
    """Audit an Engram configuration (hashed n-gram embeddings, DeepSeek's public demo)
    against the exact counts of TABLE, a table built with --canonical: for each layer,
    order and head, the table's n-grams hashed into the head's buckets: buckets used,
    n-grams sharing a bucket, and the collided share (the part of the order's
    occurrences whose bucket holds a more frequent n-gram), also in every head at once;
    then the same at other table sizes, and the smallest under 1% and 0.1%.

    \b
    fgram build fgrams shards/ --canonical -K 3
    fgram engram-audit fgrams --engram engram.toml --sizes 100K,1M,10M
    """
    from fgram.api import engram_audit

    rep = engram_audit(table, **opts)
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    for line in audit_lines(rep):
        click.echo(line)
