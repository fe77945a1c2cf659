"""The commands that read a table: show, diff, index, annotate, coverage, embed, lookup,
verify."""

from __future__ import annotations

import json

import click

from fgram.cli.options import config_options, fail, part_shown, shown
from fgram.cli.results import finished, json_option
from fgram.pipeline.config.commands import AnnotateConfig, EmbedConfig
from fgram.pipeline.config.tools import (
    DiffConfig,
    IndexConfig,
    LookupConfig,
    ShowConfig,
    VerifyConfig,
)

# annotate tags token shards: text is tokenized first; its coverage is `fgram coverage`'s
ANNOTATE_TAKES_NOT = ("table", "inputs", "tokenizer", "sizes", "text_field", "doc_per_line")


@click.command("diff", short_help="F-grams added and removed between two tables.")
@click.argument("old")
@click.argument("new")
@config_options(DiffConfig, exclude=("old", "new"))
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
def diff_command(old, new, as_json, **opts):
    """What changed from table OLD to table NEW: f-grams added and removed, the cutoff.

    OLD and NEW are build outputs, versions (TABLE/versions/<id>) or refresh folders
    (their current version).

    \b
    fgram diff fgrams-june fgrams --top 20
    fgram diff TABLE/versions/<id> TABLE --json
    """
    from fgram.api import diff

    cfg = DiffConfig(old=old, new=new, **opts)
    rep = diff(old, new, **opts)
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    click.echo(f"{rep['old']} -> {rep['new']}")
    click.echo(
        f"f-grams {rep['fgrams']['old']} -> {rep['fgrams']['new']}: "
        f"+{rep['added']} added, -{rep['removed']} removed, {rep['kept']} kept "
        f"({rep['kept_count_changed']} with another count)"
    )
    click.echo(
        f"cutoff count {rep['cutoff_count']['old']} -> {rep['cutoff_count']['new']}; "
        f"tokens {rep['tokens']['old']} -> {rep['tokens']['new']}"
    )
    from fgram.pipeline.tables.versions import open_table
    from fgram.pipeline.text.tokenizer import table_tokenizer

    tok = table_tokenizer(cfg.tokenizer, open_table(new, cfg.storage)[1])
    for name in ("added", "removed"):
        for row in rep[f"top_{name}"]:
            text = f"  {tok.decode(row['tokens'])!r}" if tok is not None else ""
            sign = "+" if name == "added" else "-"
            click.echo(f"  {sign} {row['count']:>10}  {row['tokens']}{text}")


@click.command("show", short_help="A table's summary and top f-grams.")
@click.argument("table", metavar="TABLE")
@config_options(ShowConfig, exclude=("table",))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def show_command(table, as_json, **opts):
    """Summarise table TABLE: the manifest and the top f-grams.

    TABLE is a build output or a refresh folder (its current version), a path or a URI.

    \b
    fgram show fgrams --top 20 --tokenizer tokenizer.json
    """
    from fgram.api import show
    from fgram.pipeline.tables.versions import resolve_table

    given = ShowConfig(table=table, **opts)
    manifest = show(table, **opts)
    rows = manifest.pop("top_fgrams")
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    loc = resolve_table(table, given.storage)
    cfg = manifest["config"]
    click.echo(f"fgram table {shown(loc)} (fgram {manifest['fgram_version']})")
    click.echo(
        f"  inputs: {len(manifest['inputs'])} files, {manifest['totals']['tokens']} tokens, "
        f"{manifest['totals']['documents']} documents"
    )
    click.echo(f"  config: K={cfg['max_len']} min_count={cfg['min_count']} size={cfg['size']}")
    click.echo(
        f"  f-grams: {manifest['fgrams']}, cutoff count {manifest['cutoff_count']}, "
        f"by length {manifest['by_length']}"
    )
    click.echo(
        f"  {'pass':>4} {'threshold':>9} {'candidates':>12} {'distinct':>10} {'kept':>10} "
        f"{'lookup':>9} {'seconds':>8}"
    )
    for p in manifest["passes"]:  # a refresh's passes count no distinct or lookup
        click.echo(
            f"  {p['length']:>4} {p['threshold']:>9} {p['candidates']:>12} "
            f"{p.get('distinct', '-'):>10} {p['kept']:>10} {p.get('lookup', '-'):>9} "
            f"{p['seconds']:>8.2f}"
        )
    if rows:
        click.echo(f"  top {len(rows)}:")
        for row in rows:
            text = f"  {row['text']!r}" if "text" in row else ""
            click.echo(f"  {row['fgram_id']:>8} {row['count']:>10} {row['tokens']}{text}")


