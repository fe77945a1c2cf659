"""The token types of flat files, by the name ``--dtype`` takes (numpy's spelling of
each; no import of numpy here, so the command line's options can name them cheaply)."""

TOKEN_DTYPES = {"uint16": "<u2", "uint32": "<u4", "int32": "<i4"}
