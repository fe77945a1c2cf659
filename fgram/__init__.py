"""fgram: exact frequent n-gram (f-gram) selection for SCONE-style models, on Spark."""

__version__ = "0.1.0"
