"""A build with its input and output on an object store against the same build on local
disk, alternated in one run (the machine's speed drifts: compare the ratio).

    python bench/bench_s3.py bench/out/synth-100000000-50000 --size 1000000 --rounds 2
    python bench/bench_s3.py bench/out/synth-100000000-50000 --size 1000000 --rounds 2 \
        --refresh bench/out/synth-5000000-samebook

Starts a SeaweedFS S3 server on loopback ports (tests/support/s3server.py, the `weed` binary of the
test extra), uploads the corpus, then runs `fgram build` in turn: local input -> local
output; s3:// input -> s3:// output (the work files on this machine: local mode's
default); and the same with the work files on the store too (`--work-dir s3://...`: what a
cluster without a shared mount does). Checks the tables are equal; prints wall times,
their ratios, and the bytes written to the object store per input token (read from the
volume servers' appended bytes, so deleted work files count); appends the records to
bench/results.jsonl.

With ``--refresh NEW``: a refresh root on the store holds a version of the corpus; then,
alternated, `fgram refresh` of the corpus plus NEW (the added shards) against a full
`fgram build` of the same list, both on S3 (the refresh is put back to the corpus alone,
untimed, before the next round).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))
from bench_build import machine, run  # noqa: E402
from s3server import SeaweedS3  # noqa: E402


def appended_bytes(server) -> int:
    """Bytes the volume server has appended (its volumes only grow until compacted)."""
    import urllib.request

    url = f"http://127.0.0.1:{server.ports['volume.port']}/status"
    with urllib.request.urlopen(url, timeout=10) as r:
        return sum(v["Size"] for v in json.load(r)["Volumes"])


def record(runs: dict, prefix: str, tokens: int) -> None:
    """Append the runs (kind -> [run]) to bench/results.jsonl."""
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        for kind, rs in runs.items():
            for r in rs:
                fh.write(
                    json.dumps(
                        {
                            "when": time.strftime("%Y-%m-%d %H:%M"),
                            "run": f"{prefix}{kind}",
                            "machine": machine(),
                            "command": r["cmd"],
                            "tokens": tokens,
                            "wall_s": round(r["wall"], 1),
                            "store_bytes_written": r["written"],
                            "peak_rss_gib": round(r["peak"] / 2**30, 2),
                        }
                    )
                    + "\n"
                )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="a folder of uint16 .bin files with separator 0 (fgram synth)")
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engine", default="spark")
    ap.add_argument("--work", default=os.path.join(HERE, "out"))
    ap.add_argument(
        "--refresh",
        metavar="NEW",
        help="a folder of added .bin shards: measure a refresh against a full build",
    )
    args = ap.parse_args()
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    root = tempfile.mkdtemp(prefix="fgram-s3-", dir=args.work)
    server = SeaweedS3(root).start()
    os.environ.update(server.env)
    from fgram.pipeline.io.storage import locate
    from fgram.pipeline.tables.versions import open_table, table_dataset

    try:
        bucket = server.bucket()
        files = sorted(glob.glob(os.path.join(args.corpus, "*.bin")))
        t0 = time.time()
        for f in files:
            locate(f"s3://{bucket}/corpus/{os.path.basename(f)}").upload(f)
        upload_s = time.time() - t0
        opts = [
            "--dtype",
            "uint16",
            "--doc-sep",
            "0",
            "--size",
            str(args.size),
            "--engine",
            args.engine,
            "--overwrite",
        ]
        if args.refresh:
            return bench_refresh(args, server, bucket, fgram, opts[:-1], upload_s)
        kinds = ("local", "s3", "s3-work")
        runs = {k: [] for k in kinds}
        for r in range(args.rounds):
            for where in kinds if r % 2 == 0 else kinds[::-1]:
                if where == "local":
                    out = os.path.join(args.work, "s3cmp-local")
                    cmd = [fgram, "build", out, args.corpus, *opts]
                else:
                    out = f"s3://{bucket}/{where}"
                    cmd = [fgram, "build", out, f"s3://{bucket}/corpus", *opts]
                    if where == "s3-work":
                        cmd += ["--work-dir", f"s3://{bucket}/work"]
                before = appended_bytes(server)
                wall, peak, rc = run(cmd)
                if rc:
                    sys.exit(rc)
                loc, manifest = open_table(out)
                runs[where].append(
                    {
                        "wall": wall,
                        "peak": peak,
                        "manifest": manifest,
                        "written": appended_bytes(server) - before,
                        "cmd": " ".join(cmd[1:]),
                    }
                )
        a = table_dataset(*open_table(os.path.join(args.work, "s3cmp-local"))).to_table()
        for where in kinds[1:]:
            b = table_dataset(*open_table(f"s3://{bucket}/{where}")).to_table()
            assert a.sort_by("fgram_id").equals(b.sort_by("fgram_id")), f"{where}: tables differ"
        tokens = runs["local"][0]["manifest"]["totals"]["tokens"]
        print(
            f"\n{tokens} tokens, S={args.size}, engine {args.engine}; {machine()}; "
            f"corpus upload {upload_s:.1f} s\n"
        )
        print(
            "| round | local | s3 (work here) | ratio | bytes/token | s3 (work on s3) | ratio "
            "| bytes/token |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for i, (lo, s3, sw) in enumerate(zip(*(runs[k] for k in kinds))):
            print(
                f"| {i + 1} | {lo['wall']:.1f} s | {s3['wall']:.1f} s | "
                f"{s3['wall'] / lo['wall']:.2f} | {s3['written'] / tokens:.3f} | "
                f"{sw['wall']:.1f} s | {sw['wall'] / lo['wall']:.2f} | "
                f"{sw['written'] / tokens:.2f} |"
            )
        record(runs, "s3cmp-", tokens)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def bench_refresh(args, server, bucket, fgram: str, opts: list[str], upload_s: float) -> None:
    from fgram.pipeline.io.storage import locate
    from fgram.pipeline.tables.versions import open_table, table_dataset

    for f in sorted(glob.glob(os.path.join(args.refresh, "*.bin"))):
        locate(f"s3://{bucket}/new/{os.path.basename(f)}").upload(f)
    old, new = f"s3://{bucket}/corpus", f"s3://{bucket}/new"
    root, full = f"s3://{bucket}/refresh", f"s3://{bucket}/full"

    def timed(cmd):
        before = appended_bytes(server)
        wall, peak, rc = run(cmd)
        if rc:
            sys.exit(rc)
        return {
            "wall": wall,
            "peak": peak,
            "written": appended_bytes(server) - before,
            "cmd": " ".join(cmd[1:]),
        }

    first = timed([fgram, "refresh", root, old, *opts])
    runs = {"refresh": [], "build": []}
    for r in range(args.rounds):
        for kind in ("refresh", "build") if r % 2 == 0 else ("build", "refresh"):
            if kind == "refresh":
                runs[kind].append(timed([fgram, "refresh", root, old, new, *opts]))
            else:
                runs[kind].append(timed([fgram, "build", full, old, new, *opts, "--overwrite"]))
        a = table_dataset(*open_table(full)).to_table().sort_by("fgram_id")
        b = table_dataset(*open_table(root)).to_table().sort_by("fgram_id")
        assert a.equals(b), "the refreshed table differs from the full build"
        if r + 1 < args.rounds:
            timed([fgram, "refresh", root, old, *opts])  # back to the corpus alone
    tokens = open_table(full)[1]["totals"]["tokens"]
    print(
        f"\n{tokens} tokens (corpus + added), S={args.size}, engine {args.engine}; "
        f"{machine()}; corpus upload {upload_s:.1f} s; first version {first['wall']:.1f} s\n"
    )
    print("| round | full build on S3 | bytes/token | refresh on S3 | bytes/token | ratio |")
    print("|---|---|---|---|---|---|")
    for i, (b, f) in enumerate(zip(runs["build"], runs["refresh"])):
        print(
            f"| {i + 1} | {b['wall']:.1f} s | {b['written'] / tokens:.2f} | {f['wall']:.1f} s "
            f"| {f['written'] / tokens:.2f} | {f['wall'] / b['wall']:.2f} |"
        )
    record(runs, "s3-", tokens)


if __name__ == "__main__":
    main()
