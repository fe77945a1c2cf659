"""fgram build: exact f-gram selection on Spark.

Each pass k = 2..K is three small Spark jobs over files in a work folder:

1. count (one task per unit): read the unit's tokens, turn the ids of the
   previous pass into candidate k-gram keys (prefix and suffix both frequent),
   sort-count them, write the unit's distinct keys + counts and, for the next
   pass, the positions of each key (grouped by key, in key order).
2. merge (one task per key range): merge the units' sorted runs for its range
   of the (uniformly mixed) key space, write the keys counted at least the
   pass's floor (its threshold when it began); return a histogram of counts.
3. keep (one task per key range): keep the keys at or above the threshold
   (min-count, raised to the S-th largest count seen so far when --size is
   given). Their dense ids are ranks in key order. If that frequent set fits
   --broadcast-budget, the next pass's tasks read it whole; otherwise this task
   also answers every unit's lookups for its key range (a distributed join),
   so no task ever holds more than one range.

Then the select stage: the cutoff and the first id of every (count, length)
group come from the count histograms alone; decode tasks give the selected
f-grams their tokens (prefix tokens + last token, length by length) and
bucket them by rank slot; rank tasks sort whole groups (or a lead-key range of
a group too big for one task) by token ids and write one Parquet file of
consecutive fgram_ids each. Past the broadcast budget the decode goes by key
range: no task holds more than its ranges' rows.

Spark carries task numbers and small per-task summaries; tokens and keys move
as numpy arrays in files.
The driver never holds per-n-gram data. The output is published atomically.

The modules, in the order a run uses them: `state` (staging, fingerprint,
resume state), `passes` (count, merge, keep), `select` (decode, rank, write),
and `driver` (the checks, the pass loop, the manifest, publishing).
"""

from fgram.jobs.table.driver import run_build

__all__ = ["run_build"]
