"""The collision audit of an Engram configuration (`fgram.engram`) over a table of
canonical n-grams (``fgram build --canonical``): what no hashed table can tell of itself,
from exact counts.

For each layer, order n and head: the table's n-grams of length n hashed into the head's
buckets (the demo's multiply-XOR hash, mod the head's prime), and

- ``buckets_used``: buckets holding at least one of them;
- ``sharing``: n-grams whose bucket holds another;
- ``collided``: the occurrences (counts) of the n-grams whose bucket holds a strictly
  more frequent n-gram, and ``collided_share``, that over the order's occurrences in the
  table;

and per layer and order, ``all_heads``: the occurrences collided in every head at once.
N-grams the table left out (under its cutoff) have counts no larger than any it holds,
so they never collide one of its n-grams upwards: every number is exact for the table's
n-grams, which cover ``coverage`` of the corpus's n-gram positions of the order.

``sizes``: the same for other table sizes (every order's ``engram_vocab_size`` set to S,
the primes found again as the demo finds them), averaged over layers and heads: the
curve a user reads the table size off.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fgram.engram import RECIPROCAL_ABOVE, EngramConfig, multipliers, near_bucket, table_sizes
from fgram.pipeline.errors import ConfigError, InputError
from fgram.pipeline.kernels.jit import compiled

FORMAT = "fgram-engram-audit"
VERSION = 1
THRESHOLDS = (0.01, 0.001)  # the curve's marks: the smallest size under 1% and 0.1%


@compiled(cache=True, inline="always")
def state_words(p: int) -> int:  # pragma: no cover - compiled
    """`_head`'s state for ``p`` buckets: uint64 words of 32 buckets."""
    return (p + 31) >> 5


