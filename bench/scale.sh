#!/usr/bin/env bash
# Scale curves: time and peak memory vs corpus size and vs S (K=5, Spark local mode).
# Appends records to bench/results.jsonl (tagged "scale"); plot with bench/plot_scale.py.
set -euo pipefail
cd "$(dirname "$0")"
PY=../.venv/bin/python
for n in 50000000 200000000 500000000 1000000000; do
  $PY bench_build.py --generate $n --size 10000000 --tag scale-tokens
done
for s in 1000000 100000000; do
  $PY bench_build.py --generate 500000000 --size $s --tag scale-size
done
