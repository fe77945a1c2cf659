"""The public API at the top of the package: `import fgram` and call the jobs."""

import subprocess
import sys

import numpy as np
from helpers import result, write_bin
from oracle import select, split_flat

import fgram


def test_import_fgram_stays_light():
    """Spark's worker daemon imports fgram before it forks: nothing heavy may load."""
    code = (
        "import sys, fgram; heavy = {'numpy', 'pyarrow', 'pyspark', 'numba'} & "
        "set(m.split('.')[0] for m in sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert {"build", "FgramIndex", "training_sequences"} <= set(dir(fgram))
    assert all(getattr(fgram, name) is not None for name in fgram.__all__)  # each resolves


def test_build_index_annotate_and_read_back_through_the_api(tmp_path):
    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2], [5, 1, 2, 3]] * 3
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    opts = dict(doc_sep=0, engine="local")
    m = fgram.build(tmp_path / "t", [tmp_path / "a.bin"], min_count=2, max_len=4, **opts)
    flat = np.fromfile(tmp_path / "a.bin", dtype=np.uint16).tolist()
    assert result(tmp_path / "t") == select(split_flat(flat, 0), 4, 2, None)
    assert m["fgrams"] == len(result(tmp_path / "t"))
    assert fgram.index(tmp_path / "t")["fgrams"] == m["fgrams"]
    ids, lengths = fgram.FgramIndex.open(str(tmp_path / "t")).match([1, 2, 3])
    assert list(lengths) == [1, 2, 3] and ids[2] >= 0
    cov = fgram.coverage(tmp_path / "t", str(tmp_path / "a.bin"), **opts)
    tags = fgram.annotate(tmp_path / "t", [tmp_path / "a.bin"], tmp_path / "tags", **opts)
    assert tags["coverage"] == cov and cov["positions"] == sum(map(len, docs))  # no separator
    windows = list(fgram.training_sequences(str(tmp_path / "tags"), seq_len=8))
    assert windows and all(len(w[0]) == 8 for w in windows)
    loc, manifest = fgram.open_table(str(tmp_path / "t"))
    assert fgram.table_dataset(loc, manifest).count_rows() == m["fgrams"]


_WITHOUT_EXTRAS = """
import sys
# the optional extras' modules (s3, lineage, dagster, text, YAML configs) as absent
for name in ("attr", "attrs", "openlineage", "dagster_pipes", "botocore", "yaml", "orjson"):
    sys.modules[name] = None
sys.argv = ["fgram", *sys.argv[1:]]
from fgram.cli import main
main()
"""


def test_the_commands_run_without_the_optional_extras(tmp_path):
    """A plain install (no lineage, dagster, s3 extras): every job command's wrapper, its
    --json result and a refresh run without importing them."""
    write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2]] * 3, sep=0)
    flat = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local", "--min-count", "2"]
    for cmd in (
        ["build", str(tmp_path / "t"), str(tmp_path / "a.bin"), *flat, "--json"],
        ["refresh", str(tmp_path / "r"), str(tmp_path / "a.bin"), *flat],
        ["index", str(tmp_path / "t")],
    ):
        res = subprocess.run(
            [sys.executable, "-c", _WITHOUT_EXTRAS, *cmd], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
    assert result(tmp_path / "t") == result(tmp_path / "r" / "current")
