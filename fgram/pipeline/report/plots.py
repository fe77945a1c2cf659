"""The report's plots, drawn with matplotlib (the `report` extra) as PNG bytes for the
page (`page`) to inline; without matplotlib there are none, and the page says which
extra draws them."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

PLOTS_MISSING = "plots need matplotlib: pip install 'fgram[report]'"
_STAGE_COLORS = {
    "count": "#4c72b0",
    "merge": "#dd8452",
    "keep": "#55a868",
    "table": "#55a868",
    "decode": "#8172b3",
    "rank_write": "#937860",
    "select": "#937860",
    "tokenize": "#da8bc3",
    "kernels": "#ccb974",  # the first run of an install compiling them
}


def _plt() -> Any:
    """matplotlib's Figure class, or None when it is not installed."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def plots_available() -> bool:
    return _plt() is not None


def figure(draw: Callable[[Any], None], size: tuple[float, float] = (7.5, 3.6)) -> Any:
    """A figure drawn by ``draw(fig)`` (no pyplot: no global state)."""
    fig = _plt()(figsize=size, dpi=110, layout="constrained")
    draw(fig)
    return fig


def _legend(fig: Any, fontsize: int = 8) -> None:
    """The figure's legend right of its plots, never over a bar or a line."""
    fig.legend(loc="outside right upper", fontsize=fontsize)


def _png(draw: Callable[[Any], None], size: tuple[float, float] = (7.5, 3.6)) -> bytes:
    """A figure drawn by ``draw(fig)``, as PNG bytes."""
    fig = figure(draw, size)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _lengths_plot(by_length: dict[str, int]) -> bytes:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        ax.bar(list(by_length), list(by_length.values()), color="#4c72b0")
        ax.set_xlabel("length (tokens)")
        ax.set_ylabel("f-grams")
        ax.set_title("f-grams per length")
        for x, v in enumerate(by_length.values()):
            ax.annotate(f"{v:,}", (x, v), ha="center", va="bottom", fontsize=8)

    return _png(draw, (6, 3.2))


def _rank_plot(curves: dict[str, dict[str, list[int]]], cutoff: int | None) -> bytes:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        for length, c in curves.items():
            if c["ranks"]:
                ax.plot(c["ranks"], c["counts"], marker=".", ms=3, label=f"length {length}")
        if cutoff:
            ax.axhline(cutoff, color="grey", ls="--", lw=1, label=f"cutoff count {cutoff:,}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rank within its length")
        ax.set_ylabel("count")
        ax.set_title("rank-frequency per length")
        _legend(fig, 8)

    return _png(draw)


