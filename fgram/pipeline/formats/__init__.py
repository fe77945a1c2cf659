"""What fgram reads and writes as files: token shards (one object per format behind
`base.ShardFormat`, registered in `registry`), input discovery and planning (`inputs`),
reading a unit as a token stream (`reading`), the checks of a flat file's sample
(`guards`), text and its tokenizer (`names`, `text`, `tokenizer`, `token_shards`), the
table's Parquet schema and writer (`table`), and generated corpora (`synth`)."""
