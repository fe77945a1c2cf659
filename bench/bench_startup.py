"""What a command costs before it does anything: `fgram --help`, `fgram show` of a small
table, `fgram lookup --tokens` and `fgram build` of 1M tokens, each run --runs times as a
fresh process (the median and the range), beside `python -c pass`.

    python bench/bench_startup.py [--runs 10] [--out bench/out/startup] [--against CMD]

``--against``: another `fgram` executable (e.g. a script running an older checkout),
timed in turn with this one, run by run, and the ratio given. Run it from outside any
checkout: `python -m fgram` imports the package of the current folder first.

Targets (a quiet machine): --help <= 0.3 s, show <= 0.5 s, lookup <= 0.5 s, build of 1M
tokens <= 1.2 s. The kernels are compiled (cached) by a first build before timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

BIN = os.path.join(os.path.dirname(sys.executable), "fgram")


def once(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default="bench/out/startup")
    ap.add_argument("--against", default=None, help="another fgram executable")
    args = ap.parse_args()
    corpus, table = os.path.join(args.out, "corpus"), os.path.join(args.out, "table")
    if not os.path.exists(corpus):
        subprocess.run([BIN, "synth", "-o", corpus, "--tokens", "1000000", "--vocab", "5000",
                        "--format", "bin"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    build = [BIN, "build", table, corpus, "--doc-sep", "0", "--overwrite"]
    subprocess.run(build, check=True, capture_output=True)  # kernels compiled and cached
    subprocess.run([BIN, "index", table, "--overwrite"], check=True, capture_output=True)
    ids = subprocess.run(
        [sys.executable, "-c", f"import fgram; r = fgram.show({table!r}, top=1)['top_fgrams'];"
         "print(','.join(map(str, r[0]['tokens'])))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "fgram --help": [BIN, "--help"],
        "fgram show (small table)": [BIN, "show", table],
        "fgram lookup --tokens": [BIN, "lookup", table, "--tokens", ids],
        "fgram build (1M tokens)": build,
    }
    for name, cmd in cases.items():
        other = [args.against, *cmd[1:]] if args.against and cmd[0] == BIN else None
        t, u = [], []
        for _ in range(args.runs):  # in turn, run by run
            t.append(once(cmd))
            if other:
                u.append(once(other))
        line = f"{name:28s} median {statistics.median(t):.3f} s  ({min(t):.3f}-{max(t):.3f})"
        if u:
            line += (f"  against {statistics.median(u):.3f} s ({min(u):.3f}-{max(u):.3f}): "
                     f"{statistics.median(t) / statistics.median(u):.2f}")  # fmt: skip
        print(line)


if __name__ == "__main__":
    main()
