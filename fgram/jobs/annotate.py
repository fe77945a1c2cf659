"""fgram annotate: tag every token of training shards with its longest f-gram match.

One task per unit of input (the units of `fgram build`). Each task opens the
f-gram index (memory-mapped, shared by the tasks of a machine), matches its
tokens, and writes tags aligned with the input where its shard's format puts them
(`ShardFormat.tag`, then its `tags.write` in the run's `TagLayout`: a Parquet file per
unit with the input's other columns; a flat file's two ``.npy`` arrays indexed like its
tokens), reading K-1 tokens before a unit where a match may start in the previous one.

The manifest names the f-gram table (its manifest's fingerprint) and carries
the coverage: positions by match length, and with ``sizes`` the coverage of the
table's first S' rows for each S' of them (`pipeline.coverage`: one walk down each
match's suffix links answers them all).

OUT may be on an object store. When the tasks run on this machine (local mode,
``--engine local``) they write into a staging folder here, uploaded when done.
On a cluster they write into a staging prefix on the store beside OUT: a
unit's tags as objects, which a task per shard of a format that joins them
(``assembles``: flat files) then streams into that shard's files. Either way the
output is published with the build's protocol (`publish.finish`): files under names
of their own generation, the manifest (which lists them) last but `_SUCCESS`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fgram.jobs import sequence
from fgram.jobs.engines import runs_here
from fgram.jobs.executors import as_task
from fgram.jobs.progress import PROGRESS
from fgram.jobs.sequence import Job, Run, begin
from fgram.jobs.stages import Stage
from fgram.pipeline.config.commands import AnnotateConfig
from fgram.pipeline.errors import ConfigError, FgramError, InputError
from fgram.pipeline.formats import registry
from fgram.pipeline.formats.inputs import (
    holds_text,
    plan_shards,
    plan_units,
    shard_record,
    tokens_of,
)
from fgram.pipeline.formats.layouts import LAYOUTS, TagLayout
from fgram.pipeline.formats.reading import Shard, Unit
from fgram.pipeline.formats.registry import format_of
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.publish import check_output, staging_for
from fgram.pipeline.io.storage import Location
from fgram.pipeline.tables.coverage import (
    check_sizes,
    count_by_size,
    coverage_by_size,
    coverage_table,
)
from fgram.pipeline.tables.index import FgramIndex
from fgram.pipeline.tables.versions import manifest_fingerprint, resolve_table
from fgram.pipeline.text.canonical import mapped, meet_canonical
from fgram.pipeline.text.tokenizer import check_tokenizer, known_tokenizer, load_spec
from fgram.version import __version__

_INDEX: dict[tuple, FgramIndex] = {}


def index_id(index: FgramIndex) -> str:
    """What names one index's content (its table's fingerprint, its arrays' sizes and,
    on an object store, their checksums): a rewritten index gets another id."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(index.meta, sort_keys=True).encode()).hexdigest()[:16]


def _index(table: Location, ident: str, storage: dict | None = None) -> FgramIndex:
    """The index ``ident`` of ``table``, opened once per worker process (a worker that
    served an earlier run of another index at the same path opens this one afresh)."""
    if (table, ident) not in _INDEX:
        _INDEX.clear()
        index = FgramIndex.open(table, storage=storage)
        if index_id(index) != ident:
            raise FgramError(f"{table}: its index changed while annotate ran")
        _INDEX[table, ident] = index
    return _INDEX[table, ident]


