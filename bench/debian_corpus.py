"""A real corpus for benchmarks: the text files of Debian source packages, tokenized.

    python bench/debian_corpus.py bench/out/debian [--packages gcc-12 emacs ...]
        [--tokenizer ../shared/corpora/tokenizer.json] [--shards 20]

Downloads the packages' source (``apt-get source --download-only``: needs a
``deb-src`` entry for Debian's main archive, e.g. a file
``/etc/apt/sources.list.d/debsrc.sources`` holding ``Types: deb-src``, ``URIs:
http://deb.debian.org/debian``, ``Suites: bookworm``, ``Components: main``,
``Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg``, then ``apt-get
update``), reads every regular file of their upstream tarballs (tar.gz/xz/bz2,
tarballs inside them too) that is UTF-8 text without NUL bytes and at most 1 MiB,
and writes one document per file, in the tarball's order, as
``text/part-NN.jsonl.zst`` (``{"id": "package/path", "text": ...}``).
A file goes to the shard its path hashes to, so every shard holds a like mix of
the packages. Then ``fgram tokenize --format bin`` makes ``tokens/`` (one flat
uint16 shard per text shard, separator 0: the tokenizer's EOS) and
``corpus.json`` records the packages, files and tokens. Made once; rerun to add
nothing.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import subprocess
import sys
import tarfile
import zlib

PACKAGES = ["gcc-12", "emacs", "python3.11", "postgresql-15", "perl", "golang-1.19"]
MAX_BYTES = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "..", "shared", "corpora", "tokenizer.json")


def download(packages: list[str], folder: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    missing = [p for p in packages if not glob.glob(os.path.join(folder, f"{p}_*.orig.tar.*"))]
    if missing:
        subprocess.run(
            ["apt-get", "source", "--download-only", "-q", *missing], cwd=folder, check=True
        )
    tarballs = []
    for p in packages:
        found = sorted(
            f
            for f in glob.glob(os.path.join(folder, f"{p}_*.orig*.tar.*"))
            if not f.endswith(".asc")
        )
        if not found:
            sys.exit(f"{p}: no upstream tarball in {folder}")
        tarballs += found
    return tarballs


def documents(tarball: str, prefix: str, depth: int = 0):
    """(id, text) of the tarball's text files; a tarball inside is read too."""
    with tarfile.open(fileobj=tarball if depth else None, name=None if depth else tarball) as tar:
        for member in tar:
            if not member.isfile():
                continue
            name = member.name
            if depth < 2 and any(
                name.endswith(e) for e in (".tar.gz", ".tar.xz", ".tar.bz2", ".tgz")
            ):
                inner = tar.extractfile(member)
                if inner is not None:
                    yield from documents(io.BytesIO(inner.read()), f"{prefix}/{name}", depth + 1)
                continue
            if member.size == 0 or member.size > MAX_BYTES:
                continue
            f = tar.extractfile(member)
            if f is None:
                continue
            raw = f.read()
            if b"\0" in raw:
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            yield f"{prefix}/{name}", text


def write_text(tarballs: list[str], folder: str, shards: int) -> dict:
    import zstandard

    os.makedirs(folder, exist_ok=True)
    writers = []
    for i in range(shards):
        f = open(os.path.join(folder, f"part-{i:02d}.jsonl.zst.tmp"), "wb")
        writers.append((f, zstandard.ZstdCompressor(level=3).stream_writer(f)))
    files = size = 0
    for tarball in tarballs:
        package = os.path.basename(tarball).split("_")[0]
        for ident, text in documents(tarball, package):
            line = (json.dumps({"id": ident, "text": text}) + "\n").encode()
            writers[zlib.crc32(ident.encode()) % shards][1].write(line)
            files += 1
            size += len(text.encode())
        print(f"  {package}: {files} files, {size / 1e6:.0f} MB so far", flush=True)
    for i, (_, w) in enumerate(writers):
        w.close()
        path = os.path.join(folder, f"part-{i:02d}.jsonl.zst")
        os.replace(path + ".tmp", path)
    return {"files": files, "text_bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--packages", nargs="+", default=PACKAGES)
    ap.add_argument("--tokenizer", default=TOKENIZER)
    ap.add_argument("--shards", type=int, default=20)
    args = ap.parse_args()
    record = os.path.join(args.out, "corpus.json")
    if os.path.exists(record):
        print(open(record).read())
        return
    tarballs = download(args.packages, os.path.join(args.out, "sources"))
    text = os.path.join(args.out, "text")
    stats = write_text(tarballs, text, args.shards)
    tokens = os.path.join(args.out, "tokens")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fgram",
            "tokenize",
            text,
            "-o",
            tokens,
            "--tokenizer",
            args.tokenizer,
            "--format",
            "bin",
            "--shard-tokens",
            str(1 << 34),
            "--overwrite",
        ],
        check=True,
    )
    with open(os.path.join(tokens, "manifest.json")) as f:
        m = json.load(f)
    info = {
        "packages": args.packages,
        "tarballs": [os.path.basename(t) for t in tarballs],
        **stats,
        "documents": m["documents"],
        "tokens": m["tokens"],
        "shards": args.shards,
        "tokenizer": m["tokenizer"]["name"],
    }
    with open(record, "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