@click.command("index", short_help="The f-gram index that lookups use.")
@click.argument("table", metavar="TABLE")
@config_options(IndexConfig, exclude=("table",))
@json_option
def index_command(table, **opts):
    """Write TABLE/index/: the memory-mappable f-gram index that lookups use.

    \b
    fgram index fgrams
    """
    from fgram.api import index

    meta = index(table, **opts)
    where = part_shown(table, "index", opts["storage"])
    finished(
        [f"indexed {meta['fgrams']} f-grams -> {where}"],
        "built",
        where,
        counts={"fgrams": meta["fgrams"]},
    )


def _coverage_lines(cov: dict) -> list[str]:
    lines = [  # positions: the tokens (a flat shard's separators are no position here)
        f"  tokens: {cov['positions']}",
        f"  {'length':>7} {'tokens':>12} {'share':>8}",
    ]
    lines.append(f"  {'none':>7} {cov['unmatched']:>12} {cov['share_unmatched']:>8.2%}")
    for length, count in cov["matched_by_length"].items():
        lines.append(f"  {length:>7} {count:>12} {cov['share_by_length'][length]:>8.2%}")
    lines.append(f"  mean match length (1 where unmatched): {cov['mean_match_length']:.3f}")
    return lines


def _coverage_counts(cov: dict) -> dict:
    return {
        "positions": cov["positions"],
        "unmatched": cov["unmatched"],
        "mean_match_length": cov["mean_match_length"],
    }


@click.command("annotate", short_help="Per-token f-gram tags of training shards.")
@click.argument("table", metavar="TABLE")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUTS...")
@config_options(AnnotateConfig, exclude=ANNOTATE_TAKES_NOT)
@json_option
def annotate_command(table, inputs, **opts):
    """Tag every token of INPUTS with its longest f-gram of TABLE (needs TABLE/index).

    Parquet shards give Parquet tags (fgram_ids, match_len, and the input's other
    columns, same row order); flat shards give <name>.fgid.npy and <name>.mlen.npy
    aligned with the tokens.

    \b
    fgram annotate fgrams shards/ -o tags     # `fgram tokenize` shards: options from their manifest
    fgram annotate fgrams data/*.bin --dtype uint16 --doc-sep 0 -o tags
    """
    from fgram.jobs.annotate import run_annotate

    if opts["output"] is None:
        fail("annotate writes tags: give -o/--output (fgram coverage measures only)")
    m = run_annotate(AnnotateConfig(table=table, inputs=list(inputs), **opts))
    cov = m["coverage"]
    line = f"tagged {cov['positions']} tokens -> {shown(opts['output'])}"
    positions = sum(u.get("tokens") or 0 for u in m.get("units", []))
    if positions > cov["positions"]:  # flat shards: their separators have a place too
        line += (
            f" ({positions} positions with the {positions - cov['positions']} document "
            f"separators: len(FgramTags))"
        )
    finished(
        [line, *_coverage_lines(cov)],
        "built",
        shown(opts["output"]),
        counts=_coverage_counts(cov),
        seconds={"total": m.get("seconds")},
        details={"coverage": cov, "layout": m.get("layout")},
    )


@click.command("coverage", short_help="How much of held-out shards a table matches.")
@click.argument("table", metavar="TABLE")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUTS...")
@config_options(AnnotateConfig, exclude=("table", "inputs", "output", "overwrite"))
@json_option
def coverage_command(table, inputs, **opts):
    """Share of positions of (held-out) INPUTS matched at each length by TABLE's f-grams,
    and with --sizes the same for smaller tables: the curve that picks S.

    INPUTS are token shards, as for build, or text with --tokenizer.

    \b
    fgram coverage fgrams heldout/ --dtype uint16 --doc-sep 0
    fgram coverage fgrams heldout/ --dtype uint16 --doc-sep 0 --sizes 10K,100K,1M,10M
    fgram coverage fgrams heldout/*.jsonl.zst --tokenizer tokenizer.json
    """
    from fgram.jobs.annotate import run_annotate

    cov = run_annotate(AnnotateConfig(table=table, inputs=list(inputs), **opts))["coverage"]
    n = len(inputs)
    head = f"coverage of {shown(table)} over {n} input{'' if n == 1 else 's'}:"
    lines = [head, *_coverage_lines(cov)]
    lines += _by_size_lines(cov["by_size"]) if "by_size" in cov else []
    finished(lines, "built", None, counts=_coverage_counts(cov), details={"coverage": cov})


def _by_size_lines(rows: list[dict]) -> list[str]:
    from fgram.pipeline.config.options import human

    lengths = list(rows[0]["share_by_length"]) if rows else []
    lines = ["  by table size (the first S f-grams):"]
    lines.append(
        f"  {'S':>8} {'f-grams':>12} {'matched':>8} {'mean len':>8} "
        + " ".join(f"{'len ' + n:>7}" for n in lengths)
    )
    for r in rows:
        lines.append(
            f"  {human(r['size']):>8} {r['fgrams']:>12} {1 - r['share_unmatched']:>8.2%} "
            f"{r['mean_match_length']:>8.3f} "
            + " ".join(f"{r['share_by_length'][n]:>7.2%}" for n in lengths)
        )
    return lines


