"""The version of fgram (written into every manifest)."""

__version__ = "0.1.0"
