"""The select stage past --broadcast-budget: decoding and ranking as Spark SQL joins
and a global sort (one row per f-gram in Spark), for a selection whose tokens no
task may hold whole. Writes to a shared folder only (Spark's Hadoop filesystems)."""

from __future__ import annotations

import os

import numpy as np

from fgram.jobs.build.passes import Plan, candidates
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.keys import KeyCode
from fgram.pipeline.table import arrow_array
from fgram.pipeline.workdir import WorkDir


def final_rows(plan: Plan, k: int, p: int, code: KeyCode, offset: int, cutoff: int, cut_len: int):
    """Arrow rows of the frequent k-grams of range p that may be selected."""
    import pyarrow as pa

    idx, counts, prefix, last = candidates(WorkDir(plan.work), k, p, code, cutoff, cut_len)
    return pa.RecordBatch.from_arrays(
        [
            arrow_array(np.full(len(idx), k, np.int8)),
            arrow_array(idx + offset),
            arrow_array(prefix),
            arrow_array(last, np.int32),
            arrow_array(counts),
        ],
        names=["length", "sid", "prefix", "last", "count"],
    )


def _partition(task_context) -> int:
    """The partition the running Spark task works on."""
    ctx = task_context.get()
    assert ctx is not None  # inside a task
    return int(ctx.partitionId())


def write_table_sql(spark, plan: Plan, offsets_by_len, cutoff, cut_len, selected, staging) -> None:
    from pyspark.sql import functions as F

    codes = plan.codes
    assert codes is not None  # set once every pass has run

    if not isinstance(staging, str):
        raise ConfigError(
            f"{staging.uri}: the selected f-grams' tokens exceed "
            f"--broadcast-budget, and the Spark SQL select that takes over then "
            f"writes to a shared folder only; raise --broadcast-budget"
        )
    budget = plan.cfg.broadcast_budget
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str(budget) if budget > 0 else "-1")
    row_schema = "length byte, sid long, prefix long, last int, count long"
    decoded, previous = [], None
    for k in sorted(offsets_by_len):
        offsets = offsets_by_len[k]
        tasks = [(p, offsets[p]) for p in range(len(offsets) - 1)]

        def rows(batches, k=k, tasks=tasks):
            for batch in batches:
                for t in batch.column(0).to_pylist():
                    p, off = tasks[t]
                    yield final_rows(plan, k, p, codes[k], off, cutoff, cut_len)

        df = spark.range(0, len(tasks), 1, numPartitions=max(1, len(tasks))).mapInArrow(
            rows, row_schema
        )
        if previous is None:
            dk = df.select(
                "count",
                "length",
                "sid",
                F.array(F.col("prefix").cast("int"), F.col("last")).alias("tokens"),
            )
        else:
            parent = previous.select(F.col("sid").alias("prefix"), F.col("tokens").alias("ptok"))
            dk = df.join(parent, "prefix").select(
                "count", "length", "sid", F.concat("ptok", F.array("last")).alias("tokens")
            )
        dk = dk.persist()
        decoded.append(dk)
        previous = dk
    table = decoded[0]
    for dk in decoded[1:]:
        table = table.unionByName(dk)
    ordered = (
        table.select("count", "length", "tokens")
        .orderBy(F.col("count").desc(), F.col("length").asc(), F.col("tokens").asc())
        .persist()
    )

    def sizes(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        n = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pydict({"pid": [_partition(TaskContext)], "n": [n]})

    counts = {r["pid"]: r["n"] for r in ordered.mapInArrow(sizes, "pid long, n long").collect()}
    starts, acc = {}, 0
    for pid in sorted(counts):
        starts[pid] = acc
        acc += counts[pid]

    def number(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        nxt = starts.get(_partition(TaskContext), 0)
        for b in batches:
            ids = arrow_array(np.arange(nxt, nxt + b.num_rows, dtype=np.int64))
            nxt += b.num_rows
            yield pa.RecordBatch.from_arrays(
                [
                    ids,
                    b.column(b.schema.get_field_index("length")),
                    b.column(b.schema.get_field_index("tokens")),
                    b.column(b.schema.get_field_index("count")),
                ],
                names=["fgram_id", "length", "tokens", "count"],
            )

    numbered = ordered.mapInArrow(
        number, "fgram_id long, length byte, tokens array<int>, count long"
    )
    table_dir = os.path.join(staging, "fgrams")
    numbered.filter(F.col("fgram_id") < selected).write.mode("overwrite").option(
        "compression", "zstd"
    ).parquet(table_dir)
    for name in os.listdir(table_dir):  # Hadoop's checksum files and inner marker: not ours
        if name.endswith(".crc") or name == "_SUCCESS":
            os.remove(os.path.join(table_dir, name))
    for df in decoded:
        df.unpersist()
    ordered.unpersist()