def _funnel_plot(passes: list[dict[str, Any]]) -> bytes:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        keys = [("candidates", "#c8d6e5"), ("distinct", "#7f9fc6"), ("kept", "#2f5d8c")]
        width = 0.27
        for j, (key, color) in enumerate(keys):
            xs = [i + (j - 1) * width for i in range(len(passes))]
            ys = [max(p.get(key) or 0, 0) for p in passes]
            ax.bar(xs, [max(y, 0.8) for y in ys], width, color=color, label=key)
        for i, p in enumerate(passes):
            top = max(p.get("candidates") or 1, 1)
            ax.annotate(
                f">= {p['count_threshold']:,} / {p['threshold']:,}",
                (i, top),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_xticks(range(len(passes)), [f"pass {p['length']}" for p in passes])
        ax.set_yscale("log")
        ax.set_ylabel("n-grams")
        ax.set_title("pass funnel (labels: counted at / kept at)")
        _legend(fig, 8)
        ax.margins(y=0.15)

    return _png(draw)


_STAGE_ORDER = ("tokenize", "plan", "count", "scan", "merge", "keep", "table", "decode")


def pivot(
    stages: list[dict[str, Any]],
) -> tuple[list[str], list[str], dict[tuple[str, str], float]]:
    """(parts in order, stages in a reading order, seconds by (part, stage))."""
    parts = list(dict.fromkeys(r["part"] for r in stages))
    names = list(dict.fromkeys(r["stage"] for r in stages))
    order = {n: i for i, n in enumerate(_STAGE_ORDER)}
    names.sort(key=lambda n: order.get(n, len(order)))
    cells = {(r["part"], r["stage"]): float(r["seconds"]) for r in stages}
    return parts, names, cells


def _time_plot(stages: list[dict[str, Any]]) -> bytes:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        parts, names, cells = pivot(stages)
        left = [0.0] * len(parts)
        for name in names:
            widths = [cells.get((p, name), 0.0) for p in parts]
            color = _STAGE_COLORS.get(name, "#8c8c8c")
            ax.barh(range(len(parts)), widths, left=left, color=color, label=name)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.set_yticks(range(len(parts)), parts, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        ax.set_title("time per pass and stage")
        _legend(fig, 7)

    return _png(draw, (7.5, max(2.4, 0.45 * len(pivot(stages)[0]) + 1.2)))


def _coverage_plot(rows: list[dict[str, Any]], table_rows: int | None) -> bytes:
    def draw(fig: Any) -> None:
        left, right = fig.subplots(1, 2)
        sizes = [r["size"] for r in rows]
        lengths = list(rows[0]["share_by_length"]) if rows else []
        shares = [[100 * r["share_by_length"][n] for r in rows] for n in lengths]
        left.stackplot(sizes, *shares, labels=[f"length {n}" for n in lengths], alpha=0.85)
        left.plot(sizes, [100 * (1 - r["share_unmatched"]) for r in rows], "k.-", lw=1)
        left.set_xscale("log")
        left.set_xlabel("table size S (f-grams)")
        left.set_ylabel("% of held-out positions")
        left.set_title("matched, by match length")
        _legend(fig, 7)
        right.plot(sizes, [r["mean_match_length"] for r in rows], "o-", color="#c44e52", ms=4)
        right.set_xscale("log")
        right.set_xlabel("table size S (f-grams)")
        right.set_ylabel("mean match length (1: unmatched)")
        right.set_title("mean match length")
        right.ticklabel_format(axis="y", useOffset=False)
        if table_rows:
            for ax in (left, right):
                ax.axvline(table_rows, color="grey", ls="--", lw=1)

    return _png(draw, (9, 3.6))


def _engram_plot(rows: list[dict[str, Any]]) -> bytes:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        sizes = [r["size"] for r in rows]
        for i, n in enumerate(rows[0]["orders"] if rows else []):
            color = f"C{i}"
            share = [100 * r["orders"][n]["collided_share"] for r in rows]
            every = [100 * r["orders"][n]["all_heads_share"] for r in rows]
            ax.plot(sizes, share, "o-", color=color, ms=4, label=f"order {n}: a head (mean)")
            ax.plot(sizes, every, "s--", color=color, ms=3, lw=1, label=f"order {n}: every head")
        for mark in (1, 0.1):
            ax.axhline(mark, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(0, 100)
        ax.set_xlabel("buckets per head (table size)")
        ax.set_ylabel("% of occurrences collided")
        ax.set_title("collided share by table size")
        _legend(fig, 7)

    return _png(draw, (7.5, 3.6))


def _versions_plot(versions: list[dict[str, Any]]) -> bytes:
    def draw(fig: Any) -> None:
        left, right = fig.subplots(1, 2)
        names = [v["version"][:16] for v in versions]
        added = [v.get("diff", {}).get("added", 0) for v in versions]
        removed = [-v.get("diff", {}).get("removed", 0) for v in versions]
        left.bar(names, added, color="#55a868", label="added")
        left.bar(names, removed, color="#c44e52", label="removed")
        left.axhline(0, color="black", lw=0.8)
        left.set_ylabel("f-grams vs the version before")
        left.set_title("what each refresh changed")
        _legend(fig, 8)
        right.bar(names, [v["tokens"] for v in versions], color="#4c72b0")
        right.set_ylabel("tokens")
        right.set_title("corpus per version")
        for ax in (left, right):
            ax.tick_params(axis="x", labelsize=7, rotation=25)

    return _png(draw, (9, 3.4))


def _match_plot(match_lengths: dict[str, int]) -> bytes:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        total = sum(match_lengths.values()) or 1
        names = ["none" if k == "1" else k for k in match_lengths]
        ax.bar(names, [100 * v / total for v in match_lengths.values()], color="#4c72b0")
        ax.set_xlabel("match length (none: the token alone)")
        ax.set_ylabel("% of positions")
        ax.set_title("match-length histogram")

    return _png(draw, (6, 3.2))


def make_plots(report: dict[str, Any]) -> dict[str, bytes]:
    """Every plot the report has data for, by name (empty without matplotlib)."""
    if not plots_available():
        return {}
    out: dict[str, bytes] = {}
    table = report.get("table")
    if table is not None:
        out["by_length"] = _lengths_plot(report["by_length"])
        out["rank_frequency"] = _rank_plot(report["rank_frequency"], table["cutoff_count"])
        if report["passes"]:
            out["funnel"] = _funnel_plot(report["passes"])
        out["time"] = _time_plot(report["time"]["stages"])
    cov = report.get("coverage") or {}
    if cov.get("by_size"):
        out["coverage"] = _coverage_plot(cov["by_size"], (table or {}).get("fgrams"))
    if report.get("versions"):
        out["versions"] = _versions_plot(report["versions"])
    if (report.get("engram") or {}).get("sizes"):
        out["engram"] = _engram_plot(report["engram"]["sizes"])
    if report.get("match_lengths"):
        out["match_lengths"] = _match_plot(report["match_lengths"])
    return out
