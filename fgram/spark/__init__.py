"""Spark plumbing, kept out of `fgram.pipeline`: the session and context builder
(`session`: local mode on a fresh machine, any master, quiet logs), the local-mode
worker daemon (`daemon`, run as ``python -m`` by Spark: this package imports nothing)
and the JVM's logging (`log4j2.properties`)."""
