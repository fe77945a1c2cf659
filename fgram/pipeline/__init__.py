"""The library, pure: numpy, numba and pyarrow, never Spark (`fgram.spark` holds that,
and a test checks it). Every function runs on arrays and plain parameters.

Its folders, each one idea, data flowing downward only (`tests/test_layout.py` holds
the order): `kernels` (arrays in, arrays out) < `io` (storage, publishing, locks) <
`formats` (token shards, text, the table's Parquet) < `tables` (readers of outputs:
index, store, tags, coverage, versions) and `config` < `report`. `errors` and
`records` (typed JSON records) serve them all; `models` holds the deterministic f-gram
models for ``fgram embed --model``."""