@click.command("embed", short_help="A model's output for every f-gram (the store).")
@click.argument("table", metavar="TABLE")
@config_options(EmbedConfig, exclude=("table",))
@json_option
def embed_command(table, **opts):
    """Write TABLE/embeddings/: the model's output for every f-gram, row i = fgram_id i.

    TABLE is a build output or a refresh folder (its current version), a path or a URI.
    Chunks run in this process on one machine (--engine auto), or as Spark tasks on a
    cluster or with --engine spark; a killed run
    resumes from its finished chunks. Lookups afterwards need TABLE/index. --model has
    no default: the rows are meaningful only for the f-gram model a model is trained
    with (fgram.pipeline.models:hashed is a deterministic filler for trying the store).

    \b
    fgram embed fgrams --model fgram.pipeline.models:hashed
    fgram embed fgrams --model mypkg.fgram_model:load --device cuda --float bfloat16
    """
    from fgram.jobs.embed import run_embed

    where = part_shown(table, "embeddings", opts["storage"])  # refused there unless --overwrite
    meta = run_embed(EmbedConfig(table=table, **opts))
    line = (
        f"embedded {meta['rows']} f-grams (d={meta['dim']}, {meta['dtype']}) in "
        f"{meta['seconds']:.1f}s -> {where}"
    )
    finished(
        [line],
        "built",
        where,
        counts={"rows": meta["rows"], "dim": meta["dim"]},
        seconds={"total": meta["seconds"]},
        fingerprint=meta.get("sha256"),
        details={"dtype": meta["dtype"], "model": meta.get("model")},
    )


@click.command("lookup", short_help="The longest f-gram at each position of a context.")
@click.argument("table", metavar="TABLE")
@config_options(LookupConfig, exclude=("table",))
def lookup_command(table, **opts):
    """Print, for each position of a context, its longest f-gram in table TABLE (and the
    start of its embedding row when TABLE has embeddings).

    TABLE is a build output or a refresh folder (its current version), a path or a URI.

    \b
    fgram lookup fgrams --tokens 13631,29905,38357,9808   # the table of `fgram synth -o corpus`
    fgram lookup fgrams --text "the cat sat" --tokenizer tokenizer.json
    """
    from fgram.api import lookup

    res = lookup(table, **opts)
    ids, fid, lengths, rows = res["tokens"], res["fgram_ids"], res["match_len"], res["rows"]
    click.echo(
        f"  {'pos':>4} {'token':>8} {'fgram_id':>9} {'len':>4}  match"
        + ("  |  row[:4]" if rows is not None else "")
    )
    for i, t in enumerate(ids):
        m = res["matches"][i]
        match = "-" if m is None else (repr(m) if res["text"] else " ".join(map(str, m)))
        line = f"  {i:>4} {t:>8} {fid[i]:>9} {lengths[i]:>4}  {match}"
        if rows is not None:
            line += "  |  " + (
                "(unmatched: use the token embedding)"
                if fid[i] < 0
                else " ".join(f"{v:.4g}" for v in rows[i, :4])
            )
        click.echo(line)
    if rows is None:
        click.echo("  (no embeddings: `fgram embed` adds a row per f-gram)")


@click.command("verify", short_help="Check every file of a table as written.")
@click.argument("table", metavar="TABLE")
@config_options(VerifyConfig, exclude=("table",))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify_command(table, as_json, **opts):
    """Check that every file of table TABLE, its index and its embeddings is as it was
    written: present, of its size and (with --deep) of its sha256. Exit status 2 when
    one is not, each such file on a line of its own.

    TABLE is a build output or a refresh folder (its current version), or an annotate
    or tokenize output (their files recorded alike), a path or a URI.

    \b
    fgram verify fgrams --deep
    """
    from fgram.api import verify

    deep = opts["deep"]
    found = verify(table, **opts)
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        for line in found["problems"]:
            click.echo(f"damaged: {line}")
        for uri in found["unrecorded"]:
            click.echo(f"unchecked: {uri} (no size was recorded for it)")
    what = "sizes and sha256" if deep else "sizes"
    if found["problems"]:
        fail(
            f"{found['table']}: {len(found['problems'])} file(s) damaged or missing of "
            f"{found['files']} checked ({what}); rebuild what is named"
        )
    if not as_json:
        click.echo(
            f"{found['table']}: {found['files']} files, {found['bytes']} bytes: as written ({what})"
        )
