"""fgram tokenize: raw text (JSON Lines, Parquet text, plain text) to token shards that
`fgram build` reads without options, with a Hugging Face tokenizer, on Spark or in local
processes (`--engine auto`, the default: local processes on a local master with no JVM
up, `engines.engine_for`).

Two stages. Count: a task per unit (but the last) counts its documents and lines without
parsing them, so every document's id (dense, in input order), its row and its line in its
file are known first (flat shards, which keep no ids, count only a unit that another of
its file follows: `counted`). The driver runs tasks itself while the JVM starts
(`HeadStart`). Tokenize:
a task per unit encodes its documents in batches and writes shards of about
``shard_tokens`` tokens, then its completion marker; a rerun with ``resume`` skips the
units with a marker. Outputs (published atomically, ``manifest.json`` then ``_SUCCESS``):

- ``parquet``: ``shards/part-UUUUU-KKK.parquet`` (zstd) with ``doc_id`` int64, ``tokens``
  list<int32>, ``source`` (the input file), ``row`` (the document's row in it: its
  non-blank line, or its Parquet row) and, with ``id_field``, ``id`` (string);
- ``bin``: ``shards/part-UUUUU-KKK.bin``, raw little-endian uint16 (when the vocabulary fits)
  or uint32, each document followed by the separator id (nanoGPT / OLMo).

The manifest names the tokenizer (name, sha256, vocabulary size), the dtype and the
separator, the inputs (path, size, mtime), the documents, tokens, bytes and seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fgram.jobs import sequence
from fgram.jobs.engines import cores_here, runs_here
from fgram.jobs.executors import as_task
from fgram.jobs.progress import PROGRESS
from fgram.jobs.runs import NOT_FINGERPRINTED, fingerprint_digest
from fgram.jobs.sequence import Job, Run, begin
from fgram.jobs.stages import Stage
from fgram.pipeline.config.commands import TOKENS_KIND, TokenizeConfig
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.formats.inputs import check_inputs
from fgram.pipeline.formats.names import TEXT_FILES, is_text_file
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.markers import Markers
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import claim_staging
from fgram.pipeline.records import JsonRecord
from fgram.pipeline.text.text import (
    Skips,
    TextFile,
    TextUnit,
    count_documents,
    documents,
    plan_text,
    plan_text_units,
    read_ahead,
)
from fgram.pipeline.text.token_shards import WRITERS, ShardWriter, TokenWriter
from fgram.pipeline.text.tokenizer import TokenizerSpec, encode, encoder, load_spec, prove
from fgram.version import __version__

FORMAT = 1
# a backend's proof, on the run's own text: the first documents of its first files, each
# cut to its first characters (more documents, of more files, for the same encoding time)
SAMPLE_FILES, SAMPLE_DOCS, SAMPLE_CHARS, SAMPLE_BYTES = 8, 32, 4096, 1 << 20


def task_threads(cfg: TokenizeConfig, units: int) -> int:
    """The tokenizer's threads in one task of ``units``: ``threads`` when given (0: the
    library's default, a thread per core of the machine in every task). Else twice
    the task's share of the cores, at most every core: the share is the cores a task
    holds (``spark.task.cpus``, 1 by default), and on this machine (local mode,
    --engine local) the cores that fewer units than cores leave idle shared among
    them. Twice, because a task's own Python work (reading, parsing, writing) leaves
    its core idle part of the time (docs/internals.md has the measurement)."""
    if cfg.threads is not None:
        return cfg.threads
    try:
        per_task = max(1, int(cfg.conf.get("spark.task.cpus", 1)))
    except ValueError:
        raise ConfigError(f"spark.task.cpus must be an integer: {cfg.conf}") from None
    if not runs_here(cfg):
        return 2 * per_task
    cores = cores_here(cfg)
    return min(cores, 2 * max(per_task, cores // max(1, min(units, cores))))


@dataclass(frozen=True)
class Plan:
    """What every task needs (small: the tokenizer travels as its JSON text)."""

    cfg: TokenizeConfig
    spec: TokenizerSpec
    files: list[TextFile]
    units: list[TextUnit]
    staging: Location
    writer: TokenWriter  # the shards' format (`--format`)
    dtype: str  # bin: uint16 | uint32; parquet: int32
    doc_sep: int | None  # bin's separator
    threads: int  # the tokenizer's threads in a task (`task_threads`)


@dataclass
class UnitTokens(JsonRecord):
    """What a tokenize task wrote (and leaves as its unit's completion marker)."""

    FORMAT = 1

    unit: int
    documents: int
    tokens: int
    bytes: int  # text bytes encoded (UTF-8)
    files: list[str]  # its shards, with their documents and tokens
    shards: list[dict[str, int]]
    max_token: int
    separators_inside: int  # bin: documents' own tokens equal to the separator
    seconds: float
    skipped: int = 0  # bad records passed over (skip_bad_records)
    first_skipped: str | None = None  # the first one: file:line: problem


def _markers(staging: Location) -> Markers:
    return Markers(staging.child("_work"), "tokenize")


@as_task
def count_task(plan: Plan, u: int) -> tuple[int, int]:
    """(documents, lines) of unit u."""
    unit = plan.units[u]
    return count_documents(plan.files[unit.file], unit, plan.cfg.text_options())


@as_task
def tokenize_task(plan: Plan, u: int, doc_base: int, row_base: int, line: int) -> UnitTokens:
    """Tokenize unit u; its documents' ids start at ``doc_base``, their rows at
    ``row_base``, its lines at ``line`` (from 1)."""
    t0 = time.time()
    markers = _markers(plan.staging)
    if markers.done(u):
        done = UnitTokens.from_json(markers.read(u))
        if done is not None:
            return done
    unit = plan.units[u]
    file = plan.files[unit.file]
    tok = encoder(plan.spec, plan.threads)
    shards = ShardWriter(
        plan.staging, u, file.uri, plan.writer, plan.cfg.shard_tokens, plan.dtype, plan.doc_sep
    )
    done = UnitTokens(u, 0, 0, 0, shards.names, shards.sizes, -1, 0, 0.0)  # so far
    limit = 2 ** (8 * np.dtype(plan.dtype).itemsize)
    skips = Skips(plan.cfg.skip_bad_records)
    for batch in read_ahead(documents(file, unit, plan.cfg.text_options(), line, skips)):
        lengths, flat = encode(tok, batch.texts, plan.cfg.add_special_tokens)
        if len(flat):
            done.max_token = max(done.max_token, int(flat.max()))
            if done.max_token >= limit:
                raise FgramError(f"token id {done.max_token} does not fit {plan.dtype}")
        if plan.doc_sep is not None:
            done.separators_inside += int(np.count_nonzero(flat == plan.doc_sep))
        places = np.asarray(batch.places, np.int64)
        shards.add(doc_base + places, row_base + places, lengths, flat, batch.ids)
        done.documents += len(batch.texts)
        done.tokens += len(flat)
        done.bytes += text_bytes(batch.texts)
    shards.flush()
    done.seconds = round(time.time() - t0, 3)
    done.skipped, done.first_skipped = skips.count, skips.first
    markers.mark(u, done.to_json())  # the unit's completion marker, last
    return done


def text_bytes(texts: list[str]) -> int:
    """The UTF-8 size of texts: an ASCII text's is its length (no encoding)."""
    return sum(len(t) if t.isascii() else len(t.encode("utf-8")) for t in texts)


@dataclass(frozen=True)
class CountStage(Stage, name="count"):
    """Count the documents of the units ``todo`` (`count_task`): task i counts unit
    ``todo[i]``."""

    plan: Plan
    todo: list[int]

    def run(self, task: int) -> tuple[int, int]:
        return count_task(self.plan, self.todo[task])


def counted(units: list[TextUnit], fmt: TokenWriter) -> list[int]:
    """The units whose counts number something after them. Parquet shards: every one but
    the last (document ids and rows run on across units and files). Flat shards keep no
    ids: only a unit followed by one of the same file, whose line numbers (in an error's
    file:line) start after its lines; a compressed file, a unit of its own, needs none."""
    if fmt.numbers_documents:
        return list(range(len(units) - 1))
    return [u for u in range(len(units) - 1) if units[u + 1].file == units[u].file]


@dataclass(frozen=True)
class TokenizeStage(Stage, name="tokenize"):
    """Tokenize each unit into shards (`tokenize_task`), its documents numbered from
    their bases."""

    plan: Plan
    doc_bases: list[int]
    row_bases: list[int]
    line_bases: list[int]

    def run(self, task: int) -> UnitTokens:
        return tokenize_task(
            self.plan, task, self.doc_bases[task], self.row_bases[task], self.line_bases[task]
        )

    def summary(self, results: list[UnitTokens]) -> dict[str, Any]:
        return {
            "documents": sum(r.documents for r in results),
            "tokens": sum(r.tokens for r in results),
            "bytes": sum(r.bytes for r in results),
            "max_token": max((r.max_token for r in results), default=-1),
            "separators_inside": sum(r.separators_inside for r in results),
            "shards": [
                {"name": n, **s} for r in results for n, s in zip(r.files, r.shards, strict=True)
            ],
        }


def _bases(units: list[TextUnit], counts: list[tuple[int, int]]) -> list[list[int]]:
    """Each unit's first document id (over all inputs), first row and first line (from 1)
    in its file, from the `counted` units' counts (flat shards: the lines alone hold)."""
    bases: list[list[int]] = [[], [], []]
    seen = 0
    rows: dict[int, int] = {}
    lines: dict[int, int] = {}
    for unit, (docs, n_lines) in zip(units, counts, strict=True):
        bases[0].append(seen)
        bases[1].append(rows.get(unit.file, 0))
        bases[2].append(lines.get(unit.file, 0) + 1)
        seen += docs
        rows[unit.file] = rows.get(unit.file, 0) + docs
        lines[unit.file] = lines.get(unit.file, 0) + n_lines
    return bases


def _fingerprint(cfg: TokenizeConfig, spec: TokenizerSpec, files: list[TextFile]) -> dict:
    rec = cfg.record()
    for key in (*NOT_FINGERPRINTED, "threads"):  # the inputs: the files below
        rec.pop(key)
    rec["tokenizer"] = spec.sha256
    return {"fgram_version": __version__, "config": rec, "inputs": [f.record() for f in files]}


def _backend(
    cfg: TokenizeConfig, spec: TokenizerSpec, files: list[TextFile], units: list[TextUnit]
) -> TokenizerSpec:
    """The spec with the tokenizer backend of the run (`tokenizer.prove`), proven on a
    sample of its own documents: the first of each of its first files' first units, up
    to ``SAMPLE_CHARS`` characters of each (what the backend must encode as the reference
    does is any text: a cut document is one)."""
    if cfg.tokenizer_backend == "tokenizers":
        return spec
    samples: list[tuple[str, str]] = []
    seen: set[int] = set()
    size = 0
    for unit in units:
        if unit.file in seen or len(seen) >= SAMPLE_FILES or size >= SAMPLE_BYTES:
            continue
        seen.add(unit.file)
        file = files[unit.file]
        taken = 0
        for batch in documents(file, unit, cfg.text_options(), 1, Skips(True), batch=64):
            for place, text in zip(batch.places, batch.texts, strict=True):
                samples.append((f"{file.uri} document {place + 1}", text[:SAMPLE_CHARS]))
                size += min(len(text), SAMPLE_CHARS)
                taken += 1
            if taken >= SAMPLE_DOCS or size >= SAMPLE_BYTES:
                break
    return prove(spec, cfg.tokenizer_backend, samples, cfg.add_special_tokens)


def run_tokenize(cfg: TokenizeConfig, spark=None, checksums: bool = True) -> dict[str, Any]:
    """Tokenize ``cfg.inputs`` into ``cfg.output``; returns the manifest. ``checksums``:
    the manifest holds each shard's size and sha256 (for `fgram verify --deep`; a run's
    own folder, read once and removed, goes without)."""
    t0 = time.time()
    return sequence.run(TokenizeJob(begin(cfg, spark), spark, checksums, t0))


class TokenizeJob(Job):
    """`fgram tokenize` in the run sequence: the tokenizer's ids checked to fit before
    the lock; the text planned and the backend proven under it (while a JVM starts);
    the count and tokenize stages."""

    what = "tokenize run"
    kept = "the tokenized units"

    def __init__(self, cfg: TokenizeConfig, spark, checksums: bool, t0: float) -> None:
        super().__init__(cfg, spark)
        self.checksums = checksums
        self.t0 = t0

    def check(self) -> None:
        cfg = self.cfg
        self.spec = spec = load_spec(cfg.tokenizer)
        self.writer = WRITERS[cfg.format]
        self.dtype, self.doc_sep = self.writer.token_type(
            spec.vocab_size, spec.eos_id, cfg.dtype, cfg.doc_sep, spec.path
        )
        check_inputs(cfg.inputs, cfg.storage, is_text_file, TEXT_FILES)

    def places(self, out: Location) -> Location:
        self.published_manifest = out.child("manifest.json")
        return super().places(out)

    def plan(self) -> dict[str, Any] | None:
        """Plan and prove the backend; a manifest when this very run is published."""
        cfg = self.cfg
        self.files = plan_text(cfg.inputs, cfg.text_options())
        self.units = plan_text_units(self.files, cfg.text_options(), cfg.unit_bytes)
        self.spec = _backend(cfg, self.spec, self.files, self.units)
        self.fingerprint = _fingerprint(cfg, self.spec, self.files)
        self.digest = fingerprint_digest(self.fingerprint)
        done = self.published_manifest
        if cfg.resume and done.exists():
            published = done.read_json()
            if published.get("run_fingerprint") == self.digest:
                return dict(published)  # finished already: nothing to resume
        return None

    def claim(self, staging: Location) -> bool:
        resumed = claim_staging(staging, self.fingerprint, self.cfg.resume, self.what)
        wf.make_dirs(staging.child("shards"))
        return resumed

    def stages(self, run: Run) -> dict[str, Any]:
        manifest = _tokenize(
            run, self.spec, self.files, self.units, self.writer, self.dtype, self.doc_sep
        )
        manifest["resumed"] = run.resumed
        manifest["run_fingerprint"] = self.digest
        manifest["seconds"] = round(time.time() - self.t0, 3)
        return manifest


def _tokenize(run: Run, spec, files, units, writer, dtype, doc_sep) -> dict[str, Any]:
    cfg, ex = run.cfg, run.executor()
    threads = task_threads(cfg, len(units))
    plan = Plan(cfg, spec, files, units, run.staging, writer, dtype, doc_sep, threads)
    todo = counted(units, writer)
    counts = [(0, 0)] * len(units)
    if todo:
        PROGRESS.stage("count documents", len(todo))
        found = ex.map(len(todo), CountStage(plan, todo).run, progress=True)
        for u, count in zip(todo, found, strict=True):
            counts[u] = count
    PROGRESS.stage("tokenize", len(units))
    tokenizing = TokenizeStage(plan, *_bases(units, counts))
    try:
        results = ex.map(len(units), tokenizing.run, progress=True)
    finally:
        if run.starting is not None:  # a warm-up job still running is cut off, noisily
            run.starting.wait()
    done = tokenizing.summary(results)
    skipped: dict[str, int] = {}
    for r in results:
        if r.skipped:
            uri = files[units[r.unit].file].uri
            skipped[uri] = skipped.get(uri, 0) + r.skipped
    if skipped:
        first = next(r.first_skipped for r in results if r.first_skipped)
        sys.stderr.write(
            f"fgram: warning: {sum(skipped.values())} bad records skipped (first: {first})\n"
        )
    if done["separators_inside"]:
        sys.stderr.write(
            f"fgram: warning: {done['separators_inside']} tokens inside documents equal the "
            f"separator {doc_sep} (the text holds it): they end documents early in .bin shards\n"
        )
    return {
        "kind": TOKENS_KIND,
        "format": FORMAT,
        "fgram_version": __version__,
        "engine": ex.name,
        "tokenizer": spec.record(),
        "output_format": cfg.format,
        "dtype": dtype,
        "doc_sep": doc_sep,
        "columns": writer.columns(cfg.id_field),
        "config": {
            k: v
            for k, v in cfg.record().items()
            if k in ("text_field", "id_field", "doc_per_line", "shard_tokens", "unit_bytes")
        },
        "inputs": [f.record() for f in files],
        "units": len(units),
        "documents": done["documents"],
        "tokens": done["tokens"],
        "bytes_read": sum(f.size for f in files),
        "text_bytes": done["bytes"],
        "max_token": done["max_token"],
        "separators_inside": done["separators_inside"],
        "skipped_records": skipped,
        "shards": done["shards"],
    }


def tokenize_inputs(cfg: Any, output: Location, resume: bool = False, spark=None) -> dict[str, Any]:
    """Tokenize another job's text inputs into flat shards in ``output``, a folder of
    that job's run: ``cfg`` (a build's or a coverage's config) gives the inputs, the
    tokenizer, the text options, the engine and the storage options. A text unit's
    tokens go to shards of up to twice the job's ``unit_tokens`` (the job reads a shard
    in even units: not a full unit and a small rest), without checksums (the folder is
    read once, by the job, and removed)."""
    return run_tokenize(
        TokenizeConfig(
            inputs=cfg.inputs,
            output=output,
            tokenizer=cfg.tokenizer,
            format="bin",
            shard_tokens=2 * cfg.unit_tokens,
            text_field=cfg.text_field,
            doc_per_line=cfg.doc_per_line,
            overwrite=True,
            resume=resume,
            engine=cfg.engine,
            master=cfg.master,
            conf=cfg.conf,
            storage=cfg.storage,
            tokenizer_backend=cfg.tokenizer_backend,
        ),
        spark,
        checksums=False,
    )
