"""The library: vectorised kernels over token arrays, input formats, table schemas,
manifests and the I/O layer. Nothing here imports Spark (`fgram.spark` holds that,
and a test checks it): every function runs on numpy arrays and plain parameters."""
