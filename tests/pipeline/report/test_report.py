"""fgram report: its numbers against the manifest and the brute-force oracle, its page's
images, a refresh folder's versions, an annotate output, and the page in a real browser."""

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import build, manifest, write_parquet
from oracle import oracle_coverage, select

import fgram
from fgram.cli import cli
from fgram.pipeline.errors import ConfigError, InputError
from fgram.pipeline.report.numbers import rank_points
from fgram.pipeline.tables.diff import diff_tables
from fgram.pipeline.tables.index import write_index

K, MIN_COUNT, SIZE = 4, 2, 60
SIZES = [5, 20, 40, 60]


def _docs(seed: int, n: int) -> list[list[int]]:
    """Documents of phrases from a small book: every length has f-grams, counts tie."""
    rng = np.random.default_rng(seed)
    book = [list(rng.integers(1, 30, size=rng.integers(1, 6))) for _ in range(25)]
    docs = []
    for _ in range(n):
        doc: list[int] = []
        for _ in range(rng.integers(1, 12)):
            doc += [int(t) for t in book[min(int(rng.zipf(1.5)) - 1, len(book) - 1)]]
        docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    docs, held = _docs(1, 120), _docs(2, 40)
    src = write_parquet(str(d / "train.parquet"), docs)
    write_parquet(str(d / "held.parquet"), held)
    build(None, [src], d / "t", max_len=K, min_count=MIN_COUNT, size=SIZE, engine="local")
    write_index(str(d / "t"))
    return d, docs, held


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def _check_images(page: str, n: int) -> None:
    """``n`` inline images, each a PNG that decodes to a picture of some size; nothing
    the page loads from elsewhere."""
    from PIL import Image

    images = _images(page)
    assert len(images) == n
    for data in images:
        im = Image.open(io.BytesIO(data))
        im.load()
        assert im.format == "PNG" and im.size[0] > 200 and im.size[1] > 100
        assert len(np.unique(np.asarray(im.convert("RGB")).reshape(-1, 3), axis=0)) > 20  # drawn
    assert re.findall(r'(?:src|href)="(?!data:)', page) == []


def test_report_numbers_equal_the_manifest_and_the_oracle(made):
    d, docs, held = made
    rep = fgram.report(
        d / "t",
        d / "out" / "page.html",
        heldout=[d / "held.parquet"],
        sizes=SIZES,
        top=3,
        points=8,
        coverage={"engine": "local"},
    )
    numbers = json.load(open(d / "out" / "page.json"))
    assert numbers == {k: v for k, v in rep.items() if k != "written"}
    assert rep["written"] == {
        "html": str(d / "out" / "page.html"),
        "json": str(d / "out" / "page.json"),
    }
    m = manifest(d / "t")
    ranked = select(docs, K, MIN_COUNT, SIZE)
    assert rep["kind"] == "table" and rep["format"] == "fgram-report"
    t = rep["table"]
    assert (t["fgrams"], t["cutoff_count"], t["tokens"], t["documents"]) == (
        len(ranked), ranked[-1][1], sum(map(len, docs)), len(docs)
    )  # fmt: skip
    assert (t["max_len"], t["min_count"], t["size"], t["seconds"]) == (
        K,
        MIN_COUNT,
        SIZE,
        m["seconds"],
    )
    by_len = {str(n): sum(len(g) == n for g, _ in ranked) for n in range(2, K + 1)}
    assert rep["by_length"] == {k: v for k, v in by_len.items() if v} == m["by_length"]
    for length, curve in rep["rank_frequency"].items():
        counts = [c for g, c in ranked if len(g) == int(length)]
        assert curve["ranks"] == rank_points(len(counts), 8).tolist()
        assert curve["counts"] == [counts[r - 1] for r in curve["ranks"]]
    for length, rows in rep["top"].items():
        expect = [(i, list(g), c) for i, (g, c) in enumerate(ranked) if len(g) == int(length)]
        assert [(r["fgram_id"], r["tokens"], r["count"]) for r in rows] == expect[:3]
    fields = ("length", "count_threshold", "threshold", "candidates", "distinct", "kept", "seconds")
    assert rep["passes"] == [{f: p[f] for f in fields} for p in m["passes"]]
    stages = rep["time"]["stages"]
    for p in m["passes"]:
        mine = {s["stage"]: s["seconds"] for s in stages if s["part"] == f"pass {p['length']}"}
        assert mine == p["stages"]
    assert rep["time"]["seconds"] == m["seconds"]
    assert sum(s["seconds"] for s in stages) == pytest.approx(m["seconds"], abs=0.01)
    cov = rep["coverage"]
    assert cov["heldout"] == [str(d / "held.parquet")]
    everything = select(docs, K, MIN_COUNT, None)
    for row in cov["by_size"]:
        drop = ("size", "fgrams")
        assert {k: v for k, v in row.items() if k not in drop} == oracle_coverage(
            everything, row["size"], held, K
        )
    page = open(d / "out" / "page.html").read()
    _check_images(page, 5)  # lengths, rank-frequency, funnel, time, coverage
    for shown in (f"{len(ranked):,}", f"{sum(map(len, docs)):,}", "page.json"):
        assert shown in page


