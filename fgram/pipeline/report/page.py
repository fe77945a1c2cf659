"""The report as one self-contained HTML page: the numbers of `numbers` (its
``report.json``) as tables, and the plots of `plots` inlined as PNG data URIs, so the
page opens offline in any browser. Without matplotlib the page has the tables and says
which extra draws the plots."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import Any

from fgram.pipeline.config.options import human
from fgram.pipeline.report.plots import PLOTS_MISSING, pivot, plots_available

_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #1f2328; background: #f6f7f9; }
main { max-width: 1040px; margin: 0 auto; padding: 24px 28px 48px; }
header h1 { margin: 0 0 4px; font-size: 26px; }
header p { margin: 0; color: #59636e; }
section { background: #fff; border: 1px solid #d9dde3; border-radius: 8px;
          padding: 16px 20px; margin: 18px 0; }
h2 { font-size: 19px; margin: 0 0 10px; }
h3 { font-size: 15px; margin: 14px 0 6px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid #d9dde3; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card b { display: block; font-size: 20px; }
.card span { color: #59636e; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e7eb; padding: 3px 10px; text-align: right; }
th { background: #f0f2f5; }
td.l, th.l { text-align: left; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre; }
img { max-width: 100%; display: block; margin: 6px 0; }
.note { background: #fff8e1; border: 1px solid #f0d98c; border-radius: 6px; padding: 8px 12px; }
.muted { color: #59636e; font-size: 13px; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _n(x: Any) -> str:
    """A number as the page shows it: thousands separated, floats to 3 places."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.3f}" if not math.isnan(x) else "-"
    return _e(x)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 0) -> str:
    """An HTML table; its first ``left`` columns aligned left."""

    def cell(tag: str, i: int, v: str) -> str:
        return f"<{tag}{' class=l' if i < left else ''}>{v}</{tag}>"

    out = ["<table><tr>", *(cell("th", i, _e(h)) for i, h in enumerate(head)), "</tr>"]
    for row in rows:
        out += ["<tr>", *(cell("td", i, v) for i, v in enumerate(row)), "</tr>"]
    return "".join(out) + "</table>"


def _img(plots: dict[str, bytes], name: str, alt: str) -> str:
    if name not in plots:
        return ""
    data = base64.b64encode(plots[name]).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">'


def _files(n: int) -> str:
    """'1 input file', '3 input files'."""
    return f"{_n(n)} input file{'' if n == 1 else 's'}"


def _seconds(x: float | None) -> str:
    """A run's time as a person reads it: '16.6 s', '2 min 5 s'."""
    if x is None:
        return "-"
    if x < 60:
        return f"{x:.1f} s"
    return f"{int(x // 60)} min {round(x % 60)} s"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _summary(t: dict[str, Any]) -> str:
    cards = [
        ("f-grams", _n(t["fgrams"])),
        ("cutoff count", _n(t["cutoff_count"])),
        ("tokens", _n(t["tokens"])),
        ("documents", _n(t["documents"])),
        ("K (longest)", _n(t["max_len"])),
        ("min count", _n(t["min_count"])),
        ("size S asked", _n(t["size"]) if t["size"] else "all"),
        ("build time", _seconds(t["seconds"])),
    ]
    body = "".join(f'<div class="card"><b>{v}</b><span>{_e(k)}</span></div>' for k, v in cards)
    extra = f"{_e(t['path'])}: {_files(t['inputs'])}, engine {_e(t['engine'])}"
    if t.get("tokenizer"):
        extra += f", tokenized with {_e(t['tokenizer'])}"
    if t.get("text_by"):
        extra += f"; f-grams shown as text by {_e(t['text_by'])}"
    return (
        f'<section id="summary"><h2>Table</h2><div class="cards">{body}</div>'
        f'<p class="muted">{extra}</p></section>'
    )


