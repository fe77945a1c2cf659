"""fgram refresh: publish a new version of a table for a new input list, incrementally.

    fgram refresh TABLE INPUTS... [build options] [--keep N]

The input list is the whole new corpus (old shards, plus new ones, minus
removed or changed ones). The new version, ``TABLE/versions/<id>/``, holds the
table that `fgram build` would make of that list, exactly; ``TABLE/current`` is
switched to it atomically and versions beyond the newest ``--keep`` are
deleted (never the current one). Unchanged inputs and options: nothing is done.

Cost grows with the change, not the corpus. ``TABLE/store/`` keeps, per length
k, the id table T_k (every k-gram ever frequent, with a stable id), every
shard's partial counts of the k-grams whose prefix and suffix have ids in
T_{k-1} (keyed by the shard's fingerprint: path, size, mtime, checksum), and
their aggregate (a base plus a delta of everything changed since). A refresh,
length by length:

1. counts only the new shards (the same compiled kernels as `fgram build`);
2. subtracts the partials of removed shards, adds the new ones to the delta,
   and reads totals as base + delta (the base is only read, not rewritten,
   until the delta outgrows a quarter of it);
3. finds the frequent set with the build's thresholds, and appends the
   k-grams that became frequent to T_k; a refresh that only adds shards
   starts its thresholds at the current version's cutoff count (every count
   can only grow, so the S f-grams it has keep at least that count): T_k gets
   only k-grams that can still be f-grams, and the margin the first version's
   lower thresholds left in the id tables spares most scans of old shards;
4. on old shards counts only what their partials lack: (k+1)-grams whose
   prefix or suffix got its id in step 3 (one compiled pass over the tokens
   that tests a hash set, then exact checks at the few hits). For 3-grams the
   pass visits only the positions of the unit's bigrams that had no id when
   it was counted (a few percent of them, kept in the store with its partials):
   a bigram that gets an id later can occur nowhere else.

Removing a shard subtracts its stored partials; a shard changed in place is
one removed and one new. Other options than the current version's (length,
min count, size, reading), or another key code (`store_code`: a shard of
wider tokens among 16-bit ones), start the store afresh. Each version's
``store.json`` names the objects it uses; objects no version names are
deleted with the pruned versions.

The modules: `store` (objects, key code, garbage collection), `tasks` (count, scan,
merge, id tables, rank) and `driver` (the run).
"""

from fgram.jobs.refresh.driver import run_refresh

__all__ = ["run_refresh"]
