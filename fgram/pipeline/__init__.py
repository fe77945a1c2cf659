"""Pure kernels, formats and schemas. Nothing here imports Spark except `spark.py` (and
`spark_daemon.py`, the entry point of local mode's Python worker daemon)."""