def _coverage(cov: dict[str, Any], plots: dict[str, bytes]) -> str:
    rows = cov["by_size"]
    lengths = list(rows[0]["share_by_length"]) if rows else []
    body = [
        [
            _e(human(r["size"])),
            _n(r["fgrams"]),
            _pct(1 - r["share_unmatched"]),
            _n(r["mean_match_length"]),
            *(_pct(r["share_by_length"][n]) for n in lengths),
        ]
        for r in rows
    ]
    held = ", ".join(cov.get("heldout", []))
    return (
        '<section id="coverage"><h2>Coverage of held-out text by table size S</h2>'
        f'<p class="muted">{_n(cov["positions"])} held-out positions ({_e(held)}). '
        "Each row is what a build with <code>--size S</code> would match: the table's "
        "first S f-grams, exactly. Where the curve flattens, more rows buy little.</p>"
        + _img(plots, "coverage", "coverage by table size")
        + _table(
            ["S", "f-grams", "matched", "mean match length", *(f"len {n}" for n in lengths)],
            body,
        )
        + "</section>"
    )


def _at(size: int | None) -> str:
    return f"{_n(size)} buckets per head" if size else "none of the sizes"


def _engram(audit: dict[str, Any], plots: dict[str, bytes]) -> str:
    cfg = audit["config"]
    body = [
        [_e(layer), _e(n), _n(o["heads"][0]["size"]), _n(len(o["heads"]))]
        + [_pct(sum(h["collided_share"] for h in o["heads"]) / len(o["heads"]))]
        + [_pct(max(h["collided_share"] for h in o["heads"]))]
        + [_pct(o["all_heads"]["collided_share"])]
        for layer, per in audit["layers"].items()
        for n, o in per.items()
    ]
    cover = ", ".join(
        f"order {n}: {_pct(o['coverage'])}" for n, o in audit["orders"].items() if o["coverage"]
    )
    under = "; ".join(
        f"order {n}: under 1% at {_at(u['0.01'])}, under 0.1% at {_at(u['0.001'])}"
        for n, u in audit["under"].items()
    )
    return (
        '<section id="engram"><h2>Engram collision audit</h2>'
        f'<p class="muted">The configuration\'s orders 2..{cfg["max_ngram_size"]}, '
        f"{cfg['n_head_per_ngram']} heads, layers {_e(cfg['layer_ids'])}, hashed over this "
        "table's canonical n-grams. Collided: the share of an order's occurrences whose "
        "bucket holds a more frequent n-gram. Exact for the table's n-grams"
        + (f" (of the corpus's positions they cover {cover})" if cover else "")
        + f". {under}.</p>"
        + _img(plots, "engram", "collided share by table size")
        + _table(
            [
                "layer",
                "order",
                "buckets (first head)",
                "heads",
                "collided (mean)",
                "collided (worst head)",
                "every head",
            ],
            body,
        )  # fmt: skip
        + "</section>"
    )


def _fgram_text(row: dict[str, Any]) -> str:
    tokens = " ".join(map(str, row["tokens"]))
    text = f"<code>{_e(repr(row['text']))}</code>" if "text" in row else ""
    return f"{text} <span class=muted>{_e(tokens)}</span>" if text else _e(tokens)


