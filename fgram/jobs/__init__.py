"""One module per Spark job; each is runnable by spark-submit and callable from Python."""
