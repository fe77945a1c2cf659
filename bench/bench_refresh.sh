#!/usr/bin/env bash
# Issue 6: the cost of `fgram refresh` after 5% new shards land, next to a full build of the
# same input list, in one run (Spark, local mode, K=5, S=10M). Appends nothing; prints walls.
set -euo pipefail
cd "$(dirname "$0")"
F=../.venv/bin/fgram
OLD=out/synth-500000000-50000/part-00000.bin
NEW=out/synth-25000000-new
[ -d $NEW ] || $F synth -o $NEW --tokens 25000000 --vocab 50000 --seed 7 --format bin
OPTS="--dtype uint16 --doc-sep 0 --size 10000000"
rm -rf out/refresh out/refresh-full
t0=$(date +%s.%N); $F refresh out/refresh $OLD $OPTS; t1=$(date +%s.%N)
$F refresh out/refresh $OLD $NEW/*.bin $OPTS; t2=$(date +%s.%N)
$F build $OLD $NEW/*.bin -o out/refresh-full $OPTS; t3=$(date +%s.%N)
python3 -c "
a,b,c,d=$t0,$t1,$t2,$t3
print(f'first version {b-a:.1f} s; refresh with 5% new shards {c-b:.1f} s; full build of the same list {d-c:.1f} s; refresh / full = {(c-b)/(d-c):.2f}')"
$F diff out/refresh/versions/$(ls out/refresh/versions | sort | head -1) out/refresh --show 3