def _table_sections(r: dict[str, Any], plots: dict[str, bytes]) -> str:
    t = r["table"]
    parts = [
        '<section id="lengths"><h2>F-grams per length</h2>',
        _img(plots, "by_length", "f-grams per length"),
        _table(["length", "f-grams"], [[_e(k), _n(v)] for k, v in r["by_length"].items()]),
        "</section>",
        '<section id="rank-frequency"><h2>Rank-frequency per length</h2>',
        f'<p class="muted">Cutoff count (the count of the last f-gram kept): '
        f"<b>{_n(t['cutoff_count'])}</b>.</p>",
        _img(plots, "rank_frequency", "rank-frequency per length"),
        "</section>",
        '<section id="passes"><h2>Pass funnel</h2>',
        '<p class="muted">Per pass: candidate positions counted, distinct n-grams, kept '
        "(frequent) n-grams, and the count thresholds it counted and kept at.</p>",
        _img(plots, "funnel", "pass funnel"),
        _table(
            ["pass", "counted at", "kept at", "candidates", "distinct", "kept", "seconds"],
            [
                [
                    _n(p["length"]),
                    _n(p["count_threshold"]),
                    _n(p["threshold"]),
                    _n(p["candidates"]),
                    _n(p["distinct"]),
                    _n(p["kept"]),
                    _n(p["seconds"]),
                ]
                for p in r["passes"]
            ],
        ),
        "</section>",
        '<section id="time"><h2>Where the time went</h2>',
        f'<p class="muted">{_n(r["time"]["seconds"])} s in all.</p>',
        _img(plots, "time", "time per pass and stage"),
        _time_table(r["time"]["stages"]),
        "</section>",
        '<section id="top"><h2>Top f-grams per length</h2>',
    ]
    for length, rows in r["top"].items():
        parts.append(f"<h3>length {_e(length)}</h3>")
        parts.append(
            _table(
                ["f-gram", "count", "fgram_id"],
                [[_fgram_text(x), _n(x["count"]), _n(x["fgram_id"])] for x in rows],
                left=1,
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _time_table(stages: list[dict[str, Any]]) -> str:
    parts, names, cells = pivot(stages)
    rows = [
        [
            _e(p),
            *(_n(cells[p, n]) if (p, n) in cells else "" for n in names),
            _n(round(sum(v for (q, _), v in cells.items() if q == p), 3)),
        ]
        for p in parts
    ]
    return _table(["part", *names, "all"], rows, left=1)


def _versions(versions: list[dict[str, Any]], plots: dict[str, bytes]) -> str:
    rows = []
    for v in versions:
        d = v.get("diff") or {}
        sh = v["shards"]
        rows.append(
            [
                _e(v["version"]) + (" (current)" if v["current"] else ""),
                _n(v["tokens"]),
                f"+{_n(sh['new'])} / {_n(sh['kept'])} / -{_n(sh['removed'])}",
                _n(v["fgrams"]),
                _n(v["cutoff_count"]),
                f"+{_n(d['added'])}" if d else "-",
                f"-{_n(d['removed'])}" if d else "-",
                _n(d.get("kept_count_changed")) if d else "-",
                _n(v["seconds"]),
            ]
        )
    return (
        '<section id="versions"><h2>Versions</h2>'
        + _img(plots, "versions", "versions")
        + _table(
            [
                "version",
                "tokens",
                "shards new / kept / removed",
                "f-grams",
                "cutoff",
                "added",
                "removed",
                "count changed",
                "seconds",
            ],
            rows,
            left=1,
        )
        + "</section>"
    )


def _tags(r: dict[str, Any], plots: dict[str, bytes]) -> str:
    t = r["tags"]
    total = sum(r["match_lengths"].values()) or 1
    rows = [
        ["none" if k == "1" else _e(k), _n(v), _pct(v / total)]
        for k, v in r["match_lengths"].items()
    ]
    return (
        '<section id="tags"><h2>Tags</h2>'
        f'<p class="muted">{_n(t["positions"])} positions of {_files(t["inputs"])}, '
        f"tagged with {_e(t['table'].get('path'))} ({_n(t['table'].get('fgrams'))} f-grams, "
        f"K = {_n(t['table'].get('max_len'))}); mean match length "
        f"{_n(r['coverage']['mean_match_length'])}.</p>"
        + _img(plots, "match_lengths", "match-length histogram")
        + _table(["match length", "positions", "share"], rows)
        + "</section>"
    )


def render(report: dict[str, Any], plots: dict[str, bytes], json_name: str) -> str:
    """The page of ``report`` with ``plots`` (`make_plots`) inlined; ``json_name``: where
    the page says its numbers are."""
    title = f"fgram report: {report['source']}"
    body = [
        f"<header><h1>fgram report</h1><p>{_e(report['source'])} &middot; {_e(report['kind'])}"
        f" &middot; fgram {_e(report['fgram_version'])} &middot; {_e(report['created'])}</p>"
        "</header>"
    ]
    if not plots_available():
        body.append(f'<p class="note">No plots here: {_e(PLOTS_MISSING)}.</p>')
    if "table" in report:
        body.append(_summary(report["table"]))
    if (report.get("coverage") or {}).get("by_size"):
        body.append(_coverage(report["coverage"], plots))
    if report.get("engram"):
        body.append(_engram(report["engram"], plots))
    if "tags" in report:
        body.append(_tags(report, plots))
    if report.get("versions"):
        body.append(_versions(report["versions"], plots))
    if "table" in report:
        body.append(_table_sections(report, plots))
    body.append(f'<p class="muted">The same numbers are in {_e(json_name)}.</p>')
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>"
        + "".join(body)
        + "</main></body></html>\n"
    )