def test_the_page_counts_in_words_and_no_legend_covers_a_plot(made, tmp_path, monkeypatch):
    """ "1 input file" (not "files"), the build's time in seconds as a person reads it, the
    first run's kernel compiling its own bar of the time chart, and every legend beside
    the plots, none over an axes' area."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

    from fgram.pipeline.report import plots

    d, _, _ = made
    figures = []
    real = plots.figure

    def kept(draw, size=(7.5, 3.6)):
        figures.append(real(draw, size))
        return figures[-1]

    monkeypatch.setattr(plots, "figure", kept)
    m = manifest(d / "t")
    m["compile_seconds"] = 5.9  # as the first run of an install records it, in its time
    m["seconds"] += 5.9
    (tmp_path / "t").mkdir()
    for name in os.listdir(d / "t"):
        src = d / "t" / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / "t" / name)
    json.dump(m, open(tmp_path / "t" / "manifest.json", "w"))
    rep = fgram.report(tmp_path / "t", tmp_path / "page.html")
    page = open(tmp_path / "page.html").read()
    assert "1 input file," in page and "input files" not in page
    assert f"{m['seconds']:.1f} s</b><span>build time" in page, page[:3000]
    parts = {s["part"]: s["seconds"] for s in rep["time"]["stages"]}
    assert parts["compile (first run)"] == 5.9
    assert sum(s["seconds"] for s in rep["time"]["stages"]) == pytest.approx(m["seconds"], abs=0.01)
    assert len(figures) == 4  # lengths, rank-frequency, funnel, time
    legends = 0
    for fig in figures:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # the constrained layout placed
        renderer = canvas.get_renderer()
        boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
        for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
            legends += 1
            box = legend.get_window_extent(renderer)
            assert not any(Bbox.intersection(box, a) for a in boxes), legend
    assert legends >= 3  # rank-frequency, funnel, time


def test_cli_report_default_grid_text_and_refusals(made, tmp_path, monkeypatch):
    d, docs, held = made
    monkeypatch.chdir(tmp_path)
    args = ["report", str(d / "t"), "--heldout", str(d / "held.parquet"), "--engine", "local"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert f"-> {tmp_path / 'report.html'}" in res.stdout
    rep = json.load(open(tmp_path / "report.json"))
    assert [r["size"] for r in rep["coverage"]["by_size"]] == [10, 20, 50, 60]  # up to S
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "report.html: exists; pass --overwrite" in again.output
    assert CliRunner().invoke(cli, [*args, "--overwrite", "--top", "1"]).exit_code == 0
    assert all(len(rows) == 1 for rows in json.load(open("report.json"))["top"].values())
    for bad, said in (
        (["--sizes", "10,1K"], "--sizes 1K: "),
        (["--sizes", "x"], "--sizes: 'x' is not a number"),
        (["--top", "-1"], "--top must be >= 0"),
        (["-o", str(tmp_path)], "is a folder"),
    ):
        res = CliRunner().invoke(cli, [*args, "--overwrite", *bad])
        assert res.exit_code == 2 and said in res.output, (bad, res.output)
    with pytest.raises(ConfigError, match="--sizes .* give --heldout"):
        fgram.report(d / "t", tmp_path / "x.html", sizes=[5])
    with pytest.raises(InputError, match="not a finished fgram table"):
        fgram.report(tmp_path, tmp_path / "x.html")
    assert not os.path.exists(tmp_path / "x.html") and not os.path.exists(tmp_path / "x.json")


def test_report_of_text_heldout_decodes_and_tokenizes(tmp_path):
    """A table built from text: its top f-grams shown as text, and held-out text
    tokenized with the table's tokenizer for the curve (equal to the same text's
    coverage as token shards)."""
    from fgram.pipeline.formats.synth import generate, word

    generate(str(tmp_path / "c"), 30_000, vocab=200, seed=1, fmt="text")
    generate(str(tmp_path / "h"), 5_000, vocab=200, seed=2, book_seed=1, fmt="text")
    tok = str(tmp_path / "c" / "tokenizer.json")
    fgram.build(tmp_path / "t", [tmp_path / "c"], tokenizer=tok, size=500, engine="local")
    fgram.index(tmp_path / "t")
    held = str(tmp_path / "h" / "part-00000.jsonl.zst")
    res = CliRunner().invoke(
        cli,
        ["report", str(tmp_path / "t"), "-o", str(tmp_path / "r.html"), "--heldout", held,
         "--engine", "local", "--sizes", "100,500"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rep = json.load(open(tmp_path / "r.json"))
    first = rep["top"]["2"][0]
    assert first["text"].split() == [word(t) for t in first["tokens"]]  # synth's words
    cov = fgram.coverage(tmp_path / "t", held, tokenizer=tok, engine="local", sizes=[100, 500])
    assert rep["coverage"]["by_size"] == cov["by_size"]
    # text without --tokenizer: the table's (its manifest names it); sizes spelled as text
    same = fgram.coverage(tmp_path / "t", held, engine="local", sizes="100, 500")
    assert same["by_size"] == cov["by_size"]
    # held-out token shards with --tokenizer (to show the f-grams as text): read as tokens
    fgram.tokenize([held], tmp_path / "hs", tok, engine="local")
    rep = fgram.report(
        tmp_path / "t", tmp_path / "r3.html", heldout=[tmp_path / "hs"], tokenizer=tok,
        sizes=[100, 500], coverage={"engine": "local"},
    )  # fmt: skip
    assert rep["coverage"]["by_size"] == cov["by_size"]
    shutil.move(tok, tmp_path / "elsewhere.json")  # the table's tokenizer is gone
    with pytest.raises(ConfigError, match="text; give its tokenizer"):
        fgram.report(tmp_path / "t", tmp_path / "r2.html", heldout=[held])


def test_report_of_a_refresh_folder_and_of_tags(tmp_path):
    docs = _docs(3, 90)
    a = write_parquet(str(tmp_path / "a.parquet"), docs[:60])
    b = write_parquet(str(tmp_path / "b.parquet"), docs[60:])
    opts = {"max_len": K, "min_count": MIN_COUNT, "size": SIZE, "engine": "local"}
    fgram.refresh(tmp_path / "r", [a], **opts)
    fgram.refresh(tmp_path / "r", [a, b], **opts)
    rep = fgram.report(tmp_path / "r", tmp_path / "r.html")
    assert rep["kind"] == "refresh"
    old, new = sorted(os.listdir(tmp_path / "r" / "versions"))
    assert [v["version"] for v in rep["versions"]] == [old, new]
    assert [v["current"] for v in rep["versions"]] == [False, True]
    assert rep["versions"][1]["shards"] == {"new": 1, "kept": 1, "removed": 0}
    assert "diff" not in rep["versions"][0]
    d = diff_tables(str(tmp_path / "r" / "versions" / old), str(tmp_path / "r" / "versions" / new))
    assert rep["versions"][1]["diff"] == {
        k: d[k] for k in ("added", "removed", "kept", "kept_count_changed")
    }
    ranked = select(docs, K, MIN_COUNT, SIZE)
    assert rep["table"]["fgrams"] == len(ranked) and rep["table"]["tokens"] == sum(map(len, docs))
    _check_images(open(tmp_path / "r.html").read(), 5)  # the table's four, the versions'
    quick = fgram.report(tmp_path / "r", tmp_path / "q.html", diffs=False)
    assert all("diff" not in v for v in quick["versions"])
    # an annotate output: its match-length histogram
    fgram.index(tmp_path / "r")
    tags = fgram.annotate(tmp_path / "r", [b], tmp_path / "tags", engine="local")
    rep = fgram.report(tmp_path / "tags", tmp_path / "tags.html")
    cov = tags["coverage"]
    assert rep["kind"] == "tags" and rep["coverage"] == cov
    assert rep["match_lengths"] == {"1": cov["unmatched"], **cov["matched_by_length"]}
    assert sum(rep["match_lengths"].values()) == sum(map(len, docs[60:]))
    _check_images(open(tmp_path / "tags.html").read(), 1)
    with pytest.raises(ConfigError, match="tags have no coverage curve"):
        fgram.report(tmp_path / "tags", tmp_path / "t2.html", heldout=[b])


def test_report_without_matplotlib_has_its_tables_and_says_what_to_install(made, tmp_path):
    """In a process where matplotlib cannot be imported: the page, no image, one note."""
    d, _, _ = made
    code = "import sys; sys.modules['matplotlib'] = None\nfrom fgram.cli import main; main()\n"
    out = subprocess.run(
        [sys.executable, "-c", code, "report", str(d / "t"), "-o", str(tmp_path / "p.html")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "warning: plots need matplotlib: pip install 'fgram[report]'" in out.stderr
    page = open(tmp_path / "p.html").read()
    assert _images(page) == [] and "pip install &#x27;fgram[report]&#x27;" in page
    assert json.load(open(tmp_path / "p.json"))["by_length"] == manifest(d / "t")["by_length"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="Debian's chromium is not installed")
def test_the_page_in_a_real_browser(made, tmp_path):
    """Headless Chromium draws the page: a screenshot shows the plots' own colours (the
    inline PNGs decoded and laid out), the tables' text and no broken-image box."""
    from PIL import Image

    d, _, _ = made
    fgram.report(d / "t", tmp_path / "p.html", heldout=[d / "held.parquet"],
                 coverage={"engine": "local"})  # fmt: skip
    shot = tmp_path / "shot.png"
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         "--window-size=1100,5200", f"--screenshot={shot}", f"file://{tmp_path / 'p.html'}"],
        capture_output=True,
        timeout=120,
        check=True,
    )  # fmt: skip
    im = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert im.shape[:2] == (5200, 1100)

    def near(rgb: tuple[int, int, int]) -> int:
        return int((np.abs(im - np.array(rgb)).sum(axis=2) < 30).sum())

    assert near((0x4C, 0x72, 0xB0)) > 5000  # the bars of f-grams per length, the time's count
    assert near((0x2F, 0x5D, 0x8C)) > 500  # the funnel's kept bars
    assert near((0xC4, 0x4E, 0x52)) > 100  # the mean match length curve
    assert near((0xF6, 0xF7, 0xF9)) > 50_000  # the page's background around the sections