@compiled(cache=True, nogil=True)
def _head(
    mix: np.ndarray, counts: np.ndarray, p: int, state: np.ndarray, hit: np.ndarray
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """One head over one order's n-grams, in descending count order (``mix``: their
    hash mixes, ``counts``). ``state``: 2 bits per bucket (uint64 words, >= p / 32; zeros,
    left zeroed): 1 when taken, 3 when also shared. Sets ``hit[r]`` = whether n-gram r's
    bucket holds a strictly more frequent one: taken before r's run of equal counts.
    Returns (buckets used, n-grams sharing a bucket, collided occurrences)."""
    used = 0
    sharing = 0
    collided = 0
    inverse = 1.0 / p
    n = mix.shape[0]
    buckets = np.empty(n, np.int64)
    for r in range(n):
        buckets[r] = near_bucket(mix[r], p, inverse) if p > RECIPROCAL_ABOVE else mix[r] % p
    i = 0
    while i < n:
        c = counts[i]
        j = i
        while j < n and counts[j] == c:
            j += 1
        for r in range(i, j):  # taken by a larger count: collided
            b = buckets[r]
            taken = (state[b >> 5] >> np.uint64((b & 31) * 2)) & np.uint64(1)
            hit[r] = taken
            collided += c * np.int64(taken)
        for r in range(i, j):
            b = buckets[r]
            w = b >> 5
            shift = np.uint64((b & 31) * 2)
            held = (state[w] >> shift) & np.uint64(3)
            if held == 0:
                used += 1
                state[w] |= np.uint64(1) << shift
            else:  # the bucket's first n-gram shares it from now on too
                sharing += 2 if held == 1 else 1
                state[w] |= np.uint64(3) << shift
        i = j
    words = state_words(p)
    if words < n:  # cheaper to clear whole
        state[:words] = 0
    else:
        for r in range(n):
            state[buckets[r] >> 5] = 0
    return used, sharing, collided


def ngram_mix(tokens: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """The demo's mix of n-grams ``tokens`` [R, n] (canonical ids, text order): the last
    token times ``mult[0]`` XOR the one before times ``mult[1]``, ..., in wrapping int64."""
    n = tokens.shape[1]
    with np.errstate(over="ignore"):
        mix = tokens[:, n - 1] * mult[0]
        for k in range(1, n):
            mix ^= tokens[:, n - 1 - k] * mult[k]
    return mix


@dataclasses.dataclass
class Order:
    """One order's n-grams of the table, in descending count order."""

    tokens: np.ndarray  # int64 [R, n]
    counts: np.ndarray  # int64 [R]

    @functools.cached_property
    def total(self) -> int:
        """The order's occurrences in the table."""
        return int(self.counts.sum())


def read_orders(dataset: Any, max_n: int) -> dict[int, Order]:
    """The table's n-grams of lengths 2..max_n (``dataset``: its Parquet dataset)."""
    parts: dict[int, tuple[list, list]] = {n: ([], []) for n in range(2, max_n + 1)}
    for batch in dataset.to_batches(columns=["length", "tokens", "count"], batch_size=1 << 20):
        lens = batch.column(0).to_numpy()
        toks = batch.column(1)
        flat = toks.values.to_numpy().astype(np.int64)
        offsets = toks.offsets.to_numpy()
        counts = batch.column(2).to_numpy().astype(np.int64)
        for n in parts:
            rows = np.flatnonzero(lens == n)
            if len(rows):
                starts = offsets[rows]
                parts[n][0].append(flat[starts[:, None] + np.arange(n)])
                parts[n][1].append(counts[rows])
    out = {}
    for n, (tok, cnt) in parts.items():
        tokens = np.concatenate(tok) if tok else np.zeros((0, n), np.int64)
        counts = np.concatenate(cnt) if cnt else np.zeros(0, np.int64)
        order = np.argsort(-counts, kind="stable")  # a table's rows are so already
        out[n] = Order(np.ascontiguousarray(tokens[order]), counts[order])
    return out


def _heads(
    mixes: dict[tuple[int, int], np.ndarray],
    orders: dict[int, Order],
    sizes: dict[int, list[list[int]]],
    threads: int,
) -> dict[int, dict[int, dict[str, Any]]]:
    """Every head of every layer and order of one configuration's table sizes."""
    jobs = [
        (layer, n, j, p)
        for layer, per_order in sizes.items()
        for n, heads in zip(range(2, len(per_order) + 2), per_order, strict=True)
        for j, p in enumerate(heads)
    ]
    sizes_needed = [p for *_, p in jobs] or [1]

    local = threading.local()  # each thread's bucket states, zeroed once, left zeroed

    def run(job: tuple[int, int, int, int]) -> tuple[dict[str, Any], np.ndarray]:
        layer, n, _, p = job
        o = orders[n]
        hit = np.empty(len(o.counts), np.uint8)
        if getattr(local, "state", np.zeros(0, np.uint64)).size < state_words(p):
            local.state = np.zeros(state_words(max(sizes_needed)), np.uint64)
        used, sharing, collided = _head(mixes[layer, n], o.counts, p, local.state, hit)
        return {"size": p, "buckets_used": used, "sharing": sharing, "collided": collided}, hit

    with ThreadPoolExecutor(max(1, threads)) as pool:
        done = list(pool.map(run, jobs))
    out: dict[int, dict[int, dict[str, Any]]] = {}
    every: dict[tuple[int, int], np.ndarray] = {}
    for (layer, n, _, _), (head, hit) in zip(jobs, done, strict=True):
        total = orders[n].total
        head["collided_share"] = head["collided"] / total if total else 0.0
        out.setdefault(layer, {}).setdefault(n, {"heads": []})["heads"].append(head)
        key = (layer, n)
        every[key] = hit if key not in every else every[key] & hit
    for (layer, n), hit in every.items():
        total = orders[n].total
        collided = int(orders[n].counts[hit.astype(bool)].sum())
        out[layer][n]["all_heads"] = {
            "collided": collided,
            "collided_share": collided / total if total else 0.0,
        }
    return out


def default_sizes(config: EngramConfig) -> list[int]:
    """Ten sizes around the configuration's first: 1/16 of it up to 32 times it."""
    base = config.engram_vocab_size[0]
    return sorted({max(2, int(base * 2.0**k)) for k in range(-4, 6)})


def audit(
    manifest: dict[str, Any],
    orders: dict[int, Order],
    config: EngramConfig,
    curve: list[int] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The audit's numbers (the JSON of ``fgram engram-audit``) of a canonical table's
    ``manifest`` and its n-grams ``orders`` (`read_orders`)."""
    canonical = manifest["canonical"]
    threads = threads or min(2, os.cpu_count() or 1)
    mult = multipliers(config, int(canonical["size"]))
    span = range(2, config.max_ngram_size + 1)
    mixes = {(layer, n): ngram_mix(orders[n].tokens, mult[layer]) for layer in mult for n in span}
    positions = manifest.get("positions") or {}
    by_order = {}
    for n in span:
        occ = orders[n].total
        pos = positions.get(str(n))
        by_order[str(n)] = {
            "ngrams": len(orders[n].counts),
            "occurrences": occ,
            "positions": pos,
            "coverage": occ / pos if pos else None,
        }
    layers = _heads(mixes, orders, table_sizes(config), threads)
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "config": dataclasses.asdict(config),
        "canonical": {k: canonical.get(k) for k in ("sha256", "size", "vocab_size")},
        "orders": by_order,
        "layers": {str(k): {str(n): v for n, v in per.items()} for k, per in layers.items()},
        "sizes": [],
    }
    for size in curve if curve is not None else default_sizes(config):
        sized = dataclasses.replace(config, engram_vocab_size=[size] * len(span))
        per = _heads(mixes, orders, table_sizes(sized), threads)
        row: dict[str, Any] = {"size": size, "orders": {}}
        for n in span:
            shares = [h["collided_share"] for lay in per.values() for h in lay[n]["heads"]]
            every = [lay[n]["all_heads"]["collided_share"] for lay in per.values()]
            row["orders"][str(n)] = {
                "collided_share": float(np.mean(shares)),
                "all_heads_share": float(np.mean(every)),
            }
        out["sizes"].append(row)
    out["under"] = {
        str(n): {
            str(t): next(
                (r["size"] for r in out["sizes"] if r["orders"][str(n)]["collided_share"] < t),
                None,
            )
            for t in THRESHOLDS
        }
        for n in span
    }
    return out


def check_table(manifest: dict[str, Any], config: EngramConfig, where: str) -> None:
    """A table the audit can read: built with --canonical, holding the config's orders."""
    if not manifest.get("canonical"):
        raise InputError(
            where,
            "not a table of canonical token ids: Engram hashes canonical ids; build it "
            "with fgram build --canonical",
        )
    longest = int(manifest["config"]["max_len"])
    if longest < config.max_ngram_size:
        raise ConfigError(
            f"{where}: holds n-grams up to length {longest}; the configuration hashes up "
            f"to {config.max_ngram_size} (build with -K {config.max_ngram_size})"
        )


def run_audit(
    table: Any,
    engram: str | EngramConfig,
    sizes: list[int] | None = None,
    storage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`audit` of the table at ``table`` (a build output, a version or a refresh folder)
    for the configuration ``engram`` (a TOML or JSON file, or an `EngramConfig`)."""
    from fgram.jobs.progress import PROGRESS
    from fgram.pipeline.tables.versions import open_table, table_dataset

    config = engram if isinstance(engram, EngramConfig) else EngramConfig.load(engram)
    loc, manifest = open_table(table, storage)
    check_table(manifest, config, loc.uri)
    PROGRESS.stage("engram audit: read the table")
    orders = read_orders(table_dataset(loc, manifest), config.max_ngram_size)
    PROGRESS.stage("engram audit: hash and count")
    out = audit(manifest, orders, config, sizes)
    out["table"] = loc.uri
    return out
