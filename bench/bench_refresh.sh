#!/usr/bin/env bash
# The cost of an incremental `fgram refresh` after 5% new shards land, next to a full
# `fgram build` of the same input list, in one run (Spark local mode, K=5, S=10M, 500M tokens).
# Two kinds of new shard: text from another phrase book (new topics: few old n-grams become
# frequent) and new text from the corpus's own phrase book (same distribution: many n-grams
# cross the cutoff, so old shards are scanned for the new ids). Also a removal. Prints walls.
set -euo pipefail
cd "$(dirname "$0")"
F=../.venv/bin/fgram
OLD=out/synth-500000000-50000/part-00000.bin
[ -f $OLD ] || $F synth -o out/synth-500000000-50000 --tokens 500000000 --vocab 50000 --format bin
NEWA=out/synth-25000000-new
NEWB=out/synth-25000000-samebook
[ -d $NEWA ] || $F synth -o $NEWA --tokens 25000000 --vocab 50000 --seed 7 --format bin
[ -d $NEWB ] || $F synth -o $NEWB --tokens 25000000 --vocab 50000 --seed 7 --book-seed 0 --format bin
OPTS="--dtype uint16 --doc-sep 0 --size 10000000 --engine ${ENGINE:-spark}"
rm -rf out/refresh out/refresh-full out/refresh-full-a out/refresh-full-b
now() { date +%s.%N; }
t0=$(now); $F refresh out/refresh $OLD $OPTS --keep 4; t1=$(now)
$F refresh out/refresh $OLD $NEWA/*.bin $OPTS --keep 4; t2=$(now)
$F build out/refresh-full-a $OLD $NEWA/*.bin $OPTS; t3=$(now)
VA=$(readlink out/refresh/current)
$F refresh out/refresh $OLD $OPTS --keep 4; t4=$(now)
$F refresh out/refresh $OLD $NEWB/*.bin $OPTS --keep 4; t5=$(now)
$F build out/refresh-full-b $OLD $NEWB/*.bin $OPTS; t6=$(now)
$F diff out/refresh-full-a out/refresh/$VA --top 0
$F diff out/refresh-full-b out/refresh --top 0
du -sh out/refresh/store
python3 -c "
t=[$t0,$t1,$t2,$t3,$t4,$t5,$t6]
d=[b-a for a,b in zip(t,t[1:])]
print(f'first version (all shards new) {d[0]:.1f} s')
print(f'+5% shards, another phrase book: refresh {d[1]:.1f} s, full build {d[2]:.1f} s, ratio {d[1]/d[2]:.2f}')
print(f'the 5% removed again: refresh {d[3]:.1f} s')
print(f'+5% shards, same phrase book: refresh {d[4]:.1f} s, full build {d[5]:.1f} s, ratio {d[4]/d[5]:.2f}')"
