"""Pure kernels, formats and schemas. Nothing here imports Spark except `spark.py`."""