@as_task
def annotate_task(
    cfg: AnnotateConfig, shards: list[Shard], units: list[Unit], u: int, staging, ident: str
) -> tuple[list[int], list[list[int]] | None]:
    index = _index(cfg.table, ident, cfg.storage)
    unit, shard = units[u], shards[units[u].shard]
    k = index.max_len
    fmt = format_of(shard)
    match: Any = index.match
    if cfg.token_map is not None:  # a table of canonical ids: the tokens' canonical ids

        def match(tokens: np.ndarray, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
            return index.match(mapped(cfg.token_map, tokens, shard.uri), **kw)

    tagged = fmt.tag(shard, unit, cfg.read_options(), k - 1, match)
    if staging is not None:
        fmt.tags.write(tagged, shard, unit, staging, _id_type(index), LAYOUTS[cfg.layout])
    fid, mlen = tagged.fid, tagged.mlen
    hist = np.bincount(mlen, minlength=k + 1).tolist()
    if cfg.sizes is None:
        return hist, None
    return hist, count_by_size(fid, mlen, index.suffix, cfg.sizes, k).tolist()


def _id_type(index: FgramIndex) -> np.dtype:
    return np.dtype(np.int32 if index.meta["fgrams"] < 2**31 else np.int64)


@as_task
@dataclass(frozen=True)
class AnnotateStage(Stage, name="annotate", call=annotate_task, index="u"):
    """Tag (or, without an output, only count the matches of) a unit per task."""

    cfg: AnnotateConfig
    shards: list[Shard]
    units: list[Unit]
    staging: Location | None  # where the tags go (None: coverage writes none)
    ident: str  # the index's identity (`index_id`): a worker's cached index is this one


@dataclass(frozen=True)
class AssembleStage(Stage, name="assemble"):
    """A shard per task: join its per-unit tag objects on a store into its files
    (formats that ``assemble``: flat files), then what its layout adds beside them."""

    shards: list[Shard]
    starts: list[list[int]] | None  # each one's units' first positions (None: joined)
    id_type: str
    staging: Location
    layout: TagLayout
    storage: dict[str, str]

    def run(self, task: int) -> None:
        shard, id_type = self.shards[task], np.dtype(self.id_type)
        tags = format_of(shard).tags
        if self.starts is not None:
            tags.assemble(shard, self.starts[task], id_type, self.staging, self.layout)
        tags.index(shard, self.staging, id_type, self.layout, self.storage)


def run_annotate(cfg: AnnotateConfig, spark=None) -> dict:
    """Tag the shards (or only measure coverage when cfg.output is None); returns the manifest."""
    t0 = time.time()
    cfg = begin(cfg, spark)
    if cfg.output is None and cfg.tokenizer is None and holds_text(cfg.inputs, cfg.storage):
        cfg = dataclasses.replace(cfg, tokenizer=_table_tokenizer(cfg))
    if cfg.tokenizer:
        return _coverage_of_text(cfg, spark)
    return sequence.run(AnnotateJob(cfg, spark, t0))


class AnnotateJob(Job):
    """`fgram annotate` (and coverage, which publishes nothing) in the run sequence: the
    table, its index and the shards checked first; a staging folder of the run's own
    (no resume); the annotate stage, then the assemble stage where a layout needs one."""

    what = "annotate run"
    unique = True
    head_start = False

    def __init__(self, cfg: AnnotateConfig, spark, t0: float) -> None:
        super().__init__(cfg, spark)
        self.t0 = t0

    def check(self) -> None:
        cfg, tokenizer = self.cfg.tokenized()  # `fgram tokenize` outputs say how to read them
        table = resolve_table(cfg.table, cfg.storage)
        cfg = _sizes_checked(cfg, table, None)  # a bad size is said before a missing index
        self.index = FgramIndex.open(table, storage=cfg.storage)
        manifest = _manifest(table)
        check_tokenizer(manifest, tokenizer, ", ".join(cfg.inputs), table.uri)
        token_map = meet_canonical(
            manifest,
            cfg.canonical,
            known_tokenizer({"tokenizer": tokenizer}) if tokenizer else None,
            table.uri,
            "annotate (and coverage)",
        )
        if token_map is not None:  # matched over canonical ids, as the table was counted
            cfg = dataclasses.replace(cfg, token_map=token_map)
        if cfg.output:  # a bad output is said before the inputs are read
            check_output(cfg.output, cfg.overwrite, cfg.storage)
        try:
            shards = plan_shards(cfg.inputs, cfg.read_options())
        except InputError:
            if cfg.output is not None and holds_text(cfg.inputs, cfg.storage):
                raise InputError(  # tags sit beside the token files a trainer reads
                    ", ".join(cfg.inputs),
                    "text: annotate tags token shards, aligned with what a trainer reads; "
                    "tokenize it first (fgram tokenize ... -o shards --tokenizer, the "
                    "table's tokenizer), then annotate the shards",
                ) from None
            raise
        self.units = plan_units(shards, cfg.unit_tokens)
        layout = LAYOUTS[cfg.layout]
        check_layout(layout, shards)
        names = [layout.tag_name(format_of(s).tag_name(s)) for s in shards]
        if len(set(names)) != len(names):
            raise ConfigError(
                "two inputs share a file name; tags are named after their input files"
            )
        self.cfg, self.table, self.shards = cfg, table, shards

    def stages(self, run: Run) -> dict:
        return _annotate(
            self.cfg,
            run.executor(tokens=tokens_of(self.shards, self.units)),
            self.table,
            self.index,
            self.shards,
            self.units,
            run.out,
            run.staging,
            self.t0,
        )


def check_layout(layout: TagLayout, shards: list[Shard]) -> None:
    """Every input's format writes tags in ``layout``, else one line naming the first
    that does not and the layouts it has."""
    for shard in shards:
        fmt = format_of(shard)
        if layout not in fmt.layouts:
            raise ConfigError(
                f"{shard.uri}: --layout {layout.name} is not one of {fmt.name} inputs' "
                f"({', '.join(t.name for t in fmt.layouts)})"
            )


def _manifest(table: Location) -> dict:
    manifest: dict = table.child("manifest.json").read_json()
    return manifest


def _table_tokenizer(cfg: AnnotateConfig) -> str:
    """The tokenizer the table's manifest names (text inputs of a coverage), when its
    file is here with the same content."""
    from fgram.pipeline.text.tokenizer import known_tokenizer

    path = known_tokenizer(_manifest(resolve_table(cfg.table, cfg.storage)))
    if path is None:
        raise ConfigError(
            f"{', '.join(cfg.inputs)}: text; give its tokenizer (--tokenizer): the table's "
            "manifest names none found here"
        )
    return path


def _sizes_checked(cfg: AnnotateConfig, table: Location, manifest: dict | None) -> AnnotateConfig:
    """``cfg`` with its sizes ascending and distinct, each one the table (its
    ``manifest``, read here when not given) answers (`coverage.check_sizes`)."""
    if cfg.sizes is None:
        return cfg
    manifest = manifest or _manifest(table)
    sizes = sorted(set(cfg.sizes))
    check_sizes(sizes, int(manifest["fgrams"]), manifest["config"].get("size"), table.uri)
    return dataclasses.replace(cfg, sizes=sizes)


def _coverage_of_text(cfg: AnnotateConfig, spark) -> dict:
    """Coverage of text inputs: tokenized (as by `fgram tokenize`, flat shards) into a
    folder of the run beside the table, measured, and the folder removed."""
    from fgram.jobs.tokenize import tokenize_inputs
    from fgram.pipeline.formats.inputs import check_inputs
    from fgram.pipeline.formats.names import TEXT_FILES, is_text_file

    assert cfg.tokenizer is not None
    if cfg.output is not None:
        raise ConfigError("annotate tags token shards: tokenize the text first (fgram tokenize)")
    check_inputs(cfg.inputs, cfg.storage, is_text_file, TEXT_FILES)
    table = resolve_table(cfg.table, cfg.storage)
    manifest = _manifest(table)
    given = load_spec(cfg.tokenizer).record()  # before the text is tokenized
    check_tokenizer(manifest, given, cfg.tokenizer, table.uri)
    _sizes_checked(cfg, table, manifest)
    folder = staging_for(table, runs_here(cfg), unique=True, what="text")
    try:
        tokens = tokenize_inputs(cfg, folder, spark=spark)
        manifest = run_annotate(
            dataclasses.replace(cfg, inputs=[folder.uri], tokenizer=None, doc_sep=None), spark
        )
    finally:
        folder.remove_tree()
    manifest["text"] = {k: tokens[k] for k in ("inputs", "documents", "tokens", "tokenizer")}
    return manifest


def _assemble(
    cfg: AnnotateConfig, ex, shards, units, staging, id_type: np.dtype, layout: TagLayout
) -> None:
    """Join flat tags written per unit on a store, and write what the layout adds beside
    a shard's tags (a Megatron index): a task per shard that needs either."""
    remote = wf.on_store(staging)
    joined = [i for i, s in enumerate(shards) if format_of(s).tags.assembles and remote]
    indexed = [i for i, s in enumerate(shards) if layout.indexed or i in joined]
    if not indexed:
        return
    starts = [sorted(un.start for un in units if un.shard == i) for i in indexed]
    PROGRESS.stage("assemble tags", len(indexed), unit="shards")
    assembling = AssembleStage(
        [shards[i] for i in indexed],
        starts if joined else None,
        id_type.str,
        staging,
        layout,
        cfg.storage,
    )
    ex.map(len(indexed), assembling.run)
    if remote:
        staging.child("_work").remove_tree()


def _annotate(
    cfg: AnnotateConfig,
    ex,
    table: Location,
    index: FgramIndex,
    shards,
    units,
    out: Location | None,
    staging,
    t0: float,
) -> dict:
    layout = LAYOUTS[cfg.layout]
    if staging is not None and not wf.on_store(staging):
        folder = wf.local_path(staging.child("tags"))
        os.makedirs(folder)
        for shard in shards:
            format_of(shard).tags.prepare(folder, shard, _id_type(index), layout)
    PROGRESS.stage("annotate" if out else "coverage", len(units), tokens_of(shards, units))
    ident = index_id(index)
    tagging = AnnotateStage(cfg, shards, units, staging, ident)
    results = ex.map(len(units), tagging.run, progress=True)
    if staging is not None:
        _assemble(cfg, ex, shards, units, staging, _id_type(index), layout)
    k = index.max_len
    hist = [sum(h[i] for h, _ in results) for i in range(k + 1)]
    coverage = coverage_table(hist)
    if cfg.sizes is not None:
        counts = np.zeros((k + 1, len(cfg.sizes) + 1), np.int64)
        for _, part in results:
            counts += np.asarray(part, np.int64)
        coverage["by_size"] = coverage_by_size(hist, counts, cfg.sizes, index.meta["fgrams"])
    manifest = {
        "fgram_version": __version__,
        "kind": "fgram-tags",
        "table": {
            "path": table.uri,
            "fingerprint": manifest_fingerprint(table),
            "fgrams": index.meta["fgrams"],
            "max_len": k,
            # matched over canonical ids: the table's map (its sha256, size, tokenizer)
            **({"canonical": _manifest(table)["canonical"]} if cfg.canonical else {}),
        },
        "config": {k: v for k, v in cfg.record().items() if k != "token_map"},
        "inputs": [shard_record(s) for s in shards],
        "units": [  # tokens: the positions its tags hold (`tags.FgramTags`)
            {"shard": un.shard, "start": un.start, "stop": un.stop, "tokens": sum(h)}
            for un, (h, _) in zip(units, results, strict=True)
        ],
        "coverage": coverage,
        "layout": {f.name: f.tag_layout for f in registry.FORMATS}
        if layout.own
        else {"name": layout.name, "files": layout.about},
        "seconds": round(time.time() - t0, 3),
    }
    return manifest
