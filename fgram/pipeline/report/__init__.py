"""`fgram report`: the numbers of a table, its passes and its coverage (`numbers`), their
plots (`plots`) and the self-contained HTML page (`page`)."""
