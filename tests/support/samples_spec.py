"""Writers of the MDS and LitData specs, for tests: the bytes MosaicML Streaming's
``MDSWriter`` and LitData's ``optimize`` (with ``TokensLoader``) write."""

import json
import os

import numpy as np
import zstandard

ND_CODES = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "int32": 33, "int64": 65}


def ndarray(tokens, encoding: str) -> bytes:
    """One value of an ``ndarray[:dtype[:shape]]`` column."""
    _, _, rest = encoding.partition(":")
    dtype, _, shape = rest.partition(":")
    arr = np.asarray(tokens, dtype or "int32")
    out = b""
    if not dtype:
        out += bytes([ND_CODES[arr.dtype.name]])
    if not shape:
        n = len(arr)
        width = 0 if n < 256 else 1 if n < 65536 else 2
        out += bytes([(1 << 2) | width]) + np.asarray([n], ["<u1", "<u2", "<u4"][width]).tobytes()
    return out + arr.tobytes()


def _value(value, encoding: str) -> bytes:
    if encoding.startswith("ndarray"):
        return ndarray(value, encoding)
    if encoding == "bytes":
        return np.asarray(value, "<i8").tobytes()  # llm-foundry's older token bytes
    if encoding == "str":
        return value.encode()
    if encoding == "int":
        return np.int64(value).tobytes()
    raise ValueError(encoding)


def fixed_size(encoding: str) -> int | None:
    """A column's size when its encoding fixes it (MDS's ``column_sizes``)."""
    kind, _, rest = encoding.partition(":")
    dtype, _, shape = rest.partition(":")
    if kind == "ndarray" and dtype and shape:
        return int(np.prod([int(s) for s in shape.split(",")])) * np.dtype(dtype).itemsize
    return 8 if kind == "int" else None


def write_mds(folder, samples, columns, per_file, compression=None) -> list[str]:
    """An MDS dataset: ``samples`` (dicts of column values) into files of ``per_file``
    samples each (a list of counts), ``columns`` name -> encoding."""
    os.makedirs(folder, exist_ok=True)
    names = sorted(columns)
    encodings = [columns[n] for n in names]
    sizes = [fixed_size(e) for e in encodings]
    config = {
        "column_encodings": encodings,
        "column_names": names,
        "column_sizes": sizes,
        "compression": compression,
        "format": "mds",
        "hashes": [],
        "size_limit": 1 << 26,
        "version": 2,
    }
    blob = json.dumps(config, sort_keys=True).encode()
    shards, at = [], 0
    for i, count in enumerate(per_file):
        chunk = samples[at : at + count]
        at += count
        encoded = []
        for s in chunk:
            values = [_value(s[n], e) for n, e in zip(names, encodings, strict=True)]
            head = [len(v) for v, size in zip(values, sizes, strict=True) if size is None]
            encoded.append(np.asarray(head, "<u4").tobytes() + b"".join(values))
        offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
        offsets += 4 + 4 * (len(encoded) + 1) + len(blob)
        raw = np.uint32(len(encoded)).tobytes() + offsets.astype("<u4").tobytes() + blob
        raw += b"".join(encoded)
        name = f"shard.{i:05d}.mds"
        entry = dict(config, raw_data={"basename": name, "bytes": len(raw), "hashes": {}})
        entry["samples"] = len(encoded)
        if compression:
            data = zstandard.ZstdCompressor().compress(raw)
            entry["zip_data"] = {"basename": name + ".zstd", "bytes": len(data), "hashes": {}}
            with open(os.path.join(folder, name + ".zstd"), "wb") as f:
                f.write(data)
        else:
            entry["zip_data"] = None
            with open(os.path.join(folder, name), "wb") as f:
                f.write(raw)
        shards.append(entry)
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f, sort_keys=True)
    return [s["raw_data"]["basename"] for s in shards]


def windows(stream, cuts):
    """A token stream cut into samples at the sorted positions ``cuts``."""
    edges = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(edges, edges[1:], strict=False)]


LIT_CODES = {"int32": ("no_header_tensor", 15), "uint16": ("no_header_numpy", 5)}
LIT_CODES |= {"int64": ("no_header_tensor", 17)}


def write_litdata(folder, items, per_chunk, dtype="int32", compression=None) -> None:
    """A LitData dataset of token items (``TokensLoader``'s layout)."""
    os.makedirs(folder, exist_ok=True)
    kind, code = LIT_CODES[dtype]
    chunks, at = [], 0
    for i, count in enumerate(per_chunk):
        part = [np.asarray(t, dtype) for t in items[at : at + count]]
        at += count
        offsets = np.concatenate([[0], np.cumsum([a.nbytes for a in part])]).astype(np.int64)
        offsets += 4 + 4 * (len(part) + 1)
        data = np.uint32(len(part)).tobytes() + offsets.astype("<u4").tobytes()
        data += b"".join(a.tobytes() for a in part)
        name = f"chunk-0-{i}.zstd.bin" if compression else f"chunk-0-{i}.bin"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(zstandard.ZstdCompressor().compress(data) if compression else data)
        dim = sum(len(a) for a in part)
        chunks.append(
            {"chunk_bytes": len(data), "chunk_size": len(part), "dim": dim, "filename": name}
        )
    config = {
        "chunk_bytes": 1 << 26,
        "chunk_size": None,
        "compression": compression,
        "data_format": [f"{kind}:{code}"],
        "data_spec": None,
        "encryption": None,
        "item_loader": "TokensLoader",
    }
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"chunks": chunks, "config": config, "updated_at": "0"}, f)
