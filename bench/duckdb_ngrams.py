"""The query a data engineer would write first: DuckDB SQL over (pos, tok) rows.

    python bench/duckdb_ngrams.py CORPUS.bin OUT.parquet --size S [--max-len 5] [--min-count 5]

Counts the same n-grams as `fgram build --doc-sep 0 --dtype uint16` (none spans
separator 0) with LEAD windows and GROUP BY, ranks them the same way, and
writes the top S. Bench-only (needs `pip install duckdb`).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--memory", default="16GB")
    args = ap.parse_args()
    import duckdb

    t0 = time.time()
    toks = np.fromfile(args.corpus, dtype=np.uint16)
    table = pa.table({"pos": np.arange(len(toks), dtype=np.int64), "tok": toks.astype(np.int32)})
    con = duckdb.connect()
    con.execute(f"SET memory_limit='{args.memory}'")
    con.register("t", table)
    K = args.max_len
    leads = ", ".join(f"lead(tok, {j}) OVER o AS t{j}" for j in range(1, K))
    parts = []
    for k in range(2, K + 1):
        cols = [f"t{j}" for j in range(k)]
        ok = " AND ".join(f"{c} <> 0" for c in cols)
        parts.append(
            f"SELECT {k} AS length, [{', '.join(cols)}] AS tokens, count(*) AS count "
            f"FROM w WHERE {ok} GROUP BY {', '.join(cols)} HAVING count(*) >= {args.min_count}"
        )
    sql = (
        f"WITH w AS (SELECT tok AS t0, {leads} FROM t WINDOW o AS (ORDER BY pos)), "
        f"g AS ({' UNION ALL '.join(parts)}) "
        f"SELECT row_number() OVER (ORDER BY count DESC, length, tokens) - 1 AS fgram_id, "
        f"length, tokens, count FROM g ORDER BY count DESC, length, tokens LIMIT {args.size}"
    )
    con.execute(f"COPY ({sql}) TO '{args.out}' (FORMAT parquet, COMPRESSION zstd)")
    print(f"duckdb: {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
